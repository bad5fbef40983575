"""Throughput benchmark (issue 19): clawrig as users run it, side by side with Inspect AI on the
same workload, with every run checked before its time counts.

Workload: N trials of a tiny task whose agent makes 5 `exec` calls (`echo hi`) and then
answers, graded by a trivial grade() in the sandbox. The model is the scripted
OpenAI-compatible server in its own process (optionally answering after ``--model-delay``
seconds per call).

- clawrig: the real ``clawrig run`` command (model gateway on, as users run it) as a
  subprocess; its summary must show 0 errors, every trial ended on its answer and graded 1.0
  by a grader that counts 5 tool results saying ``hi`` with exit code 0 (as Inspect's check:
  helper-216 found a grader counting the calls made, not their results).
- Inspect: ``inspect_ai.eval`` in a subprocess (basic_agent with Inspect's ``bash()`` tool,
  called with its argument name as its schema gives it, then ``submit``; the local sandbox;
  an empty HOME so no profile is sourced; its fastest settings found: ``max_connections`` =
  -p, ``log_realtime`` off, benchmarks/_inspect_workload.py). Every sample's log is checked:
  5 tool results saying ``hi``, one submit, score ``C``; a run that fails the check is
  reported and its time is not used. Its trials/s is its ``eval()`` alone (its import and
  exit, ~2-3 s a run, left out: in its favour); each line gives its whole command's time and
  its CPU per sample (a cpuacct cgroup, as clawrig's), and the bytecode warm-up runs it too.
  Two models (``--inspect-model``, both by default): ``inspect`` uses Inspect's in-process
  mockllm, which calls no server: clawrig's runs share the 2 cores with their model server
  process (its CPU is printed) and Inspect's do not; ``inspect-srv`` calls the same scripted
  server clawrig does, through Inspect's OpenAI-compatible provider (as a user calling an
  API would: its HTTP client and the server's CPU on the machine, as for clawrig). Only
  ``inspect-srv`` runs with ``--model-delay``.
- Repetitions are interleaved (clawrig p, Inspect p, clawrig p', ...; every second repetition
  in the reverse order, so a drift over the runs favours neither side), and each number is the
  median over ``--reps`` with its min-max spread. Each run's line ends with the share of the
  whole machine's CPU time that was busy over the run ("busy": /proc/stat, every process on
  the machine and the kernel's own threads, not the run's alone: on an otherwise idle machine,
  near 100% says the run was bound by the CPUs, well below by a serial part or by waiting; with
  other work running, a 1-minute load above the number of CPUs before the run, it says little)
  and the load average before and after it (other work on the machine skews wall times),
  and the CPU a new file took where the runs write just before it (:func:`file_create_us`).
  The first line says how fast the machine runs pure Python ("M loop steps/s": millions of
  ``total += i`` steps of a ``for i in range(1_000_000)`` loop per second, the best of 5; 30-40
  on the 2-core virtual machines this was written on) and how long ``clawrig version`` takes:
  numbers of different machines, or of one virtual machine hours apart, are compared by
  ratio. It also says how much CPU creating a file takes where the runs write (see "Deleted
  files" below).

Latency-bound mode (``--model-delay 2 --trials 500 --parallel 500``): prints wall vs the ideal
(calls per trial x delay), trials/s, the harness's peak RSS (the clawrig process, sampled from
/proc), CPU per trial (the whole run, counted by a cgroup v1 ``cpuacct`` group the command
starts in (benchmarks/_cpuacct.py: the sandboxes' processes die unreaped, so the harness's
rusage of its children misses them); of it the harness process alone (/proc) and the rest,
beside it), errors (by kind), how many trials hit their time limit, how long trials waited on
the harness (the summary's ``waits``, median per trial, by kind: slots for a sandbox start,
grading, a model request, worker threads, the busy event loop; not counted toward time
limits), how long the command took to exit after writing its summary, and the load average
at the end.

Bytecode: installed packages run from their ``.pyc`` files. When the environment sets
``PYTHONDONTWRITEBYTECODE`` (this machine's does), an editable clawrig would compile its own
source at every command (~0.3 s of CPU a run, counted as the harness's); the runs instead
get a bytecode cache in the benchmark's temporary folder (``PYTHONPYCACHEPREFIX``), filled
by one unreported warm-up run of 2 trials.

Each clawrig line also gives the per-trial medians of the sandbox start and the clean room's
grading cost (stop_agent + settle + clean room ready + gt in: timings kill + collect +
gt_inject); ``--pool-compare`` runs clawrig without its warm pool too (``clawrig-cold``).

Before/after on one machine in one run: ``--baseline-src OLD/src`` also runs an older clawrig
(another checkout's ``src`` folder, put first on ``PYTHONPATH``; the command checks that the
package really comes from there) as ``clawrig-base``, interleaved with the others, and prints
its trials/s and CPU per trial beside this checkout's.

Deleted files: every run's folder is kept until the benchmark ends. On an ext4 file system
without a journal (this machine's root), each new file scans past every inode freed in its
block group in the last 60-360 s (the kernel's ``recently_deleted``, fs/ext4/ialloc.c): with
4,000 files just deleted, a create costs ~630 us of kernel CPU instead of ~35 (measured here).
Removing one run's ~15 files per trial before the next made that next run pay for the
benchmark's own clean-up, which a clawrig run (~16 files and folders per trial on the host:
its trial folder) feels and an Inspect run (~1 per sample: its local sandbox's temporary
folder, and ~25 per run; counted with perf's ``ext4:ext4_allocate_inode`` and strace) does
not. The benchmark's clean-up at its end does the same to a benchmark started within minutes
of it: a 200-trial clawrig run at -p 32 did 19.9 trials/s with a create at ~975 us, the same
run 22.7 at ~390 us minutes earlier (session forty). So the first line gives the CPU a new file
takes where the runs write, and every run's line the same just before it (``new file``);
``--work-dir /dev/shm`` puts the runs (and both harnesses' TMPDIR) on a tmpfs, where a create
costs ~10 us (this disk: ~20-35 us when nothing was deleted lately).

Usage: python benchmarks/throughput.py [--trials 200] [--parallel 1,8,32] [--reps 3]
       [--model-delay 0] [--no-inspect] [--pool-compare] [--baseline-src OLD/src]
       [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from clawrig.testing.scripted_server import call, reply

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cpuacct import CpuGroup  # noqa: E402

CALLS = 5
TASK = """---
id: bench_task_{k}
name: Bench {k}
category: 01_Productivity_Flow
timeout_seconds: 120
---

## Prompt

Say hi five times with exec, then answer. BENCH={k}

## Automated Checks

```python
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    said = [m for e in transcript or [] if e.get("type") == "message"
            for m in [e["message"]] if m.get("role") == "toolResult" and not m.get("isError")
            and (m.get("details") or {}).get("exitCode") == 0
            and any("hi" in (b.get("text") or "") for b in m.get("content", []))]
    return {"calls": len(said), "overall_score": 1.0 if len(said) == 5 else 0.0}
```

## Workspace Path

```
workspace/bench
```
"""

HERE = Path(__file__).resolve().parent


def responder(request: dict[str, Any]) -> Any:
    """The scripted model: 5 shell calls, then an answer; BENCH_MODEL_DELAY seconds per call.

    The same server answers both harnesses, by the tools a request offers: clawrig's agent
    gets ``exec`` calls (``command``) and ends with a text answer; Inspect's basic_agent gets
    ``bash`` calls (its one parameter, by the name its schema gives) and ends with ``submit``.
    """
    delay = float(os.environ.get("BENCH_MODEL_DELAY", "0") or 0)
    tools = {t["function"]["name"]: t["function"] for t in request.get("tools") or []}
    done = sum(1 for m in request["messages"] if m.get("role") == "tool")
    if done < CALLS:
        name = "exec" if "exec" in tools or "bash" not in tools else "bash"
        arg = "command" if name == "exec" else next(iter(tools[name]["parameters"]["properties"]))
        return reply(tool_calls=[call(name, {arg: "echo hi"})], delay=delay)
    if "submit" in tools:
        return reply(tool_calls=[call("submit", {"answer": "hi"})], delay=delay)
    return reply("all done", delay=delay)


def make_bench(root: Path, n: int) -> Path:
    tasks = root / "tasks"
    tasks.mkdir(parents=True)
    (root / "workspace" / "bench" / "exec").mkdir(parents=True)
    for k in range(n):
        (tasks / f"bench_task_{k}.md").write_text(TASK.replace("{k}", str(k)))
    return tasks


class ModelServer:
    """The scripted model server in its own process (it is the model, not the harness)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __enter__(self) -> ModelServer:
        env = dict(os.environ, PYTHONPATH=str(HERE), BENCH_MODEL_DELAY=str(self.delay))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "clawrig.testing.scripted_server"]
            + ["--responder", "throughput:responder", "--port", "0"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        self.base_url = line.split(": ", 1)[1].split()[0]
        return self

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server has used so far: the model stand-in's share
        of the machine, which a real provider's would not take."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait()


class PeakRSS(threading.Thread):
    """Samples a process from /proc every 0.1 s: the peak resident set size (MB) and the CPU
    seconds (user + system, without children: the harness alone; the last sample, at most
    0.1 s before it exited) of it and its ``--workers`` harness workers (children running
    :data:`WORKER_MODULE`), summed."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_mb, self.cpu_s, self.done = pid, 0.0, 0.0, threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK")
        self._cpu: dict[int, float] = {}
        self._workers: set[int] = set()
        self._others: set[int] = set()

    def _sample(self, pid: int) -> float:
        """``pid``'s resident MB; its CPU seconds go to ``_cpu``."""
        rss = 0.0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        self._cpu[pid] = (int(fields[11]) + int(fields[12])) / self.tick  # utime, stime
        return rss

    def run(self) -> None:
        while not self.done.wait(0.1):
            try:
                rss = self._sample(self.pid)
                children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
                for child in map(int, children.split()):
                    if child not in self._workers and child not in self._others:
                        try:  # (a sandbox's launcher may be gone already)
                            cmd = Path(f"/proc/{child}/cmdline").read_bytes()
                        except OSError:
                            continue
                        if WORKER_MODULE.encode() in cmd:
                            self._workers.add(child)
                        else:
                            self._others.add(child)
                for worker in self._workers:
                    with contextlib.suppress(OSError, ValueError, IndexError):
                        rss += self._sample(worker)
            except (OSError, ValueError, IndexError):
                return
            self.peak_mb = max(self.peak_mb, rss)
            self.cpu_s = sum(self._cpu.values())


OTHER_WORK_BUSY = 0.25
"""A run's line says "BUSY BEFORE" when the machine was busier than this share of its CPU time
in the second before the run (no run of the benchmark going: other work, whose share skews
the wall times; helper-216)."""

WORKER_MODULE = "clawrig.runner.executors.processes"
"""The module a ``--workers`` harness worker runs (counted as the harness)."""


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def clawrig_env(src: Path | None, base: Path) -> dict[str, str]:
    """The environment a `clawrig` command runs in: this checkout's package, or (``src``) the
    package in another checkout's ``src`` folder, with its own bytecode cache under ``base``
    when one is in use. Raises RuntimeError when ``src`` does not hold the package imported."""
    env = dict(os.environ)
    if src is None:
        return env
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if "PYTHONPYCACHEPREFIX" in env:
        env["PYTHONPYCACHEPREFIX"] = str(base / "pycache-baseline")
    probe = [sys.executable, "-c", "import clawrig; print(clawrig.__file__)"]
    where = subprocess.run(probe, env=env, capture_output=True, text=True).stdout.strip()
    if not where.startswith(str(Path(src).resolve())):
        raise RuntimeError(f"--baseline-src {src}: clawrig is imported from {where or '?'}")
    return env


SANDBOXES_CPU_WEIGHT = Path("/sys/fs/cgroup/cpu/clawrig/cpu.shares")
"""The weight of every clawrig sandbox on the host together (cgroup v1; a clawrig harness sets
it when it makes its first sandbox, and it stays after the harness ends)."""


def reset_sandboxes_weight() -> None:
    """Put :data:`SANDBOXES_CPU_WEIGHT` back to the kernel's default (1024) before a run, so
    each version runs with the weight it sets itself: an older one that sets none would
    otherwise run with the newer one's, left from the run before (its before/after then
    showed no difference)."""
    with contextlib.suppress(OSError):
        if SANDBOXES_CPU_WEIGHT.exists():
            SANDBOXES_CPU_WEIGHT.write_text("1024")


def run_clawrig(
    n: int,
    parallel: int,
    base: Path,
    delay: float,
    *,
    pool: bool = True,
    src: Path | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """One `clawrig run` of the workload (``pool`` False: ``CLAWRIG_WARM_POOL=0``, every
    sandbox started cold; ``src``: the clawrig package in that folder, see
    :func:`clawrig_env`); raises RuntimeError when its summary is wrong."""
    root = Path(tempfile.mkdtemp(prefix=f"p{parallel}-", dir=base))
    tasks_dir = make_bench(root, n)
    reset_sandboxes_weight()
    out = root / "out"
    exe = shutil.which("clawrig") or str(Path(sys.executable).with_name("clawrig"))
    with ModelServer(delay) as srv:
        env = clawrig_env(src, base)
        env["SCRIPTED_BASE_URL"] = srv.base_url
        env["CLAWRIG_WARM_POOL"] = "1" if pool else "0"
        model_cpu0 = srv.cpu_s()
        group = CpuGroup(f"p{parallel}-{time.monotonic_ns()}")
        cpu0 = _children_cpu_s()
        t = time.perf_counter()
        proc = subprocess.Popen(
            [exe, "run", str(tasks_dir), "-m", "scripted/bench", "-p", str(parallel)]
            + ["-o", str(out)]
            + (["--workers", str(workers)] if workers > 1 else []),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=group.enter,
        )
        rss = PeakRSS(proc.pid)
        rss.start()
        _, stderr = proc.communicate()
        wall = time.perf_counter() - t
        ended = time.time()
        rss.done.set()
        rss.join()
        model_cpu = srv.cpu_s() - model_cpu0
        # every process of the run, the sandboxes' unreaped ones too (the cgroup); without
        # one, what the harness reaped (misses the sandboxes' processes: marked "reaped")
        counted = group.seconds()
        group.close()
        cpu = counted if counted is not None else _children_cpu_s() - cpu0
    summaries = sorted(out.glob("summary_*.json"))
    if not summaries:
        why = f"exit {proc.returncode}: {stderr[-400:]}"
        raise RuntimeError(f"clawrig run wrote no summary ({why})")
    # seconds between the summary's writing and the command's exit (the job's close)
    exit_tail = max(0.0, ended - summaries[0].stat().st_mtime)
    summary = json.loads(summaries[0].read_text())
    rows = summary.get("tasks", [])
    scores = [r.get("score") for r in rows]
    timeouts = 0
    starts, clean_room = [], []
    for result in out.glob("*/*/result.json"):
        data = json.loads(result.read_text())
        if data.get("stop_reason") == "time_limit":
            timeouts += 1
        t = data.get("timings") or {}
        starts.append(t.get("sandbox_start", 0.0))
        # the clean room's grading cost: stop_agent (kill, settle) + clean room ready + gt in
        clean_room.append(t.get("kill", 0.0) + t.get("collect", 0.0) + t.get("gt_inject", 0.0))
    # the run's folder stays until the benchmark ends (module docs: deleted files)
    errors = summary.get("error_count", 0)
    waited = (summary.get("waits") or {}).get("total") or {}
    # as Inspect's check (benchmarks/_inspect_workload.py): every trial graded 1.0 by a grader
    # that counts 5 tool results saying hi with exit code 0, and each ended on its answer
    answered = all(r.get("stop_reason") == "final_answer" for r in rows)
    ok = errors == 0 and len(rows) == n and all(s == 1.0 for s in scores) and answered
    return {
        "ok": ok,
        "why": ""
        if ok
        else f"errors {errors}, scores {sorted(set(map(str, scores)))[:5]}, answered {answered}",
        "wall_s": wall,
        "trials_per_s": n / wall,
        "cpu_per_trial_s": cpu / n,
        "cpu_whole": counted is not None,
        "harness_cpu_per_trial_s": rss.cpu_s / n,
        "model_cpu_per_trial_s": model_cpu / n,
        "peak_rss_mb": rss.peak_mb,
        "errors": errors,
        "time_limits": timeouts,
        "waits_median_s": waited.get("median_s", 0.0),
        "waits_max_s": waited.get("max_s", 0.0),
        "waits_by_kind": {
            k: v.get("median_s", 0.0)
            for k, v in (summary.get("waits") or {}).items()
            if k != "total" and isinstance(v, dict) and v.get("total_s")
        },
        "errors_by_kind": summary.get("errors_by_kind") or {},
        "exit_tail_s": exit_tail,
        "load": os.getloadavg()[0],
        "sandbox_start_ms": statistics.median(starts) * 1000 if starts else 0.0,
        "clean_room_ms": statistics.median(clean_room) * 1000 if clean_room else 0.0,
        # clean rooms the warm pool had started ahead (summary's pooled; None: no pool there)
        "clean_room_hits": ((summary.get("pooled") or {}).get("clean_room") or {}).get("hits"),
    }


def run_inspect(
    n: int, parallel: int, base: Path, *, model: str = "mockllm", delay: float = 0.0
) -> dict[str, Any]:
    """One Inspect eval of the workload (benchmarks/_inspect_workload.py), log-checked.
    ``model``: ``mockllm`` (Inspect's in-process mock: no HTTP, no model process) or
    ``server`` (Inspect's OpenAI-compatible provider, ``openai-api/scripted/bench``, against
    the scripted server clawrig's runs use, answering after ``delay`` seconds)."""
    home = Path(tempfile.mkdtemp(prefix="inspect-home-", dir=base))
    env = dict(os.environ, HOME=str(home))
    argv = [sys.executable, str(HERE / "_inspect_workload.py"), str(n), str(parallel)]
    argv += [str(base / f"inspect-logs-{parallel}-{time.monotonic_ns()}"), model]
    with contextlib.ExitStack() as stack:
        srv = stack.enter_context(ModelServer(delay)) if model == "server" else None
        if srv is not None:
            env.update(SCRIPTED_BASE_URL=srv.base_url, SCRIPTED_API_KEY="bench")
            model_cpu0 = srv.cpu_s()
        group = CpuGroup(f"inspect-{parallel}-{time.monotonic_ns()}")
        t = time.perf_counter()
        r = subprocess.run(argv, env=env, capture_output=True, text=True, preexec_fn=group.enter)
        wall = time.perf_counter() - t
        cpu = group.seconds()  # the whole command's (import and exit too; None: no cgroup)
        group.close()
        model_cpu = (srv.cpu_s() - model_cpu0) / n if srv is not None else 0.0
    if r.returncode != 0:
        return {"ok": False, "why": r.stderr.strip()[-400:], "wall_s": wall}
    data = json.loads(r.stdout.strip().splitlines()[-1])
    data["ok"] = data["checked_ok"] == n
    data["why"] = "" if data["ok"] else f"{n - data['checked_ok']} samples failed the log check"
    # Inspect's time is its eval() alone, without its ~4 s import: generous to the peer
    # (clawrig's time is its whole command, start-up included)
    data["command_wall_s"] = wall
    data["wall_s"] = data["eval_wall_s"]
    data["model_cpu_per_trial_s"] = model_cpu
    data["cpu_per_trial_s"] = cpu / n if cpu is not None else None
    return data


PEERS = {"inspect": "mockllm", "inspect-srv": "server"}
"""Inspect's runs by name: the model each calls (:func:`run_inspect`)."""


def _stat(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):7.2f} [{min(values):.2f}-{max(values):.2f}]"


def _cpu_split(*runs: dict[str, Any]) -> str:
    """CPU per trial of clawrig runs (medians): the whole run's, the harness process's own, and
    beside it (sandboxes, bwrap, graders, ...); "reaped only" where no cgroup counted it all."""
    total = statistics.median(r["cpu_per_trial_s"] for r in runs) * 1000
    harness = statistics.median(r["harness_cpu_per_trial_s"] for r in runs) * 1000
    whole = all(r["cpu_whole"] for r in runs)
    return (
        f"{total:.0f} ms (harness {harness:.0f}, beside it {total - harness:.0f}"
        f"{'' if whole else '; reaped only: no cpuacct cgroup'})"
    )


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every CPU of the machine so far (/proc/stat's first line:
    idle and iowait are not busy), for a run's :func:`busy_share`."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
    return total - fields[3] - fields[4], total


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share (0-1) of the machine's CPU time that was busy between two :func:`cpu_ticks`:
    near 1, the run was bound by the CPUs (what it or anything else on the machine used, the
    kernel's own threads too, which no cgroup of the run counts); well below, by something
    serial (the harness's event loop, a lock) or by waiting."""
    busy, total = after[0] - before[0], after[1] - before[1]
    return busy / total if total else 0.0


def python_speed() -> float:
    """Millions of loop steps per second of a fixed pure-Python loop (best of 5), this
    interpreter on this machine: the same checkout's numbers differ by 2x between machines (or
    one virtual machine's hours), so runs are compared by ratio, and this says how fast the
    machine was."""
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.perf_counter() - t)
    return 1.0 / best


def file_create_us(base: Path, n: int = 300) -> float:
    """CPU microseconds (user + system, this process) to create one empty file in a new folder
    below ``base``, the mean of ``n`` (see "Deleted files" in the module docs; the files are
    removed with ``base`` at the benchmark's end)."""
    folder = Path(tempfile.mkdtemp(prefix="file-cost-", dir=base))
    t = time.process_time()
    for i in range(n):
        os.close(os.open(folder / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    return (time.process_time() - t) / n * 1e6


def startup_s() -> float:
    exe = shutil.which("clawrig") or str(Path(sys.executable).with_name("clawrig"))
    times = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([exe, "version"], check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0].replace("\n", " "),
        epilog="The first line says how fast the machine runs pure Python and how long "
        "`clawrig version` takes (compare machines by ratio). "
        "Each run prints one line (trials/s, CPU per trial of the clawrig process and "
        "of the rest, peak RSS, errors, harness waits, sandbox start and clean-room grading "
        "cost medians, the whole machine's busy share of CPU time over the run and its 1-minute "
        "load average before->after, ok or why the run was "
        "rejected); then a table of medians [min-max over --reps] per -p and clawrig/Inspect "
        "ratios. See the module docstring for the workload.",
    )
    ap.add_argument("--trials", type=int, default=200, help="trials (samples) per run")
    ap.add_argument(
        "--parallel", default="1,8,32", help="comma-separated -p values, each run for both"
    )
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions per -p")
    ap.add_argument("--model-delay", type=float, default=0.0, help="seconds per model call")
    ap.add_argument("--no-inspect", action="store_true", help="clawrig only")
    ap.add_argument(
        "--inspect-model",
        choices=["mockllm", "server", "both"],
        default="both",
        help="Inspect's model: its in-process mockllm (inspect; model delay 0 only), the "
        "scripted server clawrig calls, through Inspect's OpenAI-compatible provider "
        "(inspect-srv), or both",
    )
    ap.add_argument(
        "--work-dir",
        type=Path,
        help="where the runs write (their tasks, outputs, logs and temporary files: TMPDIR "
        "for both harnesses); default: the system's temporary folder. A tmpfs "
        "(/dev/shm) takes the file system's cost of creating files out of the comparison",
    )
    ap.add_argument(
        "--pool-compare",
        action="store_true",
        help="also run clawrig without its warm pool (clawrig-cold), interleaved",
    )
    ap.add_argument(
        "--baseline-src",
        type=Path,
        help="also run the clawrig package in this folder (an older checkout's src) as "
        "clawrig-base, interleaved, and compare",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="also run clawrig with --workers N (clawrig-wN: its harness CPU and RSS are the "
        "driver's and its workers' summed), interleaved, and compare",
    )
    args = ap.parse_args()
    if args.baseline_src is not None:
        args.baseline_src = args.baseline_src.resolve()
        if not (args.baseline_src / "clawrig" / "__init__.py").is_file():
            ap.error(f"--baseline-src {args.baseline_src}: no clawrig/__init__.py in it")
    ps = [int(x) for x in args.parallel.split(",")]
    try:
        import inspect_ai  # noqa: F401

        have_inspect = not args.no_inspect
    except ImportError:
        have_inspect = False
    peers = [
        name
        for name, model in PEERS.items()
        if have_inspect
        and args.inspect_model in (model, "both")
        and (model == "server" or args.model_delay == 0)
    ]
    if args.work_dir is not None:
        if not args.work_dir.is_dir():
            ap.error(f"--work-dir {args.work_dir}: not a folder")
        os.environ["TMPDIR"] = str(args.work_dir.resolve())  # both harnesses' temporary files
        tempfile.tempdir = None  # (read again from TMPDIR)
    base = Path(tempfile.mkdtemp(prefix="clawrig-throughput-"))
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    try:
        if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):  # as installed: from .pyc files
            os.environ["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
            run_clawrig(2, 1, base, 0.0)
            if args.baseline_src is not None:
                run_clawrig(2, 1, base, 0.0, src=args.baseline_src)
            for peer in peers:  # (Inspect's first timed run compiled it: helper-216)
                run_inspect(2, 1, base, model=PEERS[peer])
            print(
                "warm-up runs of 2 trials, each harness (fill the bytecode cache): not counted",
                flush=True,
            )
        print(
            f"machine: {os.cpu_count()} CPUs, pure Python {python_speed():.1f} M loop steps/s; "
            f"clawrig start-up (clawrig version): {startup_s() * 1000:.0f} ms; "
            f"a new file in {base.parent}: {file_create_us(base):.0f} us of CPU",
            flush=True,
        )
        model_delay = args.model_delay
        for rep in range(args.reps):
            for p in ps:
                runs = [("clawrig", lambda p=p: run_clawrig(args.trials, p, base, model_delay))]
                if args.baseline_src is not None:
                    runs.insert(
                        0,
                        (
                            "clawrig-base",
                            lambda p=p, s=args.baseline_src: run_clawrig(
                                args.trials, p, base, model_delay, src=s
                            ),
                        ),
                    )
                if args.workers > 1:
                    runs.append(
                        (
                            f"clawrig-w{args.workers}",
                            lambda p=p: run_clawrig(
                                args.trials, p, base, model_delay, workers=args.workers
                            ),
                        )
                    )
                if args.pool_compare:
                    runs.append(
                        (
                            "clawrig-cold",
                            lambda p=p: run_clawrig(args.trials, p, base, model_delay, pool=False),
                        )
                    )
                for peer in peers:
                    runs.append(
                        (
                            peer,
                            lambda p=p, peer=peer: run_inspect(
                                args.trials,
                                p,
                                base,
                                model=PEERS[peer],
                                delay=model_delay,
                            ),
                        )
                    )
                if rep % 2:  # A B, then B A: a drift over the runs (the machine's files pile
                    runs.reverse()  # up: later runs were slower) favours neither side
                for name, fn in runs:
                    new_file_us = file_create_us(base, 50)
                    # other work on the machine: its busy share over a second before the run
                    # (the load average still counts the run before: not that)
                    ticks = cpu_ticks()
                    time.sleep(1.0)
                    before = busy_share(ticks, cpu_ticks())
                    load0, ticks = os.getloadavg()[0], cpu_ticks()
                    r = fn()
                    r["busy"] = busy_share(ticks, cpu_ticks())
                    load = (
                        f" busy {r['busy']:.0%} load {load0:.1f}->{os.getloadavg()[0]:.1f}"
                        f" new file {new_file_us:.0f} us"
                    )
                    results.setdefault((name, p), []).append(r)
                    extra = ""
                    if not name.startswith("clawrig") and r.get("ok"):
                        cpu = r.get("cpu_per_trial_s")
                        extra = (
                            (f" cpu/sample {cpu * 1000:.0f} ms" if cpu is not None else "")
                            + f" (whole command {r['command_wall_s']:.1f} s: its import and "
                            f"exit too, {args.trials / r['command_wall_s']:.2f} /s)"
                        )
                    if name == "inspect-srv":
                        extra += f" (model server {r['model_cpu_per_trial_s'] * 1000:.0f} ms)"
                    if name.startswith("clawrig"):
                        extra = (
                            f" cpu/trial {_cpu_split(r)}"
                            f" (model server {r['model_cpu_per_trial_s'] * 1000:.0f} ms)"
                            f" rss {r['peak_rss_mb']:.0f} MB errors {r['errors']}"
                            f" time-limits {r['time_limits']} harness waits/trial"
                            f" {r['waits_median_s']:.1f}/{r['waits_max_s']:.1f} s (median/max)"
                            f" sandbox start {r['sandbox_start_ms']:.0f} ms clean-room"
                            f" grading cost {r['clean_room_ms']:.0f} ms (medians per trial)"
                        )
                        if r.get("clean_room_hits") is not None:
                            extra += (
                                f" clean rooms started ahead {r['clean_room_hits']}/{args.trials}"
                            )
                    status = "ok" if r["ok"] else f"REJECTED ({r['why']})"
                    if before > OTHER_WORK_BUSY:  # (other work skews the wall times)
                        status += f" BUSY BEFORE ({before:.0%} of the CPUs in the second before)"
                    print(
                        f"rep {rep + 1} {name:8} -p {p:<4} wall {r['wall_s']:7.1f} s "
                        f"{args.trials / r['wall_s']:7.2f} /s{extra}{load} {status}",
                        flush=True,
                    )
        print()
        print(f"{args.trials} trials, {CALLS} calls each, model delay {args.model_delay:g} s")
        head = "".join(f" {peer + ' samples/s':>24} {'ratio':>7}" for peer in peers)
        print(f"{'-p':>5} {'clawrig trials/s':>24}{head}")
        for p in ps:
            c = [args.trials / r["wall_s"] for r in results.get(("clawrig", p), []) if r["ok"]]
            beside = ""
            for peer in peers:
                i = [args.trials / r["wall_s"] for r in results.get((peer, p), []) if r["ok"]]
                ratio = f"{statistics.median(c) / statistics.median(i):6.2f}x" if c and i else "-"
                beside += f" {_stat(i):>24} {ratio:>7}"
            print(f"{p:>5} {_stat(c):>24}{beside}")
        # CPU per trial (medians of the ok runs; every process of the run: a cgroup)
        for p in ps:
            cpus = []
            for name in ["clawrig", *peers]:
                v = [
                    r["cpu_per_trial_s"]
                    for r in results.get((name, p), [])
                    if r["ok"] and r.get("cpu_per_trial_s") is not None
                ]
                if v:
                    cpus.append(f"{name} {statistics.median(v) * 1000:.0f} ms")
            if cpus:
                print(f"-p {p} CPU per trial (whole command): {', '.join(cpus)}")
        print(
            "(Inspect's trials/s is its eval() alone, its import and exit left out: in its "
            "favour; clawrig's is its whole command)"
        )
        if args.baseline_src is not None:
            print(f"baseline: {args.baseline_src}")
            print(
                f"{'-p':>5} {'baseline trials/s':>24} {'this trials/s':>24} {'ratio':>7}"
                f"  cpu/trial baseline -> this"
            )
            for p in ps:
                b = [r for r in results.get(("clawrig-base", p), []) if r["ok"]]
                w = [r for r in results.get(("clawrig", p), []) if r["ok"]]
                if not b or not w:
                    continue
                tb = [args.trials / r["wall_s"] for r in b]
                tw = [args.trials / r["wall_s"] for r in w]
                print(
                    f"{p:>5} {_stat(tb):>24} {_stat(tw):>24}"
                    f" {statistics.median(tw) / statistics.median(tb):6.2f}x"
                    f"  {_cpu_split(*b)} -> {_cpu_split(*w)}"
                )
        if args.workers > 1:
            name = f"clawrig-w{args.workers}"
            print(
                f"{'-p':>5} {'one process trials/s':>24} {name + ' trials/s':>24} {'ratio':>7}"
                f"  cpu/trial one -> {name}"
            )
            for p in ps:
                one = [r for r in results.get(("clawrig", p), []) if r["ok"]]
                many = [r for r in results.get((name, p), []) if r["ok"]]
                if not one or not many:
                    continue
                to = [args.trials / r["wall_s"] for r in one]
                tm = [args.trials / r["wall_s"] for r in many]
                vs = f"{statistics.median(tm) / statistics.median(to):6.2f}x"
                print(
                    f"{p:>5} {_stat(to):>24} {_stat(tm):>24} {vs}"
                    f"  {_cpu_split(*one)} -> {_cpu_split(*many)}"
                )
        if args.pool_compare:
            print(
                f"{'-p':>5} {'warm pool trials/s':>24} {'cold trials/s':>24} {'ratio':>7}"
                f" {'start ms pool/cold':>19} {'clean room ms pool/cold':>24}"
            )
            for p in ps:
                w = [r for r in results.get(("clawrig", p), []) if r["ok"]]
                c = [r for r in results.get(("clawrig-cold", p), []) if r["ok"]]
                if not w or not c:
                    continue
                tw = [args.trials / r["wall_s"] for r in w]
                tc = [args.trials / r["wall_s"] for r in c]

                def med(rows: list[dict[str, Any]], k: str) -> float:
                    return statistics.median(r[k] for r in rows)

                print(
                    f"{p:>5} {_stat(tw):>24} {_stat(tc):>24}"
                    f" {statistics.median(tw) / statistics.median(tc):6.2f}x"
                    f" {med(w, 'sandbox_start_ms'):>9.0f}/{med(c, 'sandbox_start_ms'):<9.0f}"
                    f" {med(w, 'clean_room_ms'):>11.0f}/{med(c, 'clean_room_ms'):<12.0f}"
                )
        if args.model_delay > 0:
            ideal = CALLS + 1
            for p in ps:
                # every run counts here, a rejected one too (its errors are the point)
                rows = results.get(("clawrig", p), [])
                if not rows:
                    continue
                waves = -(-args.trials // p)
                last = rows[-1]
                waits = ", ".join(f"{k} {v:.1f}" for k, v in last["waits_by_kind"].items())
                errors = ", ".join(f"{k} {v}" for k, v in last["errors_by_kind"].items())
                ok = sum(1 for r in rows if r["ok"])
                print(
                    f"-p {p} ({ok}/{len(rows)} runs ok): wall {_stat([r['wall_s'] for r in rows])}"
                    " s vs ideal "
                    f"{waves * ideal * args.model_delay:.0f} s (model time); "
                    f"{statistics.median(args.trials / r['wall_s'] for r in rows):.2f} trials/s; "
                    f"harness rss {max(r['peak_rss_mb'] for r in rows):.0f} MB; cpu/trial "
                    f"{_cpu_split(*rows)}; errors "
                    f"{sum(r['errors'] for r in rows)} ({errors or 'none'}); time limits "
                    f"{sum(r['time_limits'] for r in rows)}; harness waits median/trial "
                    f"{last['waits_median_s']:.1f} s (max {last['waits_max_s']:.1f}; by kind: "
                    f"{waits or 'none'}); exit {last['exit_tail_s']:.1f} s after the summary; "
                    f"load {last['load']:.1f} at the end"
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
