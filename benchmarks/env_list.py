"""``clawrig env list`` on a large cache: wall time of the command, as a user runs it.

Makes a cache under a temporary folder (``CLAWRIG_ENV_CACHE_DIR``) with ``--envs`` root file
systems of ``--files`` files each (empty files: the time is in visiting them, not their bytes)
and their ``env.json``, then runs ``clawrig env list`` ``--n`` times. With ``--baseline-src
OLD/src`` each run of this checkout is paired with a run of that older clawrig, interleaved
(baseline, this, baseline, this ...), under the same load. The first run of this checkout on
a cache made without recorded sizes measures and records them (printed apart as ``first``);
the next runs read the records.

Usage: ``python benchmarks/env_list.py [--envs 3] [--files 100000] [--n 5]
[--baseline-src OLD/src]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLAWRIG = [sys.executable, "-m", "clawrig"]


def make_cache(root: Path, envs: int, files: int) -> None:
    """``envs`` root file systems of ``files`` empty files, 1000 per folder, no size recorded
    (as every cache made before sizes were recorded)."""
    for e in range(envs):
        d = root / "environments" / f"bench{e}-{e:012d}"
        for i in range(files):
            folder = d / "rootfs" / "usr" / f"d{i // 1000}"
            if i % 1000 == 0:
                folder.mkdir(parents=True)
            (folder / f"f{i}").touch()
        (d / "env.json").write_text(json.dumps({"name": f"bench{e}", "seconds": 1.0}))


def run_list(root: Path, src: Path | None) -> float:
    """Seconds of one ``clawrig env list`` (``src``: an older clawrig's package folder)."""
    env = {**os.environ, "CLAWRIG_ENV_CACHE_DIR": str(root), "COLUMNS": "200"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    started = time.monotonic()
    r = subprocess.run(CLAWRIG + ["env", "list"], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if r.returncode != 0 or "bench0" not in r.stdout:
        raise RuntimeError(f"clawrig env list failed: {r.stderr[-500:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, default=3)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--baseline-src", type=Path, default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="clawrig-bench-envlist-"))
    try:
        made = time.monotonic()
        make_cache(base, args.envs, args.files)
        print(
            f"cache: {args.envs} rootfs x {args.files} files, made in "
            f"{time.monotonic() - made:.1f} s; load average {os.getloadavg()[0]:.1f}"
        )
        first = run_list(base, None)  # measures and records the sizes
        print(f"this checkout, first run (measures and records sizes): {first:.2f} s")
        this, before = [], []
        for _ in range(args.n):
            if args.baseline_src is not None:
                before.append(run_list(base, args.baseline_src))
            this.append(run_list(base, None))
        print(f"this checkout, recorded sizes: median {statistics.median(this):.2f} s {this}")
        if before:
            print(f"baseline {args.baseline_src}: median {statistics.median(before):.2f} s")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
