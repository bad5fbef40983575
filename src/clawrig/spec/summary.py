"""``summary_<model>.json``: the job summary, typed.

DataClawBench's summary keys (formats.md section 3: model, benchmark_version, timestamp,
overall_score, error_count, evaluated_count, efficiency{total_tokens, total_cost_usd,
total_requests}) plus clawrig's statistics (shared/reference/metrics.md): WildClawBench's
average, a mean with its confidence interval, pass@k / pass^k, process metrics, judge/exact
agreement, usage totals. The formulas live in :mod:`clawrig.grading.aggregate`; every score
in it is :meth:`clawrig.spec.trial.TrialResult.counted_score`. Scores are in [0, 1], money in
USD, times in seconds, tokens as counts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from clawrig.spec.trial import TrialError, Usage


class TaskRef(BaseModel):
    """A task of the job's selection: its id, category and (WildClawBench) modality."""

    task_id: str
    category: str = ""
    modality: str | None = None
    """``multimodal`` | ``pure-text`` for WildClawBench tasks, else None."""


class TaskRow(BaseModel):
    """One trial of the job: ``score`` is its counted score (None: not scored)."""

    task_id: str
    category: str = ""
    modality: str | None = None
    """``multimodal`` | ``pure-text`` for WildClawBench tasks, else None."""
    run_index: int = 0
    score: float | None = None
    expected_reward: float | None = None
    meets_expected: bool | None = None
    error: TrialError | None = None
    stop_reason: str | None = None
    """Why the agent stopped (the trial's ``stop_reason``: ``final_answer``, ``time_limit``,
    ``model_error`` ...; None when it did not run)."""
    stop_detail: str | None = None
    """With ``model_error``: the provider's refusal (``HTTP <status>: <message>``)."""
    trial: str
    """The trial folder, relative to the job folder (``<task_id>/<trial_id>``)."""
    attempts: int = 1
    cost_usd: float = 0.0
    """USD of the attempt in the trial folder (its usage.json), as ``total_tokens`` and
    ``elapsed_time`` (its wall time, seconds)."""
    total_tokens: int = 0
    elapsed_time: float = 0.0
    retried_cost_usd: float = 0.0
    """USD the trial's earlier attempts spent (0 unless ``attempts`` > 1); the summary's
    ``usage`` totals include it."""


class Efficiency(BaseModel):
    """DataClawBench's efficiency block."""

    total_tokens: int = 0
    total_cost_usd: float = 0.0
    total_requests: int = 0


class MeanStat(BaseModel):
    """Mean with a Student-t (or normal) interval; interval fields None when n < 2.
    ``low``/``high`` are clipped to [0, 1] (scores live there); ``half_width`` is the
    interval's unclipped half width (the ``± x`` to quote; ``mean - half_width`` may be
    below 0). ``unit``: "trial", or "task" when repeated runs were averaged per task first."""

    mean: float | None = None
    low: float | None = None
    high: float | None = None
    half_width: float | None = None
    stdev: float | None = None
    n: int = 0
    confidence: float = 0.95
    method: str = "t"
    unit: str = "trial"


class CategoryScore(BaseModel):
    score: float
    task_count: int


class WildclawScore(BaseModel):
    """WildClawBench's benchmark score: sum over all tasks / task count (missing = 0)."""

    overall: float | None = None
    task_count: int = 0
    categories: dict[str, CategoryScore] = Field(default_factory=dict)
    modalities: dict[str, CategoryScore] = Field(default_factory=dict)
    """By modality (``multimodal`` | ``pure-text``), WildClawBench tasks only."""


class DataclawScore(BaseModel):
    """DataClawBench's overall_score = sum score / sum max over graded non-error trials."""

    overall_score: float | None = None
    score_sum: float = 0.0
    max_sum: float = 0.0
    evaluated_count: int = 0
    error_count: int = 0


class PassK(BaseModel):
    """pass@k and pass^k for one k, averaged over ``tasks`` tasks with >= k graded runs."""

    pass_at_k: float | None = None
    pass_hat_k: float | None = None
    tasks: int = 0


class ProcessStat(BaseModel):
    mean: float | None = None
    n: int = 0


class ProcessAverages(BaseModel):
    """EE / GPR / TPE / TGPR means over the trials they apply to."""

    ee: ProcessStat = Field(default_factory=ProcessStat)
    gpr: ProcessStat = Field(default_factory=ProcessStat)
    tpe: ProcessStat = Field(default_factory=ProcessStat)
    tgpr: ProcessStat = Field(default_factory=ProcessStat)
    error_count: int = 0


class Agreement(BaseModel):
    """Judge/exact agreement for ``--grader both``."""

    rate: float | None = None
    agree: int = 0
    n: int = 0


class UsageTotals(Usage):
    """What the job spent: the field-wise sum over its trials of every attempt's usage
    (tokens, USD, requests, seconds; :meth:`clawrig.spec.trial.TrialResult.spent`) plus
    upstream's efficiency names, and ``retried``: the part spent by earlier attempts of trials
    that were run again."""

    total_cost_usd: float = 0.0
    total_requests: int = 0
    retried: Usage = Field(default_factory=Usage)


class WebSetting(BaseModel):
    """How the job's web tools were answered: ``mode`` (off, live, record, replay, corpus),
    ``dir`` (the records or corpus for replay/corpus), ``miss`` (replay's policy for a request
    not recorded), ``provider`` (live/record search provider), ``misses`` (replay: the
    searches and pages the recording did not hold, over the job's trials)."""

    mode: str = "off"
    dir: str | None = None
    miss: str | None = None
    provider: str | None = None
    misses: int | None = None


class WaitStat(BaseModel):
    """Seconds the job's trials waited on the harness for one thing: the sum over trials, the
    median and the largest per trial."""

    total_s: float = 0.0
    median_s: float = 0.0
    max_s: float = 0.0


class WaitsSummary(BaseModel):
    """How long trials waited on the harness (:class:`clawrig.spec.trial.HarnessWaits`, never
    counted toward their time limits): all waits of a trial (``total``), and per kind."""

    total: WaitStat = Field(default_factory=WaitStat)
    sandbox_start: WaitStat = Field(default_factory=WaitStat)
    grading: WaitStat = Field(default_factory=WaitStat)
    model: WaitStat = Field(default_factory=WaitStat)
    loop: WaitStat = Field(default_factory=WaitStat)


class PooledStat(BaseModel):
    """The job's sandboxes of one role (``agent``, ``clean_room``) that came from its warm pool
    (:class:`clawrig.spec.trial.PooledSandbox`): how many were started ahead (``hits``) or when
    their trial asked (``misses``), and the median seconds until the trial had one
    (``ready_median_s``, a miss's start included)."""

    hits: int = 0
    misses: int = 0
    ready_median_s: float = 0.0


class DataCheck(BaseModel):
    """The summary's ``data`` entry: the ``clawrig pull`` manifest the job's data came from
    (:func:`clawrig.data.manifest.check_data`) and how the files on disk differ from it at the
    end of the job. ``files``: the manifest's file count; ``files_sha256``: SHA-256 (hex) over
    its sorted ``path sha256`` lines; ``changed`` / ``missing`` / ``added``: at most 20 paths
    each (relative to the manifest's folder; ``*_count`` has the full number); ``matches``:
    True when all three are empty."""

    manifest: str
    source: str
    repo_id: str = ""
    revision: str = ""
    commit: str = ""
    files: int = 0
    files_sha256: str = ""
    matches: bool = True
    changed: list[str] = Field(default_factory=list)
    changed_count: int = 0
    missing: list[str] = Field(default_factory=list)
    missing_count: int = 0
    added: list[str] = Field(default_factory=list)
    added_count: int = 0


class JobSummary(BaseModel):
    """``summary_<model>.json`` (see the module docstring). ``pass`` is a Python keyword, so
    the field is ``pass_k`` with the JSON name ``pass`` (dump with ``by_alias=True``)."""

    model_config = ConfigDict(populate_by_name=True, protected_namespaces=())

    model: str
    agent: str
    benchmark_version: str
    timestamp: str
    job_id: str = ""
    suite: str = "all"
    suite_path: str = ""
    data: DataCheck | None = None
    """The pulled data the job ran on (:func:`clawrig.data.manifest.data_summary`: its manifest
    check), None when the data was not pulled by ``clawrig pull``."""
    web: WebSetting | None = None
    formats: list[str] = Field(default_factory=list)
    """The task formats of the job (wildclaw, fourfolder, dataclaw): which headline to show."""
    runs_per_task: int = 1
    tasks: list[TaskRow] = Field(default_factory=list)
    unrun: list[TaskRef] = Field(default_factory=list)
    """Selected tasks without any trial in ``tasks`` (budget stop, interrupt): WildClawBench's
    average counts them 0, so a re-computed summary needs them."""
    overall_score: float | None = None
    error_count: int = 0
    evaluated_count: int = 0
    efficiency: Efficiency = Field(default_factory=Efficiency)
    process: ProcessAverages = Field(default_factory=ProcessAverages)
    wildclaw: WildclawScore = Field(default_factory=WildclawScore)
    mean: MeanStat = Field(default_factory=MeanStat)
    pass_k: dict[str, PassK] = Field(default_factory=dict, alias="pass")
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    agreement: Agreement = Field(default_factory=Agreement)
    usage: UsageTotals = Field(default_factory=UsageTotals)
    waits: WaitsSummary = Field(default_factory=WaitsSummary)
    pooled: dict[str, PooledStat] = Field(default_factory=dict)
    """Per sandbox role, the trials' sandboxes that came from the warm pool; ``{}`` without
    one."""
    threshold: float = 1.0
    notes: dict[str, str] = Field(default_factory=dict)
    budget_usd: float | None = None
    budget_stopped: bool = False
    provider_stopped: str | None = None
    """One line when the job stopped starting trials because a model's server could not be
    reached or refused the key, account or model (:func:`clawrig.llm.client.provider_stop`),
    else None; the trials not run stay resumable."""
    output_stopped: str | None = None
    """One line when the job stopped starting trials because its output folder could not be
    written (full or read-only: :func:`clawrig.runner.batch.output_stop_line`), else None;
    the trials not run stay resumable."""
    interrupted: bool = False
    interrupted_by: str | None = None
    """The signal that interrupted the job: ``SIGINT`` (Ctrl-C) or ``SIGTERM`` (kill,
    timeout); None when it was not interrupted."""
    not_run: int = 0
    elapsed_s: float = 0.0
    python: str = ""
    regraded_at: str | None = None
    """When ``clawrig grade --write`` last recomputed the summary (ISO 8601, UTC), else None."""
    replayed_from: str | None = None
    """The job folder ``--replay`` served every model reply from (their recorded usage and
    cost counted, no model called), else None."""

    def to_json(self) -> dict[str, object]:
        """The JSON object written to summary_<model>.json (``pass`` under its own name)."""
        return self.model_dump(mode="json", by_alias=True)


OUTPUT_MOVED = "was removed or replaced while the job ran"
"""The words of a summary's ``output_stopped`` line when the job's output folder, or its lock
file, was removed or replaced under it (``clawrig.runner.batch.output_moved_line``), not full
or read-only."""

HEADLINE_BENCHMARKS = ("dataclaw", "wildclaw")
"""The task formats whose benchmark has numbers of its own in a summary (DataClawBench's Acc
and process metrics, WildClawBench's average)."""


def headline_benchmarks(summary: dict[str, Any]) -> set[str] | None:
    """Which of :data:`HEADLINE_BENCHMARKS` a summary dict's job ran (its ``formats``): their
    numbers head the job's results, the command's and the viewer's. None when the summary does
    not say (one written before ``formats``, or a malformed value)."""
    formats = summary.get("formats")
    named = [f for f in formats if isinstance(f, str)] if isinstance(formats, list) else []
    if not named:
        return None
    return {f for f in named if f in HEADLINE_BENCHMARKS}
