"""``--executor ray`` on a real two-node Ray cluster (tests/ray/conftest.py): a 16-trial job
spread over both nodes with the same summary as the local executor's, a node killed mid-job, the
driver killed (SIGKILL) then ``--resume``, and the budget stopping a job across nodes.

Every model call is answered by the scripted OpenAI-compatible server at $0.01 a request
(solve_even_tasks: 2 requests per trial), so the server's own request count is the independent
measure of what the job spent."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import (
    COST,
    NODE_CPUS,
    assert_even_job,
    comparable,
    env_for,
    job_config,
    model_servers,
    node_ids,
    solve_even_tasks,
    trials_of,
    write_mini_bench,
)

from clawrig.leftovers import owner_pid, pid_alive
from clawrig.runner.executors import ray as ray_executor
from clawrig.runner.executors.ray import NODE_LOG_LINE
from clawrig.runner.job import Job
from clawrig.testing.scripted_server import ScriptedServer

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(600)]

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))


def _nodes_used(out: Path) -> set[str]:
    used = set()
    prefix = NODE_LOG_LINE.split("{")[0]
    for log in out.glob("*/*/agent.log"):
        for line in log.read_text().splitlines():
            if line.startswith(prefix):
                used.add(line[len(prefix) :].strip())
    return used


@pytest.fixture
def model_server():
    with model_servers(solve_even_tasks) as make:
        yield make


def test_sixteen_trials_spread_over_both_nodes_with_the_local_summary(
    ray_cluster, model_server, tmp_path, monkeypatch
):
    bench = write_mini_bench(tmp_path / "bench", 8)
    srv = model_server()
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    ray_out = tmp_path / "ray"
    cfg = job_config(bench, ray_out, runs=2, executor="ray", ray_address=ray_cluster.address)
    scratch = Path(tempfile.gettempdir())
    before = set(scratch.glob("clawrig-*"))
    on_ray = Job(cfg).run()
    ray_requests = len(srv.requests)
    # the node workers (on a cluster that outlives the job) leave no folder or mount behind:
    # ended by ray.kill, they left their trial, scratch and device folders and a tmpfs
    # mounted (helper-141)
    left = sorted(  # (folders of live processes, this driver's and other tests', are theirs)
        str(f)
        for f in set(scratch.glob("clawrig-*")) - before
        if (pid := owner_pid(f.name)) is not None and not pid_alive(pid)
    )
    assert left == [], left
    mounted = Path("/proc/self/mountinfo").read_text()
    assert not [f for f in left if f in mounted]
    local = Job(job_config(bench, tmp_path / "local", runs=2, parallel=2 * NODE_CPUS)).run()

    # the trial folders hold what a local trial's does (model calls recorded on the node)
    assert_even_job(on_ray, ray_requests, ray_out)
    assert _nodes_used(ray_out) == node_ids(ray_cluster)  # each node ran some
    assert comparable(on_ray) == comparable(local)


def _children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def test_a_node_killed_mid_job_reruns_its_trials_elsewhere_once(
    ray_cluster, model_server, tmp_path, monkeypatch
):
    victim = ray_cluster.add_node(num_cpus=NODE_CPUS)
    ray_cluster.wait_for_nodes()
    raylet = victim.all_processes["raylet"][0].process.pid
    bench = write_mini_bench(tmp_path / "bench", 8)
    srv = model_server(delay=1.0)
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    out = tmp_path / "out"
    killed = threading.Event()

    def kill_when_busy() -> None:
        # once a trial on the victim has had a model reply (recorded in its node-local folder,
        # clawrig-ray-trials-<worker pid>-*), SIGKILL the node's worker processes and raylet
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            workers = _children(raylet)
            calls = [
                f
                for pid in workers
                for f in Path(tempfile.gettempdir()).glob(
                    f"clawrig-ray-trials-{pid}-*/*/.tmp-*/model_calls.jsonl"
                )
                if f.stat().st_size > 0
            ]
            if calls:
                for pid in workers:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                ray_cluster.remove_node(victim, allow_graceful=False)
                killed.set()
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_busy, daemon=True)
    killer.start()
    summary = Job(
        job_config(bench, out, runs=2, executor="ray", ray_address=ray_cluster.address)
    ).run()
    killer.join(timeout=60)
    assert killed.is_set()

    trials = trials_of(out)
    assert len(trials) == 16 and all(len(v) == 1 for v in trials.values())
    assert summary["error_count"] == 0 and summary["evaluated_count"] == 16
    assert math.isclose(summary["overall_score"], (8 * 1.0 + 8 * 0.25) / 16)
    # what the lost attempts spent counts once, in the trial that ran again: the job's total
    # is every request the model answered
    total = summary["efficiency"]["total_cost_usd"]
    assert math.isclose(total, len(srv.requests) * COST)
    # (result.json keeps the lost attempt's spend apart, as retried_usage, since fa0d3df)
    rerun = [r for (r,) in trials.values() if r["retried_usage"]["request_count"] > 0]
    assert rerun, "no trial lost a started attempt with the node"
    for r in rerun:
        for usage in (r["usage"], r["retried_usage"]):
            assert math.isclose(usage["cost_usd"], usage["request_count"] * COST)
        assert r["usage"]["request_count"] == 2  # the attempt that ran to the end
    assert victim.node_id not in node_ids(ray_cluster)


def test_driver_killed_then_resume_finishes_on_the_cluster(ray_cluster, model_server, tmp_path):
    bench = write_mini_bench(tmp_path / "bench", 6)
    srv = model_server(delay=0.2)
    out = tmp_path / "out"
    args = [
        CLAWRIG,
        "run",
        str(bench / "tasks"),
        "-m",
        "scripted/test",
        "--runs",
        "2",
        "-o",
        str(out),
        "--executor",
        "ray",
        "--ray-address",
        ray_cluster.address,
    ]
    proc = subprocess.Popen(
        args,
        env=env_for(srv),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    progress = out / "progress_scripted_test.json"
    deadline = time.monotonic() + 300
    done = 0
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            done = len(json.loads(progress.read_text())["completed"])
        except (OSError, ValueError, KeyError):
            done = 0
        # (and a running trial's answered call recorded by the driver, to be kept)
        recorded = [f for f in out.glob("*/.tmp-ray-*/model_calls.jsonl") if f.stat().st_size]
        if done >= 3 and recorded:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert 3 <= done < 12

    r = subprocess.run(
        args + ["--resume"], env=env_for(srv), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    trials = trials_of(out)
    assert len(trials) == 12 and all(len(v) == 1 for v in trials.values())
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["error_count"] == 0 and len(summary["tasks"]) == 12
    assert math.isclose(summary["overall_score"], (6 * 1.0 + 6 * 0.25) / 12)
    assert not progress.exists()
    # what the trials the kill cut had spent counts: the driver records each attempt's calls
    # until its folder comes back, and --resume sets those records aside (they were lost with
    # the nodes' folders: helper-141). The job's total is every request the model received
    # but those in flight when the driver died (one per running trial at most: received,
    # never answered to anyone)
    total = summary["efficiency"]["total_cost_usd"]
    kept = list((out / "_retried").glob("*__ray-r*/model_calls.jsonl"))
    assert kept and all(f.stat().st_size > 0 for f in kept), kept
    slots = len(node_ids(ray_cluster)) * NODE_CPUS
    received = len(srv.requests) * COST
    assert received - slots * COST - 1e-9 <= total <= received + 1e-9, (total, received)


def test_budget_stops_the_job_across_nodes(ray_cluster, model_server, tmp_path, monkeypatch):
    bench = write_mini_bench(tmp_path / "bench", 20)
    srv = model_server(delay=0.1)
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    out = tmp_path / "out"
    budget = 0.10
    cfg = job_config(
        bench, out, executor="ray", ray_address=ray_cluster.address, budget_usd=budget, parallel=1
    )
    job = Job(cfg)
    summary = job.run()
    assert summary["budget_stopped"] and summary["not_run"] > 0
    # a trial's share of the budget is over the cluster's slots, not -p (not used with Ray:
    # docs/ray.md); it was budget / -p (helper-141)
    assert job.services.gateway is not None
    assert job.services.gateway.budget_share_usd == pytest.approx(
        budget / (len(node_ids(ray_cluster)) * NODE_CPUS)
    )
    spent = len(srv.requests) * COST
    assert math.isclose(summary["efficiency"]["total_cost_usd"], spent)
    # the driver's gateway refuses every request once the job's spend reached the budget:
    # past it, at most one request per busy slot was already on its way
    slots = len(node_ids(ray_cluster)) * NODE_CPUS
    assert budget <= spent <= budget + slots * COST + 1e-9
    assert len(_nodes_used(out)) == len(node_ids(ray_cluster))


def test_a_node_that_joins_mid_job_takes_trials(ray_cluster, model_server, tmp_path, monkeypatch):
    bench = write_mini_bench(tmp_path / "bench", 12)
    srv = model_server(delay=1.0)
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    out = tmp_path / "out"
    before = node_ids(ray_cluster)
    done: dict[str, Any] = {}

    def run() -> None:
        cfg = job_config(bench, out, runs=2, executor="ray", ray_address=ray_cluster.address)
        try:
            done["summary"] = Job(cfg).run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            done["error"] = exc

    job = threading.Thread(target=run, daemon=True)
    job.start()
    # once the job has finished a trial (its workers are busy), a node joins the cluster
    # (from this thread: a Ray node registers signal handlers)
    progress = out / "progress_scripted_test.json"
    deadline = time.monotonic() + 300
    joined = None
    while joined is None and job.is_alive() and time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if json.loads(progress.read_text())["completed"]:
                joined = ray_cluster.add_node(num_cpus=NODE_CPUS)
        time.sleep(0.05)
    try:
        job.join(timeout=600)
        assert joined is not None, "the job ended before a node could join"
        assert "error" not in done, done.get("error")
        summary = done["summary"]
        assert joined.node_id not in before
        trials = trials_of(out)
        assert len(trials) == 24 and all(len(v) == 1 for v in trials.values())
        assert summary["error_count"] == 0
        assert math.isclose(summary["overall_score"], (12 * 1.0 + 12 * 0.25) / 24)
        used = _nodes_used(out)
        assert joined.node_id in used and before <= used  # the joined node's worker ran some
    finally:
        if joined is not None:
            ray_cluster.remove_node(joined)


def test_a_node_the_cluster_still_lists_after_it_left_takes_no_trials(
    ray_cluster, model_server, tmp_path, monkeypatch
):
    # CI at 3d39779: the node a test had just removed was still listed alive by ray.nodes(),
    # its pinned worker could not be placed (ActorUnschedulableError) and `clawrig run` died
    # with a traceback. Such a node is skipped like one that died while starting
    import ray

    listed = ray.nodes
    gone = {"NodeID": "ab" * 28, "Alive": True, "Resources": {"CPU": float(NODE_CPUS)}}
    monkeypatch.setattr(ray, "nodes", lambda: [*listed(), gone])
    bench = write_mini_bench(tmp_path / "bench", 4)
    srv = model_server()
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    out = tmp_path / "out"
    summary = Job(job_config(bench, out, executor="ray", ray_address=ray_cluster.address)).run()
    assert summary["error_count"] == 0 and summary["evaluated_count"] == 4
    assert _nodes_used(out) <= node_ids(ray_cluster) and gone["NodeID"] not in _nodes_used(out)


ECHO_GRADE = """
import os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    path = os.path.join(workspace_path, "results", "out.txt")
    got = open(path, encoding="utf-8", errors="surrogateescape").read()
    return {"overall_score": 0.0, "got": got}
"""


def test_a_result_holding_a_lone_surrogate_comes_back_from_the_node(
    ray_cluster, tmp_path, monkeypatch
):
    # a red-team finding (the gap 1406639 left): the agent writes a byte that is not UTF-8
    # and the grader echoes it ("\udcff" in the verdict); the driver read the node's
    # result.json text with pydantic's parser, which refuses the escape, so the trial ended in
    # an error on every attempt and was never scored
    from clawrig.testing.scripted_server import call, reply

    bench = write_mini_bench(tmp_path / "bench", 1)
    (md,) = (bench / "tasks").rglob("*.md")
    text = md.read_text()
    start, end = text.index("```python\n") + len("```python\n"), text.index("\n```\n\n## Work")
    md.write_text(text[:start] + ECHO_GRADE.strip() + text[end:])
    command = "mkdir -p /tmp_workspace/results && printf 'x\\377' > /tmp_workspace/results/out.txt"

    def respond(request: dict[str, Any]) -> Any:
        if any(m.get("role") == "tool" for m in request["messages"]):
            return reply("done")
        return reply(tool_calls=[call("exec", {"command": command})])

    srv = ScriptedServer(responder=respond).start()
    try:
        monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
        out = tmp_path / "out"
        cfg = job_config(bench, out, executor="ray", ray_address=ray_cluster.address)
        summary = Job(cfg).run()
    finally:
        srv.stop()
    assert summary["error_count"] == 0, (summary["tasks"], sorted(out.rglob("*")))
    ((result,),) = trials_of(out).values()
    assert summary["evaluated_count"] == 1 and summary["overall_score"] == 0.0
    assert result["attempts"] == 1 and result["score"]["subscores"]["got"] == "x\udcff"


def test_without_an_address_the_job_starts_its_own_cluster(ray_cluster, model_server, tmp_path):
    """``--executor ray`` without ``--ray-address`` while another Ray cluster runs on the
    machine (this module's): Ray, given no address, joins that one (the last cluster started,
    /tmp/ray/ray_current_cluster), and the job's trials ran on another job's nodes with that
    job's code (a new user's finding). Now the job starts a one-machine cluster of its own."""
    bench = write_mini_bench(tmp_path / "bench", 2)
    out = tmp_path / "out"
    env = {k: v for k, v in env_for(model_server()).items() if k != "RAY_ADDRESS"}
    r = subprocess.run(
        [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-o", str(out),
         "--executor", "ray"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    used = _nodes_used(out)
    assert len(used) == 1 and not used & node_ids(ray_cluster), used


def test_every_node_worker_gone_stops_the_job_with_its_summary(
    ray_cluster, model_server, tmp_path, monkeypatch
):
    """Every node's clawrig worker killed mid-job (the nodes themselves alive): the job starts
    no new trial, writes its summary and ends as a provider stop does (exit 1, --resume
    continues). It ended with exit 2, as bad input, and no summary (helper-141)."""
    bench = write_mini_bench(tmp_path / "bench", 8)
    srv = model_server(delay=1.0)
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-o", str(out)]
    args += ["--executor", "ray", "--ray-address", ray_cluster.address]
    proc = subprocess.Popen(args, env=env_for(srv), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def node_workers() -> list[int]:
        found = []
        for comm in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):
                if b"NodeWorker" in comm.read_bytes():
                    found.append(int(comm.parent.name))
        return found

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not srv.requests:  # trials running on the nodes
        time.sleep(0.05)
    for pid in node_workers():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr.decode()[-2000:]
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["provider_stopped"] == (
        "--executor ray: no clawrig worker is left on the cluster (its nodes left, or their "
        "workers were killed or crashed: see the nodes' Ray logs); --resume continues on the "
        "nodes alive then"
    )  # (it said "every node of the cluster is gone" of nodes alive: helper-204)
    assert summary["not_run"] > 0 and b"Traceback" not in stderr
    assert "once it answers" not in stdout.decode()  # (a model server's, said after it)


def test_a_cluster_with_token_authentication_is_joined_as_docs_ray_md_says(model_server, tmp_path):
    """A cluster using Ray's token authentication (what `ray start` does by default since
    Ray 2.59): joined with RAY_AUTH_MODE=token and its token, as docs/ray.md now says;
    without RAY_AUTH_MODE the one line says what to set (docs/ray.md's commands failed after
    20 s of Ray's "InvalidAuthToken" lines and "Failed to connect", and the doc said nothing
    needed doing: helper-204)."""
    token = "clawrig-test-" + os.urandom(16).hex()
    # the cluster in a process of its own: this one's Ray read RAY_AUTH_MODE already
    head = subprocess.Popen(
        [sys.executable, "-c", TOKEN_CLUSTER],
        env={k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert head.stdout is not None
        address, node = head.stdout.readline().split()
        bench = write_mini_bench(tmp_path / "bench", 2)
        out = tmp_path / "out"
        env = {k: v for k, v in env_for(model_server()).items() if not k.startswith("RAY_")}
        env["RAY_AUTH_TOKEN"] = token
        args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-o", str(out)]
        args += ["--executor", "ray", "--ray-address", address]
        r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.splitlines()[-1] == (
            f"clawrig: error: --ray-address: cannot join the Ray cluster at {address}: Failed "
            f"to connect to Ray cluster at {address} ({ray_executor.RAY_AUTH_HINT})"
        )
        env["RAY_AUTH_MODE"] = "token"  # (then the same command, in the same folder)
        r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        summary = json.loads((out / "summary_scripted_test.json").read_text())
        assert [t["error"] for t in summary["tasks"]] == [None, None]
        assert _nodes_used(out) == {node}
    finally:
        head.communicate(timeout=120)  # (its stdin closed: it shuts the cluster down)


TOKEN_CLUSTER = """
import sys
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
print(cluster.address, cluster.head_node.node_id, flush=True)
sys.stdin.read()
cluster.shutdown()
"""
