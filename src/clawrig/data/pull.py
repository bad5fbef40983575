"""``clawrig pull``: download a benchmark's data from the Hugging Face Hub, pinned to a commit,
laid out where clawrig's readers look, with a manifest.

Steps (:func:`pull`):

1. resolve the revision to a commit (``HfApi.dataset_info``: ``GET /api/datasets/{repo}/
   revision/{rev}``) and list its files (``HfApi.list_repo_tree``: ``GET /api/datasets/{repo}/
   tree/{commit}?recursive=true``), keeping those the include patterns match;
2. choose the layout (:func:`layout_for`): files of a four-folder set or a repository mirror
   keep their paths; WildClawBench category folders (``01_Productivity_Flow/...``) go under
   ``workspace/``; DataClawBench ``database/``, ``qa_gold/``, ``qa_raw/`` under ``assets/``;
3. ``huggingface_hub.snapshot_download`` at that commit into ``DIR/<layout>`` with the
   include patterns (``HEAD``/``GET /datasets/{repo}/resolve/{commit}/{path}``, ETag,
   X-Repo-Commit, X-Linked-Etag/-Size; progress bars; files already complete are not fetched
   again, so an interrupted pull resumes);
4. hash every pulled file into ``DIR/clawrig-data.json`` (:mod:`clawrig.data.manifest`).

Validation and verification of the pulled suite are the CLI's (:mod:`clawrig.cli.pull`).

Tokens: ``HF_TOKEN`` (or the older ``HUGGING_FACE_HUB_TOKEN``), else the token saved by
``hf auth login``; ``HF_ENDPOINT`` points the client at another Hub (tests use a loopback one).
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable
from pathlib import Path

from clawrig.data.manifest import DataManifest, entry_for, write_manifest
from clawrig.data.sources import Source
from clawrig.errors import UserError

CATEGORY_DIR = re.compile(r"\d\d_[A-Za-z]")
DATACLAW_ASSETS = ("database", "qa_gold", "qa_raw")


def layout_for(paths: list[str]) -> str:
    """The folder under DIR the dataset's files go to (see the module docs): ``""``,
    ``"workspace"`` or ``"assets"``."""
    tops = {p.split("/", 1)[0] for p in paths if "/" in p}
    if tops & {"workspace", "tasks", "assets"}:
        return ""
    if tops and all(CATEGORY_DIR.match(t) for t in tops):
        return "workspace"
    if tops & set(DATACLAW_ASSETS):
        return "assets"
    return ""


def hf_token() -> str | None:
    """The token from ``HF_TOKEN`` or ``HUGGING_FACE_HUB_TOKEN`` (None: the client's saved
    login, if any)."""
    return os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or None


def _hub_error(source: Source, exc: Exception) -> UserError:
    """One line for a Hub failure."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo = f"hf://datasets/{source.repo_id}"
    if isinstance(exc, GatedRepoError):
        return UserError(
            f"{repo}: the dataset is gated: accept its conditions on the Hub with the account "
            "whose token is in HF_TOKEN"
        )
    if isinstance(exc, RevisionNotFoundError):
        return UserError(f"{repo}@{source.revision}: no such revision (branch, tag or commit)")
    if isinstance(exc, RepositoryNotFoundError):
        why = "your HF_TOKEN cannot read it" if hf_token() else "set HF_TOKEN if it is private"
        return UserError(f"{repo}: no such dataset, or it is private ({why})")
    if isinstance(exc, (LocalEntryNotFoundError, OfflineModeIsEnabled)):
        return UserError(f"{repo}: cannot reach the Hugging Face Hub ({_endpoint()})")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        return UserError(f"{repo}: the Hub answered HTTP {status}: {str(exc).splitlines()[0]}")
    return UserError(
        f"{repo}: cannot reach the Hugging Face Hub ({_endpoint()}): {type(exc).__name__}"
    )


def _endpoint() -> str:
    """The Hub's base URL: ``HF_ENDPOINT`` as set now (the client reads it only at import)."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def pull(
    source: Source,
    to: Path,
    *,
    progress: bool = True,
    note: Callable[[str], None] = lambda line: None,
) -> tuple[DataManifest, Path]:
    """Pull ``source`` into ``to`` (see the module docs); return the manifest and its path.

    Raises UserError (one line) for a missing, private or gated dataset, an unknown revision,
    an unreachable Hub, include patterns that match no file, or a folder that cannot be
    written. Files already pulled are kept (a rerun resumes)."""
    import httpx2
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import (
        disable_progress_bars,
        enable_progress_bars,
        filter_repo_objects,
    )

    hub_errors = (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        httpx2.TransportError,
    )
    token = hf_token()
    api = HfApi(endpoint=_endpoint(), token=token)
    include = list(source.include) or None
    try:
        info = api.dataset_info(source.repo_id, revision=source.revision)
        commit = info.sha
        if not commit:
            raise UserError(
                f"hf://datasets/{source.repo_id}: the Hub sent no commit for {source.revision}"
            )
        tree = [
            f.path
            for f in api.list_repo_tree(
                source.repo_id, repo_type="dataset", revision=commit, recursive=True
            )
            if isinstance(f, RepoFile)
        ]
    except hub_errors as exc:
        raise _hub_error(source, exc) from None
    files = sorted(filter_repo_objects(tree, allow_patterns=include))
    if not files:
        raise UserError(
            f"--include: {', '.join(source.include) or '*'} matched no file of "
            f"hf://datasets/{source.repo_id}@{commit[:12]} ({len(tree)} files)"
        )
    layout = layout_for(files)
    target = to / layout if layout else to
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--to: cannot create {target}: {exc.strerror}") from None
    note(
        f"hf://datasets/{source.repo_id}@{source.revision} = commit {commit}: {len(files)} of "
        f"{len(tree)} files -> {target}"
    )
    if not progress:
        disable_progress_bars()
    try:
        snapshot_download(
            source.repo_id,
            repo_type="dataset",
            revision=commit,
            local_dir=target,
            allow_patterns=include,
            token=token,
            endpoint=_endpoint(),
        )
    except hub_errors as exc:
        raise _hub_error(source, exc) from None
    finally:
        if not progress:
            enable_progress_bars()
    prefix = f"{layout}/" if layout else ""
    entries = {}
    for rel in files:
        path = target / rel
        try:
            entries[prefix + rel] = entry_for(path)
        except OSError as exc:
            raise UserError(f"{path}: pulled file unreadable: {exc.strerror}") from None
    manifest = DataManifest(
        source=f"hf://datasets/{source.repo_id}@{source.revision}",
        spec=source.spec,
        repo_id=source.repo_id,
        revision=source.revision,
        commit=commit,
        include=list(source.include),
        layout=layout,
        suite=suite_folder(to),
        pulled_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        files=entries,
    )
    return manifest, write_manifest(to, manifest)


def suite_folder(root: Path) -> str | None:
    """The folder (relative to ``root``; ``""`` for root itself) that ``clawrig run`` reads:
    the shallowest (depth <= 2, hidden folders skipped) that is a four-folder set, a
    DataClawBench root or holds ``tasks/``; None when the data holds no tasks (workspaces only).
    """
    from clawrig.tasks.dataclaw import is_dataclaw_root
    from clawrig.tasks.fourfolder import is_fourfolder_root

    level = [root]
    for _ in range(3):
        for path in level:
            if is_fourfolder_root(path) or is_dataclaw_root(path) or (path / "tasks").is_dir():
                return path.relative_to(root).as_posix() if path != root else ""
        level = [
            d
            for p in level
            for d in sorted(p.iterdir())
            if d.is_dir()
            and not d.name.startswith(".")
            and d.name not in ("workspace", "workspaces")
        ]
    return None
