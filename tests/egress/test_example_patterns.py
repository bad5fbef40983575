"""examples/wildclaw-patterns end to end with the scripted model: warmups that install from a
pip index and an npm registry on loopback (through the egress proxy, setup policy
``registries`` = this machine's configured index and registry) and from Debian's mirror with
apt-get, a skill copied to /root/skills/<name>, a skill script that calls an LLM with the
task's OPENROUTER_* settings (served by the gateway), a grader that asks an LLM judge (through
the judge proxy), and a web task answered from the example's own corpus (``web/``, offline).

On the host's read-only system (bwrap, no snapshots: each trial's egress.jsonl shows its
installs), and on the ``base`` environment with warm snapshots on bwrap and on Docker, each task
run twice: the second run of a task starts from the snapshot the first made."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from egress_helpers import OUTSIDE

from clawrig.llm.gateway import RECORD_FILE
from clawrig.runner.regrade import regrade_trial
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_tasks

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wildclaw-patterns"
_spec = importlib.util.spec_from_file_location("wildclaw_patterns", EXAMPLE / "scripted.py")
scripted = importlib.util.module_from_spec(_spec)  # the example's scripted agent and judge
_spec.loader.exec_module(scripted)
responder, judge, QUESTION = scripted.responder, scripted.judge, scripted.QUESTION

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap"),
]


async def test_patterns_suite(scripted_server, tmp_path, monkeypatch, package_index, npm_registry):
    monkeypatch.setenv("PIP_INDEX_URL", package_index)  # this machine's pip index
    monkeypatch.setenv("npm_config_registry", npm_registry)  # and npm registry
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-real-key-never-in-a-sandbox")
    # apt-get needs a writable system: not the host's; without an environment a WildClawBench
    # grader gets clawrig's grader environment, which lacks the package the grader-package
    # task's warmup installs (that task runs on an environment below)
    tasks = [
        t
        for t in load_tasks(EXAMPLE / "tasks")
        if "apt_tool" not in t.id and "grader_package" not in t.id
    ]
    srv = scripted_server(responder=responder)
    judge_srv = scripted_server(responder=judge)
    job = JobConfig(
        suite_path=EXAMPLE / "tasks",
        output=tmp_path / "out",
        web_dir=EXAMPLE / "web",
        # the host's system and no warm snapshot: the installs run in each trial, so its
        # egress.jsonl shows them (tests/env covers environments and warm snapshots)
        trial=TrialConfig(
            agent="native",
            model="scripted/x",
            environment="host",
            warm_snapshots=False,
            web="corpus",
        ),
    )
    summary = await scripted.run_suite(job, tasks, srv, judge_srv)
    out = tmp_path / "out"
    assert len(summary["tasks"]) == 4
    for row in summary["tasks"]:
        log = next(out.glob(f"{row['task_id']}/*/agent.log")).read_text()
        assert row["error"] is None and row["score"] == 1.0, (row, log)
    # the judge-using grader reached the judge through the judge proxy (recorded)
    judged = next(out.glob("*judged_summary/*/"))
    [judge_call] = [json.loads(x) for x in (judged / "judge_chat.jsonl").read_text().splitlines()]
    assert "names the cause (cache)" in json.dumps(judge_call)
    assert json.loads((judged / "score.json").read_text())["subscores"]["judge"] == 1.0
    # re-graded with the judge server stopped: the proxy answers from the recorded call
    judge_srv.stop()
    report = await regrade_trial(judged)
    assert report.same and report.after.subscores["judge"] == 1.0
    assert report.judge_cache == {"hits": 1, "misses": 0}
    # npm installed from the registry configured here, through the proxy, in the setup phase
    npm_log = next(out.glob("*npm_tool/*/egress.jsonl")).read_text().splitlines()
    assert npm_log
    assert {(json.loads(x)["phase"], json.loads(x)["verdict"]) for x in npm_log} == {
        ("setup", "allowed")
    }
    folder = next(out.glob("*skill_llm/*/"))
    score = json.loads((folder / "score.json").read_text())
    assert score["subscores"] == {"answer": 1.0, "probe": 1.0, "overall_score": 1.0}
    # the skill's call went through the gateway: recorded with the agent's two turns
    records = [json.loads(x) for x in (folder / RECORD_FILE).read_text().splitlines()]
    assert len(records) == 3
    asked = [r for r in records if r["request"]["messages"][0]["content"] == QUESTION]
    assert len(asked) == 1
    usage = json.loads((folder / "usage.json").read_text())
    assert usage["request_count"] == 3  # the skill's call counts in the trial's usage
    # the warmup's install went through the proxy in the setup phase; nothing in the agent's
    egress = [json.loads(x) for x in (folder / "egress.jsonl").read_text().splitlines()]
    assert egress and {(r["host"], r["phase"], r["verdict"]) for r in egress} == {
        (OUTSIDE, "setup", "allowed")
    }
    assert sum(r["bytes_down"] for r in egress) > 500  # the index page and the wheel
    # no real key in anything the sandbox produced
    for path in folder.rglob("*"):
        if path.is_file():
            assert "sk-real-key" not in path.read_text(errors="replace"), path


@pytest.fixture(params=["bwrap", "docker"])
def on_base(request: pytest.FixtureRequest, base_rootfs: Path, tmp_path: Path, monkeypatch):
    """The ``base`` environment on each backend (Docker: its image, the Docker tests' one),
    with a warm-snapshot cache of this test's own (the built environments are shared), so the
    first run of a task here always makes its snapshot."""
    if request.param == "docker":
        request.getfixturevalue("docker_image")
    from clawrig.env.store import env_cache_root

    cache = tmp_path / "env-cache"
    cache.mkdir()
    (cache / "environments").symlink_to(env_cache_root() / "environments")
    monkeypatch.setenv("CLAWRIG_ENV_CACHE_DIR", str(cache))
    return request.param


async def test_patterns_suite_on_an_environment_twice(
    on_base, scripted_server, tmp_path, monkeypatch, package_index
):
    """Every task but the npm one (``base`` has no node) twice (``--runs 2``) on the base
    environment: pip and apt-get install into the writable system once, in a warm snapshot;
    the other run of the task starts from it (same snapshot, no install traffic). The
    grader-package task's grader imports the package its warmup installed (on the system's
    python3 with the snapshot, in the clean room): its score comes from that package."""
    monkeypatch.setenv("PIP_INDEX_URL", package_index)
    tasks = [t for t in load_tasks(EXAMPLE / "tasks") if "npm_tool" not in t.id]
    srv = scripted_server(responder=responder)
    judge_srv = scripted_server(responder=judge)
    job = JobConfig(
        suite_path=EXAMPLE / "tasks",
        output=tmp_path / "out",
        web_dir=EXAMPLE / "web",
        runs=2,
        parallel=2,
        trial=TrialConfig(
            agent="native", model="scripted/x", sandbox=on_base, environment="base", web="corpus"
        ),
    )
    keys: set[str] = set()
    try:
        summary = await scripted.run_suite(job, tasks, srv, judge_srv)
        results = {
            p.parent: json.loads(p.read_text()) for p in (tmp_path / "out").glob("*/*/result.json")
        }
        keys = {
            r["versions"]["warm_snapshot"]
            for r in results.values()
            if r["versions"].get("warm_snapshot")
        }
        assert len(results) == 10
        for folder, r in results.items():
            assert r["error"] is None and r["score"]["score"] == 1.0, (
                folder,
                r["error"],
                r["score"],
            )
        for slug, hosts in (("skill_llm", {OUTSIDE}), ("apt_tool", {"deb.debian.org"})):
            runs = [(f, r) for f, r in results.items() if slug in f.parent.name]
            assert len(runs) == 2
            [key] = {r["versions"]["warm_snapshot"] for _, r in runs}  # one snapshot, both runs
            # made once: one run's egress log holds the installs, the other's none
            setups = []
            for folder, _ in runs:
                log = folder / "egress.jsonl"
                lines = log.read_text().splitlines() if log.is_file() else []
                records = [json.loads(x) for x in lines]
                setups.append({e["host"] for e in records if e["phase"] == "setup"})
            assert sorted(setups, key=len) == [set(), hosts], setups
        assert summary["tasks"] and all(row["score"] == 1.0 for row in summary["tasks"])
        # the grader-package task: the poem's word count as the warmup's package counts it
        poem = EXAMPLE / "workspace/05_Creative_Synthesis/task_6_grader_package/gt/poem.txt"
        for folder in (f for f in results if "grader_package" in f.parent.name):
            words = (folder / "task_output" / "words.txt").read_text().strip()
            assert words == str(len(poem.read_text().split())) == "30"
            assert json.loads((folder / "score.json").read_text())["subscores"] == {
                "word_count": 1.0,
                "overall_score": 1.0,
            }
    finally:
        if on_base == "docker":
            for key in keys:
                subprocess.run(["docker", "rmi", "-f", f"clawrig-warm:{key}"], capture_output=True)
