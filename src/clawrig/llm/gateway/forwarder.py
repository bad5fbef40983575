"""Launching the in-sandbox forwarder (:mod:`clawrig.llm.forwarder`, the stdlib-only script
that pipes a sandbox's ``127.0.0.1:FORWARDER_PORT`` to the gateway's unix socket)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clawrig.errors import SandboxError
from clawrig.llm.forwarder import READY_PREFIX
from clawrig.llm.gateway.wire import _one_line
from clawrig.sandbox.base import ProcessHandle, Sandbox

if TYPE_CHECKING:
    from clawrig.llm.gateway.server import Gateway

FORWARDER_PORT = 18199
"""The TCP port the in-sandbox forwarder listens on (the sandbox's own loopback)."""
SANDBOX_GATEWAY_DIR = "/opt/clawrig-gateway"
"""Where the gateway's folder (socket + forwarder script) is bound read-only in a sandbox."""
SOCKET_NAME = "gateway.sock"
FORWARDER_NAME = "forwarder.py"


def forwarder_script() -> Path:
    """The forwarder script's path in the installed package (copied into the gateway's
    folder)."""
    return Path(__file__).resolve().parent.parent / "forwarder.py"


@dataclass
class Forwarder:
    """A running in-sandbox forwarder: ``base_url`` is what programs inside use."""

    handle: ProcessHandle
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.handle.kill()


async def start_forwarder(
    sandbox: Sandbox,
    gateway: Gateway,
    *,
    port: int = FORWARDER_PORT,
    python: str = "/usr/bin/python3",
    ready_timeout_s: float = 15.0,
) -> Forwarder:
    """Start the forwarder inside ``sandbox`` (bound with ``gateway.sandbox_binds()``) on
    ``127.0.0.1:port`` and wait until it listens.

    On the ``local`` backend (no binds, host network) the host's socket path is used. Raises
    :class:`clawrig.errors.SandboxError` when it does not come up within ``ready_timeout_s``
    seconds (with its output).
    """
    if sandbox.backend == "local":
        script, sock = str(gateway.folder / FORWARDER_NAME), str(gateway.socket_path)
    else:
        script, sock = f"{SANDBOX_GATEWAY_DIR}/{FORWARDER_NAME}", gateway.sandbox_socket
    handle = await spawn_forwarder(
        sandbox,
        script,
        sock,
        port=port,
        python=python,
        ready_timeout_s=ready_timeout_s,
        what="the model gateway forwarder",
    )
    return Forwarder(handle=handle, port=port)


async def spawn_forwarder(
    sandbox: Sandbox,
    script: str,
    socket_path: str,
    *,
    port: int,
    python: str = "/usr/bin/python3",
    ready_timeout_s: float = 15.0,
    what: str = "the forwarder",
) -> ProcessHandle:
    """Run the forwarder ``script`` (a path inside ``sandbox``) from ``127.0.0.1:port`` to the
    unix socket ``socket_path`` (inside too) and wait until it listens; returns its handle.

    Raises :class:`clawrig.errors.SandboxError` naming ``what`` when it does not come up
    within ``ready_timeout_s`` seconds (with its output). A pooled sandbox may hold this very
    forwarder started ahead (:attr:`clawrig.sandbox.pool.PoolEntry.forwarders`): that one is
    returned while it runs.
    """
    ahead = getattr(sandbox, "forwarders", None)
    handle = ahead.pop((socket_path, port), None) if ahead else None
    if handle is not None and await handle.poll() is None:
        return handle
    handle = await sandbox.spawn(
        [python, "-I", "-S", "-u", script, "--port", str(port), "--socket", socket_path]
    )
    deadline = time.monotonic() + ready_timeout_s
    text = ""
    looks = 0
    while time.monotonic() < deadline:
        text, _ = await handle.read_log(0)
        if READY_PREFIX in text:
            return handle
        looks += 1
        # whether it exited: when it wrote something else (an error), else every 5th look
        # (each look is a call to the sandbox's supervisor: harness CPU per sandbox start)
        if (text or looks % 5 == 0) and await handle.poll() is not None:
            text, _ = await handle.read_log(0)  # what it wrote before it exited
            break
        await asyncio.sleep(0.02)
    with contextlib.suppress(Exception):
        await handle.kill()
    raise SandboxError(f"{what} did not start in the sandbox: {_one_line(text) or 'no output'}")
