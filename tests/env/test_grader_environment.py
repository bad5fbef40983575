"""WildClawBench graders on an environment run as upstream's do, on the system's python3 (issue
13 item 6): what the task's warmup installed is importable (the warm snapshot the clean room
starts from), what the agent installed is not (the clean room is a fresh sandbox). And the
pre-run check looks for a grader's imports where it will run.

Real trials (the native agent driven by a scripted model) on the ``base`` environment, bwrap and
Docker; real wheels from a PEP 503 index on 127.0.0.1; task files read by the real reader."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clawrig.env.pymodules import grading_modules, tree_modules
from clawrig.env.spec import graders_use_environment, load_env_spec
from clawrig.env.store import warm_dir
from clawrig.env.system import SetupNetwork, grader_on_system, resolve_environment
from clawrig.runner.fidelity_checks import note_grader_imports
from clawrig.runner.trial import TrialServices, run_trial
from clawrig.sandbox.pyenv import WILDCLAW_GRADER_REQUIREMENTS
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_tasks
from clawrig.testing.packages import (
    PROBE_DIST,
    PROBE_MODULE,
    PROBE_VALUE,
    TEXT_KIT_DIST,
    TEXT_KIT_MODULE,
    FolderServer,
    make_simple_index,
    make_wheel,
)
from clawrig.testing.scripted_server import call, reply

pytestmark = pytest.mark.sandbox

TASK_ID = "05_Creative_Synthesis_task_7_clean_grader"

GRADER = f"""
def grade(**kwargs) -> dict:
    import importlib.util
    from pathlib import Path

    import {PROBE_MODULE}  # the warmup installed it

    def seen(module):
        return 1.0 if importlib.util.find_spec(module) is not None else 0.0

    agent = Path("/tmp_workspace/results/agent.txt")
    scores = {{
        "warmup_package": 1.0 if {PROBE_MODULE}.VALUE == {PROBE_VALUE!r} else 0.0,
        "agent_saw_its_installs": 1.0
        if agent.is_file() and agent.read_text().strip() == "agent sees both"
        else 0.0,
        "agent_pip_install": seen({TEXT_KIT_MODULE!r}),
        "agent_site_file": seen("planted_by_agent"),
    }}
    scores["overall_score"] = (
        scores["warmup_package"]
        * scores["agent_saw_its_installs"]
        * (1 - scores["agent_pip_install"])
        * (1 - scores["agent_site_file"])
    )
    return scores
"""

# the agent installs a wheel from its workspace with pip and drops a module into the system's
# site-packages, then shows it can import both in its own sandbox
AGENT = (
    "pip install --no-index --root-user-action=ignore /tmp_workspace/*.whl"
    " && echo 'VALUE = 1' > \"$(python3 -c 'import site; print(site.getsitepackages()[0])')"
    '/planted_by_agent.py"'
    f" && python3 -c 'import {TEXT_KIT_MODULE}, planted_by_agent; print(\"agent sees both\")'"
    " > /tmp_workspace/results/agent.txt"
)


def _task_file(root: Path, warmup: list[str], grader: str = GRADER) -> Path:
    ws = root / "workspace" / "05_Creative_Synthesis" / "task_7_clean_grader"
    (ws / "gt").mkdir(parents=True)
    make_wheel(ws / "exec", TEXT_KIT_DIST, TEXT_KIT_MODULE, "agent's")
    folder = root / "tasks" / "05_Creative_Synthesis"
    folder.mkdir(parents=True)
    lines = "\n".join(warmup)
    (folder / f"{TASK_ID}.md").write_text(
        f"---\nid: {TASK_ID}\nname: clean grader\ncategory: 05_Creative_Synthesis\n---\n\n"
        "## Prompt\n\nInstall what you like.\n\n"
        f"## Automated Checks\n\n```python\n{grader.strip()}\n```\n\n"
        "## Workspace Path\n\n```\nworkspace/05_Creative_Synthesis/task_7_clean_grader\n```\n\n"
        f"## Warmup\n\n```bash\n{lines}\n```\n"
    )
    return root / "tasks"


@pytest.fixture(params=["bwrap", "docker"])
def backend(request: pytest.FixtureRequest, base_rootfs: Path) -> str:
    if request.param == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    if request.param == "docker":
        request.getfixturevalue("docker_image")
    return request.param


async def test_agent_installs_do_not_reach_the_grader(tmp_path, backend, scripted_server):
    # a warm snapshot of this run's own (a tag in its key): the snapshots' cache is shared by
    # every test process on the machine, and this test removes its snapshot at the end: with
    # a shared key, another process's trial lost its overlay's layer mid-trial ("cannot mount
    # the overlay for the sandbox: No such file or directory")
    tag = secrets.token_hex(4)
    warmup = [
        f"pip install --root-user-action=ignore {PROBE_DIST}  # {tag}",
        "mkdir -p /tmp_workspace/results",
    ]
    [task] = load_tasks(_task_file(tmp_path / "bench", warmup))
    # a grader beyond the standard library: the reader gives it WildClawBench's grader
    # environment, which it does not use on an environment
    assert task.metadata["grader_imports"] == [PROBE_MODULE] and task.grader.requirements
    make_simple_index(
        tmp_path / "index", [make_wheel(tmp_path / "w", PROBE_DIST, PROBE_MODULE, PROBE_VALUE)]
    )
    index = FolderServer(tmp_path / "index")
    srv = scripted_server([reply(tool_calls=[call("exec", {"command": AGENT})]), reply("done")])
    cfg = TrialConfig(agent="native", model="scripted/x", sandbox=backend, environment="base")
    services = TrialServices(
        model=srv.chat_model(),
        setup_network=SetupNetwork(network=True, env={"PIP_INDEX_URL": index.url + "/simple"}),
    )
    key = None
    try:
        result, folder = await run_trial(task, cfg, tmp_path / "out", services=services)
        key = result.versions.get("warm_snapshot")
        assert result.error is None, (result.error, (folder / "agent.log").read_text())
        assert result.score is not None
        assert result.score.subscores == {
            "warmup_package": 1.0,  # the grader imported what the warmup installed
            "agent_saw_its_installs": 1.0,  # the agent's installs worked in its sandbox
            "agent_pip_install": 0.0,  # and none of them reached the grader
            "agent_site_file": 0.0,
            "overall_score": 1.0,
        }
        # the grader ran on the system's python3 (a grader environment, a venv, would not
        # see the system's site-packages, where the warmup installed the probe)
        assert result.score.score == 1.0 and key
    finally:
        index.stop()
        if key:
            shutil.rmtree(warm_dir() / key, ignore_errors=True)
            if backend == "docker":
                subprocess.run(["docker", "rmi", "-f", f"clawrig-warm:{key}"], capture_output=True)


def test_the_wildclaw_environment_has_what_graders_import_beyond_warmups():
    """WildClawBench graders run on the wildclaw environment's python3 there: it holds the
    packages (and pins) of the grader environment they get without one."""
    pip = load_env_spec("wildclaw").pip
    assert set(WILDCLAW_GRADER_REQUIREMENTS) <= set(pip)
    assert graders_use_environment("wildclaw") and not graders_use_environment("dataclaw")


def _config(tmp_path: Path, **trial) -> JobConfig:
    return JobConfig(suite_path=tmp_path, trial=TrialConfig(**trial))


def test_preflight_looks_where_the_grader_runs(tmp_path, base_rootfs, monkeypatch):
    """The import check reads the environment's files and the task's warmup; on the host's
    system it checks the grader environment, as before."""
    cache = tmp_path / "env-cache"  # the built environments, no warm snapshot made yet
    cache.mkdir()
    from clawrig.env.store import env_cache_root

    (cache / "environments").symlink_to(env_cache_root() / "environments")
    monkeypatch.setenv("CLAWRIG_ENV_CACHE_DIR", str(cache))
    grader = "def grade(**kwargs):\n    import clawrig_text_kit, fitz\n    return {}\n"
    warmup = [f"pip install -q {TEXT_KIT_DIST} 2>/dev/null", "mkdir -p /tmp_workspace/results"]
    [task] = load_tasks(_task_file(tmp_path / "bench", warmup, grader))
    on_env = _config(tmp_path, environment="base")
    choice = resolve_environment("bwrap", "base", None, "wildclaw", build=False)
    assert choice.rootfs and choice.rootfs.resolve() == base_rootfs.resolve()
    assert grader_on_system(choice, "bwrap", "wildclaw")
    assert not grader_on_system(choice, "bwrap", "fourfolder")  # its declared environment
    host = resolve_environment("bwrap", "host", None, "wildclaw", build=False)
    assert not grader_on_system(host, "bwrap", "wildclaw")
    # base's python3 has pip (python3-pip), read from its root file system
    assert "pip" in tree_modules(base_rootfs) and "fitz" not in tree_modules(base_rootfs)
    # the snapshot is not made: the warmup's pip line counts (fitz is nowhere)
    modules = grading_modules(choice, "bwrap", task.warmup)
    assert modules.assumed == {"clawrig_text_kit"} and modules.agent_only == set()
    [line] = note_grader_imports([task], on_env)
    assert line == (
        f"task {TASK_ID}: grader imports fitz, which the base environment's python3 with the "
        "task's warmup lacks; install them in the task's warmup (pip install ...) or the "
        "environment"
    )
    # without warm snapshots the warmup installs in the agent's sandbox only
    [line] = note_grader_imports(
        [task], _config(tmp_path, environment="base", warm_snapshots=False)
    )
    assert line == (
        f"task {TASK_ID}: grader imports clawrig_text_kit, fitz, which the base environment's "
        "python3 with the task's warmup lacks: the warmup installs clawrig_text_kit in the "
        "agent's sandbox only (--no-warm: no warm snapshot), and the grader runs in a fresh one"
    )
    # on the host's read-only system: WildClawBench's grader environment, as before
    [line] = note_grader_imports([task], _config(tmp_path, environment="host"))
    assert line.startswith(
        f"task {TASK_ID}: grader imports clawrig_text_kit, fitz, which its grading environment "
        "does not have (it has Pillow==13.0.0, "
    )
    # a made snapshot is read from its files: what the install pulled in counts, named or not
    from clawrig.env.warm import split_warmup, warm_key

    install, _ = split_warmup(task.warmup)
    assert install == warmup[:1]  # output thrown away: still an install line
    upper = warm_dir() / warm_key("bwrap", choice.environment, install) / "upper"
    site = upper / "usr/local/lib/python3.11/dist-packages"
    (site / "fitz").mkdir(parents=True)
    (site / "clawrig_text_kit.py").write_text("")
    (upper.parent / "warm.json").write_text(json.dumps({"lines": install}))
    assert grading_modules(choice, "bwrap", task.warmup).found >= {
        "pip",
        "fitz",
        "clawrig_text_kit",
    }
    assert note_grader_imports([task], on_env) == []


CLAWRIG = str(Path(sys.executable).with_name("clawrig"))
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wildclaw-patterns"


def test_cli_says_it_before_any_sandbox_starts(tmp_path, base_rootfs):
    """`clawrig run`: missing workspace data refuses the job (one line, exit 2, nothing
    written); a grader importing what the environment lacks gets its one line before the
    trial, which then fails on exactly that import."""
    suite = tmp_path / "wp"
    shutil.copytree(EXAMPLE, suite)
    shutil.rmtree(suite / "workspace" / "04_Search_Retrieval")
    env = {k: v for k, v in os.environ.items() if k not in ("JUDGE_MODEL", "OPENROUTER_API_KEY")}
    run = [CLAWRIG, "run", "--agent", "nop", "--env", "base"]
    r = subprocess.run(
        [*run, str(suite / "tasks"), "-o", str(tmp_path / "out")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    [error] = [ln for ln in r.stderr.splitlines() if ln.startswith("clawrig: error:")]
    assert error == (
        "clawrig: error: task 04_Search_Retrieval_task_5_web_lookup: workspace data missing: "
        f"{suite}/workspace/04_Search_Retrieval/task_5_web_lookup: download the WildClawBench "
        f"workspace data (Hugging Face dataset internlm/WildClawBench) under {suite} (or pass "
        "--root); a task of your own: make it"
    )
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()
    # a grader importing a module nothing installs: its line, then the trial
    bench = tmp_path / "bench"
    _task_file(bench, ["mkdir -p /tmp_workspace/results"], "def grade(**kw):\n    import fitz\n")
    r = subprocess.run(
        [*run, str(bench / "tasks"), "-o", str(tmp_path / "out2")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = r.stdout + r.stderr
    note = (
        f"task {TASK_ID}: grader imports fitz, which the base environment's python3 with the "
        "task's warmup lacks"
    )
    assert note in output and "Traceback" not in output, output
    [result] = (tmp_path / "out2").glob("*/*/result.json")
    error = json.loads(result.read_text())["error"]
    assert error["phase"] == "grading" and "'fitz'" in error["message"], error


def test_preflight_reads_a_docker_images_layers(docker_image):
    """On Docker the grader runs on the image's python3: its modules are read from the image's
    overlay2 layers (``docker image inspect``), the warmup's from its pip lines until made."""
    choice = resolve_environment("docker", "base", None, "wildclaw", build=False)
    assert choice.image == docker_image and grader_on_system(choice, "docker", "fourfolder")
    modules = grading_modules(choice, "docker", [f"pip install {TEXT_KIT_DIST}"])
    assert modules.found is not None and "pip" in modules.found  # Debian's python3-pip
    assert "fitz" not in modules.found and modules.lacks(["fitz", TEXT_KIT_MODULE]) == ["fitz"]
