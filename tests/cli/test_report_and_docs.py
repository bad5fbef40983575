"""Small user-facing lines: pass@k at many runs, ``--grader judge`` on a task the judge cannot
grade, the README's account of the scripted server's options."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from cli_helpers import CLAWRIG, REPO, clean_env

from clawrig.cli.run import summary_lines


def test_pass_at_k_at_300_runs_shows_powers_of_two_and_n():
    # pass@k of one task with c = 150 successes in n = 300 runs, as the summary holds it
    n = 300
    passes = {str(k): {"pass_at_k": 1.0, "pass_hat_k": 0.5**k} for k in range(1, n + 1)}
    (line,) = [ln for ln in summary_lines({"pass": passes, "tasks": []}) if "pass@" in ln]
    shown = [int(k) for k in re.findall(r"pass@(\d+)", line)]
    assert shown == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]
    assert "every k in the summary" in line
    # a few runs: every k
    few = {str(k): {"pass_at_k": 1.0, "pass_hat_k": 1.0} for k in range(1, 4)}
    (line,) = [ln for ln in summary_lines({"pass": few, "tasks": []}) if "pass@" in ln]
    assert re.findall(r"pass@(\d+)", line) == ["1", "2", "3"]


@pytest.mark.sandbox
def test_grader_judge_on_a_task_without_rubric_names_the_task_file(scripted_server, tmp_path):
    srv = scripted_server()
    tasks = REPO / "examples" / "wildclaw" / "tasks"
    task_file = next(tasks.rglob("*.md"))
    r = subprocess.run(
        [CLAWRIG, "run", str(task_file), "--root", str(REPO / "examples" / "wildclaw")]
        + ["--agent", "nop", "--grader", "judge", "--judge", "scripted/judge"]
        + ["-o", str(tmp_path / "out")],
        env=clean_env({"SCRIPTED_BASE_URL": srv.base_url}),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "no grader" not in r.stderr
    assert str(task_file) in r.stderr
    assert "--grader judge: the task has no reference answer or rubric for the judge" in r.stderr
    assert not srv.requests  # refused before any sandbox or model request
    args = [CLAWRIG, "run", str(task_file), "--root", str(REPO / "examples" / "wildclaw")]
    args += ["--agent", "nop", "--grader", "exact", "-o", str(tmp_path / "out2")]
    r = subprocess.run(args, env=clean_env(), cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    # exact matching asks no judge: the line says what it lacks
    assert "--grader exact: the task has no reference answer to match" in r.stderr
    assert "judge" not in r.stderr.split("--grader exact:")[1]


def test_the_readme_names_every_option_of_the_scripted_server():
    r = subprocess.run(
        [sys.executable, "-m", "clawrig.testing.scripted_server", "--help"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    options = set(re.findall(r"--[a-z][a-z-]+", r.stdout)) - {"--help"}
    assert {"--script", "--responder", "--port", "--host"} <= options
    readme = (REPO / "README.md").read_text()
    start = readme.index("python -m clawrig.testing.scripted_server")
    section = readme[start : start + 2000]
    assert all(f"`{opt}" in section for opt in options), options


@pytest.mark.sandbox
def test_grader_auto_refuses_a_task_without_checks_before_any_sandbox(scripted_server, tmp_path):
    # a WildClawBench task with its `## Automated Checks` block deleted (no answer, no rubric)
    root = tmp_path / "wc"
    shutil.copytree(REPO / "examples" / "wildclaw", root)
    task_file = (
        root / "tasks" / "01_Productivity_Flow" / ("01_Productivity_Flow_task_1_word_count.md")
    )
    text = task_file.read_text()
    start = text.index("## Automated Checks")
    task_file.write_text(text[:start] + text[text.index("## Workspace Path") :])
    r = subprocess.run(
        [CLAWRIG, "tasks", "validate", str(task_file), "--root", str(root)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    # validate's warning says that run will refuse it
    assert "Automated Checks" in r.stdout + r.stderr and "run refuses it" in r.stdout + r.stderr
    srv = scripted_server()
    out = tmp_path / "out"
    r = subprocess.run(
        [CLAWRIG, "run", str(task_file), "--root", str(root), "--model", "scripted/x"]
        + ["-o", str(out)],
        env=clean_env({"SCRIPTED_BASE_URL": srv.base_url}),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("clawrig: error:")]
    assert errors == [
        f"clawrig: error: {task_file}: the task has no grader (no checks, answer or rubric)"
    ], r.stderr
    assert not srv.requests  # refused before any sandbox or model request
    assert not any(out.rglob("result.json"))


@pytest.mark.sandbox
def test_a_grader_crash_is_an_agent_error_scored_0_and_exit_0(tmp_path):
    """A grader that raises on the agent's end state is the agent's doing (blame follows
    control): scored 0, graded, exit 0 as the README's exit codes say, and the console lists
    it as scored 0, not as an error that leaves the trial unscored (which is exit 1)."""
    suite = tmp_path / "demo"
    shutil.copytree(REPO / "suites" / "demo", suite)
    grader = suite / "evaluators" / "evaluator_000015.py"
    text = grader.read_text()
    head = 'def grade(workspace_path="/tmp_workspace", transcript=None, **kwargs):\n'
    assert head in text
    grader.write_text(text.replace(head, head + '    raise RuntimeError("grader crashed")\n'))
    r = subprocess.run(
        [CLAWRIG, "run", str(suite), "--suite", "000015", "--agent", "nop"]
        + ["-o", str(tmp_path / "out")],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert "1 trial(s) scored 0 for an agent error (the agent's doing):" in r.stdout
    assert "ended with an error" not in r.stdout
    (row,) = [ln for ln in r.stdout.splitlines() if ln.startswith("  000015 run 0: agent: ")]
    assert "grader crashed" in row
    readme = (REPO / "README.md").read_text()
    assert '"scored 0 for an agent error"' in readme


def _table_text(summary: dict) -> str:
    from rich.console import Console

    from clawrig.cli.run import render_summary

    console = Console(width=300, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_summary(summary))
    return console.export_text()


def test_a_large_job_s_table_shows_its_unscored_and_lowest_trials_first():
    """Past 50 trials the end-of-job table keeps 50 rows: every unscored trial, then the
    lowest scores, in the summary's order; the caption says how many it shows."""
    rows = []
    for i in range(120):
        row = {"task_id": f"t{i:03d}", "run_index": 0, "trial": f"f{i}", "error": None}
        if i % 20 == 7:  # 6 unscored (an infrastructure error)
            row |= {"score": None, "error": {"kind": "sandbox", "message": "boom"}}
        elif i % 10 == 3:  # 12 agent errors, scored 0
            row |= {"score": 0.0, "error": {"kind": "agent", "message": "crash"}}
        else:
            row["score"] = round(1.0 - (i % 41) / 100, 2)  # 0.60 .. 1.00
        rows.append(row)
    summary = {
        "model": "m",
        "agent": "native",
        "tasks": rows,
        "evaluated_count": 114,
        "error_count": 6,
        "errors_by_kind": {"sandbox": 6, "agent": 12},
        "mean": {"mean": 0.5},
    }
    text = _table_text(summary)
    shown = re.findall(r"\bt(\d{3})\b", text)
    # independently: the 6 unscored, the 12 zeros, then the 32 lowest other scores (ties in
    # order), printed in the summary's order
    others = sorted((r["score"], int(r["task_id"][1:])) for r in rows if r["score"] is not None)[
        : 50 - 6
    ]
    want = sorted({i for i in range(120) if i % 20 == 7} | {i for _, i in others})
    assert [int(x) for x in shown] == want
    assert len(want) == 50
    assert "the table shows 50 of them" in " ".join(text.split())


def test_a_small_job_s_table_shows_every_trial():
    rows = [
        {"task_id": f"t{i:03d}", "run_index": 0, "trial": "", "error": None, "score": 1.0}
        for i in range(50)
    ]
    summary = {
        "model": "m",
        "agent": "native",
        "tasks": rows,
        "evaluated_count": 50,
        "error_count": 0,
        "mean": {"mean": 1.0},
    }
    text = _table_text(summary)
    assert len(re.findall(r"\bt\d{3}\b", text)) == 50
    assert "the table shows" not in text


def test_the_readme_usage_of_run_names_every_option_and_its_short_alias():
    from clawrig.cli.main import _load

    readme = (REPO / "README.md").read_text()
    start = readme.index("clawrig run [PATH]")
    usage = readme[start : readme.index("```", start)]
    tokens = set(re.findall(r"(?<![\w-])(-{1,2}[a-z][a-z-]*)", usage))
    options = [p for p in _load("run").params if p.param_type_name == "option"]
    assert len(options) > 30
    missing = []
    for p in options:
        names = [o for o in p.opts + p.secondary_opts if o != "--help"]
        # one spelling of each option at least (-m for --model, --no-warm for --warm), and
        # every short alias (a user reading the usage should learn -t and -s)
        shorts = [o for o in names if not o.startswith("--")]
        if not any(o in tokens for o in names) or not all(o in tokens for o in shorts):
            missing.append("/".join(names))
    assert missing == []


def test_the_caption_says_what_its_mean_averages():
    """With several runs of a task the summary's mean is over per-task means (unit task):
    graded trials scoring 1, 1 (task a) and 0 (task b) have a trial mean of 0.667, and the
    caption's 0.5 must not be called the mean of the graded trials (helper-127)."""
    from clawrig.grading.aggregate import mean_ci

    rows = [
        {"task_id": t, "run_index": k, "trial": f"{t}{k}", "score": s, "error": None}
        for t, k, s in (("a", 0, 1.0), ("a", 1, 1.0), ("b", 0, 0.0))
    ]
    per_task = mean_ci([1.0, 0.0])
    base = {"model": "m", "agent": "native", "tasks": rows, "evaluated_count": 3}
    base |= {"error_count": 0, "runs_per_task": 2}
    text = " ".join(_table_text(base | {"mean": per_task.as_dict() | {"unit": "task"}}).split())
    assert "mean score over 2 task(s) (each its runs' mean) [95% CI] 0.5000" in text
    assert "of the graded trials" not in text
    trials = mean_ci([1.0, 1.0, 0.0]).as_dict() | {"unit": "trial"}
    text = " ".join(_table_text(base | {"mean": trials}).split())
    assert "mean score of the graded trials [95% CI] 0.6667" in text


def test_a_cut_error_message_keeps_its_start_and_what_to_do():
    # helper-148: the list cut a message at 200 characters, before its "what to do" end
    what = "; this trial ends, not scored: --resume runs it again"
    long = "ScriptedServer: script exhausted: " + "word " * 80 + what  # 487 characters
    rows = [{"task_id": "t", "run_index": 0, "trial": "f", "score": None}]
    rows[0]["error"] = {"kind": "infrastructure", "message": long + "\nsecond line"}
    (line,) = [ln for ln in summary_lines({"tasks": rows}) if ln.startswith("  t run 0")]
    shown = line.removeprefix("  t run 0: infrastructure: ")
    # cut between words: the start up to its last whole word within 400 - 160 - 3 characters,
    # " … ", the end from its first whole word within its last 160
    head, end = shown.split(" … ")
    assert long.startswith(head + " ") and len(head) <= 237 and head.endswith("word")
    assert long.endswith(" " + end) and len(end) <= 160 and end.startswith("word")
    assert end.endswith(what) and len(shown) <= 400
    short = "refused; --resume runs it again"
    rows[0]["error"]["message"] = short
    assert f"  t run 0: infrastructure: {short}" in summary_lines({"tasks": rows})
    empty = [{"task_id": "u", "run_index": 0, "trial": "f", "score": None}]
    empty[0]["error"] = {"kind": "setup", "message": ""}
    assert "  u run 0: setup: " in summary_lines({"tasks": empty})


def test_pass_at_k_over_fewer_tasks_says_so():
    """A task with fewer than k graded runs is left out of pass^k: pass^2 1.000 beside pass^1
    0.500 read as a bug (helper-127) without the count of tasks it is over."""
    from clawrig.grading.aggregate import pass_metrics
    from clawrig.spec.trial import Score, TrialResult

    def trial(task: str, run: int, score: float) -> TrialResult:
        return TrialResult(
            task_id=task, run_index=run, trial_id=f"{task}-{run}", model="m", agent="native",
            sandbox="bwrap", score=Score(score=score),
        )  # fmt: skip

    # task a: 1, 1 (two graded runs); task b: 0 (one graded run, the other errored)
    runs = [trial("a", 0, 1.0), trial("a", 1, 1.0), trial("b", 0, 0.0)]
    passes = pass_metrics(runs, [1, 2])
    (line,) = [ln for ln in summary_lines({"pass": passes, "tasks": []}) if "pass@" in ln]
    assert "pass@1 0.500 pass^1 0.500, pass@2 1.000 pass^2 1.000 (over 1 of 2 tasks)" in line


@pytest.mark.sandbox
def test_the_oracle_line_is_said_when_a_trial_errored(tmp_path):
    """Sample 000008's first service, made to hold 256 MiB, does not fit in 64 MiB (a setup
    error, not scored): the oracle's line still reports the samples that ran, and counts the
    unscored one. (The sample's own services under 64 MiB were no sure setup error: in CI199
    they fit, and the kernel killed one later, while the agent ran.)"""
    suite = tmp_path / "suite"
    shutil.copytree(REPO / "suites" / "demo", suite)
    intent = suite / "intent" / "000008.json"
    spec = json.loads(intent.read_text())
    hog = "python3 -c \"held = b'x' * (256 << 20); import time; time.sleep(60)\""
    spec["services"][0] = {"name": "gmail", "command": hog, "port": 9100}
    intent.write_text(json.dumps(spec))
    r = subprocess.run(
        [CLAWRIG, "run", str(suite), "-s", "000001,000008"]
        + ["--agent", "oracle", "--memory-mb", "64", "--max-attempts", "1"]
        + ["-o", str(tmp_path / "out")],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    summary = json.loads(next((tmp_path / "out").glob("summary_*.json")).read_text())
    kinds = {row["task_id"]: (row["error"] or {}).get("kind") for row in summary["tasks"]}
    assert kinds == {"000001": None, "000008": "setup"}
    assert "oracle: 1/2 samples reach their expected reward (1 not scored)" in r.stdout
    # the service's log is said on the line the console shows, not cut after "its log:": empty,
    # or (as on a CI machine where the killed service wrote a line first) its last line
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("  000008 run 0: setup: ")]
    assert re.search(r"--memory-mb\); its log (is empty|ends: \S.*)$", line), line


def test_the_usage_line_names_where_the_set_aside_attempts_are():
    # helper-153: right after a Ctrl-C it said "by attempts run again" of attempts only set
    # aside (--resume runs them)
    usage = {"total_requests": 6, "total_tokens": 90, "input_tokens": 60, "output_tokens": 30}
    usage |= {"total_cost_usd": 0.08, "retried": {"request_count": 2, "cost_usd": 0.02}}
    (line,) = [ln for ln in summary_lines({"usage": usage, "tasks": []}) if "usage" in ln]
    assert line == (
        "model usage: 6 requests, 90 tokens (60 in, 30 out), $0.0800 ($0.0200 of it by attempts "
        "that did not finish: set aside in _retried/, lost with a Ray node, or whose folder could "
        "not be written)"
    )


def test_the_table_says_why_a_graded_agent_was_cut_short():
    """helper-168: a trial stopped by its budget showed 0 and an empty error column (only
    result.json said ``cost_budget``). An agent cut short and graded as it stood says how; one
    that answered, or whose error is shown, says nothing more."""
    reasons = ["cost_budget", "time_limit", "max_turns", "final_answer", None]
    rows = [
        {"task_id": f"t{i}", "run_index": 0, "trial": f"f{i}", "error": None, "score": 0.0}
        | {"stop_reason": why}
        for i, why in enumerate(reasons)
    ]
    rows[3]["score"] = 1.0
    rows.append(
        {"task_id": "t5", "run_index": 0, "trial": "f5", "score": 0.0, "stop_reason": "time_limit"}
        | {"error": {"kind": "agent", "message": "crash"}}
    )
    summary = {"model": "m", "agent": "native", "tasks": rows, "evaluated_count": 6}
    summary |= {"error_count": 0, "errors_by_kind": {"agent": 1}, "mean": {"mean": 0.2}}
    lines = {ln.split()[1]: ln for ln in _table_text(summary).splitlines() if " t" in ln[:4]}
    said = {t: re.search(r"stopped: (\w+)", ln) for t, ln in lines.items()}
    got = {t: m.group(1) for t, m in said.items() if m}
    assert got == {"t0": "cost_budget", "t1": "time_limit", "t2": "max_turns"}, lines
    assert "agent: crash" in lines["t5"]


def test_the_stop_lines_say_what_resume_runs_and_only_what_holds(tmp_path):
    """helper-222: a stop that came as the last trial ended said "0 trial(s) not run"; an
    interrupt after the output folder went said "finished trials are kept" beside its line
    that they may be gone."""
    from clawrig.cli.run import stop_lines
    from clawrig.runner.batch import OutputLock, output_moved_line

    errored = {"error": {"kind": "infrastructure", "message": "x"}}
    full = "the output folder /o could not be written (no space left): trials run now ..."
    assert stop_lines({"output_stopped": full, "not_run": 0, "tasks": []}, None) == [
        f"stopped: {full}"
    ]
    assert stop_lines({"output_stopped": full, "not_run": 0, "tasks": [errored]}, None) == [
        f"stopped: {full}; 1 trial(s) errored"
    ]
    assert stop_lines({"budget_stopped": True, "not_run": 2, "tasks": [errored]}, 0.5) == [
        "the budget of $0.5 stopped the job; 2 trial(s) not run and 1 errored (raise "
        "--budget-usd and --resume to continue)"
    ]
    assert stop_lines({"budget_stopped": True, "not_run": 0, "tasks": []}, 0.5) == [
        "the budget of $0.5 stopped the job"
    ]
    # an interrupt: the trials kept, unless the folder they were in went
    assert stop_lines(
        {"interrupted": True, "interrupted_by": "SIGTERM", "not_run": 3, "tasks": []}, None
    ) == [
        "interrupted (SIGTERM): finished trials are kept; 3 trial(s) not run (--resume continues)"
    ]
    # the lines a job writes when its folder, or only its lock file, went
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out / ".clawrig.lock", os.O_RDWR | os.O_CREAT)
    st = os.stat(out)
    held = OutputLock(fd, (st.st_dev, st.st_ino))
    (out / ".clawrig.lock").unlink()
    lock = output_moved_line(out, held)
    out.rename(tmp_path / "away")
    moved = output_moved_line(out, held)
    os.close(fd)
    assert lock and moved and "lock file" in lock and "lock file" not in moved
    # (what --resume runs said once, on the stop's line: helper-226 saw it twice)
    for stopped, then in [
        (moved, "interrupted"),
        (lock, "interrupted: finished trials are kept"),
        (full, "interrupted: finished trials are kept"),
    ]:
        summary = {"interrupted": True, "output_stopped": stopped, "not_run": 3, "tasks": []}
        assert stop_lines(summary, None) == [f"stopped: {stopped}; 3 trial(s) not run", then]


def test_the_resume_line_says_what_was_done_and_what_was_set_aside():
    """helper-228: ``--resume`` set aside or removed the stopped run's half-written trials
    without a word; a new job says nothing at all."""
    from clawrig.cli.run import resume_line
    from clawrig.runner.batch import JobState

    assert resume_line(JobState(total=4)) is None
    # a finished job says so itself (helper-229: both lines)
    assert resume_line(JobState(total=4, done=4, skipped=4)) is None
    assert resume_line(JobState(total=4, skipped=3)) == "resuming: 3 of 4 trial(s) done, 1 to run"
    tail = "; the stopped run's unfinished or errored attempts: "
    assert resume_line(JobState(total=4, removed=2)) == (
        f"resuming: 0 of 4 trial(s) done, 4 to run{tail}2 removed (no model call recorded in them)"
    )
    assert resume_line(JobState(total=6, skipped=1, set_aside=1)) == (
        f"resuming: 1 of 6 trial(s) done, 5 to run{tail}1 set aside in _retried/ (what they "
        "spent still counts)"
    )


def test_a_second_signal_says_what_it_kept_of_the_trials_in_progress():
    """helper-225: a second Ctrl-C of a job whose trials had called no model (an oracle job)
    said what they spent was in _retried/, where nothing was put."""
    from clawrig.runner.batch import exit_now_reason

    assert exit_now_reason(0, 0) == "no trial was still running; --resume runs those not run"
    assert "what they spent is in _retried/" in exit_now_reason(2, 1)
    nothing = exit_now_reason(2, 0)
    assert "_retried/" not in nothing and "no model call of theirs was recorded" in nothing
    assert "the output folder is no longer the job's" in exit_now_reason(2, None)
