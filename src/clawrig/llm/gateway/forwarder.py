"""A sandbox's way to the model gateway: its supervisor listens on the sandbox's own
``127.0.0.1:FORWARDER_PORT`` and pipes each connection to the trial's gateway door, a unix socket
bound read-only into the sandbox (:meth:`clawrig.sandbox.base.Sandbox.forward`; the same for the
egress proxy, :func:`clawrig.egress.proxy.start_egress_forwarder`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from clawrig.errors import SandboxError
from clawrig.sandbox.base import Forward, Sandbox

if TYPE_CHECKING:
    from clawrig.llm.gateway.server import Gateway

FORWARDER_PORT = 18199
"""The TCP port the in-sandbox forwarder listens on (the sandbox's own loopback)."""
SANDBOX_GATEWAY_DIR = "/opt/clawrig-gateway"
"""Where the gateway door's folder (its socket) is bound read-only in a sandbox."""
SOCKET_NAME = "gateway.sock"
MAX_FORWARDED = 64
"""Connections a sandbox's forwarder pipes at once (its door's and the egress proxy's cap)."""


@dataclass
class Forwarder:
    """A running in-sandbox forwarder: ``base_url`` is what programs inside use."""

    handle: Forward
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def stop(self) -> None:
        await self.handle.stop()


async def start_forwarder(
    sandbox: Sandbox, gateway: Gateway, *, port: int = FORWARDER_PORT
) -> Forwarder:
    """Forward ``sandbox``'s ``127.0.0.1:port`` (bound with the trial's door,
    :class:`clawrig.llm.gateway.GatewayDoor`) to the gateway; listening on return.

    On the ``local`` backend (no binds, host network) the host's socket path is used. Raises
    :class:`clawrig.errors.SandboxError` when it cannot listen (the port is taken).
    """
    sock = str(gateway.socket_path) if sandbox.backend == "local" else gateway.sandbox_socket
    handle = await open_forward(sandbox, sock, port=port, what="the model gateway forwarder")
    return Forwarder(handle=handle, port=port)


async def open_forward(sandbox: Sandbox, socket_path: str, *, port: int, what: str) -> Forward:
    """``sandbox.forward(port, socket_path)`` with :data:`MAX_FORWARDED`; raises
    :class:`clawrig.errors.SandboxError` naming ``what`` when it cannot listen (SandboxDied
    when the sandbox is gone)."""
    try:
        return await sandbox.forward(port, socket_path, max_connections=MAX_FORWARDED)
    except OSError as exc:
        raise SandboxError(
            f"{what} cannot listen on 127.0.0.1:{port} in the sandbox: {exc}"
        ) from None
