"""Shared CLI plumbing: one-line errors, the rich console."""

from __future__ import annotations

from collections.abc import Callable

import typer
from rich.console import Console

from clawrig.errors import ClawrigError, UserError

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    """Print ``clawrig: error: <message>`` on stderr and exit with ``code``."""
    err_console.print(f"[bold red]clawrig: error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def run_guarded(app: Callable[..., object]) -> int:
    """Run a typer app; turn clawrig errors into one line on stderr and an exit code."""
    try:
        rv = app(standalone_mode=False)  # click returns the code of a typer.Exit here
        return exit_code_of(rv)
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("clawrig: interrupted")
        return 130
    except UserError as exc:
        err_console.print(f"[bold red]clawrig: error:[/] {exc}", highlight=False, soft_wrap=True)
        return 2
    except ClawrigError as exc:
        err_console.print(f"[bold red]clawrig: error:[/] {exc}", highlight=False, soft_wrap=True)
        return 1
    except Exception as exc:  # click usage errors arrive as click exceptions
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            return exc.exit_code
        raise


def exit_code_of(result: object) -> int:
    """The process exit code for what a click command returned (None means success)."""
    return result if isinstance(result, int) else 0
