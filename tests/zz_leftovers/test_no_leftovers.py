"""Runs last (the folder name sorts last): no sandbox process, cgroup, overlay mount or Docker
container may outlive the tests.

Scoped to this test session, so other clawrig runs on the machine do not count: a leftover is
a process in a sandbox cgroup (``clawrig-<harness pid>-...``) whose harness is this process or
is gone (a job a test killed), or a bwrap process whose parent is this process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CGROUP_PARENTS = (
    Path("/sys/fs/cgroup/clawrig"),
    Path("/sys/fs/cgroup/memory/clawrig"),
    Path("/sys/fs/cgroup/pids/clawrig"),
)


def _harness_pid(name: str) -> int | None:
    parts = name.split("-")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def _ours(harness: int | None) -> bool:
    return harness is not None and (harness == os.getpid() or not Path(f"/proc/{harness}").exists())


def _leftover_processes() -> list[str]:
    found = []
    me = os.getpid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cgroups = Path(f"/proc/{pid}/cgroup").read_text()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        names = [
            seg
            for line in cgroups.splitlines()
            for seg in line.split("/")
            if seg.startswith("clawrig-")
        ]
        if any(_ours(_harness_pid(n)) for n in names) or (comm == "bwrap" and ppid == me):
            found.append(f"{pid} {comm}")
    return found


def _leftover_cgroups() -> list[str]:
    left = []
    for root in CGROUP_PARENTS:
        if root.is_dir():
            left += [
                str(d) for d in root.iterdir() if d.is_dir() and _harness_pid(d.name) == os.getpid()
            ]
    return left


async def test_the_check_sees_a_running_sandbox(tmp_path):
    from clawrig.sandbox import SandboxConfig, create_sandbox

    sb = create_sandbox("bwrap", SandboxConfig(workspace_dir=tmp_path))
    await sb.start()
    try:
        assert _leftover_processes()
        if sb.cgroup is not None and sb.cgroup.dirs:
            assert _leftover_cgroups()
    finally:
        await sb.stop()


def test_no_sandbox_process_is_left_behind():
    deadline = time.monotonic() + 5
    while _leftover_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _leftover_processes() == []


def test_no_sandbox_cgroup_is_left_behind():
    assert _leftover_cgroups() == []


def _overlay_mounts() -> list[str]:
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if " - overlay " in line and f"/ovl-{os.getpid()}/" in line.split()[4]
    ]


async def test_the_check_sees_a_sandbox_overlay(tmp_path, base_rootfs):
    from clawrig.sandbox import SandboxConfig, create_sandbox

    cfg = SandboxConfig(workspace_dir=tmp_path, rootfs=base_rootfs, writable_root=True)
    sb = create_sandbox("bwrap", cfg)
    await sb.start()
    try:
        assert _overlay_mounts() == [str(sb.overlay.merged)]  # type: ignore[attr-defined]
    finally:
        await sb.stop()


def test_no_overlay_or_container_is_left_behind():
    import shutil
    import subprocess

    from clawrig.sandbox.docker import HARNESS_LABEL

    assert _overlay_mounts() == []  # every sandbox overlay is unmounted at stop
    if shutil.which("docker") is None:
        return
    r = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={HARNESS_LABEL}={os.getpid()}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.stdout.split() == []
