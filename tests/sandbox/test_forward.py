"""The supervisor's TCP -> unix socket forward (issue 19: no forwarder interpreter per sandbox):
real HTTP from inside a real bwrap sandbox (cold and pooled) to a real HTTP server the host
serves on a unix socket bound into the sandbox, megabytes both ways, the connection cap, the
stop, and no process of its own."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import os
import shutil
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clawrig.sandbox import Bind, zygote
from clawrig.sandbox.client import SupervisedSandbox
from clawrig.sandbox.pool import pooling_possible

pytestmark = pytest.mark.sandbox

DEST = "/opt/fwdtest"
PORT = 18555


def blob(n: int) -> bytes:
    """``n`` bytes that are not all alike (a pattern a short buffer cannot fake)."""
    return (hashlib.sha256(str(n).encode()).digest() * (n // 32 + 1))[:n]


class Handler(http.server.BaseHTTPRequestHandler):
    """GET /blob/N: :func:`blob` of N bytes; POST: the sha256 of the body."""

    protocol_version = "HTTP/1.1"

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(blob(int(self.path.rsplit("/", 1)[1])))

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers["Content-Length"]))
        self._send(hashlib.sha256(data).hexdigest().encode())

    def log_message(self, *args: object) -> None:
        return None


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 64  # (socketserver's 5: ten connections at once on a busy machine
    # overflowed it, and a unix socket's connect fails at once then: the forwarder's 502)

    def get_request(self):  # type: ignore[no-untyped-def]
        conn, _ = self.socket.accept()
        return conn, ("sandbox", 0)  # BaseHTTPRequestHandler wants a (host, port)


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder holding ``http.sock``: a real HTTP server (Python's http.server) on it."""
    folder = tmp_path / "srv"
    folder.mkdir()
    os.chmod(folder, 0o755)
    server = UnixHTTPServer(str(folder / "http.sock"), Handler)
    os.chmod(folder / "http.sock", 0o666)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder
    server.shutdown()
    server.server_close()


@pytest.fixture(params=["bwrap", "pooled"])
def kind(request: pytest.FixtureRequest) -> str:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    if request.param == "pooled" and not pooling_possible():
        pytest.skip("a warm pool needs root and mke2fs")
    return request.param


async def _sandbox(make_sandbox, kind: str, folder: Path) -> SupervisedSandbox:
    bind = Bind(source=folder, dest=DEST, read_only=True)
    return await make_sandbox(kind, config={"binds": [bind]})


async def test_http_through_the_supervisor_both_ways(make_sandbox, http_folder, kind):
    sb = await _sandbox(make_sandbox, kind, http_folder)
    fwd = await sb.forward(PORT, f"{DEST}/http.sock")
    assert fwd.port == PORT
    # 3 MB down: what the host served, byte for byte
    r = await sb.exec(f"curl -sS -m 60 http://127.0.0.1:{PORT}/blob/3000000 | sha256sum")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split()[0] == hashlib.sha256(blob(3_000_000)).hexdigest()
    # 2 MB up: the server saw exactly what the sandbox sent
    data = os.urandom(2_000_000)
    await sb.write_file("/tmp/up.bin", data)
    r = await sb.exec(
        f"curl -sS -m 60 --data-binary @/tmp/up.bin http://127.0.0.1:{PORT}/echo-hash"
    )
    assert r.stdout == hashlib.sha256(data).hexdigest(), r.stderr
    # ten requests at once, each its own answer
    script = " ".join(
        f"curl -sS -m 60 -o /tmp/b{n} http://127.0.0.1:{PORT}/blob/{n} &" for n in range(1, 11)
    )
    r = await sb.exec(f"{script} wait; for n in $(seq 1 10); do wc -c < /tmp/b$n; done")
    assert [int(x) for x in r.stdout.split()] == list(range(1, 11)), r.stderr
    # no process of its own: the supervisor is the only interpreter in the sandbox
    r = await sb.exec(
        ["/bin/sh", "-c", "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"]
    )
    programs = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    # the init (bwrap's, or the zygote's: clawrig.sandbox.zygote), the supervisor, this shell
    # (and the tr it runs): nothing else
    init = zygote.init_argv()[0] if getattr(sb, "zygote", False) else "/usr/bin/bwrap"
    assert sorted(p for p in programs if "tr" not in p) == sorted(
        ["/bin/sh", init, "/usr/bin/python3"]
    ), r.stdout


async def _fetched_hash(sb: SupervisedSandbox, n: int) -> str:
    r = await sb.exec(f"curl -sS -m 30 http://127.0.0.1:{PORT}/blob/{n} | sha256sum")
    return r.stdout.split()[0]


async def test_stop_closes_the_port_and_a_taken_port_is_an_error(make_sandbox, http_folder, kind):
    sb = await _sandbox(make_sandbox, kind, http_folder)
    fwd = await sb.forward(PORT, f"{DEST}/http.sock")
    with pytest.raises(OSError):
        await sb.forward(PORT, f"{DEST}/http.sock")
    assert await _fetched_hash(sb, 5) == hashlib.sha256(blob(5)).hexdigest()
    await fwd.stop()
    r = await sb.exec(f"curl -sS -m 30 http://127.0.0.1:{PORT}/blob/5")
    assert r.exit_code == 7, (r.stdout, r.stderr)  # connection refused
    await fwd.stop()  # idempotent
    # the port can be forwarded again (the judge proxy's, once per grading)
    await sb.forward(PORT, f"{DEST}/http.sock")
    assert await _fetched_hash(sb, 7) == hashlib.sha256(blob(7)).hexdigest()


HOLD = r"""
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
for s in held:
    s.settimeout(2)
    try:
        print("closed" if s.recv(1) == b"" else "data")
    except socket.timeout:
        print("open")
"""


async def test_connections_over_the_cap_are_closed_and_a_missing_socket_is_a_502(
    make_sandbox, tmp_path, kind
):
    folder = tmp_path / "hold"
    folder.mkdir()
    os.chmod(folder, 0o755)
    accepted: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # says nothing, keeps the connection

    server = await asyncio.start_unix_server(hold, path=str(folder / "hold.sock"))
    os.chmod(folder / "hold.sock", 0o666)
    try:
        sb = await _sandbox(make_sandbox, kind, folder)
        await sb.forward(PORT, f"{DEST}/hold.sock", max_connections=3)
        await sb.write_file("/tmp/hold.py", HOLD)
        r = await sb.exec(["/usr/bin/python3", "/tmp/hold.py", str(PORT), "5"])
        assert r.stdout.split() == ["open"] * 3 + ["closed"] * 2, r.stderr
        assert len(accepted) == 3  # the host side saw only the three piped ones
        # a forward to a socket that is not there answers 502 (the harness's side is gone)
        await sb.forward(PORT + 1, f"{DEST}/nothing.sock")
        r = await sb.exec(
            f"curl -sS -m 30 -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{PORT + 1}/"
        )
        assert r.stdout == "502"
    finally:
        for w in accepted:
            w.close()
        server.close()
