"""Sandbox backend names, importable without the sandbox machinery (for fast CLI start-up)."""

from __future__ import annotations

from clawrig.errors import UserError

SANDBOX_KINDS = ("bwrap", "docker", "local")


def check_sandbox_kind(kind: str, flag: str = "--sandbox") -> str:
    """Return ``kind`` when it names a backend; raise UserError (one line) otherwise."""
    if kind not in SANDBOX_KINDS:
        raise UserError(
            f"{flag}: unknown sandbox {kind!r} (choose from {', '.join(SANDBOX_KINDS)})"
        )
    return kind
