"""The cyclic garbage collector's set-up for a process that runs trials for a long time: the
``clawrig run`` harness, its worker processes, a Ray node's worker and ``clawrig serve``.

Such a process builds ~10^6 objects at start-up (modules, pydantic models, the suite's tasks)
that live as long as it does. :func:`settle` freezes them out of every collection
(``gc.freeze``), once the start-up is done; the process keeps the collector off until then.

A finished trial is freed by reference counting: it leaves nothing of its own in reference
cycles (~6 objects a trial in all, of CPython's socket transports; tests/runner/test_heap.py).
Before those cycles were broken each trial left ~590 objects, its whole state, which only a
full collection freed. So the collector runs for the heap's growth alone, and
:data:`THRESHOLDS` lets it run less often than CPython's (700, 10, 10): a young collection
every 10,000 net allocations instead of 700. Measured on 2 cores (issue 19): 500 trials at
``-p 500`` (2 s model calls) spent 0.8 s of the harness's CPU in the collector instead of 3.2 s
(1,190 young, 108 middle, 9 full collections at CPython's); 3,000 trials at ``-p 16`` 0.25 s
instead of 5.1 s, the harness's memory the same at every point (108-155 MB; what grows is each
finished trial's result, kept for the summary). What the collector could leave uncollected is
bounded by the three thresholds' product, 10^6 objects, as CPython's bound it by 70,000; larger
thresholds, (50000, 20, 10), bounded it by 10^7, which before the cycles were broken let a
15,000-trial job grow by ~10 MB every 500 trials. Source: the ``gc`` module's documentation;
CPython's ``Modules/gcmodule.c``.
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 10, 10)
"""``gc.set_threshold`` of a process that runs trials (module docs): net allocations of
collector-tracked objects between young collections, young collections between middle
ones, middle ones between full ones."""


def settle() -> None:
    """Freeze every object that exists now out of the collector's reach (``gc.freeze``: the
    process's long-lived start-up objects), set :data:`THRESHOLDS` and turn the collector on
    (a process that runs trials turns it off while it starts: the start-up makes no cycles
    worth a pass). Call once, when the process's start-up is done."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    gc.enable()
