"""`clawrig grade TRIAL_DIR`: re-grading a finished trial gives the same scores; recorded
judge calls are replayed without any model server."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from clawrig.runner.regrade import regrade_trial
from clawrig.runner.trial import TrialServices, run_trial
from clawrig.spec.job import TrialConfig
from clawrig.tasks.registry import load_tasks
from clawrig.testing.paths import SHARED
from clawrig.testing.scripted_server import call, reply

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
GOLD = SHARED / "data/dataclawbench/assets/qa_gold/hypothesis_verification/hard001.json"
DB_FILES = [
    "bilingual_translation_english_chinese.json",
    "internal_metrics.csv",
    *(
        f"enterprise/{n}.csv"
        for n in (
            "company_core",
            "company_operation_status",
            "company_operation_status_detail",
            "company_operation_yearly_status",
            "company_profile",
            "company_profile_as",
            "company_profile_eu",
            "company_profile_na",
            "company_profile_oc",
        )
    ),
    *(
        f"industry/{n}.csv"
        for n in (
            "national_industry_status",
            "national_industry_status_detail",
            "national_industry_yearly_status",
            "regional_industry_status",
            "regional_industry_status_detail",
            "regional_industry_yearly_status",
        )
    ),
    "policy/policy_release_status.csv",
    "policy/policy_resource.csv",
]


def _dataclaw_root(tmp: Path) -> Path:
    root = tmp / "dcb"
    gold = root / "assets" / "qa_gold" / "hypothesis_verification" / "hard001.json"
    gold.parent.mkdir(parents=True)
    shutil.copy(GOLD, gold)
    for rel in DB_FILES:
        p = root / "assets" / "database" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("id,value\n1,2\n")
    return root


async def test_judged_trial_regrades_to_the_same_score_from_the_cache(scripted_server, tmp_path):
    root = _dataclaw_root(tmp_path)
    (task,) = load_tasks(root)
    agent = scripted_server(
        [
            reply(tool_calls=[call("exec", {"command": "ls database | wc -l"})]),
            reply('["0.1142", "-0.2132", "0.33"]'),
        ]
    )
    judge = scripted_server(
        [
            reply(
                '```json\n{"scores": {"part_0": 1, "part_1": 1, "part_2": 1}, "total": 1.0, '
                '"notes": "all parts match"}\n```'
            ),
        ]
    )
    services = TrialServices(model=agent.chat_model(), judge=judge.chat_model("scripted/judge"))
    result, folder = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/agent"),
        tmp_path / "out",
        services=services,
    )
    assert result.error is None and result.score.score == 1.0
    assert result.process.model_dump()["efficiency"] == {
        "s_agent": 2,
        "s_gold": 7,
        "efficiency": 3.5,
    }
    assert len(judge.requests) == 1
    judge.stop()  # no model server from here on
    report = await regrade_trial(folder)
    assert report.same and report.after.score == 1.0
    assert report.judge_cache == {"hits": 1, "misses": 0}


def test_cli_regrades_an_oracle_trial(tmp_path):
    import asyncio

    task = next(t for t in load_tasks(REPO / "suites" / "demo") if t.id == "000015")
    result, folder = asyncio.run(
        run_trial(task, TrialConfig(agent="oracle", model="oracle"), tmp_path)
    )
    clawrig = str(Path(sys.executable).with_name("clawrig"))
    # the command's own temp folder (short: unix socket paths live there), to see what it left
    temp = Path(tempfile.mkdtemp(prefix="rg-", dir="/tmp"))
    r = subprocess.run(
        [clawrig, "grade", str(folder), "--json"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "TMPDIR": str(temp)},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["same"] and report["after"]["score"] == result.score.score == 1.0
    # the re-grading's own log folder went with it (one clawrig-regrade-logs-* was left in
    # the temp folder by every trial re-graded: 1,337 on this machine)
    left = [p.name for p in temp.iterdir() if "regrade" in p.name]
    shutil.rmtree(temp, ignore_errors=True)
    assert not left
    bad = subprocess.run([clawrig, "grade", str(tmp_path / "nope")], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == f"clawrig: error: TRIAL_DIR: no such folder: {tmp_path / 'nope'}"
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = subprocess.run([clawrig, "grade", str(empty)], capture_output=True, text=True)
    assert bad.returncode == 2 and (
        "has no result.json (not a trial folder, nor a job or task folder with finished "
        "trials in it)" in bad.stderr
    )


def test_a_missing_judge_cache_is_one_line_before_any_trial(demo_oracle_job):
    # new-user review: each trial was listed "cannot re-grade: --judge-cache: no such file"
    missing = demo_oracle_job.parent / "no-such-cache.jsonl"
    r = _grade(str(demo_oracle_job), "--judge-cache", str(missing))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines() == [f"clawrig: error: --judge-cache: no such file: {missing}"]
    assert r.stdout == ""


def test_a_task_folder_grades_its_trials_and_a_job_without_trials_says_so(
    demo_oracle_job, tmp_path
):
    # new-user review: both said "has no result.json (not a trial folder)"
    task = demo_oracle_job / "000004"
    trials = sorted(p.name for p in task.iterdir() if (p / "result.json").is_file())
    assert trials
    r = _grade(str(task), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    reports = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted(Path(rep["trial"]).name for rep in reports) == trials
    assert all(rep["same"] and rep["task_id"] == "000004" for rep in reports)
    # a task folder's trials only: no .tmp- trial, no link out of the job; and a trial folder
    # without result.json is not taken as a task folder (its end_state/ is the agent's)
    copy = tmp_path / "copy"
    shutil.copytree(demo_oracle_job, copy, symlinks=True)
    trial = copy / "000004" / trials[0]
    shutil.copytree(trial, copy / "000004" / ".tmp-unfinished")
    outside = tmp_path / "outside"
    shutil.copytree(trial, outside)
    (copy / "000004" / "zlink").symlink_to(outside)
    r = _grade(str(copy / "000004"), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [Path(json.loads(line)["trial"]).name for line in r.stdout.splitlines()] == trials
    shutil.copytree(outside, trial / "end_state" / "forged")  # a whole trial, agent-written
    (trial / "result.json").unlink()
    r = _grade(str(trial))
    assert r.returncode == 2 and "has no result.json" in r.stderr, r.stdout + r.stderr
    job = tmp_path / "stopped-job"
    job.mkdir()
    (job / "progress_oracle.json").write_text("{}")
    r = _grade(str(job))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines() == [
        f"clawrig: error: TRIAL_DIR: {job} is a job folder with no finished trial in it (no "
        "<task>/<trial>/result.json): nothing to grade"
    ]
    # a finished job whose every trial folder was deleted names its summary's gone folders,
    # as when only some are (helper-194)
    emptied = tmp_path / "emptied"
    emptied.mkdir()
    shutil.copy(next(demo_oracle_job.glob("summary_*.json")), emptied)
    r = _grade(str(emptied))
    n = len(_expected_rewards())
    assert r.returncode == 2 and r.stderr.startswith(
        f"clawrig: error: TRIAL_DIR: {emptied} is a job folder with no finished trial in it "
        f"(no <task>/<trial>/result.json): nothing to grade; {next(emptied.glob('summary_*'))}: "
        f"lists {n} trial folder(s) that are gone"
    ), r.stderr


def test_grade_without_arguments_says_what_to_give():
    r = _grade()
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines() == [
        "clawrig: error: TRIAL_DIR: give one or more trial folders (each holds result.json) "
        "or a job folder (clawrig run's --output) to grade all its trials "
        "(see 'clawrig grade --help')"
    ]
    assert "trial_dirs" not in r.stdout + r.stderr


def test_a_corrupt_result_json_is_reported_and_the_rest_of_the_job_regraded(
    demo_oracle_job, tmp_path
):
    """Two trials of a 10-trial job have a broken result.json (not JSON; a required field
    gone): `clawrig grade JOB` names each file and what is wrong, re-grades the other 8 to
    their scores, and exits 1; with --write the 8 are written and the summary, which cannot be
    recomputed without the two, is left as it was, said in one line."""
    job = tmp_path / "job"
    shutil.copytree(demo_oracle_job, job)
    broken_json = next((job / "000003").iterdir()) / "result.json"
    broken_json.write_text('{"task_id": "000003", ')
    no_task_id = next((job / "000006").iterdir()) / "result.json"
    data = json.loads(no_task_id.read_text())
    del data["task_id"]
    no_task_id.write_text(json.dumps(data))
    summary = next(job.glob("summary_*.json"))
    summary_before = summary.read_bytes()

    r = _grade(str(job), "-p", "2", "--write")
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    bad = [ln for ln in lines if ": cannot re-grade: " in ln]
    assert bad == [
        f"000003 {broken_json.parent.name}: cannot re-grade: {broken_json}: not a valid trial "
        "result: (the file): Invalid JSON: EOF while parsing a value at line 1 column 22",
        f"000006 {no_task_id.parent.name}: cannot re-grade: {no_task_id}: not a valid trial "
        "result: task_id: Field required",
    ]
    same = [ln for ln in lines if ": same scores " in ln and ln.endswith("; written")]
    assert len(same) == len(_expected_rewards()) - 2
    assert lines[-1] == "8/10 trials re-grade to their recorded scores; 2 could not be read"
    assert r.stderr.splitlines() == [
        f"summary not recomputed: {broken_json}: not a valid trial result: (the file): "
        "Invalid JSON: EOF while parsing a value at line 1 column 22"
    ]
    assert summary.read_bytes() == summary_before

    r = _grade(str(job), "-p", "2", "--json")
    reports = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert r.returncode == 1 and len(reports) == 10
    assert sorted(rep["task_id"] for rep in reports if rep["unreadable"]) == ["000003", "000006"]
    assert all(rep["same"] for rep in reports if not rep["unreadable"])


def _expected_rewards() -> dict[str, float]:
    """EXPECTED_REWARD of each demo evaluator, read from its source."""
    out = {}
    for path in sorted((REPO / "suites" / "demo" / "evaluators").glob("evaluator_*.py")):
        m = re.search(r"^EXPECTED_REWARD = ([0-9.]+)$", path.read_text(), re.M)
        out[path.stem.removeprefix("evaluator_")] = float(m.group(1))
    return out


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _grade(*args: str) -> subprocess.CompletedProcess:
    clawrig = str(Path(sys.executable).with_name("clawrig"))
    return subprocess.run([clawrig, "grade", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def serial_grade(demo_oracle_job: Path) -> tuple[subprocess.CompletedProcess, dict, dict]:
    """`clawrig grade JOB --json -p 1` on the session's demo oracle job (re-grading all 10
    trials, the costly part), run once for the two tests that read it; with the digests of the
    job folder's files before and after it."""
    before = _tree_digest(demo_oracle_job)
    r = _grade(str(demo_oracle_job), "--json", "-p", "1")
    return r, before, _tree_digest(demo_oracle_job)


def test_grade_reproduces_every_demo_oracle_trial_and_changes_nothing(serial_grade):
    """`clawrig grade JOB` re-grades each of the 10 demo oracle trials to its recorded score
    (= the evaluator's EXPECTED_REWARD), and not one byte of the job folder changes."""
    r, before, after = serial_grade
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    reports = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    expected = _expected_rewards()
    assert sorted(rep["task_id"] for rep in reports) == sorted(expected)
    for rep in reports:
        recorded = json.loads((Path(rep["trial"]) / "score.json").read_text())["score"]
        assert rep["before"]["score"] == recorded == expected[rep["task_id"]], rep
        assert rep["after"]["score"] == recorded, rep
        assert rep["same"] and not rep["written"]
    assert after == before


def test_a_trial_named_twice_is_graded_once(demo_oracle_job):
    """helper-117: ``clawrig grade J J`` graded every trial twice ("2/2 trials" for one); a
    trial given as a folder and inside its job's is graded once too."""
    trial = next((demo_oracle_job / "000015").iterdir())
    r = _grade(str(trial), str(trial) + "/", str(demo_oracle_job / "000015"), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    reports = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert [Path(rep["trial"]).resolve() for rep in reports] == [trial.resolve()]


def test_grade_reads_result_json_and_says_when_score_json_disagrees(demo_oracle_job, tmp_path):
    """result.json is the trial's record (the summary, exports and viewer read it; score.json
    is derived from it): grade compares the re-grading with it, and a score.json edited
    apart from it is reported (exit 1) until --write writes it again."""
    src = next((demo_oracle_job / "000006").iterdir())
    folder = tmp_path / src.name
    shutil.copytree(src, folder)
    recorded = json.loads((folder / "result.json").read_text())["score"]["score"]
    score_file = json.loads((folder / "score.json").read_text())
    score_file["score"] = 0.25
    (folder / "score.json").write_text(json.dumps(score_file))
    r = _grade(str(folder), "--json")
    (rep,) = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert r.returncode == 1
    assert rep["before"]["score"] == rep["after"]["score"] == recorded  # from result.json
    assert "score.json disagrees with result.json" in rep["score_file"]
    assert "0.25" in rep["score_file"] and not rep["same"]
    r = _grade(str(folder))
    assert r.returncode == 1 and "same scores, but score.json disagrees" in r.stdout
    # its score re-grades to the recorded one: counted so, the score.json told apart
    assert r.stdout.splitlines()[-1] == (
        "1/1 trial re-grades to its recorded score; 1 score.json disagree(s) with result.json"
    )
    r = _grade(str(folder), "--write")
    assert json.loads((folder / "score.json").read_text())["score"] == recorded
    r = _grade(str(folder))
    assert r.returncode == 0 and "disagrees" not in r.stdout


def test_grade_in_parallel_gives_the_serial_reports(demo_oracle_job, serial_grade):
    """`clawrig grade JOB -p 4` grades four trials at once: the same reports, in the same
    order, as one at a time (``-p 1``)."""
    serial = serial_grade[0]
    parallel = _grade(str(demo_oracle_job), "--json", "-p", "4")
    assert serial.returncode == parallel.returncode == 0, parallel.stdout + parallel.stderr
    one = [json.loads(line) for line in serial.stdout.splitlines() if line.strip()]
    many = [json.loads(line) for line in parallel.stdout.splitlines() if line.strip()]
    assert len(one) == len(_expected_rewards()) and many == one


def test_grade_writes_the_folder_only_with_write(demo_oracle_job, tmp_path):
    src = next((demo_oracle_job / "000006").iterdir())  # the one that deletes files
    folder = tmp_path / src.name
    shutil.copytree(src, folder)
    result = json.loads((folder / "result.json").read_text())
    result["score"]["score"] = 0.5  # a record that no longer matches its end state
    (folder / "result.json").write_text(json.dumps(result))
    before = _tree_digest(folder)
    r = _grade(str(folder))
    assert r.returncode == 1 and "recorded 0.5 -> re-graded 1.0: DIFFERENT" in r.stdout
    # one trial too ends with the closing line (its score.json still says 1.0)
    assert r.stdout.splitlines()[-1] == (
        "0/1 trial re-grades to its recorded score; 1 re-grade(s) to another score; 1 "
        "score.json disagree(s) with result.json"
    )
    assert _tree_digest(folder) == before
    r = _grade(str(folder), "--write")
    assert r.returncode == 1 and "written" in r.stdout
    assert json.loads((folder / "score.json").read_text())["score"] == 1.0
    assert json.loads((folder / "result.json").read_text())["score"]["score"] == 1.0
    r = _grade(str(folder))
    assert r.returncode == 0 and "recorded 1.0 -> re-graded 1.0: same" in r.stdout
    assert r.stdout.splitlines()[-1] == "1/1 trial re-grades to its recorded score"


async def test_scripted_model_trials_regrade_to_their_scores(
    mini_bench, scripted_server, even_responder, tmp_path
):
    """Native-agent trials against the scripted model (one right, one wrong) re-grade to the
    recorded 1.0 and 0.25, under the recorded time limits (multiplier 2)."""
    tasks = load_tasks(mini_bench(2) / "tasks")
    srv = scripted_server(responder=even_responder)
    config = TrialConfig(agent="native", model="scripted/test", timeout_multiplier=2.0)
    for task, want in zip(tasks, (0.25, 1.0), strict=True):
        result, folder = await run_trial(
            task, config, tmp_path / "out", services=TrialServices(model=srv.chat_model())
        )
        assert result.score.score == want
        report = await regrade_trial(folder)
        assert report.same and report.after.score == report.before.score == want
        assert report.grader_timeout_s == task.grader.timeout_seconds * 2.0


JUDGE_GRADER = r"""
import json, os, urllib.request

def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    answer = open(os.path.join(workspace_path, "results", "out.txt")).read()
    body = {"model": os.environ["JUDGE_MODEL"], "temperature": 0,
            "messages": [{"role": "user", "content": "Rate from 0 to 1: " + answer}]}
    req = urllib.request.Request(
        os.environ["OPENROUTER_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENROUTER_API_KEY"],
                 "Content-Type": "application/json"})
    reply = json.loads(urllib.request.urlopen(req, timeout=60).read())
    score = json.loads(reply["choices"][0]["message"]["content"])["score"]
    return {"judge": score, "overall_score": score}
"""


def _judged_task_file(root: Path) -> Path:
    """A WildClawBench task whose grader asks an LLM judge (through the judge proxy)."""
    cat = "01_Productivity_Flow"
    md = root / "tasks" / cat / f"{cat}_task_1_judged.md"
    md.parent.mkdir(parents=True)
    md.write_text(
        "---\n"
        f"id: {cat}_task_1_judged\nname: Judged\ncategory: {cat}\ntimeout_seconds: 60\n"
        "---\n\n## Prompt\n\nWrite ok-1 to /tmp_workspace/results/out.txt. TASKNUM=2\n\n"
        "## Expected Behavior\n\nWrite it.\n\n## Grading Criteria\n\n- [ ] judged\n\n"
        "## Automated Checks\n\n```python\n" + JUDGE_GRADER.strip() + "\n```\n\n"
        "## Workspace Path\n\n```\nworkspace/x\n```\n",
        encoding="utf-8",
    )
    (root / "workspace" / "x" / "exec").mkdir(parents=True)
    return md


async def _judged_trial(scripted_server, responder, tmp_path):
    """(result, folder, judge server) of one native-agent trial of the judged task, run through
    a gateway whose judge (a scripted server) answers {"score": 0.75}."""
    from clawrig.llm.gateway import Gateway

    (task,) = load_tasks(_judged_task_file(tmp_path / "bench"))
    agent = scripted_server(responder=responder)
    judge = scripted_server(responder=lambda req: reply('{"score": 0.75}'))
    with Gateway() as gw:
        services = TrialServices(
            model=agent.chat_model(), judge=judge.chat_model("scripted/judge"), gateway=gw
        )
        result, folder = await run_trial(
            task,
            TrialConfig(agent="native", model="scripted/agent"),
            tmp_path / "out",
            services=services,
        )
    return result, folder, judge


async def test_a_graders_judge_calls_replay_through_the_gateway_on_regrade(
    scripted_server, even_responder, tmp_path
):
    """A programmatic grader that asked a judge through the judge proxy re-grades to the same
    score with no judge server: the proxy answers from the trial's recorded judge calls."""
    result, folder, judge = await _judged_trial(scripted_server, even_responder, tmp_path)
    assert result.error is None and result.score.score == 0.75
    assert len(judge.requests) == 1
    judge.stop()  # no judge from here on
    report = await regrade_trial(folder)
    assert report.same and report.after.score == 0.75
    assert report.judge_cache == {"hits": 1, "misses": 0}


def test_grade_write_recomputes_the_job_summary_and_the_viewer_index(demo_oracle_job, tmp_path):
    """`grade --write` on one trial of a job whose end state lost its result file: the trial,
    the job's summary and a running viewer's index all show the new score 0.0; the summary's
    averages are the expected rewards with that one task at 0, worked out here."""
    from clawrig.view.index import FolderIndex

    job = tmp_path / "job"
    shutil.copytree(demo_oracle_job, job)
    (trial,) = (job / "000015").iterdir()
    (trial / "end_state" / "results" / "results.md").unlink()
    (summary_file,) = job.glob("summary_*.json")
    before = json.loads(summary_file.read_text())
    # a backup copy beside it (sorted first) stays as it is: it was the one rewritten
    backup = summary_file.with_name("summary_oracle.bak.json")
    shutil.copy(summary_file, backup)
    index = FolderIndex(job, min_interval=0)  # a viewer open on the job
    assert index.rows[f"000015/{trial.name}"]["score"] == 1.0

    r = _grade(str(trial), "--write")
    assert r.returncode == 1 and "recorded 1.0 -> re-graded 0.0" in r.stdout, r.stdout
    assert f"summary recomputed: {summary_file}" in r.stdout.replace("\n", "")
    expected = _expected_rewards()
    expected["000015"] = 0.0
    mean = sum(expected.values()) / len(expected)
    after = json.loads(summary_file.read_text())
    row = next(t for t in after["tasks"] if t["task_id"] == "000015")
    assert row["score"] == 0.0 and row["meets_expected"] is False
    assert after["wildclaw"]["overall"] == pytest.approx(mean)
    assert after["mean"]["mean"] == pytest.approx(mean)
    assert after["overall_score"] == pytest.approx(mean)
    assert after["regraded_at"] and after["job_id"] == before["job_id"]
    assert after["timestamp"] == before["timestamp"] and after["model"] == before["model"]
    assert json.loads(backup.read_text()) == before
    # a summary renamed by hand is recomputed under its name, and the line says so
    summary_file.rename(job / "summary_foo.json")
    backup.unlink()
    r = _grade(str(trial), "--write")
    assert (
        f"summary recomputed: {job / 'summary_foo.json'} (named for another model: rename it "
        "summary_oracle.json)" in r.stdout.replace("\n", "")
    ), r.stdout
    (job / "summary_foo.json").rename(summary_file)
    index.refresh()
    assert index.rows[f"000015/{trial.name}"]["score"] == 0.0
    assert json.loads((trial / "score.json").read_text())["score"] == 0.0


def test_grade_write_reads_only_the_jobs_own_trials_once_each(demo_oracle_job, tmp_path):
    """helper-121: a summary row listed twice was counted twice by `grade --write`, and a row
    whose trial path led out of the job made it read that folder's result.json."""
    job = tmp_path / "job"
    shutil.copytree(demo_oracle_job, job)
    (trial,) = (job / "000015").iterdir()
    (summary_file,) = job.glob("summary_*.json")
    summary = json.loads(summary_file.read_text())
    rows = summary["tasks"]
    summary["tasks"] = rows + [rows[0]]  # the first row twice
    summary_file.write_text(json.dumps(summary))
    r = _grade(str(trial), "--write")
    assert "summary recomputed" in r.stdout.replace("\n", ""), r.stdout + r.stderr
    after = json.loads(summary_file.read_text())
    assert len(after["tasks"]) == len(rows)  # once each
    assert after["mean"]["n"] == len(rows)
    # a row leading out of the job: refused by name, the summary left as it was
    outside = tmp_path / "elsewhere" / "t"
    shutil.copytree(trial, outside)
    after["tasks"][1]["trial"] = "../elsewhere/t"
    summary_file.write_text(json.dumps(after))
    before = summary_file.read_text()
    r = _grade(str(trial), "--write")
    said = r.stderr.replace("\n", "")
    assert r.returncode == 1 and "summary not recomputed: " in said, r.stdout + r.stderr
    assert "tasks[1].trial '../elsewhere/t' is not a trial folder of this job" in said
    assert "Traceback" not in r.stderr and summary_file.read_text() == before


async def test_a_replay_miss_is_reported_and_a_live_judge_answers_it(
    scripted_server, even_responder, tmp_path
):
    """The grader's judge request changes (the end state was edited): nothing recorded answers
    it, so `clawrig grade` says so in one line and `--write` writes nothing; with `--judge` a
    live judge answers it."""
    import os

    result, folder, judge = await _judged_trial(scripted_server, even_responder, tmp_path)
    assert result.score.score == 0.75
    judge.stop()
    out = folder / "end_state" / "results" / "out.txt"
    out.write_text(out.read_text() + " and more")
    before = _tree_digest(folder)
    r = _grade(str(folder), "--write")
    assert r.returncode == 1
    assert "replay miss: the grading asked the judge 1 request(s) the trial never recorded" in (
        r.stdout.replace("\n", "")
    )
    assert "Traceback" not in r.stdout + r.stderr
    assert "recorded 0.75 -> no score: could not be re-graded" in r.stdout
    assert "None" not in r.stdout  # (it said "re-graded None", a new user's finding)
    assert "DIFFERENT" not in r.stdout
    assert _tree_digest(folder) == before  # not written
    live = scripted_server(responder=lambda req: reply('{"score": 0.5}'))
    env = dict(os.environ, LIVE_BASE_URL=live.base_url, LIVE_API_KEY="k")
    clawrig = str(Path(sys.executable).with_name("clawrig"))
    r = subprocess.run(
        [clawrig, "grade", str(folder), "--judge", "live/judge", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    report = json.loads(r.stdout)
    assert report["after"]["score"] == 0.5 and report["judge_cache"]["misses"] == 1
    assert len(live.requests) == 1


async def test_an_answer_judge_replay_miss_is_a_grading_error_not_a_crash(
    scripted_server, tmp_path
):
    """The answer judge's request is not in the records (the transcript's answer changed):
    the re-grade reports a grading error naming the replay miss."""
    root = _dataclaw_root(tmp_path)
    (task,) = load_tasks(root)
    agent = scripted_server([reply('["0.1142", "-0.2132", "0.33"]')])
    judge = scripted_server(
        [reply('{"scores": {"part_0": 1, "part_1": 1, "part_2": 1}, "total": 1.0, "notes": ""}')]
    )
    services = TrialServices(model=agent.chat_model(), judge=judge.chat_model("scripted/judge"))
    config = TrialConfig(agent="native", model="scripted/agent")
    _, folder = await run_trial(task, config, tmp_path / "out", services=services)
    judge.stop()
    chat = folder / "chat.jsonl"
    chat.write_text(chat.read_text().replace("0.1142", "0.9999"))
    report = await regrade_trial(folder)
    assert report.judge_cache["misses"] >= 1 and report.replay_misses >= 1
    assert report.after.score is None and "replay: no recorded response" in report.after.error


def test_grading_a_job_lists_a_trial_with_no_end_state_and_grades_the_others(
    mini_bench, scripted_server, even_responder, tmp_path
):
    """A job whose task 2 hit a non-retried upstream 500 (an infrastructure error: no end
    state): `clawrig grade JOB` re-grades tasks 1 and 3 to their scores, lists task 2 as not
    re-gradable with the reason, and exits 1."""
    import os

    from clawrig.testing.scripted_server import error

    bench = mini_bench(3)

    def responder(request: dict):
        if "TASKNUM=2" in json.dumps(request["messages"][0]["content"]):
            return error(500, "upstream broke", should_retry=False)
        return even_responder(request)

    srv = scripted_server(responder=responder)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["SCRIPTED_BASE_URL"] = srv.base_url
    clawrig = str(Path(sys.executable).with_name("clawrig"))
    args = ["run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1", "-o", str(out)]
    r = subprocess.run([clawrig, *args], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    srv.stop()  # grading needs no model server
    r = _grade(str(out))
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    graded = [ln for ln in lines if "recorded 0.25 -> re-graded 0.25: same scores" in ln]
    assert len(graded) == 2  # tasks 1 and 3 (odd: the file written, content wrong)
    (skipped,) = [ln for ln in lines if ": not re-gradable: " in ln]
    assert "task_2_echo" in skipped and "an infrastructure error" in skipped
    assert "no end state" in skipped
    assert (
        lines[-1]
        == "2/3 trials re-grade to their recorded scores; 1 not re-gradable (no end state)"
    )
    r = _grade(str(out), "--json")
    reports = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert r.returncode == 1 and len(reports) == 3
    assert [rep["not_gradable"] is not None for rep in reports] == [False, True, False]


def test_grade_write_refuses_a_trial_whose_end_state_is_gone(demo_oracle_job, tmp_path):
    """A trial folder whose end_state/ was removed has nothing to grade: `grade --write`
    lists it as not re-gradable ("end_state/ missing"), exits 1 and writes nothing (it used
    to grade the initial workspace to 0.0 and write that over the recorded score, summary
    too)."""
    job = tmp_path / "job"
    shutil.copytree(demo_oracle_job, job)
    folder = next((job / "000001").iterdir())  # its oracle writes a file: a score above 0
    recorded = json.loads((folder / "result.json").read_text())["score"]["score"]
    assert recorded == _expected_rewards()["000001"] > 0
    shutil.rmtree(folder / "end_state")
    before = _tree_digest(job)
    r = _grade(str(folder), "--write")
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    (line,) = [ln for ln in r.stdout.splitlines() if ": not re-gradable: " in ln]
    assert f"recorded {recorded}: not re-gradable: end_state/ missing" in line
    assert r.stdout.splitlines()[-1] == (
        "0/1 trial re-grades to its recorded score; 1 not re-gradable (no end state)"
    )
    assert "summary recomputed" not in r.stdout
    assert _tree_digest(job) == before


def test_a_tampered_trial_folder_is_read_as_a_job_folders(demo_oracle_job, tmp_path):
    """helper-189, a job folder from elsewhere: a FIFO as score.json, chat.jsonl or
    end_state_deleted.json held `clawrig grade` for good (past SIGTERM); an end_state/ linked to
    a host folder was graded (its files copied into the grader's workspace); a FIFO inside
    end_state/ was a shutil traceback; a recorded score of "1.0" re-graded as "the same". Each
    is said in its trial's line; the others re-grade to their scores; exit 1, no traceback."""
    job = tmp_path / "job"
    shutil.copytree(demo_oracle_job, job)
    folder = {t: next((job / t).iterdir()) for t in ("000001", "000002", "000003", "000004")}
    folder |= {t: next((job / t).iterdir()) for t in ("000007", "000015")}
    (folder["000001"] / "score.json").unlink()
    os.mkfifo(folder["000001"] / "score.json")
    (folder["000002"] / "chat.jsonl").unlink()
    os.mkfifo(folder["000002"] / "chat.jsonl")
    (folder["000003"] / "end_state_deleted.json").unlink()
    os.mkfifo(folder["000003"] / "end_state_deleted.json")
    host = tmp_path / "host"
    shutil.copytree(folder["000004"] / "end_state", host)  # (what the grader would score 1)
    shutil.rmtree(folder["000004"] / "end_state")
    (folder["000004"] / "end_state").symlink_to(host)
    os.mkfifo(folder["000007"] / "end_state" / "results" / "pipe.md")
    result = folder["000015"] / "result.json"
    data = json.loads(result.read_text())
    data["score"]["score"] = "1.0"
    result.write_text(json.dumps(data))
    # helper-191: a lone surrogate's escape in task_id was a UnicodeEncodeError traceback
    # printing its line; a FIFO as result.json ended the whole command ("no result.json")
    surrogate = next((job / "000008").iterdir()) / "result.json"
    text = surrogate.read_text()
    surrogate.write_text(text.replace('"task_id": "000008"', '"task_id": "000008\\udfff"', 1))
    assert "\\udfff" in surrogate.read_text()
    fifo = next((job / "000009").iterdir()) / "result.json"
    fifo.unlink()
    os.mkfifo(fifo)

    r = _grade(str(job), "-p", "2")
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    lines = {ln.split(" ", 1)[0]: ln for ln in r.stdout.splitlines() if ln[:1].isdigit()}
    assert "same scores, but score.json disagrees" in lines["000001"]
    assert f"{folder['000001'] / 'score.json'}: missing or no regular file" in r.stdout
    assert ": same scores" in lines["000007"], lines["000007"]  # (the FIFO in end_state/)
    # a FIFO in place of a record is no record: read as empty the grading differed and
    # --write stored it (helper-193)
    for t, name in (("000002", "chat.jsonl"), ("000003", "end_state_deleted.json")):
        said = f"cannot re-grade: {folder[t] / name}: not a regular file: not the trial's record"
        assert lines[t].endswith(said), lines[t]
    assert lines["000004"].endswith(
        f"not re-gradable: end_state/ is a link: {folder['000004'] / 'end_state'} (not the end "
        "state the trial recorded)"
    )
    assert lines["000015"].endswith(
        f"cannot re-grade: {result}: not a valid trial result: score: not a number: '1.0'"
    )
    assert lines["000009"].endswith(
        f"cannot re-grade: {fifo}: not a valid trial result: no regular file of at most "
        f"{64 * 1024**2} bytes"
    )
    # (printed as the escape: the console writes what UTF-8 cannot hold so)
    said = f"cannot re-grade: {REPO / 'suites' / 'demo'}: no task 000008\\udfff there any more"
    assert lines["000008"].endswith(said), lines["000008"]
    n = len(_expected_rewards())
    assert r.stdout.splitlines()[-1] == (
        f"{n - 6}/{n} trials re-grade to their recorded scores; 1 not re-gradable (no end "
        "state); 5 could not be read; 1 score.json disagree(s) with result.json"
    )
    # --write where score.json is a folder: that trial said, before any grading, the others
    # written (it was an IsADirectoryError traceback after earlier trials were written)
    shutil.rmtree(job)
    shutil.copytree(demo_oracle_job, job)
    odd = next((job / "000005").iterdir()) / "score.json"
    odd.unlink()
    odd.mkdir()
    r = _grade(str(job), "-p", "2", "--write")
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    assert f"cannot re-grade: {odd}: not a regular file: --write does not replace it" in r.stdout, (
        r.stdout
    )
    assert r.stdout.count("; written") == n - 1


def test_a_recorded_end_state_replaces_files_and_folders_as_the_agent_did(tmp_path):
    """helper-193: the initial workspace's file ``b`` replaced by the agent's folder ``b/``
    (``b`` is in end_state_deleted.json, ``b/z`` in end_state/): the deletions ran after the
    overlay and removed the agent's folder (a 1.0 re-graded 0.0). The folder ``a/`` replaced by
    a file ``a``; a deletion through a link of the initial workspace is not followed."""
    from clawrig.runner.trial import RecordedEndState

    ws, end, victim = tmp_path / "ws", tmp_path / "end", tmp_path / "victim"
    (ws / "a").mkdir(parents=True)
    (ws / "a" / "old.txt").write_text("old")
    (ws / "b").write_text("a file")
    victim.mkdir()
    (victim / "secret").write_text("keep")
    (ws / "lnk").symlink_to(victim)
    (end / "b").mkdir(parents=True)
    (end / "b" / "z").write_text("new")
    (end / "a").write_text("file")
    (end / "tool").write_text("#!/bin/sh\n")
    (end / "tool").chmod(0o4755)  # (a tampered end state: never setuid on the host)
    RecordedEndState(end_state=end, deleted=["b", "a", "lnk/secret"], transcript_text="").apply(ws)
    assert (ws / "tool").stat().st_mode & 0o7777 == 0o755
    assert (ws / "b").is_dir() and (ws / "b" / "z").read_text() == "new"
    assert (ws / "a").is_file() and (ws / "a").read_text() == "file"
    assert (victim / "secret").read_text() == "keep"


def test_grade_of_the_current_folder_names_it(demo_oracle_job, tmp_path):
    """helper-221: ``clawrig grade .`` inside a trial folder printed an empty trial name
    ("000001 : recorded ...")."""
    src = next((demo_oracle_job / "000001").iterdir())
    folder = tmp_path / src.name
    shutil.copytree(src, folder)
    clawrig = str(Path(sys.executable).with_name("clawrig"))
    r = subprocess.run(
        [clawrig, "grade", "."], capture_output=True, text=True, timeout=600, cwd=folder
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert f"000001 {src.name}: recorded 1.0 -> re-graded 1.0" in r.stdout, r.stdout


def test_grade_still_regrades_an_older_folder_where_nothing_changed(demo_oracle_job, tmp_path):
    """Folders written before end_state/ was always made have none when the agent changed no
    file (their agent.log says so): those still re-grade to their score."""
    src = next((demo_oracle_job / "000006").iterdir())  # its oracle only deletes files
    folder = tmp_path / src.name
    shutil.copytree(src, folder)
    assert not any((folder / "end_state").iterdir())
    (folder / "end_state").rmdir()
    r = _grade(str(folder))
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "recorded 1.0 -> re-graded 1.0: same scores" in r.stdout


def test_an_attempt_set_aside_does_not_say_resume_runs_it(tmp_path):
    """helper-219: an attempt a SIGTERM cut short, set aside in ``_retried/``, said "(clawrig
    run --resume runs it again)" of a job resumed and finished since."""
    from clawrig.runner.regrade import no_end_state
    from clawrig.spec.trial import TrialError, TrialResult

    folder = tmp_path / "job" / "_retried" / "000007__scripted_demo_1"
    folder.mkdir(parents=True)
    trial = TrialResult.model_construct(
        error=TrialError(kind="cancelled", message="interrupted", phase="agent")
    )
    assert no_end_state(folder, trial) == (
        "it ended with a cancelled error in the agent phase, so it has no end state to grade "
        "(an attempt set aside in _retried/, never counted: its trial ran again, or clawrig "
        "run --resume runs it, in a folder of its own)"
    )


@pytest.mark.parametrize(
    ("kind", "said"),
    [("budget", "a budget error"), ("infrastructure", "an infrastructure error")],
)
def test_a_trial_the_job_stopped_has_no_end_state_and_says_why(kind, said, tmp_path):
    """A trial the budget stopped mid-run (as a job writes it: error kind budget, phase agent,
    no end_state/) is not re-gradable for that reason (new-user review: it said "end_state/
    missing ... (the recorded end state is gone)", as if files had been deleted)."""
    from clawrig.runner.regrade import no_end_state
    from clawrig.spec.trial import TrialError, TrialResult

    trial = TrialResult.model_construct(
        error=TrialError(kind=kind, message="stopped", phase="agent")
    )
    why = no_end_state(tmp_path, trial)
    assert why == (
        f"it ended with {said} in the agent phase, so it has no end state to grade "
        "(clawrig run --resume runs it again)"
    )


PLANTED_GRADER = """import json, urllib.request

def grade(workspace_path="/tmp_workspace", transcript=None, **kwargs):
    body = json.dumps({"days_back": 3650, "max_results": 100}).encode()
    req = urllib.request.Request("http://localhost:9100/gmail/messages", data=body,
                                 headers={"Content-Type": "application/json"})
    ids = [m["id"] for m in json.loads(urllib.request.urlopen(req, timeout=30).read())["messages"]]
    return {"overall_score": 1.0 if "msg_planted" in ids else 0.0}

GOLDEN_WORKSPACE = {}
EXPECTED_REWARD = 0.0
"""


def _inbox_sample(root: Path) -> Path:
    """A four-folder set of one sample whose mail service starts from the workspace file
    fixtures/inbox.json, and whose grader scores 1.0 when the inbox holds ``msg_planted``."""
    sid = "000101"
    files = {
        f"intent/{sid}.json": {
            "id": sid,
            "name": "Inbox",
            "category": "03_Social_Interaction",
            "tier": "easy",
            "prompt": "Look at my inbox.",
            "timeout_seconds": 60,
            "services": [{"name": "gmail", "kind": "gmail", "fixtures": "fixtures/inbox.json"}],
        },
        f"datapoints/{sid}.json": {
            "id": sid,
            "formatted_dialog": [{"role": "user", "content": "Look at my inbox."}],
        },
        f"reference_payloads/reference_payload_{sid}.json": {"id": sid, "expected_reward": 0.0},
        f"workspaces/{sid}/fixtures/inbox.json": {
            "now": "2026-03-24T09:00:00",
            "messages": [
                {
                    "id": "msg_001",
                    "from": "a@b.example",
                    "to": "me@b.example",
                    "subject": "hi",
                    "date": "2026-03-23T16:05:00",
                    "body": "x",
                }
            ],
        },
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(json.dumps(data), encoding="utf-8")
    (root / "evaluators").mkdir()
    (root / "evaluators" / f"evaluator_{sid}.py").write_text(PLANTED_GRADER, encoding="utf-8")
    return root


PLANT = (
    "python3 -c \"import json; p='fixtures/inbox.json'; d=json.load(open(p)); "
    "d['messages'].append(dict(d['messages'][0], id='msg_planted')); "
    "json.dump(d, open(p, 'w'))\""
)


async def test_regrading_starts_the_services_from_the_tasks_fixtures_not_the_agents_edit(
    scripted_server, tmp_path
):
    """An agent that appends a message to the fixture file its mail service started from
    changes nothing the service serves (live 0.0); re-grading restarts the service from the
    task's own file, not the end state's edited copy (it re-graded 1.0: helper-114)."""
    (task,) = load_tasks(_inbox_sample(tmp_path / "set"))
    srv = scripted_server(
        [reply(tool_calls=[call("exec", {"command": PLANT}, id="c1")]), reply("done")]
    )
    result, folder = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/test"),
        tmp_path / "out",
        services=TrialServices(model=srv.chat_model()),
    )
    edited = json.loads((folder / "end_state" / "fixtures" / "inbox.json").read_text())
    assert [m["id"] for m in edited["messages"]] == ["msg_001", "msg_planted"]
    assert result.error is None and result.score.score == 0.0
    report = await regrade_trial(folder)
    assert report.after.error is None and report.after.score == 0.0 and report.same


async def test_grading_given_files_starts_the_services_from_the_tasks_fixtures(tmp_path):
    """verify's path (``grade_files``: exactly the given end-state files) reads the fixtures
    from the task's own workspace too: an end state whose fixture file gained
    ``msg_planted`` scores 0.0, and one where the task's file itself holds it scores 1.0."""
    from clawrig.verify.sandboxed import grade_files

    root = _inbox_sample(tmp_path / "set")
    (task,) = load_tasks(root)
    fixture = root / "workspaces" / "000101" / "fixtures" / "inbox.json"
    data = json.loads(fixture.read_text())
    data["messages"].append(dict(data["messages"][0], id="msg_planted"))
    planted = {"fixtures/inbox.json": json.dumps(data).encode()}
    assert (await grade_files(task, planted, None)).score == 0.0
    fixture.write_text(json.dumps(data))
    (task,) = load_tasks(root)
    assert (await grade_files(task, {}, None)).score == 1.0


def test_grading_on_the_local_sandbox_warns_once(demo_oracle_job):
    """helper-133: `grade --sandbox local` printed Python's raw UserWarning with its source line
    (as verify did before); now the one line verify and run print, and -p > 1 refused."""
    trial = next((demo_oracle_job / "000015").iterdir())
    r = _grade(str(trial), "--sandbox", "local", "-p", "2")
    assert r.returncode == 2 and "the local sandbox runs one trial at a time" in r.stderr
    r = _grade(str(trial), "--sandbox", "local")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "UserWarning" not in r.stderr and "kinds.py" not in r.stderr, r.stderr
    assert r.stderr.count("NO isolation") == 1, r.stderr


def test_an_rl_episode_without_an_end_state_is_not_sent_to_run_resume(demo_oracle_job):
    """helper-133: a masked RL episode's folder said "(clawrig run --resume runs it again)"."""
    from clawrig.runner.regrade import no_end_state
    from clawrig.spec.trial import TrialResult

    trial = next((demo_oracle_job / "000015").iterdir())
    raw = json.loads((trial / "result.json").read_text())
    raw["error"] = {"kind": "infrastructure", "phase": "agent", "message": "server down"}
    job = no_end_state(trial, TrialResult.model_validate(raw))
    raw["job_id"] = "rl"
    rl = no_end_state(trial, TrialResult.model_validate(raw))
    assert job is not None and job.endswith("(clawrig run --resume runs it again)")
    assert rl is not None and rl.endswith("(a trainer runs the episode anew)")


def test_trial_folders_have_the_mode_mkdir_gives(demo_oracle_job):
    """helper-135: trial folders were 0700 (tempfile's), their task folders and files not."""
    import stat as st

    umask = os.umask(0)
    os.umask(umask)
    for trial in demo_oracle_job.glob("*/*"):
        if trial.is_dir() and not trial.name.startswith("_"):
            assert st.S_IMODE(trial.stat().st_mode) == 0o777 & ~umask, trial


def test_an_agent_error_outside_grading_keeps_its_zero_on_regrading(demo_oracle_job, tmp_path):
    """helper-202: a trial with an agent error of another phase than grading (its 0 stands,
    blame follows control) re-graded "recorded 0.0 -> re-graded 1.0: DIFFERENT" (the grader's
    score without the error), and after --write every grade said DIFFERENT again. The error
    counts in the re-graded score too: the same 0, and --write keeps the error."""
    folder = tmp_path / "t"
    shutil.copytree(next((demo_oracle_job / "000001").iterdir()), folder)
    record = json.loads((folder / "result.json").read_text())
    assert record["score"]["score"] > 0  # the grader's, on the oracle's end state
    record["error"] = {"kind": "agent", "message": "the agent broke its sandbox",
                       "phase": "agent", "retryable": False}  # fmt: skip
    (folder / "result.json").write_text(json.dumps(record))
    r = _grade(str(folder), "--write")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "recorded 0.0 -> re-graded 0.0" in r.stdout
    written = json.loads((folder / "result.json").read_text())
    assert written["error"]["message"] == "the agent broke its sandbox"
    again = _grade(str(folder))
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == (
        "1/1 trial re-grades to its recorded score"
    )
