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
