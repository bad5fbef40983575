"""Runs last (the folder name sorts last): no sandbox process may outlive the tests."""

from __future__ import annotations

import os
import time
from pathlib import Path


def _leftovers() -> list[str]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "clawrig/supervisor.py" in cmd or cmd.startswith("bwrap ") or "/bwrap " in cmd:
            found.append(f"{name}: {cmd[:120]}")
    return found


def test_no_sandbox_process_is_left_behind():
    deadline = time.monotonic() + 5
    while _leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _leftovers() == []


def test_no_sandbox_cgroup_is_left_behind():
    left = []
    for root in (
        Path("/sys/fs/cgroup/clawrig"),
        Path("/sys/fs/cgroup/memory/clawrig"),
        Path("/sys/fs/cgroup/pids/clawrig"),
    ):
        if root.is_dir():
            left += [p.name for p in root.iterdir() if p.is_dir()]
    assert left == []
