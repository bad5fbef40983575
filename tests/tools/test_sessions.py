"""sessions_* / subagents / session_status with real sub-agents on the same bwrap sandbox.

The runner below is a real (scripted, model-free) sub-agent: it runs its task and every
message it is sent as exec tool calls through the Toolset in the shared sandbox, records them
in its own history and answers with the outputs. ``wait-for-steer`` makes it wait for a message.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from clawrig.tools import Session, SessionManager, ToolContext, Toolset

TOOLS = Toolset("coding")


async def shell_runner(session: Session) -> str:
    ctx = session.context
    assert ctx is not None and ctx.session_key == session.key
    commands = session.drain_inbox()
    if session.runs == 1:
        commands = [session.task.split("\n\n")[0], *commands]  # not the attachment list
    outputs = []
    while commands:
        cmd = commands.pop(0)
        if cmd == "explode":
            raise RuntimeError("the sub-agent crashed")
        if cmd == "wait-for-steer":  # unless a message came before the run started
            if not commands:
                await session.wait_inbox(30)
            commands.extend(session.drain_inbox())
            continue
        call_id = f"call_{len(session.messages)}"
        args = json.dumps({"command": cmd})
        session.record(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "exec", "arguments": args},
                    }
                ],
            }
        )
        r = await TOOLS.call(ctx, "exec", args)
        session.record({"role": "tool", "tool_call_id": call_id, "name": "exec", "content": r.text})
        outputs.append(r.text)
    return "\n".join(outputs)


@pytest.fixture
def mgr(ctx: ToolContext) -> SessionManager:
    m = SessionManager(shell_runner)
    ctx.sessions = m
    return m


def body(r) -> dict:
    assert not r.is_error, r.text
    return json.loads(r.text)


async def test_spawn_yield_list_history(call, mgr, workspace: Path) -> None:
    task = "echo sub > /tmp_workspace/sub.txt; echo hello-from-sub"
    r = body(await call("sessions_spawn", {"task": task, "label": "worker"}))
    assert r["status"] == "accepted"
    key = r["childSessionKey"]
    assert key == "agent:main:subagent:1" and r["label"] == "worker"
    y = await call("sessions_yield", {"message": "waiting for the worker"})
    assert y.details["yielded"] is True
    assert body(y)["results"] == [
        {
            "sessionKey": key,
            "label": "worker",
            "status": "done",
            "result": "hello-from-sub\n[exit code 0]",
        }
    ]
    assert (workspace / "sub.txt").read_text() == "sub\n"  # the same sandbox and workspace
    # a second yield has nothing left to hand over
    assert body(await call("sessions_yield", {}))["results"] == []

    listed = body(await call("sessions_list", {}))
    assert sorted(s["sessionKey"] for s in listed["sessions"]) == [key, "main"]
    subs = body(await call("sessions_list", {"kinds": ["subagent"], "messageLimit": 1}))
    assert [s["sessionKey"] for s in subs["sessions"]] == [key]
    assert subs["sessions"][0]["messages"][0]["content"] == "hello-from-sub\n[exit code 0]"

    h = body(await call("sessions_history", {"sessionKey": "worker"}))
    assert [(m["role"], m["content"]) for m in h["messages"]] == [
        ("user", task),
        ("assistant", "hello-from-sub\n[exit code 0]"),
    ]
    h = body(await call("sessions_history", {"sessionKey": key, "includeTools": True}))
    assert [m["role"] for m in h["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert json.loads(h["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {
        "command": task
    }
    h = body(await call("sessions_history", {"sessionKey": key, "includeTools": True, "limit": 1}))
    assert [m["role"] for m in h["messages"]] == ["assistant"]
    # the main session recorded its yield note
    main = body(await call("sessions_history", {"sessionKey": "main"}))["messages"]
    assert main[0]["content"] == "waiting for the worker"


async def test_send_resumes_and_waits_for_the_reply(call, mgr) -> None:
    key = body(await call("sessions_spawn", {"task": "echo first", "timeoutSeconds": 30}))
    assert key["status"] == "done" and key["result"] == "first\n[exit code 0]"
    child = key["childSessionKey"]
    r = body(
        await call(
            "sessions_send", {"sessionKey": child, "message": "echo again", "timeoutSeconds": 30}
        )
    )
    assert r == {"status": "ok", "sessionKey": child, "reply": "again\n[exit code 0]"}
    r = body(await call("sessions_send", {"sessionKey": child, "message": "echo later"}))
    assert r == {"status": "sent", "sessionKey": child}
    await mgr.session(child)._task
    assert mgr.session(child).result == "later\n[exit code 0]"
    assert mgr.session(child).runs == 3


async def test_subagents_list_steer_kill(call, mgr) -> None:
    a = body(await call("sessions_spawn", {"task": "wait-for-steer", "label": "a"}))[
        "childSessionKey"
    ]
    b = body(await call("sessions_spawn", {"task": "wait-for-steer", "label": "b"}))[
        "childSessionKey"
    ]
    listed = body(await call("subagents", {"action": "list"}))
    assert [(s["sessionKey"], s["status"]) for s in listed["subagents"]] == [
        (a, "running"),
        (b, "running"),
    ]
    r = body(await call("subagents", {"action": "steer", "target": "a", "message": "echo steered"}))
    assert r == {"status": "steered", "targets": [a]}
    r = body(await call("subagents", {"action": "kill", "target": "b"}))
    assert r == {"status": "ok", "killed": [b]}
    results = body(await call("sessions_yield", {}))["results"]
    while len(results) < 2:
        results += body(await call("sessions_yield", {}))["results"]
    by_key = {x["sessionKey"]: x for x in results}
    assert by_key[a]["status"] == "done" and by_key[a]["result"] == "steered\n[exit code 0]"
    assert by_key[b]["status"] == "killed" and by_key[b]["result"] is None
    # steering or resending to a killed one is refused
    r = await call("subagents", {"action": "steer", "target": "b", "message": "x"})
    assert r.is_error and r.text.startswith(f"subagents: {b} is not running (status killed)")
    r = await call("sessions_send", {"sessionKey": "b", "message": "x"})
    assert r.is_error and r.text == f"sessions_send: session {b} was killed; spawn a new sub-agent"


async def test_session_status_and_model_override(call, mgr) -> None:
    s = body(await call("session_status", {}))
    assert (s["sessionKey"], s["kind"], s["status"]) == ("main", "main", "idle")
    child = body(await call("sessions_spawn", {"task": "echo x", "timeoutSeconds": 30}))
    key = child["childSessionKey"]
    s = body(await call("session_status", {"sessionKey": key, "model": "openrouter/some/model"}))
    assert s["status"] == "done" and s["model"] == "openrouter/some/model"
    assert s["note"].startswith("model override 'openrouter/some/model' set")
    assert mgr.session(key).model == "openrouter/some/model"
    main = body(await call("session_status", {}))
    assert main["subagents"] == {"running": 0, "finished": 1}


async def test_failures_and_timeouts_of_sub_agents(call, mgr) -> None:
    r = body(await call("sessions_spawn", {"task": "explode", "timeoutSeconds": 30}))
    assert r["status"] == "failed" and r["error"] == "RuntimeError: the sub-agent crashed"
    r = body(
        await call(
            "sessions_spawn",
            {"task": "wait-for-steer", "runTimeoutSeconds": 0.3, "timeoutSeconds": 30},
        )
    )
    assert r["status"] == "timeout" and r["error"] == "run timed out after 0.3 s"


async def test_a_sub_agent_talks_to_main(call, ctx, mgr) -> None:
    child = body(await call("sessions_spawn", {"task": "echo x", "timeoutSeconds": 30}))
    child_ctx = mgr.session(child["childSessionKey"]).context
    r = await call("sessions_send", {"sessionKey": "main", "message": "hi main"}, child_ctx)
    assert body(r) == {"status": "sent", "sessionKey": "main"}
    assert mgr.session("main").drain_inbox() == ["hi main"]
    # sub-agents may not spawn their own (max depth 1)
    r = await call("sessions_spawn", {"task": "echo y"}, child_ctx)
    assert r.is_error
    assert r.text == (
        f"sessions_spawn: session {child['childSessionKey']} may not spawn sub-agents (max depth 1)"
    )
    # the child shares the sandbox and the cron scheduler, not the exec session table
    assert child_ctx.sandbox is ctx.sandbox
    assert child_ctx.cron is ctx.cron and ctx.cron is not None
    assert child_ctx.state is not ctx.state


async def test_attachments_and_cleanup(call, mgr, workspace: Path) -> None:
    blob = base64.b64encode(b"\x00\x01binary").decode()
    r = body(
        await call(
            "sessions_spawn",
            {
                "task": "ls /tmp_workspace/.attachments/1",
                "attachments": [
                    {"name": "a.txt", "content": "hi"},
                    {"name": "b.bin", "content": blob, "encoding": "base64"},
                ],
                "cleanup": "delete",
                "timeoutSeconds": 30,
            },
        )
    )
    assert r["attachments"] == [
        "/tmp_workspace/.attachments/1/a.txt",
        "/tmp_workspace/.attachments/1/b.bin",
    ]
    assert r["result"] == "a.txt\nb.bin\n[exit code 0]"
    assert (workspace / ".attachments/1/b.bin").read_bytes() == b"\x00\x01binary"
    task = mgr.session(r["childSessionKey"]).task
    assert task.endswith(
        "Attached files:\n- /tmp_workspace/.attachments/1/a.txt"
        "\n- /tmp_workspace/.attachments/1/b.bin"
    )
    # cleanup=delete: forgotten once its result was handed over
    r2 = body(await call("sessions_spawn", {"task": "echo gone", "cleanup": "delete"}))
    await call("sessions_yield", {})
    keys = [s["sessionKey"] for s in body(await call("sessions_list", {}))["sessions"]]
    assert r2["childSessionKey"] not in keys


async def test_session_tool_errors(call, ctx, mgr) -> None:
    bad_name = [{"name": "../x", "content": "a"}]
    bad_b64 = [{"name": "x", "content": "%%%", "encoding": "base64"}]
    cases = [
        ("sessions_spawn", {"task": "  "}, "sessions_spawn: `task` is empty"),
        ("sessions_spawn", {"task": "x", "runtime": "acp"},
         "sessions_spawn: runtime 'acp' is not available"),
        ("sessions_spawn", {"task": "x", "attachments": bad_name},
         "sessions_spawn: attachments[0].name '../x' must be a plain file name"),
        ("sessions_spawn", {"task": "x", "attachments": bad_b64},
         "sessions_spawn: attachments[0].content is not valid base64"),
        ("sessions_spawn", {"task": "x", "resumeSessionId": "nope"},
         "sessions_spawn: no session 'nope'"),
        ("sessions_history", {"sessionKey": "nope"},
         "sessions_history: no session 'nope' (known sessions: main)"),
        ("sessions_send", {"message": "hi"},
         "sessions_send: name the target with `sessionKey` or `label`"),
        ("sessions_send", {"sessionKey": "main", "message": "hi"},
         "sessions_send: a session cannot send a message to itself"),
        ("sessions_list", {"kinds": ["cron"]}, "sessions_list: unknown kinds ['cron']"),
        ("session_status", {"sessionKey": "nope"}, "session_status: no session 'nope'"),
        ("subagents", {"action": "kill"}, "subagents: name the sub-agent with `target`"),
        ("subagents", {"action": "kill", "target": "zed"},
         "subagents: no sub-agent 'zed' of this session (known: none)"),
        ("subagents", {"action": "steer", "target": "all"}, "subagents: steer needs `message`"),
        ("subagents", {"action": "kill", "target": "last"},
         "subagents: this session has no sub-agents"),
    ]  # fmt: skip
    for name, args, expected in cases:
        r = await call(name, args)
        assert r.is_error, (name, args, r.text)
        assert r.text.startswith(expected), (name, args, r.text)
    await call("sessions_spawn", {"task": "wait-for-steer", "label": "dup"})
    r = await call("sessions_spawn", {"task": "x", "label": "dup"})
    assert r.is_error and r.text == "sessions_spawn: label 'dup' is already used by another session"
    # no runner: sub-agents are unavailable, other session tools still work
    ctx.sessions = SessionManager(None)
    r = await call("sessions_spawn", {"task": "x"})
    assert r.is_error
    assert r.text == "sessions_spawn: sub-agents are not available in this trial (no agent runner)"
    assert body(await call("sessions_list", {}))["count"] == 1
    await mgr.close()


async def test_a_closed_manager_runs_no_sub_agent_again(call, mgr) -> None:
    """At the trial's end close() drops the sessions' references back to it (cycles that kept
    a trial for the cyclic collector); a message to a finished sub-agent then would start a
    run that close() had already cleared: it is refused."""
    spawned = body(await call("sessions_spawn", {"task": "echo first", "timeoutSeconds": 30}))
    child = mgr.session(spawned["childSessionKey"])
    assert child.status == "done" and child._manager is mgr
    await mgr.close()
    assert child._manager is None and child.context is None and mgr.runner is None
    with pytest.raises(ValueError, match="the trial is ending"):
        mgr.send("main", child, "echo again")
    assert child.runs == 1
