"""Trainer adapters, each through the trainer's own package (installed by `make test` from
PyPI: the ``art`` and ``skyrl`` extras): OpenPipe ART's rollout/gather and SkyRL's
skyrl_gym text environment, on demo task 000015 in real sandboxes."""

from __future__ import annotations

import json

import pytest

from clawrig.llm.client import RetryPolicy
from clawrig.rl import Rollouts
from clawrig.rl.adapters import EpisodeMasked
from clawrig.rl.bridge import parse_action
from clawrig.testing.scripted_server import error

from .conftest import DEMO, REWARD, RIGHT, WRONG, by_seed

pytestmark = pytest.mark.sandbox


@pytest.fixture
async def env(tmp_path):
    rollouts = Rollouts(
        tmp_path / "out", retry=RetryPolicy(attempts=2, initial_s=0.001, max_s=0.01)
    )
    yield rollouts
    rollouts.close()


async def test_art_rollout_through_gather_trajectory_groups(env, scripted_server, task_15):
    art = pytest.importorskip("art", reason="the art extra is not installed (make test does)")
    from openai.types.chat.chat_completion import Choice

    from clawrig.rl.adapters.art import rollout

    srv = scripted_server(responder=by_seed)
    model = art.Model(
        name="policy",
        project="clawrig-test",
        inference_base_url=srv.base_url,
        inference_api_key="sk-art",
    )
    groups = await art.gather_trajectory_groups(
        [
            art.TrajectoryGroup(
                rollout(model, task_15, rollouts=env, seed=s, server="vllm") for s in (0, 1)
            )
        ],
        pbar_desc=None,
    )
    # what the server sampled, by completion ids: each Choice carries its ids and logprobs in
    # the form ART reads them back ("token_id:<id>"; helper-211: ART got no logprobs at all,
    # and by default trains on no trajectory without them)
    sampled = {tuple(s["completion_token_ids"]): s["completion_logprobs"] for s in srv.sent_tokens}
    assert len(srv.sent_tokens) == 4  # (both final "done" replies sample the same tokens)
    trajectories = groups[0].trajectories
    assert sorted(t.reward for t in trajectories) == sorted([REWARD[RIGHT], REWARD[WRONG]])
    for t in trajectories:
        kinds = [type(m).__name__ if isinstance(m, Choice) else m["role"] for m in
                 t.messages_and_choices]  # fmt: skip
        # user prompt, the model's write call (a Choice), its tool result, the final Choice
        assert kinds == ["user", "Choice", "tool", "Choice"]
        for choice in (t.messages_and_choices[1], t.messages_and_choices[3]):
            content = choice.logprobs.content
            ids = tuple(int(c.token.split(":")[1]) for c in content)
            assert [c.logprob for c in content] == sampled[ids]
        write = t.messages_and_choices[1].message.tool_calls[0]
        assert write.function.name == "write"
        assert json.loads(write.function.arguments)["content"] in (RIGHT, WRONG)
        assert t.metadata["stop_reason"] == "complete" and t.metadata["task_id"] == "000015"
        assert {"read", "write"} <= {tool["function"]["name"] for tool in t.tools}
    assert all(r["model"] == "policy" for r in srv.requests)


async def test_art_masked_episode_is_an_exception_not_a_zero(env, scripted_server, task_15):
    art = pytest.importorskip("art", reason="the art extra is not installed (make test does)")
    from clawrig.rl.adapters.art import rollout

    srv = scripted_server([error(500)] * 10)
    model = art.Model(name="p", project="t", inference_base_url=srv.base_url)
    groups = await art.gather_trajectory_groups(
        [art.TrajectoryGroup([rollout(model, task_15, rollouts=env)])],
        pbar_desc=None,
        max_exceptions=1,
    )
    assert groups[0].trajectories == []
    assert len(groups[0].exceptions) == 1
    assert "EpisodeMasked" in groups[0].exceptions[0].type


def test_skyrl_env_runs_an_episode_step_by_step(tmp_path, task_15):
    skyrl_gym = pytest.importorskip("skyrl_gym", reason="the skyrl extra is not installed")
    from clawrig.rl.adapters.skyrl import register

    register()
    env = skyrl_gym.make(
        "clawrig",
        env_config={"output": str(tmp_path / "out")},
        extras={"task": f"{DEMO}#000015", "max_turns": 5},
    )
    try:
        messages, meta = env.init([{"role": "user", "content": "(the dataset's prompt)"}])
        assert [m["role"] for m in messages] == ["system", "user"]
        assert "<tools>" in messages[0]["content"] and '"name": "read"' in messages[0]["content"]
        assert task_15.prompt in messages[1]["content"]
        assert {t["function"]["name"] for t in meta["tools"]} >= {"read", "write", "exec"}
        # the policy's generations, in the Hermes tool-call convention
        read = env.step(
            "<think>Read the graph first.</think>\n<tool_call>\n"
            '{"name": "read", "arguments": {"path": "/tmp_workspace/coauthorship.json"}}'
            "\n</tool_call>"
        )
        assert read["done"] is False and read["reward"] == 0.0
        [obs] = read["observations"]
        graph = (DEMO / "workspaces" / "000015" / "coauthorship.json").read_text()
        assert obs["role"] == "tool" and json.loads(graph)["edges"][0][0] in obs["content"]
        call = {"name": "write", "arguments": {"path": "/tmp_workspace/results/results.md",
                                               "content": RIGHT}}  # fmt: skip
        wrote = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
        assert wrote["done"] is False and wrote["observations"][0]["role"] == "tool"
        final = env.step("The chain is Vikram Shah – Berta Alonso – Saif Hamdan.")
        assert final["done"] is True
        assert final["reward"] == REWARD[RIGHT]
        assert final["metadata"]["stop_reason"] == "complete"
        assert final["metadata"]["scores"]["valid_shortest"] == 1.0
        assert env.get_metrics()["turns"] == 3
    finally:
        env.close()


def test_a_step_driven_agent_cannot_start_a_subagent(tmp_path, task_15):
    """helper-213: a sub-agent's model calls reached the bridge beside the agent's, took the
    trainer's next step and cut the observations from its own conversation. In a step-driven
    episode (one conversation, the trainer's) sessions_spawn answers with an error saying why,
    and the episode goes on step for step."""
    from clawrig.rl.bridge import NO_SUBAGENTS, StepEpisode

    rollouts = Rollouts(tmp_path / "out")
    episode = StepEpisode(task_15, rollouts=rollouts, timeout_s=120)
    try:
        episode.start()
        spawn = {"name": "sessions_spawn", "arguments": {"task": "write the chain"}}
        spawned = episode.step(f"<tool_call>{json.dumps(spawn)}</tool_call>")
        [obs] = spawned.observations
        assert obs["role"] == "tool" and spawned.done is False
        assert obs["content"] == (
            f"sessions_spawn: sub-agents are not available in this trial ({NO_SUBAGENTS})"
        )
        write = {"name": "write", "arguments": {"path": "/tmp_workspace/results/results.md",
                                                "content": RIGHT}}  # fmt: skip
        wrote = episode.step(f"<tool_call>{json.dumps(write)}</tool_call>")
        assert [m["role"] for m in wrote.observations] == ["tool"]
        final = episode.step("Done.")
        assert final.done is True and final.episode is not None
        assert final.episode.reward == REWARD[RIGHT]
        assert len(final.episode.turns) == 3 and final.episode.subagent_turns == []
    finally:
        episode.close()
        rollouts.close()


def test_parse_action_reads_hermes_tool_calls():
    msg = parse_action(
        '<think>plan</think>Let me look.<tool_call>{"name": "exec", "arguments": '
        '{"command": "ls"}}</tool_call><tool_call>{"name": "read", "arguments": "{\\"path\\": '
        '\\"a\\"}"}</tool_call><tool_call>not json</tool_call>'
        '<tool_call>{"name": "read", "arguments": {bad json}</tool_call>',
        turn=2,
    )
    assert msg["reasoning_content"] == "plan"
    assert msg["content"] == "Let me look."
    # a block that is no JSON object is a call all the same (of the name it spells): the
    # tools answer it with their error, not the episode's end (helper-199)
    assert msg["tool_calls"] == [
        {"id": "call_2_0", "type": "function",
         "function": {"name": "exec", "arguments": '{"command": "ls"}'}},
        {"id": "call_2_1", "type": "function",
         "function": {"name": "read", "arguments": '{"path": "a"}'}},
        {"id": "call_2_2", "type": "function",
         "function": {"name": "", "arguments": "not json"}},
        {"id": "call_2_3", "type": "function",
         "function": {"name": "read", "arguments": '{"name": "read", "arguments": {bad json}'}},
    ]  # fmt: skip
    assert parse_action("just text") == {"role": "assistant", "content": "just text"}
    # the reasoning is the generation's leading <think> block, or its text up to a </think>
    # the template opened; one inside a call's arguments stays there (helper-202: it was cut
    # out of a write's content)
    write = '{"name": "write", "arguments": {"path": "a.html", "content": "<think>p</think>ok"}}'
    msg = parse_action(f"<tool_call>{write}</tool_call>")
    assert "reasoning_content" not in msg
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"])["content"] == (
        "<think>p</think>ok"
    )
    closed = '{"name": "write", "arguments": {"content": "a</think>b"}}'
    msg = parse_action(f"<tool_call>{closed}</tool_call>")
    assert (
        "reasoning_content" not in msg
        and "a</think>b" in msg["tool_calls"][0]["function"]["arguments"]
    )
    assert parse_action("plan</think>answer") == {
        "role": "assistant",
        "content": "answer",
        "reasoning_content": "plan",
    }
    # an unclosed block stays text, read in linear time (helper-201: 16 s for 4,000 newlines
    # after an unclosed <tool_call>, minutes for 200,000 repeated tags)
    for text in ("<tool_call>" + "\n" * 200_000, "<tool_call>" * 200_000, "<think>" * 200_000):
        assert parse_action(text) == {"role": "assistant", "content": text.strip()}


def test_masked_error_names_the_task():
    class Ep:
        task_id, error = "000015", "upstream 500"

    assert str(EpisodeMasked(Ep())) == "episode of task 000015 masked: upstream 500"


def test_step_episode_closed_early_stops_its_sandbox(tmp_path, task_15):
    from clawrig.rl.bridge import BridgeError, StepEpisode

    rollouts = Rollouts(tmp_path / "out")
    episode = StepEpisode(task_15, rollouts=rollouts, timeout_s=120)
    try:
        first = episode.start()
        assert first[0]["role"] == "user" and task_15.prompt in first[0]["content"]
        episode.close()  # the agent's pending call is refused; the trial ends
        assert episode._future is not None and episode._future.done()
        with pytest.raises(BridgeError, match="after the episode ended or was closed"):
            episode.step("anything")
    finally:
        rollouts.close()


@pytest.mark.parametrize(
    ("message", "line"),
    [
        ({"role": "assistant", "content": None, "tool_calls": 5},
         "message.tool_calls: Input should be a valid list"),
        ({"content": "x", "tool_calls": [{"function": {"arguments": "{}"}}]},
         "message.tool_calls.0.function.name: Field required"),
        ({"role": "user", "content": "x"}, "message.role: Input should be 'assistant'"),
        ({"content": 3}, "message.content: Value error, must be text, a list of text parts or "
         "null"),
        # helper-198: parts other than text, and what JSON cannot carry, were sent on (the
        # episode masked, or the step lost while the episode went on)
        ({"content": [1, 2]}, "message.content: Value error, a model's reply holds text parts "
         'only ({"type": "text", "text": ...})'),
        ({"tool_calls": [{"function": {"name": "exec", "arguments": {"x": float("nan")}}}]},
         "message: cannot be sent as JSON: Out of range float values are not JSON compliant"),
        ({"content": "x", "reasoning_content": b"x"}, "message: cannot be sent as JSON: Object "
         "of type bytes is not JSON serializable"),
        ({"tool_calls": [{"function": {"name": "exec", "arguments": 1}}]},
         "message.tool_calls.0.function.arguments: Value error, must be JSON text or an object"),
        (["not", "a", "dict"], "message: an assistant message (a dict) or raw text, not list"),
    ],
)  # fmt: skip
def test_a_malformed_message_is_refused_and_the_episode_goes_on(tmp_path, task_15, message, line):
    """helper-196: step() sent a malformed message on as the model's reply: "a reply of the
    wrong shape", the episode an infrastructure error, masked, its sandbox spent. It is
    refused at once, naming the field, and a good message then goes on with the episode."""
    from clawrig.rl.bridge import BridgeError, StepEpisode

    rollouts = Rollouts(tmp_path / "out")
    episode = StepEpisode(task_15, rollouts=rollouts, timeout_s=120)
    try:
        episode.start()
        with pytest.raises(BridgeError) as refused:
            episode.step(message)
        assert str(refused.value) == line
        # a tool call the policy garbled: the tools' error, the episode goes on (it ended
        # "complete" with the block left in the text: helper-199)
        garbled = episode.step('<tool_call>{"name": "read", "arguments": {bad}</tool_call>')
        assert not garbled.done
        [obs] = garbled.observations
        assert obs["role"] == "tool"
        assert obs["content"].startswith("Invalid JSON in the arguments of read"), obs
        final = episode.step("I give up.")
        assert final.done and final.episode is not None and not final.episode.mask
    finally:
        episode.close()
        rollouts.close()


def test_a_message_of_text_parts_and_a_lone_surrogate_is_the_reply(tmp_path, task_15):
    """helper-198: content given as text parts (OpenAI's shape) made the agent's client
    refuse the reply, the episode masked; a lone surrogate made the bridge's reply fail and
    the step was lost. The parts are the reply's text, the surrogate U+FFFD."""
    from clawrig.rl.bridge import StepEpisode

    rollouts = Rollouts(tmp_path / "out")
    episode = StepEpisode(task_15, rollouts=rollouts, timeout_s=120)
    try:
        episode.start()
        final = episode.step(
            {
                "content": [
                    {"type": "text", "text": "I give "},
                    {"type": "text", "text": "up \ud800"},
                ]
            }
        )
        assert final.done and final.episode is not None and not final.episode.mask
        assert final.episode.messages[-1]["content"] == "I give up \ufffd"
    finally:
        episode.close()
        rollouts.close()


def test_raw_text_of_a_garbled_or_surrogate_tool_call_goes_on(tmp_path, task_15):
    """helper-201: raw text whose <tool_call> block names no tool, or a name holding a lone
    surrogate, was refused as "message.tool_calls.0.function.name", a field the trainer never
    sent. The tools answer it, and the episode goes on."""
    from clawrig.rl.bridge import StepEpisode

    rollouts = Rollouts(tmp_path / "out")
    episode = StepEpisode(task_15, rollouts=rollouts, timeout_s=120)
    try:
        episode.start()
        for text in ("<tool_call>not json</tool_call>",
                     '<tool_call>{"name": "ok\\ud800", "arguments": {}}</tool_call>'):  # fmt: skip
            step = episode.step(text)
            assert not step.done
            [obs] = step.observations
            assert obs["role"] == "tool" and "not found" in obs["content"], obs
        final = episode.step("I give up.")
        assert final.done and final.episode is not None and not final.episode.mask
    finally:
        episode.close()
        rollouts.close()
