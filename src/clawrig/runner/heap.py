"""The cyclic garbage collector's set-up for a process that runs trials for a long time: the
``clawrig run`` harness, its worker processes, a Ray node's worker and ``clawrig serve``.

Such a process builds ~10^6 objects at start-up (modules, pydantic models, the suite's tasks)
that live as long as it does. :func:`settle` freezes them out of every collection
(``gc.freeze``), once the start-up is done; the process keeps the collector off until then.

The thresholds stay CPython's (700, 10, 10), measured against larger ones (issue 19):
with 500 trials alive the default's ~1,200 young, ~110 middle and 9 full collections cost
3.3-3.5 s of the harness's ~30 s of CPU (a full pass over the live trials' heap ~230 ms), and
(50000, 20, 10) cut that to 0.3 s (harness CPU per trial 53 -> 47 ms at ``-p 500``, 64 -> 50 ms
at ``-p 1000``). But trials leave ~300 objects each in reference cycles that outlive young
collections, and with full collections that rare the harness grew without bound: from 383 to
484 MB between a 15,000-trial job's 2,800th and 8,700th trial, no full collection run (a red
team's run); (50000, 20, 2) still ran none in 3,000 trials and peaked at 510 MB. Breaking those
cycles at a trial's end would let reference counting free a trial and leave the collector
little to do. Source: the ``gc`` module's documentation; CPython's ``Modules/gcmodule.c``.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Freeze every object that exists now out of the collector's reach (``gc.freeze``: the
    process's long-lived start-up objects) and turn the collector on (a process that runs
    trials turns it off while it starts: the start-up makes no cycles worth a pass). Call
    once, when the process's start-up is done."""
    gc.freeze()
    gc.enable()
