"""The Job from Python equals the CLI, and one job per output folder: a finished folder is
refused (and ``--resume`` runs nothing), an unfinished one needs ``--resume``, a second job
into a folder in use is refused, a budget stop exits 3, and no trial ever exists twice."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clawrig import Job, JobConfig, TrialConfig

pytestmark = pytest.mark.sandbox

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))


def _env(srv, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith(("_API_KEY", "_BASE_URL")) and k not in ("DEFAULT_MODEL", "JUDGE_MODEL")
    }
    return {**env, "SCRIPTED_BASE_URL": srv.base_url, **extra}


def _keys(out: Path) -> list[tuple[str, int]]:
    """(task_id, run_index) of every trial folder in the job folder (``_retried`` aside)."""
    keys = []
    for rj in out.glob("*/*/result.json"):
        if rj.parts[-3] == "_retried":
            continue
        res = json.loads(rj.read_text())
        keys.append((res["task_id"], res["run_index"]))
    return sorted(keys)


def _unset_model_env(monkeypatch) -> None:
    """Unset the model variables for this test; whatever the Job's env file then puts into
    os.environ (python-dotenv fills unset variables) is removed again at teardown."""
    for var in ("SCRIPTED_BASE_URL", "DEFAULT_MODEL", "JUDGE_MODEL"):
        monkeypatch.setenv(var, "")  # recorded, so teardown restores the original state
        monkeypatch.delenv(var)


def _scores(summary: dict) -> dict[tuple[str, int], float | None]:
    return {(r["task_id"], r["run_index"]): r["score"] for r in summary["tasks"]}


def test_cli_and_python_job_give_the_same_summary(
    mini_bench, scripted_server, tmp_path, even_responder, monkeypatch
):
    bench = mini_bench(4)
    srv = scripted_server(responder=even_responder)
    cli_out, py_out = tmp_path / "cli", tmp_path / "py"
    r = subprocess.run(
        [CLAWRIG, "run", bench / "tasks", "-m", "scripted/test", "-p", "2", "-o", cli_out],
        env=_env(srv),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    cli = json.loads((cli_out / "summary_scripted_test.json").read_text())
    # the console: a row per trial with its folder, and WildClawBench's own headline
    for row in cli["tasks"]:
        assert row["trial"] in r.stdout and row["task_id"] in r.stdout
    assert "WildClawBench average score: 0.6250" in r.stdout

    # the same job from Python: the model named in a .env file, as a user would keep it
    env_file = tmp_path / "job.env"
    env_file.write_text(f"DEFAULT_MODEL=scripted/test\nSCRIPTED_BASE_URL={srv.base_url}\n")
    _unset_model_env(monkeypatch)
    config = JobConfig(
        suite_path=bench / "tasks", parallel=2, output=py_out, env_file=env_file,
        trial=TrialConfig(agent="native"),
    )  # fmt: skip
    job = Job(config)
    summary = job.run()
    assert job.config.trial.model == "scripted/test"
    assert job.services.gateway is not None  # every call went through the job's gateway
    assert json.loads((py_out / "summary_scripted_test.json").read_text()) == summary

    # task k writes ok-k when k is even (score 1.0), WRONG otherwise (0.25: file, no match)
    expected = {(t, 0): (1.0 if int(t.split("_")[-2]) % 2 == 0 else 0.25) for t, _ in _keys(py_out)}
    assert _scores(summary) == _scores(cli) == expected
    assert math.isclose(summary["overall_score"], cli["overall_score"])
    assert math.isclose(summary["overall_score"], (2 * 1.0 + 2 * 0.25) / 4)
    assert summary["efficiency"] == cli["efficiency"]  # 2 calls x $0.01 per trial, both ways
    assert math.isclose(summary["efficiency"]["total_cost_usd"], 4 * 0.02)
    for out in (cli_out, py_out):  # every call recorded by the gateway, per trial
        assert len(list(out.glob("*/*/model_calls.jsonl"))) == 4


def test_judge_model_comes_from_the_env_file(scripted_server, tmp_path, monkeypatch):
    """JUDGE_MODEL in .env makes the job's judge (auto grader); DEFAULT_MODEL its model."""
    srv = scripted_server()
    monkeypatch.chdir(tmp_path)
    _unset_model_env(monkeypatch)
    Path(".env").write_text(
        f"SCRIPTED_BASE_URL={srv.base_url}\nDEFAULT_MODEL=scripted/agent\n"
        "JUDGE_MODEL=scripted/judge\n"
    )
    suite = Path(__file__).resolve().parents[2] / "suites" / "demo"
    job = Job(JobConfig(suite_path=suite, suite="000001", output=tmp_path / "out")).prepare()
    assert (job.config.trial.model, job.config.trial.judge) == ("scripted/agent", "scripted/judge")
    assert job.services.judge is not None and job.services.judge.name == "scripted/judge"
    assert not (tmp_path / "out").exists()  # preparing starts nothing and writes nothing
    assert srv.requests == []  # the loopback probe is GET /models: no chat request, no cost


def test_budget_exit_unfinished_folder_resume_and_finished_folder(
    mini_bench, scripted_server, tmp_path, even_responder
):
    bench = mini_bench(6)
    srv = scripted_server(responder=even_responder)  # $0.02 per trial
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-o", str(out)]

    def run(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args + list(more), env=_env(srv), capture_output=True, text=True, timeout=300
        )

    r = run("--budget-usd", "0.05")
    assert r.returncode == 3, (r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    assert "budget of $0.05 stopped the job" in r.stdout
    first = _keys(out)
    # trials start while spend < $0.05: $0, $0.02, $0.04; the third's second request is
    # refused ($0.05 spent): the job's budget cut it short, so it is not scored (not done)
    assert len(first) == 3

    r = run()  # a plain re-run into the unfinished folder: refused, nothing run
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "holds an unfinished job of scripted/test (2 trial(s) done" in r.stderr
    assert "--resume" in r.stderr and _keys(out) == first

    r = run("--resume")
    assert r.returncode == 0, r.stderr[-1500:]
    keys = _keys(out)
    assert len(keys) == 6 and len(set(keys)) == 6 and set(first) <= set(keys)
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert len(summary["tasks"]) == 6 and math.isclose(summary["overall_score"], 0.625)

    r = run()  # finished: refused with what the folder holds
    assert r.returncode == 2 and "holds a finished job of scripted/test" in r.stderr
    requests = len(srv.requests)
    r = run("--resume")  # finished: nothing to run, the summary is shown again
    assert r.returncode == 0, r.stderr[-1500:]
    assert "finished job" in r.stderr and "nothing to run" in r.stderr
    assert _keys(out) == keys and len(srv.requests) == requests
    assert "0.6250" in r.stdout  # the table of the finished job
    assert "6/6" in r.stderr and "0/6" not in r.stderr  # its bar: all done (it said 0/6)
    # with other trial settings it is refused as an unfinished one is (helper-168: "nothing
    # to run", exit 0), naming the summary the job is known by
    r = run("--resume", "--max-turns", "5")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    said = f"{out / 'summary_scripted_test.json'}: --resume: trial settings differ from the job's"
    assert said in r.stderr and "max_turns 100 -> 5" in r.stderr, r.stderr
    assert "tasks left" not in r.stderr and _keys(out) == keys and len(srv.requests) == requests
    # and so with the model's server gone: nothing runs, so the model is not asked (it said
    # "cannot reach scripted/test": a new user's finding)
    srv.stop()
    r = run("--resume")
    assert r.returncode == 0, r.stderr[-1500:]
    assert "nothing to run" in r.stderr and "0.6250" in r.stdout
    # helper-212: an unreadable summary was read as no record (the finished job ran again
    # from scratch, spending again), an unreadable trial result as no trial (it ran again, its
    # spend dropped from the totals and the budget): each is one line naming the file
    folders = sorted(out.glob("*/*/"))
    summary_file = out / "summary_scripted_test.json"
    kept = summary_file.read_bytes()
    summary_file.write_bytes(kept[:40])
    r = run("--resume")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"--resume: {summary_file} cannot be read as a job summary" in " ".join(r.stderr.split())
    summary_file.write_bytes(kept)
    rj = sorted(out.glob("*/scripted_test_*/result.json"))[2]
    text = rj.read_text()
    rj.write_text(text[: len(text) // 2])
    r = run("--resume")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    said = " ".join(r.stderr.split())
    assert f"--resume: {rj} cannot be read as a trial result" in said, r.stderr
    assert f"move its trial folder {rj.parent} out of {out}" in said
    assert sorted(out.glob("*/*/")) == folders and summary_file.read_bytes() == kept


def test_a_second_job_into_a_folder_in_use_is_refused(
    mini_bench, scripted_server, tmp_path, even_responder
):
    import threading

    bench = mini_bench(6)
    second_done = threading.Event()

    def slow(req):  # the first job crawls (up to ~24 s) until the second one has been refused
        rep = even_responder(req)
        rep.delay = 0.0 if second_done.is_set() else 2.0
        return rep

    srv = scripted_server(responder=slow)
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-o", str(out)]
    with open(tmp_path / "first.err", "w") as err:
        first = subprocess.Popen(args, env=_env(srv), stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 60
    while not (out / "progress_scripted_test.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    second = subprocess.run(args, env=_env(srv), capture_output=True, text=True, timeout=120)
    second_done.set()
    assert first.wait(timeout=300) == 0, (tmp_path / "first.err").read_text()[-1500:]
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert f"another clawrig job is writing to {out}" in second.stderr
    assert len(_keys(out)) == 6  # only the first job's trials


def _bench_run(bench: Path, out: Path, srv: Any, *more: str) -> subprocess.CompletedProcess[str]:
    """``clawrig run`` of the mini bench with the scripted model into ``out``."""
    return subprocess.run(
        [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-o", str(out), *more],
        env=_env(srv),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_an_output_folder_removed_mid_job_stops_it_and_resume_runs_what_went(
    mini_bench, scripted_server, tmp_path, even_responder
):
    """helper-218: the output folder deleted while a job ran was recreated by the next trial
    and the job exited 0, its summary listing trial folders that were gone. The job now sees
    that its lock file is not the one there, starts no more trials and says so (exit 1); its
    summary and progress file go to a folder at the path again, and --resume runs the trial
    whose folder went and the one not run."""
    bench = mini_bench(3)
    out = tmp_path / "out"
    asked: list[int] = []

    def remove_the_folder_on_the_second_trial(req):
        k = int(re.search(r"TASKNUM=(\d+)", req["messages"][0]["content"])[1])
        if asked and k != asked[0] and len(set(asked)) == 1:
            shutil.rmtree(out)  # the first trial's folder with it, the second one running
        asked.append(k)
        return even_responder(req)

    srv = scripted_server(responder=remove_the_folder_on_the_second_trial)
    r = _bench_run(bench, out, srv)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    line = (
        f"the output folder {out} was removed or replaced while the job ran: the job started "
        "no more trials, and trial folders it wrote before may be gone with it; --resume runs "
        "every trial whose folder is missing"
    )
    assert f"stopped: {line}" in " ".join(r.stdout.split()), r.stdout[-2000:]
    assert len(set(asked)) == 2  # the third trial never started
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["output_stopped"] == line and summary["not_run"] == 1
    from clawrig.view.pages import status

    assert status(False, summary) == "stopped: output removed or replaced"
    # the second trial's folder went with the first's, and its retry did not start (it was
    # made anew at the path: helper-224)
    assert _keys(out) == []
    r = _bench_run(bench, out, srv, "--resume")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert sorted(_keys(out)) == [(f"01_Productivity_Flow_task_{k}_echo", 0) for k in (1, 2, 3)]
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary.get("output_stopped") is None
    scores = [t["score"] for t in sorted(summary["tasks"], key=lambda t: t["task_id"])]
    assert [s == 1.0 for s in scores] == [False, True, False], scores  # even k solved
    # only the lock file removed (the folder kept): another job could lock the folder now;
    # the job stops as well, and says what went
    lock = out / ".clawrig.lock"
    asked.clear()

    def remove_the_lock_on_the_second_trial(req):
        k = int(re.search(r"TASKNUM=(\d+)", req["messages"][0]["content"])[1])
        if asked and k != asked[0] and len(set(asked)) == 1:
            lock.unlink()
        asked.append(k)
        return even_responder(req)

    srv = scripted_server(responder=remove_the_lock_on_the_second_trial)
    again = tmp_path / "again"
    lock = again / ".clawrig.lock"
    r = _bench_run(bench, again, srv)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    line = (
        f"the job's lock file {lock} was removed or replaced while the job ran: another job "
        f"could write to {again}; the job started no more trials; --resume continues it"
    )
    assert f"stopped: {line}" in " ".join(r.stdout.split()), r.stdout[-2000:]
    assert len(_keys(again)) == 2 and len(set(asked)) == 2
    # the folder is the job's: its own progress file is no other job's (helper-226: "not
    # written ... progress_scripted_test.json there was written since"), so its summary and
    # progress file are there, and --resume continues it
    assert "not written" not in r.stdout + r.stderr, r.stdout[-1500:] + r.stderr[-1500:]
    summary = json.loads((again / "summary_scripted_test.json").read_text())
    assert summary["output_stopped"] == line and summary["not_run"] == 1
    r = _bench_run(bench, again, scripted_server(responder=even_responder), "--resume")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert sorted(_keys(again)) == [(f"01_Productivity_Flow_task_{k}_echo", 0) for k in (1, 2, 3)]


def test_a_job_whose_output_folder_another_job_took_writes_nothing_there(
    mini_bench, scripted_server, tmp_path, even_responder
):
    """helper-222: a job whose output folder was replaced wrote its summary and progress file
    into the new folder all the same, over the finished summary of a job run there meanwhile.
    Neither is written where the folder holds another job's summary or another job holds its
    lock; the job's table is printed and the line says why (exit 1). Nor does it sweep the
    half-written trial folders there (helper-224)."""
    import fcntl

    bench = mini_bench(3)
    out = tmp_path / "out"
    theirs = {"job_id": "another-job", "tasks": []}
    held: list[int] = []
    asked: list[int] = []

    def replace_the_folder(how: str):
        def responder(req):
            k = int(re.search(r"TASKNUM=(\d+)", req["messages"][0]["content"])[1])
            if asked and k != asked[0] and len(set(asked)) == 1:
                out.rename(out.with_name(f"{how}.old"))
                out.mkdir()
                # the other job's trial in progress there: never swept by this one
                # (helper-224: its half-written folder was removed when this job ended)
                (out / "01_Productivity_Flow_task_1_echo" / ".tmp-theirs").mkdir(parents=True)
                if how == "summary":
                    (out / "summary_scripted_test.json").write_text(json.dumps(theirs))
                elif how == "other":  # a job of another model finished there meanwhile
                    other = {"job_id": "oracle-job", "model": "oracle", "tasks": []}
                    (out / "summary_oracle.json").write_text(json.dumps(other))
                elif how == "same":  # a --resume of this job finished it there meanwhile
                    first = next(out.with_name("same.old").glob("*/*/result.json"))
                    ours = {"job_id": json.loads(first.read_text())["job_id"], "tasks": []}
                    (out / "summary_scripted_test.json").write_text(json.dumps(ours))
                else:  # another process holds the new folder's lock
                    held.append(os.open(out / ".clawrig.lock", os.O_RDWR | os.O_CREAT))
                    fcntl.flock(held[-1], fcntl.LOCK_EX)
            asked.append(k)
            return even_responder(req)

        return responder

    for how, why in [
        ("summary", "summary_scripted_test.json there is another job's (another-job)"),
        ("other", "summary_oracle.json there is another model's job"),  # (helper-226)
        ("same", "summary_scripted_test.json there was written since"),
        ("lock", "another job holds it"),
    ]:
        asked.clear()
        r = _bench_run(bench, out, scripted_server(responder=replace_the_folder(how)))
        said = " ".join(r.stdout.split())
        assert r.returncode == 1 and "Traceback" not in r.stderr, said + r.stderr[-2000:]
        assert f"summary: not written to {out / 'summary_scripted_test.json'}" in said, said
        assert "clawrig: " in r.stderr and (
            f"the job's summary and progress file were not written to {out} ({why})"
            in " ".join(r.stderr.split())
        ), r.stderr
        assert not (out / "progress_scripted_test.json").exists()
        assert (out / "01_Productivity_Flow_task_1_echo" / ".tmp-theirs").is_dir()
        # the trial that ran as the folder was replaced is not put into the new one
        # (helper-224: it was renamed there by path), nor half of it left there
        assert _keys(out) == [], _keys(out)
        assert [p.name for p in out.glob("*/*")] == [".tmp-theirs"], list(out.glob("*/*"))
        if how == "other":
            assert sorted(p.name for p in out.glob("*.json")) == ["summary_oracle.json"]
            shutil.rmtree(out)
        elif how != "lock":
            kept = json.loads((out / "summary_scripted_test.json").read_text())
            assert kept["tasks"] == [] and (how == "same") == (kept["job_id"] != "another-job")
            shutil.rmtree(out)
        else:
            assert not (out / "summary_scripted_test.json").exists()
            os.close(held.pop())


def test_a_full_output_folder_stops_the_job(mini_bench, scripted_server, tmp_path, even_responder):
    """helper-212: with the output folder's disk full every trial ran, spent on its model and
    failed to write its folder, retried 3 times each (112 paid requests kept one trial). The
    job now stops starting (and retrying) trials, with one line; the trials stay resumable."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    bench = mini_bench(4)
    srv = scripted_server(responder=even_responder)
    small = tmp_path / "small"
    small.mkdir()
    # room for the job's lock, progress and summary files, not for a trial folder (its
    # transcript, logs and end state)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(small)], check=True)
    try:
        out = small / "out"
        r = _bench_run(bench, out, srv)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
        said = " ".join(r.stdout.split())
        line = (
            f"stopped: the output folder {out} could not be written (no space left): trials "
            "run now would keep nothing; free space there (or make it writable) and --resume"
        )
        assert line in said, r.stdout[-2000:]
        summary = json.loads((out / "summary_scripted_test.json").read_text())
        assert summary["output_stopped"] == line.removeprefix("stopped: ")
        # one trial's one attempt asked the model: every request is of the same task
        tasks = {re.search(r"TASKNUM=(\d+)", q["messages"][0]["content"])[1] for q in srv.requests}
        assert len(tasks) == 1 and len(srv.requests) == 2, (tasks, len(srv.requests))
        # no folder records what that attempt spent: the progress file does, and a resume
        # counts it (helper-212: dropped from the resumed job's budget and totals)
        ppath = out / "progress_scripted_test.json"
        progress = json.loads(ppath.read_text())
        [gone] = progress["unwritten"]
        assert gone["usage"]["request_count"] == 2
        assert math.isclose(gone["usage"]["cost_usd"], 2 * 0.01)  # (the responder's price)
        subprocess.run(["mount", "-o", "remount,size=50m", str(small)], check=True)

        def run(*more: str) -> subprocess.CompletedProcess[str]:
            return _bench_run(bench, out, srv, "--resume", *more)

        # an entry that is no trial of the job, or a count that is no count: one line each
        # (helper-214: counted in the budget, or dropped)
        kept = ppath.read_text()
        for bad, said in [
            ({"task_id": "zzz", "run_index": 0, "usage": {"cost_usd": 0.07}},
             f"{ppath}: unwritten.1: 'zzz' run 0 is no trial of the job"),
            ({"task_id": gone["task_id"], "run_index": 0, "usage": {"cost_usd": -1}},
             "unwritten.1.usage: Value error, cost_usd: must be a finite number, 0 or more"),
            ({"task_id": gone["task_id"], "run_index": 0, "usage": {"total_tokens": 1.5}},
             "unwritten.1.usage: Value error, total_tokens: Input should be a valid integer"),
        ]:  # fmt: skip
            ppath.write_text(json.dumps({**progress, "unwritten": [gone, bad]}))
            r = run()
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
            assert said in " ".join(r.stderr.split()), r.stderr[-2000:]
        ppath.write_text(kept)
        # the progress file removed: --resume rebuilds it from the summary, whose row of the
        # trial with no folder says what it spent (helper-214: dropped, the budget overrun)
        ppath.unlink()
        r = run("--budget-usd", "0.07")
        assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
        summary = json.loads((out / "summary_scripted_test.json").read_text())
        assert summary["budget_stopped"] is True
        # $0.02 lost; trials start while the spend is below $0.07 ($0.02, $0.04, $0.06), two
        # of them whole ($0.01 a request, 2 requests each) and the third cut by the gateway
        # after its first request reached $0.07: 2 + 2 + 2 + 1 answered. Without the lost
        # attempt's $0.02 a fourth trial would have started (9)
        answered = len(srv.requests)
        assert answered == 2 + 2 + 2 + 1, answered
        assert math.isclose(summary["usage"]["cost_usd"], answered * 0.01)
        r = run("--budget-usd", "1")
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        summary = json.loads((out / "summary_scripted_test.json").read_text())
        assert summary["output_stopped"] is None and len(_keys(out)) == 4
        # every request the server answered is in the totals, the lost attempt's too
        assert math.isclose(summary["usage"]["cost_usd"], len(srv.requests) * 0.01)
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_the_trial_records_a_resume_cannot_read_are_the_models_own(tmp_path):
    """--resume refuses a result.json of the model's trials it cannot read (trial folders and
    _retried/, as trial_folder_name and move_to_retried name them), not another model's whose
    slug only starts the same."""
    from clawrig.runner.batch import unreadable_trial_record

    out = tmp_path / "out"
    other = out / "t1" / "scripted_test_b_20261207_1202_abcdef"  # model scripted/test_b
    other.mkdir(parents=True)
    (other / "result.json").write_text("{")
    assert unreadable_trial_record(out, "scripted/test") is None
    retried = out / "_retried" / "t1__scripted_test_20261207_1202_abcdef-2"
    retried.mkdir(parents=True)
    (retried / "result.json").write_text('{"task_id": 3}')
    line = unreadable_trial_record(out, "scripted/test")
    assert line is not None and line.startswith(
        f"--resume: {retried / 'result.json'} cannot be read as a trial result ("
    )
    assert line.endswith(f"move its trial folder {retried} out of {out} to run that trial again")
    assert "(task_id: Input should be a valid string (and " in line  # the field it lacks
    line = unreadable_trial_record(out, "scripted/test_b")
    assert line is not None
    assert line.startswith(f"--resume: {other / 'result.json'} cannot be read as a trial result")
    assert line.endswith(
        f"it records a trial of scripted/test_b and what it spent; put it back, or move its "
        f"trial folder {other} out of {out} to run that trial again"
    )


def test_a_progress_file_that_cannot_be_written_stops_the_job_in_one_line(
    mini_bench, scripted_server, tmp_path, even_responder
):
    """A progress file that cannot be written for another reason than a full or read-only
    disk (here a folder made where it goes, so its replacement fails with EISDIR) was a
    traceback at the job's end, with no summary, after the job ran every trial without a
    record. The job now stops starting trials, writes its summary saying why in one line and
    exits 1 (trials not run), and --resume continues once the file can be written."""
    bench = mini_bench(4)
    out = tmp_path / "out"
    ppath = out / "progress_scripted_test.json"
    calls = []

    def responder(request):
        calls.append(1)
        if len(calls) == 1:  # the first trial's first call: its record's place is taken
            ppath.unlink(missing_ok=True)
            ppath.mkdir()
        return even_responder(request)

    srv = scripted_server(responder=responder)
    r = _bench_run(bench, out, srv)
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    line = (
        f"stopped: {ppath} could not be written (Is a directory): the job started no more "
        "trials (a crash would lose track of them); remove the folder in its place and --resume"
    )
    said = " ".join(r.stdout.split())
    assert line in said, said[-2000:]
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["output_stopped"] == line.removeprefix("stopped: ")
    # the trial running then finished, and the next one if it started before the failed
    # write was known (the write is off the event loop); none after
    ran = len(_keys(out))
    assert ran in (1, 2) and summary["not_run"] == 4 - ran, (ran, summary["not_run"])
    # writable again: --resume runs the others (their tasks' first messages name them)
    ppath.rmdir()
    first = len(srv.requests)
    r = _bench_run(bench, out, srv, "--resume")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert len(_keys(out)) == 4
    resumed = {
        re.search(r"TASKNUM=(\d+)", q["messages"][0]["content"])[1] for q in srv.requests[first:]
    }
    assert len(resumed) == 4 - ran, resumed


def test_a_progress_file_failing_after_the_last_trial_is_no_stop(
    mini_bench, scripted_server, tmp_path, even_responder
):
    """helper-218: when the progress file's last write failed with every trial run, the job
    said "stopped: ... --resume; 0 trial(s) not run" and its summary kept the stop for good.
    Every trial ran: the summary is the job's record, and the job finished."""
    bench = mini_bench(1)
    out = tmp_path / "out"
    ppath = out / "progress_scripted_test.json"

    def responder(request):
        if not ppath.is_dir():  # the only trial is under way: its record's place taken
            ppath.unlink(missing_ok=True)
            ppath.mkdir()
        return even_responder(request)

    srv = scripted_server(responder=responder)
    r = _bench_run(bench, out, srv)
    assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    assert "stopped" not in r.stdout, r.stdout[-2000:]
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["output_stopped"] is None and summary["not_run"] == 0
    assert summary["error_count"] == 0 and summary["tasks"][0]["score"] is not None  # graded
    assert ppath.is_dir()  # what took the file's place is not the job's to remove


def test_a_summary_that_cannot_be_written_is_one_line(
    mini_bench, scripted_server, tmp_path, even_responder
):
    """The summary's write failing for another reason than a full or read-only disk (a folder
    where it goes: EISDIR) raised OSError out of the job (a traceback). It is one line naming
    the file, with what the job spent; the trial folders stay."""
    bench = mini_bench(2)
    out = tmp_path / "out"

    def responder(request):
        (out / "summary_scripted_test.json").mkdir(exist_ok=True)  # once the job has begun
        return even_responder(request)

    srv = scripted_server(responder=responder)
    r = _bench_run(bench, out, srv)
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    said = " ".join(r.stderr.split())
    spent = len(srv.requests) * 0.01  # (the responder's price)
    assert (
        f"{out / 'summary_scripted_test.json'} could not be written (Is a directory): the "
        f"job's summary was not written (the job has spent ${spent:.4f}; its trial folders and "
        "progress file are kept); remove the folder in its place and --resume"
    ) in said, said
    assert len(_keys(out)) == 2
    # the job's table all the same, its two trials' rows with their folders (it printed
    # nothing but the error)
    for task, _run in _keys(out):
        [folder] = [p.parent for p in (out / task).glob("*/result.json")]
        assert f"{task}/{folder.name}" in r.stdout, r.stdout[-2000:]
    assert f"summary: not written to {out / 'summary_scripted_test.json'}" in " ".join(
        r.stdout.split()
    )


def test_an_output_folder_filled_mid_run_is_one_line(
    mini_bench, scripted_server, tmp_path, even_responder
):
    """helper-214: the output folder's disk filled while the job ran: the progress file's and
    the summary's writes raised OSError out of the job (a traceback). The job stops starting
    trials and says in one line that its summary could not be written; the trial folders
    written before stay, and so does the progress file."""
    if os.geteuid() != 0:
        pytest.skip("mounting a file system needs root")
    bench = mini_bench(4)
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=True)
    calls = []

    def responder(request):
        calls.append(1)
        if len(calls) == 3:  # the second trial's first call: the disk fills up
            subprocess.run(["dd", "if=/dev/zero", f"of={small / 'fill'}", "bs=64k"], check=False,
                           capture_output=True)  # fmt: skip
        return even_responder(request)

    srv = scripted_server(responder=responder)
    try:
        out = small / "out"
        r = _bench_run(bench, out, srv)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
        said = " ".join(r.stderr.split())
        spent = len(srv.requests) * 0.01  # (the responder's price)
        assert (
            f"the output folder {out} could not be written (no space left): the job's summary "
            f"was not written (the job has spent ${spent:.4f}; its trial folders and progress "
            "file are kept); free space there (or make it writable) and --resume"
        ) in said, said
        # the first trial and the second, whose folder could not be written: none after them
        tasks = {re.search(r"TASKNUM=(\d+)", q["messages"][0]["content"])[1] for q in srv.requests}
        assert len(tasks) == 2, tasks
        assert len(_keys(out)) == 1 and (out / "progress_scripted_test.json").is_file()
        assert not (out / "summary_scripted_test.json").exists()
        # still full: --resume says so in one line (it was a traceback: helper-214)
        r = _bench_run(bench, out, srv, "--resume")
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
        said = " ".join(r.stderr.split())
        assert f"{out}" in said and "could not be written (no space left" in said.replace(
            "No space left on device", "no space left"
        ), said
        # room again: --resume runs the rest and writes the summary
        (small / "fill").unlink()
        r = _bench_run(bench, out, srv, "--resume")
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        summary = json.loads((out / "summary_scripted_test.json").read_text())
        assert len(_keys(out)) == 4
        assert math.isclose(summary["usage"]["cost_usd"], len(srv.requests) * 0.01)
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_a_summary_row_of_a_trial_with_no_folder_is_its_whole_spend(tmp_path):
    """A resume from the summary alone counts a trial whose folder was never written at what
    all its attempts spent: the row's cost_usd is its last attempt's, retried_cost_usd the
    earlier ones' (docs/outputs.md)."""
    from clawrig.runner.batch import _summary_unwritten

    out = tmp_path / "out"
    (out / "t1" / "m_20261207_1202_abcdef").mkdir(parents=True)
    (out / "t1" / "m_20261207_1202_abcdef" / "result.json").write_text("{}")  # written
    rows = [
        {"task_id": "t1", "run_index": 0, "trial": "t1/m_20261207_1202_abcdef",
         "cost_usd": 0.5, "retried_cost_usd": 0.0, "total_tokens": 10},
        {"task_id": "t2", "run_index": 1, "trial": "t2/m_20261207_1203_abcdef",
         "cost_usd": 0.02, "retried_cost_usd": 0.03, "total_tokens": 7},
        {"task_id": "t3", "run_index": 0, "trial": "t3/m_20261207_1204_abcdef",
         "cost_usd": 0.0, "retried_cost_usd": 0.0, "total_tokens": 0},  # spent nothing
    ]  # fmt: skip
    [gone] = _summary_unwritten({"tasks": rows}, out)
    assert (gone.task_id, gone.run_index) == ("t2", 1)
    assert math.isclose(gone.usage["cost_usd"], 0.02 + 0.03) and gone.usage["total_tokens"] == 7


def test_resume_takes_the_jobs_runs_when_none_are_given(
    mini_bench, scripted_server, tmp_path, even_responder
):
    """helper-223: ``--resume`` took ``-m`` from the job it resumes but not ``--runs``: a job
    run with ``--runs 2`` was refused ("runs differs") unless ``--runs 2`` was given again.
    Given, another count is still refused."""
    bench = mini_bench(2)
    srv = scripted_server(responder=even_responder)
    out = tmp_path / "out"
    r = _bench_run(bench, out, srv, "--runs", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    folders = sorted(out.glob("*/scripted_test_*"))
    assert len(folders) == 4
    shutil.rmtree(folders[0])  # run again by the resume, with the other three kept
    r = _bench_run(bench, out, srv, "--resume")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    # said before its bar, which starts part-way (helper-225)
    assert "resuming: 3 of 4 trial(s) done, 1 to run" in r.stderr, r.stderr[-2000:]
    tasks = [f"01_Productivity_Flow_task_{k}_echo" for k in (1, 2)]
    assert _keys(out) == [(t, i) for t in tasks for i in (0, 1)]
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["runs_per_task"] == 2 and len(summary["tasks"]) == 4
    # the finished job resumed: its own line, not "resuming" too, and its spend on the bar
    # (helper-229: both lines, and "spend $0.0000")
    r = _bench_run(bench, out, srv, "--resume")
    said = " ".join(r.stderr.split())
    assert r.returncode == 0 and "every trial is done, nothing to run" in said, said
    assert "resuming:" not in said and f"${summary['usage']['cost_usd']:.4f}" in said, said
    r = _bench_run(bench, out, srv, "--resume", "--runs", "1")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--resume: runs differs from the finished job's" in " ".join(r.stderr.split())


def test_resume_refuses_a_hand_edited_count_of_runs(
    mini_bench, scripted_server, tmp_path, even_responder
):
    """helper-226: --resume took the progress file's ``runs`` as it was: -1 finished the job
    with trials not run (exit 0), 10^12 sat listing trials, true was read as 1; a summary's
    ``runs_per_task`` of true resumed a job of 2 runs as 1. Each is one line naming the file
    and the field, exit 2, nothing run."""
    bench = mini_bench(2)
    srv = scripted_server(responder=even_responder)
    out = tmp_path / "out"
    r = _bench_run(bench, out, srv, "--runs", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    spath = out / "summary_scripted_test.json"
    summary = json.loads(spath.read_text())
    ppath = out / "progress_scripted_test.json"
    progress = {"model": "scripted/test", "suite": "all", "runs": 2, "job_id": summary["job_id"]}
    folders = sorted(out.glob("*/scripted_test_*"))
    shutil.rmtree(folders[0])  # one trial to run again: the job is unfinished
    requests = len(srv.requests)
    for bad in (-1, 0, True, 10**12, 1.5, "2", 2.0):
        ppath.write_text(json.dumps({**progress, "runs": bad}))
        r = _bench_run(bench, out, srv, "--resume")
        said = " ".join(r.stderr.split())
        assert r.returncode == 2 and "Traceback" not in r.stderr, (bad, said)
        assert f"{ppath}: not a valid progress file (runs: " in said, (bad, said)
    ppath.unlink()
    for bad in (True, 0, "2"):
        spath.write_text(json.dumps({**summary, "runs_per_task": bad}))
        r = _bench_run(bench, out, srv, "--resume")
        said = " ".join(r.stderr.split())
        assert r.returncode == 2 and "Traceback" not in r.stderr, (bad, said)
        assert (
            f"--resume: {spath}: runs_per_task: {json.dumps(bad)} is not a count of runs "
            "(1 to 1000)"
        ) in said, said
    assert len(srv.requests) == requests and len(list(out.glob("*/scripted_test_*"))) == 3
