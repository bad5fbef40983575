"""Warm snapshots: a task's install lines run once per (environment, lines); every later trial
starts from the frozen result. Real trials (nop agent) on bwrap and Docker, installing a real
wheel from a PEP 503 index served on 127.0.0.1."""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path

import pytest

from clawrig.env.store import warm_dir
from clawrig.env.system import SetupNetwork
from clawrig.env.warm import is_install_line, split_warmup
from clawrig.runner.trial import TrialServices, run_trial
from clawrig.spec.job import TrialConfig
from clawrig.spec.task import Grader, GraderKind, SourceRef, Task, TaskFormat
from clawrig.testing.packages import FolderServer, make_simple_index, make_wheel

pytestmark = pytest.mark.sandbox

GRADER = """
import os

def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    with open(os.path.join(workspace_path, "probe.txt")) as fh:
        return {{"overall_score": 1.0 if fh.read() == "{value}\\n" else 0.0}}
"""


def test_install_lines_are_told_from_the_rest():
    lines = [
        "pip install openai Pillow",
        "python3 -m pip install -q numpy==1.26",
        "npm install -g agent-browser",
        "apt-get update",
        "apt-get install -y ffmpeg",
        "pip install -r requirements.txt",  # reads the workspace
        "pip install ./local.whl",
        "npm install left-pad",  # not global: lands in the workspace
        "python3 server.py &",
        "pip install x && python3 setup.py",
        "echo hi > /tmp_workspace/a",
    ]
    install, rest = split_warmup(lines)
    assert install == lines[:5]
    assert rest == lines[5:]
    assert not is_install_line("pip install y &")


@pytest.fixture(params=["bwrap", "docker"])
def backend(request: pytest.FixtureRequest, base_rootfs: Path) -> str:
    if request.param == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    if request.param == "docker":
        request.getfixturevalue("docker_image")
    return request.param


async def test_second_trial_starts_from_the_warm_snapshot(tmp_path, backend):
    tag = secrets.token_hex(4)
    module = f"clawrig_warm_probe_{tag}"
    wheel = make_wheel(tmp_path / "wheels", module.replace("_", "-"), module, f"warm-{tag}")
    (tmp_path / "task.md").write_text("# task\n")
    task = Task(
        id=f"warm-{tag}",
        prompt="nothing",
        format=TaskFormat.WILDCLAW,
        source=SourceRef(path=tmp_path / "task.md"),
        warmup=[
            f"pip install --root-user-action=ignore {module.replace('_', '-')}",
            f"python3 -c 'import {module} as m; print(m.VALUE)' > /tmp_workspace/probe.txt",
        ],
        grader=Grader(kind=GraderKind.PROGRAMMATIC, source=GRADER.format(value=f"warm-{tag}")),
    )
    cfg = TrialConfig(agent="nop", model="nop", sandbox=backend, environment="base")
    make_simple_index(tmp_path / "index", [wheel])
    index = FolderServer(tmp_path / "index")
    try:
        services = TrialServices(
            setup_network=SetupNetwork(network=True, env={"PIP_INDEX_URL": index.url + "/simple"})
        )
        first, folder1 = await run_trial(task, cfg, tmp_path / "out", services=services)
        second, folder2 = await run_trial(
            task, cfg, tmp_path / "out", run_index=1, services=services
        )
    finally:
        index.stop()
    fetched = [r for r in index.requests if r.endswith(".whl")]
    key = first.versions.get("warm_snapshot")
    try:
        assert first.error is None and second.error is None, (first.error, second.error)
        assert first.score and second.score and first.score.score == second.score.score == 1.0
        assert key and second.versions["warm_snapshot"] == key
        # the wheel was downloaded once: the second trial did not install again
        assert fetched == [f"/simple/{module.replace('_', '-')}/{wheel.name}"]
        # and yet the package is there in both trials (the per-trial line imports it)
        for folder in (folder1, folder2):
            assert (folder / "end_state" / "probe.txt").read_text() == f"warm-{tag}\n"
        meta = json.loads((warm_dir() / key / "warm.json").read_text())
        assert meta["lines"] == task.warmup[:1] and meta["backend"] == backend
        # its size, recorded when made (env list reads it): the layer's regular files
        upper, inodes = warm_dir() / key / "upper", {}
        for f in upper.rglob("*") if upper.is_dir() else ():
            if f.is_file() and not f.is_symlink():
                inodes[(f.lstat().st_dev, f.lstat().st_ino)] = f.lstat().st_size
        assert meta["size_bytes"] == sum(inodes.values())
        assert backend == "docker" or meta["size_bytes"] > 0  # the installed package
        if backend == "docker":  # the setup's environment is not frozen into the image
            import subprocess

            inspect = ["docker", "image", "inspect", "--format", "{{json .Config.Env}}"]
            env = subprocess.run(
                [*inspect, f"clawrig-warm:{key}"], capture_output=True, text=True, check=True
            ).stdout
            assert "PIP_INDEX_URL" not in env and "PATH=" in env
        assert first.timings["warm"] >= meta["seconds"]
        # nothing leaked into the environment itself: a trial without the snapshot lacks it
        plain = task.model_copy(update={"warmup": [task.warmup[1]]})
        third, _ = await run_trial(plain, cfg, tmp_path / "out2", services=services)
        assert third.error is not None and "ModuleNotFoundError" in third.error.message
    finally:
        shutil.rmtree(warm_dir() / key, ignore_errors=True)
        if backend == "docker" and key:
            import subprocess

            subprocess.run(["docker", "rmi", "-f", f"clawrig-warm:{key}"], capture_output=True)


async def test_warming_goes_through_the_trials_egress_proxy(tmp_path, base_rootfs):
    """Without an explicit setup network the warming sandbox gets the trial's egress proxy (the
    setup policy: package registries) and its forwarder: ``apt-get update`` reaches Debian's
    mirror through it, logged in the trial's egress.jsonl, and the result is frozen."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    tag = secrets.token_hex(4)
    (tmp_path / "task.md").write_text("# task\n")
    line = f"apt-get update  # {tag}"
    task = Task(
        id=f"egress-{tag}",
        prompt="nothing",
        format=TaskFormat.WILDCLAW,
        source=SourceRef(path=tmp_path / "task.md"),
        # the package lists fetched while warming are there in the trial
        warmup=[line, "ls /var/lib/apt/lists | grep -c _Packages > /tmp_workspace/probe.txt"],
        grader=Grader(kind=GraderKind.PROGRAMMATIC, source=GRADER.format(value="1")),
    )
    cfg = TrialConfig(agent="nop", model="nop", environment="base")
    result, folder = await run_trial(task, cfg, tmp_path / "out")
    key = result.versions.get("warm_snapshot")
    try:
        assert result.error is None, result.error
        assert key and json.loads((warm_dir() / key / "warm.json").read_text())["lines"] == [line]
        assert (folder / "end_state" / "probe.txt").read_text() == "1\n"
        log = [json.loads(x) for x in (folder / "egress.jsonl").read_text().splitlines()]
        assert any(e.get("host") == "deb.debian.org" for e in log), log
    finally:
        if key:
            shutil.rmtree(warm_dir() / key, ignore_errors=True)
