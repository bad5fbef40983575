"""Fixtures: loopback "outside" servers for egress tests (see egress_helpers)."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator

import pytest
from egress_helpers import OTHER, OUTSIDE, _Echo, serve_dir

from clawrig.testing.packages import probe_registries


@pytest.fixture(scope="session")
def registries() -> Iterator[dict[str, str]]:
    """The probe packages' pip index and npm registry on 127.0.0.2 (``PIP_INDEX_URL``,
    ``npm_config_registry``)."""
    with probe_registries(OUTSIDE) as settings:
        yield settings


@pytest.fixture(scope="session")
def package_index(registries: dict[str, str]) -> str:
    """A PEP 503 simple index on 127.0.0.2 holding the probe wheel: its /simple URL."""
    return registries["PIP_INDEX_URL"]


@pytest.fixture(scope="session")
def outside_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two static servers: ``allowed`` on 127.0.0.2 and ``other`` on 127.0.0.3, each serving
    hello.txt; yields their base URLs and the file's text."""
    root = tmp_path_factory.mktemp("outside")
    (root / "hello.txt").write_text("hello from outside\n")
    a, sa = serve_dir(root, OUTSIDE)
    b, sb = serve_dir(root, OTHER)
    yield {"allowed": a, "other": b, "text": "hello from outside\n"}
    sa.stop()
    sb.stop()


@pytest.fixture(scope="session")
def echo_server() -> Iterator[tuple[str, int]]:
    """A TCP echo server on 127.0.0.2."""
    server = socketserver.ThreadingTCPServer((OUTSIDE, 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield OUTSIDE, server.server_address[1]
    server.shutdown()


@pytest.fixture(scope="session")
def npm_registry(registries: dict[str, str]) -> str:
    """A static npm registry on 127.0.0.2 holding clawrig-npm-probe: its URL."""
    return registries["npm_config_registry"]
