"""Environments: the system a suite's tasks run on, built once and cached.

- :mod:`clawrig.env.spec`: :class:`EnvSpec` (Debian, pip and npm packages; a shipped name or a
  YAML file) and which environment a task format expects;
- :mod:`clawrig.env.build`: a root file system with mmdebstrap (bwrap), a Docker image from it;
- :mod:`clawrig.env.store`: the cache (list, sizes, prune);
- :mod:`clawrig.env.warm`: warm snapshots (a task's install lines run once per environment and
  frozen as a read-only layer every trial starts from).

See docs/environments.md.
"""
