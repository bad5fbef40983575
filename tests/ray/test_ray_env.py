"""What the driver holds reaches trials on nodes (tests/ray/conftest.py's two-node cluster):
the job's ``.env`` file (a variable a task's ``## Env`` passes into its grader, let through by
``CLAWRIG_PASS_ENV`` in that file) and ``--judge-cache`` (graders' judge calls on nodes are
answered from the driver's cache; new replies are appended to it once).

The scripted server answers the agent (solve_even_tasks) and the judge (a score from what the
agent wrote); its request log is the independent count of judge calls."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import node_ids, runner_fixtures, solve_even_tasks, write_mini_bench

from clawrig.runner.executors.ray import NODE_LOG_LINE, node_environment
from clawrig.runner.job import Job
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.testing.scripted_server import reply

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(600)]

NAME, VALUE = "CLAWRIG_TEST_GREETING", "hello-from-env"
JUDGE_SCORE = {True: 0.8, False: 0.2}
"""The scripted judge's score for a right (ok-k) / wrong answer."""
GRADE = """
import json, os, urllib.request
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    got = open(os.path.join(workspace_path, "results", "out.txt")).read().strip()
    want = open(os.path.join(workspace_path, "gt", "expected.txt")).read().strip()
    body = {"model": os.environ["JUDGE_MODEL"], "temperature": 0,
            "messages": [{"role": "user", "content": f"Rate: {got} (wanted {want})"}]}
    req = urllib.request.Request(
        os.environ["OPENROUTER_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENROUTER_API_KEY"],
                 "Content-Type": "application/json"})
    answer = json.loads(urllib.request.urlopen(req, timeout=60).read())
    judge = json.loads(answer["choices"][0]["message"]["content"])["score"]
    greeting = 1.0 if os.environ.get("CLAWRIG_TEST_GREETING") == "hello-from-env" else 0.0
    return {"judge": judge, "greeting": greeting, "overall_score": judge * greeting}
"""


def _bench(root: Path, n: int) -> Path:
    bench = write_mini_bench(root, n)
    for md in (bench / "tasks").rglob("*.md"):
        text = md.read_text().replace(runner_fixtures.GRADE.strip(), GRADE.strip())
        md.write_text(text + f"\n## Env\n\n```\n{NAME}\n```\n")
    return bench


def _answer(request: dict[str, Any]) -> Any:
    if request.get("tools"):
        return solve_even_tasks(request)
    text = request["messages"][-1]["content"]
    return reply(json.dumps({"score": JUDGE_SCORE[text.startswith("Rate: ok-")]}))


def _judge_calls(srv: Any) -> int:
    return sum(1 for r in srv.requests if not r.get("tools"))


def _scores(out: Path) -> dict[str, dict[str, float]]:
    """task id -> the grader's sub-scores (score.json of each trial)."""
    found = {}
    for rj in out.glob("*/*/result.json"):
        result = json.loads(rj.read_text())
        found[result["task_id"]] = result["score"]["subscores"]
    return found


def test_env_file_and_judge_cache_reach_graders_on_nodes(
    ray_cluster, scripted_server, tmp_path, monkeypatch
):
    n = 4
    bench = _bench(tmp_path / "bench", n)
    srv = scripted_server(responder=_answer)
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    for name in (NAME, "CLAWRIG_PASS_ENV"):  # the job loads them: gone after the test
        monkeypatch.delenv(name, raising=False)
    env_file = tmp_path / "job.env"
    env_file.write_text(
        f"CLAWRIG_PASS_ENV={NAME}\n{NAME}={VALUE}\nOPENROUTER_API_KEY=sk-never-on-a-node\n"
    )
    cache = tmp_path / "judge_cache.jsonl"
    cache.touch()

    def job(out: Path, **kw: Any) -> dict[str, Any]:
        trial = TrialConfig(model="scripted/test", judge="scripted/judge", judge_cache=cache)
        cfg = JobConfig(
            suite_path=bench / "tasks", output=out, trial=trial, env_file=env_file, **kw
        )
        return Job(cfg).run()

    ray = {"executor": "ray", "ray_address": ray_cluster.address}
    first = job(tmp_path / "first", **ray)
    assert _judge_calls(srv) == n and len(cache.read_text().splitlines()) == n
    again = job(tmp_path / "again", **ray)
    assert _judge_calls(srv) == n  # every judge call answered from the driver's cache
    assert len(cache.read_text().splitlines()) == n
    local = job(tmp_path / "local", parallel=2)
    assert _judge_calls(srv) == n

    # even tasks wrote ok-k (judge 0.8), odd ones WRONG (0.2); the .env's value reached
    # every grader (greeting 1.0)
    want = {
        f"01_Productivity_Flow_task_{k}_echo": {
            "judge": JUDGE_SCORE[k % 2 == 0],
            "greeting": 1.0,
            "overall_score": JUDGE_SCORE[k % 2 == 0],
        }
        for k in range(1, n + 1)
    }
    for out in ("first", "again", "local"):
        assert _scores(tmp_path / out) == want, out
    # the judge calls answered from the cache are recorded as cached, on nodes as locally
    for out, cached in (("first", False), ("again", True), ("local", True)):
        recs = [
            json.loads(line)
            for f in (tmp_path / out).glob("*/*/judge_chat.jsonl")
            for line in f.read_text().splitlines()
        ]
        assert len(recs) == n and all(r["cached"] is cached for r in recs), out
    mean = sum(s["overall_score"] for s in want.values()) / n
    for summary in (first, again, local):
        assert summary["error_count"] == 0 and math.isclose(summary["overall_score"], mean)
    prefix = NODE_LOG_LINE.split("{")[0]
    used = {
        line[len(prefix) :].strip()
        for log in (tmp_path / "again").glob("*/*/agent.log")
        for line in log.read_text().splitlines()
        if line.startswith(prefix)
    }
    assert used == node_ids(ray_cluster)


def test_node_environment_keeps_keys_and_model_settings_on_the_driver(tmp_path, monkeypatch):
    env_file = tmp_path / ".env"
    env_file.write_text(
        "CLAWRIG_PASS_ENV=DATA_DIR,GITHUB_TOKEN\nDATA_DIR=/data\nOPENROUTER_API_KEY=sk-x\n"
        "JUDGE_MODEL=openrouter/j\nPIP_INDEX_URL=http://mirror/simple\nSERVICE_PASSWORD=pw\n"
    )
    for line in env_file.read_text().splitlines():
        name, _, value = line.partition("=")
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-x")
    monkeypatch.setenv("PIP_INDEX_URL", "http://driver-wins/simple")  # set before the file
    assert node_environment(env_file) == {
        "CLAWRIG_PASS_ENV": "DATA_DIR,GITHUB_TOKEN",
        "DATA_DIR": "/data",
        "PIP_INDEX_URL": "http://driver-wins/simple",
    }
