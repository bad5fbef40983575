"""SkyRL adapter: a clawrig task as a ``skyrl_gym`` text environment.

SkyRL's contract (``skyrl_gym`` 0.4): an environment is a ``BaseTextEnv`` made by
``skyrl_gym.make(id, env_config=..., extras=...)``; SkyRL's generator calls ``init(prompt) ->
(messages, metadata)``, then ``step(action_text) -> {observations, reward, done, metadata}``
with the policy's raw generation until ``done``, and ``close()``. :class:`ClawrigEnv` runs a
step-driven clawrig episode (:class:`clawrig.rl.bridge.StepEpisode`): ``init`` starts the
sandbox and returns the task's first messages (a system message offering the tools in the
Hermes / Qwen ``<tool_call>`` convention, then the user prompt); each ``step`` runs the
action's tool calls in the sandbox and returns their results as ``role: tool`` observations
(reward 0.0); the step whose action has no tool call (or the last turn) ends the episode, and
its reward is the graded episode's reward, with the sub-scores, stop reason and trial folder in
``metadata``.

A masked episode (infrastructure failure) raises :class:`clawrig.rl.adapters.EpisodeMasked`
from ``step``, never a 0 reward: catch it in the generator and zero that sample's loss mask
(what SkyRL does for a Harbor trial that errored).

Configuration: ``extras["task"]`` (or ``extras["extra_info"]["task"]``): the task, as a path
clawrig reads with one task or ``PATH#TASK_ID``; ``extras["max_turns"]``; ``env_config``
(dict or OmegaConf) keys ``output`` (trial folders), ``sandbox``, ``timeout_s``.
Registered as ``clawrig`` by :func:`register`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import register as _register

from clawrig.rl.adapters import EpisodeMasked
from clawrig.rl.bridge import StepEpisode, tools_system_prompt
from clawrig.rl.episode import Rollouts
from clawrig.spec.job import TrialConfig

ENV_ID = "clawrig"
_ROLLOUTS: dict[tuple[str, str], Rollouts] = {}


def _rollouts(output: str | None, sandbox: str) -> Rollouts:
    """One :class:`Rollouts` per (output, sandbox) in this process (they share a gateway)."""
    key = (output or "", sandbox)
    if key not in _ROLLOUTS:
        _ROLLOUTS[key] = Rollouts(output, trial=TrialConfig(sandbox=sandbox))
    return _ROLLOUTS[key]


def _get(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


class ClawrigEnv(BaseTextEnv):
    """A clawrig task as a SkyRL text environment (see the module docs)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        extras = extras or {}
        task = extras.get("task") or (extras.get("extra_info") or {}).get("task")
        if not task:
            raise ValueError("extras.task: give the clawrig task (PATH or PATH#TASK_ID)")
        self.task: str | Path = task
        self.max_turns = int(extras.get("max_turns", _get(env_config, "max_turns", 30)))
        self.rollouts = _rollouts(
            _get(env_config, "output"), str(_get(env_config, "sandbox", "bwrap"))
        )
        self.episode = StepEpisode(
            self.task,
            rollouts=self.rollouts,
            max_turns=self.max_turns,
            timeout_s=float(_get(env_config, "timeout_s", 600.0)),
        )
        self.result: Any = None

    def init(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start the episode; the dataset's ``prompt`` is replaced by the task's own."""
        messages = self.episode.start()
        system = {"role": "system", "content": tools_system_prompt(self.episode.tools)}
        return [system, *messages], {"tools": self.episode.tools}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        out = self.episode.step(action)
        if not out.done:
            return BaseTextEnvStepOutput(
                observations=out.observations, reward=0.0, done=False, metadata={}
            )
        ep = out.episode
        self.result = ep
        if ep is None or ep.mask or ep.reward is None:
            raise EpisodeMasked(ep)
        return BaseTextEnvStepOutput(
            observations=[],
            reward=ep.reward,
            done=True,
            metadata={
                "scores": ep.scores,
                "stop_reason": ep.stop_reason,
                "trial_dir": str(ep.trial_dir),
                "task_id": ep.task_id,
            },
        )

    def get_metrics(self) -> dict[str, Any]:
        ep = self.result
        if ep is None:
            return {}
        return {**ep.scores, "turns": len(ep.turns), "reward": ep.reward}

    def close(self) -> None:
        self.episode.close()


def register() -> None:
    """Register :class:`ClawrigEnv` with skyrl_gym as ``clawrig`` (idempotent)."""
    from skyrl_gym.envs.registration import registry

    if ENV_ID not in registry:
        _register(id=ENV_ID, entry_point="clawrig.rl.adapters.skyrl:ClawrigEnv")
