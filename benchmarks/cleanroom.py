"""Clean-room grading benchmark (issue 14): what grading in a fresh sandbox costs per trial,
printed beside the sandbox start it is measured against.

Per trial the clean room adds: settling the end state on the host (:func:`settle`, the walk
that also lists what changed, against a plain listing of the same tree), the grading sandbox's
start and stop, and the verdict channel (a unix socket opened and closed); it saves what the
harness did in the agent's sandbox before grading (kill_all, ``chmod -R``, the gt scrub's walk
inside the sandbox). Prints medians and p95 in ms for each, for a workspace of ``--files``
files (``--kb`` KB each), and the net extra per trial.

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
        show("clean room net extra per trial", extra)
        show("  of which beside the sandbox start", beside)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
