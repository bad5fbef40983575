"""Shared CLI plumbing: one-line errors, the rich console."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import stat
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from clawrig.choices import MAX_MEMORY_MB, MIN_MEMORY_MB
from clawrig.errors import ClawrigError, InterruptedAfterJob, UserError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.segment import Segment

    console: Console
    err_console: Console

DEFAULT_PARALLEL = 1
"""``--parallel``'s default in every command (trials or sandboxes at once)."""

MAX_SLOTS_PER_NODE = 1000
"""``--slots-per-node`` at most (``--executor ray``): each slot is queued when the node's worker
starts, so a count like 10^11 never finished starting (a larger one is a usage error, exit 2).
``--parallel`` and ``--max-concurrency`` need no cap: they bound semaphores, and a job runs at
most its trials at once."""

SANDBOX_PANEL = "Sandbox"
SCALE_PANEL = "Scale"
LIMITS_PANEL = "Limits and budget"
WEB_PANEL = "Web"
"""The help panels (boxes) of ``run``'s and ``verify``'s options beside the main one. One table
of ~40 options narrowed its columns alike at 80 columns and cut the longest names
("--max-cost-usd-per-tr…"); each panel is a table of its own, sized to its options."""

MemoryMbOption = Annotated[
    int,
    typer.Option(
        "--memory-mb",
        rich_help_panel=SANDBOX_PANEL,
        min=MIN_MEMORY_MB,
        max=MAX_MEMORY_MB,
        help="Each sandbox's memory limit in MiB (a cgroup): its processes, /dev/shm (a "
        "quarter, at most 256 MiB) and, in the clean room, the files the grader writes "
        "to /tmp, /root and /run/clawrig.",
    ),
]
"""``--memory-mb`` of the commands that start sandboxes (``run``, ``verify``): default
:data:`clawrig.choices.DEFAULT_MEMORY_MB`."""
TIMEOUT_MULTIPLIER_RANGE = (0.01, 1000.0)
"""The ``--timeout-multiplier`` values taken (inclusive)."""


def _timeout_multiplier(value: float) -> float:
    low, high = TIMEOUT_MULTIPLIER_RANGE
    if not low <= value <= high:  # (NaN too: typer's own range check called it "above 1000")
        raise typer.BadParameter(f"must be a number from {low:g} to {high:g}, got {value:g}")
    return value


def usd_amount(value: float | None) -> float | None:
    """An option's amount of USD: None (no cap), or a number 0 or more; infinity is no cap
    either. Raises typer.BadParameter for NaN (typer's own range check called it "should be
    greater than or equal to 0": helper-212) or a negative number."""
    if value is not None and not value >= 0:
        raise typer.BadParameter(f"must be a number of USD, 0 or more, got {value:g}")
    return value + 0.0 if value is not None else None  # (-0 said "$-0": helper-217)


TimeoutMultiplierOption = Annotated[
    float,
    typer.Option(
        "--timeout-multiplier",
        callback=_timeout_multiplier,
        help="Multiplies every task's time limit (agent and grader; not the warmup): "
        f"{TIMEOUT_MULTIPLIER_RANGE[0]:g} to {TIMEOUT_MULTIPLIER_RANGE[1]:g}.",
    ),
]
"""``--timeout-multiplier`` of the commands that run tasks (``run``, ``verify``): default 1."""


def local_sandbox_guard(sandbox: str, parallel: int) -> None:
    """For a command that starts sandboxes itself (``verify``, ``pull``; ``run`` checks in its
    preflight): with ``--sandbox local``, refuse ``--parallel`` > 1 (UserError: the local
    sandbox runs one at a time) and say once, on stderr, that it has no isolation."""
    if sandbox != "local":
        return
    from clawrig.sandbox.local import ONE_AT_A_TIME, warn_once

    if parallel > 1:
        raise UserError(ONE_AT_A_TIME)

    out = _console("err_console")
    warn_once(lambda line: out.print(line, style="bold yellow", highlight=False, soft_wrap=True))


ROOT_HELP = (
    "Benchmark root that WildClawBench Workspace Paths and DataClawBench task files are "
    "resolved against (default: the folder that holds tasks/). Refused for a four-folder set "
    "or a DataClawBench root: they read their own folders."
)
"""``--root``'s help in every command that reads a suite."""

FLAG = ""
"""metavar for on/off flags: they take no value, so --help shows none (not ``<bool>``)."""


def _new_console(**options: Any) -> Console:
    """A rich console (``options``: rich's) whose pipe's reader may go away: the rest of its
    output is dropped and the command goes on to its own exit code (``clawrig run | head``
    exited 1 after the job, rich's default, which reads as "some trial left unscored")."""
    from rich.console import Console
    from rich.segment import Segment

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.file.fileno())
            os.close(devnull)

        def render(self, renderable: Any, options: Any = None) -> Iterator[Segment]:
            # every text printed (lines, tables, Text) with its control characters shown,
            # not sent: a task's name, a grader's error or an agent's file reached the
            # terminal as escape sequences (a window title, colours: helper-205); rich's own
            # styles and cursor moves are no text (styles, control segments) and stay
            for seg in super().render(renderable, options):
                if seg.control is None and _UNSAFE_ON_A_TERMINAL.search(seg.text):
                    yield Segment(terminal_safe(seg.text), seg.style)
                else:
                    yield seg

        def render_str(self, text: str, **kwargs: Any) -> Any:
            # (a string escaped before it is measured: a table's column fits the escapes)
            return super().render_str(terminal_safe(text), **kwargs)

    # no markup and no emoji codes unless a print asks: every text printed is what a task, a
    # grader or an agent wrote as much as ours ("[/nope]" in a grader's error was a MarkupError
    # traceback that ended the job, "[link=...]" a terminal hyperlink: helper-207)
    options.setdefault("markup", False)
    options.setdefault("emoji", False)
    return _Console(**options)


_UNSAFE_ON_A_TERMINAL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_IN_JSON = re.compile(r"[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """``text`` with each control character but newline and tab written as its escape
    (``\\x1b``, ``\\x07``, C1 controls such as ``\\x9b`` too, and the bidirectional
    overrides and isolates U+202A-U+202E, U+2066-U+2069 as ``\\u202e``): what a terminal would
    act on (ECMA-48 escape and control sequences: titles, colours, cursor moves) or that would
    reorder the text around it (Unicode's "Trojan Source" characters) shown instead."""
    if not _UNSAFE_ON_A_TERMINAL.search(text):
        return text
    return _UNSAFE_ON_A_TERMINAL.sub(_escaped, text)


def _escaped(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class TerminalSafeHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The last-resort logging handler of the command line: each record's line on stderr as
    Python's own writes it (the message alone), terminal-safe (:func:`terminal_safe`)."""

    def __init__(self, level: int) -> None:
        super().__init__(sys.stderr)
        self.setLevel(level)

    def format(self, record: logging.LogRecord) -> str:
        return terminal_safe(super().format(record))


def echo_json(text: str) -> None:
    """Print JSON text on stdout, terminal-safe (:func:`json_terminal_safe`): every ``--json``
    output (a task's name held U+202E and C1 controls printed raw: helper-207)."""
    typer.echo(json_terminal_safe(text))


def json_terminal_safe(text: str) -> str:
    """JSON text (``json.dumps``, ``model_dump_json``) with the characters they leave raw that
    a terminal acts on (DEL and C1 controls, the bidirectional overrides) written as ``\\u``
    escapes: the same JSON, safe to print (C0 controls are escaped already)."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _console(name: str) -> Console:
    """``console`` (stdout) or ``err_console`` (stderr): a rich console made on first use, so
    a command that prints nothing through rich (``clawrig version``) never imports rich."""
    made = globals().get(name)
    if made is None:
        made = globals()[name] = _new_console(stderr=name == "err_console")
    return made


def __getattr__(name: str) -> Any:
    """``from clawrig.cli.common import console, err_console`` (:func:`_console`)."""
    if name in ("console", "err_console"):
        return _console(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_click_errors = sys.modules[typer.BadParameter.__module__]
"""click's exception module as typer uses it (typer >= 0.29 vendors click as ``typer._click``)."""


def stdout_console() -> Console:
    """The stdout console; a wide one when stdout is not a terminal (a file, a pipe), so task
    ids and trial folders in tables are never cut or wrapped."""

    out = _console("console")
    return out if out.is_terminal else _new_console(width=240, soft_wrap=False)


def fail(message: str, code: int = 2) -> None:
    """Print ``clawrig: error: <message>`` on stderr and exit with ``code``."""
    _error_line(message)
    raise typer.Exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, timeout) outside the job's event loop, raised like Ctrl-C's
    KeyboardInterrupt: :func:`run_guarded` exits 143 (128 + 15)."""

    signum = signal.SIGTERM


_TERMINATED = [False]
"""True once SIGTERM was raised as :class:`Terminated`: an exception a library made of it
(pydantic wraps one raised while it builds a schema in its own error) is said as the
interruption it was (:func:`run_guarded`; helper-162: a traceback, exit 1)."""


_T = TypeVar("_T")


def warn_gone_trials(job_dir: os.PathLike[str], what: str) -> None:
    """Print on stderr a warning per summary of ``job_dir`` that lists trial folders that are
    gone (:func:`clawrig.runner.batch.gone_trial_lines`): an export of such a job holds the
    trials found, beside a summary's numbers that still count the gone ones (helper-192)."""
    from pathlib import Path

    from clawrig.runner.batch import gone_trial_lines

    for line in gone_trial_lines([Path(job_dir)], what):
        _console("err_console").print(f"warning: {line}", highlight=False, soft_wrap=True)


def run_async(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(main)`` where SIGTERM, as Ctrl-C does there, cancels ``main`` (its
    clean-ups run: sandboxes stopped, temporary folders removed) and then raises
    :class:`Terminated` (exit 143). :class:`Terminated` raised by the handler inside the event
    loop cut whatever callback ran short (a progress line half printed) and destroyed the
    sandboxes' stops it left pending ("Task was destroyed but it is pending"). SIGINT stops it
    even when the process started with it ignored. Returns what ``main`` returns; raises what
    it raises (a Ctrl-C: KeyboardInterrupt)."""
    import asyncio

    termed: list[bool] = []

    async def guarded() -> _T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        held = signal.getsignal(signal.SIGTERM)

        def on_term() -> None:
            termed.append(True)
            _TERMINATED[0] = True
            if task is not None:
                task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_term)
        try:
            return await main
        finally:
            loop.remove_signal_handler(signal.SIGTERM)  # (which puts SIG_DFL back)
            if held is not None:
                signal.signal(signal.SIGTERM, held)

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started with SIGINT ignored (`&` in a script): a SIGINT still stops it, as it stops
        # clawrig run and serve (helper-179: verify ran on to the end, exit 0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        if termed:
            raise Terminated() from None
        raise
    if termed:  # (main took the cancellation as its end)
        raise Terminated()
    return result


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """While the body runs (a report being written), a first Ctrl-C or SIGTERM waits for it to
    end, then is raised as usual (KeyboardInterrupt, :class:`Terminated`), so one signal
    leaves the whole report on stdout (helper-180: a SIGTERM while ``verify --json`` wrote to
    a slow reader left cut JSON). A second exits at once (130 / 143), the report cut where
    it was: the way out of a write that a reader never takes."""
    from clawrig.held_signals import HeldSignals

    held = HeldSignals()
    held.hold()
    try:
        yield
    finally:
        held.release()
    if held.signum is not None:
        raise_signal(held.signum)


def raise_signal(signum: int) -> NoReturn:
    """Raise a signal that was held as it would have been raised: SIGTERM as
    :class:`Terminated`, SIGINT as KeyboardInterrupt."""
    if signum == signal.SIGTERM:
        _TERMINATED[0] = True
        raise Terminated()
    raise KeyboardInterrupt()


def terminate_like_ctrl_c() -> None:
    """Make SIGTERM raise :class:`Terminated` (Python's default is to die at once, with no
    message and no clean-up); a running job's loop handles it as a first Ctrl-C
    (:func:`clawrig.runner.batch.run_job`)."""

    def raise_terminated(signum: int, frame: object) -> None:
        _TERMINATED[0] = True
        raise Terminated()

    signal.signal(signal.SIGTERM, raise_terminated)
    atexit.register(_ignore_signals_at_exit)  # runs after the atexit clean-ups made later


def _ignore_signals_at_exit() -> None:
    """SIGINT and SIGTERM ignored from the last ``atexit`` callback on: Python's finalization
    after it puts their default action (die) back, so a second Ctrl-C a few milliseconds late
    killed a job that had ended on the first (exit -2 instead of its 130; the clean-up before
    it still exits at once on a second one: :func:`clawrig.runner.batch.run_job`)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


class _Interrupted(Exception):  # noqa: N818 - a signal, said as such
    """A Ctrl-C or SIGTERM (:class:`Terminated`) out of a command, carried past typer, which
    turns a KeyboardInterrupt into a silent exit 130 whatever the signal was."""

    def __init__(self, signum: int, after_job: bool = False) -> None:
        super().__init__(signum)
        self.signum = signum
        self.after_job = after_job
        """It came after every trial of a job had ended (:class:`InterruptedAfterJob`)."""


def _interrupts_pass_typer(command: Any) -> Any:
    """``command`` (the root click command), its ``make_context`` (the arguments parsed, a
    subcommand's module loaded) and ``invoke`` (subcommands run within it) re-raising a
    KeyboardInterrupt as :class:`_Interrupted` for :func:`run_guarded` (helper-161: a SIGTERM
    while a subcommand's module loaded became typer's silent exit 130)."""

    def guard(method: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except KeyboardInterrupt as exc:
                after_job = isinstance(exc, InterruptedAfterJob)
                raise _Interrupted(getattr(exc, "signum", signal.SIGINT), after_job) from None

        return guarded

    command.invoke = guard(command.invoke)
    command.make_context = guard(command.make_context)
    return command


def run_guarded(app: Callable[..., object]) -> int:
    """Run a typer app; turn every error a user can cause into one line on stderr and an exit
    code, never a traceback or a boxed panel. Once it has the exit code, a Ctrl-C or SIGTERM
    is ignored, so the process's exit clean-ups (its mounts, temporary folders) run whole
    (helper-162: a SIGTERM then raised in them, cut them short with a traceback, exit 0); a
    second one exits at once with that code (helper-163: with every signal ignored, an exit
    waiting for a thread still blocked could not be stopped at all).

    The app runs in click's non-standalone mode so its usage errors (unknown option, missing
    argument, a value out of range) reach here: one line naming the option and the command's
    ``--help``, exit 2. clawrig's own errors: :class:`UserError` exit 2, other
    :class:`ClawrigError` exit 1; Ctrl-C exit 130, SIGTERM 143 (128 + the signal), wherever it
    comes (typer alone would exit 130 for either, silently).
    """
    code = 1  # (a harness bug's traceback on its way out)
    try:
        code = _run_guarded(app)
        return code
    finally:
        _second_signal_exits(code)


def _second_signal_exits(code: int) -> None:
    """From now on the first Ctrl-C or SIGTERM is ignored and a second exits at once with
    ``code`` (:func:`run_guarded`; what is left mounted the next clawrig start sweeps)."""
    seen = [0]

    def on_signal(signum: int, frame: object) -> None:
        seen[0] += 1
        if seen[0] > 1:
            os._exit(code)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)


def _run_guarded(app: Callable[..., object]) -> int:
    """:func:`run_guarded`'s body."""
    from clawrig.cli import end_start_guard

    end_start_guard()
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        # every command, not only those that ask (run, serve): SIGTERM's default killed
        # clawrig grade, verify ... with no line, exit -15 (helper-159)
        terminate_like_ctrl_c()
    piped = _stdout_is_pipe()
    try:
        result = _interrupts_pass_typer(app)(standalone_mode=False, prog_name="clawrig")
    except SystemExit as exc:
        if exc.code == 1 and piped and _stdout_dropped():
            # a console of a library's (typer's --help) whose pipe's reader went: rich exits
            # 1 then, which reads as a trial left unscored; as SIGPIPE would end it instead
            return 128 + signal.SIGPIPE
        return exit_code_of(exc.code)
    except (KeyboardInterrupt, typer.Abort, _Interrupted) as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        name = "" if signum == signal.SIGINT else f" ({signal.Signals(signum).name})"
        # (its table and summary line are printed above: every trial had ended)
        after = (
            " as the job ended: every trial had ended" if getattr(exc, "after_job", False) else ""
        )
        _console("err_console").print(f"clawrig: interrupted{name}{after}", highlight=False)
        return 128 + signum
    except _click_errors.UsageError as exc:
        if not exc.format_message():  # no arguments: the help was printed already
            return exc.exit_code
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        # typer validates choices with pydantic, whose messages start "Value error, "
        _error_line(f"{exc.format_message().replace('Value error, ', '')}{where}")
        return exc.exit_code
    except _click_errors.ClickException as exc:
        _error_line(exc.format_message())
        return exc.exit_code
    except UserError as exc:
        _error_line(str(exc))
        return 2
    except ClawrigError as exc:
        _error_line(str(exc))
        return 1
    except BrokenPipeError:  # a plain write to a pipe whose reader went: as SIGPIPE would end it
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # (the exit's flush must not fail again)
        os.close(devnull)
        return 128 + signal.SIGPIPE
    except Exception:
        if not _TERMINATED[0]:
            raise  # a harness bug: its traceback
        _console("err_console").print("clawrig: interrupted (SIGTERM)")
        return 128 + signal.SIGTERM
    # non-standalone click returns an Exit's code (typer.Exit(n)) or the command's own value
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def _stdout_is_pipe() -> bool:
    """True when this process's stdout is a pipe (``clawrig ... | head``)."""
    try:
        return stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError):
        return False


def _stdout_dropped() -> bool:
    """True when stdout is /dev/null now: rich put it there when the pipe's reader went."""
    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(os.devnull))
    except (OSError, ValueError):
        return False


def _error_line(message: str) -> None:
    """``clawrig: error: <message>`` on stderr (the message printed as is, never as markup)."""
    from rich.markup import escape

    _console("err_console").print(
        f"[bold red]clawrig: error:[/] {escape(message)}",
        highlight=False,
        soft_wrap=True,
        markup=True,
    )


def exit_code_of(code: object) -> int:
    """The process exit code for a SystemExit code (None means success; text means 1)."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1
