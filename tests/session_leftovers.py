"""The leftover check the test session runs at its end (tests/conftest.py): no sandbox process,
cgroup, overlay mount, mount below the session's temp folder or Docker container may outlive
the tests.

Scoped to this process, so other clawrig runs on the machine do not count: a leftover is a
process in a sandbox cgroup (``clawrig-<harness pid>-...``) whose harness is this process or is
gone (a job a test killed), or a bwrap process whose parent is this process; a leftover cgroup
is one named for this process; a leftover overlay is a sandbox overlay mount with this
process's pid in its path; a leftover container carries this process's ``clawrig.harness``
label.
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


def leftover_processes() -> list[str]:
    """``"<pid> <comm>"`` of every leftover sandbox process (see the module docs)."""
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


def leftover_cgroups() -> list[str]:
    """Sandbox cgroup folders named for this process."""
    left = []
    for root in CGROUP_PARENTS:
        if root.is_dir():
            left += [
                str(d) for d in root.iterdir() if d.is_dir() and _harness_pid(d.name) == os.getpid()
            ]
    return left


def overlay_mounts() -> list[str]:
    """Mount points of this process's sandbox overlays (``.../ovl-<pid>/...``)."""
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if " - overlay " in line and f"/ovl-{os.getpid()}/" in line.split()[4]
    ]


def mounts_below(base: Path | None) -> list[str]:
    """Mount points below ``base`` (the session's temp folder, its xdist workers' too): a warm
    pool's or a trial's disk, slots or workspace still mounted after the test that made them
    (pytest's later cleanup of the folder failed on each with EBUSY)."""
    if base is None:
        return []
    from clawrig.leftovers import mounts_below as below

    return below(base)


def docker_containers() -> list[str]:
    """Ids of Docker containers this process started (none when Docker is not installed)."""
    import shutil
    import subprocess

    from clawrig.sandbox.docker import HARNESS_LABEL

    if shutil.which("docker") is None:
        return []
    r = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={HARNESS_LABEL}={os.getpid()}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return r.stdout.split()


def wait_for_no_leftovers(grace_s: float = 5.0, temp: Path | None = None) -> list[str]:
    """Leftover processes (after up to ``grace_s`` seconds for dying ones), cgroups, mounts
    and containers, as one-line descriptions (mounts: below ``temp``, the session's temp
    folder); empty when there are none."""
    deadline = time.monotonic() + grace_s
    while leftover_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    return (
        [f"process {p}" for p in leftover_processes()]
        + [f"cgroup {c}" for c in leftover_cgroups()]
        + [f"overlay mount {m}" for m in overlay_mounts()]
        + [f"mount {m}" for m in mounts_below(temp)]
        + [f"docker container {c}" for c in docker_containers()]
    )
