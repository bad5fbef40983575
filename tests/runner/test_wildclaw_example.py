"""The bundled WildClawBench-format example (examples/wildclaw): Markdown tasks with embedded
graders, workspace folders (exec/, tmp/, gt/) and a warmup that starts a service in the
sandbox; driven by a scripted model through the native agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrig.runner.batch import run_job
from clawrig.runner.regrade import regrade_trial
from clawrig.runner.trial import TrialServices
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_tasks
from clawrig.testing.scripted_server import call, reply
from clawrig.transcript import read_openclaw_jsonl

pytestmark = pytest.mark.sandbox

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wildclaw"


def responder(request: dict):
    first = request["messages"][0]["content"]
    turns = sum(1 for m in request["messages"] if m.get("role") == "assistant")
    if "notes.txt" in first:
        steps = [
            reply(tool_calls=[call("exec", {"command": "wc -w < /tmp_workspace/notes.txt"})]),
            reply(
                tool_calls=[
                    call(
                        "write",
                        {"path": "/tmp_workspace/results/count.json", "content": '{"words": 11}\n'},
                    )
                ]
            ),
            reply("11 words"),
        ]
    else:
        fetch = (
            'mkdir -p /tmp_workspace/results && python3 -c "import json, urllib.request; '
            "print(json.load(urllib.request.urlopen('http://localhost:8000/status.json'))"
            "['build'])\" > /tmp_workspace/results/build.txt; cat "
            "/tmp_workspace/results/build.txt; ls /tmp_workspace"
        )
        steps = [reply(tool_calls=[call("exec", {"command": fetch})]), reply("saved")]
    return steps[min(turns, len(steps) - 1)]


async def test_example_suite_runs_and_scores(scripted_server, tmp_path):
    tasks = load_tasks(EXAMPLE / "tasks")
    assert [t.id for t in tasks] == [
        "01_Productivity_Flow_task_1_word_count",
        "01_Productivity_Flow_task_2_local_service",
    ]
    assert all(t.workspace.is_present for t in tasks) and tasks[1].warmup
    srv = scripted_server(responder=responder)
    job = JobConfig(
        suite_path=EXAMPLE / "tasks",
        output=tmp_path / "out",
        trial=TrialConfig(agent="native", model="scripted/x"),
    )
    summary = await run_job(job, tasks, TrialServices(model=srv.chat_model()))
    assert summary["error_count"] == 0
    assert [r["score"] for r in summary["tasks"]] == [1.0, 1.0]
    # the agent saw the build id, and /tmp_workspace held only its results: the warmup had
    # removed the tmp/ fixture and gt/ was not there yet
    chat = read_openclaw_jsonl(next((tmp_path / "out").glob("*local_service/*/chat.jsonl")))
    (result,) = [m for m in chat.messages if m.role == "toolResult"]
    assert result.text.splitlines() == ["b-20261129.7", "results", "[exit code 0]"]
    # re-graded from their folders (no model server): the recorded scores again
    srv.stop()
    for row in summary["tasks"]:
        report = await regrade_trial(tmp_path / "out" / row["trial"])
        assert report.same and report.after.score == report.before.score == 1.0
