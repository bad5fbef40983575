"""`clawrig run` on bad input: one clear line naming the file or flag, a non-zero exit, no
traceback, and nothing written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))
REPO = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith(("_API_KEY", "_BASE_URL")) and k != "DEFAULT_MODEL"
    }
    return subprocess.run(
        [CLAWRIG, *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "no/such/suite"], "no such file or folder: no/such/suite"),
        (["run", str(REPO / "suites/demo"), "--agent", "robot"], "--agent: unknown agent 'robot'"),
        (["run", str(REPO / "suites/demo"), "--sandbox", "vm"], "--sandbox: unknown sandbox"),
        (["run", str(REPO / "suites/demo"), "-m", "nonsense"], "nonsense"),
        (["run", str(REPO / "suites/demo"), "-m", "openrouter/x/y"], "OPENROUTER_API_KEY"),
        (
            ["run", str(REPO / "suites/demo"), "--suite", "999999", "--agent", "oracle"],
            "--suite: no task with id 999999",
        ),
        (  # what was meant (helper-209: "1" for 000001, "a b" for a,b)
            ["run", str(REPO / "suites/demo"), "--suite", "1", "--agent", "oracle"],
            "--suite: no task with id 1 (did you mean 000001?)",
        ),
        (
            ["run", str(REPO / "suites/demo"), "--suite", "000001 000003", "--agent", "oracle"],
            "--suite: no task with id 000001 000003 (separate ids with commas: --suite a,b)",
        ),
        (["run", str(REPO / "suites/demo"), "--grader", "vibes"], "--grader"),
        (  # the category has tasks, none of them among -s (helper-126)
            ["run", str(REPO / "suites/demo"), "--agent", "oracle", "-s", "000001"]
            + ["--category", "06_Safety_Alignment"],
            "--category: no task of --suite 000001 is in 06_Safety_Alignment",
        ),
        (
            ["run", str(REPO / "suites/demo"), "--agent", "oracle", "--category", "nope"],
            "--category: no task in nope (the suite's categories: 01_",
        ),
        (  # a typo beside a real category was dropped silently (helper-128)
            ["run", str(REPO / "suites/demo"), "--agent", "oracle"]
            + ["--category", "01_Productivity_Flow", "--category", "Nope"],
            "--category: no task in Nope (the suite's categories: 01_",
        ),
        (  # a task file outside PATH: PATH was ignored (helper-126)
            ["run", str(REPO / "suites/demo"), "--agent", "oracle", "-t"]
            + [str(next((REPO / "examples/wildclaw/tasks").rglob("*.md")))],
            "is not in PATH",
        ),
        (
            ["run", str(REPO / "suites/demo"), "--agent", "oracle", "--root", str(REPO)],
            f"--root: {REPO / 'suites/demo'} is a four-folder set",
        ),
        (  # (helper-212: typer's range check said NaN "should be greater than or equal to 0")
            ["run", str(REPO / "suites/demo"), "--agent", "oracle", "--budget-usd", "nan"],
            "'--budget-usd': must be a number of USD, 0 or more, got nan",
        ),
        (
            ["run", str(REPO / "suites/demo"), "--agent", "oracle", "--budget-usd", "-0.5"],
            "'--budget-usd': must be a number of USD, 0 or more, got -0.5",
        ),
        (
            ["run", str(REPO / "suites/demo"), "--max-cost-usd-per-trial", "NaN"],
            "'--max-cost-usd-per-trial': must be a number of USD, 0 or more, got nan",
        ),
    ],
)
def test_bad_flags_give_one_line(args, needle, tmp_path):
    r = run(*args, "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len([ln for ln in r.stderr.strip().splitlines() if ln.strip()]) <= 2
    assert not (tmp_path / "out").exists()


# every value each closed-set flag accepts, written out here (not read from clawrig.choices)
WEB = ("off", "live", "record", "replay", "corpus", "on")
GRADER = ("auto", "judge", "exact", "both", "programmatic")


@pytest.mark.parametrize(
    ("args", "flag", "accepted"),
    [
        (["run", "SUITE", "--web", "bogus"], "--web", WEB),
        (["run", "SUITE", "--web", "LIVE"], "--web", WEB),
        (["run", "SUITE", "--web-miss", "skip"], "--web-miss", ("error", "live", "empty")),
        (["run", "SUITE", "--web-provider", "bing"], "--web-provider", ("brave", "tavily")),
        (["run", "SUITE", "--executor", "slurm"], "--executor", ("local", "ray")),
        (["run", "SUITE", "--grader", "vibes"], "--grader", GRADER),
        (["grade", "OUT", "--grader", "vibes"], "--grader", GRADER),
        (
            ["export", "sft", "OUT", "OUT/x.jsonl", "--format", "alpaca"],
            "--format",
            ("openai", "sharegpt"),
        ),
        (["serve", "SUITE", "--executor", "slurm"], "--executor", ("local", "ray")),
    ],
)
def test_unknown_choice_names_flag_and_values(args, flag, accepted, tmp_path):
    """A value outside a flag's set: one line naming the flag and every accepted value, exit 2,
    before anything runs (no output folder, no sandbox)."""
    out = tmp_path / "out"
    args = [str(REPO / "suites/demo") if a == "SUITE" else a.replace("OUT", str(out)) for a in args]
    r = run(*args, *(["-o", str(out)] if args[0] == "run" else []), cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"'{flag}'" in lines[0] and all(f"'{v}'" in lines[0] for v in accepted), lines[0]
    assert "Value error" not in lines[0]
    assert not out.exists()


@pytest.mark.parametrize("web", ["off", "live", "record"])
def test_web_dir_with_a_mode_that_takes_none_is_refused(web, tmp_path):
    """--web-dir goes with --web replay or corpus only; any other mode refuses it (it was
    dropped without a word, and the job ran as if it had not been given)."""
    out = tmp_path / "out"
    r = run(
        "run", str(REPO / "suites/demo"), "--agent", "nop", "--web", web,
        "--web-dir", str(tmp_path), "-o", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"--web-dir: only --web replay and --web corpus take a folder, not {web}" in r.stderr
    assert not out.exists()


def test_malformed_task_file_names_file_and_field(tmp_path):
    bad = tmp_path / "tasks" / "broken.md"
    bad.parent.mkdir()
    bad.write_text("---\nid: [unclosed\n---\n\n## Prompt\n\nhi\n")
    r = run("run", str(bad), "--agent", "nop", cwd=tmp_path)
    assert r.returncode == 2 and str(bad) in r.stderr and "Traceback" not in r.stderr
    assert "front matter" in r.stderr.lower()


def test_a_bad_file_of_a_task_not_chosen_does_not_stop_the_others(tmp_path):
    """``--suite`` runs the tasks it names when another file of the suite does not read (it
    stopped every run: helper-205, where verify graded the good ones), saying so in a line;
    without --suite, or naming the bad file's task, the error stops the run before any
    sandbox starts, as before."""
    suite = tmp_path / "wc"
    shutil.copytree(REPO / "examples" / "wildclaw", suite)
    cat = suite / "tasks" / "01_Productivity_Flow"
    bad = cat / "anchor.md"
    bad.write_text("---\nid: [unclosed\n---\n\n## Prompt\n\nhi\n")
    good = "01_Productivity_Flow_task_1_word_count"
    out = tmp_path / "out"
    r = run("run", str(suite), "--suite", good, "--agent", "nop", "-o", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert f"a file of a task not chosen: {bad}:" in r.stderr
    summary = json.loads(next(out.glob("summary_*.json")).read_text())
    assert [t["task_id"] for t in summary["tasks"]] == [good]
    assert summary["tasks"][0]["score"] == 0.0 and summary["error_count"] == 0  # (graded)
    r = run("run", str(suite), "--agent", "nop", "-o", str(tmp_path / "o2"), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"clawrig: error: {bad}:"), r.stderr
    assert not (tmp_path / "o2").exists()
    # an id no task read has (the bad file's, or a typo): said, with the file that did not
    # read (helper-206: the file's error alone was said, the id not)
    for wanted in ("anchor", "nosuch"):
        r = run("run", str(suite), "--suite", wanted, "--agent", "nop", "-o",
                str(tmp_path / "o2"), cwd=tmp_path)  # fmt: skip
        assert r.returncode == 2 and r.stderr.startswith(
            f"clawrig: error: --suite: no task with id {wanted}"
        ), r.stderr
        assert f"; a file of the suite did not read: {bad}:3: front matter" in r.stderr
        assert not (tmp_path / "o2").exists()
    # a broken file that says it is the chosen task (a second file of its id) stops the run:
    # which of the two was meant is not known (helper-207)
    twin = cat / "twin.md"
    twin.write_text(f"---\nid: {good}\nname: a\nname: b\n---\n\n## Prompt\n\nhi\n")
    r = run("run", str(suite), "--suite", good, "--agent", "nop", "-o", str(tmp_path / "o3"),
            cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2 and r.stderr.startswith(f"clawrig: error: {twin}:4: name:"), r.stderr
    twin.unlink()
    # an error of the suite's own (its requirements.txt, read for a grader needing a package)
    # stops a run of the task needing it (helper-207)
    md = cat / f"{good}.md"
    md.write_text(md.read_text().replace("import json\n", "import json\nimport numpy\n", 1))
    (tmp_path / "creds").write_text("token\n")
    (suite / "requirements.txt").symlink_to(tmp_path / "creds")
    r = run("run", str(suite), "--suite", good, "--agent", "nop", "-o", str(tmp_path / "o4"),
            cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.startswith(f"clawrig: error: {suite / 'requirements.txt'}:"), r.stderr
    assert not (tmp_path / "o4").exists()


@pytest.mark.parametrize(
    ("flags", "env", "needle"),
    [
        (
            ["-m", "scripted/demo"],
            {"SCRIPTED_BASE_URL": "notaurl"},
            "model 'scripted/demo': base URL (from SCRIPTED_BASE_URL): "
            "not an http(s) URL: 'notaurl'",
        ),
        (
            ["-m", "scripted/demo", "--judge", "custom/j"],
            {"SCRIPTED_BASE_URL": "http://127.0.0.1:9/v1", "JUDGE_CUSTOM_BASE_URL": "ftp://x/v1"},
            "model 'custom/j': base URL (from JUDGE_CUSTOM_BASE_URL): "
            "not an http(s) URL: 'ftp://x/v1'",
        ),
        (
            ["-m", "scripted/demo"],
            {"SCRIPTED_BASE_URL": "http:///v1"},
            "not an http(s) URL: 'http:///v1'",
        ),
        (  # a control character: the transport refused each request (InvalidURL)
            ["-m", "scripted/demo"],
            {"SCRIPTED_BASE_URL": "http://h\tx/v1"},
            "not an http(s) URL: 'http://h\\tx/v1'",
        ),
        (  # a key no header can carry: every trial's every attempt was a retried
            # infrastructure error ("Forbidden control character detected in headers")
            ["-m", "openai/gpt-x"],
            {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-a\nb"},
            "--model: model 'openai/gpt-x': its API key (OPENAI_API_KEY) holds a NUL or "
            "control character",
        ),
        (  # (a UnicodeEncodeError at each request: helper-198's case, through serve)
            ["-m", "openai/gpt-x"],
            {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-k\u00e9y"},
            "--model: model 'openai/gpt-x': its API key (OPENAI_API_KEY) holds a character "
            "that is not ASCII (an HTTP header carries ASCII only)",
        ),
    ],
)
def test_malformed_model_base_url_is_refused_up_front(flags, env, needle, tmp_path):
    """A base URL no request can use (no http(s) scheme or no host) is one line naming the
    model, the URL and its variable, before any sandbox (it used to pass the preflight and
    end each trial as a retried 502 UnsupportedProtocol)."""
    out = tmp_path / "out"
    r = run("run", str(REPO / "suites/demo"), *flags, "-o", str(out), cwd=tmp_path, env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len([ln for ln in r.stderr.strip().splitlines() if ln.strip()]) == 1
    assert not out.exists()


def test_malformed_env_file_is_one_line_naming_file_and_line(tmp_path):
    # python-dotenv only warned (3 times, no file name) and the job went on
    env = tmp_path / "bad.env"
    env.write_text("OPENAI_API_KEY=sk-x\nthis is not env\n")
    r = run(
        "run", str(REPO / "suites/demo"), "--agent", "oracle", "--env-file", str(env),
        "-o", str(tmp_path / "out"), cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.splitlines() == [f"clawrig: error: --env-file: {env}:2: not KEY=VALUE"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["run", "--task", "/nonexist"], "--task: no such file: /nonexist"),
        (
            ["run", "DEMO", "--agent", "oracle", "--judge", "nope"],
            "--judge: model name 'nope' has no provider: write provider/model, e.g. "
            "openrouter/nope or custom/nope",
        ),
        (
            ["run", "DEMO", "-m", "nosuchprovider/x"],
            "--model: unknown provider 'nosuchprovider' in model name 'nosuchprovider/x': ",
        ),
        (
            ["run", "DEMO", "--agent", "oracle", "--env", "nosuch"],
            "--env: environment nosuch: not a shipped name (base, wildclaw, dataclaw) nor a "
            "YAML file",
        ),
        (
            ["run", "DEMO", "--agent", "oracle", "--env", "/nonexist.yaml"],
            "--env: /nonexist.yaml: no such file (an environment spec YAML file)",
        ),
        (["env", "build", "/nonexist.yaml"], "/nonexist.yaml: no such file"),
        (["run", "DEMO", "--disk-mb", "-1"], "Invalid value for '--disk-mb'"),
        (["run", "DEMO", "--memory-mb", "10"], "Invalid value for '--memory-mb'"),
    ],
)
def test_messages_start_with_the_flag_at_fault(args, line, tmp_path):
    args = [str(REPO / "suites/demo") if a == "DEMO" else a for a in args]
    out = ["-o", str(tmp_path / "out")] if args[0] == "run" else []
    r = run(*args, *out, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    (only,) = r.stderr.splitlines()
    assert only.startswith(f"clawrig: error: {line}"), only
    assert not (tmp_path / "out").exists()


def test_a_long_model_name_runs(tmp_path):
    """`run -m custom/<300 characters>` runs (it was a traceback: "File name too long" for
    progress_<model>.json): the names built from the model (summary, trial folder) are cut to
    fit a file name, and the summary keeps the whole name."""
    import json

    model = "custom/" + "m" * 300
    out = tmp_path / "out"
    r = run(
        "run", str(REPO / "suites/demo"), "-s", "000015", "--agent", "nop", "-m", model,
        "-o", str(out), cwd=tmp_path, env={"CUSTOM_BASE_URL": "http://127.0.0.1:9/v1"},
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    (summary,) = out.glob("summary_*.json")
    assert json.loads(summary.read_text())["model"] == model
    (trial,) = (out / "000015").iterdir()
    assert trial.name.startswith("custom_mmm")
    for path in (summary, trial):
        assert len(path.name.encode()) <= 255, path.name


def test_resume_of_another_models_job_is_refused(tmp_path):
    # new-user review: `--resume` with a mistyped -m found no job of that model in the folder
    # and started a whole new one there (exit 0), where it must refuse as for another suite
    out = tmp_path / "out"
    first = run(
        "run", str(REPO / "suites/demo"), "--suite", "000015", "--agent", "oracle", "-o", str(out),
        cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-1500:]
    before = sorted(p.name for p in out.iterdir())
    r = run(
        "run", str(REPO / "suites/demo"), "--suite", "000015", "-m", "scripted/other",
        "-o", str(out), "--resume", cwd=tmp_path, env={"SCRIPTED_BASE_URL": "http://127.0.0.1:9/v1"},
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-1500:]
    assert "Traceback" not in r.stderr  # one line a problem (the model is unreachable too)
    want = "holds no job of scripted/other, only of oracle (summary_oracle.json)"
    assert sum(want in ln for ln in r.stderr.splitlines()) == 1, r.stderr
    assert sorted(p.name for p in out.iterdir()) == before
    # the oracle job's summary renamed by hand: it said "holds no job of oracle, only of oracle"
    (out / "summary_oracle.json").rename(out / "summary_other.json")
    # with --resume, and without it (helper-117: it said "no record of that job" only)
    for extra, flag, to in ((["--resume"], "--resume", "resume"), ([], "--output", "keep")):
        r = run(
            "run", str(REPO / "suites/demo"), "--suite", "000015", "--agent", "oracle",
            "-o", str(out), *extra, cwd=tmp_path,
        )  # fmt: skip
        assert r.returncode == 2, r.stderr[-1500:]
        assert r.stderr.strip().splitlines() == [
            f"clawrig: error: {flag}: {out / 'summary_other.json'} records the model oracle, "
            f"but its name is another model's: rename it summary_oracle.json to {to} that job, "
            "or choose another folder"
        ], r.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        "summary_other.json" if n == "summary_oracle.json" else n for n in before
    )


def test_resume_into_a_folder_without_the_job_says_it_starts_a_new_one(tmp_path):
    # new-user review: `--resume` with a mistyped or new -o silently ran the whole job (with a
    # paid model, real money); a script that always passes --resume must still start its
    # first run, so it runs, and says so before the first trial
    out = tmp_path / "typo"
    args = ("run", str(REPO / "suites/demo"), "--suite", "000015", "--agent", "oracle")
    first = run(*args, "-o", str(out), "--resume", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-1500:]
    note = f"note: --resume: {out} holds no job of oracle yet: starting a new job there"
    assert note in first.stderr.splitlines(), first.stderr
    assert len(list(out.glob("000015/*/result.json"))) == 1
    again = run(*args, "-o", str(out), "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-1500:]
    assert "holds no job" not in again.stderr, again.stderr  # it holds the job now


def test_a_folder_of_trials_whose_job_record_is_gone_is_refused(tmp_path):
    """helper-115 (b): with the summary removed (and no progress file), a run into the folder
    started a second job beside the first one's trials (``grade`` then counted both); with or
    without --resume it is one line naming the trials' job, and nothing is written."""
    out = tmp_path / "out"
    args = ("run", str(REPO / "suites/demo"), "--suite", "000015,000001", "--agent", "oracle")
    first = run(*args, "-o", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-1500:]
    job_id = json.loads((out / "summary_oracle.json").read_text())["job_id"]
    (out / "summary_oracle.json").unlink()
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    for extra in ((), ("--resume",)):
        r = run(*args, "-o", str(out), *extra, cwd=tmp_path)
        assert r.returncode == 2, r.stderr[-1500:]
        assert r.stderr.strip().splitlines() == [
            f"clawrig: error: --output: {out} holds 2 trial(s) of oracle (job {job_id}) but no "
            "record of that job (progress_oracle.json or summary_oracle.json, removed or "
            "renamed): put it back to --resume the job, or choose another folder (a new job "
            "there would mix with them)"
        ], r.stderr
        assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    # trials no job recorded (an RL environment's episodes, run_trial's: job id "rl" or "")
    # are not a job's to put back: a job starts beside them (helper-118)
    for rj in out.glob("*/*/result.json"):
        rj.write_text(rj.read_text().replace(f'"job_id": "{job_id}"', '"job_id": "rl"'))
    r = run(*args, "-o", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-1500:]
    assert len(list(out.glob("*/*/result.json"))) == 4


def _demo_samples(dest: Path, keep: set[str]) -> Path:
    """A copy of the demo suite holding the samples ``keep`` only."""
    shutil.copytree(REPO / "suites/demo", dest)
    for path in [*dest.glob("*/*.json"), *dest.glob("evaluators/*.py"), *dest.glob("workspaces/*")]:
        if not any(sid in path.name for sid in keep):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    return dest


def test_a_finished_job_resumed_with_other_tasks_is_refused(tmp_path):
    """helper-120: ``--resume`` of a finished job with a suite that lost a task (or gained
    one) said "every trial is done" and exited 0, never running an added task; its summary's
    task ids are compared as an unfinished job's are."""
    both = _demo_samples(tmp_path / "both", {"000015", "000001"})
    one = _demo_samples(tmp_path / "one", {"000015"})
    out = tmp_path / "out"
    first = run("run", str(both), "--agent", "oracle", "-o", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-1500:]
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    # a copy whose evaluator of 000015 was edited: the trial's recorded task digest differs
    # (helper-121: compared by id only, it was accepted)
    edited = _demo_samples(tmp_path / "edited", {"000015", "000001"})
    (evaluator,) = edited.glob("evaluators/*000015*.py")
    evaluator.write_text(evaluator.read_text() + "\n# edited after the job ran\n")
    cases = (
        (one, "1 task(s) of the finished job are not in the suite now (000001)"),
        (REPO / "suites/demo", "8 task(s) are not the finished job's"),
        (edited, "1 task(s) differ from those the finished job ran (000015)"),
    )
    for suite, said in cases:
        r = run("run", str(suite), "--agent", "oracle", "-o", str(out), "--resume", cwd=tmp_path)
        assert r.returncode == 2, r.stderr[-1500:]
        [line] = r.stderr.strip().splitlines()
        assert line.startswith(f"clawrig: error: {out / 'summary_oracle.json'}: --resume: ")
        assert said in line, line
    again = run("run", str(both), "--agent", "oracle", "-o", str(out), "--resume", cwd=tmp_path)
    assert again.returncode == 0 and "nothing to run" in again.stdout + again.stderr
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    # re-grading says when the task read now is not the one the trial ran
    r = run("grade", str(out), cwd=tmp_path)
    assert "changed since the trial ran" not in r.stdout, r.stdout
    (evaluator,) = both.glob("evaluators/*000015*.py")
    evaluator.write_text(evaluator.read_text() + "\n# edited after the job ran\n")
    r = run("grade", str(out), cwd=tmp_path)
    lines = [ln for ln in r.stdout.splitlines() if "changed since the trial ran" in ln]
    assert len(lines) == 1 and lines[0].startswith("task 000015 changed"), r.stdout
    assert f"read from {both}" in lines[0]  # the suite, not one of its files (helper-125)
    # written, the trial's record is of the task as it is now: no such line after
    run("grade", str(out), "--write", cwd=tmp_path)
    r = run("grade", str(out), cwd=tmp_path)
    assert "changed since the trial ran" not in r.stdout, r.stdout


def test_a_finished_trial_whose_folder_was_deleted_runs_again_on_resume(tmp_path):
    """helper-188: a trial folder of a finished job deleted by hand (to run it again), then
    ``--resume``: it said "every trial is done, nothing to run", exit 0, and showed the summary
    with the deleted folder in it. The job is unfinished now: a run without --resume is told
    so, and --resume runs that trial alone again (the others' folders kept as they were)."""
    suite = _demo_samples(tmp_path / "two", {"000015", "000001"})
    out = tmp_path / "out"
    first = run("run", str(suite), "--agent", "oracle", "-o", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-1500:]
    kept = sorted(out.glob("000001/*/result.json"))
    (gone,) = out.glob("000015/*")
    shutil.rmtree(gone)
    name = f"000015/{gone.name}"
    again = run("run", str(suite), "--agent", "oracle", "-o", str(out), cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr == (
        f"clawrig: error: --output: {out} holds an unfinished job of oracle (summary_oracle.json: "
        f"1 trial folder(s) it lists are gone, e.g. {name}): add --resume to continue it, or "
        "choose another folder\n"
    )
    # re-grading the job says its summary lists a trial it could not re-grade (it said "1/1")
    graded = run("grade", str(out), cwd=tmp_path)
    assert graded.returncode == 1 and "1/1 trial re-grades" in graded.stdout, graded.stdout
    assert graded.stderr == (
        f"{out / 'summary_oracle.json'}: lists 1 trial folder(s) that are gone (e.g. {name}): "
        "not re-graded; clawrig run --resume runs them again\n"
    )
    # the exports say it too: their rows and samples are the trials found, the summary's
    # numbers (an Inspect log's metrics) count the gone one (helper-192)
    for args in (["sft", str(out), str(tmp_path / "rows.jsonl"), "--min-score", "0"],
                 ["inspect", str(out), str(tmp_path / "logs")]):  # fmt: skip
        exported = run("export", *args, cwd=tmp_path)
        assert exported.returncode == 0, exported.stderr
        assert exported.stderr.startswith(
            f"warning: {out / 'summary_oracle.json'}: lists 1 trial folder(s) that are gone "
            f"(e.g. {name}): not exported"
        ), exported.stderr
    # a bad OUT is refused first, in its one line: the warning about the job comes after
    # the arguments are checked (it came before the refusal)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    for args, line in (
        (["fourfolder", str(out), str(tmp_path / "full")], f"OUT: {tmp_path / 'full'} exists "
         "and is not an empty folder"),
        (["sft", str(out), str(tmp_path / "rows.txt")], f"OUT: {tmp_path / 'rows.txt'}: the "
         "file name must end in .jsonl or .parquet"),
        (["inspect", str(out), str(tmp_path / "full" / "x")], f"OUT: {tmp_path / 'full' / 'x'} "
         "is a file; give a folder for the .eval logs"),
        # (a NotADirectoryError traceback: helper-198)
        (["inspect", str(out), str(tmp_path / "full" / "x" / "sub")], "OUT: cannot create "
         f"{tmp_path / 'full' / 'x' / 'sub'}: {tmp_path / 'full' / 'x'} is a file, not a folder"),
        # OUT the job's folder: its trial folders were replaced by Harbor tasks (helper-198)
        (["harbor", str(out), str(out)], f"OUT: {out} is {out} or inside it: give a folder "
         "outside it"),
    ):  # fmt: skip
        refused = run("export", *args, cwd=tmp_path)
        assert (refused.returncode, refused.stderr) == (2, f"clawrig: error: {line}\n")
    # the job's wall time so far (its summary's: the progress file is gone with a finished
    # job) counts toward the resumed job's; 500 s makes it plain
    spath = out / "summary_oracle.json"
    spath.write_text(json.dumps(json.loads(spath.read_text()) | {"elapsed_s": 500.0}))
    t0 = time.monotonic()
    resumed = run("run", str(suite), "--agent", "oracle", "-o", str(out), "--resume", cwd=tmp_path)
    resumed_wall = time.monotonic() - t0
    assert resumed.returncode == 0, resumed.stderr[-1500:]
    assert 500 < json.loads(spath.read_text())["elapsed_s"] < 500 + resumed_wall
    said = resumed.stdout + resumed.stderr
    assert (
        f"1 trial folder(s) the job's summary lists are gone (e.g. {name}): they run again" in said
    )
    assert "nothing to run" not in said
    (redone,) = out.glob("000015/*/result.json")
    assert redone.parent.name != gone.name
    assert sorted(out.glob("000001/*/result.json")) == kept
    summary = json.loads((out / "summary_oracle.json").read_text())
    assert sorted(r["trial"] for r in summary["tasks"]) == sorted(
        str(p.parent.relative_to(out)) for p in [*kept, redone]
    )
    assert summary["job_id"] == json.loads(redone.read_text())["job_id"]
    assert not (out / "progress_oracle.json").exists()
    assert run("grade", str(out), cwd=tmp_path).returncode == 0


def test_trial_folders_that_are_links_or_another_tasks_count_as_gone(tmp_path):
    """helper-191: a task folder that is a link had --resume write its trial where it led
    (another job's folder); a trial folder that is a link, or a summary row naming another
    task's folder, counted as present (the trial never ran again); an interrupted job's deleted
    trial was counted done from its progress file; a refused resume named a progress file
    that did not exist."""
    suite = _demo_samples(tmp_path / "two", {"000015", "000001"})
    out, other = tmp_path / "out", tmp_path / "other"
    assert run("run", str(suite), "--agent", "oracle", "-o", str(out), cwd=tmp_path).returncode == 0
    shutil.copytree(out, other)
    before = sorted(str(p.relative_to(other)) for p in other.rglob("*"))
    # a linked task folder: refused, with or without --resume, before anything runs
    shutil.rmtree(out / "000001")
    (out / "000001").symlink_to(other / "000001")
    for extra in ([], ["--resume"]):
        r = run("run", str(suite), "--agent", "oracle", "-o", str(out), *extra, cwd=tmp_path)
        assert r.returncode == 2 and r.stderr == (
            f"clawrig: error: --output: {out / '000001'} is a link: a job's task folders are "
            "its own; remove the link or choose another folder\n"
        ), r.stderr
    assert sorted(str(p.relative_to(other)) for p in other.rglob("*")) == before
    # a dangling link named as a task's folder too (it failed every attempt: helper-193)
    (out / "000001").unlink()
    (out / "000001").symlink_to(tmp_path / "nowhere")
    r = run("run", str(suite), "--agent", "oracle", "-o", str(out), "--resume", cwd=tmp_path)
    assert r.returncode == 2 and f"{out / '000001'} is a link: " in r.stderr, r.stderr
    # a linked trial folder is gone: --resume runs the task again in a folder of its own
    (out / "000001").unlink()
    (out / "000001").mkdir()
    (theirs,) = (other / "000001").iterdir()
    (out / "000001" / theirs.name).symlink_to(theirs)
    r = run("run", str(suite), "--agent", "oracle", "-o", str(out), "--resume", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-1500:]
    assert "1 trial folder(s) the job's summary lists are gone" in r.stdout + r.stderr
    mine = [p for p in (out / "000001").iterdir() if not p.is_symlink()]
    assert len(mine) == 1 and (mine[0] / "result.json").is_file()
    assert sorted(str(p.relative_to(other)) for p in other.rglob("*")) == before
    # a refused resume of such a job names its summary, a finished job as finished
    (out / "000001" / theirs.name).unlink()
    shutil.rmtree(mine[0])
    r = run("run", str(suite), "--agent", "oracle", "-o", str(out), "--resume",
            "--timeout-multiplier", "2", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2 and r.stderr.startswith(
        f"clawrig: error: {out / 'summary_oracle.json'}: --resume: trial settings differ"
    ), r.stderr
    # an interrupted job's trial deleted by hand: its progress file's entry no longer counts
    done = json.loads((out / "summary_oracle.json").read_text())
    progress = {
        "model": "oracle", "suite": done["suite"], "runs": 1, "job_id": done["job_id"],
        "agent": "oracle",
        "completed": [{"task_id": "000001", "run_index": 0, "result": f"000001/{mine[0].name}"}],
    }  # fmt: skip
    (out / "progress_oracle.json").write_text(json.dumps(progress))
    r = run("run", str(suite), "--agent", "oracle", "-o", str(out), "--resume", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-1500:]
    assert len(list(out.glob("000001/*/result.json"))) == 1
    assert len(list(out.glob("000015/*/result.json"))) == 1  # (adopted, not run again)
    summary = json.loads((out / "summary_oracle.json").read_text())
    assert summary["not_run"] == 0 and len(summary["tasks"]) == 2
    # a trial folder moved by hand into another task's folder is not that task's: it was
    # adopted as 000001's, and --resume said "they run again" and ran nothing (helper-193)
    (moved,) = [p.parent for p in out.glob("000001/*/result.json")]
    moved.rename(out / "000015" / moved.name)
    r = run("run", str(suite), "--agent", "oracle", "-o", str(out), "--resume", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-1500:]
    assert len(list(out.glob("000001/*/result.json"))) == 1
    summary = json.loads((out / "summary_oracle.json").read_text())
    assert sorted(r["trial"].split("/")[0] for r in summary["tasks"]) == ["000001", "000015"]


def test_trials_of_a_model_of_the_same_file_name_count_as_its_job(tmp_path):
    """``scripted/a/b`` and ``scripted/a_b`` share the job records' name (their slug): the
    first's orphan trials refuse a job of the second (helper-118); only folders named for the
    slug are read, and a trial outside a job (job id "") is not a job's."""
    from clawrig.runner.batch import unrecorded_job_ids

    def trial(name: str, model: str, job_id: str) -> None:
        folder = tmp_path / "000001" / name
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps({"model": model, "job_id": job_id}))

    trial("scripted_a_b_20261205_0900_aaaaaa", "scripted/a/b", "J1")
    trial("scripted_a_b_20261205_0900_bbbbbb", "scripted/a/b", "")
    trial("scripted_a_b_20261205_0900_cccccc", "scripted/other", "J2")  # renamed by hand
    trial("other_20261205_0900_dddddd", "scripted/a_b", "J3")  # not named for the slug
    assert unrecorded_job_ids(tmp_path, "scripted/a_b") == {("J1", "scripted/a/b"): 1}
    assert unrecorded_job_ids(tmp_path, "scripted/c") == {}


def test_disk_mb_sets_each_trials_disk_and_the_note_names_it(tmp_path):
    """--disk-mb is each trial's disk (it was settable from Python only, while the note on
    disks that could fill the host said to lower it)."""
    import json
    import os
    import tempfile

    out = tmp_path / "out"
    r = run(
        "run", str(REPO / "suites/demo"), "-s", "000015", "--agent", "nop", "--disk-mb", "64",
        "-o", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout, r.stderr)
    (result,) = out.glob("000015/*/result.json")
    assert json.loads(result.read_text())["config"]["disk_mb"] == 64
    st = os.statvfs(tempfile.gettempdir())
    half = st.f_bavail * st.f_frsize // 1024**2 // 2 + 64  # two at once: more than is free
    r = run(
        "run", str(REPO / "suites/demo"), "-s", "000015", "--runs", "2", "-p", "2",
        "--agent", "nop", "--disk-mb", str(half), "-o", str(tmp_path / "out2"), cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert f"2 trial(s) at once with a {half} MiB disk each could write" in r.stderr
    assert "lower --parallel or --disk-mb" in r.stderr


def test_no_bubblewrap_is_one_line_before_any_sandbox_starts(tmp_path: Path) -> None:
    """Without bwrap on PATH the job stops in its preflight (exit 2, one line, no job folder),
    not after every trial's sandbox failed and was retried."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("sh", "python3"):  # what a run may look up, not bwrap
        if (found := shutil.which(tool)) is not None:
            (bare / tool).symlink_to(found)
    out = tmp_path / "out"
    r = run(
        "run", str(REPO / "suites" / "demo"), "--agent", "oracle", "-o", str(out),
        cwd=tmp_path, env={"PATH": str(bare)},
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert "--sandbox bwrap: bubblewrap (bwrap) is not installed" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def test_the_local_sandbox_warning_is_one_line_of_the_jobs(tmp_path: Path) -> None:
    """``--sandbox local`` says it runs without isolation once, as the job's own WARNING line:
    each local sandbox's Python warning printed it again as ``...kinds.py:47: UserWarning:``
    with a source line, which a new user took for a traceback."""
    r = run(
        "run", str(REPO / "suites" / "demo"), "--agent", "oracle", "--suite", "000015",
        "--sandbox", "local", "-o", str(tmp_path / "out"), cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr[-2000:]  # (scored or not: the output is the point)
    assert r.stderr.count("NO isolation") == 1, r.stderr
    assert "UserWarning" not in r.stderr and "Traceback" not in r.stderr


def test_local_graders_read_the_transcript_the_harness_wrote(tmp_path: Path) -> None:
    """Demo 000005 and 000006 grade the agent's final message from the transcript the harness
    writes at /root/.openclaw/.../chat.jsonl. The local backend keeps /root in a private
    folder; the grader's runner opened the host's /root path, found nothing and scored the
    oracle 0.0 and 0.3 (1.0 in bwrap)."""
    import json

    out = tmp_path / "out"
    r = run(
        "run", str(REPO / "suites" / "demo"), "--agent", "oracle", "--suite", "000005,000006",
        "--sandbox", "local", "-o", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(next(out.glob("summary_*.json")).read_text())["tasks"]
    scores = {
        row["task_id"]: json.loads((out / row["trial"] / "result.json").read_text())["score"]
        for row in rows
    }
    assert sorted(scores) == ["000005", "000006"]
    assert all(s["score"] == 1.0 for s in scores.values()), scores
    assert scores["000005"]["subscores"]["refusal_in_final_message"] == 1.0


@pytest.mark.parametrize(
    ("replay", "said"),
    [
        ("no/such/job", "--replay: no such job or trial folder: no/such/job"),
        ("suites/demo", "--replay: suites/demo: no recorded model calls"),
    ],
)
def test_a_replay_folder_without_records_is_named_not_the_model(
    replay: str, said: str, tmp_path: Path
) -> None:
    """``--replay`` of a folder that does not exist or holds no recorded calls, without
    ``-m``: the job said "no model given" (a new user's finding), though the folder is what
    is wrong."""
    r = run("run", "suites/demo", "--replay", replay, "-o", str(tmp_path / "out"), cwd=REPO)
    assert r.returncode == 2, r.stderr
    assert f"clawrig: error: {said}" in r.stderr
    assert "no model" not in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_a_replay_of_tasks_the_job_did_not_run_is_refused_before_any_sandbox(
    tmp_path: Path, scripted_server
) -> None:
    """``--replay`` of a job that ran 000015 only, over the whole demo suite: the other tasks'
    first requests failed after their sandboxes started, with "the run diverged" and a trial
    id (a new user's finding). Now the job is refused at once, naming the tasks and the
    ``--suite`` that selects the recorded ones, which replays."""
    import json

    from clawrig.testing.scripted_server import load_script

    replies, models = load_script(REPO / "examples" / "scripted-000015.json")
    srv = scripted_server(replies, models=models)
    env = dict(os.environ, SCRIPTED_BASE_URL=srv.base_url)
    job = tmp_path / "recorded"
    r = run(
        "run", "suites/demo", "--suite", "000015", "-m", "scripted/demo", "-o", str(job),
        cwd=REPO, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (row,) = json.loads(next(job.glob("summary_*.json")).read_text())["tasks"]
    assert row["score"] == 1.0
    again = tmp_path / "again"
    r = run("run", "suites/demo", "--replay", str(job), "-o", str(again), cwd=REPO)
    assert r.returncode == 2, r.stderr
    others = sorted(p.stem for p in (REPO / "suites" / "demo" / "datapoints").glob("*.json"))
    others.remove("000015")
    assert (
        f"clawrig: error: --replay: {len(others)} selected task(s) were not run in {job} "
        f"({', '.join(others[:3])}, ...): it recorded 1; select them with --suite 000015"
    ) in r.stderr
    assert "Traceback" not in r.stderr and not again.exists()
    # another suite's tasks, another model: refused at once too, no folder made
    r = run("run", "examples/wildclaw/tasks", "--replay", str(job), "-o", str(again), cwd=REPO)
    assert r.returncode == 2 and not again.exists(), r.stderr
    assert (
        f"clawrig: error: --replay: {job} recorded none of the 2 selected task(s) ("
    ) in r.stderr and "it is a run of other tasks (000015)" in r.stderr
    r = run(
        "run", "suites/demo", "--suite", "000015", "--replay", str(job), "-m", "scripted/other",
        "-o", str(again), cwd=REPO, env={"SCRIPTED_BASE_URL": srv.base_url},
    )  # fmt: skip
    assert r.returncode == 2 and not again.exists(), r.stderr
    assert (
        f"clawrig: error: --replay: {job} recorded the agent's calls to scripted/demo, not "
        "-m scripted/other"
    ) in r.stderr
    # settings that change what the agent sends: refused at once, naming the recorded value
    # (each diverged at the first trial's first request, and --resume then refused them)
    preamble = tmp_path / "preamble.txt"
    preamble.write_text("Be brief.")
    for extra, flag, was, now in (
        (["--timeout-multiplier", "2"], "--timeout-multiplier", "1", "2"),
        (["--preamble", str(preamble)], "--preamble", "(none)", "Be brief."),
    ):
        r = run("run", "suites/demo", "--suite", "000015", "--replay", str(job), "-o",
                str(again), *extra, cwd=REPO)  # fmt: skip
        assert r.returncode == 2 and not again.exists(), r.stderr
        [line] = r.stderr.strip().splitlines()
        assert line == (
            f"clawrig: error: --replay: {job} ran with {flag} {was}, this job with {flag} "
            f"{now}: it changes what the agent sends its model, so no recorded reply would "
            f"match; replay with {flag} as recorded"
        ), line
    r = run(
        "run", "suites/demo", "--suite", "000015", "--replay", str(job), "-o", str(again),
        cwd=REPO,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (row,) = json.loads(next(again.glob("summary_*.json")).read_text())["tasks"]
    assert json.loads((again / row["trial"] / "result.json").read_text())["score"]["score"] == 1.0
    # a run that diverges (here: every recorded request's messages changed): one line naming
    # the task and what to do, not the stand-in model server's "HTTP 404 from ..." (a new
    # user's finding)
    for records in job.glob("*/*/model_calls.jsonl"):
        lines = [json.loads(line) for line in records.read_text().splitlines()]
        for rec in lines:
            rec["key"] = "0" * 64
            for message in rec["request"].get("messages") or []:
                message["content"] = "changed"
        records.write_text("".join(json.dumps(rec) + "\n" for rec in lines))
    r = run(
        "run", "suites/demo", "--suite", "000015", "--replay", str(job), "-o",
        str(tmp_path / "diverged"), cwd=REPO,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    [line] = [ln for ln in r.stderr.splitlines() if ln.startswith("clawrig: error:")]
    assert line.startswith(
        "clawrig: error: --replay: clawrig gateway: replay: no recorded response for request #1 "
        "of task 000015 (run 0), trial "
    ), line
    assert "the run diverged from the recorded job; the trials finished so far are kept" in line
    assert "`--resume` runs the others" in line and "HTTP 404" not in line


def test_a_local_sandbox_s_warmup_uses_this_machine_s_package_indexes(tmp_path: Path) -> None:
    """``--sandbox local`` has no egress proxy: its clean environment dropped the pip and npm
    indexes this machine is configured with (PIP_INDEX_URL, npm_config_registry), so a
    task's warmup installed from the public registries instead (a new user's finding: 3
    setup errors on examples/wildclaw-patterns where bwrap passed). They reach it as given,
    a host ``file://`` index too (the host's files are the local sandbox's)."""
    bench = tmp_path / "bench"
    (bench / "workspace" / "t" / "exec").mkdir(parents=True)
    (bench / "tasks").mkdir()
    pip_index = "file:///opt/no-such-index http://127.0.0.1:9/simple"
    npm_registry = "http://127.0.0.1:9/npm/"
    (bench / "tasks" / "t.md").write_text(
        "---\nid: t\nname: T\ncategory: c\ntimeout_seconds: 60\n---\n\n## Prompt\n\nNothing.\n\n"
        "## Warmup\n\n```bash\n"
        'mkdir -p /tmp_workspace/results && echo "$PIP_INDEX_URL|$npm_config_registry'
        '|$PIP_FIND_LINKS" '
        "> /tmp_workspace/results/reg.txt\n```\n\n"
        "## Automated Checks\n\n```python\n"
        "def grade(workspace_path='/tmp_workspace', **kw):\n"
        "    got = open(workspace_path + '/results/reg.txt').read().strip()\n"
        f"    want = {pip_index + '|' + npm_registry + '|/opt/wheels-here'!r}\n"
        "    return {'overall_score': float(got == want)}\n"
        "```\n\n## Workspace Path\n\n```\nworkspace/t\n```\n"
    )
    out = tmp_path / "out"
    r = run(
        "run", str(bench / "tasks"), "--agent", "nop", "--sandbox", "local", "-o", str(out),
        cwd=tmp_path,
        env={"PIP_INDEX_URL": pip_index, "npm_config_registry": npm_registry,
             "PIP_FIND_LINKS": "/opt/wheels-here"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    (row,) = json.loads(next(out.glob("summary_*.json")).read_text())["tasks"]
    assert row["error"] is None and row["score"] == 1.0, row


def test_a_model_given_to_an_agent_that_calls_none_is_noted(tmp_path: Path) -> None:
    """``--agent oracle -m NAME``: the name only names the job's files; it was taken without a
    word (a new user's finding). Without ``-m`` nothing is said."""
    r = run(
        "run", "suites/demo", "--suite", "000015", "--agent", "oracle", "-m", "scripted/golden",
        "-o", str(tmp_path / "named"), cwd=REPO,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert (
        "note: -m scripted/golden: --agent oracle calls no model; scripted/golden only names "
        "this job's files (its summary and trial folders)"
    ) in r.stderr
    assert next((tmp_path / "named").glob("summary_*.json")).name == "summary_scripted_golden.json"
    r = run(
        "run", "suites/demo", "--suite", "000015", "--agent", "oracle",
        "-o", str(tmp_path / "plain"), cwd=REPO,
    )  # fmt: skip
    assert r.returncode == 0 and "calls no model" not in r.stderr, r.stderr[-2000:]


def test_a_replay_counts_what_each_recorded_call_cost(tmp_path: Path, scripted_server) -> None:
    """A job priced by ``MODEL_COST_INPUT`` / ``MODEL_COST_OUTPUT`` (the provider reports no
    cost) and replayed without them: each trial's usage and the summary count the recorded
    calls' cost, as the console and docs/outputs.md say. It was $0 (helper-140): the agent
    priced each replayed reply again with the replay's prices, none."""
    from clawrig.testing.scripted_server import (
        DEFAULT_COMPLETION_TOKENS,
        DEFAULT_PROMPT_TOKENS,
        load_script,
    )

    replies, models = load_script(REPO / "examples" / "scripted-000015.json")
    srv = scripted_server(list(replies), models=models)
    priced = dict(
        os.environ,
        SCRIPTED_BASE_URL=srv.base_url,
        MODEL_COST_INPUT="1000",
        MODEL_COST_OUTPUT="3000",
    )
    job = tmp_path / "recorded"
    r = run("run", "suites/demo", "--suite", "000015", "-m", "scripted/demo", "-p", "1",
            "-o", str(job), cwd=REPO, env=priced)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    calls = [
        json.loads(line)
        for line in next(job.glob("000015/*/model_calls.jsonl")).read_text().splitlines()
    ]
    # USD per call from the token counts the scripted server sends and the prices per 1M
    per_call = (DEFAULT_PROMPT_TOKENS * 1000 + DEFAULT_COMPLETION_TOKENS * 3000) / 1e6
    assert len(calls) == len(replies) and per_call > 0
    unpriced = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_COST_")}
    unpriced.pop("SCRIPTED_BASE_URL", None)
    r = run("run", "suites/demo", "--suite", "000015", "--replay", str(job), "-o",
            str(tmp_path / "replayed"), cwd=REPO, env=unpriced)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    usage = json.loads(next((tmp_path / "replayed").glob("000015/*/usage.json")).read_text())
    assert usage["request_count"] == len(calls)
    assert usage["cost_usd"] == pytest.approx(per_call * len(calls))
    summary = json.loads(next((tmp_path / "replayed").glob("summary_*.json")).read_text())
    assert summary["efficiency"]["total_cost_usd"] == pytest.approx(per_call * len(calls))
    # and the console says what the job spent (it said nothing of tokens or USD: helper-140)
    n, tin, tout = len(calls), DEFAULT_PROMPT_TOKENS, DEFAULT_COMPLETION_TOKENS
    assert (
        f"model usage: {n} requests, {n * (tin + tout):,} tokens ({n * tin:,} in, {n * tout:,} "
        f"out), ${per_call * n:.4f}\n"
    ) in r.stdout


def test_a_replay_of_fewer_runs_than_were_recorded_says_so(tmp_path: Path, scripted_server) -> None:
    """``--replay`` of a job that recorded 2 runs of 000015, without ``--runs``: 1 run, and the
    second run's recorded calls unused with no word (a new user's finding with 8 runs). Now a
    note says so and names the ``--runs`` that replays them all; with it, no note."""
    import json

    from clawrig.testing.scripted_server import load_script

    replies, models = load_script(REPO / "examples" / "scripted-000015.json")
    srv = scripted_server(list(replies) * 2, models=models)  # one script per run, in turn
    env = dict(os.environ, SCRIPTED_BASE_URL=srv.base_url)
    job = tmp_path / "recorded"
    r = run(
        "run", "suites/demo", "--suite", "000015", "-m", "scripted/demo", "--runs", "2",
        "-p", "1", "-o", str(job), cwd=REPO, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    runs = {
        json.loads(line)["run_index"]
        for records in job.glob("000015/*/model_calls.jsonl")
        for line in records.read_text().splitlines()
    }
    assert len(runs) == 2, runs
    note = f"--replay: {job} recorded up to 2 runs of a task; this job runs 1 (--runs 2 replays"
    r = run("run", "suites/demo", "--suite", "000015", "--replay", str(job), "-o",
            str(tmp_path / "one"), cwd=REPO)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert note in r.stderr and "Traceback" not in r.stderr
    # the summary says where the replies came from (the spend shown is that of the recorded
    # calls it used)
    summary = json.loads(next((tmp_path / "one").glob("summary_*.json")).read_text())
    assert summary["replayed_from"] == str(job)
    assert f"replayed from {job}: every model reply came from its records" in r.stdout
    recorded = json.loads(next(job.glob("summary_*.json")).read_text())
    assert recorded["replayed_from"] is None
    r = run("run", "suites/demo", "--suite", "000015", "--replay", str(job), "--runs", "2",
            "-o", str(tmp_path / "two"), cwd=REPO)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "recorded up to" not in r.stderr
    # an agent that calls no model replays nothing of the agent's: said
    r = run("run", "suites/demo", "--suite", "000015", "--replay", str(job), "--agent", "oracle",
            "-o", str(tmp_path / "oracle"), cwd=REPO)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert (
        f"note: --replay: --agent oracle calls no model; of {job} only a judge's recorded calls "
        "are used"
    ) in r.stderr
    # a job is replayed or live as a whole: --resume refuses the other kind (the summary's
    # replayed_from came from the last invocation only), and a replay from elsewhere
    two = tmp_path / "two"
    before = {p: p.read_bytes() for p in two.rglob("*") if p.is_file()}
    summary_two = next(two.glob("summary_*.json"))
    r = run("run", "suites/demo", "--suite", "000015", "-m", "scripted/demo", "--runs", "2",
            "--resume", "-o", str(two), cwd=REPO, env=env)  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert (
        f"{summary_two}: --resume: the finished job replayed {job}; this is a live run (no "
        "--replay): a job is replayed or live as a whole"
    ) in r.stderr
    r = run("run", "suites/demo", "--suite", "000015", "--replay", str(tmp_path / "one"),
            "--runs", "2", "--resume", "-o", str(two), cwd=REPO)  # fmt: skip
    both = (  # both replays: which one it was, and how to resume it
        f"--resume: the finished job replayed {job}, not {tmp_path / 'one'}: resume it with "
        f"--replay {job}, or choose another --output"
    )
    assert r.returncode != 0 and both in r.stderr, r.stderr
    r = run("run", "suites/demo", "--suite", "000015", "--replay", str(tmp_path / "one"),
            "--runs", "2", "--resume", "-o", str(job), cwd=REPO)  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "--resume: the finished job called its models (live); this is --replay" in r.stderr
    assert {p: p.read_bytes() for p in two.rglob("*") if p.is_file()} == before
    # without -m and --replay, and no model server: the folder's only job is the one resumed,
    # and the line says it was replayed (it said "no model given", then "unknown provider")
    bare = {k: v for k, v in os.environ.items() if k != "SCRIPTED_BASE_URL"}
    r = run("run", "suites/demo", "--suite", "000015", "--runs", "2", "--resume", "-o", str(two),
            cwd=REPO, env=bare)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.splitlines() == [
        f"clawrig: error: {summary_two}: --resume: the finished job replayed {job}; this is a "
        f"live run (no --replay): a job is replayed or live as a whole, so resume it with "
        f"--replay {job}, or choose another --output"
    ], r.stderr
    # the same source (given relative to another folder) resumes: the job is finished
    r = run("run", "suites/demo", "--suite", "000015", "--replay", os.path.relpath(job, REPO),
            "--runs", "2", "--resume", "-o", str(two), cwd=REPO)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]


def test_summary_lines_holding_brackets_print_as_written(tmp_path: Path) -> None:
    """An output folder whose name holds rich markup (``[/x]``): its summary line raised
    rich's MarkupError after the summary was written (exit 1 and a traceback; a red-team
    finding). It prints as written now."""
    out = tmp_path / "odd[/x]name[bold]"
    r = run(
        "run", "suites/demo", "--suite", "000015", "--agent", "oracle", "-o", str(out),
        cwd=REPO, env=dict(os.environ, COLUMNS="1000"),
    )  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"summary: {out / 'summary_oracle.json'}" in r.stdout, r.stdout


def test_a_model_that_never_answered_stops_the_job_saying_how_to_resume(
    tmp_path: Path, scripted_server
) -> None:
    """The first request refused (a used-up scripted server: HTTP 500, do not retry) stops
    the job with exit 2; the same command run again was refused ("holds an unfinished job")
    and the first line never said so (a new user's finding). It says so now, and the resume
    runs once the server answers."""
    from clawrig.testing.scripted_server import load_script

    out = tmp_path / "out"
    args = ["run", "suites/demo", "--suite", "000015", "-m", "scripted/demo", "-o", str(out)]
    dead = scripted_server([])  # nothing scripted: its first answer is the refusal
    r = run(*args, cwd=REPO, env=dict(os.environ, SCRIPTED_BASE_URL=dead.base_url))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.splitlines()[-1].endswith(
        f"script exhausted: request #1 came after all 0 scripted replies were used; {out} keeps "
        "the job: fix that, then run the same command with --resume"
    ), r.stderr
    replies, models = load_script(REPO / "examples" / "scripted-000015.json")
    live = scripted_server(list(replies), models=models)
    r = run(*args, "--resume", cwd=REPO, env=dict(os.environ, SCRIPTED_BASE_URL=live.base_url))
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_model_the_server_does_not_have_says_the_right_one_is_another_job(
    tmp_path: Path, scripted_server
) -> None:
    """404 for the model's name: the fix is another -m, whose job is another (resuming this
    folder with it is refused): the line says to run it again with the right -m, not to
    --resume. The wrong name's job ran no trial, so nothing of it stays (its progress file
    stayed for good, and the line said to choose another folder, which the right -m does not
    need: helper-140); the right -m then runs in the same folder."""
    from clawrig.testing.scripted_server import load_script

    srv = scripted_server([], models=["demo"])
    out = tmp_path / "out"
    r = run("run", "suites/demo", "--suite", "000015", "-m", "scripted/demoo", "-o", str(out),
            cwd=REPO, env=dict(os.environ, SCRIPTED_BASE_URL=srv.base_url))  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    last = r.stderr.splitlines()[-1]
    assert "404" in last and last.endswith("; no trial ran: run it again with the right -m"), last
    assert not list(out.glob("progress_*.json"))
    replies, models = load_script(REPO / "examples" / "scripted-000015.json")
    live = scripted_server(list(replies), models=models)
    r = run("run", "suites/demo", "--suite", "000015", "-m", "scripted/demo", "-o", str(out),
            cwd=REPO, env=dict(os.environ, SCRIPTED_BASE_URL=live.base_url))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert [p.name for p in out.glob("summary_*.json")] == ["summary_scripted_demo.json"]


def test_memory_mb_sets_each_sandboxs_memory_limit(tmp_path):
    """``--memory-mb`` is the trial config's ``memory_mb`` (a job config could set it, the
    command line could not: helper-123), recorded in result.json."""
    import json

    out = tmp_path / "out"
    r = run(
        "run", str(REPO / "suites/demo"), "-s", "000015", "--agent", "nop", "--memory-mb", "256",
        "-o", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (result,) = out.glob("000015/*/result.json")
    assert json.loads(result.read_text())["config"]["memory_mb"] == 256


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["run", "DEMO", "-s", "000015", "--agent", "oracle"], 0),  # the job's own code
        (["tasks", "list", "DEMO"], 0),
        (["run", "--help"], 141),  # typer's console: as SIGPIPE would end it (it exited 1)
    ],
)
def test_a_closed_pipe_on_stdout_keeps_the_commands_exit_code(args, code, tmp_path):
    """`clawrig run ... | head -1`: the reader goes before the end-of-job table; the job's
    summary is written and the exit code is the job's (rich's default exited 1, read as a
    trial left unscored), with no traceback."""
    args = [str(REPO / "suites/demo") if a == "DEMO" else a for a in args]
    job = args[0] == "run" and "--help" not in args
    out = ["-o", str(tmp_path / "out")] if job else []
    read_end, write_end = os.pipe()
    os.close(read_end)  # no reader from the start
    try:
        r = subprocess.run(
            [CLAWRIG, *args, *out],
            cwd=tmp_path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
    if job:
        assert (tmp_path / "out" / "summary_oracle.json").is_file()


def test_an_unusable_cache_folder_is_one_line_and_nothing_written(tmp_path):
    (tmp_path / "a_file").write_text("")
    cache = tmp_path / "a_file" / "cache"  # below a file: cannot be made
    r = run(
        "run", str(REPO / "examples/wildclaw"), "--agent", "nop", "-o", str(tmp_path / "out"),
        cwd=tmp_path, env={"CLAWRIG_CACHE_DIR": str(cache), "CLAWRIG_ENV_CACHE_DIR": str(cache)},
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    assert f"clawrig's cache folder {cache}/environments: Not a directory" in r.stderr
    assert not (tmp_path / "out").exists()


def test_a_task_file_linked_into_path_is_in_path(tmp_path):
    """``-t lnk/task.md`` with PATH ``lnk``, the file a symbolic link to a task elsewhere: in
    PATH as named (helper-128: refused as "not in PATH" by its resolved location)."""
    wild = tmp_path / "wild"
    shutil.copytree(REPO / "examples" / "wildclaw", wild)
    task = next((wild / "tasks").rglob("*.md"))
    (tmp_path / "lnk").mkdir()
    (tmp_path / "lnk" / "task.md").symlink_to(task)
    r = run(
        "run", "lnk", "-t", "lnk/task.md", "--root", str(wild), "--agent", "nop",
        "-o", str(tmp_path / "out"), cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    r = run("run", "nowhere", "-t", "lnk/task.md", "--agent", "nop", cwd=tmp_path)
    assert r.returncode == 2 and "PATH: no such file or folder: nowhere" in r.stderr


def test_an_unusable_cache_is_refused_before_a_task_needing_its_environments(tmp_path):
    """Demo 000008 uses the built-in mock services, whose environment is built into the cache:
    an unusable CLAWRIG_CACHE_DIR failed each trial at setup, retried (helper-130)."""
    (tmp_path / "a_file").write_text("")
    cache = tmp_path / "a_file" / "cache"
    r = run(
        "run", str(REPO / "suites/demo"), "-s", "000008", "--agent", "oracle",
        "-o", str(tmp_path / "out"), cwd=tmp_path, env={"CLAWRIG_CACHE_DIR": str(cache)},
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert f"clawrig's cache folder {cache}/envs: Not a directory" in r.stderr
    assert not (tmp_path / "out").exists()


def test_a_replay_of_a_recorded_refusal_says_so_not_that_the_run_diverged(
    tmp_path: Path, scripted_server
) -> None:
    """A job whose provider refused the agent's second request (a context-length 400: the
    trial stops there, ``model_error``), replayed: the replay has no reply to give for that
    request. It said "the run diverged", though the request was the recorded one, word for
    word (helper-148). Now it says the records hold it refused."""
    from clawrig.testing.scripted_server import error, reply

    refusal = "This model's maximum context length is 8192 tokens; the messages hold 9001."
    srv = scripted_server(
        [
            reply(tool_calls=[{"name": "exec", "arguments": {"command": "ls /tmp_workspace"}}]),
            error(400, refusal),
            reply("pong"),  # the harness's own plain request, answered: the conversation's fault
        ],
        models=["demo"],
    )
    env = dict(os.environ, SCRIPTED_BASE_URL=srv.base_url)
    job = tmp_path / "recorded"
    r = run("run", "suites/demo", "--suite", "000015", "-m", "scripted/demo", "-o", str(job),
            cwd=REPO, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (result,) = [json.loads(p.read_text()) for p in job.glob("000015/*/result.json")]
    assert result["stop_reason"] == "model_error" and refusal in result["stop_detail"]
    calls = [
        json.loads(line)
        for line in next(job.glob("000015/*/model_calls.jsonl")).read_text().splitlines()
    ]
    # (and the harness's plain request, answered: role probe, never replayed)
    assert [(c["role"], c["status"]) for c in calls] == [
        ("agent", 200),
        ("agent", 400),
        ("probe", 200),
    ]
    # (-m as recorded, as a user may well give it: helper-155)
    r = run("run", "suites/demo", "--suite", "000015", "--replay", str(job), "-m",
            "scripted/demo", "-o", str(tmp_path / "again"), cwd=REPO)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert ("no recorded response for request #2 of task 000015 (run 0), trial ") in r.stderr
    # a replay's miss, not a model the server lacks (helper-155: "run it again with the right
    # -m", and its progress file removed)
    assert "right -m" not in r.stderr, r.stderr[-2000:]
    assert (
        f"(key {calls[1]['key'][:12]}): the recorded job holds it refused by the provider "
        "(HTTP 400), and a replay cannot replay a refusal; the trials finished so far are kept "
        "(the recorded trial ended on that refusal: replay the job's other tasks with --suite)"
    ) in r.stderr
    assert "diverged" not in r.stderr and "Traceback" not in r.stderr


def test_grade_write_after_a_grader_is_fixed_counts_the_new_score(tmp_path):
    """helper-200: a grader that crashed on the agent's end state is the agent's error, in the
    grading phase; fixed, `grade --write` wrote its score beside that error, which stayed: the
    trial still counted 0 (summary, viewer, exports), and every later grade said DIFFERENT."""
    suite = _demo_samples(tmp_path / "s", {"000001"})
    evaluator = suite / "evaluators" / "evaluator_000001.py"
    good = evaluator.read_text()
    evaluator.write_text(
        good.replace("    scores = {", "    undefined_name  # noqa\n    scores = {", 1)
    )
    out = tmp_path / "out"
    first = run("run", str(suite), "--agent", "oracle", "-o", str(out), cwd=tmp_path)
    assert first.returncode == 1, first.stderr[-1500:]
    # the oracle's end state is the golden trajectory's: a crash there is the task's
    # (helper-200: "the agent's doing" misled a vendor)
    assert (
        "1 trial(s) scored 0 for an agent error (the golden trajectory's end state, so the "
        "task's: clawrig verify checks it):"
    ) in " ".join(first.stdout.split()), first.stdout
    (result,) = out.glob("000001/*/result.json")
    crashed = json.loads(result.read_text())
    assert (crashed["error"]["kind"], crashed["error"]["phase"]) == ("agent", "grading")
    evaluator.write_text(good)
    written = run("grade", str(out), "--write", cwd=tmp_path)
    assert written.returncode == 1 and "written" in written.stdout, written.stdout
    fixed = json.loads(result.read_text())
    assert fixed["error"] is None and fixed["score"]["error"] is None
    summary = json.loads((out / "summary_oracle.json").read_text())
    assert summary["mean"]["mean"] == fixed["score"]["score"] > 0
    assert summary["errors_by_kind"] == {}
    again = run("grade", str(out), cwd=tmp_path)
    assert again.returncode == 0 and "1/1 trial re-grades to its recorded score" in again.stdout


def test_replay_of_a_folder_of_two_models_jobs_picks_one_by_m(tmp_path: Path, scripted_server):
    """helper-203: a folder holding one job per model (as docs/outputs.md allows): --replay
    without -m replayed one of them unsaid, and -m with the other was refused, "recorded the
    agent's calls to <the first>: drop -m". -m now picks either; without it, one line asks."""
    from clawrig.testing.scripted_server import reply

    srv = scripted_server(responder=lambda req: reply(f"I answer as {req['model']}."))
    env = dict(os.environ, SCRIPTED_BASE_URL=srv.base_url)
    both = tmp_path / "both"
    for model in ("scripted/a", "scripted/b"):
        r = run("run", "suites/demo", "--suite", "000015", "-m", model, "-o", str(both),
                cwd=REPO, env=env)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
    offline = {k: v for k, v in os.environ.items() if k != "SCRIPTED_BASE_URL"}
    replay = ["run", "suites/demo", "--suite", "000015", "--replay", str(both)]
    r = run(*replay, "-o", str(tmp_path / "r0"), cwd=REPO, env=offline)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"clawrig: error: --replay: {both} holds the recorded calls of several models' jobs "
        "(scripted/a, scripted/b): give -m with the one to replay"
    ], r.stderr
    for model in ("scripted/a", "scripted/b"):
        out = tmp_path / model.replace("/", "_")
        r = run(*replay, "-m", model, "-o", str(out), cwd=REPO, env=offline)
        assert r.returncode == 0, r.stderr[-2000:]
        (chat,) = out.glob("000015/*/chat.jsonl")
        assert f"I answer as {model.split('/')[1]}." in chat.read_text()
    r = run(*replay, "-m", "scripted/c", "-o", str(tmp_path / "rc"), cwd=REPO, env=offline)
    assert (
        r.returncode == 2
        and (
            f"--replay: {both} recorded the agent's calls to scripted/a, scripted/b, not -m "
            "scripted/c (a recorded reply answers its own model only): give -m one of them"
        )
        in r.stderr
    ), r.stderr


@pytest.mark.parametrize(
    ("record", "depth"),
    [("summary_other_model.json", 1), ("progress_x.json", 2), ("rollouts.json", 1)],
)
def test_an_output_inside_another_jobs_folder_is_refused(tmp_path, record, depth):
    """helper-212: -o inside another job's task folder was taken: the new job's files and
    trials became one of that job's task's (its resume, export and viewer read them)."""
    outer = tmp_path / "jobs" / "d1"
    outer.mkdir(parents=True)
    trials = "tasks" if record.startswith("summary") else "completed"
    (outer / record).write_text(json.dumps({"model": "m", trials: []}))
    out = outer / "000001" if depth == 1 else outer / "000001" / "trial"
    r = run("run", str(REPO / "suites/demo"), "--agent", "oracle", "-o", str(out), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    said = " ".join(r.stderr.split())
    assert f"--output: {out} is inside the job folder {outer}, whose task folders" in said
    assert not (outer / "000001").exists()
    if depth == 2:
        return
    # a stray file of that name that is no job's record does not make a folder a job's, and
    # "-o .." from a task folder is the job folder itself, not inside it (helper-217)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "summary_meeting.json").write_text("{}")
    r = run("run", str(REPO / "suites/demo"), "--agent", "oracle", "-s", "000001", "-o",
            str(notes / "new"), cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr[-1000:]
    r = run("run", str(REPO / "suites/demo"), "--agent", "oracle", "-s", "000001", "-o", "..",
            "--resume", cwd=notes / "new" / "000001")  # fmt: skip
    assert r.returncode == 0 and "nothing to run" in r.stderr, r.stderr[-1000:]
    # beside it (and a folder of job folders) is fine
    r = run("run", str(REPO / "suites/demo"), "--agent", "oracle", "-s", "000001", "-o",
            str(tmp_path / "jobs" / "d2"), cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr[-1000:]


def test_a_usd_amount_of_minus_zero_is_zero():
    """helper-217: --budget-usd -0 said "the budget of $-0 stopped the job"."""
    import math

    from clawrig.cli.common import usd_amount

    amount = usd_amount(-0.0)
    assert amount == 0 and math.copysign(1.0, amount) == 1.0 and f"{amount:g}" == "0"
    assert usd_amount(None) is None and usd_amount(2.5) == 2.5
