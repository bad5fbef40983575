"""A bwrap sandbox's stop leaves nothing behind even when bwrap's ``--die-with-parent`` did not
take (bwrap killed before its init process asked for it, a race under load): every process of
the sandbox's cgroup is killed. Before, such an orphan held the sandbox's pipes, so the stop of
a sandbox that failed to start waited for it forever and a job sat idle at its end (issue 19)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clawrig.sandbox import Limits, SandboxConfig
from clawrig.sandbox.bwrap import BwrapSandbox, bwrap_path

pytestmark = pytest.mark.sandbox


async def test_stop_kills_what_is_left_in_the_sandboxs_cgroup(tmp_path: Path):
    if bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    sb = BwrapSandbox(
        SandboxConfig(workspace_dir=tmp_path / "ws", limits=Limits(memory_bytes=1 << 30))
    )
    await sb.start()
    assert sb.cgroup is not None and sb._proc is not None
    if not sb.cgroup.procs_files:
        await sb.stop()
        pytest.skip("no cgroup for the sandbox (the harness is not root)")
    dirs = list(sb.cgroup.dirs)
    # an orphan of the sandbox: in its cgroup, holding its stdout pipe (what bwrap's init and
    # the supervisor hold when --die-with-parent misses)
    with open(f"/proc/{sb._proc.pid}/fd/1", "wb") as pipe:
        orphan = subprocess.Popen(["sleep", "300"], stdout=pipe, start_new_session=True)
    try:
        for procs in sb.cgroup.procs_files:
            Path(procs).write_text(str(orphan.pid))
        await sb.stop()
        assert orphan.wait(timeout=30) == -9  # killed, not left running
        assert not any(d.exists() for d in dirs)  # and the cgroup removed
    finally:
        if orphan.poll() is None:
            os.kill(orphan.pid, 9)
            orphan.wait()
