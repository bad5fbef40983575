"""What an unfinished trial's folder recorded it spent (a killed or interrupted job's
``.tmp-*`` folder, set aside in ``_retried/`` on resume): files written by hand, as a killed
gateway or a hostile hand may leave them."""

from __future__ import annotations

import json
import math
from pathlib import Path

from clawrig.runner.trial import recorded_usage, set_aside_unfinished
from clawrig.spec.layout import model_from_json_text
from clawrig.spec.trial import TrialResult


def _call(cost: float | str, cid: str, **extra: object) -> str:
    usage = {"input_tokens": 10, "output_tokens": 5, "cost_usd": cost, "request_count": 1}
    rec = {"seq": 1, "trial_id": "t_1", "task_id": "t", "run_index": 2, "usage": usage,
           "response": {"id": cid}, **extra}  # fmt: skip
    return json.dumps(rec).replace('"NaN"', "NaN").replace('"Infinity"', "Infinity")


def test_only_sound_records_count_and_a_judge_call_once(tmp_path: Path) -> None:
    """A red team planted a negative cost (the spend went to -$99.56 and the budget let every
    trial run), a bare ``1`` (every later resume crashed), NaN and Infinity (the result
    written could not be read back), and a judge call logged in judge_chat.jsonl (not
    counted): each bad line is skipped, the judge's call counts once, a replayed call not."""
    folder = tmp_path / ".tmp-t-x"
    folder.mkdir()
    (folder / "model_calls.jsonl").write_text(
        "\n".join(
            [
                _call(0.01, "c1"),
                "1",
                '"text"',
                _call(-100.0, "c2"),
                _call("NaN", "c3"),
                _call("Infinity", "c4"),
                _call(0.02, "c5", cached=True),  # a replayed answer: nothing spent
                _call(0.04, "c6"),
                "[" * 50_000 + "]" * 50_000,  # (json's decoder: RecursionError)
                _call(1e308, "c7"),  # (two of them: an infinite sum)
                _call("-5", "c8"),  # (a string pydantic turns into -5.0)
                _call(0.1, ""),  # empty and repeated ids (some providers'): each counts
                _call(0.1, ""),
                _call(0.1, "c6"),
                '{"seq": 9, "usage": {"cost_usd": 0.5',  # cut by the kill
            ]
        )
    )
    judge = {"kind": "grader", "response": {"response_id": "j1", "usage": {"cost_usd": 0.5,
             "request_count": 1}}}  # fmt: skip
    again = {
        "kind": "grader",
        "response": {"response_id": "c6", "usage": {"cost_usd": 0.04, "request_count": 1}},
    }  # fmt: skip (the gateway's record of c6, logged twice)
    (folder / "judge_chat.jsonl").write_text(json.dumps(judge) + "\n" + json.dumps(again) + "\n")
    usage, run_index, trial_id = recorded_usage(folder)
    assert math.isclose(usage.cost_usd, 0.01 + 0.04 + 0.3 + 0.5) and usage.request_count == 6
    assert (run_index, trial_id) == (2, "t_1")
    base = TrialResult(task_id="t", trial_id="", model="m", agent="native", sandbox="bwrap")
    assert set_aside_unfinished(folder, base, tmp_path / "_retried")
    (kept,) = (tmp_path / "_retried").iterdir()
    # named as a finished attempt is, <task>__<trial> (it kept its .tmp- name: helper-153)
    assert kept.name == "t__t" and not folder.exists()
    result = model_from_json_text(TrialResult, (kept / "result.json").read_text())
    assert math.isclose(result.usage.cost_usd, 0.85) and result.run_index == 2
    assert result.error is not None and result.error.message.startswith("interrupted")
    # another attempt of that name set aside: it keeps its folder's unique part
    again = tmp_path / ".tmp-t-z"
    again.mkdir()
    (again / "model_calls.jsonl").write_text(_call(0.01, "d1") + "\n")
    assert set_aside_unfinished(again, base, tmp_path / "_retried")
    assert sorted(p.name for p in (tmp_path / "_retried").iterdir()) == ["t__t", "t__t-z"]


def test_a_folder_without_a_recorded_call_is_not_kept(tmp_path: Path) -> None:
    folder = tmp_path / ".tmp-t-y"
    folder.mkdir()
    (folder / "model_calls.jsonl").write_text("1\n[]\n" + _call(-1.0, "c") + "\n")
    base = TrialResult(task_id="t", trial_id="", model="m", agent="native", sandbox="bwrap")
    assert not set_aside_unfinished(folder, base, tmp_path / "_retried")
    assert folder.exists() and not (tmp_path / "_retried").exists()

