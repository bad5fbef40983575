"""The native agent's sub-agents (sessions_spawn) and cron messages, end to end: real bwrap
sandbox, real tools, a scripted model that answers each session by its first message."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrig.runner.trial import TrialServices, run_trial
from clawrig.spec.job import TrialConfig
from clawrig.spec.trial import ErrorKind
from clawrig.tasks.registry import load_tasks
from clawrig.testing.scripted_server import call, error, reply
from clawrig.transcript import read_openclaw_jsonl

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
SUB_TASK = "Write the word delegated to /tmp_workspace/sub.txt"


def _turns(request: dict) -> int:
    return sum(1 for m in request["messages"] if m.get("role") == "assistant")


def responder(request: dict):
    first = request["messages"][0]["content"]
    n = _turns(request)
    if first == SUB_TASK:  # the sub-agent's session
        if n == 0:
            return reply(tool_calls=[call("exec", {"command": "echo delegated > sub.txt"})])
        return reply("sub-agent wrote sub.txt")
    if n == 0:
        return reply(tool_calls=[call("sessions_spawn", {"task": SUB_TASK, "label": "writer"})])
    if n == 1:
        return reply(tool_calls=[call("sessions_yield", {"message": "waiting for writer"})])
    return reply("main: the sub-agent is done")


async def test_sessions_spawn_runs_a_real_subagent(scripted_server, tmp_path):
    task = next(t for t in load_tasks(REPO / "suites" / "demo") if t.id == "000015")
    srv = scripted_server(responder=responder)
    result, folder = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/x"),
        tmp_path,
        services=TrialServices(model=srv.chat_model()),
    )
    assert result.error is None
    assert (folder / "end_state" / "sub.txt").read_text() == "delegated\n"
    subs = list((folder / "subagents").glob("*.jsonl"))
    assert len(subs) == 1
    sub = read_openclaw_jsonl(subs[0])
    assert sub.messages[0].text == SUB_TASK and sub.final_text() == "sub-agent wrote sub.txt"
    main = read_openclaw_jsonl(folder / "chat.jsonl")
    assert main.final_text() == "main: the sub-agent is done"
    # 3 main requests + 2 sub-agent requests, all counted in the trial's usage
    assert result.usage.request_count == 5 and len(srv.requests) == 5


def cron_responder(request: dict):
    n = _turns(request)
    if n == 0:
        job = {
            "name": "ping",
            "schedule": {"kind": "delay", "delayMs": 50},
            "payload": {"kind": "message", "text": "time to check"},
        }
        return reply(tool_calls=[call("cron", {"action": "add", "job": job})])
    if n == 1:
        return reply(tool_calls=[call("exec", {"command": "sleep 0.3"})])
    return reply(
        "saw: "
        + " | ".join(
            m["content"]
            for m in request["messages"]
            if m.get("role") == "user"
            and isinstance(m.get("content"), str)
            and "time to check" in m["content"]
        )
    )


async def test_cron_message_reaches_the_agent_between_turns(scripted_server, tmp_path):
    task = next(t for t in load_tasks(REPO / "suites" / "demo") if t.id == "000015")
    srv = scripted_server(responder=cron_responder)
    result, folder = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/x"),
        tmp_path,
        services=TrialServices(model=srv.chat_model()),
    )
    assert result.error is None
    final = read_openclaw_jsonl(folder / "chat.jsonl").final_text()
    assert "time to check" in final and final.startswith("saw: [cron ")


def outage_responder(request: dict):
    """The main agent spawns a sub-agent and waits; the provider fails the sub-agent's request
    (HTTP 500 on every retry)."""
    if request["messages"][0]["content"] == SUB_TASK:
        return error(500, "provider down")
    n = _turns(request)
    if n == 0:
        return reply(tool_calls=[call("sessions_spawn", {"task": SUB_TASK, "label": "writer"})])
    if n == 1:
        return reply(tool_calls=[call("sessions_yield", {"message": "waiting for writer"})])
    return reply("main: the sub-agent failed, done anyway")


async def test_a_provider_failure_in_a_subagent_is_the_trials_infrastructure_error(
    scripted_server, tmp_path
):
    task = next(t for t in load_tasks(REPO / "suites" / "demo") if t.id == "000015")
    srv = scripted_server(responder=outage_responder)
    result, _ = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/x"),
        tmp_path,
        services=TrialServices(model=srv.chat_model()),
    )
    # not a failed sub-agent the agent is scored with: the trial's infrastructure error
    assert result.error is not None, result.score
    assert result.error.kind == ErrorKind.INFRASTRUCTURE and result.error.retryable
    assert "provider down" in result.error.message
    assert result.score is None
