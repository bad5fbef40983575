"""Docker's part of the lifecycle tests bwrap passes (tests/runner/test_leftovers.py): a harness
killed with SIGKILL while its sandbox runs leaves no container (nor the agent's background
process inside it) behind, with no sweep by a later harness needed: the container's main
process, the supervisor, ends when the channel (the client's stdin) closes, and ``--rm``
removes the container."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from clawrig.sandbox.docker import HARNESS_LABEL

pytestmark = pytest.mark.sandbox

HARNESS = textwrap.dedent(
    """
    import asyncio, sys, tempfile
    from pathlib import Path
    from clawrig.sandbox import SandboxConfig, create_sandbox

    async def main():
        ws = Path(tempfile.mkdtemp())
        box = create_sandbox("docker", SandboxConfig(workspace_dir=ws, image=sys.argv[1]))
        await box.start()
        await box.spawn("sleep 600")  # the agent's background process
        print("ready", flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def _containers(pid: int) -> list[str]:
    r = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={HARNESS_LABEL}={pid}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout.split()


def test_a_killed_harness_leaves_no_container(docker_image):
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, docker_image],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert harness.stdout is not None
        assert harness.stdout.readline().strip() == "ready", harness.stderr.read()
        assert len(_containers(harness.pid)) == 1  # running, labelled with its harness
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait()
        for _ in range(120):
            if not _containers(harness.pid):
                break
            time.sleep(0.5)
        assert _containers(harness.pid) == []
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()
        for cid in _containers(harness.pid):
            subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
