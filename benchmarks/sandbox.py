"""Sandbox benchmark: prints median and p95 of start+stop, exec round trip, 1 MB file write+read,
and the harness's peak RSS with 100 sandboxes up at once; first, start+stop side by side for
every system a trial can run on (issue 13): bwrap on the host's read-only system, bwrap on the
``base`` environment with a writable overlay (and with a warm snapshot layer under it), Docker on
the ``base`` image against the real dockerd.

Then what a trial's containment (issue 14) costs at start: bwrap without and with its /dev/shm
cap, read-only /dev and no nested user namespaces; with the trial's own disk (mkfs, loop mount,
unmount); with a gateway door (a capped unix socket served by the harness).

Targets on a 2-core machine (issue 2): start+stop <= 50 ms median, exec round trip <= 3 ms
median (round trip minus the command's own time), 100 concurrent sandboxes with harness RSS
<= 300 MB. Usage: python benchmarks/sandbox.py [--backend bwrap] [--n 50] [--compare-n 20]
(the comparison builds the ``base`` environment when missing: minutes the first time).
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


async def start_stop(kind: str, fields: dict[str, object], n: int, base: Path) -> list[float]:
    """Milliseconds of start + one ``true`` + stop, ``n`` times."""
    out = []
    for i in range(n):
        cfg = SandboxConfig(workspace_dir=base / f"{kind}-{len(fields)}-{i}", **fields)
        t = time.perf_counter()
        sb = create_sandbox(kind, cfg)
        await sb.start()
        assert (await sb.exec("true")).exit_code == 0
        await sb.stop()
        out.append((time.perf_counter() - t) * 1000)
    return out


async def compare(n: int) -> None:
    """start+stop of every system side by side (skipping what cannot run here)."""
    from clawrig.env.build import ensure_image, ensure_rootfs
    from clawrig.env.spec import load_env_spec
    from clawrig.env.store import docker_available
    from clawrig.env.warm import ensure_warm

    base = Path(tempfile.mkdtemp(prefix="clawrig-bench-"))
    try:
        spec = load_env_spec("base")
        rootfs = ensure_rootfs(spec, progress=lambda line: print("  " + line))
        snap = await ensure_warm(
            ["pip install --no-index pip"], backend="bwrap", rootfs=rootfs, environment=spec.key
        )
        rows = [
            ("bwrap, host system (read-only)", "bwrap", {}),
            (
                "bwrap, base env, writable overlay",
                "bwrap",
                {"rootfs": rootfs, "writable_root": True},
            ),
            (
                "bwrap, base env + warm layer",
                "bwrap",
                {"rootfs": rootfs, "writable_root": True, "layers": [snap.layer]},
            ),
        ]
        if docker_available():
            image = ensure_image(spec, progress=lambda line: print("  " + line))
            rows.append(("docker, base image", "docker", {"image": image}))
        else:
            print("docker: no engine answers here (make test starts dockerd when root)")
        print(f"start + exec true + stop, n={n} each:")
        for name, kind, fields in rows:
            show(name, await start_stop(kind, fields, n, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def containment(n: int) -> None:
    """start + exec true + stop without and with each containment piece (issue 14)."""
    from clawrig.llm.gateway import Gateway, GatewayDoor
    from clawrig.sandbox import bwrap as bwrap_mod
    from clawrig.sandbox.disk import TrialDisk, can_make_disks

    base = Path(tempfile.mkdtemp(prefix="clawrig-bench-"))
    real_argv = bwrap_mod.BwrapSandbox._argv

    def without_extras(self: bwrap_mod.BwrapSandbox) -> list[str]:
        a = real_argv(self)
        i = a.index("/dev/shm")  # --perms 1777 --size N --tmpfs /dev/shm --remount-ro /dev
        del a[i - 5 : i + 3]
        return [x for x in a if x != "--disable-userns"]

    async def one(_: int, *, disk: bool = False, door: Gateway | None = None) -> float:
        t = time.perf_counter()
        work = Path(tempfile.mkdtemp(dir=base))
        td = TrialDisk(work, 8 * 1024**3 if disk else None)
        td.mount()
        gd = await GatewayDoor(door).start() if door is not None else None
        cfg = SandboxConfig(
            workspace_dir=td.path / "ws",
            scratch_dir=td.path,
            binds=gd.sandbox_binds() if gd else [],
        )
        sb = create_sandbox("bwrap", cfg)
        await sb.start()
        assert (await sb.exec("true")).exit_code == 0
        await sb.stop()
        if gd is not None:
            await gd.stop()
        td.release()
        return (time.perf_counter() - t) * 1000

    try:
        print(f"containment (issue 14): start + exec true + stop, n={n} each:")
        bwrap_mod.BwrapSandbox._argv = without_extras  # type: ignore[method-assign]
        show("bwrap, no containment extras", [await one(i) for i in range(n)])
        bwrap_mod.BwrapSandbox._argv = real_argv  # type: ignore[method-assign]
        show("bwrap, /dev/shm cap + no userns", [await one(i) for i in range(n)])
        if can_make_disks():
            show("  + trial disk (8 GiB ext4)", [await one(i, disk=True) for i in range(n)])
        else:
            print("trial disk: needs root and mke2fs")
        with Gateway() as gw:
            show(
                "  + trial disk + gateway door",
                [await one(i, disk=True, door=gw) for i in range(n)],
            )
    finally:
        bwrap_mod.BwrapSandbox._argv = real_argv  # type: ignore[method-assign]
        shutil.rmtree(base, ignore_errors=True)


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
    ap.add_argument("--compare-n", type=int, default=20, help="0 skips the side-by-side table")
    ap.add_argument("--containment-n", type=int, default=20, help="0 skips the containment rows")
    args = ap.parse_args()
    if args.compare_n:
        asyncio.run(compare(args.compare_n))
    if args.containment_n and args.backend == "bwrap":
        asyncio.run(containment(args.containment_n))
    asyncio.run(main(args.backend, args.n))
