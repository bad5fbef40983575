"""Fixtures: loopback "outside" servers for egress tests (see egress_helpers)."""

from __future__ import annotations

import hashlib
import socketserver
import threading
from collections.abc import Iterator

import pytest
from egress_helpers import (
    OTHER,
    OUTSIDE,
    PROBE_DIST,
    _Echo,
    build_npm_registry,
    build_wheel,
    serve_dir,
)


@pytest.fixture(scope="session")
def package_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PEP 503 simple index on 127.0.0.2 holding the probe wheel; yields its /simple URL."""
    root = tmp_path_factory.mktemp("index")
    (root / "files").mkdir()
    wheel = build_wheel(root / "files")
    project = root / "simple" / PROBE_DIST
    project.mkdir(parents=True)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (project / "index.html").write_text(
        f'<html><body><a href="../../files/{wheel.name}#sha256={sha}">{wheel.name}</a>'
        "</body></html>\n"
    )
    url, server = serve_dir(root)
    yield f"{url}/simple"
    server.shutdown()


@pytest.fixture(scope="session")
def outside_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two static servers: ``allowed`` on 127.0.0.2 and ``other`` on 127.0.0.3, each serving
    hello.txt; yields their base URLs and the file's text."""
    root = tmp_path_factory.mktemp("outside")
    (root / "hello.txt").write_text("hello from outside\n")
    a, sa = serve_dir(root, OUTSIDE)
    b, sb = serve_dir(root, OTHER)
    yield {"allowed": a, "other": b, "text": "hello from outside\n"}
    sa.shutdown()
    sb.shutdown()


@pytest.fixture(scope="session")
def echo_server() -> Iterator[tuple[str, int]]:
    """A TCP echo server on 127.0.0.2."""
    server = socketserver.ThreadingTCPServer((OUTSIDE, 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield OUTSIDE, server.server_address[1]
    server.shutdown()


@pytest.fixture(scope="session")
def npm_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A static npm registry on 127.0.0.2 holding clawrig-npm-probe; yields its URL."""
    root = tmp_path_factory.mktemp("npm")
    url, server = serve_dir(root)
    build_npm_registry(root, url)
    yield url + "/"
    server.shutdown()
