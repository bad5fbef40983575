"""The ``clawrig`` command line (typer)."""

import os
import signal
import sys

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
    os.write(2, b"clawrig: interrupted\n")
    os._exit(128 + signum)


def end_start_guard() -> None:
    """The command's own handling of Ctrl-C begins (:func:`clawrig.cli.common.run_guarded`):
    Python's default SIGINT handler again, where :func:`_interrupted_at_start` was put."""
    if signal.getsignal(signal.SIGINT) is _interrupted_at_start:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# Only for the console script (a program importing clawrig's CLI modules keeps its handler),
# and only over Python's default one.
if (
    os.path.basename(sys.argv[0] if sys.argv else "") == "clawrig"
    and signal.getsignal(signal.SIGINT) is signal.default_int_handler
):
    signal.signal(signal.SIGINT, _interrupted_at_start)
