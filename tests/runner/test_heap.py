"""clawrig.runner.heap: start-up objects frozen out of the collector, which is on with larger
thresholds; a finished trial leaves nothing of clawrig's in reference cycles."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clawrig.testing.scripted_server import Reply, call, reply

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


def _run_and_count_garbage(
    bench: Path, runs: int, out: Path, base_url: str, *extra: str
) -> dict[str, Any]:
    """``clawrig run`` of ``bench``'s tasks x ``runs`` into ``out``; what the collector then
    finds unreachable: {"garbage": count, "clawrig": {clawrig type: count}}."""
    env = dict(os.environ, SCRIPTED_BASE_URL=base_url)
    args = ["run", str(bench / "tasks"), "-m", "scripted/test", "--runs", str(runs), "-p", "4"]
    done = subprocess.run(
        [sys.executable, "-c", CYCLES_PROGRAM, *args, "-o", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]  # (1: some trials errored)
    summary = json.loads(next(out.glob("summary_*.json")).read_text())
    assert len(summary["tasks"]) == 3 * runs
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def _task_number(request: dict[str, Any]) -> int:
    first = request["messages"][0]["content"]
    match = re.search(r"TASKNUM=(\d+)", first if isinstance(first, str) else json.dumps(first))
    return int(match.group(1)) if match else 0


def _tool_results(request: dict[str, Any]) -> int:
    return sum(1 for m in request["messages"] if m.get("role") == "tool")


def provider_down_for_odd_tasks(request: dict[str, Any]) -> Reply:
    """Odd tasks: the provider answers 500 until the retries run out (an infrastructure
    error); even ones are answered at once."""
    if _task_number(request) % 2:
        return Reply(error=500, error_message="upstream down", retry_after=0)
    return reply("done")


def background_then_answer(request: dict[str, Any]) -> Reply:
    """A background command, a foreground one that yields while running, then an answer."""
    done = _tool_results(request)
    if done == 0:
        return reply(tool_calls=[call("exec", {"command": "sleep 100", "background": True})])
    if done == 1:
        return reply(tool_calls=[call("exec", {"command": "sleep 30", "yieldMs": 200})])
    return reply("done")


def sub_agent_provider_down(request: dict[str, Any]) -> Reply:
    """The main agent spawns a sub-agent, whose requests the provider refuses (503: the
    sub-agent's run ends on a provider error, which the trial then ends on)."""
    first = request["messages"][0]["content"]
    if isinstance(first, str) and first.startswith("SUB"):
        return Reply(error=503, error_message="sub-agent's provider down", retry_after=0)
    done = _tool_results(request)
    if done == 0:
        task = f"SUB TASKNUM={_task_number(request)}"
        return reply(tool_calls=[call("sessions_spawn", {"task": task})])
    if done == 1:
        return reply(tool_calls=[call("sessions_yield", {"message": "wait"})])
    return reply("done")


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


@pytest.mark.sandbox
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "responder", [provider_down_for_odd_tasks, background_then_answer, sub_agent_provider_down]
)
def test_a_failed_or_busy_trial_leaves_nothing_of_clawrigs_either(
    responder: Any, mini_bench: Any, scripted_server: Any, tmp_path: Path
) -> None:
    """Trials that end on a provider's failure (the agent's, a sub-agent's) or with commands
    still running in the background leave none of clawrig's objects in reference cycles.
    Before (a red team's counts, objects left a trial): a failure raised from the model
    client's frame held that frame, and through tenacity's attempt state the agent loop's
    (816: the whole trial); a sub-agent's failure kept by its session manager (2,540); a
    background run's cancelled watchdog (111)."""
    bench = mini_bench(3)
    srv = scripted_server(responder=responder)
    found = _run_and_count_garbage(bench, 2, tmp_path / "out", srv.base_url)
    assert found["clawrig"] == {}, found
