"""Fixtures for web tests: ``web_server``, the loopback web of :mod:`web_helpers`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from web_helpers import WebServer, build_app

from clawrig.serving import ThreadedServer, tcp_listener


@pytest.fixture
def web_server() -> Iterator[WebServer]:
    sock = tcp_listener()
    state = WebServer(url=f"http://127.0.0.1:{sock.getsockname()[1]}")
    server = ThreadedServer(build_app(state), [sock], name="test-web", lifespan="off").start()
    try:
        yield state
    finally:
        server.stop()
