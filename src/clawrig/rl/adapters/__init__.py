"""Adapters from clawrig episodes to real RL trainers' interfaces.

- :mod:`clawrig.rl.adapters.art`: OpenPipe ART (``rollout(model, task) -> art.Trajectory``);
  needs the ``art`` extra (``pip install 'clawrig[art]'``).
- :mod:`clawrig.rl.adapters.skyrl`: SkyRL (a ``skyrl_gym`` ``BaseTextEnv`` whose actions are
  the trainer's generations); needs the ``skyrl`` extra.

Each module imports its trainer's package; the rest of clawrig never does.
"""

from clawrig.errors import ClawrigError


class EpisodeMasked(ClawrigError):
    """Raised by an adapter for an episode with ``mask=True`` (an infrastructure failure), so
    the trainer drops it instead of training on a made-up reward. ``episode`` is the
    :class:`clawrig.rl.Episode`."""

    def __init__(self, episode: object) -> None:
        self.episode = episode
        err = getattr(episode, "error", None) or "infrastructure error"
        super().__init__(f"episode of task {getattr(episode, 'task_id', '?')} masked: {err}")


__all__ = ["EpisodeMasked"]
