"""The shapes of a ``clawrig verify`` report: findings per sample, and the whole report.

A :class:`Finding` is one result of one check. ``check`` names it:

- ``read``: a problem the task reader found (file, field, line);
- ``self_check.golden``: the evaluator graded on its GOLDEN_WORKSPACE (in a sandbox) must
  reproduce ``expected_reward`` within 1e-6;
- ``self_check.oracle``: the golden trajectory replayed by the oracle agent, then graded;
- ``killer.empty`` / ``killer.removed`` / ``killer.corrupted``: the killer question (an empty
  rollout, the golden end state with its result files removed, then corrupted) must score
  below the threshold;
- ``lint.prompt_path``, ``lint.gt_path``, ``lint.expected_reward``, ``lint.imports``,
  ``lint.tool_schema``, ``lint.replay_diff``: static and replay lint.

Severities: ``error`` fails the sample (and the exit code), ``warning`` is shown, ``info``
records what ran or why a check was skipped. Scores are in [0, 1].
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, computed_field

Severity = Literal["error", "warning", "info"]


class Finding(BaseModel):
    """One result of one check on one sample (see the module docstring for ``check``)."""

    check: str
    severity: Severity
    message: str
    path: str | None = None
    line: int | None = None
    score: float | None = None
    diff: str | None = None

    def location(self) -> str:
        """``path:line`` (or ``path``, or ``""``)."""
        if not self.path:
            return ""
        return f"{self.path}:{self.line}" if self.line else self.path


class SampleReport(BaseModel):
    """Everything ``clawrig verify`` found about one task or sample.

    ``scores`` maps a rollout name (golden, oracle, empty, removed, corrupted) to the score
    the grader gave it (None when the grader failed on it).
    """

    id: str
    name: str = ""
    category: str = ""
    source: str = ""
    expected_reward: float | None = None
    scores: dict[str, float | None] = Field(default_factory=dict)
    findings: list[Finding] = Field(default_factory=list)

    def add(self, check: str, severity: Severity, message: str, **kw: object) -> Finding:
        """Append a finding and return it."""
        finding = Finding(check=check, severity=severity, message=message, **kw)  # type: ignore[arg-type]
        self.findings.append(finding)
        return finding

    @computed_field  # type: ignore[prop-decorator]
    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == "error")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == "warning")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> Literal["pass", "warn", "fail"]:
        """``fail`` on any error, ``warn`` on any warning, else ``pass``."""
        if self.errors:
            return "fail"
        return "warn" if self.warnings else "pass"


class VerifyReport(BaseModel):
    """The report of one ``clawrig verify PATH`` run (``--json`` prints this model)."""

    path: str
    format: str | None = None
    threshold: float = 0.5
    sandbox: str = "bwrap"
    memory_mb: int | None = None
    """Each sandbox's memory limit in MiB (``--memory-mb``) the checks ran under."""
    timeout_multiplier: float = 1.0
    """What the tasks' time limits and their graders' were multiplied by
    (``--timeout-multiplier``)."""
    samples: list[SampleReport] = Field(default_factory=list)
    suite_findings: list[Finding] = Field(default_factory=list)
    task_count: int = 0
    """Tasks or samples read, to be verified (``samples`` holds fewer when ``interrupted``)."""
    interrupted: bool = False
    """True when verify was stopped (Ctrl-C, SIGTERM) before every sample was done:
    ``samples`` holds those that were."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        """True when no sample and no suite-level finding is an error, and verify was not
        interrupted."""
        return (
            not self.interrupted
            and not any(s.errors for s in self.samples)
            and not any(f.severity == "error" for f in self.suite_findings)
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def counts(self) -> dict[str, int]:
        """Samples by status: {"pass", "warn", "fail"}."""
        out = {"pass": 0, "warn": 0, "fail": 0}
        for s in self.samples:
            out[s.status] += 1
        return out

    def sample(self, sample_id: str) -> SampleReport:
        """The report of one sample. Raises KeyError when there is none."""
        for s in self.samples:
            if s.id == sample_id:
                return s
        raise KeyError(sample_id)
