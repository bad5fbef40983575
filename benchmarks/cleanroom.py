"""Clean-room grading benchmark (issue 14): what grading in a fresh sandbox costs per trial,
printed beside the sandbox start it is measured against.

Per trial the clean room adds: settling the end state on the host (:func:`settle`: one walk,
every file hashed; the walk replaced the old manifest's, so only its extra work counts), the
grading sandbox's start (the agent's sandbox is stopped instead of kill_all + gt scrub), and the
verdict channel (a unix socket opened and closed). Prints medians and p95 in ms for: sandbox
start+stop (the reference), settle of a workspace of ``--files`` files (``--kb`` KB each) vs the
old manifest walk, the verdict channel, and the clean room's extra per trial: a second start +
stop of the sandbox + settle - manifest + channel.

Goal: the clean room's extra under 50 ms beside the sandbox start. Usage:
python benchmarks/cleanroom.py [--n 20] [--files 200] [--kb 8]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import stat
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


def old_manifest(root: Path) -> dict[str, str]:
    """The manifest walk of clawrig before the clean room (os.walk, every file hashed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            full = os.path.join(dirpath, name)
            if not stat.S_ISREG(os.lstat(full).st_mode):
                continue
            with open(full, "rb") as fh:
                out[os.path.relpath(full, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


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
        starts, settles, manifests, channels = [], [], [], []
        for i in range(args.n):
            ws = base / f"ws{i}"
            ws.mkdir()
            t = time.perf_counter()
            sb = create_sandbox(args.backend, SandboxConfig(workspace_dir=ws))
            await sb.start()
            await sb.stop()
            starts.append((time.perf_counter() - t) * 1000)
            workspace(ws, args.files, args.kb)
            t = time.perf_counter()
            old_manifest(ws)
            manifests.append((time.perf_counter() - t) * 1000)
            initial = scan(ws)
            t = time.perf_counter()
            settle(ws, EndStateCaps().over(initial), keep_links={})
            settles.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            channel = await HarnessChannel(base / f"ch{i}", "/run/clawrig-verdict").open()
            await channel.close()
            channels.append((time.perf_counter() - t) * 1000)
        show(f"sandbox start+stop ({args.backend})", starts)
        show(f"old manifest walk ({args.files} x {args.kb} KB)", manifests)
        show(f"settle ({args.files} x {args.kb} KB)", settles)
        show("verdict channel open+close", channels)
        extra = [
            s + (st - m) + c
            for s, st, m, c in zip(starts, settles, manifests, channels, strict=True)
        ]
        show("clean room extra per trial", extra)
        show(
            "  of which beside the sandbox start",
            [e - s for e, s in zip(extra, starts, strict=True)],
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
