"""Safety checks shared by the task readers: task ids, timeouts and paths that must stay inside
the benchmark.

A task id becomes a folder name (job output, trial folders, sandbox names), so it must be a safe
folder name; a workspace source names host files copied into the sandbox, so it must stay inside
the benchmark that ships it; a timeout must be a finite number of seconds. Each check returns a
one-line problem (or None) that the caller reports with the file, the field and the line.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from pathlib import Path, PurePosixPath
from typing import Any

from clawrig.sandbox.endstate import special_file_kind
from clawrig.spec.trial import finite_float

SAFE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""A task id: a letter or digit, then letters, digits, ``.``, ``_`` or ``-`` (no ``..``)."""

MAX_ID_LENGTH = 200
"""Longest accepted id, in characters (a folder name is at most 255 bytes; trial folders add
suffixes)."""

_SAFE_ID_RE = re.compile(SAFE_ID_PATTERN)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def has_control(text: str) -> bool:
    """True when ``text`` holds a NUL or another ASCII control character."""
    return bool(_CONTROL_RE.search(text))


def unsendable_in_header(text: str) -> str | None:
    """What in ``text`` (an API key) no HTTP header carries, None when nothing: "a NUL or
    control character", or "a character that is not ASCII" (httpx sends header values as
    ASCII: a key "kéy" was a UnicodeEncodeError at the first request, helper-198)."""
    if has_control(text):
        return "a NUL or control character"
    if not text.isascii():
        return "a character that is not ASCII (an HTTP header carries ASCII only)"
    return None


def id_problem(task_id: str) -> str | None:
    """Why ``task_id`` is not a safe folder name, or None when it is.

    Accepted: :data:`SAFE_ID_PATTERN` without ``..``, at most :data:`MAX_ID_LENGTH` characters
    (e.g. ``01_Productivity_Flow_task_1_x``, ``risk_assessment-hard-hard011``, ``000015``).
    """
    shown = repr(task_id)
    if not task_id:
        return "task id is empty"
    reason = None
    if has_control(task_id):
        reason = "contains a NUL or control character"
    elif "/" in task_id or "\\" in task_id:
        reason = "contains a path separator"
    elif ".." in task_id:
        reason = "contains `..`"
    elif task_id[0] in ".-":
        reason = f"starts with {task_id[0]!r}"
    elif len(task_id) > MAX_ID_LENGTH:
        reason = f"is {len(task_id)} characters long (at most {MAX_ID_LENGTH})"
    elif not _SAFE_ID_RE.match(task_id):
        bad = sorted({c for c in task_id if not (c.isascii() and (c.isalnum() or c in "._-"))})
        reason = f"contains {', '.join(repr(c) for c in bad)}"
    if reason is None:
        return None
    return (
        f"task id {shown} is not a safe folder name: it {reason} "
        f"(ids must match {SAFE_ID_PATTERN} without `..`)"
    )


def fallback_id(task_id: str) -> str:
    """A safe stand-in for an unsafe id (used only after the error is recorded, so a lenient
    read such as ``clawrig tasks validate`` still returns a task that is safe to handle)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id)
    while ".." in safe:
        safe = safe.replace("..", "_")
    safe = safe.lstrip("._-")[:MAX_ID_LENGTH]
    return safe or "invalid_id"


def timeout_value(value: Any) -> float | None:
    """``value`` as a number of seconds when it is a finite number > 0, else None.

    Booleans, strings, NaN, infinities, 0, negatives and integers too large for a float are
    rejected.
    """
    seconds = finite_float(value)
    return seconds if seconds is not None and seconds > 0 else None


def checked_timeout(raw: Any, default: float, issues: Any, path: Path, line: int | None) -> float:
    """``raw`` as seconds (see :func:`timeout_value`); otherwise an error on the field
    ``timeout_seconds`` (file and line) is added to ``issues`` and ``default`` is returned."""
    timeout = timeout_value(raw)
    if timeout is None:
        shown = repr(raw)
        if len(shown) > 60:  # (a 400-digit number was printed whole: helper-205)
            shown = f"{shown[:40]}... ({len(shown)} characters)"
        message = f"must be a finite number of seconds > 0, got {shown}"
        number = _number_text(raw)
        if number is not None:  # YAML 1.1 takes 1e3 (no dot, no exponent sign) for text
            how = "without quotes" if number == raw.strip() else ""
            message += f" (YAML reads {raw} as text: write {number}{' ' + how if how else ''})"
        issues.error(path, "timeout_seconds", message, line)
        return float(default)
    return timeout


def _number_text(raw: Any) -> str | None:
    """How to write ``raw``, text that reads as a finite positive number (``1e3``), so that
    YAML reads a number (``1000``); None for any other value."""
    if not isinstance(raw, str):
        return None
    try:
        seconds = float(raw)
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    text = f"{seconds:.15g}"
    if "e" in text:  # YAML 1.1's floats need a dot and a signed exponent: 1.0e+20
        mantissa, exponent = text.split("e")
        text = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent}"
    return text


_READING: ContextVar[dict[tuple[Any, ...], Any] | None] = ContextVar("_READING", default=None)


@contextlib.contextmanager
def reading_once() -> Iterator[None]:
    """Within it (one suite's reading: :func:`clawrig.tasks.registry.load_suite`),
    :func:`resolved` and :func:`escaping_symlinks` answer each question once: a suite's tasks
    name the same folders again and again (a benchmark root, a workspace several tasks share,
    a workspace and its exec/, tmp/ and gt/ below it), and resolving links and walking folders
    was most of a task's reading (~2 ms of CPU per task). Files that change during the reading
    are not seen again: the reading is one look at the suite, as before."""
    token = _READING.set({})
    try:
        yield
    finally:
        _READING.reset(token)


def resolved(path: Path) -> Path:
    """``path.resolve()`` (absolute, every symlink resolved; raises as it does), asked once per
    path within :func:`reading_once`."""
    memo = _READING.get()
    if memo is None:
        return path.resolve()
    key = ("resolve", os.getcwd(), str(path))
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = path.resolve()
    return hit


def is_inside(path: Path, base: Path) -> bool:
    """True when ``path``, with every symlink resolved, is ``base`` or under it (``base`` is
    resolved too). Paths holding a NUL are never inside."""
    try:
        return resolved(path).is_relative_to(resolved(base))
    except (OSError, ValueError, RuntimeError):
        return False


def link_target(path: Path) -> str:
    """Where ``path`` leads with its links resolved, as said in a message: the path, or "a link
    loop" when the links never end (Python 3.11 raises RuntimeError for that, 3.13 OSError
    ELOOP)."""
    try:
        return str(path.resolve(strict=False))
    except RuntimeError:
        return "a link loop"
    except OSError as exc:
        return "a link loop" if exc.errno == errno.ELOOP else f"an unreadable path: {exc}"


def outside_message(path: Path, root: Path) -> str:
    """What is said of ``path`` when, links resolved, it leads outside ``root`` (see
    :func:`is_inside`): "PATH leads outside the benchmark root ROOT (to TARGET)"
    (:func:`link_target`)."""
    return f"{path} leads outside the benchmark root {root} (to {link_target(path)})"


def relative_path_problem(rel: str) -> str | None:
    """Why ``rel`` is not a plain relative path (absolute, ``..`` part, backslash, control
    character, empty), or None."""
    if not rel or not rel.strip():
        return "is empty"
    if has_control(rel):
        return f"{rel!r} contains a NUL or control character"
    if "\\" in rel:
        return f"{rel!r} contains a backslash"
    pure = PurePosixPath(rel)
    if pure.is_absolute() or Path(rel).is_absolute():
        return f"{rel!r} is an absolute path"
    if ".." in pure.parts:
        return f"{rel!r} contains `..`"
    if not [p for p in pure.parts if p != "."]:
        return f"{rel!r} names no file"
    return None


def path_clash(rels: Iterable[str]) -> str | None:
    """Why files at the relative paths ``rels`` (each a :func:`relative_path_problem`-free
    path) cannot all be written: one is a folder of another (``a`` and ``a/b``) or two name
    the same file (``a/b`` and ``a/./b``); None when they can. Said of the first clash, as
    "'a' is a file and a folder of 'a/b'"."""
    seen: dict[tuple[str, ...], str] = {}
    for rel in rels:
        parts = tuple(p for p in PurePosixPath(rel).parts if p != ".")
        if parts in seen:
            return f"{seen[parts]!r} and {rel!r} are the same file"
        seen[parts] = rel
    for parts, rel in seen.items():
        for n in range(1, len(parts)):
            if (above := seen.get(parts[:n])) is not None:
                return f"{above!r} is a file and a folder of {rel!r}"
    return None


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a plain folder name (a skill): empty, a separator, ``..``, a control
    character, or a leading ``.``; None when fine."""
    if not name:
        return "is empty"
    if has_control(name):
        return f"{name!r} contains a NUL or control character"
    if "/" in name or "\\" in name:
        return f"{name!r} contains a path separator"
    if ".." in name:
        return f"{name!r} contains `..`"
    if name.startswith("."):
        return f"{name!r} starts with '.'"
    return None


def special_kind(path: Path) -> str | None:
    """ "a named pipe", "a socket" or "a device" when ``path`` (not followed) is one, else None
    (a regular file, a folder, a link, or nothing)."""
    try:
        kind = special_file_kind(path.lstat().st_mode)
    except OSError:
        return None
    return {"fifo": "a named pipe", "socket": "a socket", "device": "a device"}.get(kind or "")


def escaping_symlinks(
    folder: Path, base: Path, limit: int = 5, *, special: bool = False
) -> list[Path]:
    """Symlinks under ``folder`` (not followed) whose target resolves outside ``base``, and with
    ``special`` also the named pipes, sockets and devices there (:func:`special_kind`: copying a
    device node reads the host's device, a pipe hangs the copy).

    Returns at most ``limit`` of them, in walk order. A missing folder yields []. Walks without
    recursion (a task's folder may be thousands of levels deep); once per question within
    :func:`reading_once`."""
    memo = _READING.get()
    key = ("walk", os.getcwd(), str(folder), str(base), limit, special)
    if memo is not None and key in memo:
        return list(memo[key])
    out = _escaping_symlinks(folder, base, limit, special)
    if memo is not None:
        memo[key] = tuple(out)
    return out


def _escaping_symlinks(folder: Path, base: Path, limit: int, special: bool) -> list[Path]:
    out: list[Path] = []
    base_real = resolved(base)
    stack = [Path(folder)]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as it:
                entries = sorted(it, key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        for entry in reversed(entries):
            path = Path(entry.path)
            if entry.is_symlink():
                if not is_inside(path, base_real):
                    out.append(path)
            elif entry.is_dir(follow_symlinks=False):
                stack.append(path)
            elif special and not entry.is_file(follow_symlinks=False):
                out.append(path)
            if len(out) >= limit:
                return out
    return out


def task_path_problems(task: Any, root: Path) -> list[tuple[Path, str, str]]:
    """(file, field, message) for each file or folder ``task`` (a
    :class:`clawrig.spec.task.Task`) names that leads outside ``root`` once links are resolved
    (the task file, its grader's file, its workspace, its skills), for each skill folder
    holding a link that leads out of it, and for each named pipe, socket or device among the
    workspace's and skills' files. A task is input a user downloaded: nothing outside its
    benchmark may be read into a sandbox."""
    source = Path(task.source.path)
    named: list[tuple[str, Path]] = [("task file", source)]
    if task.grader.origin is not None:
        named.append(("grader", Path(task.grader.origin.path)))
    ws = task.workspace
    for label, folder in (
        ("workspace", ws.root),
        ("workspace exec", ws.exec_dir),
        ("workspace tmp", ws.tmp_dir),
        ("workspace gt", ws.gt_dir),
    ):
        if folder is not None:
            named.append((label, Path(folder)))
    named += [("workspace file", Path(f.source)) for f in ws.files]
    skills = [Path(base) / name for base in task.skills_dirs for name in task.skills]
    named += [("skill", p) for p in skills]
    problems = []
    for label, path in named:
        if (path.exists() or path.is_symlink()) and not is_inside(path, root):
            problems.append(
                (
                    source,
                    label,
                    outside_message(path, root),
                )
            )
    seen: set[Path] = set()
    for label, path in named[1:]:  # what is copied into a sandbox: no pipe, socket, device
        inside = path.is_dir() and not path.is_symlink() and is_inside(path, root)
        found = escaping_symlinks(path, root, limit=1, special=True) if inside else [path]
        for entry in found:
            if entry not in seen and (kind := special_kind(entry)):
                seen.add(entry)
                problems.append((source, label, f"{entry} is {kind}, not a file or folder"))
    for skill in skills:
        if skill.is_dir() and is_inside(skill, root):
            for link in escaping_symlinks(skill, root, limit=1):
                problems.append(
                    (
                        source,
                        "skill",
                        f"{skill.name} holds a link leading outside the "
                        f"benchmark root {root}: {link}",
                    )
                )
    return problems
