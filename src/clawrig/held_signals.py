"""Ctrl-C and SIGTERM held while work that must end whole runs (a report being written, a
job's summary and clean-up after its trials ended), then acted on.

A first signal while held is recorded (:attr:`HeldSignals.signum`); a second exits the process
at once with 128 + its number: the way out of work that never ends (a write a reader never
takes). What to do with a recorded signal once released is the holder's choice:
``clawrig.cli.common.signals_held`` raises it as usual, a job (``clawrig.runner.job.Job``)
raises :class:`clawrig.errors.InterruptedAfterJob` with its summary.
"""

from __future__ import annotations

import os
import signal
from typing import Any

HELD = (signal.SIGINT, signal.SIGTERM)


class HeldSignals:
    """SIGINT and SIGTERM held between :meth:`hold` and :meth:`release` (module docs);
    ``signum``: the first one that came meanwhile, or None. Only the main thread may hold
    (Python sets signal handlers there alone)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._before: dict[int, Any] = {}

    def hold(self) -> None:
        """From now on a first SIGINT or SIGTERM is recorded, a second exits at once."""

        def on_signal(signum: int, frame: object) -> None:
            if self.signum is not None:
                os._exit(128 + signum)
            self.signum = signum

        for signum in HELD:
            self._before.setdefault(signum, signal.getsignal(signum))
            signal.signal(signum, on_signal)

    def release(self) -> None:
        """The handlers from before :meth:`hold` again (nothing when it did not hold)."""
        for signum, handler in self._before.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._before = {}
