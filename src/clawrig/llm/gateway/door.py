"""A sandbox's own door to the model gateway: one unix socket per sandbox, served by the harness,
holding at most :data:`MAX_CONNECTIONS` connections at once and dropping a client that sends
nothing for :data:`FIRST_BYTE_TIMEOUT_S`; each accepted connection is piped, byte for byte, to
the gateway's own socket, which no sandbox can reach.

Why (issue 14): the gateway's socket used to be bound into every sandbox, so one sandbox opening
thousands of connections exhausted the harness's file descriptors (EMFILE) and every trial of
the job was lost. Now a sandbox can hold at most :data:`MAX_CONNECTIONS` of the harness's
descriptors; more are refused at once (a 503, counted in :attr:`GatewayDoor.refused`, never a
log line per connection), and other sandboxes' doors are untouched.

The door's folder holds the socket (``gateway.sock``) and is bound read-only at
:data:`clawrig.llm.gateway.forwarder.SANDBOX_GATEWAY_DIR`; the sandbox's supervisor forwards
its loopback port to it (:func:`clawrig.llm.gateway.forwarder.start_forwarder`). The door
understands nothing of HTTP and adds nothing: the trial's token travels in the request.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from clawrig.llm.gateway.forwarder import MAX_FORWARDED, SANDBOX_GATEWAY_DIR, SOCKET_NAME
from clawrig.serving import PIPE_CHUNK, SandboxSocketServer, pipe_streams

if TYPE_CHECKING:
    from clawrig.llm.gateway.server import Gateway

MAX_CONNECTIONS = MAX_FORWARDED
"""Connections one sandbox's door holds at once (the egress proxy's cap too)."""
FIRST_BYTE_TIMEOUT_S = 10.0
"""Seconds a new connection has to send its first byte before it is closed."""


class GatewayDoor(SandboxSocketServer):
    """One sandbox's door to ``gateway`` (see the module docs). ``await door.start()`` (or
    ``async with``) inside the event loop that runs the trial; bind :meth:`sandbox_binds` into
    the sandbox; :meth:`stop` at the end (idempotent). :attr:`refused` counts connections
    refused over :data:`MAX_CONNECTIONS`."""

    def __init__(self, gateway: Gateway) -> None:
        super().__init__(
            socket_name=SOCKET_NAME,
            sandbox_dir=SANDBOX_GATEWAY_DIR,
            kind="gwdoor",
            max_connections=MAX_CONNECTIONS,
        )
        self.gateway = gateway
        self._target: Path | None = None
        self.dropped = 0
        """Connections closed because they sent nothing within :data:`FIRST_BYTE_TIMEOUT_S`."""

    def on_start(self) -> None:
        self._target = self.gateway.socket_path

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
