"""``--workers N``: a job's trials in N harness processes (clawrig.runner.executors.processes).

Every model call is answered by the scripted OpenAI-compatible server at $0.01 a request
(solve_even_tasks: 2 requests per trial), so the server's own request count is the independent
measure of what the job spent; the worker that ran a trial is the line it appends to the
trial's agent.log."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from job_helpers import (
    COST,
    assert_even_job,
    comparable,
    job_config,
    model_servers,
    trials_of,
)

from clawrig.errors import UserError
from clawrig.llm.gateway import SpendTally
from clawrig.runner.executors.processes import WORKER_LOG_LINE
from clawrig.runner.job import Job
from clawrig.spec.job import JobConfig
from clawrig.testing.scripted_server import ScriptedServer, error

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(600)]

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))
WORKER_MODULE = "clawrig.runner.executors.processes"


def _workers_used(out: Path) -> set[str]:
    """The harness processes (their indexes) that ran the job's trials in ``out``, from each
    trial's agent.log, whose last line says it (and no other line does)."""
    prefix = WORKER_LOG_LINE.split("{")[0]
    used = set()
    for log in out.glob("*/*/agent.log"):
        lines = log.read_text().splitlines()
        said = [line for line in lines if line.startswith(prefix)]
        if said:
            assert said == lines[-1:], (log, said)
            used.add(said[0][len(prefix) :].split()[0])
    return used


def _worker_pids(parent: int) -> list[int]:
    """The pids of ``parent``'s children that are harness workers (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and WORKER_MODULE.encode() in cmd:
            found.append(int(stat.parent.name))
    return found


def _spend_dirs(pid: int) -> list[Path]:
    """The spend-file folders (llm/gateway: SpendTally) the harness process ``pid`` made."""
    return list(Path(tempfile.gettempdir()).glob(f"clawrig-spend-{pid}-*"))


@pytest.fixture
def model_server(even_responder):
    with model_servers(even_responder) as make:
        yield make


def _env(srv: ScriptedServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENROUTER", "OPENAI"))}
    env["SCRIPTED_BASE_URL"] = srv.base_url
    return env


def test_two_workers_run_the_job_with_the_one_process_summary(
    mini_bench, model_server, tmp_path, monkeypatch
):
    bench = mini_bench(8)
    srv = model_server()
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    out = tmp_path / "workers"
    spread = Job(job_config(bench, out, runs=2, parallel=4, workers=2)).run()
    requests = len(srv.requests)
    one = Job(job_config(bench, tmp_path / "one", runs=2, parallel=4)).run()

    assert_even_job(spread, requests, out)
    assert _workers_used(out) == {"0", "1"}  # each worker ran some
    assert _workers_used(tmp_path / "one") == set()
    assert comparable(spread) == comparable(one)
    assert _worker_pids(os.getpid()) == []  # the job's end stopped them
    assert _spend_dirs(os.getpid()) == []  # nor did it leave its spend file behind


def test_the_budget_is_the_jobs_across_workers(mini_bench, model_server, tmp_path, monkeypatch):
    bench = mini_bench(20)
    srv = model_server(delay=0.1)
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    out = tmp_path / "out"
    budget = 0.10
    summary = Job(job_config(bench, out, parallel=4, workers=2, budget_usd=budget)).run()
    assert summary["budget_stopped"] and summary["not_run"] > 0
    spent = len(srv.requests) * COST
    assert math.isclose(summary["efficiency"]["total_cost_usd"], spent)
    # every worker's gateway refuses once the job's (shared) spend reached the budget: past
    # it, at most one request per busy trial was already on its way. One worker's own half
    # of the budget would let the job spend up to twice it
    assert budget <= spent <= budget + 4 * COST + 1e-9


def test_spend_tally_counts_every_add_of_every_process(tmp_path):
    path = tmp_path / "spent"
    SpendTally(path)
    procs, adds = 4, 400
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_add_many, args=(path, adds)) for _ in range(procs)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
        assert w.exitcode == 0
    assert SpendTally(path).total() == procs * adds * 0.25  # 0.25 sums exactly in binary


def _add_many(path: Path, n: int) -> None:
    tally = SpendTally(path)
    for _ in range(n):
        tally.add(0.25)


def _kill_the_worker_when(
    ready: Any, sig: signal.Signals = signal.SIGKILL
) -> tuple[threading.Thread, list[int]]:
    """A started thread that sends ``sig`` (SIGKILL) to this process's one harness worker once
    ``ready()`` is true (within 300 s); the list it puts the signalled pid in."""
    killed: list[int] = []

    def watch() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            pids = _worker_pids(os.getpid())
            if len(pids) == 1 and ready():
                os.kill(pids[0], sig)
                killed.append(pids[0])
            time.sleep(0.05)

    killer = threading.Thread(target=watch, daemon=True)
    killer.start()
    return killer, killed


def test_a_killed_worker_s_trials_run_again_on_the_other(
    mini_bench, model_server, tmp_path, monkeypatch
):
    bench = mini_bench(8)
    srv = model_server(delay=1.0)
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    out = tmp_path / "out"
    # once the model has been asked something (trials are in flight in both processes)
    killer, killed = _kill_the_worker_when(lambda: len(srv.requests) >= 2)
    summary = Job(job_config(bench, out, runs=2, parallel=4, workers=2)).run()
    killer.join(timeout=60)
    assert killed

    trials = trials_of(out)
    assert len(trials) == 16 and all(len(v) == 1 for v in trials.values())
    assert summary["error_count"] == 0 and summary["evaluated_count"] == 16
    assert math.isclose(summary["overall_score"], (8 * 1.0 + 8 * 0.25) / 16)
    # the lost attempts were infrastructure errors, run again (in the driver, worker 0)
    rerun = [r for (r,) in trials.values() if r["attempts"] > 1]
    assert rerun, "no trial lost an attempt with the worker"
    assert all(r["usage"]["request_count"] == 2 for r in rerun)
    assert summary["efficiency"]["total_cost_usd"] <= len(srv.requests) * COST + 1e-9
    assert "0" in _workers_used(out)
    # what the killed worker's sandboxes left (their disks' mounts, folders) is gone by the
    # job's end, not left until the next harness starts
    (dead,) = killed
    assert list(Path(tempfile.gettempdir()).glob(f"clawrig-*-{dead}-*")) == []
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    assert [m for m in mounts if f"-{dead}-" in m] == []


def test_ctrl_c_stops_the_workers_and_resume_finishes(mini_bench, model_server, tmp_path):
    bench = mini_bench(6)
    srv = model_server(delay=0.3)
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "--runs", "2"]
    args += ["-p", "4", "--workers", "2", "-o", str(out)]
    proc = subprocess.Popen(
        args, env=_env(srv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    progress = out / "progress_scripted_test.json"
    deadline = time.monotonic() + 300
    done = 0
    workers: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        workers = workers or _worker_pids(proc.pid)
        with contextlib.suppress(OSError, ValueError, KeyError):
            done = len(json.loads(progress.read_text())["completed"])
        if done >= 3 and len(workers) == 1:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert "Traceback" not in err.decode()
    assert _spend_dirs(proc.pid) == []  # a job stopped by Ctrl-C removed it too
    for pid in workers:  # the driver waited for its workers to clean up and exit
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()

    r = subprocess.run(
        [*args, "--resume"], env=_env(srv), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    trials = trials_of(out)
    assert len(trials) == 12 and all(len(v) == 1 for v in trials.values())
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert summary["error_count"] == 0 and len(summary["tasks"]) == 12
    assert math.isclose(summary["overall_score"], (6 * 1.0 + 6 * 0.25) / 12)


def test_a_refused_key_in_a_worker_stops_the_job_with_one_line(mini_bench, tmp_path):
    bench = mini_bench(4)
    srv = ScriptedServer([error(401, "invalid api key")] * 50).start()
    try:
        r = subprocess.run(
            [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "2"]
            + ["--workers", "2", "-o", str(tmp_path / "out")],
            env=_env(srv), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        srv.stop()
    assert r.returncode != 0
    assert "401" in r.stderr and "Traceback" not in r.stderr
    assert [ln for ln in r.stderr.splitlines() if "401" in ln][0].startswith("clawrig: error:")


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        (["--workers", "0"], "--workers"),
        (["--workers", "9999"], "--workers"),
        (["--workers", "2", "--executor", "ray"], "--workers: only with --executor local"),
    ],
)
def test_bad_workers_get_one_line(mini_bench, extra, want, tmp_path):
    bench = mini_bench(1)
    r = subprocess.run(
        [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-o", str(tmp_path / "o")]
        + extra,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode != 0
    assert want in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").glob("*/*/result.json"))


@pytest.mark.parametrize(
    ("parallel", "workers", "kind", "spawned"),
    [(1, 4, "LocalExecutor", 0), (2, 4, "ProcessExecutor", 1), (8, 1, "LocalExecutor", 0)],
)
def test_no_more_processes_than_trials_at_once(parallel, workers, kind, spawned, tmp_path):
    from clawrig.runner.executors import create_executor
    from clawrig.runner.executors.processes import harness_processes
    from clawrig.runner.trial import TrialServices

    cfg = JobConfig(suite_path=tmp_path, output=tmp_path / "o", parallel=parallel, workers=workers)
    assert type(create_executor(cfg, [], TrialServices())).__name__ == kind
    assert harness_processes(parallel, workers) - 1 == spawned


def test_a_module_in_the_current_folder_does_not_run_in_the_workers(
    mini_bench, model_server, tmp_path
):
    # a red-team finding: a worker was `python -m ...`, which puts the current folder first on
    # its import path, so a pickle.py (json.py, enum.py ...) where the user ran clawrig ran
    # in every worker, which hold the keys: here it stopped the job ("could not start")
    bench = mini_bench(2)
    srv = model_server()
    here = tmp_path / "here"
    here.mkdir()
    ran = tmp_path / "ran"
    (here / "pickle.py").write_text(
        f"open({str(ran)!r}, 'a').write('ran\\n')\nraise SystemExit('not the pickle module')\n"
    )
    out = tmp_path / "out"
    r = subprocess.run(
        [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "2"]
        + ["--workers", "2", "-o", str(out)],
        env=_env(srv), cwd=here, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert not ran.exists()
    assert _workers_used(out) == {"0", "1"} and len(trials_of(out)) == 2


def test_a_model_that_stops_answering_mid_job_is_judged_as_in_one_process(
    mini_bench, even_responder, tmp_path
):
    # new-user review: a model server that answered trials in the driver and then refused a
    # worker's first request was taken by that worker for one that never answered (a wrong
    # key or URL: the job stopped with exit 2 and no summary). Answers are the job's
    # (llm.client.share_answers): the worker's refusal is a trial's failure, as in one process
    bench = mini_bench(2)

    def responder(request: dict[str, Any]) -> Any:
        if "TASKNUM=1" in json.dumps(request["messages"][0]):
            return even_responder(request, cost=COST)
        # task 2 runs in the worker: refused once task 1 (in the driver) has been answered
        return error(400, "this request is refused", delay=1.5)

    codes = {}
    for workers in (1, 2):
        srv = ScriptedServer(responder=responder).start()
        out = tmp_path / f"w{workers}"
        try:
            r = subprocess.run(
                [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "2"]
                + ["--workers", str(workers), "-o", str(out)],
                env=_env(srv), capture_output=True, text=True, timeout=300,
            )  # fmt: skip
        finally:
            srv.stop()
        assert "Traceback" not in r.stderr
        codes[workers] = r.returncode
        summary = json.loads((out / "summary_scripted_test.json").read_text())
        assert summary["evaluated_count"] + summary["error_count"] == 2, summary
    assert codes[2] == codes[1] != 2
    assert _workers_used(tmp_path / "w2") == {"0", "1"}


def test_workers_past_the_trials_at_once_start_none_and_say_so(tmp_path):
    # new-user review: -p 2 --workers 4 ran silently; a job runs no more harness processes
    # than trials at once (here one trial: this process alone)
    demo = Path(__file__).resolve().parents[2] / "suites" / "demo"
    out = tmp_path / "out"
    r = subprocess.run(
        [CLAWRIG, "run", str(demo), "--suite", "000015", "--agent", "oracle", "-p", "2"]
        + ["--workers", "4", "-o", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-1500:]
    notes = [ln for ln in r.stderr.splitlines() if "--workers 4" in ln]
    assert notes == ["note: --workers 4: 1 harness process(es), one for each trial at once at "
                     "most (-p 2, 1 trial(s))"]  # fmt: skip
    assert _workers_used(out) == set()  # run by the local executor: no worker line


@pytest.mark.parametrize("workers", [1, 2])
def test_a_resumed_job_s_budget_counts_what_it_spent_before(
    mini_bench, model_server, tmp_path, monkeypatch, workers
):
    # a red-team finding: the gateway's count of spend started at zero in a resumed job, so
    # its running trials could spend up to the whole budget again (the driver only stopped
    # starting new ones)
    bench = mini_bench(6)
    srv = model_server()
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    out = tmp_path / "out"
    first = Job(job_config(bench, out, parallel=1, budget_usd=0.04)).run()
    assert first["budget_stopped"] and len(srv.requests) == 4  # 2 trials, $0.04
    resumed = Job(
        job_config(bench, out, parallel=4, workers=workers, budget_usd=0.05, resume=True)
    ).run()
    more = len(srv.requests) - 4
    # $0.01 was left: past $0.05 (the earlier $0.04 counted) every gateway refuses, so at
    # most the first request of each of the 4 trials running at once got through (without
    # the earlier spend the gateways let second requests through up to $0.05 more: 5 to 8)
    assert 1 <= more <= 4, more
    refused = [
        t for t in resumed["tasks"] if t["error"] and "--budget-usd" in t["error"]["message"]
    ]
    assert refused, resumed["tasks"]


def test_a_workers_socket_to_the_driver_is_not_inherited(mini_bench, model_server, tmp_path):
    # red team (hardening): the socket pair's end a worker is given must not reach what it
    # starts (sandboxes close inherited files today; close-on-exec makes it the worker's own)
    bench = mini_bench(4)
    srv = model_server(delay=0.5)
    proc = subprocess.Popen(
        [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "2"]
        + ["--workers", "2", "-o", str(tmp_path / "out")],
        env=_env(srv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    flags = None
    progress = tmp_path / "out" / "progress_scripted_test.json"
    deadline = time.monotonic() + 120
    while flags is None and time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError, ValueError, KeyError):  # the workers serve by now
            if not json.loads(progress.read_text())["completed"]:
                raise ValueError
            for pid in _worker_pids(proc.pid):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                fd = cmd[cmd.index(WORKER_MODULE.encode()) + 1].decode()
                info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
                lines = dict(ln.split(":", 1) for ln in info.splitlines() if ":" in ln)
                flags = int(lines["flags"].strip(), 8)
        time.sleep(0.05)
    proc.communicate(timeout=300)
    assert proc.returncode == 0
    assert flags is not None, "no worker seen"
    assert flags & os.O_CLOEXEC, oct(flags)


STAND_IN_WORKER = """#!{python}
# a worker that closes its socket to the driver at once (so the driver hears no "ready"),
# then needs the driver's event loop: it asks a server in that loop for a line ({mode})
import socket, sys, time
fd = int(sys.argv[-1])
socket.socket(fileno=fd).close()
if "{mode}" == "hang":
    time.sleep(600)
try:
    with socket.create_connection(("127.0.0.1", {port}), timeout=60) as s:
        s.settimeout(60)
        sys.exit(0 if s.recv(16) == b"served\\n" else 4)
except OSError:
    sys.exit(3)  # the driver's loop did not answer
"""


@pytest.mark.parametrize("mode", ["exits", "hang"])
async def test_a_worker_that_fails_to_start_does_not_stall_the_drivers_loop(
    tmp_path, monkeypatch, mode
):
    # _spawn waited for a worker that closed its socket with a blocking proc.wait(): the
    # driver's event loop stood still until the worker exited. Here the worker exits only once
    # a server in that loop answered it (code 0; it gives up after 60 s: code 3)
    from clawrig.runner.executors import processes
    from clawrig.runner.trial import TrialServices

    async def serve(reader, writer):
        writer.write(b"served\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stand_in = tmp_path / "python"
    stand_in.write_text(STAND_IN_WORKER.format(python=sys.executable, port=port, mode=mode))
    stand_in.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(stand_in))  # what _spawn starts as the worker
    if mode == "hang":
        monkeypatch.setattr(processes, "STOP_GRACE_S", 0.5)
    cfg = JobConfig(suite_path=tmp_path, output=tmp_path / "o", parallel=2, workers=2)
    executor = processes.ProcessExecutor(cfg, [], TrialServices())
    try:
        with pytest.raises(UserError) as err:
            await executor._spawn(1, ("init",))
        (worker,) = executor._workers
        if mode == "exits":
            want = f"harness worker 1 (pid {worker.proc.pid}) could not start: exited (0)"
        else:
            want = "could not start: closed its connection and had not exited 0.5 s later"
        assert want in str(err.value) and "\n" not in str(err.value)
    finally:
        await executor.close()  # kills the hanging one
        server.close()
    assert worker.proc.returncode is not None


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"web": "corpus"}, "services.web"),
        ({"hooks": "on_trial"}, "services.hooks"),
        ({"web": "corpus", "hooks": "on_trial"}, "services.hooks, services.web"),
        ({"model": "scripted"}, "services.model"),
        ({"work_dir": "folder"}, "services.work_dir"),
    ],
)
def test_a_job_given_prebuilt_services_refuses_workers_naming_the_field(
    mini_bench, scripted_server, tmp_path, given, named
):
    # only a model, judge, gateway or pool was refused: a Job given its own web or hooks ran
    # with --workers, and its workers (which build their services from the config) ran the
    # trials without them
    from clawrig.runner.trial import TrialServices
    from clawrig.web import WebService

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "page.md").write_text("# A page\n\nSome words.\n")
    made = {
        "web": lambda: WebService("corpus", source=corpus),
        "hooks": lambda: {"on_trial": print},
        "model": lambda: scripted_server().chat_model(),
        "work_dir": lambda: tmp_path / "work",
    }
    services = TrialServices(**{name: made[name]() for name in given})
    bench = mini_bench(2)
    out = tmp_path / "out"
    with pytest.raises(UserError) as err:
        Job(job_config(bench, out, parallel=2, workers=2), services=services).prepare()
    assert str(err.value) == (
        f"workers: {named}: a Job given pre-built services runs its trials in this process "
        "(workers=1); a worker process builds its own from the config"
    )
    assert not out.exists()  # refused before anything


def test_services_at_their_defaults_are_not_prebuilt():
    from clawrig.runner.job import prebuilt_services
    from clawrig.runner.trial import TrialServices

    assert prebuilt_services(TrialServices()) == []
    # the job's own memo of environments is filled in every process: not the caller's service
    assert prebuilt_services(TrialServices(environments={("bwrap",): None})) == []


@pytest.mark.parametrize(("limit", "processes"), [(2, {"0", "1"}), (1, set())])
def test_a_providers_max_concurrency_is_the_jobs_across_workers(
    mini_bench, even_responder, tmp_path, monkeypatch, limit, processes
):
    """The provider takes ``limit`` requests in flight (its ``max_concurrency``) and answers
    each after 1 s; -p 4 over two processes. The job as a whole keeps the limit (each process
    holds its share; with a limit of 1 the job runs in one process): every process had the whole
    limit, so two processes had twice as many requests in flight."""
    arrivals: list[float] = []

    def responder(request: dict[str, Any]) -> Any:
        arrivals.append(time.monotonic())
        rep = even_responder(request, cost=COST)
        rep.delay = 1.0
        return rep

    srv = ScriptedServer(responder=responder).start()
    try:
        providers = tmp_path / "providers.yaml"
        providers.write_text(
            f"providers:\n  scripted:\n    base_url: {srv.base_url}\n    max_concurrency: {limit}\n"
        )
        monkeypatch.setenv("CLAWRIG_PROVIDERS_FILE", str(providers))
        monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
        out = tmp_path / "out"
        summary = Job(job_config(mini_bench(4), out, parallel=4, workers=2)).run()
    finally:
        srv.stop()
    assert summary["error_count"] == 0 and summary["evaluated_count"] == 4
    # a request is in flight for the 1 s its answer takes: arrivals closer than that overlap
    in_flight = max(sum(1 for u in arrivals if t <= u < t + 0.95) for t in arrivals)
    assert len(arrivals) == 8 and in_flight == limit, (in_flight, arrivals)
    assert _workers_used(out) == processes


async def test_a_trials_log_line_is_written_into_its_folder_before_the_rename(mini_bench, tmp_path):
    # the line saying which harness process ran a trial was appended to agent.log after the
    # trial's folder got its final name (by the executor, once run_trial returned): a finished
    # folder was written to again, and a worker that ended before it (or a report skipped as
    # the driver stopped it) left it without. Now the trial writes it before the rename
    from clawrig.runner.trial import TrialServices, run_trial
    from clawrig.spec.job import TrialConfig
    from clawrig.tasks.registry import load_tasks

    (task,) = load_tasks(mini_bench(1) / "tasks")
    line = WORKER_LOG_LINE.format(index=3, pid=4242)
    services = TrialServices(log_line=line)
    out = tmp_path / "out"
    result, folder = await run_trial(
        task, TrialConfig(agent="nop", model="nop"), out, services=services
    )
    assert folder.parent == out / task.id and not folder.name.startswith(".")
    assert [p.name for p in (out / task.id).iterdir()] == [folder.name]  # the final one only
    assert (folder / "agent.log").read_text().splitlines()[-1] == line
    assert _workers_used(out) == {"3"}


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_the_workers_start_says_so_with_its_exit_code(
    mini_bench, model_server, tmp_path, sig, code
):
    """SIGTERM (or Ctrl-C) while the driver waits for its workers to start, before the job's
    loop handles signals: typer turned the KeyboardInterrupt the harness raises for either into
    a silent exit 130, so SIGTERM exited 130, not 143, and neither said a word."""
    bench = mini_bench(4)
    srv = model_server()
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "4"]
    proc = subprocess.Popen(
        [*args, "--workers", "2", "-o", str(out)],
        env=_env(srv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not _worker_pids(proc.pid) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(sig)  # the worker is starting (or, on a fast machine, trials run)
    _, err = proc.communicate(timeout=120)
    text = err.decode()
    assert proc.returncode == code, text[-2000:]
    assert "Traceback" not in text and "interrupted" in text, text[-2000:]


FAULTY_WORKER = """#!{python}
# the harness's python, except as a harness worker: then a real worker whose report of the
# first trial it finishes (the trial's folder renamed into the job folder) is {fault}
import os, signal, sys, time
if sys.argv[1:4] != ["-P", "-m", "{module}"]:
    os.execv("{python}", ["{python}", *sys.argv[1:]])
import gc
from clawrig.runner.executors import processes
send = processes._send
reported = []
def _send(writer, message):
    if message[0] == "done" and not reported:
        reported.append(message[1])
        if "{fault}" == "never sent":  # the worker dies first
            os.kill(os.getpid(), signal.SIGKILL)
        os.kill(os.getppid(), signal.SIGINT)  # late: Ctrl-C reaches the driver first
        time.sleep(1.0)
    send(writer, message)
processes._send = _send
gc.disable()
sys.exit(processes.main([sys.argv[0], sys.argv[4]]))
"""
LAUNCH = "import sys; sys.executable = sys.argv.pop(1); from clawrig.cli.main import app; app()"
"""``clawrig`` whose harness workers are started with the python ``argv[1]`` names."""


def _run_with_faulty_worker(
    tmp_path: Path, fault: str, args: list[str], srv: ScriptedServer
) -> subprocess.CompletedProcess[str]:
    """``clawrig ARGS`` whose harness worker's first report is ``fault`` ("never sent": it
    dies by SIGKILL after the trial's rename, before its report; "late": it sends the
    driver SIGINT and reports 1 s later, once the driver cancelled the trial)."""
    stand_in = tmp_path / "python"
    stand_in.write_text(
        FAULTY_WORKER.format(python=sys.executable, module=WORKER_MODULE, fault=fault)
    )
    stand_in.chmod(0o755)
    return subprocess.run(
        [sys.executable, "-c", LAUNCH, str(stand_in), *args],
        env=_env(srv), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _counted(out: Path) -> tuple[dict[tuple[str, int], str], list[tuple[str, int]]]:
    """The trials ``out``'s summary counts ((task, run) -> its folder) and those its
    progress file lists (when there is one)."""
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    rows = {(t["task_id"], t["run_index"]): t["trial"] for t in summary["tasks"]}
    assert len(rows) == len(summary["tasks"]) == summary["evaluated_count"] + summary["error_count"]
    progress = out / "progress_scripted_test.json"
    listed = []
    if progress.is_file():
        listed = [
            (e["task_id"], e["run_index"]) for e in json.loads(progress.read_text())["completed"]
        ]
    return rows, listed


def _job_with_faulty_worker(
    bench: Path, model_server: Any, tmp_path: Path, fault: str
) -> tuple[Path, list[str], Any, subprocess.CompletedProcess[str]]:
    """``bench``'s tasks twice each, ``-p 4 --workers 2``, a model answering in 0.3 s, one
    worker with ``fault`` (:func:`_run_with_faulty_worker`). Returns the job folder, the
    ``clawrig`` arguments, the model server and the finished run."""
    srv = model_server(delay=0.3)
    out = tmp_path / "out"
    args = ["run", str(bench / "tasks"), "-m", "scripted/test", "--runs", "2", "-p", "4"]
    args += ["--workers", "2", "-o", str(out)]
    return out, args, srv, _run_with_faulty_worker(tmp_path, fault, args, srv)


def test_an_interrupted_jobs_summary_counts_a_trial_a_worker_reported_late(
    mini_bench, model_server, tmp_path
):
    """Ctrl-C while a worker's finished trial is reported: the driver cancelled the attempt
    and dropped the report that came after, so the summary (and the progress file) left out
    a trial whose folder was finished (69 trials counted of 71 on disk). Every finished
    folder is counted, once."""
    out, args, srv, r = _job_with_faulty_worker(mini_bench(6), model_server, tmp_path, "late")
    assert r.returncode == 130, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    on_disk = trials_of(out)
    assert all(len(v) == 1 for v in on_disk.values()), on_disk
    assert "1" in _workers_used(out)  # the late report's trial is on disk
    rows, listed = _counted(out)
    assert sorted(rows) == sorted(on_disk) and sorted(listed) == sorted(on_disk)
    assert all((out / folder / "result.json").is_file() for folder in rows.values())

    r = subprocess.run(
        [CLAWRIG, *args, "--resume"], env=_env(srv), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    on_disk = trials_of(out)
    assert len(on_disk) == 12 and all(len(v) == 1 for v in on_disk.values())
    rows, _ = _counted(out)
    assert sorted(rows) == sorted(on_disk)


def test_a_worker_dead_after_its_trials_rename_leaves_the_trial_once(
    mini_bench, model_server, tmp_path
):
    """A worker killed between a trial folder's rename and its report: the driver took the
    attempt for lost and ran the trial again, so two finished folders held one trial (13
    folders for 12 trials). The finished folder is the attempt's result."""
    out, _, _, r = _job_with_faulty_worker(mini_bench(4), model_server, tmp_path, "never sent")
    assert r.returncode == 0, r.stderr[-2000:]
    on_disk = trials_of(out)
    assert len(on_disk) == 8 and all(len(v) == 1 for v in on_disk.values()), on_disk
    rows, listed = _counted(out)
    assert sorted(rows) == sorted(on_disk) and listed == []  # finished: no progress file
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert math.isclose(summary["overall_score"], (4 * 1.0 + 4 * 0.25) / 8)
    # the trials the worker finished before it died are counted from their folders, not run
    # again: its first (it died sending that report) and any other it finished meanwhile
    # (the worker runs two at once: on a loaded machine both were renamed before the kill)
    said = WORKER_LOG_LINE.split("{")[0] + "1 "
    finished = [
        r for (r,) in on_disk.values()
        if said in (out / r["task_id"] / r["trial_id"] / "agent.log").read_text()
    ]  # fmt: skip
    assert 1 <= len(finished) <= 2, finished
    for one in finished:
        key = (one["task_id"], one["run_index"])
        assert one["attempts"] == 1 and rows[key] == f"{key[0]}/{one['trial_id']}"


def _second_call_slow(even_responder: Any, delay: float) -> ScriptedServer:
    """A started scripted server answering each trial's first call at once and its second
    after ``delay`` seconds (its trials are then in flight, each with a call recorded)."""

    def respond(request: dict[str, Any]) -> Any:
        rep = even_responder(request, cost=COST)
        answered = any(m.get("role") == "assistant" for m in request["messages"])
        rep.delay = delay if answered else 0.0
        return rep

    return ScriptedServer(responder=respond).start()


def _spent_in_flight(out: Path, n: int) -> Any:
    """A check that ``n`` trials in flight under ``out`` have recorded a model call."""
    return lambda: len([f for f in out.glob("*/.tmp-*/model_calls.jsonl") if f.stat().st_size]) >= n


def test_a_stopped_worker_is_killed_and_its_trials_run_again_on_the_other(
    mini_bench, even_responder, tmp_path, monkeypatch
):
    """helper-141: a worker that stops (SIGSTOP, or its event loop stuck) kept its trials
    forever: the job never ended. Silent past CLAWRIG_WORKER_HUNG_S, it is killed and its
    attempts are lost as a dead worker's: set aside, run again elsewhere, once."""
    bench = mini_bench(4)
    srv = _second_call_slow(even_responder, 3.0)
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    monkeypatch.setenv("CLAWRIG_WORKER_HUNG_S", "4")
    out = tmp_path / "out"
    # every trial in flight (the worker's two among them) has spent
    stopper, stopped = _kill_the_worker_when(_spent_in_flight(out, 4), signal.SIGSTOP)
    try:
        summary = Job(job_config(bench, out, parallel=4, workers=2)).run()
    finally:
        srv.stop()
        stopper.join(timeout=60)
        for pid in stopped:  # (the test's own clean-up, had the driver not killed it)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert stopped
    (pid,) = stopped
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped by the driver
    trials = trials_of(out)
    assert len(trials) == 4 and all(len(v) == 1 for v in trials.values())
    assert summary["error_count"] == 0 and summary["evaluated_count"] == 4
    rerun = [r for (r,) in trials.values() if r["attempts"] > 1]
    assert rerun, "no trial lost an attempt with the stopped worker"
    kept = sorted((out / "_retried").iterdir())
    assert sorted(k.name.split("__")[0] for k in kept) == sorted(r["task_id"] for r in rerun)
    for folder in kept:
        message = json.loads((folder / "result.json").read_text())["error"]["message"]
        assert f"(pid {pid}) said nothing for 4 s (stopped or stuck) and was killed" in message
    assert _workers_used(out) <= {"0", "1"}


def test_a_worker_stuck_before_it_is_ready_is_killed_and_the_job_refused(
    mini_bench, model_server, tmp_path, monkeypatch
):
    """helper-147 (high): a worker stopped before it said it was ready hung the job: the
    driver waited for its "ready" with no limit. Past the start limit it is killed and the
    job refused in one line, as for a worker that could not start."""
    from clawrig.runner.executors import processes

    monkeypatch.setattr(processes, "START_LIMIT_S", 5.0)
    monkeypatch.setenv("CLAWRIG_WORKER_HUNG_S", "4")  # (the start limit is at least this)
    bench = mini_bench(2)
    srv = model_server()
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    stopper, stopped = _kill_the_worker_when(lambda: True, signal.SIGSTOP)  # at its birth
    try:
        with pytest.raises(UserError) as info:
            Job(job_config(bench, tmp_path / "out", parallel=2, workers=2)).run()
    finally:
        stopper.join(timeout=60)
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    (pid,) = stopped
    assert str(info.value) == (
        f"--workers: harness worker 1 (pid {pid}) could not start: not ready within 5 s "
        "(stopped or stuck): killed"
    )
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped
    assert srv.requests == []


def _ctrl_c_with_a_stopped_worker(
    args: list[str], env: dict[str, str], ready: Any, woken_after: float | None = None
) -> tuple[int, int, str]:
    """``clawrig run ARGS`` (``--workers 2``) in its own session: once its one worker has
    started and ``ready()`` is true, the worker is stopped (SIGSTOP) and the driver gets Ctrl-C
    (SIGINT); ``woken_after``: the driver gets Ctrl-C first, the worker is stopped 50 ms later
    (in its trials' clean-up) and continued after that many seconds, when the driver's stop
    has come. Returns (the driver's exit code, the
    worker's pid, the driver's stderr); the worker is continued afterwards should it still
    exist."""
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    workers: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        workers = workers or _worker_pids(proc.pid)
        if workers and ready():
            break
        time.sleep(0.05)
    if proc.poll() is not None or len(workers) != 1:
        proc.kill()
        raise AssertionError(f"no worker ready: {proc.communicate()[1].decode()[-2000:]}")
    (worker,) = workers
    if woken_after is not None:  # the driver's cancels reach it, then it stops mid-clean-up
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
    os.kill(worker, signal.SIGSTOP)
    if woken_after is None:
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
    try:
        if woken_after is not None:
            time.sleep(woken_after)
            # (silent past its beats on a loaded machine, the driver may have killed it first)
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGCONT)
        _, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGCONT)
    return proc.returncode, worker, err.decode()


def test_ctrl_c_with_a_stopped_worker_leaves_no_worker_behind(mini_bench, model_server, tmp_path):
    """helper-147: Ctrl-C while a worker was stopped (well within the 120 s it may be silent)
    ended the driver after its grace time and left the worker stopped, in its own session,
    with its sandboxes and mounts. Now the driver kills it before it leaves and sweeps what it
    left; --resume runs every trial once."""
    bench = mini_bench(4)
    srv = model_server(delay=1.0)
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "4"]
    args += ["--workers", "2", "-o", str(out)]
    # trials in flight in both processes
    code, worker, err = _ctrl_c_with_a_stopped_worker(
        args, _env(srv), lambda: len(srv.requests) >= 2
    )
    assert code == 130, err[-2000:]
    assert not Path(f"/proc/{worker}").exists()  # killed and reaped, not left stopped
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    assert [m for m in mounts if f"-{worker}-" in m] == []
    assert list(Path(tempfile.gettempdir()).glob(f"clawrig-*-{worker}-*")) == []
    r = subprocess.run(
        [*args, "--resume"], env=_env(srv), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    trials = trials_of(out)
    assert len(trials) == 4 and all(len(v) == 1 for v in trials.values())


def test_a_killed_workers_cut_trials_keep_what_they_spent(
    mini_bench, even_responder, tmp_path, monkeypatch
):
    """helper-136 (high): the trials a killed worker was running had recorded their model calls
    in their .tmp- folders; run again, their first attempts were swept at the job's end, so what
    they spent counted in no total nor in the budget on --resume. Now each is set aside in
    _retried/ with its spend before it runs again."""
    bench = mini_bench(4)
    srv = _second_call_slow(even_responder, 6.0)
    monkeypatch.setenv("SCRIPTED_BASE_URL", srv.base_url)
    out = tmp_path / "out"
    killer, killed = _kill_the_worker_when(_spent_in_flight(out, 4))
    try:
        summary = Job(job_config(bench, out, parallel=4, workers=2)).run()
    finally:
        srv.stop()
    killer.join(timeout=60)
    assert killed
    rerun = sorted(r["task_id"] for (r,) in trials_of(out).values() if r["attempts"] > 1)
    assert rerun, "no trial lost an attempt with the worker"
    kept = sorted((out / "_retried").iterdir())
    assert sorted(k.name.split("__")[0] for k in kept) == rerun
    for folder in kept:
        cut = json.loads((folder / "result.json").read_text())
        assert cut["usage"]["request_count"] == 1, folder
        # its error says what happened to it (it said the job stopped: helper-141)
        assert (
            " exited (code " in cut["error"]["message"]
            and "during the trial" in (cut["error"]["message"])
        ), cut["error"]
    # the trial run again carries the lost attempt's spend in its own record (it said 0)
    for (r,) in trials_of(out).values():
        if r["attempts"] > 1:
            assert r["retried_usage"]["request_count"] == 1, r["retried_usage"]
            assert math.isclose(r["retried_usage"]["cost_usd"], COST)
    # every reply a trial recorded counts: 2 per trial, and the cut attempts' one each
    total = summary["efficiency"]["total_cost_usd"]
    assert math.isclose(total, COST * (2 * 4 + len(kept))), (total, len(kept))


@pytest.mark.parametrize("woken_after", [None, 1.2], ids=["killed", "woken"])
def test_ctrl_c_with_a_stopped_worker_keeps_what_its_trials_spent(
    mini_bench, even_responder, tmp_path, woken_after
):
    """helper-147: Ctrl-C while a worker was stopped: the job cancelled the worker's attempts
    and forgot them, the worker was killed before it could set their folders aside, and the
    job's last sweep removed them with what their model calls spent (after --resume the totals
    were $0.051 against $0.055 answered). Now the driver keeps a cancelled attempt until the
    worker says it ended it, and sets aside a killed worker's as a dead worker's. Woken before
    it is killed, the worker reads the driver's cancel and its stop at once: its stop
    cancelled the trials a second time, which cut their clean-up short (helper-152)."""
    bench = mini_bench(4)
    srv = _second_call_slow(even_responder, 30.0)  # every trial in flight with one call spent
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "4"]
    args += ["--workers", "2", "-o", str(out)]
    env = _env(srv) | {"CLAWRIG_WORKER_HUNG_S": "4"}  # killed after 2 silent beats (2 s)
    try:
        code, worker, err = _ctrl_c_with_a_stopped_worker(
            args, env, _spent_in_flight(out, 4), woken_after
        )
    finally:
        srv.stop()
    assert code == 130, err[-2000:]
    assert not Path(f"/proc/{worker}").exists()
    kept = [json.loads(p.read_text()) for p in (out / "_retried").glob("*/result.json")]
    # every trial in flight set aside with its one recorded call: the driver's own two and
    # the worker's (by the driver when it killed the worker, else by the worker itself)
    assert len(kept) == 4, [r["error"] for r in kept]
    assert all(r["usage"]["request_count"] == 1 for r in kept)
    assert all(math.isclose(r["usage"]["cost_usd"], COST) for r in kept)
    of_worker = [r for r in kept if f"(pid {worker})" in (r["error"] or {}).get("message", "")]
    # killed: the driver set the worker's two aside; woken, the worker did (or, silent past
    # its two beats under a loaded machine's delays, was killed and the driver did)
    assert len(of_worker) in ((2,) if woken_after is None else (0, 2)), [r["error"] for r in kept]


def _wait_until_taken(pid: int, signum: int, limit_s: float = 10.0) -> None:
    """Wait until signal ``signum`` sent to process ``pid`` is no longer pending (a thread of
    it took it: ``ShdPnd`` and ``SigPnd`` of /proc/PID/status, proc(5)), at most ``limit_s``."""
    bit = 1 << (signum - 1)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        masks = [int(ln.split()[1], 16) for ln in status.splitlines()
                 if ln.startswith(("ShdPnd:", "SigPnd:"))]  # fmt: skip
        if not any(m & bit for m in masks):
            return
        time.sleep(0.001)


def test_a_second_ctrl_c_keeps_what_the_trials_in_progress_spent(
    mini_bench, even_responder, tmp_path
):
    """helper-152: a second Ctrl-C (or the grace time running out) exited at once and swept the
    trials in progress with their folders, what their recorded model calls spent with them
    (after --resume the totals were $0.040 against $0.043 answered; a kill -9 kept it, as the
    resumed job adopts what it left). Now they are set aside with their spend first."""
    from clawrig.runner.batch import EXITED_AT_ONCE
    from clawrig.runner.trial import INTERRUPTED

    bench = mini_bench(4)
    srv = _second_call_slow(even_responder, 30.0)  # every trial in flight with one call spent
    out = tmp_path / "out"
    args = [CLAWRIG, "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "4", "-o", str(out)]
    proc = subprocess.Popen(args, env=_env(srv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        spent, deadline = _spent_in_flight(out, 4), time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not spent():
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        # the second only once the first was taken: two pending at once are one (CI221: a
        # loaded machine ran neither before the second came, and the job saw one Ctrl-C)
        _wait_until_taken(proc.pid, signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        srv.stop()
    assert proc.returncode == 130 and b"interrupted again: exiting now" in err, err[-2000:]
    assert list(out.glob("*/.tmp-*")) == []  # nothing half-written left
    kept = [json.loads(p.read_text()) for p in (out / "_retried").glob("*/result.json")]
    assert len(kept) == 4, [r["error"] for r in kept]
    assert all(r["usage"]["request_count"] == 1 for r in kept)
    # set aside by the first Ctrl-C's clean stop, or, those it had not reached yet, at the
    # second's exit (how many each: the machine's speed; CI158 saw the first do all four)
    assert {r["error"]["message"] for r in kept} <= {INTERRUPTED, EXITED_AT_ONCE}


def test_a_worker_told_to_stop_before_it_was_started_exits_without_a_word():
    """CI181: a driver stopped by SIGTERM while a worker started sent that worker its "stop"
    before any "init"; the worker unpacked it as an init and printed a traceback into the
    driver's terminal. A real worker process, given "stop" first, exits 0 and says nothing."""
    import socket as socketlib

    from clawrig.runner.executors import processes

    ours, theirs = socketlib.socketpair()
    theirs.set_inheritable(True)
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", processes.__name__, str(theirs.fileno())],
        pass_fds=(theirs.fileno(),),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    theirs.close()
    data = pickle.dumps(("stop",), protocol=pickle.HIGHEST_PROTOCOL)
    ours.sendall(processes._HEADER.pack(len(data)) + data)
    ours.shutdown(socketlib.SHUT_WR)
    out, err = proc.communicate(timeout=60)
    ours.close()
    assert (proc.returncode, out, err) == (0, b"", b"")
