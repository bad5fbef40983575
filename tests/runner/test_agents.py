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


async def run_demo_000015(srv, tmp_path):
    """One trial of demo 000015 by the native agent on ``srv``'s model: (result, folder)."""
    task = next(t for t in load_tasks(REPO / "suites" / "demo") if t.id == "000015")
    return await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/x"),
        tmp_path,
        services=TrialServices(model=srv.chat_model()),
    )


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
    srv = scripted_server(responder=responder)
    result, folder = await run_demo_000015(srv, tmp_path)
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
    srv = scripted_server(responder=cron_responder)
    result, folder = await run_demo_000015(srv, tmp_path)
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
    srv = scripted_server(responder=outage_responder)
    result, _ = await run_demo_000015(srv, tmp_path)
    # not a failed sub-agent the agent is scored with: the trial's infrastructure error
    assert result.error is not None, result.score
    assert result.error.kind == ErrorKind.INFRASTRUCTURE and result.error.retryable
    assert "provider down" in result.error.message
    assert result.score is None


def flood_responder(request: dict):
    """Three parallel exec calls printing 200,000 characters each, then an answer."""
    if _turns(request) == 0:
        cmd = "python3 -c 'print(\"x\" * 200000)'"
        return reply(tool_calls=[call("exec", {"command": cmd}) for _ in range(3)])
    sizes = [len(m["content"]) for m in request["messages"] if m.get("role") == "tool"]
    return reply(f"sizes {sizes}")


async def test_a_conversation_holds_at_most_its_limit_of_tool_output(
    scripted_server, tmp_path, monkeypatch
):
    """Past MAX_CONVERSATION_CHARS (lowered here to fit two results) a tool result's text is
    dropped for a note, an error result: 200 calls a turn of 256 KiB each took the harness to
    2.1 GB in three turns (helper-142). The model sees the note; the transcript keeps it."""
    from clawrig.agents import native

    monkeypatch.setattr(native, "MAX_CONVERSATION_CHARS", 500_000)
    srv = scripted_server(responder=flood_responder)
    result, folder = await run_demo_000015(srv, tmp_path)
    assert result.error is None
    first = len(srv.requests[-1]["messages"][0]["content"])  # (it counts too)
    seen = [m["content"] for m in srv.requests[-1]["messages"] if m.get("role") == "tool"]
    assert len(seen) == 3 and all(len(t) > 200_000 for t in seen[:2])  # (and the exit code)
    held = first + sum(len(t) for t in seen[:2])
    assert held <= 500_000 < held + len(seen[0])  # two fit, the third does not
    assert seen[2].startswith(f"[dropped by the harness: {len(seen[0]):,} characters; ")
    assert seen[2].endswith(" MiB of tool output and messages, its limit is 0 MiB]")
    chat = read_openclaw_jsonl(folder / "chat.jsonl")
    results = [m for m in chat.messages if m.role == "toolResult"]
    assert [m.is_error for m in results] == [False, False, True]
