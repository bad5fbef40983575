"""The ``clawrig`` command line (typer)."""

import os
import signal
import sys
from typing import Any

# httpx's package imports its command-line client (httpx._main) when it is imported, and that
# imports click, pygments and rich's syntax highlighting: ~0.2 s of CPU at the start of every
# `clawrig run` (its gateway uses httpx), for a CLI clawrig never calls. A None entry makes
# that one import fail, which httpx expects (it then defines a ``main`` that says its CLI
# extras are missing); the rest of httpx is unchanged, and the `httpx` command, its own
# process, still works. Only when httpx is not imported yet (not to undo a real one), and only
# for the command line: a program that imports clawrig as a library keeps its httpx whole.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def _interrupted_at_start(signum: int, frame: object) -> None:
    """SIGINT while the ``clawrig`` command imports its modules (typer and the rest, ~60 ms):
    the one line and exit status :func:`clawrig.cli.common.run_guarded` gives an interrupt,
    not a KeyboardInterrupt traceback out of an import (a red-team finding). Nothing has
    started yet, so nothing needs stopping."""
    said = "" if signum == signal.SIGINT else f" ({signal.Signals(signum).name})"
    os.write(2, f"clawrig: interrupted{said}\n".encode())
    os._exit(128 + signum)


_DEFAULTS: dict[signal.Signals, Any] = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: signal.SIG_DFL,
}
"""The handlers :func:`_interrupted_at_start` stands in for while the command starts:
Python's own (SIGTERM: die with no word; helper-159 saw exit -15, no line, in the first
~0.3 s)."""


def end_start_guard() -> None:
    """The command's own handling of Ctrl-C and SIGTERM begins
    (:func:`clawrig.cli.common.run_guarded`): Python's default handlers again, where
    :func:`_interrupted_at_start` was put."""
    for signum, default in _DEFAULTS.items():
        if signal.getsignal(signum) is _interrupted_at_start:
            signal.signal(signum, default)


# Only for the console script (a program importing clawrig's CLI modules keeps its handler),
# and only over Python's default one.
if os.path.basename(sys.argv[0] if sys.argv else "") == "clawrig":
    for _signum, _default in _DEFAULTS.items():
        if signal.getsignal(_signum) is _default:
            signal.signal(_signum, _interrupted_at_start)
