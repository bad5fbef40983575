"""What an unfinished trial's folder recorded it spent (a killed or interrupted job's
``.tmp-*`` folder, set aside in ``_retried/`` on resume): files written by hand, as a killed
gateway or a hostile hand may leave them."""

from __future__ import annotations

import json
import math
import os
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


def _ray_record(job_out: Path, task_id: str, costs: list[float]) -> Path:
    """A Ray driver's ``.tmp-ray-r0-*`` record of one attempt's calls."""
    task_dir = job_out / task_id
    task_dir.mkdir(parents=True, exist_ok=True)
    record = task_dir / ".tmp-ray-r0-abc123"
    record.mkdir()
    lines = [_call(c, f"c{i}").replace('"run_index": 2', '"run_index": 0') for i, c in
             enumerate(costs)]  # fmt: skip
    (record / "model_calls.jsonl").write_text("\n".join(lines) + "\n")
    return record


def _packed_trial(tmp_path: Path, task_id: str, costs: list[float]) -> tuple:
    """A finished trial folder as a node packs it (result.json and its calls)."""
    from clawrig.runner.executors.ray import pack_folder

    src = tmp_path / "node" / "trial"
    src.mkdir(parents=True)
    res = TrialResult(task_id=task_id, trial_id="t_1", model="m", agent="native",
                      sandbox="bwrap", job_id="job1")  # fmt: skip
    (src / "result.json").write_text(res.model_dump_json())
    lines = [_call(c, f"c{i}") for i, c in enumerate(costs)]
    (src / "model_calls.jsonl").write_text("\n".join(lines) + "\n")
    return pack_folder(src)


def _job(tmp_path: Path, task_id: str):
    from clawrig.spec.job import JobConfig, TrialConfig

    job = JobConfig(suite_path=tmp_path, output=tmp_path / "out",
                    trial=TrialConfig(agent="native", model="scripted/test"))  # fmt: skip
    task = type("T", (), {"id": task_id, "category": "c"})()
    return job, task


def test_a_ray_attempt_back_in_place_is_counted_once_after_a_driver_kill(tmp_path: Path) -> None:
    """CI (the official run on 3af1155): a Ray job killed with -9 and resumed counted $0.30
    where its model had received $0.28 of calls: the driver had renamed a trial that came
    back into place and died before removing its own record of that trial's calls, which
    --resume then set aside as an attempt. The folder is now unpacked inside the record,
    which names it before the rename: the record of a trial in place is removed, the trial's
    own calls count once."""
    from clawrig.runner.batch import set_aside_killed
    from clawrig.runner.executors.ray import unpack_trial

    job, task = _job(tmp_path, "t")
    record = _ray_record(job.output, "t", [0.01, 0.01])
    folder = unpack_trial(_packed_trial(tmp_path, "t", [0.01, 0.01]), record.parent, "t__t_1",
                          record)  # fmt: skip
    # the driver killed here, before it removed the record: what --resume finds
    assert folder == job.output / "t" / "t__t_1" and (folder / "result.json").is_file()
    assert sorted(p.name for p in record.iterdir()) == ["model_calls.jsonl", "returned_as"]
    assert set_aside_killed(record, task, job, "job1") is None
    assert not record.exists() and not (job.output / "_retried").exists()
    assert math.isclose(recorded_usage(folder)[0].cost_usd, 0.02)


def test_a_ray_attempt_cut_while_it_came_back_is_set_aside_once(tmp_path: Path) -> None:
    """Killed while the trial was written inside the record (or named but not yet renamed):
    the attempt did not finish, so the record's calls are kept in _retried/ (once: the staged
    copy of the same calls goes, as does the name of a folder that never arrived)."""
    from clawrig.runner.batch import set_aside_killed

    job, task = _job(tmp_path, "t")
    for named in (False, True):
        record = _ray_record(job.output, "t", [0.01, 0.02])
        staged = record / ".tmp-t__t_1-xyz"
        staged.mkdir()
        (staged / "model_calls.jsonl").write_text(_call(0.5, "c0") + "\n")
        if named:
            (record / "returned_as").write_text("t__t_1")
        spent = set_aside_killed(record, task, job, "job1")
        assert spent is not None and math.isclose(spent.cost_usd, 0.03)
        assert not record.exists()
    kept = sorted((job.output / "_retried").iterdir())
    assert len(kept) == 2
    for attempt in kept:
        assert sorted(p.name for p in attempt.iterdir()) == ["model_calls.jsonl", "result.json"]
        result = model_from_json_text(TrialResult, (attempt / "result.json").read_text())
        assert math.isclose(result.usage.cost_usd, 0.03) and result.run_index == 0


def test_a_record_removed_midway_still_names_its_trial(tmp_path: Path) -> None:
    """helper-166: the record's removal (``rmtree``, in directory order) took its name file
    first; a driver killed before the calls went left calls naming nothing, set aside on
    --resume beside the trial that holds them. The name goes last now: whatever a kill leaves
    of the record still names the trial, and is removed."""
    from clawrig.runner.batch import set_aside_killed
    from clawrig.runner.executors.ray import remove_returned_record, unpack_trial

    job, task = _job(tmp_path, "t")
    record = _ray_record(job.output, "t", [0.01])
    (record / "judge_chat.jsonl").write_text("")
    unpack_trial(_packed_trial(tmp_path, "t", [0.01]), record.parent, "t__t_1", record)
    # the removal's order, watched: the name file is the last one left
    removed: list[str] = []
    real_unlink = os.unlink

    def unlink(path: str, *args: object, **kwargs: object) -> None:
        removed.append(os.path.basename(path))
        real_unlink(path, *args, **kwargs)

    os.unlink = unlink  # type: ignore[assignment]
    try:
        remove_returned_record(record)
    finally:
        os.unlink = real_unlink  # type: ignore[assignment]
    assert not record.exists() and removed[-1] == "returned_as"
    assert sorted(removed[:-1]) == ["judge_chat.jsonl", "model_calls.jsonl"]
    # killed after those: the name alone is left, and --resume removes it
    record = _ray_record(job.output, "t", [0.01])
    (record / "returned_as").write_text("t__t_1")
    (record / "model_calls.jsonl").unlink()
    assert set_aside_killed(record, task, job, "job1") is None and not record.exists()
    assert not (job.output / "_retried").exists()


def test_a_records_name_is_read_within_bounds_and_never_through_a_link(tmp_path: Path) -> None:
    """helper-166: a 3 GiB name file was read whole (9.5 GB of RSS); a link named as the trial
    (to another task's trial) made the record's calls count nowhere."""
    from clawrig.runner.batch import set_aside_killed

    job, task = _job(tmp_path, "t")
    other = job.output / "u" / "u__t_9"
    other.mkdir(parents=True)
    (other / "result.json").write_text("{}")
    record = _ray_record(job.output, "t", [0.01, 0.02])
    (record.parent / "evil").symlink_to(other)
    (record / "returned_as").write_text("evil")
    spent = set_aside_killed(record, task, job, "job1")
    assert spent is not None and math.isclose(spent.cost_usd, 0.03)
    record = _ray_record(job.output, "t", [0.04])
    with open(record / "returned_as", "wb") as f:
        f.truncate(3 * 1024**3)  # sparse: no disk used
    spent = set_aside_killed(record, task, job, "job1")
    assert spent is not None and math.isclose(spent.cost_usd, 0.04)
    # a name no folder can have (helper-167: ENAMETOOLONG, the record dropped uncounted)
    record = _ray_record(job.output, "t", [0.05])
    (record / "returned_as").write_text("a" * 300)
    spent = set_aside_killed(record, task, job, "job1")
    assert spent is not None and math.isclose(spent.cost_usd, 0.05)
    assert not record.exists() and len(list((job.output / "_retried").iterdir())) == 3


def _errored_trial(folder: Path, task_id: str, job_id: str) -> None:
    """A whole trial folder of ``job_id`` whose attempt failed retryably (re-run on resume)."""
    from clawrig.spec.trial import ErrorKind, TrialError

    folder.mkdir(parents=True)
    result = TrialResult(
        task_id=task_id, trial_id=folder.name, job_id=job_id, model="oracle", agent="oracle",
        sandbox="bwrap",
        error=TrialError(kind=ErrorKind.INFRASTRUCTURE, message="x", phase="agent", retryable=True),
    )  # fmt: skip
    (folder / "result.json").write_text(result.model_dump_json())


def test_resume_moves_an_errored_attempt_into_the_job_only(tmp_path: Path) -> None:
    """helper-184: `--resume` set an errored attempt aside with shutil.move into
    `_retried/<task>__<trial>` as it found it: a link planted at that name had the trial moved
    where it led, outside the job; a folder there hid it inside. A linked task folder had an
    attempt from outside taken into the job. A FIFO as an attempt's result.json held the
    resume for good."""
    import concurrent.futures

    from clawrig.runner.batch import _adopt_orphans, recorded_spend
    from clawrig.spec.job import JobConfig, Progress
    from clawrig.tasks.registry import load_tasks
    from clawrig.testing.paths import REPO

    out, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    tasks = [t for t in load_tasks(REPO / "suites" / "demo") if t.id in ("000002", "000003")]
    _errored_trial(out / "000002" / "oracle_X", "000002", "j")
    (out / "_retried").mkdir()
    (out / "_retried" / "000002__oracle_X").symlink_to(outside)
    _errored_trial(outside / "ext" / "oracle_Z", "000003", "j")
    (out / "000003").symlink_to(outside / "ext")  # a task folder linked out of the job
    (out / "_retried" / "000001__fifo").mkdir()
    os.mkfifo(out / "_retried" / "000001__fifo" / "result.json")
    job = JobConfig(suite_path=REPO / "suites" / "demo", output=out)
    progress = Progress(model="oracle", job_id="j", suite="demo", runs=1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(_adopt_orphans, job, "j", progress, tasks).result(60)
        # what earlier attempts spent, read past the FIFO (not opened for reading)
        spent = pool.submit(recorded_spend, out, "j").result(60)
    assert list(spent) == [("000002", 0)]
    assert sorted(p.name for p in outside.iterdir()) == ["ext"]  # nothing moved out there
    assert (outside / "ext" / "oracle_Z" / "result.json").is_file()  # nor taken from it
    moved = out / "_retried" / "000002__oracle_X-2"
    assert json.loads((moved / "result.json").read_text())["trial_id"] == "oracle_X"
    assert not (out / "000002" / "oracle_X").exists()


def test_job_records_are_read_within_bounds(tmp_path: Path) -> None:
    """helper-185: a summary, a progress file or a killed trial's model_calls.jsonl truncated
    to 20 GB (sparse: no disk used) was read whole: `--resume` and the exports ran out of
    memory. They are read up to a bound; a file over it is no record."""
    import pytest

    from clawrig.errors import UserError
    from clawrig.jsonl import jsonl_objects
    from clawrig.runner.batch import output_state_problem, read_job_summary, read_progress

    for name in ("summary_oracle.json", "progress_oracle.json"):
        with open(tmp_path / name, "w") as fh:
            fh.truncate(20 * 1024**3)
    assert read_job_summary(tmp_path, "oracle") is None
    from clawrig.export.job import read_summary  # (export sft, fourfolder, inspect)

    with pytest.raises(UserError, match=r"summary_oracle.json"):
        read_summary(tmp_path, "oracle")
    with pytest.raises(UserError, match=r"progress_oracle.json: not a valid progress file") as e:
        read_progress(tmp_path / "progress_oracle.json")
    # what to do about it (helper-212): the summary beside it is what a resume goes on from
    said = "; put it back, or remove it: --resume then goes on from summary_oracle.json"
    assert str(e.value).endswith(said)
    (tmp_path / "summary_oracle.json").unlink()
    with pytest.raises(UserError) as e:
        read_progress(tmp_path / "progress_oracle.json")
    assert str(e.value).endswith("; put it back (it is the job's record of its finished trials)")
    lines = tmp_path / "calls.jsonl"
    lines.write_text('{"a": 1}\n{"b": 2}\n')
    assert list(jsonl_objects(lines, limit=12)) == [{"a": 1}]  # (the cut line skipped)
    # a `_retried` that is a file is said before any attempt is moved into it
    job = tmp_path / "a" / "b" / "job"  # (not inside tmp_path's own job files above)
    job.mkdir(parents=True)
    (job / "_retried").write_text("")
    assert output_state_problem(job, "oracle", resume=True) == (
        f"--output: {job / '_retried'} is no folder: attempts set aside go into it; remove or "
        "rename it, or choose another output folder"
    )
