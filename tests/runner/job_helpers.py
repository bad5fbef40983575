"""Helpers of the tests that run one job two ways and compare them (tests/runner/test_workers.py,
tests/ray/test_ray_executor.py): the job's config for the mini bench (tests/runner/conftest.py)
with the scripted model, its summary without what differs between two runs, and its trials as
result.json dicts; scripted model servers answering at :data:`COST` a request."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.testing.scripted_server import Reply, ScriptedServer

COST = 0.01
"""USD the scripted model charges per request (the tests' responders)."""
VOLATILE = {"job_id", "timestamp", "elapsed_s", "suite_path", "usage", "waits", "pooled"}
"""Summary fields that differ between any two runs of one job (ids, seconds, which sandboxes
the warm pool had started ahead; Ray's nodes keep none)."""


def job_config(bench: Path, out: Path, **kw: Any) -> JobConfig:
    """A job of the mini bench at ``bench`` into ``out`` with the scripted model."""
    return JobConfig(
        suite_path=bench / "tasks", output=out, trial=TrialConfig(model="scripted/test"), **kw
    )


def comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without what differs between two runs of the same job (ids, times)."""
    out = {k: v for k, v in summary.items() if k not in VOLATILE}
    out["tasks"] = sorted(
        (
            {k: v for k, v in t.items() if k not in ("trial", "elapsed_time")}
            for t in summary["tasks"]
        ),
        key=lambda t: (t["task_id"], t["run_index"]),
    )
    return out


def trials_of(out: Path) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """(task id, run index) -> the result.json of every finished trial folder of that trial."""
    found: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rj in out.glob("*/*/result.json"):
        if rj.parent.parent.name.startswith(("_", ".")):
            continue
        r = json.loads(rj.read_text())
        found.setdefault((r["task_id"], r["run_index"]), []).append(r)
    return found


@contextlib.contextmanager
def model_servers(solve: Callable[..., Reply]) -> Iterator[Callable[..., ScriptedServer]]:
    """``make(delay=0.0)``: a started scripted server answering with ``solve(request,
    cost=COST)`` after ``delay`` seconds; every server made is stopped at the end."""
    servers: list[ScriptedServer] = []

    def make(delay: float = 0.0) -> ScriptedServer:
        def responder(request: dict[str, Any]) -> Any:
            rep = solve(request, cost=COST)
            rep.delay = delay
            return rep

        srv = ScriptedServer(responder=responder).start()
        servers.append(srv)
        return srv

    try:
        yield make
    finally:
        for srv in servers:
            srv.stop()


def assert_even_job(summary: dict[str, Any], requests: int, out: Path, tasks: int = 8) -> None:
    """``summary`` and ``out`` hold a finished job of ``tasks`` mini bench tasks x 2 runs whose
    model (solve_even_tasks at :data:`COST`) answered ``requests`` requests: every trial once,
    even tasks 1.0 and odd 0.25, 2 requests a trial, each recorded in its folder."""
    found = trials_of(out)
    assert len(found) == 2 * tasks and all(len(v) == 1 for v in found.values())
    assert summary["error_count"] == 0 and summary["evaluated_count"] == 2 * tasks
    half = tasks // 2
    assert math.isclose(summary["overall_score"], (2 * half * 1.0 + 2 * half * 0.25) / (2 * tasks))
    assert requests == 2 * 2 * tasks
    assert math.isclose(summary["efficiency"]["total_cost_usd"], requests * COST)
    for folder in out.glob("*/scripted_test_*"):
        calls = (folder / "model_calls.jsonl").read_text().splitlines()
        assert len(calls) == 2 and (folder / "score.json").is_file()
