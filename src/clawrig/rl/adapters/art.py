"""OpenPipe ART adapter: a clawrig task as an ART rollout.

ART's contract (``art`` package, 0.5.x): the user writes ``async def rollout(model, scenario)
-> art.Trajectory`` that talks to ``model``'s OpenAI-compatible inference endpoint
(``model.inference_base_url``, ``model.inference_api_key``, ``model.get_inference_name()``)
and sets ``trajectory.reward``; ``art.gather_trajectory_groups`` runs groups of them and
``model.train`` trains on the groups. Here :func:`rollout` runs a clawrig episode against that
endpoint and returns its :class:`art.Trajectory`: ``messages_and_choices`` holds the prompt and
tool messages as dicts and each assistant turn of the agent's own conversation (not its
sub-agents') as the server's own ``Choice``, with the sampled token ids and logprobs when the
server returned them (``server`` vllm | sglang: :func:`sampled_logprobs`), so ART trains on
what was sampled; ``tools`` the offered tools;
``reward`` the episode's reward; ``metrics`` its sub-scores plus turns and tokens; ``metadata``
task id, stop reason and the trial folder.

A masked episode (infrastructure failure) raises :class:`clawrig.rl.adapters.EpisodeMasked`:
``gather_trajectory_groups(..., max_exceptions=...)`` drops it instead of training on a 0.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# litellm (imported by art) otherwise fetches its price table from the internet at import
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import art  # noqa: E402
from openai.types.chat.chat_completion import Choice  # noqa: E402

from clawrig.llm.gateway.tokens import TokenServer  # noqa: E402
from clawrig.rl.adapters import EpisodeMasked
from clawrig.rl.episode import Episode, Rollouts, Sampling, Turn, default_rollouts
from clawrig.spec.task import Task


def sampled_logprobs(turn: Turn) -> dict[str, Any] | None:
    """A Choice's ``logprobs`` made from ``turn``'s captured completion token ids and their
    logprobs (the gateway asked the server for them and keeps them apart from the reply the
    agent reads), as vLLM writes them with ``return_tokens_as_token_ids``: ``{"content":
    [{"token": "token_id:<id>", "logprob", "bytes": None, "top_logprobs": []}, ...]}``, the
    form ART reads the sampled ids back from (its ``tokenize_trajectory``); None when the
    turn has no ids or logprobs lined up with them (ART then trains on it only with
    ``allow_training_without_logprobs``: helper-211 found every turn so)."""
    ids, lps = turn.completion_token_ids, turn.completion_logprobs
    if not ids or lps is None or len(ids) != len(lps):
        return None
    content: list[dict[str, Any]] = [
        {"token": f"token_id:{i}", "logprob": lp, "bytes": None, "top_logprobs": []}
        for i, lp in zip(ids, lps, strict=True)
    ]
    return {"content": content, "refusal": None}


def trajectory_from_episode(episode: Episode) -> art.Trajectory:
    """The :class:`art.Trajectory` of an unmasked episode (see the module docs). Raises
    :class:`EpisodeMasked` for a masked one."""
    if episode.mask or episode.reward is None:
        raise EpisodeMasked(episode)
    turns = [t for t in episode.turns if t.choice and t.choice.get("message")]
    out: list[Any] = []
    k = 0
    for msg in episode.messages:
        if msg.get("role") == "assistant" and k < len(turns):
            turn = turns[k]
            k += 1
            choice = dict(turn.choice or {})
            choice.setdefault("index", 0)
            choice["finish_reason"] = choice.get("finish_reason") or "stop"
            if not choice.get("logprobs") and (sampled := sampled_logprobs(turn)) is not None:
                choice["logprobs"] = sampled
            out.append(Choice.model_validate(choice))
        else:
            out.append(msg)
    metrics: dict[str, float | int | bool] = dict(episode.scores)
    metrics["turns"] = len(episode.turns)
    metrics["completion_tokens"] = episode.usage.output_tokens
    return art.Trajectory(
        messages_and_choices=out,
        tools=episode.tools or None,  # type: ignore[arg-type]  # OpenAI function tools
        reward=episode.reward,
        metrics=metrics,
        metadata={
            "task_id": episode.task_id,
            "stop_reason": episode.stop_reason,
            "trial_dir": str(episode.trial_dir or ""),
            "episode_id": episode.episode_id,
        },
    )


async def rollout(
    model: art.Model,
    task: Task | str | Path,
    *,
    rollouts: Rollouts | None = None,
    sampling: Sampling | dict[str, Any] | None = None,
    agent: str = "native",
    seed: int | None = None,
    max_turns: int | None = None,
    server: TokenServer | None = None,
) -> art.Trajectory:
    """Run one clawrig episode of ``task`` with ``model``'s inference endpoint; return its
    :class:`art.Trajectory`. ``server``: vllm | sglang to record the sampled token ids in the
    trial folder (ART's LocalBackend serves through vLLM). Raises :class:`EpisodeMasked` for
    an infrastructure failure, ValueError when ``model`` has no inference endpoint, UserError
    for a bad task."""
    if not model.inference_base_url:
        raise ValueError(f"art model {model.name!r} has no inference_base_url (register it first)")
    env = rollouts or default_rollouts()
    episode = await env.run_episode(
        task,
        base_url=model.inference_base_url,
        model=model.get_inference_name(),
        api_key=model.inference_api_key,
        sampling=sampling,
        agent=agent,
        seed=seed,
        max_turns=max_turns,
        server=server,
    )
    return trajectory_from_episode(episode)
