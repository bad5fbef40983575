"""Trial-level data: configuration, usage, timings, typed errors and the trial result.

File shapes follow DataClawBench's per-trial outputs (shared/reference/formats.md section 3):
usage.json = input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, total_tokens,
cost_usd, request_count, elapsed_time (seconds).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class Usage(BaseModel):
    """Token and cost counts. Tokens are counts; ``cost_usd`` is US dollars; times in seconds.

    ``input_tokens`` counts the prompt tokens that were NOT read from or written to a cache
    (OpenClaw's ``usage.input``); cached ones are in ``cache_read_tokens`` /
    ``cache_write_tokens``, so each token is priced once."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    request_count: int = 0
    elapsed_time: float = 0.0
    retries: int = 0

    def add(self, other: Usage) -> Usage:
        """Return the field-wise sum of two usages (a new object)."""
        return Usage(**{k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields})


class ErrorKind(StrEnum):
    AGENT = "agent"
    INFRASTRUCTURE = "infrastructure"
    GRADING = "grading"
    SETUP = "setup"
    BUDGET = "budget"
    CANCELLED = "cancelled"


class TrialError(BaseModel):
    """A typed failure of a trial. ``phase`` is the lifecycle phase it happened in."""

    kind: ErrorKind
    message: str
    phase: str | None = None
    retryable: bool = False


class StopReason(StrEnum):
    """Why the agent loop ended."""

    FINAL_ANSWER = "final_answer"
    MAX_TURNS = "max_turns"
    TIME_LIMIT = "time_limit"
    TOKEN_BUDGET = "token_budget"
    COST_BUDGET = "cost_budget"
    MODEL_ERROR = "model_error"
    PROVIDER_ERROR = "provider_error"
    CANCELLED = "cancelled"
    REPLAY_END = "replay_end"


class Score(BaseModel):
    """A graded outcome: ``score`` in [0,1] and named sub-scores, or a grading error.

    ``max_score`` is 1.0 (DataClawBench's overall = sum score / sum max over graded tasks).
    """

    score: float | None = None
    max_score: float = 1.0
    subscores: dict[str, Any] = Field(default_factory=dict)
    grader: str = ""
    error: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class TrialResult(BaseModel):
    """Everything a trial produced, written as result.json in the trial folder.

    ``timings`` maps a phase name (sandbox_start, setup, agent, kill, gt_inject, grading,
    collect) to seconds.
    """

    task_id: str
    category: str = ""
    run_index: int = 0
    trial_id: str
    job_id: str = ""
    task_source: str = ""
    """The task file (or suite root) the task was read from, for re-grading."""
    model: str
    agent: str
    sandbox: str
    config_hash: str = ""
    versions: dict[str, str] = Field(default_factory=dict)
    started_at: str = ""
    finished_at: str = ""
    timings: dict[str, float] = Field(default_factory=dict)
    score: Score | None = None
    judge_score: Score | None = None
    process: dict[str, Any] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    stop_reason: StopReason | None = None
    turns: int = 0
    tool_calls: int = 0
    error: TrialError | None = None
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None
