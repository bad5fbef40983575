"""Sandboxes: one isolated environment per trial behind a narrow async protocol.

``create_sandbox(kind, config)`` builds one: ``bwrap`` (default on Linux), ``docker``, ``local``.
Names are imported on use, so ``clawrig.sandbox.kinds`` stays cheap for the CLI's start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clawrig.sandbox.kinds import SANDBOX_KINDS, check_sandbox_kind

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
    """Return an unstarted sandbox of ``kind``. Raises UserError for an unknown kind."""
    if kind == "bwrap":
        from clawrig.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(config)
    if kind == "local":
        from clawrig.sandbox.local import LocalSandbox

        return LocalSandbox(config)
    if kind == "docker":
        from clawrig.sandbox.docker import DockerSandbox

        return DockerSandbox(config)
    check_sandbox_kind(kind)
    raise AssertionError(kind)  # pragma: no cover


__all__ = ["PATHS", "SANDBOX_KINDS", "create_sandbox", *sorted(_EXPORTS)]
