"""Every bwrap sandbox runs in a cpu cgroup of its own below its harness's, below clawrig's
(cgroup v1: CPU_GROUPS, the weight of one session), whatever started its processes (the
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

from clawrig.sandbox.bwrap import CPU_GROUPS, sandbox_cpu_group
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
    # clawrig's folder weighs one session; each sandbox's cgroup as much as another's
    assert int((CPU_GROUPS / "cpu.shares").read_text()) == 1024
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
