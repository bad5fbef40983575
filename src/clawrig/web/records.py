"""Recorded web traffic: every search and fetch of a ``--web record`` job, replayable.

A trial's ``web_calls.jsonl`` (:data:`WEB_RECORD_FILE`, in its trial folder) holds one JSON
line per exchange::

    {"kind": "search" | "fetch", "key": <sha256 hex of the normalised request>,
     "request": {...normalised...}, "response": {...}, "task_id": str, "run_index": int}

- search request: ``{"query", "count", "country", "safesearch"}`` (see
  :func:`clawrig.web.providers.normalise_search`); response ``{"provider", "status",
  "body_sha256", "error"}`` where the body is the provider's raw JSON reply;
- fetch request: ``{"url"}`` (:func:`normalise_url`); response ``{"status", "final_url",
  "content_type", "charset", "truncated", "body_sha256", "error"}``, the body being the bytes
  read (at most the policy's ``max_bytes``).

``error`` (a string) records a failure (connection refused, timeout, host not allowed) so a
replay gives the same tool result. Bodies are stored once per content under the job folder's
``web_blobs/<sha256>`` (:class:`BlobStore`). :class:`WebRecords` loads a finished job's records
for ``--web replay DIR``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from clawrig.errors import UserError
from clawrig.jsonl import jsonl_lines
from clawrig.spec.layout import JobPaths, TrialPaths, read_regular

WEB_RECORD_FILE = TrialPaths.WEB_CALLS
"""The per-trial record of every web exchange (in the trial folder)."""
BLOB_DIR = TrialPaths.WEB_BLOBS
"""The job folder's content-addressed store of recorded bodies."""


def normalise_url(url: str) -> str:
    """``url`` with a lower-case scheme and host, no default port, no fragment and ``/`` for
    an empty path (two spellings of one page are one key)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    netloc = (
        host
        if port is None or (scheme, port) in (("http", 80), ("https", 443))
        else (f"{host}:{port}")
    )
    if parts.username:
        netloc = f"{parts.username}{':' + parts.password if parts.password else ''}@{netloc}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def request_key(kind: str, request: dict[str, Any]) -> str:
    """SHA-256 (hex) of ``kind`` and the normalised request's canonical JSON (sorted keys)."""
    blob = json.dumps({"kind": kind, **request}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class BlobStore:
    """Bodies by SHA-256 under ``root`` (one file per distinct content, written atomically)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def put(self, data: bytes) -> str:
        """Store ``data``; return its SHA-256 hex digest."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / digest
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{digest}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        return digest

    def get(self, digest: str) -> bytes | None:
        """The body stored as ``digest``, or None when absent, not a regular file (a link, a
        FIFO that hung the job's start: helper-137) or altered (hash mismatch)."""
        data = read_regular(self.root / digest)
        return data if data is not None and hashlib.sha256(data).hexdigest() == digest else None


class WebRecorder:
    """Appends one trial's exchanges to ``path`` (a :data:`WEB_RECORD_FILE`), bodies to
    ``blobs``. ``task_id``/``run_index`` scope each line for replay."""

    def __init__(self, path: Path, blobs: BlobStore, task_id: str, run_index: int) -> None:
        self.path = Path(path)
        self.blobs = blobs
        self.task_id = task_id
        self.run_index = run_index
        self.count = 0

    def add(
        self, kind: str, request: dict[str, Any], response: dict[str, Any], body: bytes | None
    ) -> None:
        """Record one exchange; ``body`` (if any) goes to the blob store."""
        response = dict(response)
        response["body_sha256"] = self.blobs.put(body) if body is not None else None
        line = {
            "kind": kind,
            "key": request_key(kind, request),
            "request": request,
            "response": response,
            "task_id": self.task_id,
            "run_index": self.run_index,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
        self.count += 1


def _response_problem(response: dict[str, Any]) -> str | None:
    """``field: why`` when a recorded response holds a value replay cannot serve, else None
    (each was a harness traceback mid-trial and the agent's failed tool call, scored:
    helper-137): ``status`` an HTTP status (100-599) or 0/None, ``provider`` a search
    provider clawrig has, ``error``, ``final_url`` and ``content_type`` text, ``charset`` a
    codec Python knows, ``truncated`` a boolean."""
    import codecs

    from clawrig.web.providers import PROVIDERS

    status = response.get("status")
    if status is not None and (
        not isinstance(status, int)
        or isinstance(status, bool)
        or not (status == 0 or 100 <= status <= 599)
    ):
        return f"status: not an HTTP status: {status!r:.80}"
    provider = response.get("provider")
    if provider is not None and (not isinstance(provider, str) or provider not in PROVIDERS):
        return f"provider: not a search provider clawrig has: {provider!r:.80}"
    for name in ("error", "final_url", "content_type"):
        value = response.get(name)
        if value is not None and not isinstance(value, str):
            return f"{name}: text is required, got {value!r:.80}"
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return f"{name}: holds a lone surrogate"
    charset = response.get("charset")
    if charset is not None:
        try:
            codecs.lookup(charset)
        except (LookupError, TypeError, ValueError):  # (ValueError: "utf\x00")
            return f"charset: not a character set: {charset!r:.80}"
    if not isinstance(response.get("truncated", False), bool):
        return f"truncated: true or false is required, got {response['truncated']!r:.80}"
    return None


class WebRecords:
    """Every recorded exchange of a finished job folder, served by request key.

    Per key, exchanges are served in recorded order, those of the same trial scope
    (``"<task_id>#<run_index>"``) first; once all are served the last is served again (see
    :class:`clawrig.llm.gateway.ResponseCache`, which holds them). Bodies come from the job's
    ``web_blobs/``. Raises UserError (one line: the file and line) for a folder without
    records or a line that is not a record.
    """

    def __init__(self, job_dir: Path | str) -> None:
        from clawrig.llm.gateway import ResponseCache

        self.root = Path(job_dir)
        if not self.root.is_dir():
            raise UserError(f"--web replay: no such job folder: {self.root}")
        self.blobs = BlobStore(self.root / BLOB_DIR)
        self._verified: set[str] = set()
        self._cache = ResponseCache()
        for path in JobPaths(self.root).trial_files(WEB_RECORD_FILE):
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UserError(f"{path}: cannot read the web records ({exc})") from None
            for n, line in enumerate(jsonl_lines(text), 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    key = request_key(rec["kind"], rec["request"])  # not trusted from the file
                    response = rec["response"]
                    if not isinstance(response, dict):
                        raise TypeError("response: not a JSON object")
                    scope = f"{rec.get('task_id')}#{rec.get('run_index', 0)}"
                except (ValueError, KeyError, TypeError, RecursionError) as exc:
                    raise UserError(
                        f"{path}:{n}: not a web record ({type(exc).__name__}: {exc})"
                    ) from None
                if (why := self._body_problem(response)) is not None:
                    raise UserError(f"{path}:{n}: response.body_sha256: {why}")
                if (why := _response_problem(response)) is not None:
                    raise UserError(f"{path}:{n}: response.{why}")
                self._cache.add(key, {"kind": rec.get("kind"), **response}, scope)
        if len(self._cache) == 0:
            raise UserError(
                f"--web replay: {self.root}: no recorded web calls ({WEB_RECORD_FILE}) in its "
                "trial folders (record them with --web record)"
            )

    def _body_problem(self, response: dict[str, Any]) -> str | None:
        """Why the body a record names cannot be served, or None: checked as the records are
        read, so a recording whose ``web_blobs/`` is gone or altered stops the job before any
        sandbox, not a trial later as its agent's failed tool call (helper-134)."""
        digest = response.get("body_sha256")
        if digest is None:
            return None
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            return f"not a SHA-256 digest: {digest!r}"
        if digest not in self._verified:
            if self.blobs.get(digest) is None:
                return f"{self.blobs.root / digest}: the recorded body is missing or altered"
            self._verified.add(digest)
        return None

    def __len__(self) -> int:
        return len(self._cache)

    def take(self, kind: str, request: dict[str, Any], scope: str) -> dict[str, Any] | None:
        """The recorded response for the request (see the class docs), or None (a miss)."""
        return self._cache.take(request_key(kind, request), scope)

    def body(self, response: dict[str, Any]) -> bytes | None:
        """The recorded body of ``response`` (None when it had none). Raises UserError when the
        blob is missing or altered."""
        digest = response.get("body_sha256")
        if not digest:
            return None
        data = self.blobs.get(digest)
        if data is None:
            raise UserError(
                f"--web replay: {self.blobs.root / digest}: recorded body missing or altered"
            )
        return data
