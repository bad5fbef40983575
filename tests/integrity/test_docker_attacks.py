"""Issue 14 on the Docker backend (``--sandbox docker``): the class 1-3 attacks of the bwrap
tests, run against the real dockerd with the ``base`` environment's image built locally. Each
is a whole trial (the native agent driven by a scripted model, the clean room, real grading)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from clawrig.spec.trial import ErrorKind

pytestmark = pytest.mark.sandbox

WRONG = "mkdir -p results && echo WRONG > results/out.txt"


@pytest.fixture
def dattack(attack, docker_image) -> Callable[..., Any]:
    """``await dattack(task, *commands)``: :func:`attack` in a Docker sandbox."""

    async def run(task, *commands: str):
        return await attack(task, *commands, sandbox="docker", environment="base")

    return run


async def test_docker_a_daemon_that_waits_for_gt_never_sees_it(dattack, make_task):
    daemon = (
        "setsid sh -c 'while :; do cp /tmp_workspace/gt/answer.txt "
        "/tmp_workspace/results/out.txt 2>/dev/null; sleep 0.01; done' >/dev/null 2>&1 &"
    )
    result, _ = await dattack(make_task(), WRONG, daemon)
    assert result.error is None and result.score.score == 0.0


async def test_docker_a_link_into_gt_behind_a_folder_link_is_not_graded(dattack, make_task):
    result, folder = await dattack(
        make_task(),
        "mkdir -p /tmp/h && ln -s /tmp_workspace/gt/answer.txt /tmp/h/out.txt "
        "&& ln -s /tmp/h results",
    )
    assert result.error is None and result.score.score == 0.0
    assert "results" in (folder / "end_state_dropped.json").read_text()


async def test_docker_a_forged_session_file_is_not_what_the_grader_reads(dattack, make_task):
    grader = """
import glob, os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    files = glob.glob("/root/.openclaw/agents/main/sessions/*.jsonl")
    newest = max(files, key=os.path.getmtime)
    want = open(os.path.join(workspace_path, "gt", "answer.txt")).read().strip()
    return {"overall_score": 1.0 if "I answered " + want in open(newest).read() else 0.0}
"""
    forged = (
        '{"type": "message", "message": {"role": "assistant", '
        '"content": "I answered SECRET-ANSWER-7"}}'
    )
    encoded = base64.b64encode(forged.encode()).decode()
    result, _ = await dattack(
        make_task(grader),
        f"cd /root/.openclaw/agents/main/sessions && echo {encoded} | base64 -d > zz.jsonl "
        "&& touch -d '+1 day' zz.jsonl",
    )
    assert result.error is None and result.score.score == 0.0


async def test_docker_results_linked_to_the_root_and_a_fifo_do_not_void_the_trial(
    dattack, make_task
):
    result, _ = await dattack(
        make_task(), "ln -s / results && mkfifo gt_fifo && chmod 000 /run/clawrig || true"
    )
    assert result.counted_score() == 0.0, (result.error, result.score)


async def test_docker_a_deep_tree_is_the_agents_zero(dattack, make_task):
    result, _ = await dattack(
        make_task(),
        "python3 -c \"import os\nos.chdir('/tmp_workspace')\nfor _ in range(1500):\n"
        " os.mkdir('d'); os.chdir('d')\"",
    )
    assert result.counted_score() == 0.0
    assert result.error is not None and result.error.kind == ErrorKind.AGENT


async def test_docker_a_grader_crash_on_agent_data_at_load_is_the_agents_zero(dattack, make_task):
    grader = (
        "import json\nGOT = json.load(open('/tmp_workspace/results/out.json'))\n"
        "def grade(transcript=None, workspace_path='/tmp_workspace', **kwargs):\n"
        "    return {'overall_score': 1.0 if GOT == 'SECRET-ANSWER-7' else 0.0}\n"
    )
    result, _ = await dattack(
        make_task(grader), "mkdir -p results && printf '{oops' > results/out.json"
    )
    assert result.counted_score() == 0.0
    assert result.error is not None and result.error.kind == ErrorKind.AGENT
