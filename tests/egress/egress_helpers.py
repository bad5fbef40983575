"""Loopback "outside" servers for egress tests: a static file server and a TCP echo server
on 127.0.0.2 (not the sandbox's own 127.0.0.1, so clients inside send them through the proxy),
a local PEP 503 package index with one hand-built wheel."""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import socketserver
import threading
import zipfile
from pathlib import Path

OUTSIDE = "127.0.0.2"
OTHER = "127.0.0.3"
PROBE_DIST = "clawrig-egress-probe"
PROBE_VALUE = "installed through the egress proxy"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def serve_dir(folder: Path, host: str = OUTSIDE) -> tuple[str, http.server.ThreadingHTTPServer]:
    """Serve ``folder`` over HTTP on ``host`` (stdlib server, own thread); returns base URL."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://{host}:{server.server_address[1]}", server


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(folder: Path, dist: str = PROBE_DIST, module: str = "egress_probe") -> Path:
    """A minimal pure-Python wheel (PEP 427): one module, METADATA, WHEEL, RECORD."""
    norm = dist.replace("-", "_")
    info = f"{norm}-1.0.dist-info"
    files = {
        f"{module}.py": f"VALUE = {PROBE_VALUE!r}\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: clawrig-tests\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"{norm}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


NPM_PACKAGE = "clawrig-npm-probe"
NPM_OUTPUT = "npm probe says hello"


def build_npm_registry(folder: Path, base_url: str) -> None:
    """A static npm registry under ``folder`` for ``base_url``: the packument of
    :data:`NPM_PACKAGE` at ``/<name>`` and its tarball (one ``bin`` script printing
    :data:`NPM_OUTPUT`) under ``/tarballs/``, with sha1 and sha512 integrity."""
    import io
    import json
    import tarfile

    files = {
        "package/package.json": json.dumps(
            {"name": NPM_PACKAGE, "version": "1.0.0", "bin": {NPM_PACKAGE: "bin/probe.js"}}
        ).encode(),
        "package/bin/probe.js": f"#!/usr/bin/env node\nconsole.log({NPM_OUTPUT!r});\n".encode(),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    tgz = buf.getvalue()
    (folder / "tarballs").mkdir(parents=True, exist_ok=True)
    tar_name = f"{NPM_PACKAGE}-1.0.0.tgz"
    (folder / "tarballs" / tar_name).write_bytes(tgz)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()
    version = {
        "name": NPM_PACKAGE,
        "version": "1.0.0",
        "bin": {NPM_PACKAGE: "bin/probe.js"},
        "dist": {
            "tarball": f"{base_url}/tarballs/{tar_name}",
            "shasum": hashlib.sha1(tgz).hexdigest(),
            "integrity": integrity,
        },
    }
    packument = {
        "name": NPM_PACKAGE,
        "dist-tags": {"latest": "1.0.0"},
        "versions": {"1.0.0": version},
    }
    (folder / NPM_PACKAGE).write_text(json.dumps(packument))
