"""The data manifest: what ``clawrig pull`` fetched, so a job can say which data it ran on.

``<DIR>/clawrig-data.json`` (:data:`MANIFEST_NAME`)::

    {"source": "hf://datasets/OWNER/NAME@REVISION", "spec": "eigendata/wildclaw",
     "repo_id": "OWNER/NAME", "repo_type": "dataset", "revision": "main",
     "commit": "<40-hex commit the revision resolved to>", "include": ["wildclaw/*"],
     "layout": "", "suite": "wildclaw", "pulled_at": "<ISO 8601 UTC>",
     "files": {"<path relative to DIR>": {"sha256": "<hex>", "size": <bytes>,
                                         "mtime_ns": <int>}}}

``layout`` is the folder under DIR the dataset's files were placed in (``""``,
``workspace`` or ``assets``); ``suite`` the folder to give ``clawrig run`` (None when the
data holds no task files, e.g. WildClawBench's workspaces: run its tasks with ``--root DIR``).

:func:`check_data` compares the files on disk with the manifest (a file whose size and
modification time are unchanged is not read again) and gives the job summary's ``data`` entry.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pydantic import BaseModel, Field

from clawrig.spec.summary import DataCheck

MANIFEST_NAME = "clawrig-data.json"
LIST_CAP = 20
"""At most this many paths per list in a check's summary entry."""


class FileEntry(BaseModel):
    sha256: str
    size: int
    mtime_ns: int = 0


class DataManifest(BaseModel):
    """The manifest file's shape (see the module docs)."""

    source: str
    spec: str = ""
    repo_id: str
    repo_type: str = "dataset"
    revision: str
    commit: str
    include: list[str] = Field(default_factory=list)
    layout: str = ""
    suite: str | None = None
    pulled_at: str = ""
    files: dict[str, FileEntry] = Field(default_factory=dict)

    def files_digest(self) -> str:
        """SHA-256 over the sorted ``path sha256`` lines: one value naming the whole data."""
        lines = "".join(f"{p} {e.sha256}\n" for p, e in sorted(self.files.items()))
        return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB chunks. Raises OSError."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def entry_for(path: Path) -> FileEntry:
    st = path.stat()
    return FileEntry(sha256=file_sha256(path), size=st.st_size, mtime_ns=st.st_mtime_ns)


def write_manifest(root: Path, manifest: DataManifest) -> Path:
    """Write ``root/clawrig-data.json`` atomically; return its path."""
    path = root / MANIFEST_NAME
    tmp = path.with_name(f".{MANIFEST_NAME}.tmp")
    tmp.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_manifest(path: Path) -> DataManifest:
    """The manifest at ``path``. Raises UserError naming the file for one that is unreadable."""
    from pydantic import ValidationError

    from clawrig.errors import UserError, first_invalid

    try:
        return DataManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        where, what = first_invalid(exc)
        raise UserError(f"{path}: not a clawrig data manifest: {where}: {what}") from None
    except (OSError, ValueError) as exc:
        first = str(exc).splitlines()[0]
        raise UserError(f"{path}: not a clawrig data manifest: {first}") from None


def find_manifest(*paths: Path | None) -> Path | None:
    """The manifest of the data at any of ``paths``: the first ``clawrig-data.json`` found in
    a path or one of its parents (nearest first), else None."""
    for start in paths:
        if start is None:
            continue
        here = Path(start).resolve()
        for folder in (here, *here.parents):
            candidate = folder / MANIFEST_NAME
            if candidate.is_file():
                return candidate
    return None


def check_data(manifest_path: Path, suite_path: Path | None = None) -> DataCheck:
    """The job summary's ``data`` entry: the manifest's source, revision, commit, file count
    and digest, and how the files on disk differ: ``changed`` (content differs), ``missing``,
    ``added`` (files under ``suite_path`` that the manifest does not list); ``matches`` is True
    when all three are empty. Lists hold at most :data:`LIST_CAP` paths (``*_count`` has the
    full number). Raises UserError for an unreadable manifest."""
    manifest = read_manifest(manifest_path)
    root = manifest_path.parent
    changed: list[str] = []
    missing: list[str] = []
    for rel, want in sorted(manifest.files.items()):
        path = root / rel
        try:
            st = path.stat()
        except OSError:
            missing.append(rel)
            continue
        if st.st_size != want.size:
            changed.append(rel)
        elif st.st_mtime_ns != want.mtime_ns:
            try:
                if file_sha256(path) != want.sha256:
                    changed.append(rel)
            except OSError:
                missing.append(rel)
    added: list[str] = []
    if suite_path is not None:
        base = Path(suite_path).resolve()
        if base.is_file():
            base = base.parent
        if base == root.resolve() or root.resolve() in base.parents:
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for name in sorted(filenames):
                    rel = os.path.relpath(os.path.join(dirpath, name), root.resolve())
                    if (
                        not name.startswith(".")
                        and rel != MANIFEST_NAME
                        and rel not in manifest.files
                    ):
                        added.append(rel)
    return DataCheck(
        manifest=str(manifest_path),
        source=manifest.source,
        repo_id=manifest.repo_id,
        revision=manifest.revision,
        commit=manifest.commit,
        files=len(manifest.files),
        files_sha256=manifest.files_digest(),
        matches=not (changed or missing or added),
        changed=changed[:LIST_CAP],
        changed_count=len(changed),
        missing=missing[:LIST_CAP],
        missing_count=len(missing),
        added=added[:LIST_CAP],
        added_count=len(added),
    )


def drift_line(check: DataCheck) -> str | None:
    """The one line a job prints when its data differs from the manifest, else None."""
    if check.matches:
        return None
    first = (check.changed or check.missing or check.added)[0]
    return (
        f"data differs from its manifest {check.manifest} ({check.source}, commit "
        f"{check.commit[:12]}): {check.changed_count} changed, {check.missing_count} "
        f"missing, {check.added_count} added (first: {first}); `clawrig pull` again to "
        "restore it"
    )


def data_summary(*paths: Path | None) -> DataCheck | None:
    """The job summary's ``data`` entry for a job on ``paths`` (the suite path, then the
    benchmark root): :func:`check_data` of the nearest manifest, or None when the data was not
    pulled by ``clawrig pull``. Raises UserError for an unreadable manifest."""
    found = find_manifest(*paths)
    if found is None:
        return None
    return check_data(found, next((p for p in paths if p is not None), None))
