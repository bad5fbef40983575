"""Trial-level data: configuration, usage, timings, typed errors and the trial result.

File shapes follow DataClawBench's per-trial outputs (shared/reference/formats.md section 3):
usage.json = input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, total_tokens,
cost_usd, request_count, elapsed_time (seconds): the usage of the attempt the folder holds (a
trial run again after an infrastructure failure keeps its earlier attempts' usage apart, in
``TrialResult.retried_usage``).
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, StrictInt, field_validator

from clawrig.spec.job import TrialConfig
from clawrig.spec.process import ProcessScore


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
        """Return the field-wise sum of two usages (a new object); ``cost_usd`` rounded to
        :data:`COST_DIGITS` decimals, so a sum of prices carries no binary float noise
        (0.012 ten times is 0.12, not 0.11999999999999998)."""
        summed = {k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields}
        summed["cost_usd"] = round(summed["cost_usd"], COST_DIGITS)
        return Usage(**summed)


COST_DIGITS = 12
"""Decimals a sum of USD keeps (:meth:`Usage.add`): a millionth of a millionth of a dollar,
far below any price per token."""


class ErrorKind(StrEnum):
    AGENT = "agent"
    INFRASTRUCTURE = "infrastructure"
    GRADING = "grading"
    SETUP = "setup"
    BUDGET = "budget"
    CANCELLED = "cancelled"


class TrialError(BaseModel):
    """A typed failure of a trial. ``phase`` is the lifecycle phase it happened in;
    ``out_of_memory``: a sandbox of the trial died because the kernel killed its processes for
    the memory limit (``--memory-mb``; false in folders written before it was recorded)."""

    kind: ErrorKind
    message: str
    phase: str | None = None
    retryable: bool = False
    out_of_memory: bool = False


class StopReason(StrEnum):
    """Why the agent loop ended. ``token_budget`` / ``cost_budget``: the trial's own cap (or
    its share of the job's budget) reached, graded as it stands; ``cancelled``: the job cut it
    short (its budget ran out while the trial ran: a ``budget`` error, not scored);
    ``model_error``: the provider refused the agent's conversation but answers a plain request
    (graded as it stands, ``stop_detail`` says why); ``provider_error``: the agent's model
    provider failed or refused the trial (an outage; a first prompt or, after answers, every
    request refused: ``stop_detail`` says which): an infrastructure error, not scored. A trial
    that ended in another error during the agent phase has none."""

    FINAL_ANSWER = "final_answer"
    MAX_TURNS = "max_turns"
    TIME_LIMIT = "time_limit"
    TOKEN_BUDGET = "token_budget"
    COST_BUDGET = "cost_budget"
    MODEL_ERROR = "model_error"
    PROVIDER_ERROR = "provider_error"
    CANCELLED = "cancelled"
    REPLAY_END = "replay_end"


CUT_SHORT = frozenset(
    {
        StopReason.MAX_TURNS,
        StopReason.TIME_LIMIT,
        StopReason.TOKEN_BUDGET,
        StopReason.COST_BUDGET,
        StopReason.MODEL_ERROR,
        StopReason.REPLAY_END,
    }
)
"""The :class:`StopReason` values of an agent that did not end on its own answer and was graded
as it stood (plain strings match them: a summary's ``stop_reason``)."""


RECORDED_JSON_MAX_DEPTH = 32
"""Levels of nested objects and arrays the harness records of a value from outside (a score's
``subscores`` and ``details`` keep that many, deeper is kept as its JSON text:
:func:`shallow_json`; a serve request's sampling field nested deeper is refused:
:func:`nested_deeper`)."""


TOOL_ARGUMENTS_MAX_DEPTH = 100
"""Levels of nesting a tool call's parsed arguments may have: deeper, the tool refuses them
and the transcript keeps the model's raw text (``_raw``). JSON nested ~960 deep parses, but
the trial's files could not be written from it (a RecursionError while encoding): the trial
was an infrastructure error, unscored, a way for an agent to abstain (helper-130)."""


def nested_deeper(value: Any, depth: int = RECORDED_JSON_MAX_DEPTH) -> bool:
    """True when ``value`` (JSON data) nests dicts or lists more than ``depth`` levels."""
    if isinstance(value, dict | list):
        if depth <= 0:
            return True
        items = value.values() if isinstance(value, dict) else value
        return any(nested_deeper(v, depth - 1) for v in items)
    return False


def finite_float(value: Any, *, bools: bool = False) -> float | None:
    """``value`` as a float when it is a finite number, else None: NaN, infinities and an
    integer too large for a float are not (``math.isfinite`` of a 400-digit integer raised
    OverflowError: an episode's reward and the viewer's pages were an error, helper-183); a
    bool only with ``bools`` (0.0 / 1.0). Records of a job folder anyone may edit, and a
    grader's verdict, are read through it."""
    if isinstance(value, bool):
        return float(value) if bools else None
    if not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def shallow_json(value: Any, depth: int = RECORDED_JSON_MAX_DEPTH) -> Any:
    """``value`` (JSON data: dicts, lists, scalars) with every dict or list nested ``depth``
    levels down replaced by its compact JSON text (or, when even that cannot be made, by
    ``"<JSON nested too deep>"``).

    Why: a grader's verdict may echo the agent's data, and the agent chooses how deep it
    nests. pydantic writes at most ~255 levels (deeper: "Maximum serialization depth exceeded",
    so the trial folder could not be written: an infrastructure error, retried and never
    scored) and reads at most ~200 (deeper: result.json written but unreadable: a resumed job
    dropped the trial, re-grading refused it), and pickle (``--workers``) stops near 500."""
    if isinstance(value, dict):
        if depth <= 0:
            return _json_text(value)
        return {k: shallow_json(v, depth - 1) for k, v in value.items()}
    if isinstance(value, list):
        if depth <= 0:
            return _json_text(value)
        return [shallow_json(v, depth - 1) for v in value]
    return value


def _json_text(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (RecursionError, ValueError):
        return "<JSON nested too deep>"


class Score(BaseModel):
    """A graded outcome: ``score`` in [0,1] and named sub-scores, or a grading error.

    ``max_score`` is 1.0 (DataClawBench's overall = sum score / sum max over graded tasks).
    ``subscores`` and ``details`` keep :data:`RECORDED_JSON_MAX_DEPTH` levels of nesting (deeper
    values are their JSON text: :func:`shallow_json`).
    """

    score: float | None = None
    max_score: float = 1.0
    subscores: dict[str, Any] = Field(default_factory=dict)
    grader: str = ""
    error: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)

    @field_validator("subscores", "details")
    @classmethod
    def _shallow(cls, value: dict[str, Any]) -> dict[str, Any]:
        return shallow_json(value)  # type: ignore[no-any-return]


class HarnessWaits(BaseModel):
    """Seconds a trial waited on the harness, none of them counted toward its time limits
    (:mod:`clawrig.waits`): for a sandbox-start slot, a grading slot, the model's provider (a
    place of its ``max_concurrency``, or a retry's back-off after it failed a request), the
    harness's busy event loop while the agent ran, and a worker thread for the trial's file
    work (the deadlines moved later by these)."""

    sandbox_start: float = 0.0
    grading: float = 0.0
    model: float = 0.0
    loop: float = 0.0
    """While the agent ran: the harness's event loop too busy to serve the trial."""
    thread: float = 0.0
    """Queued for one of the harness's worker threads (the end state's walk, the trial disk's
    mount, copies: :func:`clawrig.waits.in_thread`)."""

    @property
    def total(self) -> float:
        """The sum of the waits (seconds)."""
        return self.sandbox_start + self.grading + self.model + self.loop + self.thread


class PooledSandbox(BaseModel):
    """One of a trial's sandboxes as it came from the job's warm pool
    (:mod:`clawrig.sandbox.pool`): its pool ``id`` (taken by this trial only), ``hit`` (started
    ahead; False: started when the trial asked) and ``ready_s``, the seconds from taking it to
    ready (its workspace and binds mounted, the trial's environment, its time limit armed)."""

    id: str
    hit: bool
    ready_s: float


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
    task_digest: str = ""
    """SHA-256 (hex) of the task as the trial ran it (:meth:`clawrig.spec.task.Task.digest`):
    re-grading says when the task read now is another, ``--resume`` from a summary compares
    it; "" in folders written before it was recorded."""
    model: str
    agent: str
    sandbox: str
    config_hash: str = ""
    versions: dict[str, str] = Field(default_factory=dict)
    started_at: str = ""
    finished_at: str = ""
    timings: dict[str, float] = Field(default_factory=dict)
    waits: HarnessWaits = Field(default_factory=HarnessWaits)
    """Seconds the trial waited on the harness (within ``timings``; not held against it)."""
    pooled: dict[str, PooledSandbox] = Field(default_factory=dict)
    """``agent`` / ``clean_room`` -> how that sandbox came from the warm pool (absent: started
    cold)."""
    protections: dict[str, str] = Field(default_factory=dict)
    """How the agent's sandbox was held: each limit -> its mechanism (``memory``,
    ``processes``, ``file_size``, ``shm``, ``uid``: the backend's
    :attr:`clawrig.sandbox.base.Sandbox.limits_enforced`; e.g. "cgroup", "RLIMIT_AS", "none")
    and ``disk``: "trial disk of N bytes" or "none: why". Empty in folders written before it was
    recorded, and when no agent sandbox started."""
    score: Score | None = None
    judge_score: Score | None = None
    process: ProcessScore = Field(default_factory=ProcessScore)
    """process_score.json (:class:`clawrig.spec.process.ProcessScore`)."""
    usage: Usage = Field(default_factory=Usage)
    """This attempt's usage (usage.json): its model calls' tokens, USD and requests, and
    ``elapsed_time`` its own wall time (the sum of ``timings``)."""
    retried_usage: Usage = Field(default_factory=Usage)
    """What the trial's earlier attempts spent (failed for infrastructure reasons and run
    again; their folders are in ``_retried/``): all zero when ``attempts`` is 1. Folders
    written before it was recorded have all zero here and the sum in ``usage``."""
    stop_reason: StopReason | None = None
    stop_detail: str | None = None
    """With ``stop_reason`` ``model_error``: the provider's refusal of the agent's conversation
    that ended it (``HTTP <status>: <the provider's message>``); with ``provider_error`` after
    a refusal (a first prompt refused, a provider refusing even the harness's plain request),
    that refusal, the same way; None otherwise."""
    turns: int = 0
    tool_calls: int = 0
    web_misses: int = 0
    """``--web replay``: the agent's searches and pages the recording did not hold."""
    end_state_left_out: StrictInt = Field(default=0, ge=0)
    """Files the agent created or changed that the trial folder's ``end_state/`` left out (its
    caps: :data:`clawrig.runner.trial.END_STATE_MAX_FILES` files and ``END_STATE_MAX_BYTES``
    bytes). Above 0 the recorded end state is not the one graded: the trial cannot be
    re-graded or exported as a sample (helper-197: a 0.0 re-graded 1.0 on what was left)."""
    error: TrialError | None = None
    attempts: int = 1
    """Attempts the batch runner made (1 + retries); set before the folder is written."""
    config: TrialConfig | None = None
    """The trial's configuration (None in folders written before it was recorded): re-grading
    rebuilds the same time limits and grader mode from it."""

    @property
    def ok(self) -> bool:
        return self.error is None

    def spent(self) -> Usage:
        """What the job spent on this trial: this attempt's usage plus its earlier attempts'
        (tokens, USD, requests, seconds); what budgets and the summary's totals count."""
        return self.usage.add(self.retried_usage)

    def counted_score(self) -> float | None:
        """The one score rule: the score every aggregate, console line, export and verify uses.

        An agent error (the agent broke its sandbox; DESIGN.md "blame follows control") counts
        0.0; any other trial error (infrastructure, setup, grading, budget, cancelled) is None:
        not scored, reported (and retried where retryable); otherwise the grader's score in
        [0, 1], or None when grading failed (``Score.error``) or there is no score.
        """
        if self.error is not None:
            return 0.0 if self.error.kind == ErrorKind.AGENT else None
        if self.score is None or self.score.error is not None:
            return None
        return self.score.score


class ScoreFile(BaseModel):
    """``score.json`` of a trial folder (DataClawBench's per-trial score file plus clawrig's
    grader name, error and judge score): ``score`` in [0, 1] or None when not graded."""

    task_id: str
    category: str = ""
    score: float | None = None
    max_score: float = 1.0
    subscores: dict[str, Any] = Field(default_factory=dict)
    grader: str | None = None
    error: str | None = None
    judge: Score | None = None

    @classmethod
    def of(cls, result: TrialResult) -> ScoreFile:
        """The score file of a finished trial (its outcome score, or its error)."""
        s = result.score
        return cls(
            task_id=result.task_id,
            category=result.category,
            score=s.score if s else None,
            max_score=s.max_score if s else 1.0,
            subscores=s.subscores if s else {},
            grader=s.grader if s else None,
            error=s.error if s else (result.error.message if result.error else None),
            judge=result.judge_score,
        )


class DialogFile(BaseModel):
    """``formatted_dialog.json``: the transcript as OpenAI chat messages and the tool schema the
    agent was offered (JSON objects as the OpenAI API defines them)."""

    formatted_dialog: list[dict[str, Any]] = Field(default_factory=list)
    tool_schema: list[dict[str, Any]] = Field(default_factory=list)


def recorded_score_problem(raw: Any) -> str | None:
    """Why the score of a result.json (``raw``: its JSON, as written; its ``score.score``) is
    no score a trial can have: not a number (a bool or a string, which the model would read as
    one), not finite, or outside [0, 1]; None when it is one, or absent. helper-177: NaN, 7 or
    "9" were exported as a trial's score (NaN past every --min-score, and the best of its
    task); helper-189: ``clawrig grade`` took "1.0" for 1.0 and 7 for a score that changed."""
    score = raw.get("score") if isinstance(raw, dict) else None
    value = score.get("score") if isinstance(score, dict) else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"score: not a number: {value!r:.60}"
    number = finite_float(value)  # (a 400-digit integer: no OverflowError)
    if number is None or not 0.0 <= number <= 1.0:
        return f"score: {value!r:.60} is not in [0, 1]"
    return None
