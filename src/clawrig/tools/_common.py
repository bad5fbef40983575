"""Helpers shared by the tool modules: path resolution, alias lookup, result builders.

Every path a tool receives is a path *inside* the trial's sandbox; relative paths resolve
against the workspace (``/tmp_workspace``, :data:`clawrig.sandbox.paths.PATHS`), ``~`` against
``/root``. Nothing here touches the host file system.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from clawrig.errors import SandboxError
from clawrig.sandbox.paths import PATHS
from clawrig.tools.base import ToolResult

WORKSPACE = PATHS.workspace
PATH_ALIASES = ("path", "file_path", "filePath", "file")
"""The names OpenClaw's read/edit/write accept for the file path, in priority order."""

_OP_FAILURE = re.compile(r"^\w+ failed: (OSError|IOError|UnicodeDecodeError|UnicodeEncodeError): ")


def resolve_path(path: str, base: str = WORKSPACE) -> str:
    """Absolute, normalised in-sandbox path: relative -> under ``base``; ``~`` -> /root.

    >>> resolve_path("results/a.md")
    '/tmp_workspace/results/a.md'
    """
    p = path.strip()
    if p == "~" or p.startswith("~/"):
        p = PATHS.home + p[1:]
    if not p.startswith("/"):
        p = posixpath.join(base, p)
    norm = posixpath.normpath(p)
    return "/" + norm.lstrip("/")  # normpath keeps a leading "//"


def first_arg(args: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    """The value of the first name in ``names`` present (not None) in ``args``, else None."""
    for name in names:
        value = args.get(name)
        if value is not None:
            return value
    return None


def error(text: str, **details: Any) -> ToolResult:
    """An error result the model can act on (``isError: true`` in the transcript)."""
    return ToolResult(text=text, is_error=True, details=details or None)


def json_text(obj: Any) -> str:
    """Pretty JSON as OpenClaw's JSON-returning tools send it (2-space indent, UTF-8 kept)."""
    return json.dumps(obj, ensure_ascii=False, indent=2)


def json_result(obj: Any, *, is_error: bool = False) -> ToolResult:
    """A result whose text is ``obj`` as JSON and whose details are ``obj`` itself."""
    return ToolResult(
        text=json_text(obj), is_error=is_error, details=obj if isinstance(obj, dict) else None
    )


def os_error_text(exc: BaseException, path: str) -> str:
    """One line for an OS-level failure on ``path`` (missing file, directory, permission)."""
    if isinstance(exc, FileNotFoundError):
        return f"File not found: {path}"
    if isinstance(exc, IsADirectoryError):
        return f"{path} is a directory, not a file (list it with exec, e.g. `ls -la {path}`)"
    if isinstance(exc, NotADirectoryError):
        return f"A parent of {path} is not a directory"
    if isinstance(exc, PermissionError):
        return f"Permission denied: {path}"
    msg = str(exc)
    m = _OP_FAILURE.match(msg)
    if m:
        msg = msg[m.end() :]
    return f"Cannot access {path}: {msg}"


def is_agent_os_failure(exc: BaseException) -> bool:
    """True for a sandbox file operation that failed because of its input (read-only file
    system, no space, name too long ...), which is a tool error, not an infrastructure one.

    The sandbox client raises OS errors from inside the sandbox as Python's ``OSError``
    (subclasses, errno kept). ``SandboxDied`` and other ``SandboxError`` are never agent failures.
    """
    return isinstance(exc, OSError) and not isinstance(exc, SandboxError)
