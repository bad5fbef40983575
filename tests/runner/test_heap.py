"""clawrig.runner.heap: start-up objects frozen out of the collector, which is on with larger
thresholds; a finished trial leaves nothing of clawrig's in reference cycles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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


def test_settle_freezes_what_exists_and_sets_the_thresholds() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    # enabled with young collections every 10,000 allocations (module docs); the cycle made
    # before settle() survives a full collection, the later one does not
    assert out == ["True", "(10000,", "10,", "10)", "True", "True"]


CYCLES_PROGRAM = """
import atexit, collections, gc, json, sys
gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds unreachable is kept in gc.garbage

def report():
    gc.collect()
    ours = collections.Counter(
        type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("clawrig.")
    )
    print(json.dumps({"garbage": len(gc.garbage), "clawrig": ours}))

atexit.register(report)
sys.argv[0] = "clawrig"
from clawrig.cli.main import app
app()
"""


def _run_and_count_garbage(bench: Path, runs: int, out: Path, base_url: str) -> dict[str, Any]:
    """``clawrig run`` of ``bench``'s tasks x ``runs`` into ``out``; what the collector then
    finds unreachable: {"garbage": count, "clawrig": {clawrig type: count}}."""
    env = dict(os.environ, SCRIPTED_BASE_URL=base_url)
    args = ["run", str(bench / "tasks"), "-m", "scripted/test", "--runs", str(runs), "-p", "4"]
    done = subprocess.run(
        [sys.executable, "-c", CYCLES_PROGRAM, *args, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(next(out.glob("summary_*.json")).read_text())
    assert [t["error"] for t in summary["tasks"]] == [None] * (3 * runs)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.sandbox
@pytest.mark.timeout(300)
def test_a_finished_trial_leaves_nothing_for_the_cyclic_collector(
    mini_bench: Any, scripted_server: Any, even_responder: Any, tmp_path: Path
) -> None:
    """Reference counting frees a finished trial: ``clawrig run`` (bwrap, the native agent,
    the gateway, the warm pool) leaves none of clawrig's objects in reference cycles, and 12
    trials leave fewer than 10 unreachable objects a trial more than 3 do (the rest is the
    process's one-time garbage). Before the cycles were broken (the trial and its clock, a
    sandbox and its cancelled watchdog's traceback, the sub-agent sessions and their manager,
    tenacity's attempt state holding the result) each trial left ~590 objects, its whole
    state, until a full collection."""
    bench = mini_bench(3)
    srv = scripted_server(responder=even_responder)
    few = _run_and_count_garbage(bench, 1, tmp_path / "few", srv.base_url)
    many = _run_and_count_garbage(bench, 4, tmp_path / "many", srv.base_url)
    assert few["clawrig"] == {} and many["clawrig"] == {}
    assert many["garbage"] - few["garbage"] < 10 * 9, (few, many)
