"""The end state as inert data: what the agent left in its workspace, read from the host side
once every process of the agent's sandbox is gone, before anything grades it (issue 14,
"grade in a clean room").

:func:`settle` walks the workspace folder in place (it is the host folder the agent's sandbox
had bound at /tmp_workspace) and leaves regular files and folders only:

- symbolic links are recorded (relative path -> target text) and removed, never followed; a link
  the task itself shipped (the same path and target in the initial workspace) stays;
- FIFOs, sockets and device files are removed (recorded with their kind);
- ``gt/`` and ``.services/`` at the top are removed whatever they are (the harness puts its own
  there for grading);
- folders get ``u+rwx`` and files ``u+rw`` back (an agent may have taken them away);
- every regular file is listed as ``"<size>:<sha256>"``, so the harness can tell what changed;
  with ``known`` (the initial workspace's listing) a file is hashed only when a known file of
  the same path has the same size (``"<size>:"`` otherwise: new or changed without reading it),
  so hashing costs at most what the initial workspace holds.

The walk holds one open folder per level (``openat`` with ``O_NOFOLLOW | O_DIRECTORY`` from its
parent's descriptor), never a path longer than one name, never recursion: no symlink, deep
chain or PATH_MAX trick can lead it elsewhere or crash it. Caps (:class:`EndStateCaps`) on depth,
path length, entries and bytes bound the harness's work; exceeding one raises
:class:`EndStateRejected`, an agent error (score 0): the agent made a workspace the harness will
not grade.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from clawrig.errors import AgentFault

TOP_LEVEL_DROPPED = ("gt", ".services")
"""Top-level names removed from the end state whatever they are (the harness's own)."""


class EndStateRejected(AgentFault):
    """The end state exceeds a cap (:class:`EndStateCaps`): an agent error, scored 0."""


@dataclass(frozen=True)
class EndStateCaps:
    """Limits on the end state the harness reads. ``max_depth``: folder levels below the
    workspace; ``max_path_bytes``: a relative path's length in bytes; ``max_entries``: files,
    folders, links and others together; ``max_bytes``: the regular files' sizes summed."""

    max_depth: int = 128
    max_path_bytes: int = 2048
    max_entries: int = 100_000
    max_bytes: int = 8 * 1024**3

    def over(self, initial: EndState) -> EndStateCaps:
        """These caps, raised where the task's initial workspace alone comes near them (room
        for the agent beyond what the task shipped)."""
        return EndStateCaps(
            max_depth=max(self.max_depth, initial.depth + 8),
            max_path_bytes=max(self.max_path_bytes, initial.longest_path + 256),
            max_entries=max(self.max_entries, 2 * initial.entries),
            max_bytes=max(self.max_bytes, 2 * initial.bytes),
        )


@dataclass
class EndState:
    """What :func:`scan` or :func:`settle` found. Paths are workspace-relative, ``/``-separated.

    ``files``: path -> ``<size>:<sha256 hex>`` of every regular file (``+x`` after it when its
    owner may execute it; ``<size>:`` alone when files are not hashed); ``links``: path ->
    link target text;
    ``dropped``: path -> kind (``fifo``, ``socket``, ``device``, or ``link`` for a removed
    link, ``top-level`` for gt/ or .services/); ``depth``, ``entries``, ``bytes``,
    ``longest_path``: the totals the caps apply to."""

    files: dict[str, str] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    depth: int = 0
    entries: int = 0
    bytes: int = 0
    longest_path: int = 0


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def special_file_kind(mode: int) -> str | None:
    """ "fifo", "socket" or "device" (character or block) for an ``st_mode`` of one, else None:
    the files the end state and a task's files never carry."""
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return None


def _kind(mode: int) -> str:
    return special_file_kind(mode) or "other"


def _shown(path: bytes) -> str:
    """``path`` for a message: a name that is not UTF-8 (the agent's to choose) shows its bytes
    as ``\\xNN``, so no message carries a lone surrogate that cannot be written as UTF-8."""
    return path.decode("utf-8", "backslashreplace")


def _hash(dir_fd: int, name: bytes, deadline: float | None) -> str:
    fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    try:
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            if deadline is not None and time.monotonic() > deadline:
                raise EndStateRejected("hashing the workspace ran past the phase's deadline")
        return h.hexdigest()
    finally:
        os.close(fd)


def _walk(
    root: Path,
    caps: EndStateCaps | None,
    *,
    change: bool,
    keep_links: dict[str, str] | None = None,
    hash_files: bool = True,
    known: Mapping[str, str] | None = None,
    deadline: float | None = None,
) -> EndState:
    out = EndState()
    keep = keep_links or {}
    try:
        top = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return out
    if change:
        os.chmod(root, stat.S_IMODE(os.fstat(top).st_mode) | stat.S_IRWXU)
    # one frame per open folder: (fd, its relative path as bytes, depth, subfolders to visit)
    stack: list[tuple[int, bytes, int, list[bytes]]] = []
    pending: list[tuple[int, bytes, int]] = [(top, b"", 0)]
    try:
        while pending or stack:
            if pending:
                fd, rel, depth = pending.pop()
                subdirs: list[bytes] = []
                with os.scandir(fd) as it:
                    names = [(e.name, e) for e in it]
                for name_s, _entry in names:
                    name = os.fsencode(name_s)
                    child = rel + b"/" + name if rel else name
                    path = os.fsdecode(child)  # a non-UTF-8 name keeps its bytes (surrogates)
                    out.entries += 1
                    out.longest_path = max(out.longest_path, len(child))
                    if caps is not None:
                        if out.entries > caps.max_entries:
                            raise EndStateRejected(
                                f"the workspace holds more than {caps.max_entries} files and "
                                "folders"
                            )
                        if len(child) > caps.max_path_bytes:
                            raise EndStateRejected(
                                f"a workspace path is longer than {caps.max_path_bytes} bytes: "
                                f"{_shown(child)[:120]}..."
                            )
                    if deadline is not None and time.monotonic() > deadline:
                        raise EndStateRejected(
                            "listing the workspace ran past the phase's deadline"
                        )
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    mode = st.st_mode
                    if stat.S_ISDIR(mode):
                        if change and mode & stat.S_IRWXU != stat.S_IRWXU:
                            os.chmod(name, stat.S_IMODE(mode) | stat.S_IRWXU, dir_fd=fd)
                        out.dirs.append(path)
                        subdirs.append(name)
                    elif stat.S_ISREG(mode):
                        out.bytes += st.st_size
                        if caps is not None and out.bytes > caps.max_bytes:
                            raise EndStateRejected(
                                f"the workspace's files add up to more than {caps.max_bytes} bytes"
                            )
                        if change and mode & 0o600 != 0o600:
                            os.chmod(name, stat.S_IMODE(mode) | 0o600, dir_fd=fd)
                        size = f"{st.st_size}:"
                        if not hash_files or (
                            known is not None and not known.get(path, "").startswith(size)
                        ):
                            out.files[path] = size
                        else:
                            # the owner's execute bit is part of what a file is (a chmod +x
                            # is a change: re-grading had the file without it, helper-194)
                            x = "+x" if mode & stat.S_IXUSR else ""
                            out.files[path] = size + _hash(fd, name, deadline) + x
                    elif stat.S_ISLNK(mode):
                        target = os.fsdecode(os.readlink(name, dir_fd=fd))
                        out.links[path] = target
                        if change and keep.get(path) != target:
                            os.unlink(name, dir_fd=fd)
                            out.dropped[path] = "link"
                    else:
                        if change:
                            os.unlink(name, dir_fd=fd)
                        out.dropped[path] = _kind(mode)
                stack.append((fd, rel, depth, subdirs))
            fd, rel, depth, subdirs = stack[-1]
            if not subdirs:
                stack.pop()
                os.close(fd)
                continue
            name = subdirs.pop()
            if caps is not None and depth + 1 > caps.max_depth:
                raise EndStateRejected(
                    f"the workspace is more than {caps.max_depth} folders deep "
                    f"({_shown(rel)[:200]})"
                )
            out.depth = max(out.depth, depth + 1)
            pending.append(
                (
                    os.open(name, _DIR_FLAGS, dir_fd=fd),
                    rel + b"/" + name if rel else name,
                    depth + 1,
                )
            )
    finally:
        for fd, *_ in stack:
            os.close(fd)
        for fd, *_ in pending:
            os.close(fd)
    if change:
        # the harness's own names go whatever the agent put there (settled above: plain
        # folders and files within the caps, so removing them cannot recurse too deep)
        for harness_name in TOP_LEVEL_DROPPED:
            p = root / harness_name
            if os.path.lexists(p):
                out.dropped[harness_name] = "top-level"
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
                prefix = harness_name + "/"
                out.files = {
                    k: v
                    for k, v in out.files.items()
                    if k != harness_name and not k.startswith(prefix)
                }
                out.dirs = [d for d in out.dirs if d != harness_name and not d.startswith(prefix)]
    return out


def scan(
    root: Path,
    *,
    caps: EndStateCaps | None = None,
    hash_files: bool = True,
    known: Mapping[str, str] | None = None,
    deadline: float | None = None,
) -> EndState:
    """Read ``root`` as :func:`settle` would, changing nothing (e.g. the task's initial
    workspace, which the harness made). ``caps``: None for none; ``known``: see the module
    docs; ``deadline``: a ``time.monotonic()`` value. Raises :class:`EndStateRejected` over a
    cap or past the deadline."""
    return _walk(root, caps, change=False, hash_files=hash_files, known=known, deadline=deadline)


def settle(
    root: Path,
    caps: EndStateCaps,
    *,
    keep_links: dict[str, str] | None = None,
    hash_files: bool = True,
    known: Mapping[str, str] | None = None,
    deadline: float | None = None,
) -> EndState:
    """Make the folder ``root`` inert data in place (see the module docs) and return what it
    holds. ``keep_links``: links the task shipped (path -> target), kept when unchanged;
    ``hash_files`` False: no file is read (``"<size>:"``); ``known``, ``deadline``: as
    :func:`scan`.

    Call it only when no process can change ``root`` any more (the agent's sandbox stopped).
    Raises :class:`EndStateRejected` when a cap is exceeded (the walk stops there; ``root``
    is then only partly settled and must not be graded)."""
    return _walk(
        root,
        caps,
        change=True,
        keep_links=keep_links,
        hash_files=hash_files,
        known=known,
        deadline=deadline,
    )


def tree_of(root: Path) -> tuple[list[str], list[tuple[str, Path]]]:
    """(every folder under ``root``, relative POSIX path; every regular file under it as
    (relative POSIX path, path)), both sorted, as :func:`scan` reads them (no link entered,
    links, FIFOs, devices and sockets left out): nothing when ``root`` is a link or no folder.
    For a trial's ``end_state/`` and other trees of a job folder that anyone may have edited
    (helper-189: an ``end_state`` linked to a host folder was copied into an exported
    evaluator; a FIFO in it made ``clawrig grade`` a traceback)."""
    if os.path.islink(root) or not os.path.isdir(root):
        return [], []
    state = scan(root, hash_files=False)
    return sorted(state.dirs), sorted((rel, root / rel) for rel in state.files)


def regular_files(root: Path) -> list[tuple[str, Path]]:
    """The regular files of :func:`tree_of` ``root``."""
    return tree_of(root)[1]
