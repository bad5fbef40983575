"""Sandbox backend names, importable without the sandbox machinery (for fast CLI start-up).

Third-party backends register in the ``clawrig.sandboxes`` entry-point group (a class taking a
:class:`clawrig.sandbox.base.SandboxConfig`); see :mod:`clawrig.plugins`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clawrig.plugins import Registry

if TYPE_CHECKING:
    from clawrig.sandbox.base import Sandbox, SandboxConfig

SANDBOXES: Registry[type[Sandbox]] = Registry(
    "sandboxes",
    {
        "bwrap": "clawrig.sandbox.bwrap:BwrapSandbox",
        "docker": "clawrig.sandbox.docker:DockerSandbox",
        "local": "clawrig.sandbox.local:LocalSandbox",
    },
    flag="--sandbox",
)
SANDBOX_KINDS = ("bwrap", "docker", "local")
"""The built-in backends (``SANDBOXES.names()`` adds registered ones)."""


def check_sandbox_kind(kind: str, flag: str = "--sandbox") -> str:
    """Return ``kind`` when it names a backend; raise UserError (one line) otherwise."""
    if kind in SANDBOXES:
        return kind
    from clawrig.errors import UserError

    choices = ", ".join(SANDBOXES.names())
    raise UserError(f"{flag}: unknown sandbox {kind!r} (choose from {choices})")


def sandbox_class(kind: str) -> type[Sandbox]:
    """The backend class for ``kind`` (imported on use). Raises UserError when unknown."""
    check_sandbox_kind(kind)
    return SANDBOXES.get(kind)


def new_sandbox(kind: str, config: SandboxConfig) -> Sandbox:
    """An unstarted sandbox of ``kind``."""
    return sandbox_class(kind)(config)  # type: ignore[call-arg]
