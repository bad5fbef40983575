"""``clawrig export harbor``: the written task folders, and their scripts run the way Harbor runs
them (workspace at /tmp_workspace, solution/solve.sh as the oracle, then tests/test.sh with
tests/ at /tests writing /logs/verifier/reward.txt), in a real bwrap sandbox."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from clawrig.export.harbor import export_harbor
from clawrig.sandbox import SandboxConfig, create_sandbox
from clawrig.sandbox.base import Bind
from clawrig.tasks.registry import load_tasks

from .conftest import DEMO

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("harbor")
    return out, export_harbor(DEMO, out)


async def run_like_harbor(task_dir: Path, work: Path, *, oracle: bool = True) -> dict:
    """Copy the task's environment, run solve.sh (when ``oracle``) and test.sh in a sandbox;
    return {"exit": test.sh's exit code, "reward": reward.txt or None, "json": reward.json}."""
    ws, logs = work / "ws", work / "logs"
    shutil.copytree(task_dir / "environment" / "workspace", ws)
    logs.mkdir()
    binds = [
        Bind(source=task_dir / "tests", dest="/tests"),
        Bind(source=task_dir / "solution", dest="/solution"),
        Bind(source=logs, dest="/logs", read_only=False),
    ]
    sandbox = create_sandbox("bwrap", SandboxConfig(workspace_dir=ws, binds=binds))
    await sandbox.start()
    try:
        if oracle:
            solved = await sandbox.exec(["bash", "/solution/solve.sh"], cwd="/tmp_workspace")
            assert solved.exit_code == 0, solved.stderr
        test = await sandbox.exec(["bash", "/tests/test.sh"], cwd="/tmp_workspace")
    finally:
        await sandbox.stop()
    reward = logs / "verifier" / "reward.txt"
    rjson = logs / "verifier" / "reward.json"
    return {
        "exit": test.exit_code,
        "stderr": test.stderr,
        "reward": float(reward.read_text()) if reward.exists() else None,
        "json": json.loads(rjson.read_text()) if rjson.exists() else None,
    }


def test_layout_of_an_exported_task(exported):
    out, report = exported
    by_id = {t.task_id: t for t in report.tasks}
    assert by_id["000008"].skipped == "needs mock services (gmail, calendar, contacts)"
    assert by_id["000009"].skipped == "needs mock services (slack)"
    task = next(t for t in load_tasks(DEMO) if t.id == "000015")
    folder = out / "000015"
    assert by_id["000015"].folder == folder and by_id["000015"].has_solution
    assert (folder / "instruction.md").read_text() == task.prompt.rstrip() + "\n"
    meta = tomllib.loads((folder / "task.toml").read_text())
    assert meta["version"] == "1.0"
    assert meta["agent"]["timeout_sec"] == task.timeout_seconds
    assert meta["verifier"]["timeout_sec"] == task.grader.timeout_seconds
    # the recorded agent of 000015 had web_search/web_fetch: the task allows the web (--web on)
    datapoint = json.loads((DEMO / "datapoints" / "000015.json").read_text())
    tools = {t["function"]["name"] for t in datapoint["tool_schema"]}
    assert meta["environment"]["allow_internet"] is bool({"web_search", "web_fetch"} & tools)
    assert meta["metadata"]["clawrig_task_id"] == "000015"
    docker = (folder / "environment" / "Dockerfile").read_text().splitlines()
    assert docker == ["FROM python:3.11-slim", "COPY workspace/ /tmp_workspace/",
                      "WORKDIR /tmp_workspace"]  # fmt: skip
    shipped = DEMO / "workspaces" / "000015" / "coauthorship.json"
    assert (folder / "environment" / "workspace" / "coauthorship.json").read_bytes() == (
        shipped.read_bytes()
    )
    assert not (folder / "environment" / "workspace" / "gt").exists()  # gt only in tests/
    assert sorted(p.name for p in (folder / "tests" / "gt").iterdir()) == sorted(
        task.workspace.gt_files
    )
    assert (folder / "tests" / "test.sh").stat().st_mode & 0o111


async def test_oracle_reaches_the_expected_reward_the_harbor_way(exported, tmp_path):
    out, report = exported
    tasks = {t.id: t for t in load_tasks(DEMO)}
    checked = 0
    for entry in report.exported:
        if not entry.has_solution or entry.notes:  # transcript-reading graders: see below
            continue
        got = await run_like_harbor(entry.folder, tmp_path / entry.task_id)
        assert got["exit"] == 0, (entry.task_id, got["stderr"])
        want = tasks[entry.task_id].expected_reward
        assert got["reward"] == pytest.approx(want), entry.task_id
        assert got["json"]["reward"] == got["reward"]
        checked += 1
    assert checked >= 5


async def test_no_solution_scores_low_and_a_broken_grader_gives_no_reward(exported, tmp_path):
    out, _ = exported
    empty = await run_like_harbor(out / "000015", tmp_path / "empty", oracle=False)
    assert empty["exit"] == 0 and empty["reward"] == 0.0  # no results file: grader says 0
    broken = tmp_path / "broken"
    shutil.copytree(out / "000015", broken)
    (broken / "tests" / "grader.py").write_text("def grade(**kw):\n    raise RuntimeError('x')\n")
    got = await run_like_harbor(broken, tmp_path / "b")
    assert got["exit"] == 1 and got["reward"] is None  # a grading error, never a silent 0
    assert "the grader failed" in got["stderr"]


def test_cli_export_harbor_and_its_errors(tmp_path):
    cli = [sys.executable, "-c", "from clawrig.cli.main import app; app()", "export", "harbor"]

    def export(*args: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *map(str, args)], capture_output=True, text=True, timeout=120)

    ok = export(DEMO, tmp_path / "h", "--suite", "000015,000008")
    assert ok.returncode == 0, ok.stderr
    assert "000008  skipped: needs mock services" in ok.stdout
    assert (tmp_path / "h" / "000015" / "task.toml").is_file()
    # the hint names a task Harbor's oracle can run (one with solution/), and no oracle where
    # none has one (helper-168: it named -a oracle for WildClawBench tasks without solution/)
    assert f"Run one with: harbor run -p {tmp_path / 'h' / '000015'} -a oracle" in ok.stdout
    wild = export(DEMO.parents[1] / "examples" / "wildclaw", tmp_path / "w")
    assert wild.returncode == 0 and "no solution/: no golden trajectory" in wild.stdout, wild
    said = f"Run one with: harbor run -p {tmp_path / 'w'}/<task_id> -a AGENT (none has solution/"
    assert said in " ".join(wild.stdout.split()), wild.stdout
    bad = export(tmp_path / "nope", tmp_path / "h2")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"clawrig: error: JOB_OR_SUITE: no such file or folder: {tmp_path / 'nope'}"
    ]
    # again into the same folder: each task folder there is replaced, and said to be
    again = export(DEMO, tmp_path / "h", "--suite", "000015")
    assert again.returncode == 0, again.stderr
    assert "(replaced the 000015/ that was in the output folder)" in again.stdout
    # nothing exportable: exit 2 after the reasons, and no empty folder left (helper-133)
    none = export(DEMO, tmp_path / "h3", "--suite", "000008")
    assert none.returncode == 2 and "000008  skipped: needs mock services" in none.stdout
    assert none.stderr.strip().splitlines() == [
        f"clawrig: error: {DEMO}: no task to export to Harbor (1 skipped, each for the reason "
        "above)"
    ]
    assert not (tmp_path / "h3").exists()
    # OUT the source or inside it: refused, nothing touched (helper-198: OUT a job's folder
    # replaced its trial folders with Harbor tasks); OUT a file: one line (a traceback)
    suite = tmp_path / "suite"
    shutil.copytree(DEMO, suite)
    before = sorted(p.relative_to(suite) for p in suite.rglob("*"))
    for out in (suite, suite / "samples", suite / "new"):
        refused = export(suite, out, "--suite", "000015")
        assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
            f"clawrig: error: OUT: {out} is {suite} or inside it: give a folder outside it"
        ], refused.stderr
    assert sorted(p.relative_to(suite) for p in suite.rglob("*")) == before
    (tmp_path / "afile").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for out, line in ((tmp_path / "afile", f"{tmp_path / 'afile'} is a file, not a folder"),
                      (tmp_path / "dangling", f"{tmp_path / 'dangling'} is a link to nothing "
                       f"({tmp_path / 'nowhere'})"),
                      (tmp_path / "dangling" / "sub", f"cannot create "
                       f"{tmp_path / 'dangling' / 'sub'}: {tmp_path / 'dangling'} is a link to "
                       f"nothing ({tmp_path / 'nowhere'})"),
                      (tmp_path / "afile" / "sub", f"cannot create {tmp_path / 'afile' / 'sub'}: "
                       f"{tmp_path / 'afile'} is a file, not a folder")):  # fmt: skip
        refused = export(DEMO, out, "--suite", "000015")
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines() == [f"clawrig: error: OUT: {line}"]
    # a folder there that no export made is left as it is, the task skipped saying so
    (tmp_path / "h4" / "000015").mkdir(parents=True)
    (tmp_path / "h4" / "000015" / "mine.txt").write_text("keep")
    kept = export(DEMO, tmp_path / "h4", "--suite", "000015")
    assert kept.returncode == 2
    assert (
        f"000015  skipped: {tmp_path / 'h4' / '000015'} is there and is no Harbor task folder "
        "(no task.toml): not replaced\n"
    ) in kept.stdout
    assert (tmp_path / "h4" / "000015" / "mine.txt").read_text() == "keep"
