"""Sandboxes: one isolated environment per trial behind a narrow async protocol.

``create_sandbox(kind, config)`` builds one: ``bwrap`` (default on Linux), ``docker``, ``local``.
"""

from __future__ import annotations

from clawrig.errors import UserError
from clawrig.sandbox.base import (
    Bind,
    ExecResult,
    FileEntry,
    Limits,
    ProcessHandle,
    Sandbox,
    SandboxConfig,
)
from clawrig.sandbox.paths import PATHS

SANDBOX_KINDS = ("bwrap", "docker", "local")


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
    raise UserError(f"--sandbox: unknown sandbox {kind!r} (choose from {', '.join(SANDBOX_KINDS)})")


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
