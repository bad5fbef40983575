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
from ending import run_to_exit

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


CUT = textwrap.dedent(
    """
    import asyncio, faulthandler, glob, os, sys, tempfile
    faulthandler.enable(all_threads=True)  # SIGABRT: every thread's stack on stderr (a hang's)
    from pathlib import Path
    from clawrig.sandbox import SandboxConfig, create_sandbox

    ws, image, how = Path(sys.argv[1]), sys.argv[2], sys.argv[3]

    async def cut(steps, delay):
        box = create_sandbox("docker", SandboxConfig(workspace_dir=ws, image=image))
        start = asyncio.get_running_loop().create_task(box.start())
        for _ in range(steps):
            await asyncio.sleep(0)
        await asyncio.sleep(delay)
        if how != "exit" and not start.done():  # a trial cancelled: the loop goes on
            start.cancel()
            if how == "cancel2":  # and cancelled again during its clean-up
                for _ in range(5):
                    await asyncio.sleep(0)
                start.cancel()
            await asyncio.wait([start])
        done = start.done() and not start.cancelled() and start.exception() is None
        if done:
            await box.stop()
        return done
        # else asyncio.run's exit cancels every task left: the start's too

    def pipes():  # and sockets (the supervisor's connection)
        return sum(os.readlink("/proc/self/fd/" + f).startswith(("pipe:", "socket:"))
                   for f in os.listdir("/proc/self/fd") if os.path.exists("/proc/self/fd/" + f))

    first = pipes()
    cuts = [(steps, 0.0) for steps in range(40)] + [(0, 0.02 * k) for k in range(1, 150)]
    for steps, delay in cuts:
        done = asyncio.run(cut(steps, delay))
        print("started" if done else "cut", flush=True)
        if done and delay:
            break
    me = os.getpid()
    left = glob.glob(os.path.join(tempfile.gettempdir(), "clawrig-docker-%d-*" % me))
    print("leftover", len(left), "pipes", pipes() - first, file=sys.stderr)
    """
)


@pytest.mark.parametrize("how", ["exit", "cancel", "cancel2"])
def test_a_program_that_ends_while_its_container_starts_ends_and_leaves_none(
    docker_image, tmp_path, how
):
    """A docker sandbox's start cut at each step and every 20 ms until one starts: by
    asyncio.run's exit (a program ending, ``exit``) or a cancel while the loop goes on
    (``cancel``). With asyncio's subprocesses for the docker client the exit hung for good at
    the first step (CPython 3.11: see clawrig.sandbox.client.PidfdProcess), and a start
    cancelled while the container came up left it running and its folder. ``cancel2``: cancelled
    again during its clean-up. Now each ends with no container of the program's (a client
    killed while the engine made the container left it created for good: the client now ends
    by itself first), no sandbox folder, no pipe and no socket left."""
    (tmp_path / "tmp").mkdir()
    program = None
    try:
        program, out, err = run_to_exit(
            [sys.executable, "-c", CUT, str(tmp_path / "ws"), docker_image, how],
            300,
            env=dict(os.environ, TMPDIR=str(tmp_path / "tmp")),
        )
        states = out.split()
        assert program.returncode == 0 and states, err[-2000:]
        assert states.count("cut") >= 40 and states[-1] == "started"  # every cut, then a start
        assert err.split()[-4:] == ["leftover", "0", "pipes", "0"], err[-2000:]
        for _ in range(40):  # a container the engine made after its client was killed ends
            if not _containers(program.pid):  # (its supervisor finds no socket to reach)
                break
            time.sleep(0.5)
        assert _containers(program.pid) == []
    finally:
        for cid in _containers(program.pid) if program is not None else []:
            subprocess.run(["docker", "rm", "-f", cid], capture_output=True)


async def test_stopping_a_container_ends_its_reader_without_waiting_it_out(docker_image, tmp_path):
    # the client's death does not end a container, so its supervisor kept the protocol's
    # socket open until the container was removed, and stop() waited 2 s for the reader to
    # give up, then cancelled it (red team: every docker stop took 2.1 s). Now our end closes
    # first: the reader sees the end of the stream and ends by itself
    from clawrig.sandbox import SandboxConfig, create_sandbox

    box = create_sandbox("docker", SandboxConfig(workspace_dir=tmp_path, image=docker_image))
    await box.start()
    assert (await box.exec("echo hi")).stdout == "hi\n"
    reader = box._reader  # (a stopped sandbox keeps no finished task)
    await box.stop()
    assert reader is not None and reader.done()
    assert not reader.cancelled()  # ended by the stream's end, not cut at its 2 s


@pytest.mark.parametrize("command", ["run", "verify"])
def test_built_in_services_on_docker_are_refused_before_any_sandbox(
    command, docker_image, tmp_path
):
    """Demo samples 000008 and 000009 use the built-in mock services, whose environment is
    built for the host's python3: on Docker each trial failed at setup (helper-126, and
    verify's samples, helper-128); now both commands refuse before any sandbox starts,
    naming the tasks."""
    from pathlib import Path

    demo = Path(__file__).resolve().parents[2] / "suites" / "demo"
    out = tmp_path / "out"
    clawrig = str(Path(sys.executable).with_name("clawrig"))
    argv = [clawrig, command, str(demo), "--sandbox", "docker"]
    if command == "run":
        argv += ["-s", "000008,000009,000015", "--agent", "oracle", "--image", docker_image]
        argv += ["-o", str(out)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert (
        "--sandbox docker: 2 task(s) use clawrig's built-in mock services (000008, 000009)"
    ) in " ".join(r.stderr.split())
    assert not out.exists()  # no trial ran, nothing written
