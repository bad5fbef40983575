"""A harness killed with SIGKILL leaves its sandbox and trial folders behind; the next job
removes them (issue 14: leftovers of a killed job are swept at the next start)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from clawrig.leftovers import KINDS, owned_tempdir, pid_alive, sweep_dead, unmount_below

TASK = """---
id: slow_warmup
name: Slow warmup
category: 01_Productivity_Flow
timeout_seconds: 60
---

## Prompt

Do nothing.

## Automated Checks

```python
def grade(**kwargs):
    return {"overall_score": 1.0}
```

## Warmup

```bash
sleep 120
```

## Workspace Path

```
workspace/slow
```
"""


def _suite(root: Path) -> Path:
    (root / "tasks").mkdir(parents=True)
    (root / "tasks" / "slow_warmup.md").write_text(TASK)
    (root / "workspace" / "slow" / "exec").mkdir(parents=True)
    return root / "tasks"


def _ours(tmp: Path, pid: int) -> list[Path]:
    """The harness ``pid``'s trial folders in ``tmp`` (or in its tmpfs there, with its disk
    images' folder: leftovers.scratch_dir) and the sandbox folders on their disks."""
    return sorted(
        p
        for top in ("", f"clawrig-scratch-{pid}-*/")
        for pattern in (
            f"clawrig-trial-{pid}-*",
            f"clawrig-trial-{pid}-*/fs/clawrig-sbx-{pid}-*",
            f"clawrig-pool-{pid}-*",
            f"clawrig-pool-{pid}-*/w/clawrig-trial-{pid}-*/fs/clawrig-sbx-{pid}-*",
            *([f"clawrig-scratch-{pid}-*", f"clawrig-bulk-{pid}-*"] if not top else []),
        )
        for p in tmp.glob(top + pattern)
    )


@pytest.mark.sandbox
def test_a_killed_jobs_folders_are_swept_by_the_next(tmp_path: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="leftovers-", dir="/tmp"))
    os.chmod(tmp, 0o755)  # the sandbox's uid must reach its root under it
    try:
        suite = _suite(tmp_path / "bench")
        env = dict(os.environ, TMPDIR=str(tmp))
        cmd = [sys.executable, "-m", "clawrig", "run", str(suite), "--agent", "nop"]
        first = subprocess.Popen(
            cmd + ["-o", str(tmp_path / "out1")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(600):  # until its trial sits in the warmup: both folders exist
            if {p.name.split("-")[1] for p in _ours(tmp, first.pid)} >= {"sbx", "trial"}:
                break
            time.sleep(0.1)
        left = _ours(tmp, first.pid)
        assert {p.name.split("-")[1] for p in left} >= {"sbx", "trial"}
        first.send_signal(signal.SIGKILL)
        first.wait()
        time.sleep(0.5)
        assert all(p.exists() for p in left)  # nothing cleaned up after a SIGKILL
        quick = tmp_path / "quick"  # the same task without its slow warmup
        _suite(quick)
        (quick / "tasks" / "slow_warmup.md").write_text(TASK.replace("sleep 120", "true"))
        second = subprocess.run(
            [*cmd[:4], str(quick / "tasks"), *cmd[5:], "-o", str(tmp_path / "out2")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert second.returncode in (0, 1), second.stderr
        assert not any(p.exists() for p in left)
        assert str(tmp) not in Path("/proc/self/mountinfo").read_text()  # the disk unmounted
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        subprocess.run(["chmod", "-R", "u+rwX", str(tmp)], check=False)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def test_sweep_keeps_folders_of_live_harnesses(tmp_path: Path) -> None:
    mine = owned_tempdir("trial", tmp_path)
    sleeper = subprocess.Popen(["sleep", "30"])
    probe = subprocess.Popen(["true"])
    probe.wait()
    assert not pid_alive(probe.pid)
    live = tmp_path / f"clawrig-sbx-{sleeper.pid}-abc"
    live.mkdir()
    dead = tmp_path / f"clawrig-trial-{probe.pid}-xyz"
    (dead / "sub").mkdir(parents=True)
    os.chmod(dead / "sub", 0o000)  # a folder the sandbox left unreadable
    other = tmp_path / "clawrig-other-1-x"
    other.mkdir()
    try:
        assert sweep_dead(tmp_path) == [dead]
        assert mine.exists() and live.exists() and other.exists() and not dead.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_names_that_only_look_like_a_harness_s_are_passed_over() -> None:
    """helper-227: ``clawrig-trial-²-x`` (a digit to ``isdigit``, not to ``int``) or a
    20-digit pid, planted in the temp folder (anyone may write there), crashed every harness's
    sweep (its scratch then stayed mounted) and ``clawrig cleanup``; a file or link of such a
    name made cleanup exit 1 for rights it did not lack."""
    from clawrig.sandbox.bwrap import sweep_stale_cgroups
    from clawrig.sandbox.pyenv import sweep_stale_stages

    # a short temp folder: cleanup sweeps it alone (not /tmp, where a deep one's sockets go)
    tmp = Path(tempfile.mkdtemp(prefix="odd-", dir="/tmp"))
    try:
        odd = [tmp / f"clawrig-trial-{pid}-x" for pid in ("²", "٣", "9" * 20, "12345678901")]
        for folder in odd:
            folder.mkdir()
        probe = subprocess.Popen(["true"])
        probe.wait()
        (tmp / f"clawrig-trial-{probe.pid}-file").write_text("not a harness's")
        (tmp / f"clawrig-trial-{probe.pid}-link").symlink_to(tmp / "elsewhere")
        assert sweep_dead(tmp) == [] and all(p.is_dir() for p in odd)
        stages = tmp / "stage"
        for name in ("²-a", f"{'9' * 20}-b"):
            (stages / name).mkdir(parents=True)
        assert sweep_stale_stages(stages) == 0 and len(list(stages.iterdir())) == 2
        sweep_stale_cgroups()  # (the machine's: names it cannot read as pids are passed over)
        r = subprocess.run(
            [sys.executable, "-m", "clawrig", "cleanup"],
            env=dict(os.environ, TMPDIR=str(tmp), CLAWRIG_CACHE_DIR=str(tmp / "cache")),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
        assert "not removed" not in r.stdout and all(p.is_dir() for p in odd)
    finally:
        shutil.rmtree(tmp)


def test_every_owned_folder_kind_is_swept_after_its_harness_died(tmp_path: Path) -> None:
    """A folder of each kind a harness makes (sockets, scratch, the gateway's door, the egress
    proxy ...) is removed by the next harness once its owner is gone; one whose kind is only a
    prefix of a known kind, or whose owner lives, stays."""
    probe = subprocess.Popen(["true"])
    probe.wait()
    assert not pid_alive(probe.pid)
    dead = [tmp_path / f"clawrig-{kind}-{probe.pid}-q1" for kind in KINDS]
    alive = [tmp_path / f"clawrig-{kind}-{os.getppid()}-q2" for kind in KINDS]
    unknown = [tmp_path / f"clawrig-gwdoorx-{probe.pid}-q3", tmp_path / f"clawrig-{probe.pid}-q4"]
    for folder in dead + alive + unknown:
        (folder / "sock").mkdir(parents=True)
    assert sorted(sweep_dead(tmp_path)) == sorted(dead)
    assert all(f.exists() for f in alive + unknown) and not any(f.exists() for f in dead)


def test_an_owned_folder_of_an_unknown_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown kind 'nope'"):
        owned_tempdir("nope", tmp_path)


def _mount_tmpfs(point: Path) -> None:
    from clawrig.sandbox.disk import libc

    point.mkdir(parents=True, exist_ok=True)
    assert libc().mount(b"t", os.fsencode(point), b"tmpfs", 0, b"size=64k") == 0
    (point / "f").write_text("x")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")
def test_a_dead_pools_mounts_are_all_detached_and_its_folder_removed(tmp_path: Path) -> None:
    # what a killed job's warm pool leaves: hundreds of mounts below its root (disks, slots,
    # mounts on mounts), and one stacked on another's point; the sweep detaches them all
    from clawrig.leftovers import mounts_below, outermost, unmount_below

    probe = subprocess.Popen(["true"])
    probe.wait()
    dead = tmp_path / f"clawrig-pool-{probe.pid}-abc"
    try:
        _mount_tmpfs(dead / "w")
        for i in range(300):
            _mount_tmpfs(dead / "w" / f"e{i}" / "fs")
            _mount_tmpfs(dead / "w" / f"e{i}" / "fs" / "b")
        _mount_tmpfs(dead / "w" / "e0" / "fs")  # stacked on e0/fs
        _mount_tmpfs(dead / "p")
        points = mounts_below(dead)
        assert len(points) == 2 + 2 * 300  # (the stacked point's path is listed once)
        assert outermost(points) == [str(dead / "p"), str(dead / "w")]
        assert sweep_dead(tmp_path) == [dead]
        assert mounts_below(tmp_path) == [] and not dead.exists()
    finally:
        unmount_below(tmp_path)


def test_outermost_mount_points() -> None:
    from clawrig.leftovers import outermost

    got = outermost(["/a/b/c", "/a/b", "/a/bc", "/x", "/a/b", "/x/y/z"])
    assert got == ["/x", "/a/b", "/a/bc"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")
def test_mounts_below_names_with_spaces_and_non_ascii_letters(tmp_path: Path) -> None:
    """A red-team finding: mountinfo was decoded as ``unicode_escape``, which turned a UTF-8
    name's bytes into other letters, so mounts under such a --work-dir were never found (and a
    sweep then removed files inside the still-mounted file system)."""
    from clawrig.leftovers import mounts_below, unmount_below

    base = tmp_path / "wörk dir\\x"
    probe = subprocess.Popen(["true"])
    probe.wait()
    dead = base / f"clawrig-pool-{probe.pid}-é"
    try:
        _mount_tmpfs(dead / "w" / "fs é")
        assert mounts_below(base) == [str(dead / "w" / "fs é")]
        assert sweep_dead(base) == [dead]
        assert mounts_below(base) == [] and not dead.exists()
    finally:
        unmount_below(tmp_path)


_RACE = r"""
import ctypes, os, sys, threading, time
from pathlib import Path
from clawrig.leftovers import owned_tempdir, release_own_mounts
from clawrig.sandbox.disk import mount

base, when = Path(sys.argv[1]), sys.argv[2]
folder = owned_tempdir("pool", base)
(folder / "m").mkdir()
(folder / "n").mkdir()
inside, released = threading.Event(), threading.Event()
outcome = []

def held():  # a warm pool's thread in the middle of a mount when the second Ctrl-C comes
    from clawrig.leftovers import mounting
    with mounting(folder / "m"):
        inside.set()
        time.sleep(0.5)
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.mount(b"tmpfs", os.fsencode(folder / "m"), b"tmpfs", 0, None) == 0

def late():  # ... and one that starts its mount just after the release
    inside.set()
    released.wait()
    try:
        mount("tmpfs", folder / "n", "tmpfs")
        outcome.append("mounted after the release")
    except OSError as exc:
        outcome.append(f"refused: {exc}")

t = threading.Thread(target=held if when == "held" else late)
t.start()
inside.wait(10)
release_own_mounts()
released.set()
t.join()
print(*outcome, flush=True)
os._exit(0)  # as the second Ctrl-C does: no atexit to release again
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")
@pytest.mark.parametrize("when", ["held", "late"])
def test_no_mount_outlives_the_release_at_exit(tmp_path, when):
    """release_own_mounts (at exit, and before the second Ctrl-C's os._exit) waits for a mount
    another thread is making and releases it; a mount tried after it is refused (ESHUTDOWN), so
    none stays in the host's mount table after the process."""
    r = subprocess.run(
        [sys.executable, "-c", _RACE, str(tmp_path), when],
        capture_output=True,
        text=True,
        timeout=60,
    )
    left = [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(str(tmp_path))
    ]
    for point in sorted(left, reverse=True):
        subprocess.run(["umount", "-l", point], check=False)
    assert r.returncode == 0, r.stderr
    assert left == [], (left, r.stdout)
    if when == "late":
        assert r.stdout.startswith("refused: ") and "exiting" in r.stdout, r.stdout


@pytest.mark.sandbox
def test_a_killed_verify_is_swept_by_the_next_harness(tmp_path: Path) -> None:
    """`clawrig verify` killed with SIGKILL while a sample's trial runs (its warmup): its work
    folder, with the trial's disk mounted below it, is unmounted and removed by the next
    harness to start (it was a plain temp folder no sweep looked at: the disks stayed mounted
    until the machine restarted)."""
    tmp = Path(tempfile.mkdtemp(prefix="leftovers-", dir="/tmp"))
    os.chmod(tmp, 0o755)
    verify = None
    try:
        suite = _suite(tmp_path / "bench")
        env = dict(os.environ, TMPDIR=str(tmp))
        verify = subprocess.Popen(
            [sys.executable, "-m", "clawrig", "verify", str(suite)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        work: list[Path] = []
        for _ in range(600):  # until a trial's disk is mounted below its work folder
            work = list(tmp.glob(f"clawrig-verify-{verify.pid}-*"))
            if work and str(work[0]) in Path("/proc/self/mountinfo").read_text():
                break
            time.sleep(0.1)
        assert work and str(work[0]) in Path("/proc/self/mountinfo").read_text()
        verify.send_signal(signal.SIGKILL)
        verify.wait()
        time.sleep(0.5)
        assert work[0].exists()  # nothing cleaned up after a SIGKILL
        quick = tmp_path / "quick"
        _suite(quick)
        (quick / "tasks" / "slow_warmup.md").write_text(TASK.replace("sleep 120", "true"))
        cmd = [sys.executable, "-m", "clawrig", "run", str(quick / "tasks"), "--agent", "nop"]
        second = subprocess.run(
            [*cmd, "-o", str(tmp_path / "out")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert second.returncode in (0, 1), second.stderr
        assert not work[0].exists()
        assert str(tmp) not in Path("/proc/self/mountinfo").read_text()
    finally:
        if verify is not None and verify.poll() is None:
            verify.kill()
            verify.wait()
        unmount_below(tmp)  # what a failed run left: never in another test's way
        subprocess.run(["chmod", "-R", "u+rwX", str(tmp)], check=False)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def _cgroups_of(pid: int) -> list[Path]:
    """The cgroup folders of the harness ``pid``'s sandboxes (cgroup v1 or v2)."""
    root = Path("/sys/fs/cgroup")
    return sorted(
        p
        for pattern in (f"*/clawrig/clawrig-{pid}-*", f"clawrig/clawrig-{pid}-*")
        for p in root.glob(pattern)
    )


@pytest.mark.sandbox
def test_cleanup_removes_what_a_killed_job_left_and_keeps_a_running_ones(tmp_path: Path) -> None:
    """``kill -9`` left a job's folders, mounts and cgroups until the next job started (a LOW
    finding, session 47): ``clawrig cleanup`` removes them now, and keeps those of a job that
    runs."""
    if os.geteuid() != 0:
        pytest.skip("a job's mounts and cgroups need root")
    tmp = Path(tempfile.mkdtemp(prefix="cleanup-", dir="/tmp"))
    os.chmod(tmp, 0o755)
    jobs: list[subprocess.Popen[bytes]] = []
    try:
        suite = _suite(tmp_path / "bench")
        env = dict(os.environ, TMPDIR=str(tmp), CLAWRIG_CACHE_DIR=str(tmp_path / "cache"))
        for name in ("killed", "running"):
            jobs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "clawrig", "run", str(suite), "--agent", "nop"]
                    + ["-o", str(tmp_path / name)],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        for job in jobs:  # until its trial sits in the warmup: its sandbox is up
            for _ in range(600):
                if {p.name.split("-")[1] for p in _ours(tmp, job.pid)} >= {"sbx", "trial"}:
                    break
                time.sleep(0.1)
        killed, running = jobs
        left, kept = _ours(tmp, killed.pid), _ours(tmp, running.pid)
        groups = _cgroups_of(killed.pid)
        assert left and kept and groups
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        time.sleep(0.5)
        assert (
            all(p.exists() for p in left) and str(tmp) in Path("/proc/self/mountinfo").read_text()
        )

        def cleanup() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "clawrig", "cleanup"],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )

        r = cleanup()
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
        said = " ".join(r.stdout.split())
        assert f"in {tmp} (of process(es) {killed.pid}), unmounting " in said, said
        assert re.search(r"unmounting [1-9]\d* mount\(s\) below them", said), said
        assert not any(p.exists() for p in left)
        assert not any(p.exists() for p in groups)
        assert all(p.exists() for p in kept) and _cgroups_of(running.pid)
        mounted = Path("/proc/self/mountinfo").read_text()
        assert f"clawrig-scratch-{killed.pid}-" not in mounted
        assert f"clawrig-scratch-{running.pid}-" in mounted  # (its tmpfs scratch)
        running.send_signal(signal.SIGKILL)
        running.wait()
        r = cleanup()
        assert r.returncode == 0 and f"(of process(es) {running.pid})" in " ".join(r.stdout.split())
        assert (
            not any(p.exists() for p in kept)
            and str(tmp) not in Path("/proc/self/mountinfo").read_text()
        )
        r = cleanup()  # (another test's killed harness may leave cgroups meanwhile)
        said = " ".join(r.stdout.split())
        assert r.returncode == 0 and (
            said == "nothing left by clawrig processes that are gone"
            or (said.startswith("removed ") and "folder(s)" not in said)
        ), said
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
                job.wait()
        subprocess.run(["chmod", "-R", "u+rwX", str(tmp)], check=False)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
