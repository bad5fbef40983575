"""Per-trial overhead of ``--agent openclaw`` vs ``--agent native`` on the same tiny task.

Each trial is the demo sample 000015 (read, exec, write, read, answer) driven by the scripted
model server on loopback, which answers at once: what is measured is the harness + agent
overhead before any model latency. Every trial runs in its own child process, so its numbers
are its own:

- wall: seconds of ``run_trial`` (sandbox up, agent, grading, trial folder written), and of the
  agent phase alone;
- CPU: user + system seconds of the child process and all its descendants (harness, gateway,
  sandbox, OpenClaw's node, the tools' commands, the grader), from a cgroup v1 ``cpuacct``
  group (else the child's rusage, which misses processes killed with the sandbox);
- peak RSS: the largest peak resident set (``VmHWM``) of any one descendant process (for
  OpenClaw its node process), and the sandbox cgroup's peak memory (all processes of the
  sandbox together, page cache included) when the harness may create cgroups; both sampled
  every 100 ms (the sampler's own CPU is counted too).

Usage: ``python benchmarks/agents.py [--n 3] [--agents native,openclaw]`` (OpenClaw must be in
the cache: ``make openclaw``). Prints the medians side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cpuacct import CpuGroup  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CGROUP_DIRS = (Path("/sys/fs/cgroup/memory/clawrig"), Path("/sys/fs/cgroup/clawrig"))
PEAK_FILES = ("memory.max_usage_in_bytes", "memory.peak", "memory.usage_in_bytes", "memory.current")


class Sampler(threading.Thread):
    """Every 100 ms until stopped: the peak memory of clawrig's sandbox cgroups (bytes) and the
    largest peak RSS (``VmHWM``) of any descendant of this process (bytes)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.cgroup_peak: int | None = None
        self.process_peak = 0
        self._halt = threading.Event()

    def run(self) -> None:
        me = os.getpid()
        while not self._halt.is_set():
            self._cgroups()
            self._processes(me)
            self._halt.wait(0.1)

    def _cgroups(self) -> None:
        for parent in CGROUP_DIRS:
            if not parent.is_dir():
                continue
            for d in parent.iterdir():
                for name in PEAK_FILES:
                    try:
                        value = int((d / name).read_text())
                    except (OSError, ValueError):
                        continue
                    self.cgroup_peak = max(self.cgroup_peak or 0, value)
                    break

    def _processes(self, root: int) -> None:
        parents: dict[int, int] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    stat = Path(f"/proc/{name}/stat").read_text()
                    parents[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
        for pid in parents:
            p, hops = pid, 0
            while p not in (0, 1, root) and hops < 64:
                p, hops = parents.get(p, 0), hops + 1
            if p != root or pid == root:
                continue
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.process_peak = max(self.process_peak, int(line.split()[1]) * 1024)
            except (OSError, ValueError):
                continue

    def stop(self) -> None:
        self._halt.set()
        self.join()


def one_trial(agent: str, out: Path) -> dict[str, float | None]:
    """Run one trial of 000015 with ``agent`` in this process; return its measurements."""
    sys.path.insert(0, str(ROOT / "tests" / "openclaw"))
    from oc_helpers import demo_task, script_000015

    from clawrig.runner.trial import TrialServices, run_trial
    from clawrig.spec.job import TrialConfig
    from clawrig.testing.scripted_server import ScriptedServer

    task = demo_task("000015")
    with ScriptedServer(script_000015()) as srv:
        sampler = Sampler()
        sampler.start()
        t0 = time.perf_counter()
        result, _ = asyncio.run(
            run_trial(
                task,
                TrialConfig(model="scripted/scripted", agent=agent),
                out,
                services=TrialServices(model=srv.chat_model()),
            )
        )
        wall = time.perf_counter() - t0
        sampler.stop()
    if result.error is not None or result.score is None or result.score.score != 1.0:
        raise SystemExit(f"{agent}: the trial did not reach its reward: {result.error}")
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cgroup = sampler.cgroup_peak
    return {
        "wall_s": wall,
        "agent_s": result.timings.get("agent", 0.0),
        "max_process_rss_mb": sampler.process_peak / 1e6,
        "harness_rss_mb": me / 1e6,
        "sandbox_peak_mb": cgroup / 1e6 if cgroup is not None else None,
    }


ROWS = [
    ("wall, whole trial (s)", "wall_s", "{:.2f}"),
    ("wall, agent phase (s)", "agent_s", "{:.2f}"),
    ("CPU, user+sys (s)", "cpu_s", "{:.2f}"),
    ("peak RSS, largest process (MB)", "max_process_rss_mb", "{:.0f}"),
    ("peak memory, sandbox cgroup (MB)", "sandbox_peak_mb", "{:.0f}"),
    ("peak RSS, harness process (MB)", "harness_rss_mb", "{:.0f}"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3, help="trials per agent")
    ap.add_argument("--agents", default="native,openclaw")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_trial(args.one, Path(args.out))))
        return
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    runs: dict[str, list[dict]] = {a: [] for a in agents}
    exact_cpu = True
    with tempfile.TemporaryDirectory(prefix="clawrig-bench-agents-") as tmp:
        for i in range(args.n):
            for agent in agents:  # interleaved, so drift hits both alike
                acct = CpuGroup(f"{agent}{i}")
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", agent, "--out", f"{tmp}/{agent}{i}"],
                    capture_output=True,
                    text=True,
                    preexec_fn=acct.enter,
                )
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if proc.returncode != 0:
                    raise SystemExit(f"{agent}: {proc.stderr.strip().splitlines()[-1:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                used = sum(getattr(after, f) - getattr(before, f) for f in ("ru_utime", "ru_stime"))
                exact = acct.seconds()
                acct.close()
                row["cpu_s"] = exact if exact is not None else used
                exact_cpu = exact_cpu and exact is not None
                runs[agent].append(row)
    print(f"per-trial overhead, demo 000015, scripted model (median of {args.n})")
    if not exact_cpu:
        print("(no cpuacct cgroup here: CPU counts only processes the harness reaped)")
    print(f"{'':34}" + "".join(f"{a:>12}" for a in agents))
    for label, key, fmt in ROWS:
        cells = []
        for a in agents:
            values = [r[key] for r in runs[a] if r[key] is not None]
            cells.append(fmt.format(statistics.median(values)) if values else "-")
        print(f"{label:34}" + "".join(f"{c:>12}" for c in cells))


if __name__ == "__main__":
    main()
