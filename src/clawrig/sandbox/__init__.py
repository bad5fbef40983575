"""Sandboxes: one isolated environment per trial behind a narrow async protocol.

``create_sandbox(kind, config)`` builds one: ``bwrap`` (default on Linux), ``docker``, ``local``.
"""

from __future__ import annotations

from clawrig.sandbox.base import (
    Bind,
    ExecResult,
    FileEntry,
    Limits,
    ProcessHandle,
    Sandbox,
    SandboxConfig,
)
from clawrig.sandbox.kinds import SANDBOX_KINDS, check_sandbox_kind
from clawrig.sandbox.paths import PATHS


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


__all__ = [
    "PATHS",
    "SANDBOX_KINDS",
    "Bind",
    "ExecResult",
    "FileEntry",
    "Limits",
    "ProcessHandle",
    "Sandbox",
    "SandboxConfig",
    "create_sandbox",
]
