"""Attacks an agent can make on the harness through its tool calls (found by a red-team pass),
each run end to end: real bwrap sandbox, real tools, a scripted model, real grading."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrig.runner.trial import TrialServices, run_trial
from clawrig.spec.job import TrialConfig
from clawrig.tasks.registry import load_tasks
from clawrig.testing.scripted_server import call, reply
from clawrig.transcript import read_openclaw_jsonl

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def echo_task(mini_bench):
    """Task 2 of the mini bench: write ok-2 to results/out.txt; gt/expected.txt holds ok-2;
    a wrong answer that exists scores 0.25."""
    return load_tasks(mini_bench(2) / "tasks")[1]


async def _run(task, srv, tmp_path, **cfg):
    config = TrialConfig(agent="native", model="scripted/x", **cfg)
    return await run_trial(task, config, tmp_path, services=TrialServices(model=srv.chat_model()))


def _execs(*commands: str) -> list:
    return [reply(tool_calls=[call("exec", {"command": c})]) for c in commands] + [reply("done")]


async def test_the_supervisor_is_out_of_reach(echo_task, scripted_server, tmp_path):
    # its pipes to the harness (/proc/2/fd/0 and 1), its memory and environment, ptrace
    probe = (
        'echo \'{"id": 1, "ok": true}\' > /proc/2/fd/1; readlink /proc/2/fd/0; '
        "head -c1 /proc/2/mem; cat /proc/2/environ; "
        "python3 -c 'import ctypes; print(\"ptrace\", ctypes.CDLL(None).ptrace(16, 2, 0, 0))'; "
        "grep -E 'Cap(Eff|Prm)' /proc/self/status"
    )
    srv = scripted_server(_execs(probe))
    result, folder = await _run(echo_task, srv, tmp_path)
    out = [
        m for m in read_openclaw_jsonl(folder / "chat.jsonl").messages if m.role == "toolResult"
    ][0].text
    assert out.count("Permission denied") == 3 and "pipe:" not in out, out
    assert "ptrace -1" in out  # PTRACE_ATTACH refused
    assert "CapEff:\t0000000000000000" in out and result.error is None


async def test_stopping_or_killing_the_supervisor_scores_zero_not_an_abstention(
    echo_task, scripted_server, tmp_path
):
    for attack in ("kill -STOP 2", "kill -KILL 2"):
        srv = scripted_server(_execs(attack, "echo still here"))
        result, _ = await _run(echo_task, srv, tmp_path, call_timeout_s=2, timeout_multiplier=0.05)
        # the end state is graded in a clean room all the same (or the trial is the agent's
        # error): a 0 that counts either way, never a retried, uncounted trial
        assert result.counted_score() == 0.0, attack
        assert result.error is None or (
            result.error.kind == "agent" and not result.error.retryable
        ), attack


async def test_links_planted_into_gt_do_not_turn_a_wrong_answer_right(
    echo_task, scripted_server, tmp_path
):
    # the agent writes a wrong answer, then plants gt/expected.txt -> its answer file, and a
    # second results file linked to where the answer will appear
    attack = (
        "mkdir -p results gt && echo WRONG > results/out.txt && "
        "ln -s /tmp_workspace/results/out.txt gt/expected.txt && "
        "ln -s /tmp_workspace/gt/expected.txt results/copy.txt"
    )
    srv = scripted_server(_execs(attack))
    result, _ = await _run(echo_task, srv, tmp_path)
    assert result.error is None
    assert result.score.score == 0.25  # file exists, content wrong: not 1.0


async def test_a_fifo_where_the_transcript_goes_cannot_hang_the_trial(
    echo_task, scripted_server, tmp_path
):
    attack = (
        "mkdir -p /root/.openclaw/agents/main/sessions && rm -f "
        "/root/.openclaw/agents/main/sessions/chat.jsonl && mkfifo "
        "/root/.openclaw/agents/main/sessions/chat.jsonl && chmod 000 /tmp_workspace"
    )
    srv = scripted_server(_execs(attack))
    result, folder = await _run(echo_task, srv, tmp_path, call_timeout_s=10)
    assert result.error is None and result.score.score == 0.0  # graded normally: no answer
    assert read_openclaw_jsonl(folder / "chat.jsonl").final_text() == "done"


async def test_nul_bytes_and_deep_nesting_in_tool_arguments_are_tool_errors(
    echo_task, scripted_server, tmp_path
):
    deep = "[" * 5000 + "]" * 5000
    # an integer past Python's 4300-digit conversion limit: a plain ValueError (not a
    # JSONDecodeError) that voided the trial, retried with no folder (red-team 8, finding 4)
    huge = '{"command": "echo", "timeout": 1' + "0" * 5000 + "}"
    srv = scripted_server(
        [
            reply(tool_calls=[call("exec", {"command": "echo a\u0000b"})]),
            reply(tool_calls=[call("exec", '{"command": "true", "env": ' + deep + "}")]),
            reply(tool_calls=[call("read", {"path": "/tmp_workspace/\u0000x"})]),
            reply(tool_calls=[call("exec", huge)]),
            reply("done"),
        ]
    )
    result, folder = await _run(echo_task, srv, tmp_path)
    assert result.error is None and result.score.score == 0.0
    tr = read_openclaw_jsonl(folder / "chat.jsonl")
    results = [m for m in tr.messages if m.role == "toolResult"]
    assert len(results) == 4 and all(m.is_error for m in results)
    assert "Invalid JSON in the arguments of exec" in results[3].text
    assert "4300" in results[3].text  # the parser's own reason, for the model to read
    # the transcript holds the model's arguments as it sent them (the raw string)
    (last_call,) = [m for m in tr.messages if m.tool_calls][-1].tool_calls
    assert last_call.arguments == huge
    assert '"arguments":{"_raw":' in (folder / "chat.jsonl").read_text()


async def test_a_setuid_file_made_inside_is_not_setuid_outside(
    echo_task, scripted_server, tmp_path
):
    srv = scripted_server(_execs("cp /usr/bin/id suid && chmod 4755 suid && ls -l suid"))
    result, folder = await _run(echo_task, srv, tmp_path)
    copied = folder / "end_state" / "suid"
    assert copied.exists() and not copied.stat().st_mode & 0o6000


async def test_huge_background_output_does_not_flood_the_harness(
    echo_task, scripted_server, tmp_path
):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    srv = scripted_server(
        [
            reply(
                tool_calls=[
                    call(
                        "exec",
                        {"command": "head -c 300000000 /dev/zero | tr '\\0' x", "yieldMs": 10},
                    )
                ]
            ),
            reply(tool_calls=[call("exec", {"command": "sleep 3"})]),
            reply(tool_calls=[call("process", {"action": "log", "sessionId": "proc-1"})]),
            reply("done"),
        ]
    )
    result, _ = await _run(echo_task, srv, tmp_path)
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert result.error is None and grew_mb < 200, grew_mb
