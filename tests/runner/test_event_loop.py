"""The job's event loop (run_in_loop): uvloop's when it is installed, and on it what a job
uses works: a subprocess started by spawn_exec and waited for, asyncio.to_thread, a signal
handler, a timeout."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from clawrig.runner.job import run_in_loop
from clawrig.sandbox.client import spawn_exec


def test_the_job_loop_is_uvloops_when_installed() -> None:
    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    try:
        import uvloop  # noqa: F401
    except ImportError:
        expected = "asyncio"
    else:
        expected = "uvloop"
    assert run_in_loop(which()).split(".")[0] == expected


def test_subprocess_thread_signal_and_timeout_on_the_job_loop() -> None:
    async def main() -> tuple[int, bytes, int, bool, bool]:
        loop = asyncio.get_running_loop()
        proc = await spawn_exec(
            "/bin/sh", "-c", "echo err >&2; exit 7", stderr=asyncio.subprocess.PIPE
        )
        assert proc.stderr is not None
        err = await proc.stderr.read()
        code = await proc.wait()
        pid = await asyncio.to_thread(os.getpid)
        got = asyncio.Event()
        loop.add_signal_handler(signal.SIGUSR1, got.set)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.wait_for(got.wait(), 30)
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
        timed_out = False
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(30)
        except TimeoutError:
            timed_out = True
        return code, err, pid, got.is_set(), timed_out

    if not hasattr(os, "pidfd_open"):
        pytest.skip("no pid file descriptors")
    assert run_in_loop(main()) == (7, b"err\n", os.getpid(), True, True)
