"""The one score rule, TrialResult.counted_score(), and every consumer that uses it: the
summary rows and statistics (grading/aggregate.py), export (export/job.py) and verify."""

from __future__ import annotations

import pytest

from clawrig.export.job import JobTrial
from clawrig.grading.aggregate import dataclaw_overall, job_summary, wildclaw_average
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.spec.task import SourceRef, Task, TaskFormat
from clawrig.spec.trial import ErrorKind, Score, TrialError, TrialResult


def _result(
    task_id: str, score: float | None, error: ErrorKind | None = None, grading_error: bool = False
) -> TrialResult:
    return TrialResult(
        task_id=task_id,
        trial_id=f"{task_id}-0",
        model="m",
        agent="native",
        sandbox="bwrap",
        score=Score(score=score, error="unparseable" if grading_error else None)
        if score is not None or grading_error
        else None,
        error=TrialError(kind=error, message="x") if error else None,
    )


CASES = [
    # (recorded score, trial error, grading error) -> counted
    (0.7, None, False, 0.7),
    (None, ErrorKind.AGENT, False, 0.0),  # the agent broke its sandbox: no Score at all
    (0.0, ErrorKind.AGENT, False, 0.0),
    (1.0, ErrorKind.INFRASTRUCTURE, False, None),
    (None, ErrorKind.SETUP, False, None),
    (1.0, ErrorKind.CANCELLED, False, None),
    (None, ErrorKind.GRADING, True, None),
    (None, None, True, None),  # a Score that is a grading error
    (None, None, False, None),  # never graded
]


@pytest.mark.parametrize("score,error,grading_error,counted", CASES)
def test_counted_score(score, error, grading_error, counted):
    assert _result("t", score, error, grading_error).counted_score() == counted


def test_summary_export_and_statistics_use_the_one_rule(tmp_path):
    results = [
        _result("a", 1.0),
        _result("b", None, ErrorKind.AGENT),
        _result("c", 1.0, ErrorKind.INFRASTRUCTURE),
        _result("d", None, ErrorKind.GRADING, grading_error=True),
    ]
    tasks = [
        Task(
            id=r.task_id,
            prompt="p",
            format=TaskFormat.WILDCLAW,
            source=SourceRef(path=tmp_path / f"{r.task_id}.md"),
        )
        for r in results
    ]
    job = JobConfig(suite_path=tmp_path, trial=TrialConfig(model="m"))
    summary = job_summary(job, tasks, results, job_id="j")
    assert [row.score for row in summary.tasks] == [1.0, 0.0, None, None]
    # WildClawBench: (1 + 0 + 0 + 0) / 4; DataClawBench: (1 + 0) / 2 graded
    assert summary.wildclaw.overall == pytest.approx(0.25)
    assert summary.overall_score == pytest.approx(0.5)
    assert (summary.evaluated_count, summary.error_count) == (2, 2)
    assert summary.mean.mean == pytest.approx(0.5) and summary.mean.n == 2
    assert wildclaw_average(results)["overall"] == pytest.approx(0.25)
    assert dataclaw_overall(results)["overall_score"] == pytest.approx(0.5)
    exported = [JobTrial(folder=tmp_path, result=r) for r in results]
    assert [t.score for t in exported] == [1.0, 0.0, None, None]
    assert [t.graded for t in exported] == [True, True, False, False]
