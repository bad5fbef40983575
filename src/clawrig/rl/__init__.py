"""clawrig as the live environment for RL training (issue 15).

- :func:`run_episode` / :func:`run_group` and :class:`Rollouts` (:mod:`clawrig.rl.episode`):
  one trial of a task driven by a trainer-owned OpenAI-compatible server, returned as an
  :class:`Episode` (messages, per-call token ids and logprobs, reward, sub-scores, stop reason,
  mask, usage, timings, trial folder); groups with GRPO statistics.
- :mod:`clawrig.rl.server`: the same over HTTP (``clawrig serve``).
- :mod:`clawrig.rl.adapters`: trainer adapters (OpenPipe ART, SkyRL).
"""

from clawrig.rl.episode import (
    Episode,
    EpisodeGroup,
    EpisodeStop,
    GroupStats,
    Rollouts,
    Sampling,
    Turn,
    default_rollouts,
    episode_from_trial,
    group_stats,
    resolve_task,
    run_episode,
    run_group,
)

__all__ = [
    "Episode",
    "EpisodeGroup",
    "EpisodeStop",
    "GroupStats",
    "Rollouts",
    "Sampling",
    "Turn",
    "default_rollouts",
    "episode_from_trial",
    "group_stats",
    "resolve_task",
    "run_episode",
    "run_group",
]
