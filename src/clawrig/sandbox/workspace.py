"""The WildClawBench workspace lifecycle (shared/reference/formats.md section 1).

1. before start, on the host: ``exec/`` -> /tmp_workspace, ``tmp/`` -> /tmp_workspace/tmp,
   DataClawBench ``workspace_files`` and inline files (:func:`materialise_workspace`);
2. after start: skills -> /root/skills/<name>/ (:func:`install_skills`; a missing one is
   skipped with a warning, as upstream), then the warmup lines in
   order (:func:`run_warmup`): a line ending in ``&`` keeps running in the background, a failing
   line is a :class:`clawrig.errors.SetupError` carrying its output;
3. after the agent, in the clean room (a fresh sandbox holding the settled end state):
   :func:`inject_gt` copies ``gt/`` to /tmp_workspace/gt. The agent never sees gt/: it is never
   in the agent's sandbox.
"""

from __future__ import annotations

import base64
import os
import shutil
import stat
from pathlib import Path

from clawrig.errors import SetupError
from clawrig.sandbox.base import ProcessHandle, Sandbox
from clawrig.sandbox.endstate import regular_files
from clawrig.sandbox.paths import PATHS
from clawrig.spec.layout import read_regular
from clawrig.spec.task import FileContent, Task


def _content_bytes(content: FileContent) -> bytes:
    if content.base64 is not None:
        return base64.b64decode(content.base64)
    return (content.text or "").encode("utf-8")


def _safe_rel(rel: str) -> Path:
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts:
        raise SetupError(f"workspace path escapes the workspace: {rel!r}")
    return p


def write_files(dest: Path, files: dict[str, FileContent]) -> None:
    """Write inline files (relative path -> content) under a host folder."""
    for rel, content in files.items():
        path = dest / _safe_rel(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_content_bytes(content))


def read_tree(root: Path, limit: int | None = None) -> dict[str, bytes]:
    """Every regular file under ``root`` as relative POSIX path -> bytes
    (:func:`clawrig.sandbox.endstate.regular_files`: nothing under a linked ``root``; links, the
    folders behind them, FIFOs and devices left out); :func:`clawrig.runner.trial.write_tree`
    writes it back. ``limit``: the most bytes read in all; raises OSError naming ``root`` past
    it (a 6 GB sparse file in a trial's end state ran the export out of memory: helper-189)."""
    out: dict[str, bytes] = {}
    left = limit
    for rel, full in regular_files(root):
        data = read_regular(full, None if left is None else left + 1)
        if data is None:
            continue  # (gone, or no regular file now)
        if left is not None:
            left -= len(data)
            if left < 0:
                raise OSError(f"{root}: its files hold over {limit} bytes")
        out[rel] = data
    return out


def materialise_workspace(task: Task, dest: Path, root: Path | None = None) -> None:
    """Fill the host folder that becomes /tmp_workspace with the task's initial files.

    ``root`` resolves relative ``Workspace.files`` sources (DataClawBench assets root).
    Raises SetupError when a named source is missing.
    """
    ws = task.workspace
    dest.mkdir(parents=True, exist_ok=True)
    if ws.missing:
        raise SetupError(
            f"task {task.id}: workspace data not found: {', '.join(map(str, ws.missing))}"
        )
    if ws.exec_dir is not None:
        if not Path(ws.exec_dir).is_dir():
            raise SetupError(f"task {task.id}: workspace folder not found: {ws.exec_dir}")
        shutil.copytree(ws.exec_dir, dest, symlinks=True, dirs_exist_ok=True)
    if ws.tmp_dir is not None and Path(ws.tmp_dir).is_dir():
        shutil.copytree(ws.tmp_dir, dest / "tmp", symlinks=True, dirs_exist_ok=True)
    base = root or ws.root
    for f in ws.files:
        src = Path(f.source)
        if not src.is_absolute() and base is not None:
            src = Path(base) / src
        if not src.exists():
            raise SetupError(f"task {task.id}: workspace file not found: {src}")
        target = dest / _safe_rel(f.dest)
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(src, target)
    write_files(dest, ws.inline_files)
    _owner_writable(dest)


def _owner_writable(root: Path) -> None:
    """Give the owner write access (and folders search access) to everything copied in.

    Published sample sets are sometimes read-only on disk (a read-only checkout, a data
    folder without write bits). Upstream's root in a container writes to them anyway; root in
    a clawrig sandbox has no capabilities, so a read-only copy would leave the agent unable to
    create ``results/`` and score a silent 0 for the harness's fault. Symlinks are left as
    they are."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            extra = stat.S_IWUSR | (stat.S_IRUSR | stat.S_IXUSR if stat.S_ISDIR(st.st_mode) else 0)
            if st.st_mode & extra != extra:
                os.chmod(path, stat.S_IMODE(st.st_mode) | extra)
    st = os.lstat(root)
    os.chmod(root, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)


async def install_skills(sandbox: Sandbox, task: Task) -> list[str]:
    """Copy each named skill folder to /root/skills/<name>/, upstream's layout.

    ``task.skills_dirs`` are the folders searched (for WildClawBench ``<root>/skills``); the
    first that holds ``<name>/`` wins. A skill found nowhere is skipped, as upstream does;
    returns one warning line per skipped skill.
    """
    warnings = []
    for name in task.skills:
        for base in task.skills_dirs:
            src = Path(base) / name
            if src.is_dir():
                await sandbox.put_dir(src, f"{PATHS.skills}/{Path(name).name}")
                break
        else:
            looked = ", ".join(str(Path(b) / name) for b in task.skills_dirs) or "no skills folder"
            warnings.append(f"skill {name!r} not found (looked in {looked}); running without it")
    return warnings


async def run_warmup(
    sandbox: Sandbox, lines: list[str], timeout_s: float = 300.0
) -> list[ProcessHandle]:
    """Run warmup lines in order in /tmp_workspace. Returns the background handles.

    Raises SetupError (with the line and its output) when a foreground line fails, or when a
    background line exits non-zero at once.
    """
    handles: list[ProcessHandle] = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("&") and not line.endswith("&&"):
            handles.append(await sandbox.spawn(line[:-1].strip(), cwd=PATHS.workspace))
            continue
        r = await sandbox.exec(line, cwd=PATHS.workspace, timeout_s=timeout_s, merge_stderr=True)
        if r.exit_code != 0:
            why = "timed out" if r.timed_out else f"exit code {r.exit_code}"
            out = r.stdout.strip()[-2000:]
            raise SetupError(f"warmup line failed ({why}): {line}\n{out}".rstrip())
    return handles


def gt_size(task: Task) -> tuple[int, int]:
    """(bytes, files and folders) :func:`inject_gt` writes for ``task``: what the clean room
    needs free on the trial's disk besides the transcript."""
    from clawrig.sandbox.endstate import scan

    ws = task.workspace
    size = entries = 0
    if ws.gt_dir is not None and Path(ws.gt_dir).is_dir():
        listed = scan(Path(ws.gt_dir), hash_files=False)
        size, entries = listed.bytes, listed.entries + 1
    for content in ws.gt_files.values():
        size += len(_content_bytes(content))
        entries += 2  # the file and, at most, a folder of its own
    return size, entries


async def inject_gt(sandbox: Sandbox, task: Task) -> None:
    """Copy gt/ to /tmp_workspace/gt of the clean room (:meth:`clawrig.runner.trial.Trial.gt_in`:
    a fresh sandbox whose workspace is the settled end state, where nothing of the agent's runs
    and no link is left to point into gt/; :mod:`clawrig.sandbox.endstate`).

    gt comes from ``Workspace.gt_dir`` (a host folder) and/or ``Workspace.gt_files`` (inline,
    four-folder reference payloads); a task with neither gets no gt/.
    """
    ws = task.workspace
    if ws.gt_dir is not None and Path(ws.gt_dir).is_dir():
        await sandbox.put_dir(Path(ws.gt_dir), PATHS.gt)
    for rel, content in ws.gt_files.items():
        await sandbox.write_file(f"{PATHS.gt}/{_safe_rel(rel).as_posix()}", _content_bytes(content))
