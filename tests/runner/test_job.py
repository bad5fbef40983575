"""Jobs: a 30-trial job at --parallel 8 through the real CLI, kill -9 + --resume, a budget,
and a summary checked against hand-computed values."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from clawrig.runner.batch import run_job
from clawrig.runner.trial import TrialServices
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_tasks
from clawrig.testing.scripted_server import ScriptedServer, call, error, reply, usage

pytestmark = pytest.mark.sandbox

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))


def _env(srv) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENROUTER", "OPENAI"))}
    env["SCRIPTED_BASE_URL"] = srv.base_url
    return env


def _trial_folders(out: Path) -> list[Path]:
    """The job's trial folders (not the attempts set aside in ``_retried/``)."""
    return [p.parent for p in out.glob("*/*/result.json") if p.parent.parent.name != "_retried"]


def test_thirty_trials_parallel_8_match_hand_computed_summary(
    mini_bench, scripted_server, tmp_path, even_responder
):
    bench = mini_bench(10)
    srv = scripted_server(responder=even_responder)
    out = tmp_path / "out"
    r = subprocess.run(
        [
            CLAWRIG,
            "run",
            str(bench / "tasks"),
            "-m",
            "scripted/test",
            "-p",
            "8",
            "--runs",
            "3",
            "-o",
            str(out),
        ],
        env=_env(srv),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    # 10 tasks x 3 runs; even tasks score 1.0, odd ones 0.25 (file written, content wrong)
    assert len(summary["tasks"]) == 30 and summary["error_count"] == 0
    assert summary["evaluated_count"] == 30
    assert math.isclose(summary["overall_score"], (15 * 1.0 + 15 * 0.25) / 30)
    assert math.isclose(summary["mean"]["mean"], 0.625)
    # every trial made 2 requests at $0.01 each
    assert math.isclose(summary["efficiency"]["total_cost_usd"], 0.60)
    assert summary["efficiency"]["total_requests"] == 60
    # pass@k with n=3 per task, success = score >= 1.0: even tasks c=3, odd c=0
    p = summary["pass"]
    assert set(p) == {"1", "2", "3"}
    for k in ("1", "2", "3"):
        assert math.isclose(p[k]["pass_at_k"], 0.5) and math.isclose(p[k]["pass_hat_k"], 0.5)
    assert len(_trial_folders(out)) == 30
    assert not (out / "progress_scripted_test.json").exists()  # all done: deleted
    assert "0.6250" in r.stdout  # the table


def test_kill_9_then_resume_finishes_every_trial_exactly_once(
    mini_bench, scripted_server, tmp_path, even_responder
):
    bench = mini_bench(10)

    def responder(req):
        rep = even_responder(req)
        rep.delay = 0.15
        return rep

    srv = scripted_server(responder=responder)
    out = tmp_path / "out"
    args = [
        CLAWRIG,
        "run",
        str(bench / "tasks"),
        "-m",
        "scripted/test",
        "-p",
        "4",
        "--runs",
        "3",
        "-o",
        str(out),
    ]
    proc = subprocess.Popen(
        args,
        env=_env(srv),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    progress = out / "progress_scripted_test.json"

    def cut_calls() -> int:  # model calls recorded by trials not finished (their .tmp folders)
        return sum(
            sum(1 for line in f.read_text().splitlines() if line.endswith("}"))
            for f in out.glob("*/.tmp-*/model_calls.jsonl")
        )

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:  # (killed while a trial has a recorded call: its spend must not be lost)
            if len(json.loads(progress.read_text())["completed"]) >= 6 and cut_calls():
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(_trial_folders(out))
    assert 6 <= done_before < 30
    cut = cut_calls()
    assert cut >= 1
    # the killed trials' folders: those with a recorded call are set aside by the resume,
    # the others removed, and it says how many of each (helper-228: it said nothing)
    calls = [f / "model_calls.jsonl" for f in out.glob("*/.tmp-*")]
    kept = sum(1 for c in calls if c.exists() and "}\n" in c.read_text())
    dropped = len(calls) - kept
    assert kept >= 1

    def refusal(argv: list[str]) -> list[str]:
        """The lines of ``argv``'s refusal (exit 2, no traceback)."""
        r = subprocess.run(argv, env=_env(srv), capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        return r.stderr.splitlines()

    # resuming with other options is refused with one line
    # one line before anything starts (no progress bar), grammatical
    assert refusal(args[:-4] + ["--runs", "2", "-o", str(out), "--resume"]) == [
        f"clawrig: error: {progress}: --resume: runs differs from the interrupted job's (it "
        "ran model=scripted/test suite=all runs=3; this run: runs=2): run with the job's options "
        "(-m and --runs may be left out), or choose another --output"
    ]
    # a live job resumed with --replay (of itself, here: what it recorded so far) is refused
    # too: a job is replayed or live as a whole (its summary's replayed_from)
    # one line: the replay's own complaint (it recorded some of the tasks only) follows from
    # it and is not said (a new user followed its advice into another refusal)
    assert refusal(args + ["--resume", "--replay", str(out)]) == [
        f"clawrig: error: {progress}: --resume: the interrupted job called its models (live); "
        f"this is --replay {out}: a job is replayed or live as a whole, so resume it as it ran, "
        "or choose another --output"
    ]
    # another agent continues no job of this one's, with -m or without (it took the folder's
    # job's model and ran oracle trials into a native job: a red-team finding)
    for given, said in (
        ([], "holds the job of scripted/test run by --agent native, not --agent oracle"),
        (["-m", "scripted/test"], "agent differs from the interrupted job's (it ran "
         "model=scripted/test suite=all runs=3 agent=native; this run: agent=oracle)"),
    ):  # fmt: skip
        [line] = refusal(
            [CLAWRIG, "run", str(bench / "tasks"), *given, "-p", "4", "--runs", "3", "-o",
             str(out), "--resume", "--agent", "oracle"]
        )  # fmt: skip
        assert said in line, line
    # a suite whose tasks changed: one line before anything starts (it followed a progress
    # bar), and without -m: the folder's only job is the one resumed
    changed = tmp_path / "changed"
    shutil.copytree(bench, changed)
    md = sorted((changed / "tasks").rglob("*.md"))[0]
    md.write_text(md.read_text().replace("## Prompt\n\n", "## Prompt\n\nPlease. ", 1))
    [line] = refusal(
        [CLAWRIG, "run", str(changed / "tasks"), "-p", "4", "--runs", "3", "-o", str(out),
         "--resume"]
    )  # fmt: skip
    head = f"clawrig: error: {progress}: --resume: 1 task(s) differ from those"
    assert line.startswith(head), line
    # a suite with a task more, or one fewer (or another suite's, whose ids are all new), is
    # not the job's either: it ran the other tasks under the job's id and summed them
    # (helper-117: a resume into a demo job with another suite exited 0, not_run -5)
    more, fewer = tmp_path / "more", tmp_path / "fewer"
    for copy in (more, fewer):
        shutil.copytree(bench, copy)
    first = next((more / "tasks").rglob("*_task_1_echo.md"))
    extra = first.with_name(first.name.replace("task_1_", "task_99_"))
    extra.write_text(first.read_text().replace("task_1_echo\n", "task_99_echo\n", 1))
    sorted((fewer / "tasks").rglob("*.md"))[-1].unlink()
    for suite, said in (
        (more, "1 task(s) are not the interrupted job's (01_Productivity_Flow_task_99_echo)"),
        (fewer, "1 task(s) of the interrupted job are not in the suite now ("),
    ):
        [line] = refusal(
            [CLAWRIG, "run", str(suite / "tasks"), "-p", "4", "--runs", "3", "-o", str(out),
             "--resume"]
        )  # fmt: skip
        assert said in line and f"{suite / 'tasks'} is another suite" in line, line
    r = subprocess.run(
        args + ["--resume"], env=_env(srv), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    said = " ".join(r.stderr.split())
    line = (
        f"resuming: {done_before} of 30 trial(s) done, {30 - done_before} to run; the stopped "
        f"run's unfinished or errored attempts: {kept} set aside in _retried/ (what they spent "
        "still counts)"
        + (f", {dropped} removed (no model call recorded in them)" if dropped else "")
    )
    assert line in said, said[-3000:]
    folders = _trial_folders(out)
    keys = []
    for f in folders:
        res = json.loads((f / "result.json").read_text())
        keys.append((res["task_id"], res["run_index"]))
    assert len(keys) == 30 and len(set(keys)) == 30  # exactly once
    assert not list(out.glob("*/.tmp-*"))
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert len(summary["tasks"]) == 30 and math.isclose(summary["overall_score"], 0.625)
    # what the killed attempts spent counts: 2 calls of $0.01 per finished trial, and the
    # calls the cut ones had recorded (their folders were deleted with them: a job stopped at
    # "$0.30" of --budget-usd 0.30 having spent $0.33, a red-team finding)
    assert summary["efficiency"]["total_requests"] == 60 + cut
    assert math.isclose(summary["efficiency"]["total_cost_usd"], 0.01 * (60 + cut))
    # the finished job: the same refusal (was "every trial is done, nothing to run", exit 0)
    one = summary["tasks"][0]["task_id"]
    for other, what, given in (
        (["--runs", "2"], "runs differs", "runs=2"),
        (["--suite", one], "suite differs", f"suite={one}"),
    ):
        r = subprocess.run(
            args + other + ["--resume"], env=_env(srv), capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert r.stderr.splitlines() == [
            f"clawrig: error: {out / 'summary_scripted_test.json'}: --resume: {what} from the "
            f"finished job's (it ran model=scripted/test suite=all runs=3; this run: {given}): run "
            "with the job's options (-m and --runs may be left out), or choose another --output"
        ], r.stderr
    assert len(_trial_folders(out)) == 30


async def test_budget_stops_new_trials(mini_bench, scripted_server, tmp_path, even_responder):
    bench = mini_bench(10)
    srv = scripted_server(responder=even_responder)  # $0.02 per trial
    tasks = load_tasks(bench / "tasks")
    job = JobConfig(
        suite_path=bench,
        runs=1,
        parallel=1,
        output=tmp_path / "out",
        budget_usd=0.10,
        trial=TrialConfig(agent="native", model="scripted/test"),
    )
    summary = await run_job(job, tasks, TrialServices(model=srv.chat_model()))
    assert summary["budget_stopped"] is True
    assert len(summary["tasks"]) == 5 and summary["not_run"] == 5
    assert math.isclose(summary["efficiency"]["total_cost_usd"], 0.10)
    assert (tmp_path / "out" / "progress_scripted_test.json").exists()  # resumable


def _stopped_by_budget(
    mini_bench: Callable[[int], Path], srv: ScriptedServer, tmp_path: Path, budget: str
) -> tuple[Path, list[str]]:
    """A job of 4 tasks at -p 1 on ``srv`` (conftest's even responder: $0.01 a request, 2
    requests a trial) stopped by ``--budget-usd budget`` (exit 3). Returns its output folder
    and its command line without the budget."""
    bench = mini_bench(4)
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1"]
    args += ["-o", str(out)]
    first = subprocess.run(
        args + ["--budget-usd", budget], env=_env(srv), capture_output=True, text=True
    )
    assert first.returncode == 3, first.stderr  # stopped by the budget
    return out, args


def test_a_trial_the_jobs_budget_cuts_short_is_not_scored_and_resume_runs_it(
    mini_bench, scripted_server, tmp_path, even_responder
):
    # a new-user review's finding: the trial cut off by --budget-usd (its second request
    # refused by the gateway) was graded as it stood (0 or 0.25) and counted, and --resume
    # never ran it again: a model that solves every trial was reported below 1.0
    srv = scripted_server(responder=even_responder)
    out, args = _stopped_by_budget(mini_bench, srv, tmp_path, "0.03")
    results = [json.loads(p.read_text()) for p in out.glob("*/*/result.json")]
    # one trial ran whole ($0.02); the next got one answer ($0.03 spent) and then a refusal
    assert len(results) == 2
    cut = [r for r in results if r["error"] is not None]
    assert len(cut) == 1 and cut[0]["error"]["kind"] == "budget"
    assert cut[0]["usage"]["request_count"] == 1
    # the job stopped it, not its own cost cap (it said cost_budget: helper-148)
    assert cut[0]["stop_reason"] == "cancelled"
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["errors_by_kind"] == {"budget": 1} and summary["budget_stopped"] is True
    [row] = [r for r in summary["tasks"] if r["error"] is not None]
    assert row["stop_reason"] == "cancelled"
    scored = [r for r in results if r["error"] is None]
    assert len(scored) == 1 and summary["overall_score"] == scored[0]["score"]["score"]
    second = subprocess.run(
        args + ["--budget-usd", "10", "--resume"], env=_env(srv), capture_output=True, text=True
    )
    assert second.returncode == 0, second.stderr
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    # tasks 2 and 4 solved (1.0), 1 and 3 botched (0.25): (2 x 1.0 + 2 x 0.25) / 4
    assert summary["errors_by_kind"] == {} and len(summary["tasks"]) == 4
    assert math.isclose(summary["overall_score"], 0.625)
    kept = [p for p in out.glob("*/*/result.json") if p.parts[-3] != "_retried"]
    assert len(kept) == 4  # the cut-off attempt's folder is set aside in _retried/
    assert [
        json.loads(p.read_text())["error"]["kind"] for p in out.glob("_retried/*/result.json")
    ] == ["budget"]


def test_a_done_trial_whose_folder_now_says_it_errored_is_run_again_by_resume(
    mini_bench, scripted_server, tmp_path, even_responder
):
    """helper-230: --resume set aside a trial folder the progress file listed as done whose
    result.json said it ended in an error (an edited folder), and never ran the trial again:
    the summary lacked it, exit 0, and "resuming" counted it done."""
    srv = scripted_server(responder=even_responder)
    out, args = _stopped_by_budget(mini_bench, srv, tmp_path, "0.05")  # two whole, one cut
    progress = json.loads((out / "progress_scripted_test.json").read_text())
    listed = [e["result"] for e in progress["completed"]]
    assert len(listed) == 2
    edited = out / listed[0] / "result.json"
    res = json.loads(edited.read_text())
    res["error"] = {"kind": "infrastructure", "message": "edited", "phase": "agent"}
    res["score"] = None
    edited.write_text(json.dumps(res))
    second = subprocess.run(
        args + ["--budget-usd", "10", "--resume"], env=_env(srv), capture_output=True, text=True
    )
    assert second.returncode == 0, second.stderr
    said = " ".join(second.stderr.split())
    assert (
        "resuming: 1 of 4 trial(s) done, 3 to run; the stopped run's unfinished or errored "
        "attempts: 2 set aside in _retried/"
    ) in said, said
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    rows = {(r["task_id"], r["run_index"]): r for r in summary["tasks"]}
    assert len(rows) == 4 and summary["errors_by_kind"] == {} and not summary.get("not_run")
    again = rows[(res["task_id"], res["run_index"])]
    assert again["trial"] != listed[0] and again["error"] is None
    assert (out / again["trial"] / "result.json").is_file() and not (out / listed[0]).exists()


def test_a_budget_that_runs_out_in_the_last_trial_stops_the_job(
    mini_bench, scripted_server, tmp_path, even_responder
):
    """helper-136: the budget ran out while the job's last trial ran, so no trial was refused a
    start: budget_stopped stayed false and the exit code was 1, not the README's 3."""
    bench = mini_bench(2)
    srv = scripted_server(responder=even_responder)  # $0.01 a request, 2 requests a trial
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1"]
    run = subprocess.run(
        args + ["-o", str(out), "--budget-usd", "0.03"], env=_env(srv), capture_output=True,
        text=True,
    )  # fmt: skip
    assert run.returncode == 3, run.stdout + run.stderr
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["errors_by_kind"] == {"budget": 1} and summary["budget_stopped"] is True
    assert len(srv.requests) == 3  # the second trial's second request was refused


def test_ctrl_c_stops_cleanly_and_resume_finishes(
    mini_bench, scripted_server, tmp_path, even_responder
):
    bench = mini_bench(6)

    def responder(req):
        rep = even_responder(req)
        rep.delay = 0.3
        return rep

    srv = scripted_server(responder=responder)
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "2", "-o", str(out)]
    # output to files, as a terminal would take it (an unread pipe would block the job)
    out_file, err_file = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(out_file, "w") as so, open(err_file, "w") as se:
        proc = subprocess.Popen(args, env=_env(srv), stdout=so, stderr=se)
    progress = out / "progress_scripted_test.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if json.loads(progress.read_text())["completed"]:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    stdout, stderr = out_file.read_text(), err_file.read_text()
    assert proc.returncode == 130, stderr[-1500:]
    # the clean path prints the table and "interrupted"; when a cancelled trial stalls, the
    # grace timer exits with the same promise (a known issue, see batch.py): both keep every
    # finished trial and are resumable
    assert "interrupted" in stdout + stderr and "Traceback" not in stderr, stderr[-3000:]
    # nothing of that job survives: no process in one of its sandboxes' cgroups, no cgroup
    tag = f"clawrig-{proc.pid}-"
    time.sleep(0.2)
    in_its_cgroups = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if tag in Path(f"/proc/{pid}/cgroup").read_text():
                in_its_cgroups.append(pid)
        except OSError:
            pass
    assert in_its_cgroups == []
    finished = len(_trial_folders(out))
    assert 1 <= finished < 6 and progress.exists()
    # the job's wall time so far is in its progress file; the resumed job's summary counts it
    # with its own (it counted the resumed part only: the viewer's "wall time" of a resumed
    # job was its last invocation's). An earlier part of 1000 s makes it plain
    recorded = json.loads(progress.read_text())
    assert 0 < recorded["elapsed_s"] < 60
    progress.write_text(json.dumps(recorded | {"elapsed_s": 1000.0}))
    t0 = time.monotonic()
    r = subprocess.run(
        args + ["--resume"], env=_env(srv), capture_output=True, text=True, timeout=300
    )
    resumed_wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-1500:]
    assert len(_trial_folders(out)) == 6
    summary = out / "summary_scripted_test.json"
    elapsed = json.loads(summary.read_text())["elapsed_s"]
    assert 1000 < elapsed < 1000 + resumed_wall
    assert not progress.exists()  # (a job that finished every trial)
    # no cgroup of the interrupted job is left (removed on stop, or swept by the next job)
    for root in (
        Path("/sys/fs/cgroup/memory/clawrig"),
        Path("/sys/fs/cgroup/pids/clawrig"),
        Path("/sys/fs/cgroup/clawrig"),
    ):
        if root.is_dir():
            assert not [d for d in root.iterdir() if d.name.startswith(tag)]


def _recorded_cost(out: Path) -> float:
    """USD of every usage.json under the job folder (trial folders and _retried/)."""
    return sum(json.loads(p.read_text())["cost_usd"] for p in out.rglob("usage.json"))


def test_spend_of_every_recorded_attempt_counts_after_interrupt_and_resume(
    mini_bench, scripted_server, tmp_path
):
    # a new-user review's finding: attempts set aside in _retried/ by an earlier run of the
    # job, and by a trial interrupted mid-retry, were missing from the summary's usage and
    # from the budget's spend so far (a resumed job with its budget spent started a trial)
    from clawrig.llm.client import PROBE

    bench = mini_bench(2)
    # the first trial's first attempt: a paid tool call ($0.50), then the provider fails for
    # good (500 at each of the client's 6 tries): an infrastructure error, run again
    script = [
        reply(tool_calls=[call("exec", {"command": "true"})], usage=usage(10, 5, cost=0.5))
    ] + [error(500, retry_after=0)] * 6
    asked = []

    def responder(req):
        if req["messages"] == PROBE:  # the harness's plain request: the provider is down
            return error(500, retry_after=0)
        asked.append(req)
        if len(asked) == 1:  # its second attempt's first request hangs: Ctrl-C comes then
            return reply("late", delay=60)
        return reply("done", usage=usage(10, 5, cost=0.25))

    srv = scripted_server(script, responder=responder)
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1"]
    args += ["--max-attempts", "2", "-o", str(out)]
    with open(tmp_path / "err.txt", "w") as se:
        proc = subprocess.Popen(args, env=_env(srv), stdout=subprocess.DEVNULL, stderr=se)
    deadline = time.monotonic() + 120
    while not asked and time.monotonic() < deadline:
        time.sleep(0.05)
    assert asked, (tmp_path / "err.txt").read_text()[-2000:]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    summary_file = out / "summary_scripted_test.json"
    summary = json.loads(summary_file.read_text())
    # the interrupted trial's first attempt is recorded in _retried/: $0.50
    assert [p.parts[-3] for p in out.rglob("usage.json")] == ["_retried"]
    assert math.isclose(_recorded_cost(out), 0.5)
    assert math.isclose(summary["usage"]["cost_usd"], 0.5)
    assert math.isclose(summary["usage"]["retried"]["cost_usd"], 0.5)

    # resumed with a budget the job has already spent: no trial starts, nothing asked
    requests = len(srv.requests)
    r = subprocess.run(
        args + ["--resume", "--budget-usd", "0.5"], env=_env(srv), capture_output=True, text=True
    )
    assert r.returncode == 3, r.stderr[-2000:]
    assert len(srv.requests) == requests
    summary = json.loads(summary_file.read_text())
    assert summary["budget_stopped"] is True and summary["not_run"] == 2
    assert math.isclose(summary["usage"]["cost_usd"], 0.5)

    # a larger budget: both trials run ($0.25 each), the earlier attempt still counted
    r = subprocess.run(
        args + ["--resume", "--budget-usd", "10"], env=_env(srv), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(summary_file.read_text())
    assert math.isclose(_recorded_cost(out), 1.0)
    assert math.isclose(summary["usage"]["cost_usd"], _recorded_cost(out))
    assert math.isclose(summary["efficiency"]["total_cost_usd"], 1.0)
    assert math.isclose(summary["usage"]["retried"]["cost_usd"], 0.5)
    # the re-run trial carries its earlier attempt's spend (its row, its result.json)
    rows = sorted(summary["tasks"], key=lambda row: row["retried_cost_usd"])
    assert [row["retried_cost_usd"] for row in rows] == [0.0, 0.5]
    kept = json.loads((out / rows[1]["trial"] / "result.json").read_text())
    assert math.isclose(kept["retried_usage"]["cost_usd"], 0.5)


async def test_retried_attempts_count_towards_spend_and_one_job_per_output(
    mini_bench, scripted_server, tmp_path
):
    """An attempt that failed for infrastructure reasons still spent money: it counts in the
    job's totals and in the trial's retried_usage, apart from the kept attempt's own usage
    (usage.json), whose elapsed_time is that attempt's wall time alone. And a second job
    cannot write to the same output."""
    import asyncio

    import pytest

    from clawrig.errors import UserError
    from clawrig.testing.scripted_server import call, error, reply, usage

    bench = mini_bench(1)
    # attempt 1: a paid tool call ($0.50), then the provider fails for good (4 x 500)
    script = [
        reply(tool_calls=[call("exec", {"command": "true"})], usage=usage(10, 5, cost=0.5))
    ] + [error(500)] * 4
    # attempt 2 (after the trial is retried): answers at once ($0.25)
    srv = scripted_server(
        script, responder=lambda req: reply("done", usage=usage(10, 5, cost=0.25))
    )
    tasks = load_tasks(bench / "tasks")
    job = JobConfig(
        suite_path=bench,
        output=tmp_path / "out",
        max_attempts=2,
        trial=TrialConfig(agent="native", model="scripted/test"),
    )
    summary = await run_job(job, tasks, TrialServices(model=srv.chat_model()))
    (row,) = summary["tasks"]
    assert row["attempts"] == 2 and row["error"] is None
    assert math.isclose(summary["efficiency"]["total_cost_usd"], 0.75)
    (retried,) = (tmp_path / "out" / "_retried").glob("*/result.json")
    kept = tmp_path / "out" / row["trial"]
    first, second = json.loads(retried.read_text()), json.loads((kept / "result.json").read_text())
    own = json.loads((kept / "usage.json").read_text())
    # the kept attempt's own usage: one answer of $0.25, its own phases' time
    assert math.isclose(own["cost_usd"], 0.25) and own["request_count"] == 1
    assert own == second["usage"]
    assert math.isclose(own["elapsed_time"], sum(second["timings"].values()), abs_tol=1e-5)
    # the first attempt's spend, as its own folder recorded it, kept apart
    assert math.isclose(first["usage"]["cost_usd"], 0.5)
    assert second["retried_usage"] == first["usage"]
    assert math.isclose(row["cost_usd"], 0.25) and math.isclose(row["retried_cost_usd"], 0.5)
    assert math.isclose(row["elapsed_time"], own["elapsed_time"])
    usage = summary["usage"]
    assert math.isclose(usage["retried"]["cost_usd"], 0.5)
    assert math.isclose(
        usage["elapsed_time"], own["elapsed_time"] + first["usage"]["elapsed_time"], abs_tol=1e-5
    )

    # a second job into a folder in use is refused (a new folder: the first one is finished)
    job = job.model_copy(update={"output": tmp_path / "out2"})
    lock_holder = asyncio.create_task(run_job(job, tasks, TrialServices(model=srv.chat_model())))
    await asyncio.sleep(0)  # the first job takes the lock before its first await
    with pytest.raises(UserError, match="another clawrig job"):
        await run_job(job, tasks, TrialServices(model=srv.chat_model()))
    await lock_holder


async def test_progress_writes_coalesce_and_a_failed_write_is_raised_at_the_end(tmp_path):
    from clawrig.runner.batch import ProgressWriter
    from clawrig.spec.job import Progress, ProgressEntry

    path = tmp_path / "progress_m.json"
    progress = Progress(model="m", suite="all", runs=1, job_id="j")
    writer = ProgressWriter(path, progress)
    for k in range(5):  # five trials finish before the writer gets to run: one write of all
        progress.completed.append(ProgressEntry(task_id=f"t{k}", run_index=0, result=f"t{k}/x"))
        writer.changed()
    await writer.flush()
    assert writer.writes == 1
    assert [c["task_id"] for c in json.loads(path.read_text())["completed"]] == [
        "t0",
        "t1",
        "t2",
        "t3",
        "t4",
    ]
    progress.completed.append(ProgressEntry(task_id="t5", run_index=0, result="t5/x"))
    writer.changed()
    await writer.flush()
    assert writer.writes == 2 and len(json.loads(path.read_text())["completed"]) == 6
    # writes start at most one per interval (each frees an inode): a change soon after a
    # write waits for the interval, or for the job's end (flush), which writes at once
    spaced = ProgressWriter(tmp_path / "progress_s.json", progress, min_interval_s=3600)
    spaced.changed()
    while spaced.writes < 1:
        await asyncio.sleep(0.01)
    progress.completed.append(ProgressEntry(task_id="t6", run_index=0, result="t6/x"))
    spaced.changed()
    for _ in range(20):
        await asyncio.sleep(0.01)
    assert spaced.writes == 1
    assert len(json.loads((tmp_path / "progress_s.json").read_text())["completed"]) == 6
    await asyncio.wait_for(spaced.flush(), 60)
    assert spaced.writes == 2
    assert len(json.loads((tmp_path / "progress_s.json").read_text())["completed"]) == 7
    # a folder that is gone: the write fails, and the job's end says so
    broken = ProgressWriter(tmp_path / "gone" / "progress_m.json", progress)
    broken.changed()
    with pytest.raises(FileNotFoundError):
        await broken.flush()


def test_harness_slots_scale_with_the_cpus():
    from clawrig.waits import harness_slots

    starts, grading = harness_slots(2)
    assert (starts._value, grading._value) == (64, 8)
    starts, grading = harness_slots(8)
    assert (starts._value, grading._value) == (256, 32)


def _loop_on_task_1(solve):
    """A responder: task 1's model never stops (a tool call at $0.01 each turn); other tasks
    as ``solve`` (solve_even_tasks)."""

    def respond(request):
        if re.search(r"TASKNUM=1\b", json.dumps(request["messages"][0])):
            cmd = "echo again >> /tmp_workspace/results/out.txt"
            return reply(
                tool_calls=[call("exec", {"command": cmd})], usage=usage(100, 20, cost=0.01)
            )
        return solve(request)

    return respond


def test_a_trial_that_spent_the_jobs_budget_itself_is_graded_not_rerun(
    mini_bench, scripted_server, tmp_path, even_responder
):
    # a red-team finding: a trial whose model (or a program holding its gateway token) loops
    # requests spent the whole --budget-usd, and the job's refusal made it a `budget` error:
    # not scored, and --resume ran it again. At -p 1 its share is the whole budget ($0.05):
    # it spent it itself, so it stops with cost_budget and is graded as it stands
    bench = mini_bench(2)
    srv = scripted_server(responder=_loop_on_task_1(even_responder))
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1"]
    r = subprocess.run(
        args + ["-o", str(out), "--budget-usd", "0.05"],
        env=_env(srv),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 3, r.stderr[-1500:]  # task 2 not run: the budget stopped the job
    results = [json.loads(p.read_text()) for p in out.glob("*/*/result.json")]
    assert len(results) == 1
    res = results[0]
    assert res["task_id"].endswith("task_1_echo") and res["error"] is None
    assert res["stop_reason"] == "cost_budget" and res["usage"]["request_count"] == 5
    assert math.isclose(res["usage"]["cost_usd"], 0.05)
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["errors_by_kind"] == {} and summary["budget_stopped"] is True
    assert summary["not_run"] == 1 and len(summary["tasks"]) == 1


def test_max_cost_usd_per_trial_stops_the_trial_and_grades_it(
    mini_bench, scripted_server, tmp_path, even_responder
):
    bench = mini_bench(1)
    srv = scripted_server(responder=_loop_on_task_1(even_responder))
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-o", str(out)]
    r = subprocess.run(
        args + ["--max-cost-usd-per-trial", "0.03"],
        env=_env(srv),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-1500:]
    (res,) = [json.loads(p.read_text()) for p in out.glob("*/*/result.json")]
    assert res["error"] is None and res["stop_reason"] == "cost_budget"
    assert res["usage"]["request_count"] == 3 and math.isclose(res["usage"]["cost_usd"], 0.03)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_keeps_what_the_cut_trials_spent(
    mini_bench, scripted_server, tmp_path, even_responder, sig
):
    """Ctrl-C (SIGINT to the process group) or SIGTERM while trials have made model calls:
    the cancelled trials' folders were deleted with the calls they recorded, so the job's
    summary and, after ``--resume``, its totals and budget missed what they spent (a new
    user's finding: 22 calls answered, $0.20 counted). They are set aside in ``_retried/``
    with what their recorded calls spent, and every total counts them."""
    bench = mini_bench(6)

    def responder(req):
        rep = even_responder(req)
        rep.delay = 0.15
        return rep

    srv = scripted_server(responder=responder)
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "3", "-o", str(out)]
    proc = subprocess.Popen(
        args, env=_env(srv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip

    def cut_calls(pattern: str) -> int:
        return sum(
            sum(1 for line in f.read_text().splitlines() if line.endswith("}"))
            for f in out.glob(pattern)
        )

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not cut_calls("*/.tmp-*/model_calls.jsonl"):
        time.sleep(0.01)
    cut = cut_calls("*/.tmp-*/model_calls.jsonl")
    os.killpg(proc.pid, sig) if sig == signal.SIGINT else os.kill(proc.pid, sig)
    assert proc.wait(timeout=120) == 128 + sig, "the job was not interrupted"
    assert cut >= 1 and not list(out.glob("*/.tmp-*"))
    kept = cut_calls("_retried/*/model_calls.jsonl")  # (more may have come before the cancel)
    assert kept >= cut
    finished = len(_trial_folders(out))
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["interrupted"] is True
    assert summary["efficiency"]["total_requests"] == 2 * finished + kept
    r = subprocess.run(
        args + ["--resume"], env=_env(srv), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(_trial_folders(out)) == 6
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["efficiency"]["total_requests"] == 12 + kept
    assert math.isclose(summary["efficiency"]["total_cost_usd"], 0.01 * (12 + kept))


def test_resume_compares_the_replay_source_only_where_the_progress_file_records_it(tmp_path):
    """A progress file from before the replay source was recorded has no ``replay``: not
    compared (a resumed old job is not refused). One that records it, live (null) or a folder,
    is compared with the resuming invocation's."""
    from clawrig.runner.batch import resume_mismatch
    from clawrig.spec.job import Progress

    ppath = tmp_path / "progress_m.json"
    old = json.loads(Progress(model="m", suite="all", runs=1).model_dump_json())
    del old["replay"]
    ppath.write_text(json.dumps(old))
    assert resume_mismatch(tmp_path, "m", replay="/elsewhere") is None
    assert resume_mismatch(tmp_path, "m", replay=None) is None
    ppath.write_text(Progress(model="m", suite="all", runs=1, replay=None).model_dump_json())
    assert resume_mismatch(tmp_path, "m", replay=None) is None
    assert resume_mismatch(tmp_path, "m") is None  # (not asked)
    assert "called its models (live); this is --replay /elsewhere:" in (
        resume_mismatch(tmp_path, "m", replay="/elsewhere") or ""
    )
    ppath.write_text(Progress(model="m", suite="all", runs=1, replay="/rec").model_dump_json())
    assert resume_mismatch(tmp_path, "m", replay="/rec") is None
    assert "the interrupted job replayed /rec; this is a live run (no --replay):" in (
        resume_mismatch(tmp_path, "m", replay=None) or ""
    )


def test_resume_reads_the_replay_source_from_the_summary_beside_an_old_progress_file(tmp_path):
    """An interrupted job's summary records ``replayed_from`` beside a progress file from
    before ``replay`` was recorded: that is compared (27 replayed trials then 13 live ones
    mixed silently: a red-team finding). A relative ``replayed_from`` (older versions wrote it
    as given) is not compared; ``""`` is null; a progress file with a ``replay`` of the wrong
    type is refused naming the field."""
    from clawrig.errors import UserError
    from clawrig.runner.batch import resume_mismatch
    from clawrig.spec.job import Progress

    old = json.loads(Progress(model="m", suite="all", runs=1).model_dump_json())
    del old["replay"]
    (tmp_path / "progress_m.json").write_text(json.dumps(old))
    summary = tmp_path / "summary_m.json"
    summary.write_text(json.dumps({"suite": "all", "runs_per_task": 1, "replayed_from": "/rec"}))
    assert "the interrupted job replayed /rec; this is a live run" in (
        resume_mismatch(tmp_path, "m", replay=None) or ""
    )
    assert resume_mismatch(tmp_path, "m", replay="/rec") is None
    summary.write_text(json.dumps({"suite": "all", "runs_per_task": 1, "replayed_from": "rec"}))
    assert resume_mismatch(tmp_path, "m", replay=None) is None
    assert resume_mismatch(tmp_path, "m", replay="/elsewhere/rec") is None
    (tmp_path / "progress_m.json").write_text(json.dumps({**old, "replay": ""}))
    assert resume_mismatch(tmp_path, "m", replay=None) is None
    (tmp_path / "progress_m.json").write_text(json.dumps({**old, "replay": 5}))
    with pytest.raises(UserError, match=r"progress_m.json: not a valid progress file \(replay: "):
        resume_mismatch(tmp_path, "m", replay=None)


def test_resume_without_a_model_names_the_folders_only_job_of_this_agent(tmp_path):
    """``--resume`` without ``-m``: the folder's only job, when it ran this agent; several
    jobs, or one of another agent, are refused in one line; an agent that calls no model
    resumes the job named after it (with ``--replay`` too: the recording's model is not its
    job's name)."""
    from clawrig.runner.job import Job
    from clawrig.runner.preflight import PreflightError
    from clawrig.spec.job import Progress

    def write(model: str, agent: str) -> None:
        slug = model.replace("/", "_")
        prog = Progress(model=model, suite="all", runs=1, agent=agent)
        (tmp_path / f"progress_{slug}.json").write_text(prog.model_dump_json())

    def job(**trial) -> JobConfig:
        return JobConfig(suite_path=tmp_path, output=tmp_path, resume=True, **trial)

    write("scripted/a", "native")
    assert Job._resume_model(job(), True) == "scripted/a"
    with pytest.raises(PreflightError, match="run by --agent native, not --agent openclaw"):
        Job._resume_model(job(trial=TrialConfig(agent="openclaw")), True)
    replayed = job(trial=TrialConfig(agent="oracle"), replay=tmp_path / "rec")
    with pytest.raises(PreflightError, match="job of scripted/a run by --agent native, not --age"):
        Job._resume_model(replayed, False)  # (it said "holds no job of oracle", as of a model)
    prog = Progress(model="oracle", suite="all", runs=1, agent="oracle")
    (tmp_path / "progress_oracle.json").write_text(prog.model_dump_json())
    assert Job._resume_model(replayed, False) == "oracle"
    (tmp_path / "progress_oracle.json").unlink()
    write("scripted/b", "native")
    with pytest.raises(PreflightError, match=r"holds jobs of scripted/a .*, scripted/b .*-m"):
        Job._resume_model(job(), True)
    (tmp_path / "progress_scripted_b.json").unlink()
    old = json.loads((tmp_path / "progress_scripted_a.json").read_text())
    del old["agent"]  # a file from before the agent was recorded: -m says which
    (tmp_path / "progress_scripted_a.json").write_text(json.dumps(old))
    assert Job._resume_model(job(), True) is None


def test_resume_with_other_trial_settings_is_refused_naming_them(tmp_path):
    """A resume with another --max-turns or --timeout-multiplier ran its trials beside the
    interrupted ones and summed them as one job without a word (a red-team finding); a
    progress file that records no settings (written before they were) is not compared."""
    from clawrig.runner.batch import read_progress, resume_problem
    from clawrig.spec.job import Progress

    ran = TrialConfig(agent="nop", model="m/x", max_turns=1, timeout_multiplier=0.5)
    prog = Progress(model="m/x", suite="all", runs=1, agent="nop", settings=ran.resume_settings())
    ppath = tmp_path / "progress_m_x.json"
    ppath.write_text(prog.model_dump_json())
    (tmp_path / "tasks").mkdir()

    def resumed(**trial) -> str | None:
        cfg = JobConfig(
            suite_path=tmp_path, output=tmp_path, resume=True, trial=ran.model_copy(update=trial)
        )
        return resume_problem(cfg, [], "m/x")

    assert resumed() is None
    assert resumed(judge="j/y") is None  # (resolved at run time: compared by name elsewhere)
    line = resumed(max_turns=40, timeout_multiplier=3.0) or ""
    said = "trial settings differ from the job's (max_turns 1 -> 40, "
    assert f"{ppath}: --resume: {said}timeout_multiplier 0.5 -> 3.0)" in line, line
    assert line.endswith(
        "or these as a new job with another --output (--suite IDS for only the tasks left)"
    )
    old = json.loads(ppath.read_text())
    del old["settings"]
    ppath.write_text(json.dumps(old))
    assert read_progress(ppath).settings == {}
    assert resumed(max_turns=40) is None


def test_a_resume_compares_the_task_ids_a_progress_file_knows(tmp_path):
    """:func:`changed_tasks_problem` on the progress files that carry no digests (helper-119:
    both let another suite run under the job's id): one from before digests were recorded
    knows the tasks it finished, one made from the summary knows every task's id ("")."""
    from clawrig.runner.batch import changed_tasks_problem
    from clawrig.spec.job import JobConfig, Progress, ProgressEntry

    job = JobConfig(suite_path=tmp_path / "other", output=tmp_path / "out", resume=True)
    old = Progress(model="m", suite="all", runs=1, job_id="J")
    old.completed = [ProgressEntry(task_id="t1", run_index=0, result="t1/x")]
    theirs = {"t5": "d5", "t6": "d6"}  # another suite's tasks
    line = changed_tasks_problem(job, "m", old, theirs)
    assert (
        line is not None
        and "1 task(s) of the interrupted job are not in the suite now (t1)" in line
    )
    assert changed_tasks_problem(job, "m", old, {"t1": "d1", "t2": "d2"}) is None  # t2 not run
    from_summary = Progress(
        model="m", suite="all", runs=1, job_id="J", task_digests={"t1": "", "t2": ""}
    )
    line = changed_tasks_problem(job, "m", from_summary, {"t1": "d1", "t3": "d3"})
    assert line is not None
    assert "1 task(s) are not the interrupted job's (t3)" in line and "(t2)" in line
    assert changed_tasks_problem(job, "m", from_summary, {"t1": "d1", "t2": "d2"}) is None


def test_resume_takes_the_same_tasks_listed_in_another_order(tmp_path):
    """helper-155: trials start in task-id order whatever order --suite lists them in, yet
    --resume with 000001,000015 was refused for a job run with 000015,000001."""
    from clawrig.runner.batch import resume_mismatch
    from clawrig.spec.job import Progress

    ppath = tmp_path / "progress_m.json"
    ppath.write_text(Progress(model="m", suite="000015,000001", runs=1).model_dump_json())
    assert resume_mismatch(tmp_path, "m", suite="000001,000015") is None
    assert resume_mismatch(tmp_path, "m", suite=" 000001 ,000015,") is None
    assert "suite differs" in (resume_mismatch(tmp_path, "m", suite="000001") or "")
    assert "suite differs" in (resume_mismatch(tmp_path, "m", suite="all") or "")


def test_an_interrupted_jobs_progress_records_its_wall_time_to_the_end(
    mini_bench, scripted_server, tmp_path, even_responder
):
    """helper-199: the progress file's elapsed_s was written at the last finished trial, so a
    job interrupted 4 s later counted 4 s less once resumed. It is written at the end too."""
    bench = mini_bench(2)
    first: list[str] = []

    def responder(req):
        rep = even_responder(req)
        task = re.search(r"TASKNUM=(\d+)", json.dumps(req["messages"][0]))
        if task is not None:
            first.append(first[0] if first else task.group(1))
            if task.group(1) != first[0]:
                rep.delay = 60.0  # the second trial is in flight at the interrupt
        return rep

    srv = scripted_server(responder=responder)
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1", "-o", str(out)]
    with open(tmp_path / "o.txt", "w") as so, open(tmp_path / "e.txt", "w") as se:
        proc = subprocess.Popen(args, env=_env(srv), stdout=so, stderr=se)
    progress = out / "progress_scripted_test.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if json.loads(progress.read_text())["completed"]:
                break
        time.sleep(0.05)
    time.sleep(4)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130, (tmp_path / "e.txt").read_text()[-2000:]
    recorded = json.loads(progress.read_text())["elapsed_s"]
    summary = json.loads((out / "summary_scripted_test.json").read_text())["elapsed_s"]
    # the summary is written after the progress file's last write: within moments of it,
    # not 4 s past it
    assert summary - 2 < recorded <= summary
