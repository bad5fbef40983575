"""Issue 14, class 1: free abstention. What goes wrong after the agent stops because of what the
agent left must count as the agent's 0, never as a retried, uncounted infrastructure or grading
error. Each attack runs a whole trial (real bwrap sandbox, scripted model, real grading)."""

from __future__ import annotations

import pytest

from clawrig.spec.trial import ErrorKind

pytestmark = pytest.mark.sandbox

JSON_GRADER = """
import json, os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    want = open(os.path.join(workspace_path, "gt", "answer.txt")).read().strip()
    with open(os.path.join(workspace_path, "results", "out.json")) as fh:
        got = json.load(fh)
    return {"overall_score": 1.0 if got == {"answer": want} else 0.0}
"""

REGEX_GRADER = """
import os, re
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    want = open(os.path.join(workspace_path, "gt", "answer.txt")).read().strip()
    text = open(os.path.join(workspace_path, "results", "out.txt")).read()
    runs = [ln for ln in text.splitlines() if re.match(r"^(a+)+$", ln)]  # backtracks
    return {"overall_score": 1.0 if want in text.split() else 0.0, "runs": len(runs)}
"""


def assert_counted_zero(result) -> None:
    """The trial counts as 0 and is not retried: graded 0, or an agent error."""
    assert result.counted_score() == 0.0, (result.error, result.score)
    if result.error is not None:
        assert result.error.kind == ErrorKind.AGENT and not result.error.retryable


async def test_a_grader_crash_on_deeply_nested_json_is_the_agents_zero(attack, make_task):
    task = make_task(JSON_GRADER)
    result, _ = await attack(
        task, "mkdir -p results && python3 -c \"print('[' * 200000)\" > results/out.json"
    )
    assert_counted_zero(result)
    assert result.error is not None and result.error.phase == "grading"
    assert "RecursionError" in result.score.details["stderr"]


async def test_a_grader_hung_by_catastrophic_backtracking_is_the_agents_zero(attack, make_task):
    task = make_task(REGEX_GRADER, grader_timeout_s=3)
    result, _ = await attack(
        task, "mkdir -p results && python3 -c \"print('a' * 40 + 'b')\" > results/out.txt"
    )
    assert_counted_zero(result)
    assert result.error is not None and "timed out" in result.error.message


async def test_a_fifo_the_grader_would_open_is_dropped_and_scored(attack, make_task):
    task = make_task()
    result, folder = await attack(task, "mkdir -p results && mkfifo results/out.txt")
    assert result.error is None and result.score.score == 0.0
    assert result.counted_score() == 0.0
    assert "results/out.txt" in (folder / "end_state_dropped.json").read_text()


async def test_a_link_to_an_endless_device_is_dropped_and_scored(attack, make_task):
    task = make_task()
    result, _ = await attack(task, "mkdir -p results && ln -s /dev/zero results/out.txt")
    assert result.error is None and result.score.score == 0.0


async def test_the_transcript_path_made_a_folder_does_not_void_the_trial(attack, make_task):
    task = make_task()
    session = "/root/.openclaw/agents/main/sessions/chat.jsonl"
    result, folder = await attack(
        task, f"rm -rf {session} && mkdir -p {session}/x && chmod 000 /root/.openclaw"
    )
    assert result.error is None and result.score.score == 0.0
    assert (folder / "chat.jsonl").is_file()


async def test_results_linked_to_the_root_does_not_void_the_trial(attack, make_task):
    task = make_task()
    result, folder = await attack(task, "ln -s / results && chmod 000 /run/clawrig")
    assert result.error is None and result.score.score == 0.0
    assert not (folder / "task_output").exists() or not any((folder / "task_output").iterdir())


async def test_a_workspace_deeper_than_the_cap_is_the_agents_zero(attack, make_task):
    task = make_task()
    deep = "/".join(["d"] * 140)
    result, _ = await attack(task, f"mkdir -p {deep} results && echo SECRET > results/out.txt")
    assert_counted_zero(result)
    assert result.error is not None and result.error.phase == "collect"
    assert "more than 128 folders deep" in result.error.message


async def test_a_grader_that_cannot_load_is_a_grading_error_not_the_agents(attack, make_task):
    # blame follows control the other way too: the task's own broken grader is not the agent's
    task = make_task("import clawrig_no_such_module\n" + JSON_GRADER)
    result, _ = await attack(task, "echo nothing")
    assert result.error is not None and result.error.kind == ErrorKind.GRADING
    assert result.counted_score() is None
