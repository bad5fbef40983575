"""spawn_exec: the sandboxes' launcher processes started by subprocess.Popen (vfork) and waited
for on a pid file descriptor, on asyncio's event loop and on uvloop's (whose own process start
forks the whole harness process). Real processes: exit codes, stderr, kill, signals."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from clawrig.runner.job import run_in_loop
from clawrig.sandbox.client import SpawnedProcess, spawn_exec

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pid file descriptors")


def _loops() -> list[Any]:
    loops: list[Any] = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    try:
        import uvloop
    except ImportError:
        return loops
    return [*loops, pytest.param(uvloop.new_event_loop, id="uvloop")]


def _run(factory: Callable[[], asyncio.AbstractEventLoop], coro: Coroutine[Any, Any, Any]) -> Any:
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


@pytest.mark.parametrize("factory", _loops())
def test_exit_code_and_stderr(factory: Callable[[], asyncio.AbstractEventLoop]) -> None:
    async def main() -> tuple[int, bytes, int | None]:
        proc = await spawn_exec(
            "/bin/sh",
            "-c",
            "echo to-stderr >&2; exit 3",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        assert isinstance(proc, SpawnedProcess)
        assert proc.stderr is not None
        err = await proc.stderr.read()
        code = await proc.wait()
        return code, err, proc.returncode

    assert _run(factory, main()) == (3, b"to-stderr\n", 3)


@pytest.mark.parametrize("factory", _loops())
def test_kill_and_signals(factory: Callable[[], asyncio.AbstractEventLoop]) -> None:
    async def main() -> tuple[int, int, bool]:
        killed = await spawn_exec("sleep", "300", stderr=asyncio.subprocess.DEVNULL)
        assert killed.returncode is None
        killed.kill()
        killed_code = await asyncio.wait_for(killed.wait(), 30)
        termed = await spawn_exec("sleep", "300")
        termed.send_signal(signal.SIGTERM)
        termed_code = await asyncio.wait_for(termed.wait(), 30)
        try:
            termed.kill()  # reaped: its pid may be another process's by now
        except ProcessLookupError:
            refused = True
        else:
            refused = False
        return killed_code, termed_code, refused

    assert _run(factory, main()) == (-signal.SIGKILL, -signal.SIGTERM, True)


def test_passes_descriptors_it_is_given() -> None:
    async def main() -> bytes:
        r, w = os.pipe()
        try:
            proc = await spawn_exec("/bin/sh", "-c", f"echo through > /dev/fd/{w}", pass_fds=(w,))
        finally:
            os.close(w)
        assert await proc.wait() == 0
        with os.fdopen(r, "rb") as pipe:
            return pipe.read()

    assert run_in_loop(main()) == b"through\n"


def test_a_program_that_does_not_exist_raises() -> None:
    async def main() -> None:
        await spawn_exec("/nonexistent/clawrig-no-such-program")

    with pytest.raises(FileNotFoundError):
        run_in_loop(main())
