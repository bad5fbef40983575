"""Clean-room grading benchmark (issue 14): what grading in a fresh sandbox costs per trial,
printed beside the sandbox start it is measured against.

Per trial the clean room adds: settling the end state on the host (:func:`settle`, the walk
that also lists what changed, against a plain listing of the same tree), the grading sandbox's
start and stop, and the verdict channel (a unix socket opened and closed); it saves what the
harness did in the agent's sandbox before grading (kill_all, ``chmod -R``, the gt scrub's walk
inside the sandbox). Prints medians and p95 in ms for each, for a workspace of ``--files``
files (``--kb`` KB each), and the net extra per trial; and the grader's start in the clean
room: ``python3 -I -B`` started afresh vs forked from the supervisor (``fork_python``, what
grading does on the system's python3), for a script that imports json and prints one line.

Goal: the clean room's extra under 50 ms beside the sandbox start. Usage:
python benchmarks/cleanroom.py [--n 20] [--files 200] [--kb 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from clawrig.sandbox import SandboxConfig, create_sandbox
from clawrig.sandbox.channel import HarnessChannel
from clawrig.sandbox.endstate import EndStateCaps, scan, settle


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def show(name: str, ms: list[float]) -> None:
    print(
        f"{name:<44} median {statistics.median(ms):8.2f} ms   p95 {pct(ms, 0.95):8.2f} ms"
        f"   (n={len(ms)})"
    )


OLD_SCRUB = r"""
import os, shutil, sys
ws, gt = sys.argv[1], sys.argv[2]
for dirpath, dirnames, filenames in os.walk(ws):
    for name in dirnames + filenames:
        p = os.path.join(dirpath, name)
        if os.path.islink(p) and os.path.realpath(p).startswith(gt):
            os.unlink(p)
"""
"""The gt scrub the harness ran inside the agent's sandbox before the clean room."""


GRADE = 'import json\nprint(json.dumps({"score": 1.0}))\n'
"""A grader's smallest run: its interpreter's start, the site packages, json, one line."""


async def reaped_cpu_s(sb: object) -> float:
    """Seconds of CPU of the processes the sandbox's supervisor has reaped so far."""
    r = await sb.exec(["sh", "-c", "cat /proc/$PPID/stat"])  # type: ignore[attr-defined]
    fields = r.stdout[r.stdout.rindex(")") + 2 :].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime


def workspace(root: Path, files: int, kb: int) -> None:
    for i in range(files):
        p = root / f"d{i % 10}" / f"sub{i % 3}" / f"f{i}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(kb * 1024))
    (root / "results").mkdir(exist_ok=True)
    os.symlink("/etc/passwd", root / "results" / "link")
    os.mkfifo(root / "results" / "fifo")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--kb", type=int, default=8)
    ap.add_argument("--backend", default="bwrap")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="clawrig-bench-cleanroom-"))
    try:
        starts, settles, manifests, channels, saved = [], [], [], [], []
        fresh, forked, fresh_cpu, forked_cpu = [], [], [], []
        for i in range(args.n):
            ws = base / f"ws{i}"
            ws.mkdir()
            t = time.perf_counter()
            sb = create_sandbox(args.backend, SandboxConfig(workspace_dir=ws))
            await sb.start()
            await sb.stop()
            starts.append((time.perf_counter() - t) * 1000)
            workspace(ws, args.files, args.kb)
            initial = scan(ws)
            sb = create_sandbox(args.backend, SandboxConfig(workspace_dir=ws))
            await sb.start()
            t = time.perf_counter()
            await sb.kill_all()
            await sb.exec(["chmod", "-R", "u+rwX", "/tmp_workspace", "/root"])
            scrub = ["python3", "-I", "-S", "-c", OLD_SCRUB, "/tmp_workspace", "/tmp_workspace/gt"]
            await sb.exec(scrub)
            saved.append((time.perf_counter() - t) * 1000)
            await sb.write_file("/tmp/grade.py", GRADE)
            for fork, into, cpu in ((False, fresh, fresh_cpu), (True, forked, forked_cpu)):
                before = await reaped_cpu_s(sb)
                t = time.perf_counter()
                r = await sb.exec(["python3", "-I", "-B", "/tmp/grade.py"], fork_python=fork)
                into.append((time.perf_counter() - t) * 1000)
                cpu.append((await reaped_cpu_s(sb) - before) * 1000)
                assert r.exit_code == 0 and r.stdout == '{"score": 1.0}\n', r
            await sb.stop()
            t = time.perf_counter()
            scan(ws, known=initial.files)
            manifests.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            settle(ws, EndStateCaps().over(initial), keep_links={}, known=initial.files)
            settles.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            channel = await HarnessChannel(base / f"ch{i}", "/run/clawrig-verdict").open()
            await channel.close()
            channels.append((time.perf_counter() - t) * 1000)
        show(f"sandbox start+stop ({args.backend})", starts)
        show(f"listing the end state ({args.files} x {args.kb} KB)", manifests)
        show(f"settle ({args.files} x {args.kb} KB)", settles)
        show("verdict channel open+close", channels)
        show("saved: kill_all + chmod -R + gt scrub", saved)
        extra = [
            s + (st - m) + c - v
            for s, st, m, c, v in zip(starts, settles, manifests, channels, saved, strict=True)
        ]
        beside = [e - s for e, s in zip(extra, starts, strict=True)]
        show("grader start+run: python3 -I -B afresh", fresh)
        show("grader start+run: forked from the supervisor", forked)
        # CPU of the supervisor's reaped children (/proc stat cutime + cstime, 10 ms ticks: a
        # median over trials); the reading shell itself is counted with the next reading
        print(
            f"{'  CPU (supervisor children), afresh / forked':<44} mean "
            f"{statistics.mean(fresh_cpu):8.2f} / {statistics.mean(forked_cpu):.2f} ms"
            f"   (n={len(fresh_cpu)}, each with one reading shell)"
        )
        show("clean room net extra per trial", extra)
        show("  of which beside the sandbox start", beside)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
