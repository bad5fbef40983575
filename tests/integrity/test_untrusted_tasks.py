"""Attack class 5 (issue 14): a task is input a user downloaded, and nothing from it may reach the
host. Each attack is a real benchmark folder on disk run through the real ``clawrig run``; each
must be refused in one line (exit 2) before any sandbox starts, and nothing of it may run."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from integrity_helpers import write_bench

from clawrig.runner.batch import run_job
from clawrig.runner.trial import TrialServices, grader_env
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_tasks

REPO = Path(__file__).resolve().parents[2]
BUILD_BACKEND = """
import pathlib
pathlib.Path({marker!r}).write_text("the build backend ran on the host")
from setuptools import setup
setup(name="evil", version="1.0")
"""


def _run(path: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clawrig", "run", str(path), "--agent", "nop"]
        + ["-o", str(tmp_path / "out"), *extra],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )


def _refused(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr
    assert any(all(n in line for n in needles) for line in lines), proc.stderr
    out = Path(proc.args[proc.args.index("-o") + 1])
    assert not list(out.glob("*/*/result.json"))  # no trial ran


def test_a_local_project_as_grader_requirement_never_builds_on_the_host(tmp_path):
    tasks = write_bench(tmp_path / "bench", 1)
    md = next(tasks.rglob("*.md"))  # a grader beyond the standard library: it gets an env
    md.write_text(md.read_text().replace("import os\n", "import os\nimport yaml\n"))
    project = tmp_path / "evilpkg"
    project.mkdir()
    marker = tmp_path / "host-was-reached"
    (project / "setup.py").write_text(BUILD_BACKEND.format(marker=str(marker)))
    for req in (f"evil @ file://{project}", str(project), "evil @ git+https://example.com/e.git"):
        (tmp_path / "bench" / "requirements.txt").write_text(f"PyYAML\n{req}\n")
        proc = _run(tasks, tmp_path)
        _refused(proc, "requirements.txt:2", "direct references, URLs and paths")
    assert not marker.exists()


def test_a_skill_or_task_file_linked_outside_the_benchmark_is_refused(tmp_path):
    tasks = write_bench(tmp_path / "bench", 1)
    md = next(tasks.rglob("*.md"))
    md.write_text(md.read_text() + "\n## Skills\n\n```\nhostskill\n```\n")
    secret = tmp_path / "host-secrets"
    secret.mkdir()
    (secret / "id_rsa").write_text("PRIVATE KEY\n")
    skills = tmp_path / "bench" / "skills"
    skills.mkdir()
    (skills / "hostskill").symlink_to(secret)  # the skill folder itself leads out
    _refused(_run(tasks, tmp_path), "skill", "leads outside the benchmark root")
    (skills / "hostskill").unlink()
    (skills / "hostskill").mkdir()
    (skills / "hostskill" / "key").symlink_to(secret / "id_rsa")  # a link inside it does
    _refused(_run(tasks, tmp_path), "skill: hostskill holds a link leading outside")
    shutil.rmtree(skills / "hostskill")
    (skills / "hostskill").mkdir()
    outside = tmp_path / "outside.md"  # the task file is a link to a file outside
    outside.write_text(md.read_text())
    md.unlink()
    md.symlink_to(outside)
    _refused(_run(tasks, tmp_path), "task file", "leads outside the benchmark root")


def test_a_four_folder_evaluator_linked_outside_is_refused(tmp_path):
    suite = tmp_path / "demo"
    shutil.copytree(REPO / "suites" / "demo", suite)
    evaluator = suite / "evaluators" / "evaluator_000001.py"
    host = tmp_path / "host_evaluator.py"
    host.write_text(evaluator.read_text())  # a valid evaluator, but a host file
    evaluator.unlink()
    evaluator.symlink_to(host)
    proc = _run(suite, tmp_path, "--agent", "oracle")
    # refused by the reader, before the file is read (its own path and field: helper-175)
    _refused(proc, f"{evaluator}: file: {evaluator} leads outside the benchmark root {suite}")


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_node_or_a_pipe_in_a_workspace_is_refused(tmp_path):
    # a benchmark archive extracted as root keeps device nodes: a "file" of the workspace
    # that is the host's disk (a block device) was copied into the sandbox whole, the host's
    # disk for the agent to read; /dev/zero's node filled the trial's disk; a named pipe
    # failed every trial as infrastructure (retried, never refused)
    suite = tmp_path / "demo"
    shutil.copytree(REPO / "suites" / "demo", suite)
    ws = suite / "workspaces" / "000001"
    os.mknod(ws / "zero", 0o644 | stat.S_IFCHR, os.makedev(1, 5))
    _refused(_run(suite, tmp_path, "--agent", "oracle"), "workspaces/000001/zero is a device")
    (ws / "zero").unlink()
    os.mkfifo(ws / "pipe")
    _refused(_run(suite, tmp_path, "--agent", "oracle"), "000001/pipe is a named pipe")


async def test_resume_checks_the_suites_content_not_its_ids(tmp_path):
    first = write_bench(tmp_path / "a", 2)
    out = tmp_path / "out"
    config = TrialConfig(agent="nop", model="scripted/x")
    job = JobConfig(suite_path=tmp_path / "a", output=out, budget_usd=0.0, trial=config)
    summary = await run_job(job, load_tasks(first), TrialServices())
    assert summary["budget_stopped"] is True  # unfinished: a progress file to resume
    other = write_bench(tmp_path / "b", 2)  # the same ids, another prompt for t2
    md = next(other.rglob("*_t2.md"))
    md.write_text(md.read_text().replace("Write ok", "Write OK please"))
    resumed = job.model_copy(update={"suite_path": tmp_path / "b", "resume": True})
    with pytest.raises(Exception, match=r"1 task\(s\) differ .*_t2"):
        await run_job(resumed, load_tasks(other), TrialServices())
    moved = tmp_path / "moved"  # the same suite in another folder resumes
    shutil.copytree(tmp_path / "a", moved)
    again = job.model_copy(update={"suite_path": moved, "resume": True})
    summary = await run_job(again, load_tasks(moved / "tasks"), TrialServices())
    assert summary["budget_stopped"] is True


def test_env_names_never_copy_host_secrets_into_the_grader(tmp_path, monkeypatch):
    tasks_dir = write_bench(tmp_path / "bench", 1)
    md = next(tasks_dir.rglob("*.md"))
    names = ["HF_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "OPENAI_API_KEY"]
    md.write_text(md.read_text() + "\n## Env\n\n```\n" + "\n".join(names) + "\n```\n")
    for name in names:
        monkeypatch.setenv(name, f"host-value-of-{name}")
    monkeypatch.setenv("CLAWRIG_PASS_ENV", "HF_TOKEN,AWS_SECRET_ACCESS_KEY")  # never secrets
    env = grader_env(load_tasks(tasks_dir)[0])
    assert not [v for v in env.values() if v.startswith("host-value-of-")], env
    monkeypatch.setenv("CLAWRIG_PASS_ENV", "DATABASE_URL")  # a plain name the user allows
    assert grader_env(load_tasks(tasks_dir)[0])["DATABASE_URL"] == "host-value-of-DATABASE_URL"
    assert os.environ["HF_TOKEN"] not in grader_env(load_tasks(tasks_dir)[0]).values()


def test_a_yaml_alias_bomb_in_the_front_matter_is_refused(tmp_path):
    # nine lines of anchors and aliases stand for 9**10 strings: kept in the task's metadata,
    # `clawrig tasks show --json` asked for 2 GiB and aborted (more without a memory limit)
    tasks = write_bench(tmp_path / "bench", 1)
    md = next(tasks.rglob("*.md"))
    bomb = ['lol0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    bomb += [f"lol{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    md.write_text(md.read_text().replace("name: T1\n", "name: T1\n" + "\n".join(bomb) + "\n"))
    _refused(_run(tasks, tmp_path), md.name, "front matter", "YAML aliases")
