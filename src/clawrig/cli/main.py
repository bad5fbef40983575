"""The ``clawrig`` command: one typer sub-app per noun (run, tasks, tools, grade, verify, export).

User errors (:class:`clawrig.errors.UserError` and friends) print one line and exit non-zero,
never a traceback.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from clawrig import __version__
from clawrig.cli import env as env_cli
from clawrig.cli import export as export_cli
from clawrig.cli import grade as grade_cli
from clawrig.cli import pull as pull_cli
from clawrig.cli import run as run_cli
from clawrig.cli import serve as serve_cli
from clawrig.cli import tasks as tasks_cli
from clawrig.cli import tools as tools_cli
from clawrig.cli import verify as verify_cli
from clawrig.cli import view as view_cli
from clawrig.cli.common import FLAG, run_guarded

_app = typer.Typer(
    name="clawrig",
    help="Run Claw-style agent benchmarks: tasks -> sandbox -> agent -> grading -> summary.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_app.add_typer(tasks_cli.app, name="tasks")
_app.add_typer(tools_cli.app, name="tools")
_app.add_typer(export_cli.app, name="export")
_app.add_typer(env_cli.app, name="env")
run_cli.register(_app)
grade_cli.register(_app)
verify_cli.register(_app)
pull_cli.register(_app)
serve_cli.register(_app)
view_cli.register(_app, export_cli.app)


@_app.command("version")
def version() -> None:
    """Print clawrig's version."""
    typer.echo(__version__)


def _quiet_help_metavar(command: Any) -> Any:
    """Give every command's ``--help`` no metavar (typer shows ``<bool>`` for it otherwise:
    a flag takes no value). The help option is built once per command and cached, so setting
    it here sticks."""
    help_option = command.get_help_option(command.context_class(command))
    if help_option is not None:
        help_option.metavar = FLAG
    for sub in (getattr(command, "commands", None) or {}).values():
        _quiet_help_metavar(sub)
    return command


def app() -> None:
    """Console-script entry point."""
    sys.exit(run_guarded(_quiet_help_metavar(typer.main.get_command(_app))))
