"""Sandboxes: one isolated environment per trial behind a narrow async protocol.

``create_sandbox(kind, config)`` builds one: ``bwrap`` (default on Linux), ``docker``, ``local``.
Names are imported on use, so ``clawrig.sandbox.kinds`` stays cheap for the CLI's start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clawrig.sandbox.kinds import SANDBOX_KINDS, SANDBOXES, check_sandbox_kind

if TYPE_CHECKING:
    from clawrig.sandbox.base import Sandbox, SandboxConfig

_EXPORTS = {
    "Bind": "clawrig.sandbox.base",
    "ExecResult": "clawrig.sandbox.base",
    "FileEntry": "clawrig.sandbox.base",
    "Limits": "clawrig.sandbox.base",
    "ProcessHandle": "clawrig.sandbox.base",
    "Sandbox": "clawrig.sandbox.base",
    "SandboxConfig": "clawrig.sandbox.base",
    "PATHS": "clawrig.sandbox.paths",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'clawrig.sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def create_sandbox(kind: str, config: SandboxConfig) -> Sandbox:
    """Return an unstarted sandbox of ``kind`` (a built-in or registered backend). Raises
    UserError for an unknown kind."""
    from clawrig.sandbox.kinds import new_sandbox

    return new_sandbox(kind, config)


__all__ = [
    "PATHS",
    "SANDBOXES",
    "SANDBOX_KINDS",
    "check_sandbox_kind",
    "create_sandbox",
    *sorted(_EXPORTS),
]
