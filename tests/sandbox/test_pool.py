"""The warm pool (clawrig.sandbox.pool) on real bubblewrap sandboxes and real loop-mounted disks:
a pooled sandbox is the taking trial's only (its workspace, binds and environment mounted and
set at claim, read-only binds read-only), it has its own disk, nothing of one trial reaches the
next, and nothing of the pool is left after it closes."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from clawrig.leftovers import mounts_below
from clawrig.sandbox.base import Bind, Limits, SandboxConfig
from clawrig.sandbox.bwrap import SANDBOX_NICE
from clawrig.sandbox.disk import mount, umount_lazy
from clawrig.sandbox.pool import WarmPool, pool_key, pooling_possible
from ending import run_to_exit

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(not pooling_possible(), reason="pooling needs root, mke2fs and bwrap"),
]

DISK = 64 * 1024**2


def _config(ws: Path, src: Path, value: str) -> SandboxConfig:
    return SandboxConfig(
        workspace_dir=ws,
        binds=[Bind(source=src, dest="/opt/clawrig-test-ro", read_only=True)],
        env={"TRIAL_VALUE": value},
        limits=Limits(disk_bytes=DISK, trial_timeout_s=600),
    )


def _ours(base: Path) -> list[Path]:
    """This process's pool roots and entry folders in ``base``."""
    pid = os.getpid()
    return sorted(
        p
        for pattern in (f"clawrig-pool-{pid}-*", f"clawrig-trial-{pid}-*")
        for p in base.glob(pattern)
    )


async def _wait_idle(pool: WarmPool, n: int) -> None:
    for _ in range(600):
        if pool.idle >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the pool did not refill: {pool.idle} idle")


def test_the_template_leaves_out_sys_and_the_folders_mounted_below_dev_only():
    from clawrig.sandbox.mountns import unseen

    assert Path("/dev/pts").is_dir() and Path("/dev/null").is_char_device()
    assert unseen("/sys") and unseen("/sys/fs/cgroup/memory") and unseen("/dev/pts")
    # a device node mounted on its own (a rootless container's) is what bwrap's --dev binds
    assert not unseen("/dev/null") and not unseen("/dev")
    assert not unseen("/proc/sys") and not unseen("/usr") and not unseen("/system")


@pytest.mark.parametrize(
    "isolated",
    [False, "template", "template-perl", "sh"],
    ids=["shared-ns", "template", "template-perl", "isolated-by-sh"],
)
async def test_each_pooled_sandbox_serves_one_trial_and_nothing_reaches_the_next(
    tmp_path, isolated, monkeypatch, request
):
    # isolated: each sandbox starts in a mount namespace without the pool's other mounts
    # (what happens with many alive), and the trial's mounts at claim still reach it; made
    # from the saved template namespace (by clawrig's sandbox program, or by perl where there
    # is no C compiler), or by util-linux's programs where it cannot be had
    from clawrig.sandbox import launchbin, mountns

    foreign = tmp_path / "other" / "clawrig-trial-1-job" / "fs"  # another job's disk
    if isolated == "sh":
        monkeypatch.setattr(mountns, "template", lambda: None)
        assert mountns.launch_argv(tmp_path, tmp_path, tmp_path)[0][0] == "unshare"
    elif isolated in ("template", "template-perl"):
        if isolated == "template-perl":
            monkeypatch.setenv("CLAWRIG_LAUNCH_C", "0")
        elif launchbin.c_compiler() is None:
            pytest.skip("no C compiler here (make test installs Debian's gcc when root)")
        foreign.mkdir(parents=True)
        mount("clawrig-test", foreign, "tmpfs", 0, "size=4k")
        request.addfinalizer(lambda: umount_lazy(foreign))
        monkeypatch.setattr(mountns, "_template", [])  # a fresh one: made with the mount there
        prefix, fds = mountns.launch_argv(tmp_path, tmp_path, tmp_path)
        request.addfinalizer(lambda: os.close(fds[0]))
        if isolated == "template-perl":
            assert Path(prefix[0]).name == "perl" and fds == (mountns.template(),)
        else:  # the program, from its sealed memory file (given to the launcher)
            program = launchbin.program_fd()
            assert program is not None and fds == (mountns.template(), program)
            assert prefix[:2] == [f"/proc/self/fd/{program}", "launch"]
        isolated = "template"
    work = tmp_path / "work"
    work.mkdir()
    src = tmp_path / "ro"
    src.mkdir()
    (src / "tool.txt").write_text("harness file\n")
    seen: list[tuple[str, Path]] = []
    async with WarmPool(parallel=1, work_dir=work, isolate_from=0 if isolated else 10**6) as pool:
        for name in ("first", "second"):
            ws = tmp_path / f"ws-{name}"
            ws.mkdir()
            (ws / "task.txt").write_text(f"{name} task\n")
            cfg = _config(ws, src, name)
            if name == "second":
                await _wait_idle(pool, 1)
            asked = time.monotonic()
            entry = await pool.take("bwrap", cfg)
            assert entry is not None and entry.key == pool_key("bwrap", cfg)
            assert entry.hit is (name == "second")  # the first was started on demand
            box = await entry.claim(cfg)
            waited = time.monotonic() - asked
            assert (box.launch_ns is not None) is bool(isolated)
            if isolated:  # bwrap's own mount table: of the pool's mounts, only its entry's
                table = Path(f"/proc/{box._proc.pid}/mountinfo").read_text().splitlines()
                pool_lines = [ln for ln in table if str(work) in ln]
                assert pool_lines and all(str(entry.folder) in ln for ln in pool_lines)
                # nor another job's (the template was made with it mounted on the host)
                assert foreign.is_mount() is (isolated == "template")
                assert not [ln for ln in table if str(foreign) in ln]
                if isolated == "template":  # nor the host's /sys and /dev/pts (no sandbox
                    # sees them; bwrap parses the whole table for each bind)
                    points = {ln.split()[4] for ln in table}
                    host = {
                        ln.split()[4]
                        for ln in Path("/proc/self/mountinfo").read_text().splitlines()
                    }
                    assert {"/sys", "/dev/pts"} <= host and "/dev" in points
                    assert not {p for p in points if p == "/sys" or p.startswith("/sys/")}
                    assert "/dev/pts" not in points
            # ready_s is the trial's wait: a miss's includes the start it waited for
            assert 0 < entry.ready_s <= waited
            if not entry.hit:
                assert entry.start_s > 0 and entry.ready_s > entry.start_s
            else:
                assert entry.start_s == 0.0
            # bwrap started in the sandbox's cgroups (its cgroup namespace's root: the sandbox's
            # own), its processes without core dumps and with the file size limit: done by the
            # launcher's shell, or by the template's launcher itself
            procs = {int(x) for f in box.cgroup.procs_files for x in Path(f).read_text().split()}
            assert box.cgroup.procs_files and box._proc.pid in procs
            r = await box.exec("ulimit -c; ulimit -f; cut -d: -f3 /proc/self/cgroup | sort -u")
            blocks = cfg.limits.max_file_bytes // 512
            assert r.stdout == f"0\n{blocks}\n/\n", r.stdout
            r = await box.exec(
                'pwd; cat task.txt; echo "v=$TRIAL_VALUE"; cat /opt/clawrig-test-ro/tool.txt; '
                "ls /tmp /root; echo x > /opt/clawrig-test-ro/planted; echo ro=$?; "
                "echo mine > /tmp/left-by-trial; echo mine > /root/left-by-trial; "
                "echo out > result.txt; df -k /tmp | tail -1",
                merge_stderr=True,
            )
            out = r.stdout
            assert out.startswith(f"/tmp_workspace\n{name} task\nv={name}\nharness file\n"), out
            assert "left-by-trial" not in out.split("ro=")[0]  # the previous trial left nothing
            assert "ro=" in out and "ro=0" not in out  # the read-only bind stayed read-only
            assert not (src / "planted").exists()
            assert (ws / "result.txt").read_text() == "out\n"  # the trial's own workspace
            size_kb = int(out.strip().splitlines()[-1].split()[1])
            assert size_kb <= DISK // 1024  # /tmp is on the entry's own small disk
            # what still sees the bare slot (bwrap's init entered it before the mount) cannot
            # write there, and nothing inside can take the trial's mounts away
            r = await box.exec(
                "echo x > /proc/1/cwd/planted; echo w=$?; umount -l /tmp_workspace; "
                "echo u=$?; umount -l /opt/clawrig-test-ro; echo r=$?; cat task.txt",
                merge_stderr=True,
            )
            for code in ("w", "u", "r"):
                assert f"{code}=" in r.stdout and f"{code}=0" not in r.stdout, r.stdout
            assert r.stdout.endswith(f"{name} task\n")
            # its processes run nicer than the harness (which serves every trial first)
            r = await box.exec("cut -d' ' -f19 /proc/self/stat")
            assert int(r.stdout) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + SANDBOX_NICE)
            assert not (ws / "planted").exists()
            assert all(entry.id != i and entry.folder != f for i, f in seen)
            seen.append((entry.id, entry.folder))
            await entry.release()
            assert not entry.folder.exists() and not mounts_below(entry.folder)
        await _wait_idle(pool, 1)
    # closed: every idle sandbox stopped, its disk unmounted, its folder removed
    assert _ours(work) == [] and mounts_below(work) == []


async def test_a_config_the_pool_cannot_hold_starts_cold(tmp_path):
    cfg = SandboxConfig(workspace_dir=tmp_path / "ws", home_dir=tmp_path / "home")
    async with WarmPool(parallel=1, work_dir=tmp_path) as pool:
        assert await pool.take("bwrap", cfg) is None
        assert await pool.take("local", SandboxConfig(workspace_dir=tmp_path / "ws")) is None
    assert pool_key("bwrap", cfg) is None


async def test_refills_start_one_per_cpu_and_queued_ones_never_start_after_close(tmp_path):
    from clawrig.sandbox.client import SupervisedSandbox

    cpus = os.cpu_count() or 2
    ws, src = tmp_path / "ws", tmp_path / "src"
    ws.mkdir()
    src.mkdir()
    cfg = _config(ws, src, "x")
    pool = WarmPool(parallel=cpus + 4, max_idle=cpus + 4, work_dir=tmp_path)
    before = SupervisedSandbox.starts
    try:
        entry = await pool.take("bwrap", cfg)  # a miss: started now, then cpus + 4 refills
        assert entry is not None and not entry.hit
        assert pool.starting == cpus + 4
    finally:
        await pool.close()  # the ones waiting for a refill slot never start
    await entry.release()
    assert SupervisedSandbox.starts - before <= 1 + cpus
    assert pool.idle == 0 and _ours(tmp_path) == [] and mounts_below(tmp_path) == []


async def test_closing_the_pool_releases_a_sandbox_taken_and_never_released(tmp_path):
    # a trial whose close never ran (an exception past it) kept its pooled sandbox's disk,
    # slots and the trial's workspace mounted on the host after the job, and the pool's root
    ws, src = tmp_path / "ws", tmp_path / "src"
    ws.mkdir()
    src.mkdir()
    cfg = _config(ws, src, "x")
    async with WarmPool(parallel=1, work_dir=tmp_path) as pool:
        entry = await pool.take("bwrap", cfg)
        assert entry is not None
        box = await entry.claim(cfg)
        assert (await box.exec("cat /proc/self/comm")).stdout == "cat\n"
        held = mounts_below(entry.folder)
        assert str(entry.slots / "ws") in held and str(entry.disk.path) in held
    assert mounts_below(tmp_path) == [] and _ours(tmp_path) == []
    await entry.release()  # its owner's late release: nothing left to do, no error
    assert not entry.folder.exists()


_NEVER_CLOSED = """
import asyncio, faulthandler, sys
faulthandler.enable(all_threads=True)  # SIGABRT: every thread's stack on stderr (a hang's)
from pathlib import Path
from clawrig.sandbox.base import Limits, SandboxConfig
from clawrig.sandbox.pool import WarmPool

async def main(work: Path) -> None:
    pool = WarmPool(parallel=1, work_dir=work)
    cfg = SandboxConfig(workspace_dir=work.parent / "ws", limits=Limits(disk_bytes=%d))
    entry = await pool.take("bwrap", cfg)
    box = await entry.claim(cfg)
    await box.exec("true")
    await box.stop()
    print(entry.folder, flush=True)  # neither released nor closed: the process just ends

asyncio.run(main(Path(sys.argv[1])))
"""


def test_a_pool_never_closed_leaves_no_mount_after_its_process_exits(tmp_path):
    import sys

    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "ws").mkdir()
    # a hang at exit (CI once) says where it was
    r, out, err = run_to_exit([sys.executable, "-c", _NEVER_CLOSED % DISK, str(work)], 120)
    assert r.returncode == 0, err[-2000:]
    folder = Path(out.strip())
    assert folder.is_relative_to(work) and folder.name.startswith("clawrig-trial-")
    # its disk, slots and the trial's workspace were mounted below work/: gone with it
    assert mounts_below(work) == [] and list(work.iterdir()) == []


@pytest.mark.parametrize("cancels", [1, 2])
async def test_a_start_cancelled_while_its_disk_is_mounted_leaves_no_mount(
    tmp_path, monkeypatch, cancels
):
    # the entry's disk and slots are made in a thread; a start cancelled then (Ctrl-C, a
    # program's end) released the entry at once, while that thread went on mounting: its
    # disk, slots and staging stayed mounted after the cancelled start had ended. A second
    # cancel (an outer timeout) cut the wait for that thread, and the release with it (found
    # by a red-team review): the pool's close had to release it
    import threading

    ws, src = tmp_path / "ws", tmp_path / "src"
    ws.mkdir()
    src.mkdir()
    cfg = _config(ws, src, "x")
    mounting, go_on = threading.Event(), threading.Event()
    real = WarmPool._prepare

    def held(entry):  # type: ignore[no-untyped-def]
        mounting.set()
        go_on.wait(30)
        real(entry)

    monkeypatch.setattr(WarmPool, "_prepare", staticmethod(held))
    async with WarmPool(parallel=1, work_dir=tmp_path) as pool:
        take = asyncio.ensure_future(pool.take("bwrap", cfg))
        assert await asyncio.to_thread(mounting.wait, 30)
        for _ in range(cancels):
            take.cancel()
            await asyncio.sleep(0.2)  # the cancel has reached the start
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await take
        if cancels == 1:  # the release is the cancelled start's own
            # the pool's own root and staging mounts stay until it closes: no entry's
            root = next(tmp_path.glob(f"clawrig-pool-{os.getpid()}-*"))
            want = sorted([str(root / "w"), str(root / "w/st")])
            assert sorted(mounts_below(tmp_path)) == want
            assert list((root / "w").glob("clawrig-trial-*")) == []
    assert mounts_below(tmp_path) == [] and _ours(tmp_path) == []


async def _starts_after(before: int, settle_s: float = 0.5) -> int:
    """Sandboxes started in this process since ``before`` (SupervisedSandbox.starts), after
    ``settle_s`` seconds for any start under way to show."""
    from clawrig.sandbox.client import SupervisedSandbox

    await asyncio.sleep(settle_s)
    return SupervisedSandbox.starts - before


async def test_a_clean_room_asked_ahead_starts_once_no_trial_starts_and_is_taken_as_a_hit(
    tmp_path,
):
    """WarmPool.expect: the sandbox starts only once no trial waits for a sandbox start (the
    job's start slots), is the asking trial's hit, and takes no start of its own; one dropped
    before it started never starts."""
    from clawrig.sandbox.client import SupervisedSandbox

    ws, src = tmp_path / "ws", tmp_path / "src"
    ws.mkdir()
    src.mkdir()
    cfg = _config(ws, src, "x")
    starts = asyncio.Semaphore(1)
    # max_idle 0: no refill, so every start counted here is one asked ahead or a take's own
    pool = WarmPool(parallel=1, max_idle=0, work_dir=tmp_path, foreground=starts)
    before = SupervisedSandbox.starts
    try:
        await starts.acquire()  # a trial starting its sandbox
        ahead = pool.expect("bwrap", cfg)
        assert ahead is not None and ahead.state == "queued"
        assert await _starts_after(before) == 0 and pool.idle == 0
        starts.release()  # no trial starts now: the one asked ahead starts
        while ahead.state == "queued":
            await asyncio.sleep(0)
        # starting, it holds a start slot: a trial that then holds the job's only one waits
        # for it rather than taking one the start waits for (helper-230: a hang with 1 slot)
        assert ahead.state == "starting" and starts.locked()
        async with asyncio.timeout(120), starts:
            entry = await pool.take("bwrap", cfg, ahead)
        assert ahead.state == "done" and await _starts_after(before, 0.0) == 1
        assert entry is not None and entry.hit and entry.ahead
        box = await entry.claim(cfg)
        assert (await box.exec("echo $TRIAL_VALUE")).stdout == "x\n"
        await entry.release()
        assert await _starts_after(before) == 1  # the take started none, nor a refill
        # asked, then taken or given up before it started: it never starts
        await starts.acquire()
        dropped = pool.expect("bwrap", cfg)
        WarmPool.drop(dropped)
        starts.release()
        assert await _starts_after(before) == 1 and pool.idle == 0
        assert dropped is not None and dropped.state == "dropped"
    finally:
        await pool.close()
    assert _ours(tmp_path) == [] and mounts_below(tmp_path) == []


async def test_a_take_waits_for_its_clean_room_starting_ahead_and_the_cap_holds(tmp_path):
    """A trial that asks for its clean room while the one asked ahead for it is starting
    waits for that start instead of making another; no more than max_ahead are started ahead
    and not taken; asks queued at close never start, and nothing is left."""
    from clawrig.sandbox.client import SupervisedSandbox

    ws, src = tmp_path / "ws", tmp_path / "src"
    ws.mkdir()
    src.mkdir()
    cfg = _config(ws, src, "x")
    pool = WarmPool(parallel=1, max_idle=0, max_ahead=1, work_dir=tmp_path)
    before = SupervisedSandbox.starts
    try:
        first = pool.expect("bwrap", cfg)
        for _ in range(200):  # the start under way (its supervisor not up yet)
            if first is not None and first.state != "queued":
                break
            await asyncio.sleep(0.005)
        assert first is not None and first.state == "starting"
        entry = await pool.take("bwrap", cfg, first)
        assert entry is not None and entry.hit and entry.ahead
        assert await _starts_after(before) == 1
        # the cap: two asked, one started until it is taken
        second, third = pool.expect("bwrap", cfg), pool.expect("bwrap", cfg)
        await _wait_idle(pool, 1)
        assert await _starts_after(before) == 2 and pool.idle == 1
        assert second is not None and second.state == "done"
        assert third is not None and third.state == "queued"
        await entry.release()
    finally:
        await pool.close()  # the third, queued, never starts
    assert await _starts_after(before) == 2
    assert _ours(tmp_path) == [] and mounts_below(tmp_path) == []
