"""examples/wildclaw-patterns end to end on bwrap with the scripted model: warmups that install
from a pip index and an npm registry on loopback (through the egress proxy, setup policy
``registries`` = this machine's configured index and registry), a skill copied to
/root/skills/<name>, a skill script that calls an LLM with the task's OPENROUTER_* settings
(served by the gateway), and a grader that asks an LLM judge (through the judge proxy)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from egress_helpers import NPM_PACKAGE, OUTSIDE

from clawrig.llm.gateway import RECORD_FILE, Gateway
from clawrig.runner.batch import run_job
from clawrig.runner.trial import TrialServices
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_tasks
from clawrig.testing.scripted_server import call, reply

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wildclaw-patterns"
QUESTION = "Which of Lisbon, Oslo, Kyiv is the capital of Portugal? Answer with the city only."

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap"),
]


def responder(request: dict):
    first = request["messages"][0]["content"]
    if first == QUESTION:  # the skill script's own call, through the gateway
        return reply("Lisbon")
    turns = sum(1 for m in request["messages"] if m.get("role") == "assistant")
    if "cities.txt" in first:
        command = (
            f"python3 /root/skills/ask_llm/ask.py '{QUESTION}' > /tmp_workspace/results/answer.txt"
            " && python3 -c 'import egress_probe; print(egress_probe.VALUE)'"
            " > /tmp_workspace/results/probe.txt"
        )
    elif "incident.txt" in first:
        command = (
            "echo 'A full cache broke the build; clearing it fixed it.'"
            " > /tmp_workspace/results/summary.txt"
        )
    else:
        command = f"{NPM_PACKAGE} > /tmp_workspace/results/npm.txt"
    steps = [reply(tool_calls=[call("exec", {"command": command})]), reply("done")]
    return steps[min(turns, len(steps) - 1)]


def judge(request: dict):
    assert "names the cause (cache)" in request["messages"][0]["content"]
    return reply("1.0")


async def test_patterns_suite(scripted_server, tmp_path, monkeypatch, package_index, npm_registry):
    monkeypatch.setenv("PIP_INDEX_URL", package_index)  # this machine's pip index
    monkeypatch.setenv("npm_config_registry", npm_registry)  # and npm registry
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-real-key-never-in-a-sandbox")
    tasks = load_tasks(EXAMPLE / "tasks")
    srv = scripted_server(responder=responder)
    judge_srv = scripted_server(responder=judge)
    job = JobConfig(
        suite_path=EXAMPLE / "tasks",
        output=tmp_path / "out",
        # the host's system and no warm snapshot: the installs run in each trial, so its
        # egress.jsonl shows them (tests/env covers environments and warm snapshots)
        trial=TrialConfig(
            agent="native", model="scripted/x", environment="host", warm_snapshots=False
        ),
    )
    with Gateway() as gateway:
        summary = await run_job(
            job,
            tasks,
            TrialServices(model=srv.chat_model(), judge=judge_srv.chat_model(), gateway=gateway),
        )
    out = tmp_path / "out"
    assert len(summary["tasks"]) == 3
    for row in summary["tasks"]:
        log = next(out.glob(f"{row['task_id']}/*/agent.log")).read_text()
        assert row["error"] is None and row["score"] == 1.0, (row, log)
    # the judge-using grader reached the judge through the judge proxy (recorded)
    judged = next(out.glob("*judged_summary/*/"))
    [judge_call] = [json.loads(x) for x in (judged / "judge_chat.jsonl").read_text().splitlines()]
    assert "names the cause (cache)" in json.dumps(judge_call)
    assert json.loads((judged / "score.json").read_text())["subscores"]["judge"] == 1.0
    # npm installed from the registry configured here, through the proxy, in the setup phase
    npm_log = next(out.glob("*npm_tool/*/egress.jsonl")).read_text().splitlines()
    assert npm_log
    assert {(json.loads(x)["phase"], json.loads(x)["verdict"]) for x in npm_log} == {
        ("setup", "allowed")
    }
    folder = next(out.glob("*skill_llm/*/"))
    score = json.loads((folder / "score.json").read_text())
    assert score["subscores"] == {"answer": 1.0, "probe": 1.0, "overall_score": 1.0}
    # the skill's call went through the gateway: recorded with the agent's two turns
    records = [json.loads(x) for x in (folder / RECORD_FILE).read_text().splitlines()]
    assert len(records) == 3
    asked = [r for r in records if r["request"]["messages"][0]["content"] == QUESTION]
    assert len(asked) == 1
    usage = json.loads((folder / "usage.json").read_text())
    assert usage["request_count"] == 3  # the skill's call counts in the trial's usage
    # the warmup's install went through the proxy in the setup phase; nothing in the agent's
    egress = [json.loads(x) for x in (folder / "egress.jsonl").read_text().splitlines()]
    assert egress and {(r["host"], r["phase"], r["verdict"]) for r in egress} == {
        (OUTSIDE, "setup", "allowed")
    }
    assert sum(r["bytes_down"] for r in egress) > 500  # the index page and the wheel
    # no real key in anything the sandbox produced
    for path in folder.rglob("*"):
        if path.is_file():
            assert "sk-real-key" not in path.read_text(errors="replace"), path
