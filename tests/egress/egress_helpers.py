"""Loopback "outside" for egress tests: addresses 127.0.0.2/.3 (not the sandbox's own
127.0.0.1, so clients inside send them through the proxy), the probe packages the example suite
installs, and a TCP echo handler. Packages and servers come from clawrig.testing.packages."""

from __future__ import annotations

import socketserver
from pathlib import Path

from clawrig.testing.packages import PROBE_DIST, PROBE_VALUE, FolderServer

__all__ = ["OTHER", "OUTSIDE", "PROBE_DIST", "PROBE_VALUE", "serve_dir"]

OUTSIDE = "127.0.0.2"
OTHER = "127.0.0.3"


def serve_dir(folder: Path, host: str = OUTSIDE) -> tuple[str, FolderServer]:
    """Serve ``folder`` over HTTP on ``host``; returns (base URL, server)."""
    server = FolderServer(folder, host)
    return server.url, server


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)
