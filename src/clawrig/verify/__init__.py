"""``clawrig verify``: does every sample keep its promise?

- self-check (:mod:`clawrig.verify.selfcheck`): the grader reproduces ``expected_reward`` on
  the golden workspace and on the oracle's replay of the golden trajectory;
- the killer question (:mod:`clawrig.verify.killer`): an empty or wrong rollout scores below
  the threshold;
- lint (:mod:`clawrig.verify.lint`): missing prompt inputs and gt files, rewards outside
  [0, 1], non-stdlib imports, tool calls outside the schema, recorded tool results that replay
  does not reproduce.

Entry point: :func:`verify_path`; report shapes in :mod:`clawrig.verify.report`.
"""

from clawrig.verify.core import DEFAULT_THRESHOLD, verify_path, verify_task
from clawrig.verify.report import Finding, SampleReport, VerifyReport

__all__ = [
    "DEFAULT_THRESHOLD",
    "Finding",
    "SampleReport",
    "VerifyReport",
    "verify_path",
    "verify_task",
]
