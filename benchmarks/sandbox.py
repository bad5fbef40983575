"""Sandbox benchmark: prints median and p95 of start+stop, exec round trip, 1 MB file write+read,
and the harness's peak RSS with 100 sandboxes up at once.

Targets on a 2-core machine (issue 2): start+stop <= 50 ms median, exec round trip <= 3 ms
median (round trip minus the command's own time), 100 concurrent sandboxes with harness RSS
<= 300 MB. Usage: python benchmarks/sandbox.py [--backend bwrap] [--n 50]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from clawrig.sandbox import SandboxConfig, create_sandbox


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def show(name: str, ms: list[float]) -> None:
    print(
        f"{name:<34} median {statistics.median(ms):8.2f} ms   p95 {pct(ms, 0.95):8.2f} ms"
        f"   (n={len(ms)})"
    )


async def main(backend: str, n: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="clawrig-bench-"))
    try:
        starts = []
        for i in range(n):
            cfg = SandboxConfig(workspace_dir=base / f"ws{i}")
            t = time.perf_counter()
            sb = create_sandbox(backend, cfg)
            await sb.start()
            await sb.stop()
            starts.append((time.perf_counter() - t) * 1000)
        show("start+stop", starts)

        sb = create_sandbox(backend, SandboxConfig(workspace_dir=base / "main"))
        await sb.start()
        rtt, own = [], []
        for _ in range(max(n * 4, 200)):
            t = time.perf_counter()
            r = await sb.exec("true")
            total = (time.perf_counter() - t) * 1000
            rtt.append(total - r.duration_s * 1000)
            own.append(total)
        show("exec `true` round trip (harness)", rtt)
        show("exec `true` total (incl. fork/exec)", own)
        blob = b"x" * (1024 * 1024)
        io = []
        for _ in range(n):
            t = time.perf_counter()
            await sb.write_file("/tmp_workspace/blob.bin", blob)
            assert await sb.read_file("/tmp_workspace/blob.bin") == blob
            io.append((time.perf_counter() - t) * 1000)
        show("write+read 1 MB file", io)
        await sb.stop()

        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        boxes = [
            create_sandbox(backend, SandboxConfig(workspace_dir=base / f"c{i}")) for i in range(100)
        ]
        t = time.perf_counter()
        await asyncio.gather(*(b.start() for b in boxes))
        up = time.perf_counter() - t
        outs = await asyncio.gather(*(b.exec("echo up") for b in boxes))
        assert all(o.stdout == "up\n" for o in outs)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        await asyncio.gather(*(b.stop() for b in boxes))
        print(
            f"{'100 sandboxes up at once':<34} all up in {up:.2f} s; harness peak RSS "
            f"{rss:.0f} MB (before: {rss0:.0f} MB)"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--n", type=int, default=50)
    args = ap.parse_args()
    asyncio.run(main(args.backend, args.n))
