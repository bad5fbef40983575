"""``process_score.json``: a trial's process metrics (DataClawBench), typed.

Shapes and formulas from shared/reference/metrics.md ("Process metrics"), computed by
:func:`clawrig.grading.process.process_metrics`. Steps are the agent's assistant messages
(T of them), N = the gold step count, M = the milestones:

- a correct run (score >= 1.0): ``{"efficiency": {s_agent: T, s_gold: N, efficiency: N / T}}``
  (EE);
- an incorrect run: ``{"gpr": {gpr: achieved / M, milestones_total, milestones_achieved,
  break_point, chain_summary, details[]}, "tgpr": {tgpr, tpe, gpr, gamma, s_gold,
  milestones_total, milestones_achieved, details[]}}`` with TPE = mean over achieved
  milestones of gamma^max(t_j - N, 0) and TGPR = their sum / M (gamma 0.9);
- a grading problem: ``{"error": message, "error_kind": "grading" | "infrastructure"}``;
- a run without an outcome score: ``{"skipped": reason}``;
- ``{}`` when no process metric applies (the task has no gold steps or milestones).

The file holds only the keys that apply (a None block is left out, as upstream writes it).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer


class Efficiency(BaseModel):
    """EE of a correct run: ``efficiency`` = ``s_gold`` / ``s_agent`` (steps, counts)."""

    s_agent: int
    s_gold: int
    efficiency: float


class MilestoneDetail(BaseModel):
    """One milestone in the GPR block: ``index`` (1-based, gold order), ``milestone`` (its
    gold key), ``expected`` (gold value), ``achieved``, ``step`` (first step it was reached,
    1-based), ``evidence`` and ``source`` ("match", "judge" or "inferred")."""

    index: int
    milestone: str
    expected: Any = None
    achieved: bool
    step: int | None = None
    evidence: str = ""
    source: str = "match"


class Gpr(BaseModel):
    """Goal progress rate of an incorrect run: ``gpr`` = achieved / total milestones;
    ``break_point`` the 1-based index of the first milestone not achieved (None: all were)."""

    gpr: float
    milestones_total: int
    milestones_achieved: int
    break_point: int | None = None
    chain_summary: str = ""
    details: list[MilestoneDetail] = []


class TgprDetail(BaseModel):
    """One milestone in the TGPR block: ``delay`` = max(step - s_gold, 0) steps (None when not
    achieved), ``weight`` = gamma^delay (0.0 when not achieved)."""

    index: int
    milestone: str
    achieved: bool
    step: int | None = None
    delay: int | None = None
    weight: float = 0.0


class Tgpr(BaseModel):
    """Time-discounted progress: ``tpe`` = mean weight over achieved milestones (0 when none),
    ``tgpr`` = sum of weights / total milestones, ``gamma`` the discount (0.9)."""

    tgpr: float
    tpe: float
    gpr: float
    gamma: float
    s_gold: int
    milestones_total: int
    milestones_achieved: int
    details: list[TgprDetail] = []


class ProcessScore(BaseModel):
    """``process_score.json`` (module docs); ``TrialResult.process``."""

    efficiency: Efficiency | None = None
    gpr: Gpr | None = None
    tgpr: Tgpr | None = None
    error: str | None = None
    error_kind: str | None = None
    """``grading`` or ``infrastructure`` (with ``error``)."""
    skipped: str | None = None

    @model_serializer(mode="wrap")
    def _only_what_applies(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}

    def metrics(self) -> dict[str, float | None]:
        """``{"ee", "gpr", "tpe", "tgpr"}``: each value, None where it does not apply (the
        values every table, summary and reward reads)."""
        return {
            "ee": self.efficiency.efficiency if self.efficiency else None,
            "gpr": self.gpr.gpr if self.gpr else None,
            "tpe": self.tgpr.tpe if self.tgpr else None,
            "tgpr": self.tgpr.tgpr if self.tgpr else None,
        }
