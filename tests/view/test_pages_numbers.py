"""Numbers of records anyone may edit, as the pages and an episode read them: a 400-digit
integer is no number there (helper-183: math.isfinite raised OverflowError, a 500)."""

from __future__ import annotations

import json

from clawrig.rl.episode import _subscores
from clawrig.spec.trial import Score, TrialResult
from clawrig.view.pages import fmt_score, fmt_usd, set_aside_spend

HUGE = 10**400


def test_a_huge_integer_shows_as_a_dash():
    assert (fmt_score(HUGE), fmt_usd(-HUGE), fmt_score(0.25)) == ("—", "—", "0.2500")


def test_set_aside_spend_passes_over_impossible_costs(tmp_path):
    costs = {"a": 0.5, "b": HUGE, "c": float("nan"), "d": -1, "e": "9", "f": True, "g": 0.25}
    for name, cost in costs.items():
        folder = tmp_path / "_retried" / name
        folder.mkdir(parents=True)
        text = json.dumps({"job_id": "j", "usage": {"cost_usd": cost}})  # (NaN as NaN)
        (folder / "result.json").write_text(text)
    other = tmp_path / "_retried" / "other-job"
    other.mkdir()
    (other / "result.json").write_text(json.dumps({"job_id": "k", "usage": {"cost_usd": 7}}))
    assert set_aside_spend(tmp_path, "j") == (len(costs), 0.5 + 0.25)


def test_an_episodes_sub_scores_leave_out_a_huge_integer():
    result = TrialResult(
        task_id="t", trial_id="x", model="m", agent="native", sandbox="bwrap",
        score=Score(score=0.5, subscores={"answer": HUGE, "ok": True, "part": 0.5}),
    )  # fmt: skip
    assert _subscores(result) == {"ok": 1.0, "part": 0.5}


def test_a_trial_page_and_the_cache_take_a_huge_integer(jobs, tmp_path):
    """helper-184: a 400-digit latency in a trial's model_calls.jsonl passed Jinja's `is
    number` and made '%.3f' raise (the trial page a 500, --bundle a traceback); a cached row's
    400-digit cost made the job page a 500."""
    import shutil

    from view_helpers import clawrig

    from clawrig.view.index import INDEX_FILE, _valid_row

    job = tmp_path / "job"
    shutil.copytree(jobs["model"], job, ignore=shutil.ignore_patterns(INDEX_FILE, ".clawrig.lock"))
    calls = next(job.glob("000015/*/model_calls.jsonl"))
    record = {"seq": 99, "role": "agent", "status": 200, "usage": {"cost_usd": 0.1}}
    with calls.open("a") as fh:
        fh.write(json.dumps(record | {"latency_s": HUGE}) + "\n")
    proc = clawrig("view", job, "--bundle", tmp_path / "site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = next((tmp_path / "site").glob(f"*/trials/000015/{calls.parent.name}.html"))
    assert '<td class="num">99</td>' in page.read_text()  # the record's row, its latency "—"
    cache = json.loads((job / INDEX_FILE).read_text())
    row = cache["rows"][0]
    assert _valid_row(row) and not _valid_row(row | {"cost": HUGE})


def test_identical_runs_have_one_task_mean_however_many_there_are():
    """helper-223: five runs of 0.98 averaged to 0.9800000000000001 and three to 0.98, so the
    compare page counted two identical jobs "better" on that task, with a CI of [-0.000,
    +0.000]. A task's mean is the same for any number of equal runs."""
    from clawrig.view.pages import task_means

    for score in (0.98, 0.1, 0.7, 1 / 3):
        means = set()
        for runs in range(1, 9):
            rows = [{"task": "t", "cat": "c", "score": score, "cost": 0.0}] * runs
            means.add(task_means(rows)["t"]["score"])  # type: ignore[arg-type]
        assert len(means) == 1 and abs(means.pop() - score) < 1e-12, score
