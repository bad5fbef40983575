"""A sandbox's own door to the model gateway: one unix socket per sandbox, served by the harness,
holding at most :data:`MAX_CONNECTIONS` connections at once and dropping a client that sends
nothing for :data:`FIRST_BYTE_TIMEOUT_S`; each accepted connection is piped, byte for byte, to
the gateway's own socket, which no sandbox can reach.

Why (issue 14): the gateway's socket used to be bound into every sandbox, so one sandbox opening
thousands of connections exhausted the harness's file descriptors (EMFILE) and every trial of
the job was lost. Now a sandbox can hold at most :data:`MAX_CONNECTIONS` of the harness's
descriptors; more are refused at once (a 503, counted in :attr:`GatewayDoor.refused`, never a
log line per connection), and other sandboxes' doors are untouched.

The door's folder holds the socket (``gateway.sock``) and the forwarder script, and is bound
read-only at :data:`clawrig.llm.gateway.forwarder.SANDBOX_GATEWAY_DIR`, so the in-sandbox
forwarder (:func:`clawrig.llm.gateway.forwarder.start_forwarder`) works unchanged. The door
understands nothing of HTTP and adds nothing: the trial's token travels in the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawrig.llm.gateway.forwarder import (
    FORWARDER_NAME,
    SANDBOX_GATEWAY_DIR,
    SOCKET_NAME,
    forwarder_script,
)
from clawrig.sandbox.base import Bind
from clawrig.serving import PIPE_CHUNK, pipe_streams

if TYPE_CHECKING:
    from clawrig.llm.gateway.server import Gateway

MAX_CONNECTIONS = 64
"""Connections one sandbox's door holds at once (the egress proxy's cap too)."""
FIRST_BYTE_TIMEOUT_S = 10.0
"""Seconds a new connection has to send its first byte before it is closed."""


class GatewayDoor:
    """One sandbox's door to ``gateway`` (see the module docs). ``await door.start()`` (or
    ``async with``) inside the event loop that runs the trial; bind :meth:`sandbox_binds` into
    the sandbox; :meth:`stop` at the end (idempotent)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.folder: Path | None = None
        self._target: Path | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.refused = 0
        """Connections refused because :data:`MAX_CONNECTIONS` were open."""
        self.dropped = 0
        """Connections closed because they sent nothing within :data:`FIRST_BYTE_TIMEOUT_S`."""

    def sandbox_binds(self) -> list[Bind]:
        """The read-only bind that makes the door (and the forwarder script) reachable."""
        if self.folder is None:
            raise RuntimeError("the gateway door is not started")
        return [Bind(source=self.folder, dest=SANDBOX_GATEWAY_DIR, read_only=True)]

    async def start(self) -> GatewayDoor:
        """Create the folder with the forwarder script and listen. Idempotent."""
        if self._server is not None:
            return self
        self._target = self.gateway.socket_path
        self.folder = Path(tempfile.mkdtemp(prefix="clawrig-gwdoor-"))
        os.chmod(self.folder, 0o755)  # sandboxes may run as another host uid
        shutil.copyfile(forwarder_script(), self.folder / FORWARDER_NAME)
        os.chmod(self.folder / FORWARDER_NAME, 0o644)
        sock = self.folder / SOCKET_NAME
        self._server = await asyncio.start_unix_server(self._accept, path=str(sock))
        os.chmod(sock, 0o666)
        return self

    async def stop(self) -> None:
        """Stop listening, close every open connection, remove the folder. Idempotent."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    async def __aenter__(self) -> GatewayDoor:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._tasks) >= MAX_CONNECTIONS:
            self.refused += 1
            with contextlib.suppress(Exception):
                writer.write(b"HTTP/1.1 503 Too Many Connections\r\nConnection: close\r\n\r\n")
                writer.close()
            return
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (asyncio.CancelledError, ConnectionError, OSError):
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            first = await asyncio.wait_for(reader.read(PIPE_CHUNK), FIRST_BYTE_TIMEOUT_S)
        except TimeoutError:
            self.dropped += 1
            return
        if not first:
            return
        try:
            up_r, up_w = await asyncio.open_unix_connection(str(self._target))
        except OSError as exc:
            body = f"clawrig gateway door: the model gateway is not reachable ({exc})\n".encode()
            writer.write(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            return
        try:
            up_w.write(first)
            await up_w.drain()
            await asyncio.gather(pipe_streams(reader, up_w), pipe_streams(up_r, writer))
        finally:
            with contextlib.suppress(Exception):
                up_w.close()
