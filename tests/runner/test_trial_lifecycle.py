"""The one trial lifecycle: Trial's phases, one TimeoutPlan, one module that starts a task's
sandbox, result.json written once before the folder's rename."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clawrig.runner.trial import TRIAL_OVERHEAD_S, TimeoutPlan, Trial, TrialServices, run_trial
from clawrig.spec.job import TrialConfig
from clawrig.spec.layout import TrialPaths
from clawrig.spec.trial import Usage
from clawrig.tasks.registry import load_tasks

SRC = Path(__file__).resolve().parents[2] / "src" / "clawrig"
DEMO = Path(__file__).resolve().parents[2] / "suites" / "demo"


def _demo(task_id: str):
    return next(t for t in load_tasks(DEMO) if t.id == task_id)


def _modules_matching(pattern: str) -> set[str]:
    regex = re.compile(pattern)
    return {
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if not p.is_relative_to(SRC / "sandbox") and regex.search(p.read_text("utf-8"))
    }


def test_only_the_trial_module_starts_a_task_sandbox():
    """create_sandbox / <sandbox>.start() outside the sandbox package: runner/trial.py, and
    env/warm.py, which makes a task's warm snapshot once, called only from Trial.sandbox_up
    (through env/system.prepare_system)."""
    starters = _modules_matching(r"create_sandbox\(|\b(sb|box|sandbox)\.start\(")
    assert starters == {"runner/trial.py", "env/warm.py"}
    assert _modules_matching(r"\bprepare_system\(") - {"env/system.py"} == {"runner/trial.py"}
    assert _modules_matching(r"\bensure_warm\(") - {"env/warm.py"} == {"env/system.py"}


def test_timeout_plan_is_computed_once_from_task_and_job():
    task = _demo("000001").model_copy(update={"timeout_seconds": 200.0})
    task.grader.timeout_seconds = 30.0
    plan = TimeoutPlan.of(task, TrialConfig(timeout_multiplier=2.5))
    assert (plan.agent_s, plan.grader_s, plan.command_s) == (500.0, 75.0, 500.0)
    assert plan.trial_s == 500.0 + 75.0 + TRIAL_OVERHEAD_S
    tiny = TimeoutPlan.of(task.model_copy(update={"timeout_seconds": 0.2}), TrialConfig())
    assert tiny.command_s == 1.0  # a command always gets at least a second
    limits = plan.limits(TrialConfig(memory_mb=256, max_processes=64))
    assert (limits.command_timeout_s, limits.trial_timeout_s) == (500.0, plan.trial_s)
    assert (limits.memory_bytes, limits.max_processes) == (256 * 1024**2, 64)


@pytest.mark.sandbox
async def test_the_agent_is_told_and_given_the_multiplied_limit(tmp_path):
    task = _demo("000001")  # timeout_seconds 600 in its intent
    config = TrialConfig(agent="nop", model="nop", timeout_multiplier=1.5)
    async with Trial(task, config, out_root=tmp_path) as trial:
        await trial.sandbox_up()
        limits = trial.box.config.limits
        assert limits.command_timeout_s == 900.0
        assert limits.trial_timeout_s == 900.0 + 120.0 * 1.5 + TRIAL_OVERHEAD_S
    result, folder = await run_trial(task, config, tmp_path)
    first = json.loads(TrialPaths(folder).dialog.read_text())["formatted_dialog"][0]["content"]
    assert "timeout of 900 seconds" in first and "600 seconds" not in first
    assert result.config == config  # recorded, so re-grading rebuilds the same plan
    assert set(result.timings) >= {"setup", "sandbox_start", "agent", "grading", "stop"}


@pytest.mark.sandbox
async def test_attempts_and_earlier_spend_are_in_the_folder_as_written(tmp_path):
    """The batch runner's retry bookkeeping goes into result.json before the folder's rename
    (never rewritten afterwards): the earlier attempts' spend as retried_usage, apart from the
    attempt's own usage (usage.json; an oracle trial calls no model)."""
    earlier = Usage(cost_usd=0.5, request_count=3, total_tokens=40)
    result, folder = await run_trial(
        _demo("000003"),
        TrialConfig(agent="oracle", model="oracle"),
        tmp_path,
        attempt=2,
        earlier=earlier,
    )
    paths = TrialPaths(folder)
    on_disk = json.loads(paths.result.read_text())
    usage = json.loads(paths.usage.read_text())
    assert on_disk["attempts"] == result.attempts == 2
    assert on_disk["retried_usage"] == {**Usage().model_dump(), "cost_usd": 0.5,
                                        "request_count": 3, "total_tokens": 40}  # fmt: skip
    assert on_disk["usage"] == usage
    assert usage["cost_usd"] == 0.0 and usage["request_count"] == 0
    assert usage["elapsed_time"] == pytest.approx(sum(on_disk["timings"].values()), abs=1e-5)
    assert on_disk["score"]["score"] == 1.0


@pytest.mark.sandbox
async def test_a_cancelled_trial_leaves_no_folder(tmp_path):
    import asyncio

    task = _demo("000001").model_copy(update={"warmup": ["sleep 30"]})
    job = asyncio.create_task(
        run_trial(task, TrialConfig(agent="nop", model="nop"), tmp_path, services=TrialServices())
    )
    await asyncio.sleep(2.0)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    # nothing of it stays, not even its task's folder, empty (no other trial of the task)
    assert list(tmp_path.iterdir()) == []


async def test_a_deadline_while_the_agents_service_calls_are_rebuilt_is_the_agents(tmp_path):
    """The clean room's phase deadline passing while the task's services are rebuilt from the
    agent's recorded calls (23,000 calendar creates outlasted the phase: an unscored setup
    error, helper-143) is the agent's error; the same deadline at any other point of the phase
    stays the setup's."""
    from clawrig.errors import TrialDeadline
    from clawrig.spec.trial import ErrorKind

    task = _demo("000001")
    async with Trial(task, TrialConfig(agent="nop", model="nop"), out_root=tmp_path) as trial:
        trial.phase = "gt_inject"
        deadline = TrialDeadline("gt_inject", 120.0)
        assert trial._error_of(deadline).kind == ErrorKind.SETUP
        trial.rebuilding_calls = 23_000
        error = trial._error_of(deadline)
        assert error.kind == ErrorKind.AGENT
        assert error.message == (
            "the gt_inject phase's deadline of 120 s passed in phase gt_inject while the task's "
            "services were rebuilt from the agent's 23,000 recorded calls for grading"
        )
