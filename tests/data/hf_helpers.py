"""A loopback Hugging Face Hub for ``clawrig pull`` tests (the ``hub`` fixture is in
conftest.py): a FastAPI server answering the HTTP API that ``huggingface_hub``'s
``snapshot_download`` uses, for datasets held in memory:

- ``GET /api/datasets/{owner}/{name}/revision/{rev}`` -> ``{"id", "sha", "private", ...}``;
- ``GET /api/datasets/{owner}/{name}/tree/{rev}[/{path}]?recursive=`` -> ``[{"type": "file",
  "oid", "size", "path", "lfs"?}, {"type": "directory", ...}]``;
- ``HEAD``/``GET /datasets/{owner}/{name}/resolve/{rev}/{path}`` -> the file, with ``ETag``
  (the git blob id), ``X-Repo-Commit`` and ``Content-Length``; a large file is served as on
  the Hub for LFS: a redirect to another host (``localhost``, the "CDN") carrying
  ``X-Linked-Etag`` (its SHA-256) and ``X-Linked-Size``; ``Range`` requests are honoured;
- errors as the Hub sends them: 401/404 with ``X-Error-Code: RepoNotFound`` (a missing
  dataset, or a private one without the right ``Authorization: Bearer`` token),
  404 ``RevisionNotFound``, 404 ``EntryNotFound``.

Every request is logged (method, path) so tests can count downloads.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from clawrig.testing.paths import REPO

DEMO = REPO / "suites" / "demo"
SAMPLES = ("000001", "000002")
COMMIT = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"


def demo_files() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(DEMO.rglob("*")):
        rel = path.relative_to(DEMO)
        if path.is_file() and any(s in str(rel) for s in SAMPLES):
            files[f"wildclaw/{rel.as_posix()}"] = path.read_bytes()
    return files


LFS_THRESHOLD = 1000
"""Files at least this many bytes are served the LFS way."""


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob (what the Hub sends as a small file's ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Dataset:
    files: dict[str, bytes]
    commit: str
    private_token: str | None = None
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class Hub:
    datasets: dict[str, Dataset] = field(default_factory=dict)
    log: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""

    def downloads(self, path_part: str = "") -> list[str]:
        """Paths of file GETs (resolve and CDN) so far."""
        return [
            p
            for m, p in self.log
            if m == "GET" and ("/resolve/" in p or "/cdn/" in p) and path_part in p
        ]


def _error(status: int, code: str, message: str) -> Response:
    return JSONResponse(
        {"error": message}, status, headers={"X-Error-Code": code, "X-Error-Message": message}
    )


def build_hub_app(hub: Hub) -> FastAPI:
    app = FastAPI()

    @app.middleware("http")
    async def log(request: Request, call_next):  # type: ignore[no-untyped-def]
        hub.log.append((request.method, request.url.path))
        return await call_next(request)

    def find(repo: str, rev: str, request: Request) -> Dataset | Response:
        ds = hub.datasets.get(repo)
        auth = request.headers.get("authorization")
        if ds is None or (ds.private_token and auth != f"Bearer {ds.private_token}"):
            status = 401 if auth is None else 404
            return _error(status, "RepoNotFound", "Repository not found")
        if rev not in (ds.commit, "main", *ds.tags):
            return _error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        return ds

    @app.get("/api/datasets/{owner}/{name}/revision/{rev}")
    async def info(owner: str, name: str, rev: str, request: Request) -> Response:
        ds = find(f"{owner}/{name}", rev, request)
        if isinstance(ds, Response):
            return ds
        siblings = [{"rfilename": p} for p in sorted(ds.files)]
        private = bool(ds.private_token)
        body = {"_id": "x", "id": f"{owner}/{name}", "sha": ds.commit, "private": private}
        return JSONResponse({**body, "gated": False, "disabled": False, "siblings": siblings})

    @app.get("/api/datasets/{owner}/{name}/tree/{rev}")
    @app.get("/api/datasets/{owner}/{name}/tree/{rev}/{path:path}")
    async def tree(owner: str, name: str, rev: str, request: Request, path: str = "") -> Response:
        ds = find(f"{owner}/{name}", rev, request)
        if isinstance(ds, Response):
            return ds
        recursive = request.query_params.get("recursive", "false").lower() == "true"
        prefix = f"{path.strip('/')}/" if path else ""
        entries, dirs = [], set()
        for p, data in sorted(ds.files.items()):
            if not p.startswith(prefix):
                continue
            rest = p[len(prefix) :]
            parts = rest.split("/")
            for i in range(1, len(parts)):
                d = prefix + "/".join(parts[:i])
                if (recursive or i == 1) and d not in dirs:
                    dirs.add(d)
                    entries.append(
                        {"type": "directory", "oid": git_blob_id(d.encode()), "size": 0, "path": d}
                    )
            if recursive or len(parts) == 1:
                entry = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": p}
                if len(data) >= LFS_THRESHOLD:
                    entry["lfs"] = {
                        "oid": hashlib.sha256(data).hexdigest(),
                        "size": len(data),
                        "pointerSize": 132,
                    }
                entries.append(entry)
        return JSONResponse(entries)

    def ranged(data: bytes, request: Request, headers: dict[str, str]) -> Response:
        rng = request.headers.get("range")
        if rng and rng.startswith("bytes="):
            start_s, _, end_s = rng[len("bytes=") :].partition("-")
            start = int(start_s)
            end = int(end_s) if end_s else len(data) - 1
            part = data[start : end + 1]
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}"}
            return Response(part, 206, headers=headers, media_type="application/octet-stream")
        return Response(data, 200, headers=headers, media_type="application/octet-stream")

    @app.api_route("/datasets/{owner}/{name}/resolve/{rev}/{path:path}", methods=["GET", "HEAD"])
    async def resolve(owner: str, name: str, rev: str, path: str, request: Request) -> Response:
        ds = find(f"{owner}/{name}", rev, request)
        if isinstance(ds, Response):
            return ds
        data = ds.files.get(path)
        if data is None:
            return _error(404, "EntryNotFound", f"{path} does not exist on {rev}")
        common = {"X-Repo-Commit": ds.commit, "Accept-Ranges": "bytes"}
        if len(data) >= LFS_THRESHOLD:
            sha = hashlib.sha256(data).hexdigest()
            cdn = hub.url.replace("127.0.0.1", "localhost") + f"/cdn/{sha}"
            headers = {
                **common,
                "Location": cdn,
                "X-Linked-Etag": f'"{sha}"',
                "X-Linked-Size": str(len(data)),
                "ETag": f'"{git_blob_id(data)}"',
            }
            return Response(status_code=302, headers=headers)
        headers = {**common, "ETag": f'"{git_blob_id(data)}"', "Content-Length": str(len(data))}
        if request.method == "HEAD":
            return Response(status_code=200, headers=headers)
        return ranged(data, request, headers)

    @app.api_route("/cdn/{sha}", methods=["GET", "HEAD"])
    async def cdn(sha: str, request: Request) -> Response:
        for ds in hub.datasets.values():
            for data in ds.files.values():
                if hashlib.sha256(data).hexdigest() == sha:
                    headers = {"ETag": f'"{sha}"', "Content-Length": str(len(data))}
                    if request.method == "HEAD":
                        return Response(status_code=200, headers=headers)
                    return ranged(data, request, headers)
        return Response(status_code=404)

    return app
