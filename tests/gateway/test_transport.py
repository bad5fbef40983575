"""The gateway's upstream client (httpx over aiohttp, :mod:`clawrig.llm.gateway.transport`)
fails as httpx's own transport does: a port nobody listens on is a connect failure, a server
that closes the connection or goes silent is no reply, a reply cut short is a protocol error;
gzip replies are decoded before the caps count them; a proxy from the environment is used.

Every upstream is a real server on 127.0.0.1 (stdlib or a raw socket)."""

from __future__ import annotations

import gzip
import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from gw_helpers import FAST_RETRY, upstream

from clawrig.errors import ProviderError
from clawrig.llm.client import is_connect_failure
from clawrig.llm.gateway.server import _read_reply
from clawrig.llm.gateway.transport import upstream_client
from clawrig.llm.providers import ModelEndpoint
from http_replies import send_body

USER = [{"role": "user", "content": "hi"}]
COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}


def client(timeout_s: float = 10.0) -> httpx.AsyncClient:
    return upstream_client(
        timeout=httpx.Timeout(timeout_s, connect=5.0),
        limits=httpx.Limits(max_connections=8),
        verify=httpx.create_ssl_context(),
    )


@pytest.fixture
def raw_server() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    """``raw_server(handle)`` -> ``http://127.0.0.1:<port>``: each connection is given to
    ``handle`` (in a thread) once the request's headers arrived, then closed."""
    listeners: list[socket.socket] = []

    def start(handle: Callable[[socket.socket], None]) -> str:
        lsock = socket.create_server(("127.0.0.1", 0))
        listeners.append(lsock)

        def serve() -> None:
            while True:
                try:
                    conn, _ = lsock.accept()
                except OSError:
                    return

                def one(conn: socket.socket = conn) -> None:
                    with conn:
                        data = b""
                        while b"\r\n\r\n" not in data:
                            got = conn.recv(65536)
                            if not got:
                                return
                            data += got
                        handle(conn)

                threading.Thread(target=one, daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()
        return f"http://127.0.0.1:{lsock.getsockname()[1]}"

    yield start
    for lsock in listeners:
        lsock.close()


def dead_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


async def test_transport_errors_are_the_ones_httpx_raises(raw_server) -> None:
    async with client(timeout_s=0.5) as http:
        with pytest.raises(httpx.ConnectError) as refused:
            await http.post(f"http://127.0.0.1:{dead_port()}/v1", content=b"{}")
        assert is_connect_failure(refused.value)

        closed = raw_server(lambda conn: None)  # reads the request, closes without a reply
        with pytest.raises(httpx.RemoteProtocolError) as gone:
            await http.post(f"{closed}/v1", content=b"{}")
        assert not is_connect_failure(gone.value)  # it reached a server: no reply, not unreached

        silent = raw_server(lambda conn: conn.recv(1))  # waits for more than ever comes
        with pytest.raises(httpx.ReadTimeout) as slow:
            await http.post(f"{silent}/v1", content=b"{}")
        assert not is_connect_failure(slow.value)

        def short(conn: socket.socket) -> None:  # promises 100 bytes, sends 10
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")

        cut = raw_server(short)
        resp = await http.send(http.build_request("POST", f"{cut}/v1", content=b"{}"), stream=True)
        assert resp.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            await resp.aread()
        await resp.aclose()


async def test_gzip_replies_are_decoded_and_capped_by_their_decoded_size(provider) -> None:
    plain = json.dumps(COMPLETION).encode()
    packed = gzip.compress(plain + b" " * 200_000)  # ~200 KB once decoded, ~1 KB on the wire

    def handle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("content-type", "application/json")
        h.send_header("content-encoding", "gzip")
        h.send_header("content-length", str(len(packed)))
        h.end_headers()
        h.wfile.write(packed)

    url = provider(handle)
    async with client() as http:
        resp = await http.send(http.build_request("POST", f"{url}/x", content=b"{}"), stream=True)
        body = await _read_reply(resp, 1_000_000)
        assert body is not None and json.loads(body) == COMPLETION
        resp = await http.send(http.build_request("POST", f"{url}/x", content=b"{}"), stream=True)
        assert await _read_reply(resp, 100_000) is None  # 1 KB sent, over 100 KB decoded


async def test_a_proxy_in_the_environment_carries_the_upstream_calls(monkeypatch) -> None:
    seen: list[str] = []
    body = json.dumps(COMPLETION).encode()

    class Proxy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length", 0)))
            seen.append(self.path)  # a proxy gets the absolute URL
            send_body(self, body)

        def log_message(self, *args: object) -> None:
            return None

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{srv.server_address[1]}")
        monkeypatch.setenv("NO_PROXY", "direct.invalid")
        async with client() as http:
            r = await http.post("http://model.invalid/v1/chat/completions", content=b"{}")
            assert r.status_code == 200 and r.json() == COMPLETION
            with pytest.raises(httpx.ConnectError):  # NO_PROXY: sent directly (no such host)
                await http.post("http://direct.invalid/v1/chat/completions", content=b"{}")
    finally:
        srv.shutdown()
        srv.server_close()
    assert seen == ["http://model.invalid/v1/chat/completions"]


async def test_the_gateway_says_no_reply_for_a_server_that_closes_and_connect_for_none(
    raw_server, make_gateway
) -> None:
    gw = make_gateway(retry=FAST_RETRY)
    closed = raw_server(lambda conn: None)
    for base, what in (
        (f"{closed}/v1", "no reply from"),
        (f"http://127.0.0.1:{dead_port()}/v1", "could not connect to"),
    ):
        ep = ModelEndpoint(name="p/m", provider="p", model_id="m", base_url=base)
        lease = gw.open_trial(ep, trial_id=what)
        with pytest.raises(ProviderError, match=f"p/m: {what} p \\({base}\\) after 3 attempts"):
            await lease.chat_model().chat(USER)
        (line,) = lease.upstream_errors
        assert line.startswith(f"p/m: {what} p ({base}) after 3 attempts: ")
        kind = "RemoteProtocolError" if what == "no reply from" else "ConnectError"
        assert kind in line
        gw.close_trial(lease)


async def test_without_httpx_aiohttp_the_gateway_keeps_httpxs_own_transport(
    scripted_server, make_gateway, monkeypatch
) -> None:
    # a virtualenv made before httpx-aiohttp was a dependency: the calls still go upstream
    from clawrig.testing.scripted_server import reply

    monkeypatch.setitem(sys.modules, "httpx_aiohttp", None)  # its import raises ImportError
    monkeypatch.delitem(sys.modules, "clawrig.llm.gateway.transport", raising=False)
    srv = scripted_server([reply("plain")])
    gw = make_gateway()
    made = gw.new_upstream_client()
    assert type(made._transport) is httpx.AsyncHTTPTransport
    await made.aclose()
    lease = gw.open_trial(upstream(srv), trial_id="t")
    model = lease.chat_model()
    assert (await model.chat(USER)).content == "plain"
    await model.aclose()
    gw.close_trial(lease)
