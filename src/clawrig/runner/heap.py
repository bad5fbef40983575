"""The cyclic garbage collector's settings for a process that runs trials for a long time: the
``clawrig run`` harness, its worker processes, a Ray node's worker and ``clawrig serve``.

Such a process builds ~10^6 objects at start-up (modules, pydantic models, the suite's tasks)
that live as long as it does, then keeps every live trial's objects (transcripts, sandboxes'
clients, asyncio tasks) for as long as the trial runs: ~2.5 * 10^6 tracked objects with 500
trials alive. CPython's default thresholds (700, 10, 10: a young collection every 700 net
allocations, a full one every 100 young ones once the old generation grew by a quarter) then
walk that heap again and again: with 500 trials alive, ~1,200 young, ~110 middle and 9 full
collections, 3.3-3.5 s of the harness's ~30 s of CPU (11%; a full pass ~230 ms).

:func:`settle` moves what exists at that moment out of every collection (``gc.freeze``) and
sets :data:`THRESHOLDS`: a young collection every 50,000 net allocations (~7 trials' worth),
a middle one every 20 of those, a full one every 10 middle ones (~10^7 net allocations, about
1,300 trials) once the old generation grew by a quarter. The cycles a trial leaves (~100
objects: exceptions' tracebacks, finished tasks) are still collected, later; the harness's
peak memory did not change (196 -> 199 MB for 500 trials at ``-p 500``,
``benchmarks/throughput.py``). Source: the ``gc`` module's documentation and CPython's
``Modules/gcmodule.c`` (3.11).
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 10)
"""``gc.set_threshold`` arguments (module docs): net allocations of tracked objects between
young collections, young collections per middle one, middle ones per full one."""


def settle() -> None:
    """Freeze every object that exists now out of the collector's reach (``gc.freeze``: the
    process's long-lived start-up objects), set :data:`THRESHOLDS` and turn the collector on
    (a process that runs trials turns it off while it starts: the start-up makes no cycles
    worth a pass). Call once, when the process's start-up is done."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    gc.enable()
