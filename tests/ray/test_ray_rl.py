"""The RL episode API on the Ray executor (``Rollouts(executor="ray")``) on the real two-node
cluster of tests/ray/conftest.py: a GRPO group of demo task 000015 whose episodes run on both
nodes, with the rewards and the sampled token ids of the same group run locally.

The policy is the scripted OpenAI-compatible server acting as vLLM (``server="vllm"``): it
sends token ids and logprobs from its scripted tokenizer and records what it sent
(``sent_tokens``), the independent measure of what the episodes must hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import NODE_CPUS, node_ids

from clawrig.rl import Rollouts
from clawrig.runner.executors.ray import NODE_LOG_LINE
from clawrig.tasks.registry import load_tasks
from clawrig.testing.paths import REPO
from clawrig.testing.scripted_server import Reply, call, reply

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(600)]

SECRET = "sk-trainer-ray-0123456789"
RIGHT = "# shortest\nVikram Shah – Berta Alonso – Saif Hamdan\n"
WRONG = "# shortest\nVikram Shah – Nobody Here – Saif Hamdan\n"
REWARD = {RIGHT: 1.0, WRONG: 0.40}
"""Task 000015's grader: 0.10 heading + 0.30 endpoints + 0.60 valid shortest chain."""


def by_seed(request: dict[str, Any]) -> Reply:
    """An even ``seed`` writes the right chain, an odd one a wrong middle; after a tool
    result, the policy says done."""
    if any(m.get("role") == "tool" for m in request["messages"]):
        return reply("done")
    text = RIGHT if request["seed"] % 2 == 0 else WRONG
    return reply(
        tool_calls=[call("write", {"path": "/tmp_workspace/results/results.md", "content": text})]
    )


def _node_of(trial_dir: Path) -> str:
    prefix = NODE_LOG_LINE.split("{")[0]
    lines = (trial_dir / "agent.log").read_text().splitlines()
    return next(line[len(prefix) :].strip() for line in lines if line.startswith(prefix))


def _tokens(ep: Any) -> list[tuple[Any, Any, Any]]:
    return [(t.prompt_token_ids, t.completion_token_ids, t.completion_logprobs) for t in ep.turns]


async def test_a_group_runs_on_both_nodes_with_the_local_rewards_and_token_ids(
    ray_cluster, scripted_server, tmp_path
):
    task = next(t for t in load_tasks(REPO / "suites" / "demo") if t.id == "000015")
    srv = scripted_server(responder=by_seed)
    n = 2 * NODE_CPUS  # every slot of both nodes
    args: dict[str, Any] = {
        "base_url": srv.base_url,
        "model": "policy",
        "seed": 100,
        "server": "vllm",
        "api_key": SECRET,
    }
    env = Rollouts(tmp_path / "ray", executor="ray", ray_address=ray_cluster.address)
    try:
        on_ray = await env.run_group(task, n, **args)
    finally:
        env.close()
    sent_on_ray = srv.sent_tokens
    local_env = Rollouts(tmp_path / "local")
    try:
        local = await local_env.run_group(task, n, **args)
    finally:
        local_env.close()

    # seeds 100..: even seeds write the right chain, odd ones a wrong middle
    want = [REWARD[RIGHT] if i % 2 == 0 else REWARD[WRONG] for i in range(n)]
    assert [e.reward for e in on_ray.episodes] == want
    assert [e.reward for e in local.episodes] == want
    assert on_ray.stats.advantages == pytest.approx(local.stats.advantages)
    # every episode ran on a node, and both nodes ran some
    assert all(e.trial_dir.is_relative_to(tmp_path / "ray") for e in on_ray.episodes)
    assert {_node_of(e.trial_dir) for e in on_ray.episodes} == node_ids(ray_cluster)
    # token ids and logprobs: exactly what the server sent for those episodes, and the same
    # as the local group's, episode by episode
    assert all(e.has_tokens and len(e.turns) == 2 for e in on_ray.episodes)
    recorded = sorted(json.dumps(t) for e in on_ray.episodes for t in _tokens(e))
    sent = sorted(
        json.dumps((s["prompt_token_ids"], s["completion_token_ids"], s["completion_logprobs"]))
        for s in sent_on_ray
    )
    assert recorded == sent and len(sent) == 2 * n
    assert [_tokens(e) for e in on_ray.episodes] == [_tokens(e) for e in local.episodes]
    # the trainer's key reached the server (through the driver's gateway), never a node's folder
    assert len(srv.headers) == 4 * n
    assert all(h["authorization"] == f"Bearer {SECRET}" for h in srv.headers)
    for e in on_ray.episodes:
        text = "\n".join(p.read_text(errors="replace") for p in e.trial_dir.rglob("*.*"))
        assert SECRET not in text


async def test_an_episode_cancelled_on_ray_is_set_aside_as_a_stopped_episode(
    ray_cluster, scripted_server, tmp_path
):
    """An RL episode has no resume: one cut short on a node (its request cancelled, the
    trainer stopped) is set aside with what it spent and says it was stopped, as a local one
    does, not the job's "run again on resume"."""
    import asyncio

    from clawrig.runner.trial import EPISODE_STOPPED

    task = next(t for t in load_tasks(REPO / "suites" / "demo") if t.id == "000015")
    srv = scripted_server(
        responder=lambda req: reply(tool_calls=[call("exec", {"command": "sleep 61.25"})])
    )
    env = Rollouts(tmp_path / "ray", executor="ray", ray_address=ray_cluster.address)
    try:
        episode = asyncio.ensure_future(
            env.run_episode(task, base_url=srv.base_url, model="policy", seed=3)
        )
        for _ in range(1200):  # until the policy was asked: the agent runs its command
            if srv.requests:
                break
            await asyncio.sleep(0.1)
        assert srv.requests, "the episode never asked the policy"
        await asyncio.sleep(1.0)
        episode.cancel()
        with pytest.raises(asyncio.CancelledError):
            await episode
    finally:
        env.close()
    (kept,) = (tmp_path / "ray" / "_retried").iterdir()
    result = json.loads((kept / "result.json").read_text())
    assert result["error"]["message"] == EPISODE_STOPPED
    assert result["usage"]["request_count"] == len(srv.requests) >= 1
