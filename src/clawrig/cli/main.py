"""The ``clawrig`` command: one typer sub-app per noun (run, tasks, tools, grade, verify, export).

User errors (:class:`clawrig.errors.UserError` and friends) print one line and exit non-zero,
never a traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from clawrig import __version__
from clawrig.cli.common import FLAG, run_guarded

COMMANDS = {
    "run": "register",
    "grade": "register",
    "verify": "register",
    "pull": "register",
    "serve": "register",
    "view": "register",
    "version": "",
    "tasks": "app",
    "tools": "app",
    "export": "app",
    "env": "app",
    "cleanup": "register",
}
"""Every subcommand -> how its module ``clawrig.cli.<name>`` provides it: ``register(app)``
adds its command to a typer app, ``app`` is its own typer sub-app, "" is defined here. A
command's module is imported only when that command is used (or listed by ``--help``): start-up
imports no other command's machinery (the order here is the help's order)."""


def _load(name: str) -> Any:
    """The click command for ``name`` (:data:`COMMANDS`), built from its module."""
    module = importlib.import_module(f"clawrig.cli.{name}")
    if COMMANDS[name] == "app":
        command = typer.main.get_command(module.app)
    else:
        scratch = typer.Typer(add_completion=False)
        module.register(scratch)
        command = typer.main.get_command(scratch)  # one command: the command itself
    command.name = name
    return _tidy_help(command)


class _LazyCommands(MutableMapping[str, Any]):
    """A click group's ``commands``: every name of :data:`COMMANDS` is there (help, "did you
    mean"), each command built on first access (:func:`_load`)."""

    def __init__(self, loaded: MutableMapping[str, Any]) -> None:
        self._loaded = dict(loaded)
        self._names = [n for n in COMMANDS if n in self._loaded or COMMANDS[n]]

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            if name not in self._names:
                raise KeyError(name)
            self._loaded[name] = _load(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command
        if name not in self._names:
            self._names.append(name)

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class _LazyGroup(TyperGroup):
    """The ``clawrig`` group: its subcommands load on use (:class:`_LazyCommands`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _LazyCommands(self.commands)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # the names only: nothing is loaded to list them


_app = typer.Typer(
    name="clawrig",
    help="Run Claw-style agent benchmarks: tasks -> sandbox -> agent -> grading -> summary.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_LazyGroup,
)


def _print_version(value: bool) -> None:
    if value:  # (`clawrig --version` is what a new user tries first: helper-139)
        typer.echo(__version__)
        raise typer.Exit()


@_app.callback()
def _main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print clawrig's version and exit (as `clawrig version`).",
        ),
    ] = False,
) -> None:
    """Run Claw-style agent benchmarks: tasks -> sandbox -> agent -> grading -> summary."""


@_app.command("version")
def version() -> None:
    """Print clawrig's version."""
    typer.echo(__version__)


def _tidy_help(command: Any) -> Any:
    """Give every flag of ``command`` and of its loaded subcommands no metavar (typer shows
    ``<bool>`` otherwise: a flag takes no value), ``--help`` included, and their help texts'
    paragraphs one line each (:func:`unwrapped_help`). The help option is built once per
    command and cached, so setting it here sticks. Subcommands not loaded yet get it when they
    load (:func:`_load`)."""
    if command.help:
        command.help = unwrapped_help(command.help)
    help_option = command.get_help_option(command.context_class(command))
    if help_option is not None:
        help_option.metavar = FLAG
    for param in command.params:
        if getattr(param, "is_flag", False):
            param.metavar = FLAG
    subs = getattr(command, "commands", None) or {}
    for sub in (subs._loaded if isinstance(subs, _LazyCommands) else subs).values():
        _tidy_help(sub)
    return command


def unwrapped_help(text: str) -> str:
    """A command's help text (its docstring) with each paragraph on one line: typer's rich help
    keeps a docstring's line breaks after its first paragraph and wraps each line again to the
    terminal, so a docstring wrapped at 96 columns printed at 80 broke mid-sentence
    (helper-219). Paragraphs (blank lines apart) stay apart."""
    import inspect

    return "\n\n".join(" ".join(p.split("\n")) for p in inspect.cleandoc(text).split("\n\n"))


def app() -> None:
    """Console-script entry point. What it prints that the terminal's encoding cannot hold (a
    lone surrogate: a file name of bytes that are not UTF-8, a hand-edited record) is written
    as a backslash escape, not a UnicodeEncodeError traceback (helper-191)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    import logging

    from clawrig.cli.common import TerminalSafeHandler

    # the warnings clawrig logs (a task file's problems: its text) terminal-safe, as printed
    logging.lastResort = TerminalSafeHandler(logging.WARNING)
    sys.exit(run_guarded(_tidy_help(typer.main.get_command(_app))))
