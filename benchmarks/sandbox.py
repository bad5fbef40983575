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
<= 300 MB.

Warm pool (issue 19): a sandbox ready cold vs from the pool (median, p90; goal <= 15 ms), and
the clean room's grading cost per real trial without and with the pool (issue 14: under 50 ms).

Trial disks and crowds (issue 19, 500-1,000 trials at once): a trial disk made, mounted and
removed by the template and loop ioctls vs by mke2fs and mount processes (wall and CPU, the
processes' own included); and a pooled sandbox's start (take, claim, exec, release) with
``--crowd-mounts`` other mounts on the host (what hundreds of live sandboxes leave there:
bwrap reads the whole table for each of its binds), started plainly vs isolated from the pool's
mounts, by util-linux's mount and umount (which reads the whole table too) or by perl's system
calls (wall and CPU per start, children included via a cpuacct cgroup when there is one). The
crowd runs in a private mount namespace of its own (``unshare -m``), so the host's table is
left alone.

Usage: python benchmarks/sandbox.py [--backend bwrap] [--n 50] [--compare-n 20] [--pool-n 30]
[--only-pool] [--disk-n 50] [--crowd-n 20] [--crowd-mounts 3000]
(the comparison builds the ``base`` environment when missing: minutes the first time).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clawrig.sandbox import Limits, SandboxConfig, create_sandbox

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cpuacct import CpuGroup  # noqa: E402


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def show(name: str, ms: list[float], p: float = 0.95) -> None:
    print(
        f"{name:<34} median {statistics.median(ms):8.2f} ms   p{round(p * 100)} "
        f"{pct(ms, p):8.2f} ms   (n={len(ms)})"
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

    def without_extras(self: bwrap_mod.BwrapSandbox, zygote: bool = False) -> list[str]:
        a = real_argv(self, zygote)
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


async def pool(n: int) -> None:
    """The warm pool (issue 19): a trial's sandbox ready cold (its disk made and mounted, bwrap
    and the supervisor started) vs taken from a warm pool (its workspace and binds mounted,
    the trial's environment, its time limit armed), median and p90; then what grading in a
    clean room costs per trial in real trials (oracle agent, demo suite), without and with the
    pool, beside the agent's sandbox start."""
    from clawrig.sandbox.bwrap import BwrapSandbox
    from clawrig.sandbox.disk import TrialDisk
    from clawrig.sandbox.pool import WarmPool, pooling_possible

    if not pooling_possible():
        print("warm pool: needs root, mke2fs and bwrap")
        return
    base = Path(tempfile.mkdtemp(prefix="clawrig-bench-pool-"))
    limits = Limits(disk_bytes=8 * 1024**3)
    try:
        cold, warm = [], []
        for i in range(n):
            ws = base / f"cold{i}"
            t = time.perf_counter()
            disk = TrialDisk(base / f"d{i}", limits.disk_bytes)
            await asyncio.to_thread(disk.mount)
            sb = BwrapSandbox(SandboxConfig(workspace_dir=ws, scratch_dir=disk.path, limits=limits))
            await sb.start()
            cold.append((time.perf_counter() - t) * 1000)
            assert (await sb.exec("true")).exit_code == 0
            await sb.stop()
            disk.release()
        async with WarmPool(parallel=1, work_dir=base) as wp:
            for i in range(n + 1):
                ws = base / f"warm{i}"
                ws.mkdir()
                cfg = SandboxConfig(workspace_dir=ws, limits=limits)
                while i and wp.idle < 1:  # a trial takes one when the pool has one ready
                    await asyncio.sleep(0.01)
                t = time.perf_counter()
                entry = await wp.take("bwrap", cfg)
                assert entry is not None
                box = await entry.claim(cfg)
                if i:  # the first one is started on demand (a miss)
                    warm.append((time.perf_counter() - t) * 1000)
                assert (await box.exec("true")).exit_code == 0
                await entry.release()
        print(f"warm pool (issue 19), n={n}: sandbox ready")
        show("cold (disk mkfs+mount, bwrap, supervisor)", cold, p=0.9)
        show("from the warm pool (mounts, env, limit)", warm, p=0.9)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    await clean_room_cost(max(4, n // 2))


async def clean_room_cost(n: int) -> None:
    """Per real trial (oracle agent on the demo suite, one at a time): the agent's sandbox
    start, and the clean room's grading cost: stop_agent (kill + settle: timings kill and
    collect) + the clean room ready + gt in (timings gt_inject, which also opens the egress
    forward in its supervisor), without and with the warm pool. Medians in ms."""
    from clawrig.runner.trial import TrialServices, run_trial
    from clawrig.sandbox.pool import WarmPool
    from clawrig.spec.job import TrialConfig
    from clawrig.tasks.registry import load_tasks

    suite = Path(__file__).resolve().parents[1] / "suites" / "demo"
    tasks = load_tasks(suite)
    config = TrialConfig(agent="oracle", model="none")
    out = Path(tempfile.mkdtemp(prefix="clawrig-bench-cr-"))
    rows: dict[str, dict[str, list[float]]] = {}
    try:
        for label in ("cold", "warm pool"):
            wp = WarmPool(parallel=1) if label == "warm pool" else None
            cols: dict[str, list[float]] = {
                k: [] for k in ("start", "stop_agent", "ready", "gt_in", "total")
            }
            for i in range(n + (1 if wp else 0)):
                if wp is not None and i:
                    while wp.idle < 2:  # both keys refilled: a trial's turn comes
                        await asyncio.sleep(0.01)
                services = TrialServices(pool=wp)
                result, _ = await run_trial(tasks[i % len(tasks)], config, out, services=services)
                assert result.error is None, result.error
                if wp is not None and not i:
                    continue  # each key's first is started on demand
                t = {k: v * 1000 for k, v in result.timings.items()}
                cr = result.pooled.get("clean_room")
                stop_agent = t["kill"] + t["collect"]
                cols["start"].append(t["sandbox_start"])
                cols["stop_agent"].append(stop_agent)
                cols["ready"].append(cr.ready_s * 1000 if cr else float("nan"))
                cols["gt_in"].append(t["gt_inject"])
                cols["total"].append(stop_agent + t["gt_inject"])
            if wp is not None:
                await wp.close()
            rows[label] = cols
        print(f"clean-room grading cost per trial (oracle, demo suite, n={n}; medians, ms):")
        print(
            f"{'':<11}{'sandbox start':>14}{'stop_agent':>12}{'room ready':>12}"
            f"{'gt_inject':>11}{'stop+gt_in':>12}"
        )
        for label, cols in rows.items():
            med = {k: statistics.median(v) for k, v in cols.items()}
            # no pool, no "room ready" (the clean room started cold: its start is in gt_inject)
            ready = "-" if med["ready"] != med["ready"] else f"{med['ready']:.1f}"
            print(
                f"{label:<11}{med['start']:>14.1f}{med['stop_agent']:>12.1f}{ready:>12}"
                f"{med['gt_in']:>11.1f}{med['total']:>12.1f}"
            )
        print("  (gt_inject = clean room ready + transcript + egress forward + gt + services)")
    finally:
        shutil.rmtree(out, ignore_errors=True)


def show_cpu(name: str, wall_ms: list[float], cpu_s: float | None) -> None:
    cpu = f"   cpu {cpu_s * 1000 / len(wall_ms):7.2f} ms each" if cpu_s is not None else ""
    print(f"{name:<44} median {statistics.median(wall_ms):8.2f} ms{cpu}   (n={len(wall_ms)})")


def disks(n: int) -> None:
    """A trial disk (8 GiB) made, mounted and removed: the template and loop ioctls vs the
    mke2fs and mount processes (what an older kernel gets)."""
    from clawrig.sandbox import disk as disk_mod

    if not disk_mod.can_make_disks():
        print("trial disks: need root and mke2fs")
        return
    base = Path(tempfile.mkdtemp(prefix="clawrig-bench-disk-"))
    meter = CpuGroup()
    meter.join()
    fast = disk_mod.attach_loop

    def old_kernel(image: Path) -> tuple[int, str]:
        raise OSError(errno.ENOTTY, "no LOOP_CONFIGURE")

    try:
        disk_mod.TrialDisk(base / "warm", 8 * 1024**3).mount()  # the template, made once
        print(f"trial disk (issue 19): made + mounted + removed, n={n}")
        for name, attach in (
            ("template + loop ioctls", fast),
            ("mke2fs + mount -o loop", old_kernel),
        ):
            disk_mod.attach_loop = attach  # type: ignore[assignment]
            ms = []
            cpu0 = meter.seconds()
            for i in range(n):
                t = time.perf_counter()
                d = disk_mod.TrialDisk(base / f"{len(name)}-{i}", 8 * 1024**3)
                d.mount()
                assert d.enforced, d.problem
                d.release()
                ms.append((time.perf_counter() - t) * 1000)
            cpu1 = meter.seconds()
            show_cpu(f"  {name}", ms, None if cpu0 is None or cpu1 is None else cpu1 - cpu0)
    finally:
        disk_mod.attach_loop = fast  # type: ignore[assignment]
        for d in base.glob("*/fs"):
            disk_mod.umount_lazy(d)
        shutil.rmtree(base, ignore_errors=True)
        meter.close()


async def crowd(n: int, mounts: int) -> None:
    """Pooled sandbox starts with ``mounts`` other mounts below the pool's root (what its other
    live sandboxes' disks and slots are), plain vs isolated from them; in a private mount
    namespace (the caller's ``unshare -m``)."""
    from clawrig.sandbox.disk import libc, umount_lazy
    from clawrig.sandbox.mountns import can_isolate
    from clawrig.sandbox.pool import WarmPool, pooling_possible

    if not pooling_possible() or not can_isolate():
        print("crowd: needs root, mke2fs, bwrap and util-linux's unshare")
        return
    base = Path(tempfile.mkdtemp(prefix="clawrig-bench-crowd-"))
    meter = CpuGroup()
    meter.join()
    limits = Limits(disk_bytes=8 * 1024**3)
    print(f"crowd (issue 19): pooled sandbox take + claim + exec + release, n={n} each")
    from clawrig.sandbox import mountns

    template = mountns.template
    runs = [
        ("plain", 10**9, template),
        ("isolated: util-linux", 0, lambda: None),
        ("from the template namespace", 0, template),
    ]
    try:
        for name, isolate_from, way in runs:
            mountns.template = way  # type: ignore[assignment]
            wp = WarmPool(parallel=1, max_idle=1, work_dir=base, isolate_from=isolate_from)
            wp._refill = lambda *a: None  # type: ignore[method-assign]  # one at a time
            crowd_dir = wp._entries_root() / "w" / "crowd"
            crowd_dir.mkdir()
            for i in range(mounts):  # mount(2): thousands of mount processes take minutes
                (crowd_dir / str(i)).mkdir()
                point = os.fsencode(crowd_dir / str(i))
                assert libc().mount(b"c", point, b"tmpfs", 0, b"size=4k") == 0
            have = len(Path("/proc/self/mountinfo").read_text().splitlines())
            ms = []
            cpu0 = meter.seconds()
            try:
                for i in range(n):
                    ws = base / f"{len(name)}-{i}"
                    ws.mkdir()
                    cfg = SandboxConfig(workspace_dir=ws, limits=limits)
                    t = time.perf_counter()
                    entry = await wp.take("bwrap", cfg)
                    assert entry is not None
                    box = await entry.claim(cfg)
                    assert (await box.exec("true")).exit_code == 0
                    await entry.release()
                    ms.append((time.perf_counter() - t) * 1000)
            finally:
                cpu1 = meter.seconds()
                for i in range(mounts):
                    umount_lazy(crowd_dir / str(i))
                await wp.close()
            cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
            show_cpu(f"  {name} ({have} mounts)", ms, cpu)
    finally:
        mountns.template = template  # type: ignore[assignment]
        shutil.rmtree(base, ignore_errors=True)
        meter.close()


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
    ap.add_argument("--pool-n", type=int, default=30, help="0 skips the warm pool rows")
    ap.add_argument("--only-pool", action="store_true", help="only the warm pool rows")
    ap.add_argument("--disk-n", type=int, default=50, help="0 skips the trial disk rows")
    ap.add_argument("--crowd-n", type=int, default=20, help="0 skips the crowd rows")
    ap.add_argument("--crowd-mounts", type=int, default=3000, help="other mounts in the crowd")
    ap.add_argument("--only-crowd", action="store_true", help="only the disk and crowd rows")
    ap.add_argument("--crowd-inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.crowd_inner:  # in its own mount namespace (below)
        asyncio.run(crowd(args.crowd_n, args.crowd_mounts))
        raise SystemExit(0)
    if args.backend == "bwrap" and args.disk_n:
        disks(args.disk_n)
    if args.backend == "bwrap" and args.crowd_n:
        if shutil.which("unshare") is None:
            print("crowd: needs util-linux's unshare")
        else:
            subprocess.run(
                ["unshare", "-m", "--propagation", "private", sys.executable, __file__]
                + ["--crowd-inner", "--crowd-n", str(args.crowd_n)]
                + ["--crowd-mounts", str(args.crowd_mounts)],
                check=False,
            )
    if args.only_crowd:
        raise SystemExit(0)
    if args.pool_n and args.backend == "bwrap":
        asyncio.run(pool(args.pool_n))
    if args.only_pool:
        raise SystemExit(0)
    if args.compare_n:
        asyncio.run(compare(args.compare_n))
    if args.containment_n and args.backend == "bwrap":
        asyncio.run(containment(args.containment_n))
    asyncio.run(main(args.backend, args.n))
