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
    """Return ``kind`` when it names a backend; raise UserError (one line) otherwise: an
    unknown name, and a registered one (not built in) that cannot be loaded or is no backend
    (:func:`backend_problem`: an agent class registered as a sandbox started the job, each
    trial then an infrastructure error retried and set aside: helper-204)."""
    from clawrig.errors import UserError

    if kind in SANDBOXES:
        if kind not in SANDBOX_KINDS and (problem := backend_problem(SANDBOXES.get(kind))):
            raise UserError(f"{flag}: {kind!r} is registered as {problem}")
        return kind
    choices = ", ".join(SANDBOXES.names())
    raise UserError(f"{flag}: unknown sandbox {kind!r} (choose from {choices})")


def backend_problem(cls: object) -> str | None:
    """Why ``cls`` is no sandbox backend (a class with the methods of the
    :class:`clawrig.sandbox.base.Sandbox` protocol), None when it is one."""
    from clawrig.sandbox.base import Sandbox

    wanted = [n for n, v in vars(Sandbox).items() if callable(v) and not n.startswith("_")]
    missing = [n for n in wanted if not callable(getattr(cls, n, None))]
    if isinstance(cls, type) and not missing:
        return None
    lacks = f" (it has no {', '.join(missing)})" if isinstance(cls, type) else ""
    return f"{cls!r}, not a sandbox backend: a class taking a SandboxConfig{lacks}"


def sandbox_class(kind: str) -> type[Sandbox]:
    """The backend class for ``kind`` (imported on use). Raises UserError when unknown."""
    check_sandbox_kind(kind)
    return SANDBOXES.get(kind)


def new_sandbox(kind: str, config: SandboxConfig) -> Sandbox:
    """An unstarted sandbox of ``kind``."""
    return sandbox_class(kind)(config)  # type: ignore[call-arg]
