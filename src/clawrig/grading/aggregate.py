"""Job statistics over trial results: pure functions the runner and reports call.

Sources of the formulas (shared/reference/metrics.md, formats.md):

* Mean with a confidence interval: ``mean +- t_{1-a/2, n-1} * s / sqrt(n)`` with ``s`` the
  sample standard deviation (Student t; the t quantile is computed here from the regularised
  incomplete beta function, standard library only). ``method="normal"`` uses the normal
  quantile instead (``statistics.NormalDist``). No interval for n < 2.
* pass@k, the unbiased estimator from n runs with c successes: ``1 - C(n-c, k) / C(n, k)``
  (Chen et al. 2021, as Claw-Eval reports). pass^k, the probability that k runs all succeed:
  ``C(c, k) / C(n, k)`` (tau-bench). Success = score >= threshold (default 1.0). Task values
  are averaged over the tasks that have at least k graded runs.
* WildClawBench: benchmark score = sum over ALL tasks / task count, a task without a valid
  score counts 0 (several runs of a task: their mean, an errored run counting 0); per category
  likewise.
* DataClawBench: overall_score = sum score / sum max over graded non-error trials;
  error_count and evaluated_count beside it.
* Process metrics: EE averaged over the trials whose process_score has ``efficiency``; GPR, TPE
  and TGPR over those with ``gpr`` / ``tgpr`` (i.e. correct and incorrect runs respectively).

Every score here is :meth:`clawrig.spec.trial.TrialResult.counted_score` (the one score rule:
an agent error counts 0, any other error is not scored). Trials without a counted score are
counted by kind (infrastructure, grading, ...), never as 0 except in the WildClawBench average,
whose upstream definition says so.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from clawrig import __version__
from clawrig.spec.job import JobConfig
from clawrig.spec.summary import (
    DataCheck,
    JobSummary,
    PooledStat,
    TaskRef,
    TaskRow,
    WaitsSummary,
    WaitStat,
)
from clawrig.spec.task import Task
from clawrig.spec.trial import HarnessWaits, PooledSandbox, TrialResult, Usage

__all__ = [
    "MeanCI",
    "agreement_rate",
    "dataclaw_overall",
    "error_counts",
    "mean_ci",
    "pass_at_k",
    "pass_hat_k",
    "pass_metrics",
    "process_averages",
    "student_t_cdf",
    "student_t_quantile",
    "job_summary",
    "rescore_summary",
    "summarize",
    "usage_totals",
    "wildclaw_average",
]


# --------------------------------------------------------------------------------------------
# Student t without scipy
# --------------------------------------------------------------------------------------------


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _beta_inc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_bt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
    bt = math.exp(ln_bt + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return bt * _beta_cf(a, b, x) / a
    return 1.0 - bt * _beta_cf(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    tail = 0.5 * _beta_inc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def student_t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (bisection on :func:`student_t_cdf`, |error| < 1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while student_t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if student_t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class MeanCI:
    """A mean with its confidence interval. ``low``/``high``/``half_width`` are None when
    n < 2; ``stdev`` is the sample standard deviation (None when n < 2)."""

    mean: float | None
    low: float | None
    high: float | None
    half_width: float | None
    stdev: float | None
    n: int
    confidence: float
    method: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def mean_ci(
    values: Iterable[float],
    confidence: float = 0.95,
    method: Literal["t", "normal"] = "t",
) -> MeanCI:
    """Mean and confidence interval of ``values`` (see the module docstring).

    Empty input gives ``mean=None``. Raises ValueError for a confidence outside (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return MeanCI(None, None, None, None, None, 0, confidence, method)
    mean = statistics.fmean(xs)
    if n < 2:
        return MeanCI(mean, None, None, None, None, 1, confidence, method)
    s = statistics.stdev(xs)
    p = 1.0 - (1.0 - confidence) / 2.0
    if method == "normal":
        q = statistics.NormalDist().inv_cdf(p)
    else:
        q = student_t_quantile(p, n - 1)
    half = q * s / math.sqrt(n)
    return MeanCI(mean, mean - half, mean + half, half, s, n, confidence, method)


# --------------------------------------------------------------------------------------------
# pass@k / pass^k
# --------------------------------------------------------------------------------------------


def _check_nck(n: int, c: int, k: int) -> None:
    if n < 1 or k < 1 or not 0 <= c <= n or k > n:
        raise ValueError(f"need 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n runs with c successes: ``1 - C(n-c, k) / C(n, k)``.

    Raises ValueError unless 1 <= k <= n and 0 <= c <= n.
    """
    _check_nck(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k from n runs with c successes: ``C(c, k) / C(n, k)`` (all k runs succeed).

    Raises ValueError unless 1 <= k <= n and 0 <= c <= n.
    """
    _check_nck(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


# --------------------------------------------------------------------------------------------
# Per-trial accessors
# --------------------------------------------------------------------------------------------


def _error_kind(trial: TrialResult) -> str | None:
    if trial.error is not None:
        return str(trial.error.kind)
    if trial.score is None:
        return "ungraded"
    if trial.score.error is not None or trial.score.score is None:
        return str(trial.score.details.get("error_kind") or "grading")
    return None


def error_counts(results: Iterable[TrialResult]) -> dict[str, int]:
    """Trials that have no graded score, by kind: a TrialError's kind (agent,
    infrastructure, grading, setup, budget, cancelled), else the Score's
    ``details["error_kind"]`` (agent for a stopReason-"error" run, grading, infrastructure),
    else "ungraded" when there is no Score at all."""
    counts: dict[str, int] = defaultdict(int)
    for t in results:
        kind = _error_kind(t)
        if kind is not None:
            counts[kind] += 1
    return dict(sorted(counts.items()))


def pass_metrics(
    results: Iterable[TrialResult], ks: Sequence[int], threshold: float = 1.0
) -> dict[str, dict[str, Any]]:
    """pass@k and pass^k per k, averaged over tasks with at least k graded runs.

    Returns ``{"k": {"pass_at_k": x | None, "pass_hat_k": y | None, "tasks": count}}`` (keys
    are the k values as strings, JSON-ready). Error trials are left out of n.
    """
    per_task: dict[str, list[bool]] = defaultdict(list)
    for t in results:
        s = t.counted_score()
        if s is not None:
            per_task[t.task_id].append(s >= threshold - 1e-12)
    out: dict[str, dict[str, Any]] = {}
    for k in ks:
        at, hat = [], []
        for runs in per_task.values():
            n, c = len(runs), sum(runs)
            if n >= k:
                at.append(pass_at_k(n, c, k))
                hat.append(pass_hat_k(n, c, k))
        out[str(k)] = {
            "pass_at_k": statistics.fmean(at) if at else None,
            "pass_hat_k": statistics.fmean(hat) if hat else None,
            "tasks": len(at),
        }
    return out


# --------------------------------------------------------------------------------------------
# Benchmark scores
# --------------------------------------------------------------------------------------------


def wildclaw_average(
    results: Iterable[TrialResult],
    tasks: Mapping[str, str] | Iterable[str] | None = None,
    modalities: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """WildClawBench's benchmark score: sum over ALL tasks / task count; missing or errored = 0.

    ``tasks``: every task of the suite, as ``{task_id: category}`` or a list of ids (category
    then taken from the results); None = the tasks present in ``results``. A task's score is
    the mean of its runs (errored runs count 0). ``modalities``: ``{task_id: modality}``
    (``multimodal`` | ``pure-text``), for the leaderboard's breakdown. Returns ``{"overall",
    "task_count", "categories": {category: {"score", "task_count"}}, "modalities": {modality:
    {"score", "task_count"}}}`` (scores in [0,1]; ``modalities`` empty without the mapping).
    """
    results = list(results)
    runs: dict[str, list[float]] = defaultdict(list)
    cats: dict[str, str] = {}
    for t in results:
        s = t.counted_score()
        runs[t.task_id].append(0.0 if s is None else s)
        if t.category:
            cats.setdefault(t.task_id, t.category)
    if tasks is None:
        ids = list(runs)
    elif isinstance(tasks, Mapping):
        ids = list(tasks)
        cats.update({k: v for k, v in tasks.items() if v})
    else:
        ids = list(tasks)
    per_task = {tid: (statistics.fmean(runs[tid]) if runs.get(tid) else 0.0) for tid in ids}
    by_cat: dict[str, list[float]] = defaultdict(list)
    by_modality: dict[str, list[float]] = defaultdict(list)
    for tid, s in per_task.items():
        by_cat[cats.get(tid, "")].append(s)
        if modalities and tid in modalities:
            by_modality[modalities[tid]].append(s)
    return {
        "overall": sum(per_task.values()) / len(ids) if ids else None,
        "task_count": len(ids),
        "categories": {
            cat: {"score": sum(v) / len(v), "task_count": len(v)}
            for cat, v in sorted(by_cat.items())
        },
        "modalities": {
            m: {"score": sum(v) / len(v), "task_count": len(v)}
            for m, v in sorted(by_modality.items())
        },
    }


def dataclaw_overall(results: Iterable[TrialResult]) -> dict[str, Any]:
    """DataClawBench's overall_score = sum score / sum max over graded non-error trials.

    Returns ``{"overall_score" (None when nothing was graded), "score_sum", "max_sum",
    "evaluated_count", "error_count"}``.
    """
    score_sum = max_sum = 0.0
    evaluated = errors = 0
    for t in results:
        s = t.counted_score()
        if s is None:
            errors += 1
            continue
        evaluated += 1
        score_sum += s
        max_sum += t.score.max_score if t.score is not None else 1.0
    return {
        "overall_score": score_sum / max_sum if max_sum else None,
        "score_sum": score_sum,
        "max_sum": max_sum,
        "evaluated_count": evaluated,
        "error_count": errors,
    }


def process_averages(results: Iterable[TrialResult]) -> dict[str, Any]:
    """EE / GPR / TPE / TGPR means over the trials they apply to (from ``TrialResult.process``,
    :meth:`clawrig.spec.process.ProcessScore.metrics`). Returns ``{"ee": {"mean", "n"}, "gpr":
    ..., "tpe": ..., "tgpr": ..., "error_count": trials whose process metrics are an error}``."""
    values: dict[str, list[float]] = {"ee": [], "gpr": [], "tpe": [], "tgpr": []}
    errors = 0
    for t in results:
        if t.process.error is not None:
            errors += 1
            continue
        for key, value in t.process.metrics().items():
            if value is not None:
                values[key].append(value)
    out: dict[str, Any] = {
        k: {"mean": statistics.fmean(v) if v else None, "n": len(v)} for k, v in values.items()
    }
    out["error_count"] = errors
    return out


def agreement_rate(results: Iterable[TrialResult]) -> dict[str, Any]:
    """Judge/exact agreement for ``--grader both``: over trials whose Score details carry an
    ``agreement`` with a boolean ``agree``. Returns ``{"rate" (None if none), "agree", "n"}``."""
    agree = n = 0
    for t in results:
        a = (t.score.details.get("agreement") if t.score else None) or {}
        if isinstance(a.get("agree"), bool):
            n += 1
            agree += int(a["agree"])
    return {"rate": agree / n if n else None, "agree": agree, "n": n}


def usage_totals(
    results: Iterable[TrialResult], spend: Mapping[tuple[str, int], Usage] | None = None
) -> dict[str, Any]:
    """Token, cost and time totals of what the job spent: the field-wise sum of every trial's
    :meth:`~clawrig.spec.trial.TrialResult.spent` (tokens, USD, seconds; earlier attempts of
    re-run trials included), or of ``spend`` (per task id and run index: what the job folder
    records, :func:`clawrig.runner.batch.recorded_spend`) when given, upstream's
    ``efficiency`` keys total_tokens, total_cost_usd, total_requests, and ``retried``: the
    part of those sums that attempts other than the trials' kept ones spent."""
    total, retried = Usage(), Usage()
    for t in results:
        total = total.add(t.spent())
        retried = retried.add(t.retried_usage)
    if spend is not None:
        total = Usage()
        for u in spend.values():
            total = total.add(u)
        kept = Usage()
        for t in results:
            kept = kept.add(t.usage)
        retried = Usage(**{k: getattr(total, k) - getattr(kept, k) for k in Usage.model_fields})
        retried.elapsed_time = round(retried.elapsed_time, 6)
    out = total.model_dump()
    out["cost_usd"] = round(total.cost_usd, 9)  # no float noise like 1.2000000000000002
    out.update(
        total_cost_usd=out["cost_usd"],
        total_requests=total.request_count,
        retried={**retried.model_dump(), "cost_usd": round(retried.cost_usd, 9)},
    )
    return out


def harness_waits(results: Iterable[TrialResult]) -> WaitsSummary:
    """Seconds trials waited on the harness (``TrialResult.waits``): per kind and in total,
    the sum over trials and the median and largest per trial (zeros for no trials)."""
    rows = [r.waits for r in results]

    def stat(values: list[float]) -> WaitStat:
        if not values:
            return WaitStat()
        return WaitStat(
            total_s=round(sum(values), 3),
            median_s=round(statistics.median(values), 3),
            max_s=round(max(values), 3),
        )

    return WaitsSummary(
        total=stat([w.total for w in rows]),
        **{kind: stat([getattr(w, kind) for w in rows]) for kind in HarnessWaits.model_fields},
    )


def pooled_summary(results: Iterable[TrialResult]) -> dict[str, PooledStat]:
    """Per sandbox role, how the trials' sandboxes came from the warm pool
    (``TrialResult.pooled``): hits, misses and the median seconds until ready."""
    by_role: dict[str, list[PooledSandbox]] = {}
    for r in results:
        for role, box in r.pooled.items():
            by_role.setdefault(role, []).append(box)
    return {
        role: PooledStat(
            hits=sum(1 for b in boxes if b.hit),
            misses=sum(1 for b in boxes if not b.hit),
            ready_median_s=round(statistics.median(b.ready_s for b in boxes), 6),
        )
        for role, boxes in sorted(by_role.items())
    }


def _bounded(ci: dict[str, Any]) -> dict[str, Any]:
    """Scores live in [0, 1]: clip the interval's ends to it."""
    for key, clip in (("low", max), ("high", min)):
        if ci.get(key) is not None:
            ci[key] = clip(ci[key], 0.0 if key == "low" else 1.0)
    return ci


def summarize(
    results: Iterable[TrialResult],
    *,
    tasks: Mapping[str, str] | Iterable[str] | None = None,
    threshold: float = 1.0,
    confidence: float = 0.95,
    ks: Sequence[int] | None = None,
    modalities: Mapping[str, str] | None = None,
    spend: Mapping[tuple[str, int], Usage] | None = None,
) -> dict[str, Any]:
    """Every job statistic in one JSON-ready dict, for summary_<model>.json and the table.

    Keys: ``trials``, ``evaluated_count``, ``error_count``, ``errors_by_kind``,
    ``mean`` (:class:`MeanCI` over graded trial scores), ``wildclaw`` (:func:`wildclaw_average`),
    ``dataclaw`` (:func:`dataclaw_overall`), ``pass`` (:func:`pass_metrics` for ``ks``; default
    1..max runs of a task when some task has more than one graded run, else empty),
    ``process`` (:func:`process_averages`), ``agreement`` (:func:`agreement_rate`),
    ``usage`` (:func:`usage_totals` of ``spend`` when given), ``threshold``.
    """
    results = list(results)
    scores = [s for s in (t.counted_score() for t in results) if s is not None]
    # Repeated runs of one task are not independent samples: with more than one run per task
    # the interval is computed over per-task mean scores (n = tasks), a cluster-robust choice.
    per_task_scores: dict[str, list[float]] = defaultdict(list)
    for t in results:
        sc = t.counted_score()
        if sc is not None:
            per_task_scores[t.task_id].append(sc)
    clustered = any(len(v) > 1 for v in per_task_scores.values())
    ci_values = [statistics.fmean(v) for v in per_task_scores.values()] if clustered else scores
    if ks is None:
        runs: dict[str, int] = defaultdict(int)
        for t in results:
            if t.counted_score() is not None:
                runs[t.task_id] += 1
        most = max(runs.values(), default=0)
        ks = list(range(1, most + 1)) if most > 1 else []
    dc = dataclaw_overall(results)
    return {
        "trials": len(results),
        "evaluated_count": dc["evaluated_count"],
        "error_count": dc["error_count"],
        "errors_by_kind": error_counts(results),
        "mean": _bounded(mean_ci(ci_values, confidence).as_dict())
        | {"unit": "task" if clustered else "trial"},
        "wildclaw": wildclaw_average(results, tasks, modalities),
        "dataclaw": dc,
        "pass": pass_metrics(results, ks, threshold),
        "process": process_averages(results),
        "agreement": agreement_rate(results),
        "usage": usage_totals(results, spend),
        "threshold": threshold,
    }


SUMMARY_NOTES = {
    "wildclaw": "sum of scores over ALL selected tasks / task count; an errored or not-run "
    "task counts 0 (WildClawBench's rule)",
    "overall_score": "sum score / sum max over scored trials, an agent error scoring 0; "
    "error_count counts the trials an error left unscored (DataClawBench's rule)",
    "mean": "mean with a 95% t interval, over per-task mean scores when a task ran more than "
    "once (unit: task); low and high clipped to [0, 1], half_width unclipped",
    "pass": "pass@k and pass^k with success = score >= threshold",
    "process": "EE/GPR/TPE/TGPR exist only for tasks with gold steps and milestones "
    "(DataClawBench)",
    "score": "a trial's score: an agent error counts 0; infrastructure, grading and cancelled "
    "errors are not scored",
    "usage": "every attempt the job made (earlier attempts of re-run trials included, their "
    "part in usage.retried); a task row's cost, tokens and time are its trial folder's attempt "
    "(usage.json), retried_cost_usd its earlier attempts'",
}


def job_summary(
    job: JobConfig,
    tasks: Sequence[Task],
    results: Iterable[TrialResult],
    *,
    job_id: str,
    budget_stopped: bool = False,
    provider_stopped: str | None = None,
    output_stopped: str | None = None,
    interrupted: bool = False,
    interrupted_by: str | None = None,
    elapsed_s: float = 0.0,
    data: DataCheck | None = None,
    web: Mapping[str, Any] | None = None,
    spend: Mapping[tuple[str, int], Usage] | None = None,
) -> JobSummary:
    """The job's ``summary_<model>.json``: DataClawBench's keys plus :func:`summarize`'s
    statistics over ``results``, one row per trial (sorted by task id and run index) whose
    ``score`` is its counted score. ``not_run`` = tasks x runs - results; ``unrun`` lists the
    selected tasks without any trial (so :func:`rescore_summary` keeps WildClawBench's
    denominator). ``data`` / ``web``: the summary's entries for the pulled data and the web
    mode (the runner gives them); ``spend``: what the job folder records per trial, for
    ``usage`` (:func:`usage_totals`)."""
    import datetime as dt
    import sys

    results = list(results)
    ran = {r.task_id for r in results}
    base = JobSummary.model_validate(
        {
            "model": job.trial.model,
            "agent": job.trial.agent,
            "benchmark_version": f"clawrig {__version__}",
            "timestamp": dt.datetime.now(dt.UTC).isoformat(),
            "job_id": job_id,
            "suite": job.suite,
            "suite_path": str(job.suite_path),
            "data": data,
            "web": web,
            "formats": sorted({str(t.format) for t in tasks}),
            "runs_per_task": job.runs,
            "unrun": [
                TaskRef(task_id=t.id, category=t.category, modality=_modality(t))
                for t in tasks
                if t.id not in ran
            ],
            "threshold": job.trial.success_threshold,
            "notes": SUMMARY_NOTES,
            "budget_usd": job.budget_usd,
            "budget_stopped": budget_stopped,
            "provider_stopped": provider_stopped,
            "output_stopped": output_stopped,
            "interrupted": interrupted,
            "interrupted_by": interrupted_by,
            "not_run": len(tasks) * job.runs - len(results),
            "elapsed_s": round(elapsed_s, 3),
            "python": sys.version.split()[0],
            "replayed_from": job.replay_source(),
        }
    )
    refs = [TaskRef(task_id=t.id, category=t.category, modality=_modality(t)) for t in tasks]
    return _scored(base, results, refs, {t.id: t.expected_reward for t in tasks}, spend)


def rescore_summary(
    summary: JobSummary,
    results: Iterable[TrialResult],
    spend: Mapping[tuple[str, int], Usage] | None = None,
) -> JobSummary:
    """``summary`` with its rows and every statistic recomputed from ``results`` (the same
    trials, e.g. after ``clawrig grade --write``), the job's own entries (model, suite, data,
    web, budget, timings) kept. The task set is the summary's rows plus ``unrun``, with their
    categories, modalities and expected rewards; ``spend`` as for :func:`job_summary`."""
    refs: dict[str, TaskRef] = {}
    expected: dict[str, float | None] = {}
    for row in summary.tasks:
        refs.setdefault(
            row.task_id,
            TaskRef(task_id=row.task_id, category=row.category, modality=row.modality),
        )
        expected.setdefault(row.task_id, row.expected_reward)
    for ref in summary.unrun:
        refs.setdefault(ref.task_id, ref)
    return _scored(summary, results, list(refs.values()), expected, spend)


def _modality(task: Task) -> str | None:
    return task.modality if task.format == "wildclaw" else None


def _scored(
    base: JobSummary,
    results: Iterable[TrialResult],
    refs: Sequence[TaskRef],
    expected: Mapping[str, float | None],
    spend: Mapping[tuple[str, int], Usage] | None = None,
) -> JobSummary:
    """``base`` with the rows and statistics of ``results`` over the task set ``refs``
    (``usage`` of ``spend`` when given: :func:`usage_totals`)."""
    results = list(results)
    modality = {r.task_id: r.modality for r in refs if r.modality}
    stats = summarize(
        results,
        tasks={r.task_id: r.category for r in refs},
        threshold=base.threshold,
        modalities=modality,
        spend=spend,
    )
    rows = []
    for r in sorted(results, key=lambda x: (x.task_id, x.run_index)):
        score = r.counted_score()
        exp = expected.get(r.task_id)
        rows.append(
            TaskRow(
                task_id=r.task_id,
                category=r.category,
                modality=modality.get(r.task_id),
                run_index=r.run_index,
                score=score,
                expected_reward=exp,
                meets_expected=None if exp is None or score is None else abs(score - exp) < 1e-6,
                error=r.error,
                stop_reason=r.stop_reason.value if r.stop_reason is not None else None,
                stop_detail=r.stop_detail,
                trial=f"{r.task_id}/{r.trial_id}",
                attempts=r.attempts,
                cost_usd=round(r.usage.cost_usd, 9),
                total_tokens=r.usage.total_tokens,
                elapsed_time=r.usage.elapsed_time,
                retried_cost_usd=round(r.retried_usage.cost_usd, 9),
            )
        )
    usage = stats["usage"]
    scored = {
        "tasks": [row.model_dump(mode="json") for row in rows],
        "overall_score": stats["dataclaw"]["overall_score"],
        "error_count": stats["error_count"],
        "evaluated_count": stats["evaluated_count"],
        "efficiency": {
            "total_tokens": usage["total_tokens"],
            "total_cost_usd": round(usage["total_cost_usd"], 9),
            "total_requests": usage["total_requests"],
        },
        "process": stats["process"],
        "wildclaw": stats["wildclaw"],
        "mean": stats["mean"],
        "pass": stats["pass"],
        "errors_by_kind": stats["errors_by_kind"],
        "agreement": stats["agreement"],
        "usage": usage,
        "waits": harness_waits(results).model_dump(mode="json"),
        "pooled": {
            role: stat.model_dump(mode="json") for role, stat in pooled_summary(results).items()
        },
    }
    return JobSummary.model_validate(base.to_json() | scored)
