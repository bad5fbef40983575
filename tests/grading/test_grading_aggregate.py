"""Job statistics against hand-computed values (binomials, a t interval, benchmark averages)."""

from __future__ import annotations

import math

import pytest

from clawrig.grading.aggregate import (
    dataclaw_overall,
    error_counts,
    mean_ci,
    pass_at_k,
    pass_hat_k,
    pass_metrics,
    process_averages,
    student_t_quantile,
    summarize,
    wildclaw_average,
)
from clawrig.spec.trial import ErrorKind, Score, TrialError, TrialResult, Usage


def _trial(
    task_id: str,
    score: float | None,
    *,
    run: int = 0,
    category: str = "",
    error: ErrorKind | None = None,
    score_error: str | None = None,
    process: dict | None = None,
    usage: Usage | None = None,
) -> TrialResult:
    return TrialResult(
        task_id=task_id,
        category=category,
        run_index=run,
        trial_id=f"{task_id}-{run}",
        model="m",
        agent="native",
        sandbox="bwrap",
        score=(
            Score(score=None, error=score_error, details={"error_kind": "grading"})
            if score_error
            else (Score(score=score) if score is not None else None)
        ),
        error=TrialError(kind=error, message="boom") if error else None,
        process=process or {},
        usage=usage or Usage(),
    )


def test_pass_at_k_and_pass_hat_k_against_hand_binomials():
    # n = 5 runs, c = 2 successes
    # pass@1 = 1 - C(3,1)/C(5,1) = 1 - 3/5 = 0.4 ; pass^1 = C(2,1)/C(5,1) = 2/5 = 0.4
    # pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7 ; pass^2 = C(2,2)/C(5,2) = 1/10 = 0.1
    # pass@3 = 1 - C(3,3)/C(5,3) = 1 - 1/10 = 0.9 ; pass^3 = C(2,3)/C(5,3) = 0
    # pass@4 = 1 - C(3,4)/C(5,4) = 1 - 0 = 1.0
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    assert pass_at_k(5, 2, 4) == 1.0
    assert pass_hat_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_hat_k(5, 2, 3) == 0.0
    # n = 10, c = 3, k = 5: 1 - C(7,5)/C(10,5) = 1 - 21/252 = 0.91666...
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    # n = 10, c = 8, k = 3: C(8,3)/C(10,3) = 56/120 = 0.46666...
    assert pass_hat_k(10, 8, 3) == pytest.approx(56 / 120)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_pass_metrics_over_trials_average_tasks_with_enough_runs():
    trials = [
        _trial("A", 1.0, run=0),
        _trial("A", 0.0, run=1),
        _trial("A", 1.0, run=2),
        _trial("B", 1.0, run=0),
        _trial("B", 1.0, run=1),
        _trial("B", 1.0, run=2),
        _trial("C", 0.0, run=0),
        _trial("C", 2 / 3, run=1),  # below the 1.0 threshold
        _trial("C", None, run=2, error=ErrorKind.INFRASTRUCTURE),  # left out of n
    ]
    out = pass_metrics(trials, [2, 3])
    # k = 2: A (n=3,c=2): 1 - C(1,2)/C(3,2) = 1, pass^2 = C(2,2)/C(3,2) = 1/3
    #        B (3,3): 1, 1 ; C (n=2, c=0): 0, 0
    #        pass@2 = (1+1+0)/3 = 2/3 ; pass^2 = (1/3+1+0)/3 = 4/9
    assert out["2"]["pass_at_k"] == pytest.approx(2 / 3)
    assert out["2"]["pass_hat_k"] == pytest.approx(4 / 9)
    assert out["2"]["tasks"] == 3
    # k = 3: only A and B have 3 graded runs; pass@3 = 1, 1 ; pass^3 = 0 (A), 1 (B) -> 0.5
    assert out["3"] == {"pass_at_k": 1.0, "pass_hat_k": 0.5, "tasks": 2}
    # a lower threshold turns C's 2/3 into a success: C (n=2, c=1): pass@2 = 1 - 0 = 1
    assert pass_metrics(trials, [2], threshold=0.5)["2"]["pass_at_k"] == pytest.approx(1.0)


def test_t_quantiles_match_the_printed_table():
    # Student t, two-sided 95% (p = 0.975), from any statistics table
    for df, table in [(1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042)]:
        assert student_t_quantile(0.975, df) == pytest.approx(table, abs=5e-4)
    assert student_t_quantile(0.025, 4) == pytest.approx(-2.776, abs=5e-4)


def test_mean_ci_by_hand():
    # values 1, 0, 1, 1, 0.5: mean 3.5/5 = 0.7
    # deviations .3 -.7 .3 .3 -.2 ; squares .09 .49 .09 .09 .04 = 0.8 ; s^2 = 0.8/4 = 0.2
    # s = 0.447214 ; s/sqrt(5) = sqrt(0.2/5) = 0.2 ; t(0.975, 4) = 2.776445
    # half width = 0.555289 ; CI = [0.144711, 1.255289]
    ci = mean_ci([1, 0, 1, 1, 0.5])
    assert ci.mean == pytest.approx(0.7)
    assert ci.stdev == pytest.approx(math.sqrt(0.2))
    assert ci.half_width == pytest.approx(2.776445 * 0.2, abs=1e-6)
    assert (ci.low, ci.high) == (
        pytest.approx(0.144711, abs=1e-6),
        pytest.approx(1.255289, abs=1e-6),
    )
    # normal approximation: 1.959964 * 0.2 = 0.391993
    assert mean_ci([1, 0, 1, 1, 0.5], method="normal").half_width == pytest.approx(
        0.391993, abs=1e-6
    )
    one = mean_ci([0.4])
    assert (one.mean, one.low, one.high, one.n) == (0.4, None, None, 1)
    assert mean_ci([]).mean is None


def test_wildclaw_average_counts_missing_and_errored_tasks_as_zero():
    tasks = {
        "t1": "01_Productivity_Flow",
        "t2": "01_Productivity_Flow",
        "t3": "02_Code_Intelligence",
        "t4": "02_Code_Intelligence",
    }
    trials = [
        _trial("t1", 0.8),
        _trial("t2", None, error=ErrorKind.AGENT),
        _trial("t3", 1.0, run=0),
        _trial("t3", 0.5, run=1),
        # t4: never ran
    ]
    out = wildclaw_average(trials, tasks)
    # per task: t1 0.8, t2 0, t3 (1.0+0.5)/2 = 0.75, t4 0 -> (0.8+0+0.75+0)/4 = 0.3875
    assert out["overall"] == pytest.approx(0.3875)
    assert out["task_count"] == 4
    # 01: (0.8+0)/2 = 0.4 ; 02: (0.75+0)/2 = 0.375
    assert out["categories"]["01_Productivity_Flow"] == {
        "score": pytest.approx(0.4),
        "task_count": 2,
    }
    assert out["categories"]["02_Code_Intelligence"]["score"] == pytest.approx(0.375)
    assert out["modalities"] == {}
    # the leaderboard's Multimodal / Pure-text breakdown: t1, t3 multimodal; t2, t4 pure-text
    modal = {"t1": "multimodal", "t2": "pure-text", "t3": "multimodal", "t4": "pure-text"}
    out = wildclaw_average(trials, tasks, modal)
    assert out["modalities"]["multimodal"] == {"score": pytest.approx(0.775), "task_count": 2}
    assert out["modalities"]["pure-text"] == {"score": 0.0, "task_count": 2}


def test_dataclaw_overall_counts_agent_errors_as_zero_and_skips_other_errors():
    trials = [
        _trial("a", 1.0),
        _trial("b", 2 / 3),
        _trial("c", 0.0),
        _trial("d", None, score_error="judge unparseable"),
        _trial("e", None, error=ErrorKind.AGENT),
    ]
    out = dataclaw_overall(trials)
    # the one score rule: the agent error counts 0, the grading error is not scored
    # (1 + 2/3 + 0 + 0) / (1 + 1 + 1 + 1) = 5/12
    assert out["overall_score"] == pytest.approx(5 / 12)
    assert (out["evaluated_count"], out["error_count"]) == (4, 1)
    assert error_counts(trials) == {"agent": 1, "grading": 1}


def _incorrect(n: int, m: int, achieved: int, weights: float) -> dict:
    """process_score.json of an incorrect run: N gold steps, M milestones, the sum of the
    achieved milestones' weights (metrics.md)."""
    counts = {"milestones_total": m, "milestones_achieved": achieved}
    return {
        "gpr": {"gpr": achieved / m, **counts},
        "tgpr": {"tgpr": weights / m, "tpe": weights / achieved, "gpr": achieved / m,
                 "gamma": 0.9, "s_gold": n, **counts},
    }  # fmt: skip


def test_process_averages_over_the_trials_they_apply_to():
    trials = [
        _trial("a", 1.0, process={"efficiency": {"s_agent": 5, "s_gold": 7, "efficiency": 1.4}}),
        _trial("b", 1.0, process={"efficiency": {"s_agent": 8, "s_gold": 6, "efficiency": 0.75}}),
        _trial("c", 1 / 3, process=_incorrect(7, 9, 7, 6.81)),
        _trial("d", 0.0, process=_incorrect(6, 6, 4, 3.81)),
        _trial("e", 0.0, process={"error": "process judge unparseable", "error_kind": "grading"}),
    ]
    out = process_averages(trials)
    # EE: (1.4 + 0.75)/2 = 1.075 ; GPR: (7/9 + 4/6)/2 = 0.722222 ;
    # TPE: (0.972857 + 0.9525)/2 = 0.962679 ; TGPR: (0.756667 + 0.635)/2 = 0.695833
    assert out["ee"] == {"mean": pytest.approx(1.075), "n": 2}
    assert out["gpr"]["mean"] == pytest.approx((7 / 9 + 4 / 6) / 2)
    assert out["tpe"]["mean"] == pytest.approx((6.81 / 7 + 0.9525) / 2)
    assert out["tgpr"] == {"mean": pytest.approx((6.81 / 9 + 0.635) / 2), "n": 2}
    assert out["error_count"] == 1


def test_summarize_puts_it_together():
    trials = [
        _trial("A", 1.0, run=0, usage=Usage(total_tokens=100, cost_usd=0.01, request_count=3)),
        _trial("A", 0.0, run=1, usage=Usage(total_tokens=50, cost_usd=0.02, request_count=2)),
        _trial("B", 1.0, run=0),
        _trial("B", None, run=1, error=ErrorKind.INFRASTRUCTURE),
    ]
    out = summarize(trials)
    assert out["trials"] == 4 and out["evaluated_count"] == 3 and out["error_count"] == 1
    assert out["errors_by_kind"] == {"infrastructure": 1}
    # repeated runs: the interval is over per-task means, A (1+0)/2 = 0.5 and B 1.0 -> 0.75, n=2
    assert out["mean"]["mean"] == pytest.approx(0.75) and out["mean"]["n"] == 2
    assert out["mean"]["unit"] == "task"
    # t(0.975, 1) = 12.706; stdev of (0.5, 1.0) = 0.35355; half = 12.706*0.35355/sqrt(2) = 3.18
    assert out["mean"]["low"] == 0.0 and out["mean"]["high"] == 1.0  # clipped to [0, 1]
    # the graded-trial overall (DataClawBench): 2 of 3 graded trials -> 2/3
    assert out["dataclaw"]["overall_score"] == pytest.approx(2 / 3)
    # A has 2 graded runs, so k = 1, 2; k = 2 only A: n=2, c=1 -> pass@2 = 1 - C(1,2)/C(2,2) = 1
    assert out["pass"]["2"] == {"pass_at_k": 1.0, "pass_hat_k": 0.0, "tasks": 1}
    # k = 1: A 1/2, B 1/1 -> 0.75
    assert out["pass"]["1"]["pass_at_k"] == pytest.approx(0.75)
    # WildClawBench: A (1+0)/2 = 0.5, B (1+0)/2 = 0.5 -> 0.5
    assert out["wildclaw"]["overall"] == pytest.approx(0.5)
    assert out["usage"]["total_tokens"] == 150
    assert out["usage"]["total_cost_usd"] == pytest.approx(0.03)
    assert out["usage"]["total_requests"] == 5
