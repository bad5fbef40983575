"""Warm snapshots: a task's warmup installs once vs in every trial (issue 13, item 4).

For each backend (bwrap on the ``base`` environment; Docker on its image when an engine answers)
it prints: the warmup's install lines run in a fresh sandbox (what every trial paid without
snapshots; ``--n`` times, each into an empty snapshot cache), and a trial's start from the
frozen snapshot (sandbox start with the snapshot + the import the warmup's per-trial line does +
stop, the import timed apart). The install is real: ``pip install`` of ``--package`` from PyPI,
through the host's network and CA bundle (the setup phase's network).
Usage:
``python benchmarks/warm.py [--package requests] [--n 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from clawrig.env.build import ensure_image, ensure_rootfs
from clawrig.env.spec import load_env_spec
from clawrig.env.store import docker_available
from clawrig.env.warm import ensure_warm
from clawrig.sandbox import Bind, SandboxConfig, create_sandbox

HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


async def bench(backend: str, package: str, module: str, n: int) -> None:
    spec = load_env_spec("base")
    rootfs = ensure_rootfs(spec, progress=lambda line: print("  " + line))
    image = ensure_image(spec) if backend == "docker" else None
    lines = [f"pip install --root-user-action=ignore {package}"]
    setup = {
        "network": True,
        "env": {"PIP_CERT": "/opt/clawrig-ca.crt"},
        "binds": [Bind(source=HOST_CA, dest="/opt/clawrig-ca.crt")],
    }
    cold: list[float] = []
    snap = None
    for i in range(n):
        cache = Path(tempfile.mkdtemp(prefix="clawrig-bench-warm-"))
        t = time.perf_counter()
        s = await ensure_warm(
            lines,
            backend=backend,
            rootfs=rootfs,
            environment=f"{spec.key}-bench{i}" if backend == "bwrap" else spec.key,
            image=image,
            cache_dir=cache,
            **setup,  # type: ignore[arg-type]
        )
        cold.append(time.perf_counter() - t)
        if i < n - 1:
            shutil.rmtree(cache, ignore_errors=True)
            if s.image:
                await _rmi(s.image)
        else:
            snap, keep = s, cache
    assert snap is not None
    warm: list[float] = []
    imports: list[float] = []
    base = Path(tempfile.mkdtemp(prefix="clawrig-bench-ws-"))
    for i in range(max(n * 3, 5)):
        fields: dict[str, object] = (
            {"rootfs": rootfs, "writable_root": True, "layers": [snap.layer]}
            if backend == "bwrap"
            else {"image": snap.image}
        )
        t = time.perf_counter()
        sb = create_sandbox(backend, SandboxConfig(workspace_dir=base / f"w{i}", **fields))
        await sb.start()
        t_exec = time.perf_counter()
        r = await sb.exec(["python3", "-c", f"import {module}"])
        imports.append(time.perf_counter() - t_exec)
        await sb.stop()
        warm.append(time.perf_counter() - t - imports[-1])
        assert r.exit_code == 0, r.stderr
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(keep, ignore_errors=True)
    if snap.image:
        await _rmi(snap.image)
    c, w = statistics.median(cold), statistics.median(warm)
    print(
        f"{backend:<7} warmup `{lines[0]}` in a fresh sandbox: median {c:7.2f} s"
        f" (n={len(cold)}); start+stop on the warm snapshot: median {w * 1000:7.1f} ms,"
        f" `import {module}` there {statistics.median(imports) * 1000:.0f} ms (n={len(warm)})"
    )
    for trials in (1, 10, 60):
        print(
            f"        {trials:>3} trials: {trials * c:8.1f} s of warmup without snapshots,"
            f" {c + trials * w:8.1f} s with one"
        )


async def _rmi(tag: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "docker", "rmi", "-f", tag, stdout=asyncio.subprocess.DEVNULL
    )
    await proc.wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", default="requests")
    ap.add_argument("--module", default=None, help="module to import (default: --package)")
    ap.add_argument("--n", type=int, default=3)
    args = ap.parse_args()
    backends = ["bwrap"] + (["docker"] if docker_available() else [])
    for b in backends:
        asyncio.run(bench(b, args.package, args.module or args.package, args.n))
