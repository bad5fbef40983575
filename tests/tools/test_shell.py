"""exec and process through Toolset.call in a real bwrap sandbox."""

from __future__ import annotations

import asyncio
from pathlib import Path

from clawrig.tools import ToolResult


async def test_exec_merges_output_and_reports_the_exit_code(call) -> None:
    r = await call("exec", {"command": "echo out; echo err >&2; echo out2; exit 3"})
    assert r.text == "out\nerr\nout2\n[exit code 3]"
    assert not r.is_error  # a failing command is a normal result; the model reads the code
    d = r.details
    assert (d["status"], d["exitCode"], d["aggregated"], d["cwd"]) == (
        "failed",
        3,
        "out\nerr\nout2",
        "/tmp_workspace",
    )
    assert isinstance(d["durationMs"], int) and d["durationMs"] >= 0
    r = await call("exec", {"command": "true"})
    assert r.text == "(no output)\n[exit code 0]"
    assert r.details["status"] == "completed"


async def test_exec_golden_demo_format(call, workspace: Path) -> None:
    # suites/demo 000004's last exec: grep -c finds nothing for one word, so exit 1
    (workspace / "results").mkdir()
    (workspace / "results/a.md").write_text("dry run by default\n")
    r = await call("exec", {"command": "printf 'x: '; grep -ci -- 'banned' results/a.md"})
    assert r.text == "x: 0\n[exit code 1]"


async def test_exec_workdir_env_and_policy_options(call, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    r = await call("exec", {"command": "pwd", "workdir": "sub"})
    assert r.text == "/tmp_workspace/sub\n[exit code 0]"
    assert r.details["cwd"] == "/tmp_workspace/sub"
    r = await call("exec", {"command": 'echo "$GREETING-$HOME"', "env": {"GREETING": "hi"}})
    assert r.text == "hi-/root\n[exit code 0]"
    r = await call("exec", {"command": "echo ok", "pty": True, "security": "full", "ask": "off"})
    assert r.text == "ok\n[exit code 0]"  # accepted and ignored
    r = await call("exec", {"command": "echo ok", "host": "sandbox"})
    assert r.text == "ok\n[exit code 0]"


async def test_exec_errors(call) -> None:
    r = await call("exec", {"command": "pwd", "workdir": "nowhere"})
    assert r.is_error and r.text == "exec: workdir /tmp_workspace/nowhere does not exist"
    r = await call("exec", {"command": "   "})
    assert r.is_error and r.text == "exec: `command` is empty"
    r = await call("exec", {"command": "id", "elevated": True})
    assert r.is_error and r.text.startswith("exec: elevated mode is not available")
    r = await call("exec", {"command": "id", "host": "gateway"})
    assert r.is_error and r.text.startswith("exec: host='gateway' is not available")
    r = await call("exec", {"command": "id", "timeout": 0})
    assert r.is_error and "`timeout` must be a finite positive number of seconds" in r.text
    r = await call("exec", {"command": "id", "yieldMs": -5})
    assert r.is_error and "`yieldMs` must be >= 0" in r.text


async def test_exec_timeout_kills_the_process_tree(call) -> None:
    r = await call(
        "exec",
        {
            "command": "sleep 60 & echo $! > /tmp_workspace/child.pid; echo started; wait",
            "timeout": 1,
        },
    )
    assert r.is_error
    assert r.text == ("started\n[timed out after 1 s: the process and its children were killed]")
    assert r.details["status"] == "timeout" and r.details["exitCode"] is None
    # the background child is gone too: no such process, or killed and not yet reaped by the
    # sandbox's init (a zombie, which kill -0 still finds: CI170 under load)
    alive = await call(
        "exec",
        {
            "command": "P=$(cat /tmp_workspace/child.pid); [ -d /proc/$P ] && "
            "! grep -q '^State:[[:space:]]*Z' /proc/$P/status"
        },
    )
    assert alive.details["exitCode"] != 0, alive.text


async def test_exec_long_output_keeps_head_and_tail(call, ctx) -> None:
    ctx.output_bytes = 1000
    r = await call("exec", {"command": "python3 -c \"print('A' * 2500 + 'B' * 2500)\""})
    # 5000 bytes into 1000: 500 head + 500 tail, 4000 omitted
    note = "\n[... 4000 bytes omitted: output truncated, head and tail kept ...]\n"
    assert r.text == "A" * 500 + note + "B" * 500 + "\n[exit code 0]"
    assert r.details["truncated"] is True


async def test_exec_output_cut_twice_says_every_byte_omitted(call, ctx, sandbox) -> None:
    """helper-195: the supervisor keeps 256 KiB of a command's output with its note in the
    middle, the tool's own cap (as large) then cut that note alone and said "[... 70 bytes
    omitted ...]" of 6.6 MB. The note counts what both cuts left out."""
    ctx.output_bytes = sandbox.config.limits.output_bytes
    half = ctx.output_bytes // 2
    full = "".join(f"{i}\n" for i in range(1, 1_000_001))
    r = await call("exec", {"command": "seq 1 1000000"})
    note = (
        f"\n[... {len(full) - 2 * half} bytes omitted: output truncated, head and tail kept ...]\n"
    )
    assert r.text == full[:half] + note + full[-half:].rstrip("\n") + "\n[exit code 0]"
    assert r.details["truncated"] is True
    # the tool's cap below the supervisor's: one note, every byte counted
    ctx.output_bytes = 1000
    r = await call("exec", {"command": "seq 1 1000000"})
    tail = full.rstrip("\n")[-500:]
    note = (
        f"\n[... {len(full) - 1 - 1000} bytes omitted: output truncated, head and tail kept ...]\n"
    )
    assert r.text == full[:500] + note + tail + "\n[exit code 0]"
    # a note the command prints itself is output, not a count (helper-198: one claiming
    # 5 bytes was taken for the supervisor's, whose count was lost)
    fake = "[... 5 bytes omitted: output truncated, head and tail kept ...]"
    r = await call(
        "exec", {"command": f"printf '\\n{fake}\\n'; head -c 6000000 /dev/zero | tr '\\0' A"}
    )
    printed = f"\n{fake}\n" + "A" * 6_000_000
    note = (
        f"\n[... {len(printed) - 1000} bytes omitted: output truncated, head and tail kept ...]\n"
    )
    assert r.text == printed[:500] + note + printed[-500:] + "\n[exit code 0]"
    # an output of newlines only: the trailing ones stripped take the supervisor's note's
    # last newline too; it is found all the same (helper-201: its bytes were counted as
    # output omitted), the stripped newlines counted nowhere
    r = await call("exec", {"command": "head -c 300000 /dev/zero | tr '\\0' '\\n'"})
    stripped = sandbox.config.limits.output_bytes // 2  # the supervisor's tail, all newlines
    omitted = 300_000 - 1000 - stripped
    note = f"\n[... {omitted} bytes omitted: output truncated, head and tail kept ...]\n"
    assert r.text == "\n" * 500 + note + "\n" * 500 + "\n[exit code 0]"


async def _poll_until_done(call, sid: str) -> ToolResult:
    out = []
    for _ in range(100):
        r = await call("process", {"action": "poll", "sessionId": sid, "timeout": 2000})
        body, status = r.text.rsplit("\n", 1)
        if body != "(no new output)":
            out.append(body)
        if status != "[still running]":
            return ToolResult(text="\n".join(out) + "\n" + status, details=r.details)
    raise AssertionError("the background command never ended")


async def test_a_background_commands_long_log_keeps_its_end(call, ctx) -> None:
    """helper-201: a background command's log was read up to 4 MiB: an exec that ended
    within its yieldMs showed that point as its output's "tail" (and a count of 4 MiB), and
    `process log` the lines there as its last lines."""
    full = "".join(f"{i}\n" for i in range(1, 1_000_001))  # 6.9 MB
    ctx.output_bytes = 1000
    r = await call("exec", {"command": "seq 1 1000000", "yieldMs": 60_000})
    note = f"\n[... {len(full) - 1000} bytes omitted: output truncated, head and tail kept ...]\n"
    assert r.text == full[:500] + note + full[-500:].rstrip("\n") + "\n[exit code 0]"
    assert r.details["truncated"] is True
    ctx.output_bytes = 200_000
    r = await call("exec", {"command": "seq 1 1000000", "background": True})
    done = await _poll_until_done(call, r.details["sessionId"])
    assert done.details["status"] == "completed"
    last = await call("process", {"action": "log", "sessionId": r.details["sessionId"], "limit": 2})
    assert last.text.startswith("999999\n1000000\n[lines "), last.text[:200]
    # still running at its yieldMs: the output so far is its head and tail too (it was the
    # first 4 MiB's: helper-202)
    ctx.output_bytes = 1000
    r = await call("exec", {"command": "seq 1 1000000; sleep 60", "yieldMs": 8000})
    assert r.text.startswith("Command still running"), r.text[:200]
    note = f"\n[... {len(full) - 1000} bytes omitted: output truncated, head and tail kept ...]\n"
    assert full[:500] + note + full[-500:].rstrip("\n") in r.text, r.text[-1500:]
    await call("process", {"action": "kill", "sessionId": r.details["sessionId"]})


async def test_background_poll_write_and_log(call) -> None:
    script = "echo start; read line; echo got:$line; echo l1; echo l2; echo l3"
    r = await call("exec", {"command": script, "background": True})
    assert not r.is_error
    sid = r.details["sessionId"]
    assert sid == "proc-1" and r.details["status"] == "running"
    assert r.text.startswith(f"Command still running (session {sid}, pid ")
    w = await call("process", {"action": "write", "sessionId": sid, "data": "hello\n"})
    assert w.text == f"Wrote 6 bytes to session {sid}."
    done = await _poll_until_done(call, sid)
    assert done.text == "start\ngot:hello\nl1\nl2\nl3\n[exit code 0]"
    assert done.details["status"] == "completed"
    # nothing new after the end
    r = await call("process", {"action": "poll", "sessionId": sid})
    assert r.text == "(no new output)\n[exit code 0]"
    # log: offset/limit in lines (0-based), limit alone = the last lines
    r = await call("process", {"action": "log", "sessionId": sid, "offset": 2, "limit": 2})
    assert r.text == "l1\nl2\n[lines 2-3 of 5 (0-based); exit code 0]"
    r = await call("process", {"action": "log", "sessionId": sid, "limit": 1})
    assert r.text == "l3\n[lines 4-4 of 5 (0-based); exit code 0]"
    r = await call("process", {"action": "log", "sessionId": sid})
    assert r.text.startswith("start\ngot:hello\nl1\nl2\nl3\n[lines 0-4 of 5")
    lst = await call("process", {"action": "list"})
    assert lst.details["sessions"][0]["sessionId"] == sid
    assert lst.details["sessions"][0]["status"] == "completed"
    r = await call("process", {"action": "write", "sessionId": sid, "data": "more"})
    assert r.is_error and r.text == (
        f"process: session {sid} has ended [exit code 0]; it takes no more input"
    )


async def test_send_keys_submit_and_paste(call) -> None:
    r = await call("exec", {"command": "cat", "background": True})
    sid = r.details["sessionId"]
    await call("process", {"action": "send-keys", "sessionId": sid, "keys": ["h", "i", "Enter"]})
    await call("process", {"action": "send-keys", "sessionId": sid, "hex": ["41", "0x0a"]})
    await call("process", {"action": "submit", "sessionId": sid, "data": "line"})
    await call("process", {"action": "paste", "sessionId": sid, "text": "pasted\n"})
    r = await call("process", {"action": "write", "sessionId": sid, "data": "", "eof": True})
    assert r.text == f"Wrote 0 bytes to session {sid} and closed stdin."
    done = await _poll_until_done(call, sid)
    assert done.text == "hi\nA\nline\npasted\n[exit code 0]"


async def test_process_kill_clear_remove(call) -> None:
    r = await call(
        "exec",
        {"command": "echo $$ > /tmp_workspace/bg.pid; exec sleep 60", "background": True},
    )
    sid = r.details["sessionId"]
    r = await call("process", {"action": "clear", "sessionId": sid})
    assert r.is_error and "is still running; kill it first" in r.text
    r = await call("process", {"action": "kill", "sessionId": sid})
    assert r.text == f"Killed session {sid}."
    gone = await call("exec", {"command": "kill -0 $(cat /tmp_workspace/bg.pid)"})
    assert gone.details["exitCode"] != 0
    r = await call("process", {"action": "poll", "sessionId": sid})
    assert r.text.endswith("[killed]")
    r = await call("process", {"action": "kill", "sessionId": sid})
    assert r.text == f"Session {sid} had already ended [killed]."
    r = await call("process", {"action": "clear", "sessionId": sid})
    assert r.text == f"Cleared session {sid}."
    # remove kills a running session and forgets it
    r = await call("exec", {"command": "sleep 60", "background": True})
    sid2 = r.details["sessionId"]
    assert sid2 == "proc-2"
    r = await call("process", {"action": "remove", "sessionId": sid2})
    assert r.text == f"Removed session {sid2}." and r.details["status"] == "killed"
    r = await call("process", {"action": "list"})
    assert r.text == "No background sessions."


async def test_process_errors(call) -> None:
    r = await call("process", {"action": "poll"})
    assert r.is_error and r.text == "process: action 'poll' needs `sessionId` (see action list)"
    r = await call("process", {"action": "poll", "sessionId": "proc-9"})
    assert r.is_error and r.text == "process: no session 'proc-9' (known sessions: none)"
    r = await call("process", {"action": "dance"})
    assert r.is_error and r.text.startswith("process: unknown action 'dance'; use one of list")
    r = await call("exec", {"command": "cat", "background": True})
    sid = r.details["sessionId"]
    r = await call("process", {"action": "send-keys", "sessionId": sid, "keys": ["Hyper"]})
    assert r.is_error and "unknown key 'Hyper'" in r.text
    r = await call("process", {"action": "send-keys", "sessionId": sid})
    assert r.is_error and "send-keys needs `keys`" in r.text
    r = await call("process", {"action": "send-keys", "sessionId": sid, "hex": ["zz"]})
    assert r.is_error and r.text.startswith("process: send-keys: ")
    r = await call("process", {"action": "write", "sessionId": sid})
    assert r.is_error and "write needs `data`" in r.text
    r = await call("process", {"action": "paste", "sessionId": sid})
    assert r.is_error and "paste needs `text`" in r.text
    await call("process", {"action": "write", "sessionId": sid, "data": "x", "eof": True})
    await _poll_until_done(call, sid)


async def test_yield_ms(call) -> None:
    # finishes within yieldMs: the ordinary result, no session left behind
    r = await call("exec", {"command": "echo quick", "yieldMs": 10_000})
    assert r.text == "quick\n[exit code 0]" and r.details["status"] == "completed"
    assert (await call("process", {"action": "list"})).text == "No background sessions."
    # still running after yieldMs: handed back as a session
    r = await call("exec", {"command": "echo early; sleep 1; echo late", "yieldMs": 200})
    assert r.details["status"] == "running"
    sid = r.details["sessionId"]
    assert r.text.endswith("Output so far:\nearly")
    done = await _poll_until_done(call, sid)
    assert done.text == "late\n[exit code 0]"


async def test_background_timeout_kills(call) -> None:
    r = await call("exec", {"command": "echo up; sleep 60", "background": True, "timeout": 0.5})
    sid = r.details["sessionId"]
    done = await _poll_until_done(call, sid)
    assert done.text == "up\n[timed out after 0.5 s: the process and its children were killed]"
    assert done.details["status"] == "timeout"


async def test_background_missing_workdir(call) -> None:
    r = await call("exec", {"command": "true", "background": True, "workdir": "/nope"})
    assert r.is_error and r.text == "exec: workdir /nope does not exist"


async def test_poll_hands_out_long_output_in_pieces(call, ctx) -> None:
    ctx.output_bytes = 100
    r = await call("exec", {"command": "printf '%0250d' 0", "background": True})
    sid = r.details["sessionId"]
    for _ in range(200):  # wait for the end without reading any output
        listed = await call("process", {"action": "list"})
        if listed.details["sessions"][0]["status"] != "running":
            break
        await asyncio.sleep(0.05)
    pieces = [await call("process", {"action": "poll", "sessionId": sid}) for _ in range(3)]
    assert [p.details["aggregated"] for p in pieces] == ["0" * 100, "0" * 100, "0" * 50]
    assert pieces[0].text == "0" * 100 + "\n[more output is waiting: poll again]\n[exit code 0]"
    assert pieces[2].text == "0" * 50 + "\n[exit code 0]"
