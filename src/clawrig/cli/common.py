"""Shared CLI plumbing: one-line errors, the rich console."""

from __future__ import annotations

from collections.abc import Callable

import typer
from rich.console import Console

from clawrig.errors import ClawrigError, UserError

DEFAULT_PARALLEL = 1
"""``--parallel``'s default in every command (trials or sandboxes at once)."""

FLAG = ""
"""metavar for on/off flags: they take no value, so --help shows none (not ``<bool>``)."""

console = Console()
err_console = Console(stderr=True)


def stdout_console() -> Console:
    """The stdout console; a wide one when stdout is not a terminal (a file, a pipe), so task
    ids and trial folders in tables are never cut or wrapped."""
    return console if console.is_terminal else Console(width=240, soft_wrap=False)


def fail(message: str, code: int = 2) -> None:
    """Print ``clawrig: error: <message>`` on stderr and exit with ``code``."""
    err_console.print(f"[bold red]clawrig: error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def run_guarded(app: Callable[..., object]) -> int:
    """Run a typer app; turn clawrig errors into one line on stderr and an exit code.

    The app runs in click's standalone mode, so usage errors (unknown option, missing
    argument) are printed by click with exit code 2; clawrig's own errors give one line:
    :class:`UserError` exit 2, other :class:`ClawrigError` exit 1; Ctrl-C exit 130.
    """
    try:
        app()
    except SystemExit as exc:
        return exit_code_of(exc.code)
    except KeyboardInterrupt:
        err_console.print("clawrig: interrupted")
        return 130
    except UserError as exc:
        err_console.print(f"[bold red]clawrig: error:[/] {exc}", highlight=False, soft_wrap=True)
        return 2
    except ClawrigError as exc:
        err_console.print(f"[bold red]clawrig: error:[/] {exc}", highlight=False, soft_wrap=True)
        return 1
    return 0


def exit_code_of(code: object) -> int:
    """The process exit code for a SystemExit code (None means success; text means 1)."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1
