"""clawrig.runner.heap.settle: start-up objects frozen out of the collector, which is on."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import gc, weakref
gc.disable()
class Node:
    pass
def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    del a, b
    return ref
before = cycle()  # start-up garbage: frozen, never collected
from clawrig.runner.heap import settle
settle()
after = cycle()
gc.collect()
print(gc.isenabled(), gc.get_threshold(), before() is not None, after() is None)
"""


def test_settle_freezes_what_exists_and_keeps_cpythons_thresholds() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    # enabled with CPython's thresholds (larger ones let a long job's harness grow: module
    # docs); the cycle made before settle() survives a full collection, the later one does not
    assert out == ["True", "(700,", "10,", "10)", "True", "True"]
