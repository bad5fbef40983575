"""Every bwrap sandbox runs in a cpu cgroup of its own below its harness's, below clawrig's
(cgroup v1: CPU_GROUPS, a quarter of one session's weight), whatever started its processes (the
launcher's shell, the pooled launcher, the zygote) and however many sessions they start: with
the kernel's autogroups a session had the harness's whole CPU weight, so a sandbox's
``setsid`` outweighed the nice value it was given; in one cgroup for all, a trial's busy
processes took the other trials' share. Stopping one sandbox leaves the others' processes
alone, and the harness's group goes with it."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clawrig.sandbox.bwrap import CPU_GROUPS, SANDBOXES_CPU_SHARES, sandbox_cpu_group
from sandbox_procs import processes_in_sandbox

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(
        os.geteuid() != 0 or not Path("/sys/fs/cgroup/cpu/cpu.shares").exists(),
        reason="no cgroup v1 cpu controller we may write (root on a v1 or hybrid host)",
    ),
]


def _cpu_cgroup_of(pid: int) -> str:
    """The host's view of ``pid``'s cgroup in the v1 cpu hierarchy (/proc/PID/cgroup)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _num, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    raise AssertionError(f"no cpu hierarchy in /proc/{pid}/cgroup")


@pytest.mark.parametrize("kind", ["bwrap", "bwrap-started", "pooled"])
async def test_a_sandboxs_processes_and_their_sessions_are_in_the_harnesss_cpu_group(
    make_sandbox, kind
):
    sb = await make_sandbox(kind)
    other = await make_sandbox(kind)
    group = CPU_GROUPS / f"clawrig-{os.getpid()}-sandboxes"
    assert sandbox_cpu_group() == group
    # clawrig's folder weighs a quarter of a session; each sandbox's cgroup as much as another's
    assert int((CPU_GROUPS / "cpu.shares").read_text()) == SANDBOXES_CPU_SHARES == 256
    # a command that starts a session of its own (with autogroups: a scheduling group of its
    # own, with the harness's weight, were it not for the cgroup)
    await sb.spawn("setsid sleep 300")
    bwrap = sb._proc.pid
    for _ in range(200):
        inside = processes_in_sandbox(bwrap)
        sleeps = [p for p in inside if _comm(p) == "sleep"]
        if sleeps:
            break
        await asyncio.sleep(0.05)
    assert len(sleeps) == 1 and os.getsid(sleeps[0]) == sleeps[0]  # its own session
    comms = sorted(_comm(p) for p in inside)
    assert "python3" in comms and len(inside) >= 3, comms  # the init, the supervisor, the sleep
    own = {_cpu_cgroup_of(pid) for pid in [bwrap, *inside]}
    [path] = own  # bwrap, the init, the supervisor, the sleep: one cgroup
    assert path.startswith(f"/clawrig/{group.name}/clawrig-{os.getpid()}-"), path
    theirs = {
        _cpu_cgroup_of(pid) for pid in [other._proc.pid, *processes_in_sandbox(other._proc.pid)]
    }
    assert len(theirs) == 1 and theirs != own and theirs.pop().startswith(f"/clawrig/{group.name}/")
    listed = {
        int(p) for p in (CPU_GROUPS.parent / path.lstrip("/") / "cgroup.procs").read_text().split()
    }
    assert {bwrap, *inside} <= listed
    assert int((CPU_GROUPS.parent / path.lstrip("/") / "cpu.shares").read_text()) == 1024


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def _cpu_ticks(pid: int) -> int:
    """utime + stime of ``pid`` (clock ticks, /proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.mark.skipif(shutil.which("taskset") is None, reason="no taskset (util-linux)")
async def test_a_busy_sandbox_gets_a_quarter_of_what_a_busy_session_gets_on_a_shared_cpu(
    make_sandbox,
):
    """A harness-like process (a session of its own: an autogroup of weight 1024) and a
    sandbox's busy loop pinned to one CPU share it 1024:256. With clawrig's folder at the
    default 1024 they split it evenly (checked by setting it back below)."""
    sb = await make_sandbox("bwrap")
    cpu = str(min(os.sched_getaffinity(0)))
    await sb.spawn(f"exec taskset -c {cpu} sh -c 'while :; do :; done'")
    loop = None
    for _ in range(200):
        busy = [p for p in processes_in_sandbox(sb._proc.pid) if _comm(p) == "sh"]
        if busy:
            loop = busy[0]
            break
        await asyncio.sleep(0.05)
    assert loop is not None
    session = subprocess.Popen(
        ["taskset", "-c", cpu, sys.executable, "-c", "while True: pass"], start_new_session=True
    )
    try:
        await asyncio.sleep(0.5)  # both on the CPU, the kernel's averages settled
        ticks = (_cpu_ticks(session.pid), _cpu_ticks(loop))
        await asyncio.sleep(2.0)
        ours = _cpu_ticks(session.pid) - ticks[0]
        theirs = _cpu_ticks(loop) - ticks[1]
    finally:
        session.kill()
        session.wait()
    # 4:1 expected (1024:256); an even split (the default weight) gives ~1:1
    assert ours >= 2.5 * theirs > 0, (ours, theirs)


async def test_stopping_one_sandbox_leaves_the_others_in_the_group_running(make_sandbox):
    first = await make_sandbox("bwrap")
    second = await make_sandbox("bwrap")
    await second.spawn("sleep 300")
    await first.stop()  # kills what is in its own cgroups, not the shared cpu group
    r = await second.exec("pgrep -x sleep | wc -l; echo alive")
    assert r.stdout.split() == ["1", "alive"], r.stdout


PROBE = """
import asyncio, os, sys, tempfile
from pathlib import Path
from clawrig.sandbox import SandboxConfig, create_sandbox
from clawrig.sandbox.bwrap import sandbox_cpu_group

async def main():
    ws = Path(tempfile.mkdtemp())
    sb = create_sandbox("bwrap", SandboxConfig(workspace_dir=ws))
    await sb.start()
    print(sandbox_cpu_group(), flush=True)
    assert (await sb.exec("echo up")).stdout == "up\\n"
    await sb.stop()

asyncio.run(main())
"""


def test_the_group_goes_with_its_harness():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    group = Path(done.stdout.split()[0])
    assert group.parent == CPU_GROUPS and group.name.endswith("-sandboxes")
    assert not group.exists()  # removed at the harness's exit
