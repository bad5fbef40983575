"""Per-process CPU breakdown of a trial (issue 19): where the CPU of ``clawrig run`` goes, by
process kind, per trial.

Runs the throughput workload (benchmarks/throughput.py: N trials of a task whose agent makes 5
``exec`` calls and answers, graded in the clean room) with ``clawrig run`` under ``perf record``
(which follows every child: bwrap, the sandboxes' processes in their PID namespaces, nsenter,
mke2fs ...), then sorts the CPU samples by process kind using the fork and exec records perf
keeps: the harness process, the bwrap launcher, bwrap (outer and its init), the supervisors
(python3 started by bwrap, or forked by the zygote: clawrig.sandbox.zygote), the
grader's interpreter (python3 started by a supervisor), the agent's commands (other children of
a supervisor), the harness's python helpers (the zygote, the inotify caps writer) and their
forks per sandbox (nsenter and its shell where the caps writer cannot run), and the rest by
program name. Prints ms per trial for each kind (the harness's also for its main thread alone:
its event loop, the job's serial work), the total, and the load average.

Its totals run ~10-25% above benchmarks/throughput.py's CPU per trial for the same workload:
``perf record`` costs the processes it samples CPU of their own (its interrupts, and the
fork and exec records it keeps). Compare kinds here with each other, and totals with
throughput.py's cgroup count.

``--own-mounts``: run in a mount namespace of its own where the host's other clawrig mounts
(other jobs' warm pools and trial disks below ``/tmp/clawrig-*``) are detached: bwrap reads the
whole mount table for each of its binds, so on a machine shared with a 1,000-trial job (3,000
mounts) bwrap's CPU measures that job, not this one.

Bytecode: as in benchmarks/throughput.py, an environment with ``PYTHONDONTWRITEBYTECODE`` gets
a bytecode cache of the run's own (``PYTHONPYCACHEPREFIX``, filled by an unmeasured run of 2
trials), so the harness's CPU is not its source compiled anew.

Needs ``perf`` (Debian: linux-perf) and root (as ``clawrig run`` needs for its warm pool).
Usage: python benchmarks/trial_cpu.py [--trials 30] [-p 1] [--freq 2999] [--model-delay 0]
       [--own-mounts]
       [--keep-perf PATH]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import ModelServer, make_bench  # noqa: E402

_TASK = re.compile(r"PERF_RECORD_(FORK|EXIT)\((\d+):(\d+)\):\((\d+):(\d+)\)")
_EXEC = re.compile(r"PERF_RECORD_COMM exec: (.+):(\d+)/(\d+)")
_SAMPLE = re.compile(r"^\s*(.+?)\s+(\d+)/(\d+)\s+[\d.]+:\s+(\d+)\s+cpu-clock")


class Tree:
    """Processes (by host pid) from perf's task events: parent and the programs each ran."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}
        self.progs: dict[int, list[str]] = collections.defaultdict(list)

    def prog(self, pid: int) -> str:
        progs = self.progs.get(pid)
        if progs:
            return progs[-1]
        parent = self.parent.get(pid)
        return self.prog(parent) if parent is not None and parent != pid else "?"

    def _below_helper(self, pid: int, root: int) -> int | None:
        """How far below a python helper of the harness's (its child running python: the
        zygote, the inotify caps writer) ``pid`` is (0: the helper), else None."""
        chain = [pid]
        while (up := self.parent.get(chain[-1])) is not None and up != chain[-1]:
            if up == root:
                top = chain[-1]
                return len(chain) - 1 if self.prog(top).startswith("python") else None
            chain.append(up)
        return None

    def kind(self, pid: int, comm: str, root: int) -> str:
        if pid == root:
            return "harness (clawrig process)"
        parent = self.parent.get(pid)
        pprog = self.prog(parent) if parent is not None else "?"
        progs = self.progs.get(pid, [])
        helper_depth = self._below_helper(pid, root)
        if helper_depth is not None:  # the harness's python helpers (zygote, caps writer)
            if helper_depth == 0:
                return "zygote / caps helper (one per harness)"
            if helper_depth == 1 and comm.startswith("python"):
                return "supervisor (forked by the zygote) / caps fork (without it)"
            if helper_depth == 2 and comm.startswith("python"):
                return "python3 started by a supervisor (grader, agent's python)"
            if helper_depth == 2:
                return f"agent/harness commands in a sandbox ({comm})"
            return f"other: {comm}"
        if comm.startswith("python"):
            if pprog == "bwrap":
                return "supervisor (python3 -I -S)"
            if pprog.startswith("python"):
                return "python3 started by a supervisor (grader, agent's python)"
        if comm == "bwrap":
            return "bwrap (launcher exec, outer, init)"
        if comm == "sh" and "bwrap" in progs:
            return "bwrap launcher (sh before exec)"
        # clawrig's sandbox program runs as /proc/self/fd/N: named "N" until it names itself
        own_program = comm.isdigit()
        if comm == "clawrig-launch" or ((comm == "perl" or own_program) and "bwrap" in progs):
            return "pooled launcher before its bwrap exec (clawrig-launch or perl)"
        if comm in ("clawrig-init", "perl") or own_program:
            return "sandbox init with the zygote (clawrig-init or perl)"
        if comm == "nsenter" or (comm == "sh" and "nsenter" in progs):
            return "nsenter (inotify caps)"
        if (
            pprog.startswith("python")
            and parent is not None
            and self.prog(self.parent.get(parent, -1)) == "bwrap"
        ):
            return f"agent/harness commands in a sandbox ({comm})"
        return f"other: {comm}"


def breakdown(data: Path, root: int) -> dict[str, float]:
    """Seconds of CPU per process kind from ``perf script`` of ``data``, and under
    :data:`LOOP_THREAD` the harness's main thread's (also counted in the harness's kind)."""
    out = subprocess.run(
        [
            "perf",
            "script",
            "-i",
            str(data),
            "--show-task-events",
            "-F",
            "comm,pid,tid,time,period,event",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    tree = Tree()
    samples: list[tuple[int, int, str, int]] = []
    for line in out.splitlines():
        m = _TASK.search(line)
        if m:
            if m.group(1) == "FORK" and m.group(2) == m.group(3):  # a process, not a thread
                tree.parent[int(m.group(2))] = int(m.group(4))
            continue
        m = _EXEC.search(line)
        if m:
            tree.progs[int(m.group(2))].append(m.group(1))
            continue
        m = _SAMPLE.match(line)
        if m:
            samples.append((int(m.group(2)), int(m.group(3)), m.group(1).strip(), int(m.group(4))))
    cpu: dict[str, float] = collections.Counter()
    for pid, tid, comm, period in samples:
        cpu[tree.kind(pid, comm, root)] += period / 1e9
        if pid == root and tid == root:
            cpu[LOOP_THREAD] += period / 1e9
    return dict(cpu)


LOOP_THREAD = "of it the event-loop thread"
"""The harness's main thread (its event loop: the job's serial work), within the harness's
CPU: a kind of its own in :func:`breakdown`'s result, not added to the total."""


_OWN_MOUNTS = "CLAWRIG_TRIAL_CPU_OWN_MOUNTS"


def own_mounts() -> int:
    """Re-run this command in a private mount namespace (``unshare -m``) unless it runs in one
    already; there, detach every mount below ``/tmp/clawrig-*`` (other jobs'), from the
    shallowest. Returns how many were detached."""
    if os.environ.get(_OWN_MOUNTS) != "1":
        env = dict(os.environ, **{_OWN_MOUNTS: "1"})
        argv = ["unshare", "-m", "--propagation", "private", sys.executable, *sys.argv]
        os.execvpe("unshare", argv, env)
    from clawrig.sandbox.disk import umount_lazy

    points = {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    ours = sorted((p for p in points if p.startswith("/tmp/clawrig-")), key=len)
    return sum(umount_lazy(Path(p)) for p in ours)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("-p", "--parallel", type=int, default=1)
    ap.add_argument("--freq", type=int, default=2999, help="perf samples per second")
    ap.add_argument("--model-delay", type=float, default=0.0, help="seconds per model call")
    ap.add_argument(
        "--own-mounts",
        action="store_true",
        help="detach other jobs' clawrig mounts in a mount namespace of this run's own",
    )
    ap.add_argument(
        "--keep-perf", type=Path, help="keep perf's data at this path (for perf report --comm)"
    )
    args = ap.parse_args()
    if shutil.which("perf") is None:
        sys.exit("trial_cpu.py needs perf (Debian: apt-get install linux-perf)")
    detached = own_mounts() if args.own_mounts else None
    base = Path(tempfile.mkdtemp(prefix="clawrig-trial-cpu-"))
    try:
        tasks = make_bench(base, args.trials)
        exe = shutil.which("clawrig") or str(Path(sys.executable).with_name("clawrig"))
        data = base / "perf.data"
        load0 = os.getloadavg()[0]
        with ModelServer(args.model_delay) as srv:
            env = dict(os.environ, SCRIPTED_BASE_URL=srv.base_url)
            if env.pop("PYTHONDONTWRITEBYTECODE", None):
                # as installed, from .pyc files (throughput.py's module docs): a cache of the
                # run's own, filled by an unmeasured run of 2 trials
                env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
                warm = make_bench(base / "warm-up", 2)
                subprocess.run(
                    [exe, "run", str(warm), "-m", "scripted/bench", "-o", str(base / "warm-out")],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            cmd = [exe, "run", str(tasks), "-m", "scripted/bench", "-p", str(args.parallel)]
            cmd += ["-o", str(base / "out")]
            proc = subprocess.run(
                ["perf", "record", "-q", "-F", str(args.freq), "-o", str(data), "--", *cmd],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        load1 = os.getloadavg()[0]
        if proc.returncode != 0:
            sys.exit(f"clawrig run failed: {proc.stderr[-600:]}")
        # the harness: the process perf started (its first exec of clawrig's interpreter)
        head = subprocess.run(
            ["perf", "script", "-i", str(data), "--show-task-events", "-F", "comm,pid,tid"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        m = _EXEC.search(head)
        root = int(m.group(2)) if m else -1
        cpu = breakdown(data, root)
        if args.keep_perf:
            shutil.copyfile(data, args.keep_perf)
        n = args.trials
        loop_s = cpu.pop(LOOP_THREAD, 0.0)
        total = sum(cpu.values())
        mounts = sum(1 for _ in open("/proc/self/mountinfo"))
        own = f", own mounts ({detached} others' detached)" if detached is not None else ""
        head = f"{n} trials, -p {args.parallel}, load {load0:.1f}->{load1:.1f}"
        print(f"{head}, {mounts} mounts{own}")
        for kind, s in sorted(cpu.items(), key=lambda kv: -kv[1]):
            print(f"  {s / n * 1000:7.1f} ms/trial  {kind}")
            if kind == "harness (clawrig process)":
                print(f"  {loop_s / n * 1000:7.1f} ms/trial    {LOOP_THREAD}")
        sandboxes = total - cpu.get("harness (clawrig process)", 0.0)
        beside = f"{sandboxes / n * 1000:.1f} beside the harness"
        print(f"  {total / n * 1000:7.1f} ms/trial  total ({beside})")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
