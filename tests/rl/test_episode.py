"""Episodes and groups on a demo task: real bwrap sandboxes, the real gateway, a scripted
OpenAI-compatible policy server on loopback, the task's own grader."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from clawrig.errors import UserError
from clawrig.llm.client import PROBE, RetryPolicy
from clawrig.rl import Rollouts, episode_from_trial, group_stats
from clawrig.rl.episode import _conversations
from clawrig.testing.scripted_server import call, error, reply, scripted_prompt_ids

from .conftest import DEMO, REWARD, RIGHT, WRONG, by_seed, files_text, write_answer

pytestmark = pytest.mark.sandbox

SECRET = "sk-trainer-0123456789-secret"


@pytest.fixture
async def env(tmp_path):
    rollouts = Rollouts(
        tmp_path / "out", retry=RetryPolicy(attempts=2, initial_s=0.001, max_s=0.01)
    )
    yield rollouts
    rollouts.close()


async def test_episode_on_demo_task(env, scripted_server, task_15):
    srv = scripted_server(
        [
            reply(tool_calls=[call("read", {"path": "/tmp_workspace/coauthorship.json"})]),
            write_answer(RIGHT),
            reply("The chain is Vikram Shah – Berta Alonso – Saif Hamdan."),
        ]
    )
    ep = await env.run_episode(
        task_15,
        base_url=srv.base_url,
        model="policy-7b",
        sampling={"temperature": 0.7, "top_k": 20, "max_tokens": 512},
        seed=11,
        api_key=SECRET,
        server="vllm",
    )
    assert ep.reward == REWARD[RIGHT] == task_15.expected_reward
    assert ep.stop_reason == "complete" and not ep.mask and ep.error is None
    assert ep.scores["valid_shortest"] == 1.0 and ep.scores["file_has_heading"] == 1.0
    assert len(ep.turns) == 3 and ep.usage.request_count == 3
    assert [t.finish_reason for t in ep.turns] == ["tool_calls", "tool_calls", "stop"]
    # token ids and logprobs: exactly what the server sent, turn by turn (vLLM's extensions)
    sent = srv.sent_tokens
    assert len(sent) == 3 and all(s["completion_token_ids"] for s in sent)
    assert [t.prompt_token_ids for t in ep.turns] == [s["prompt_token_ids"] for s in sent]
    assert [t.completion_token_ids for t in ep.turns] == [s["completion_token_ids"] for s in sent]
    assert [t.completion_logprobs for t in ep.turns] == [s["completion_logprobs"] for s in sent]
    assert ep.has_tokens
    # messages: OpenAI chat format, tool calls and results included, ending on the answer
    roles = [m["role"] for m in ep.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert ep.messages[1]["tool_calls"][0]["function"]["name"] == "read"
    assert ep.messages[-1]["content"].startswith("The chain is")
    assert {t["function"]["name"] for t in ep.tools} >= {"read", "write", "exec"}
    # what the policy server received: the trainer's sampling, seed, model id and key
    sent = srv.requests
    assert all(r["model"] == "policy-7b" for r in sent)
    assert all(r["temperature"] == 0.7 and r["top_k"] == 20 and r["seed"] == 11 for r in sent)
    assert all(r["max_tokens"] == 512 for r in sent)
    assert all(r["logprobs"] is True and r["return_token_ids"] is True for r in sent)
    assert all(h["authorization"] == f"Bearer {SECRET}" for h in srv.headers)
    # the trial folder is the episode; the trainer's key is nowhere in it
    assert ep.trial_dir is not None and (ep.trial_dir / "result.json").is_file()
    assert SECRET not in files_text(ep.trial_dir)
    again = episode_from_trial(ep.trial_dir, seed=11)
    assert again.model_dump() == ep.model_dump()


SUB = "SUB: write the shortest chain to /tmp_workspace/results/results.md"


def with_a_subagent(request):
    """Responder: the agent spawns a sub-agent, waits for it (sessions_yield) and ends; the
    sub-agent (its conversation opens with SUB) writes the right chain and ends."""
    messages = request["messages"]
    results = sum(1 for m in messages if m.get("role") == "tool")
    if messages[0]["content"] == SUB:
        return write_answer(RIGHT) if results == 0 else reply("sub done")
    if results == 0:
        return reply(tool_calls=[call("sessions_spawn", {"task": SUB})])
    if results == 1:
        return reply(tool_calls=[call("sessions_yield", {})])
    return reply("main done")


async def test_a_subagents_calls_are_not_the_agents_turns(env, scripted_server, task_15):
    """helper-213: a sub-agent's calls were among the episode's turns, so the ART adapter
    paired the agent's last message with a sub-agent's sampled call (its tokens, another
    prompt's). The turns are the agent's own conversation's; a sub-agent's are apart, with
    its session."""
    srv = scripted_server(responder=with_a_subagent)
    ep = await env.run_episode(task_15, base_url=srv.base_url, model="policy", server="vllm")
    assert ep.reward == REWARD[RIGHT] and ep.stop_reason == "complete"
    own = [r for r in srv.requests if r["messages"][0]["content"] != SUB]
    sub = [r for r in srv.requests if r["messages"][0]["content"] == SUB]
    assert (len(own), len(sub)) == (3, 2)
    # the turns: the agent's three calls in order, each with the prompt ids of its request
    # (the stand-in server's ids are a function of the request: scripted_prompt_ids)
    assert [t.prompt_token_ids for t in ep.turns] == [scripted_prompt_ids(r) for r in own]
    assert [t.session for t in ep.turns] == [None] * 3
    assert [t.prompt_token_ids for t in ep.subagent_turns] == [scripted_prompt_ids(r) for r in sub]
    spawned = json.loads(next(m for m in ep.messages if m["role"] == "tool")["content"])
    assert {t.session for t in ep.subagent_turns} == {spawned["childSessionKey"]}
    # the messages are the agent's conversation; its assistant messages are the turns' replies
    assert ep.messages[0]["content"] == own[0]["messages"][0]["content"]
    assert ep.messages[-1]["content"] == "main done"
    said = [m for m in ep.messages if m["role"] == "assistant"]
    assert len(said) == len(ep.turns)
    for msg, turn in zip(said, ep.turns, strict=True):
        assert turn.choice is not None
        assert turn.choice["message"].get("tool_calls") == msg.get("tool_calls")
    assert episode_from_trial(ep.trial_dir).model_dump() == ep.model_dump()


def test_calls_are_a_subagents_when_their_record_says_so():
    """A call's record names its sub-agent session (native agent): those are a sub-agent's,
    every other call the agent's, however it opens (a compacted conversation or a system
    prompt that changes stays the agent's)."""
    sys_a = {"role": "system", "content": "agent at 10:00"}

    def rec(*messages, session=None):
        r = {"request": {"messages": list(messages)}, "status": 200, "response": {}}
        if session is not None:
            r["session"] = session
        return r

    calls = [
        rec(sys_a, {"role": "user", "content": "the task"}),
        rec({"role": "user", "content": "sub task"}, session="agent:sub:1"),
        rec({"role": "system", "content": "agent at 10:01"}, {"role": "user", "content": "x"}),
        {"request": {}, "status": 200},  # kept no messages (past the file's size limit)
    ]
    own, others = _conversations(calls)
    assert own == [calls[0], calls[2], calls[3]]
    assert others == [("agent:sub:1", calls[1])]


async def test_server_down_is_masked_never_zero(env, scripted_server, task_15):
    srv = scripted_server([error(500, "upstream exploded")] * 20)
    ep = await env.run_episode(task_15, base_url=srv.base_url, model="policy")
    assert ep.mask is True
    assert ep.reward is None and ep.scores == {}
    assert ep.stop_reason == "infra_error"
    assert "500" in (ep.error or "")
    result = json.loads((ep.trial_dir / "result.json").read_text())
    assert result["error"]["kind"] == "infrastructure"
    assert len(srv.requests) == env.retry.attempts  # the gateway's retries, then given up
    # usage.retries counts them (docs/training.md), in the episode and in usage.json
    assert ep.usage.retries == env.retry.attempts - 1 == result["usage"]["retries"]
    assert json.loads((ep.trial_dir / "usage.json").read_text())["retries"] == ep.usage.retries


async def test_a_server_that_says_do_not_retry_is_masked_too(env, scripted_server, task_15):
    # an exhausted scripted server answers 500 with x-should-retry: false (a job stops at
    # once); for a trainer it is still the model server's failure: masked, never a 0 or a 4xx
    srv = scripted_server([])
    ep = await env.run_episode(task_15, base_url=srv.base_url, model="policy")
    assert ep.mask is True and ep.reward is None
    assert ep.stop_reason == "infra_error"
    assert "HTTP 500" in (ep.error or "")
    assert len(srv.requests) == 1
    assert ep.trial_dir is None  # refused before the server answered anything: no folder


async def test_a_prompt_refused_as_too_long_after_answers_is_context_length(
    env, scripted_server, task_15
):
    # the server answered an episode; the next one's prompt is refused as too long: the
    # episode's own refusal (masked context_length, its trial folder kept), not an outage
    too_long = "This model's maximum context length is 8192 tokens"
    srv = scripted_server([reply("done"), error(400, too_long), reply("OK")])
    first = await env.run_episode(task_15, base_url=srv.base_url, model="policy")
    assert first.error is None
    ep = await env.run_episode(task_15, base_url=srv.base_url, model="policy")
    assert ep.stop_reason == "context_length" and ep.mask and ep.reward is None
    assert too_long in (ep.error or "") and ep.trial_dir is not None
    # refused once, not retried; then the harness's plain request, answered
    assert len(srv.requests) == 3 and srv.requests[-1]["messages"] == PROBE


async def test_a_fresh_servers_first_prompt_refused_as_too_long_is_context_length(
    env, scripted_server, task_15
):
    # the first request a server gets, refused as too long; the same request with a plain
    # conversation (the episode's tools kept) is answered: the episode's own refusal (masked
    # context_length, its trial folder kept), not a ModelRequestError for the trainer
    too_long = "This model's maximum context length is 8192 tokens"

    def policy(request: dict):
        return reply("OK") if request["messages"] == PROBE else error(400, too_long)

    srv = scripted_server(responder=policy)
    ep = await env.run_episode(task_15, base_url=srv.base_url, model="policy")
    assert ep.stop_reason == "context_length" and ep.mask and ep.reward is None
    assert too_long in (ep.error or "") and ep.trial_dir is not None
    assert len(srv.requests) == 2 and srv.requests[1]["tools"] == srv.requests[0]["tools"]


async def test_a_refused_prompts_tool_results_are_in_the_messages(env, scripted_server, task_15):
    """helper-211: the messages of an episode whose grown prompt was refused as too long ended
    on the tool call: the refused request's tool result (what the call led to) was left out."""
    too_long = "This model's maximum context length is 8192 tokens"

    def policy(request: dict):
        if request["messages"] == PROBE:
            return reply("OK")
        if any(m.get("role") == "tool" for m in request["messages"]):
            return error(400, too_long)
        return reply(tool_calls=[call("read", {"path": "/tmp_workspace/coauthorship.json"})])

    srv = scripted_server(responder=policy)
    ep = await env.run_episode(task_15, base_url=srv.base_url, model="policy")
    assert ep.stop_reason == "context_length"  # (graded as it stands: its own conversation)
    refused = srv.requests[1]
    assert refused["messages"][-1]["role"] == "tool"
    assert ep.messages == refused["messages"]  # all it sent, ending on the tool result
    assert [m["role"] for m in ep.messages] == ["user", "assistant", "tool"]


async def test_a_conversation_refused_for_its_content_is_graded_as_it_stands(
    env, scripted_server, task_15
):
    # the policy writes the right answer, then its grown conversation is refused by a
    # moderation filter (403) while the server answers a plain request: the episode's own
    # doing, like a context overflow (context_length), graded as it stands: its reward is the
    # grader's 1.0, not masked. It was an unscored infra_error (red-team 8, finding 3).
    def policy(request: dict) -> object:
        if request["messages"] == PROBE:
            return reply("OK")
        if any(m.get("role") == "tool" for m in request["messages"]):
            return error(403, "Your chosen model requires moderation and your input was flagged")
        return write_answer(RIGHT)

    srv = scripted_server(responder=policy)
    ep = await env.run_episode(task_15, base_url=srv.base_url, model="policy")
    assert ep.stop_reason == "context_length" and not ep.mask
    assert ep.reward == REWARD[RIGHT] and ep.trial_dir is not None
    # the trainer sees why it stopped: the server's status and message (it said None)
    assert ep.error is not None and ep.error.startswith("HTTP 403: ")
    assert "your input was flagged" in ep.error


async def test_group_statistics_and_advantages(env, scripted_server, task_15):
    srv = scripted_server(responder=by_seed)
    group = await env.run_group(task_15, 4, base_url=srv.base_url, model="policy", seed=100)
    rewards = [e.reward for e in group.episodes]
    # seeds 100..103: even seeds write the right chain, odd ones a wrong middle
    assert rewards == [REWARD[RIGHT], REWARD[WRONG], REWARD[RIGHT], REWARD[WRONG]]
    assert [e.seed for e in group.episodes] == [100, 101, 102, 103]
    assert [e.run_index for e in group.episodes] == [0, 1, 2, 3]
    mean, std = statistics.mean(rewards), statistics.stdev(rewards)
    assert group.stats.mean == pytest.approx(mean)
    assert group.stats.std == pytest.approx(std)
    want = [(r - mean) / (std + 1e-6) for r in rewards]
    assert group.stats.advantages == pytest.approx(want)
    assert [e.advantage for e in group.episodes] == pytest.approx(want)
    assert len({e.trial_dir for e in group.episodes}) == 4
    assert not any(e.has_tokens for e in group.episodes)  # no server named: no capture
    assert all(e.turns and e.turns[0].prompt_token_ids is None for e in group.episodes)


def test_group_stats_leave_masked_out():
    stats = group_stats([1.0, None, 0.0, 0.5])
    valid = [1.0, 0.0, 0.5]
    mean, std = statistics.mean(valid), statistics.stdev(valid)
    assert stats.n == 4 and stats.n_valid == 3
    assert stats.mean == pytest.approx(mean) and stats.std == pytest.approx(std)
    assert stats.advantages[1] is None
    assert stats.advantages[0] == pytest.approx((1.0 - mean) / (std + 1e-6))
    lone = group_stats([0.25, None])  # verl: a lone sample keeps its reward as advantage
    assert lone.advantages == [pytest.approx(0.25 / (1 + 1e-6)), None]
    assert group_stats([None, None]).advantages == [None, None]


async def test_bad_arguments_are_one_line_user_errors(env, task_15, tmp_path):
    with pytest.raises(UserError, match="base_url"):
        await env.run_episode(task_15, base_url="ftp://x", model="m")
    with pytest.raises(UserError, match="holds 10 tasks"):
        await env.run_episode(
            str(task_15.source.path).rsplit("/", 2)[0], base_url="http://127.0.0.1:9/v1", model="m"
        )
    with pytest.raises(UserError, match="at least one"):
        await env.run_group(task_15, 0, base_url="http://127.0.0.1:9/v1", model="m")
    # helper-211: each of these ran an episode (oracle: 1.0 with no model call; max_turns 0: a
    # 0 never earned; a sampling seed: one seed for a whole group) or was a pydantic traceback
    url = "http://127.0.0.1:9/v1"
    for kwargs, line in [
        ({"agent": "oracle"}, "agent: an episode runs native or openclaw"),
        ({"agent": "nop"}, "agent: an episode runs native or openclaw"),
        ({"max_turns": 0}, "max_turns: must be an integer in 1..1000 (or None), got 0"),
        ({"max_turns": True}, "max_turns: must be an integer in 1..1000 (or None), got True"),
        ({"server": "tgi"}, "server: must be vllm or sglang (or None), got 'tgi'"),
        ({"sampling": {"seed": 5}}, "sampling.seed: give it as the episode's seed"),
        ({"sampling": {"max_tokens": -1}}, "sampling.max_tokens: Input should be greater than"),
    ]:
        with pytest.raises(UserError) as caught:
            await env.run_episode(task_15, base_url=url, model="m", **kwargs)
        assert str(caught.value).startswith(line), (kwargs, str(caught.value))
    assert not list((tmp_path / "out").glob("000015/*")), "no episode ran"


async def test_episode_on_a_sample_with_mock_services(env, scripted_server):
    """Four-folder sample 000009 (mock Slack in the sandbox): the policy replays the sample's
    golden trajectory and the episode reaches the sample's own expected reward."""
    from clawrig.tasks.registry import load_tasks

    from .conftest import DEMO

    task = next(t for t in load_tasks(DEMO) if t.id == "000009")
    assert task.services and task.golden_dialog
    golden = [m for m in task.golden_dialog if m["role"] == "assistant"]
    script = [
        reply(
            m.get("content") or None,
            tool_calls=[
                call(c["function"]["name"], c["function"]["arguments"], id=c["id"])
                for c in m.get("tool_calls") or []
            ],
        )
        for m in golden
    ]
    srv = scripted_server(script)
    ep = await env.run_episode(task, base_url=srv.base_url, model="policy")
    assert ep.error is None and not ep.mask
    assert ep.reward == task.expected_reward
    assert len(ep.turns) == len(golden) and srv.remaining == 0


async def test_a_grader_crash_is_the_agents_zero_not_masked(env, scripted_server, tmp_path):
    """docs/training.md "Reward and masking": a grader that crashes on what the agent left is
    an agent error (blame follows control): reward 0.0, not masked, as the code does (the doc
    said infra_error, reward None, masked)."""
    import shutil

    from clawrig.tasks.registry import load_tasks
    from clawrig.testing.paths import REPO

    suite = tmp_path / "demo"
    shutil.copytree(REPO / "suites" / "demo", suite)
    grader = suite / "evaluators" / "evaluator_000015.py"
    head = 'def grade(workspace_path="/tmp_workspace", transcript=None, **kwargs):\n'
    assert head in grader.read_text()
    grader.write_text(
        grader.read_text().replace(head, head + '    raise RuntimeError("grader crashed")\n')
    )
    task = next(t for t in load_tasks(suite) if t.id == "000015")
    srv = scripted_server(responder=by_seed)
    ep = await env.run_episode(task, base_url=srv.base_url, model="policy", seed=0)
    assert (ep.stop_reason, ep.reward, ep.mask) == ("agent_error", 0.0, False)
    assert "grader crashed" in (ep.error or "")
    assert ep.trial_dir is not None
    doc = (REPO / "docs" / "training.md").read_text()
    bullet = doc[doc.index("- the agent broke its sandbox") :].split("\n- ")[0]
    assert "the grader crashed" in bullet and "`agent_error`, reward 0.0, `mask=False`" in bullet


async def test_an_rl_output_folder_is_graded_and_exported_as_a_job(env, scripted_server, task_15):
    """docs/training.md: "clawrig grade, clawrig export sft and the viewer work on them
    unchanged". A serve / Rollouts folder has no summary: it said "not a job folder" (helper-133).
    """
    srv = scripted_server(responder=by_seed)
    group = await env.run_group(task_15, 2, base_url=srv.base_url, model="policy", seed=4)
    out = env.output
    assert json.loads((out / "rollouts.json").read_text())["job_id"] == env.job_id
    right, wrong = group.episodes  # seed 4: the right chain (1.0); seed 5: a wrong one (0.4)
    # the seed each episode ran with comes back from its folder alone
    assert [episode_from_trial(e.trial_dir).seed for e in group.episodes] == [4, 5]

    def clawrig(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(Path(sys.executable).with_name("clawrig")), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    graded = clawrig("grade", str(out))
    assert graded.returncode == 0, graded.stdout + graded.stderr
    for e in group.episodes:  # each episode's folder re-graded to its reward
        line = f"000015 {e.episode_id}: recorded {e.reward} -> re-graded {e.reward}: same"
        assert line in graded.stdout, graded.stdout
    assert "2/2 trials re-grade to their recorded scores" in graded.stdout
    sft = clawrig("export", "sft", str(out), str(out.parent / "rows.jsonl"), "--min-score", "0.9")
    assert sft.returncode == 0, sft.stderr
    rows = [json.loads(x) for x in (out.parent / "rows.jsonl").read_text().splitlines()]
    assert [r["trial_id"] for r in rows] == [right.episode_id]
    assert "skipped 1 trial(s) (1 graded below --min-score 0.9)" in sft.stdout, sft.stdout
    ff = clawrig("export", "fourfolder", str(out), str(out.parent / "ff"), "--min-score", "0.9")
    assert ff.returncode == 0, ff.stderr
    assert sorted(p.name for p in (out.parent / "ff" / "evaluators").iterdir()) == [
        "evaluator_000001.py"
    ]
    logs = clawrig("export", "inspect", str(out), str(out.parent / "logs"))
    assert logs.returncode == 0, logs.stderr
    from inspect_ai.log import read_eval_log

    (log_path,) = (out.parent / "logs").glob("*.eval")
    log = read_eval_log(str(log_path))
    assert log.eval.model.endswith("policy") and len(log.samples or []) == 2
    assert log.results.scores[0].metrics["acc"].value == pytest.approx(
        statistics.mean([REWARD[RIGHT], REWARD[WRONG]])
    )
    # the viewer: "running" while a writer holds the folder; once none does, RL episodes, not
    # a job waiting for its summary, and the cost of attempts set aside counted (helper-182)
    from clawrig.view.index import open_jobs
    from clawrig.view.pages import headline

    (view,) = open_jobs([out])
    rows = view.rows()
    assert headline(view, rows)["status"] == "running"
    kept = out / "_retried" / "000015__killed"
    kept.mkdir(parents=True)
    spent = json.loads((right.trial_dir / "result.json").read_text())
    spent["trial_id"], spent["usage"]["cost_usd"] = "killed", 0.25
    (kept / "result.json").write_text(json.dumps(spent))
    env.close()
    shown = headline(view, rows)
    assert shown["status"] == "RL episodes" and shown["set_aside"] == 1
    assert shown["cost"] == pytest.approx(sum(r["cost"] for r in rows) + 0.25)


def test_a_task_id_not_in_the_path_is_said_as_the_task_argument(tmp_path):
    env = Rollouts(tmp_path / "out")
    try:
        with pytest.raises(UserError, match=r"^task: .*demo: no task with id 999$"):
            asyncio.run(env.run_episode(f"{DEMO}#999", base_url="http://127.0.0.1:9/v1", model="m"))
    finally:
        env.close()


@pytest.mark.parametrize(
    ("seed", "n", "line"),
    [
        (True, 1, "seed: must be an integer, got True"),
        (1.5, 1, "seed: must be an integer, got 1.5"),
        (2**63, 1, f"seed: must be a 64-bit integer ({-(2**63)}..{2**63 - 1}), got {2**63}"),
        # the group's last episode gets seed + n - 1: past 64 bits too
        (2**63 - 2, 3,
         f"seed: must be a 64-bit integer ({-(2**63)}..{2**63 - 1}), got {2**63} (seed + n - 1)"),
    ],
)  # fmt: skip
def test_a_seed_no_request_can_carry_is_refused_before_any_episode(tmp_path, seed, n, line):
    """helper-175: a seed past 64 bits was sent to the model server as it was, and True was 1."""
    env = Rollouts(tmp_path / "out")
    try:
        with pytest.raises(UserError) as info:
            asyncio.run(
                env.run_group(
                    f"{DEMO}#000015", n, base_url="http://127.0.0.1:9/v1", model="m", seed=seed
                )
            )
        assert str(info.value) == line
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    finally:
        env.close()


def test_a_numpy_integer_seed_is_taken_as_its_int(tmp_path):
    """helper-177: trainers pass numpy integers; np.int64(3) was refused."""
    np = pytest.importorskip("numpy")
    env = Rollouts(tmp_path / "out")
    try:
        endpoint = env.endpoint(base_url="http://127.0.0.1:9/v1", model="m", seed=np.int64(3))
        assert endpoint.extra_body["seed"] == 3 and type(endpoint.extra_body["seed"]) is int
        json.dumps(endpoint.extra_body)  # a JSON number
        with pytest.raises(UserError, match=r"\(seed \+ n - 1\)$"):  # numpy's would wrap
            asyncio.run(
                env.run_group(
                    f"{DEMO}#000015",
                    3,
                    base_url="http://127.0.0.1:9/v1",
                    model="m",
                    seed=np.int64(2**63 - 2),
                )
            )
    finally:
        env.close()


def test_processes_sharing_an_output_keep_each_others_trials_in_progress(tmp_path):
    """Trainer workers given one output each write trials there: a writer starting beside a
    live one leaves the live one's half-written trial folders alone; the first writer after
    every other is gone sets them aside (what a kill -9 left); a `clawrig run` job's output
    is refused (flock: two descriptors of one process conflict as two processes do)."""
    from clawrig.runner.batch import _lock_output
    from clawrig.view.index import is_locked

    out = tmp_path / "out"
    first = Rollouts(out).start()
    assert is_locked(out)  # (the viewer shows the RL output as being written)
    in_progress = out / "000015" / ".tmp-000015__a1b2c3d-x1y2z3"
    in_progress.mkdir(parents=True)
    (in_progress / "agent.log").write_text("working\n")
    second = Rollouts(out).start()
    assert in_progress.is_dir()  # the first writer is alive: its trial is left alone
    first.close()
    assert in_progress.is_dir()  # the second writer is alive still
    second.close()
    third = Rollouts(out).start()  # the only writer: a trial in progress is a dead writer's
    assert not in_progress.exists() and not (out / "000015").exists()  # (no call: removed)
    third.close()
    assert not is_locked(out)
    # a job of `clawrig run` is not added to an RL output folder, idle or not (helper-179:
    # its summary and trials were mixed with the episodes')
    run = subprocess.run(
        [str(Path(sys.executable).with_name("clawrig")), "run", str(DEMO), "-s", "000015"]
        + ["--agent", "oracle", "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and run.stderr.strip().endswith(
        f"--output: {out} is an RL output folder (rollouts.json: clawrig serve or "
        "clawrig.rl.Rollouts write episodes there): choose another folder"
    ), run.stderr
    job = tmp_path / "job"
    job.mkdir()
    held = _lock_output(job)
    try:
        with pytest.raises(UserError, match=f"output: a clawrig job is writing to {job}"):
            Rollouts(job).start()
    finally:
        import os

        os.close(held)


def test_a_writer_starting_while_another_sets_aside_waits_for_it(tmp_path):
    """helper-180: a writer starting while the first set aside a killed writer's folders (or
    while a check held the job lock alone a moment) was refused as if a `clawrig run` job
    wrote there. It waits, then starts; it sets aside nothing while another writer lives."""
    import fcntl
    import os

    from clawrig.spec.layout import JobPaths

    out = tmp_path / "out"
    Rollouts(out).start().close()  # (the folder and its lock files made)
    paths = JobPaths(out)
    in_progress = out / "000015" / ".tmp-000015__a1b2c3d-x1y2z3"
    # a writer setting aside holds the writers' lock alone, then shared while it lives
    sweeper = os.open(paths.writers_lock, os.O_RDWR)
    fcntl.flock(sweeper, fcntl.LOCK_EX)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = pool.submit(Rollouts(out).start)
        with pytest.raises(concurrent.futures.TimeoutError):
            started.result(0.3)  # waiting
        in_progress.mkdir(parents=True)  # the sweeper's own trial, begun once it is done
        fcntl.flock(sweeper, fcntl.LOCK_SH)
        started.result(30).close()
    assert in_progress.is_dir()
    os.close(sweeper)
    # a check whether a job writes there holds the job lock alone a moment
    probe = os.open(paths.lock, os.O_RDWR)
    fcntl.flock(probe, fcntl.LOCK_EX)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = pool.submit(Rollouts(out).start)
        with pytest.raises(concurrent.futures.TimeoutError):
            started.result(0.2)
        os.close(probe)
        started.result(30).close()


def test_the_first_writer_sets_aside_only_the_outputs_own_folders(tmp_path):
    """helper-180: the sweep of killed writers' folders followed links: a linked task folder
    had a folder outside moved into _retried/ and another removed; a linked .tmp- folder got
    a result.json written outside. Lock files that are links or folders are refused."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    victim = outside / ".tmp-victim"
    victim.mkdir(parents=True)
    (victim / "model_calls.jsonl").write_text("{}\n")
    (outside / ".tmp-victim2").mkdir()
    (out / "task").mkdir(parents=True)
    (out / "evil").symlink_to(outside)
    (out / "task" / ".tmp-ln").symlink_to(outside)
    before = sorted(str(p.relative_to(outside)) for p in outside.rglob("*"))
    Rollouts(out).start().close()
    assert sorted(str(p.relative_to(outside)) for p in outside.rglob("*")) == before
    assert not (out / "_retried").exists()
    assert (out / "task" / ".tmp-ln").is_symlink()  # (not ours to remove either)
    for make in ("link", "folder"):
        other = tmp_path / f"o-{make}"
        other.mkdir()
        target = tmp_path / f"target-{make}"
        if make == "link":
            (other / ".clawrig.lock").symlink_to(target)
        else:
            (other / ".clawrig.lock").mkdir()
        with pytest.raises(UserError, match=r"output: cannot use the lock file .*\.clawrig\.lock"):
            Rollouts(other).start()
        assert not target.exists()  # (the link was not followed)


def test_a_writer_neither_takes_a_run_jobs_folder_nor_follows_a_linked_retried(tmp_path):
    """helper-181: a writer took a `clawrig run` job's folder that no job wrote to at that
    moment: it set the job's crashed trial aside as an episode's, marked the folder an RL
    output, and the job's --resume was refused from then on. And a `_retried` that is a link
    had the set-aside attempt moved where it led."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "summary_scripted_demo.json").write_text("{}")
    with pytest.raises(
        UserError,
        match=f"^output: {job} holds a clawrig run job \\(summary_scripted_demo.json\\): "
        "choose another folder$",
    ):
        Rollouts(job).start()
    assert sorted(p.name for p in job.iterdir()) == ["summary_scripted_demo.json"]
    out, outside = tmp_path / "out", tmp_path / "outside"
    dead = out / "000015" / ".tmp-000015__dead-x1y2z3"
    dead.mkdir(parents=True)
    call = {"id": "c1", "run_index": 0, "trial_id": "000015__dead"}
    call["usage"] = {"request_count": 1, "cost_usd": 0.01}
    (dead / "model_calls.jsonl").write_text(json.dumps(call) + "\n")
    outside.mkdir()
    (out / "_retried").symlink_to(outside)
    with pytest.raises(UserError, match=r"^output: .*_retried is a link: attempts set aside"):
        Rollouts(out).start()
    assert list(outside.iterdir()) == [] and dead.is_dir()  # nothing moved through the link
    run = subprocess.run(
        [str(Path(sys.executable).with_name("clawrig")), "run", str(DEMO), "-s", "000015"]
        + ["--agent", "oracle", "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and f"--output: {out / '_retried'} is a link" in run.stderr
    assert list(outside.iterdir()) == []


def test_a_killed_writers_folder_cannot_make_the_set_aside_write_or_wait_outside(tmp_path):
    """helper-183: a result.json planted as a link in a killed writer's folder had the
    set-aside attempt's record written through it, into a file outside the output; a FIFO as
    its model_calls.jsonl held every writer's start for good."""
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    dead = out / "000015" / ".tmp-000015__dead-x1y2z3"
    dead.mkdir(parents=True)
    call = {"id": "c1", "run_index": 0, "trial_id": "000015__dead"}
    call["usage"] = {"request_count": 1, "cost_usd": 0.01}
    (dead / "model_calls.jsonl").write_text(json.dumps(call) + "\n")
    (dead / "result.json").symlink_to(victim)
    stuck = out / "000001" / ".tmp-000001__fifo-a1b2c3"
    stuck.mkdir(parents=True)
    os.mkfifo(stuck / "model_calls.jsonl")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(Rollouts(out).start).result(60).close()  # (a FIFO read blocks for good)
    assert victim.read_text() == "keep me\n"
    (kept,) = (out / "_retried").iterdir()
    record = kept / "result.json"
    assert not record.is_symlink() and json.loads(record.read_text())["usage"]["cost_usd"] == 0.01
    assert not stuck.exists()  # no call could be read from it: removed
