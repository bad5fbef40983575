"""web_fetch and web_search under the web policy, against real HTTP servers on 127.0.0.1.

Nothing here reaches the internet: web_fetch is pointed at a local server, and web_search's
Brave endpoint at a local server speaking the Brave Search API's JSON shape.
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from clawrig.tools import WebPolicy
from clawrig.tools.web import html_to_text

pytestmark = pytest.mark.sandbox

PAGE = """<!doctype html><html><head><title>Tern  4.2
 notes</title><style>body{color:red}</style><script>var x = 1;</script></head>
<body><h1>Tern 4.2</h1><p>Offline mode is <b>stable</b>. See
<a href="/faq">the FAQ</a>.</p><ul><li>purge --apply</li><li>shares</li></ul></body></html>"""
HIT1 = {"title": "Tern", "url": "https://tern.example/", "age": "2 days ago"}
HIT2 = {"title": "Tern 4.2", "url": "https://tern.example/4.2", "description": "notes"}
BRAVE_REPLY = {"web": {"results": [{**HIT1, "description": "<strong>Tern</strong> docs"}, HIT2]}}


class Handler(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, ctype: str, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        Handler.seen.append({"path": url.path, "query": parse_qs(url.query), **self.headers})
        port = self.server.server_address[1]
        if url.path == "/page.html":
            self._send(200, "text/html; charset=utf-8", PAGE.encode())
        elif url.path == "/big.txt":
            self._send(200, "text/plain", b"0123456789" * 500)
        elif url.path == "/data.json":
            self._send(200, "application/json", b'{"a": 1}')
        elif url.path == "/blob":
            self._send(200, "application/octet-stream", b"\x00\x01\x02")
        elif url.path == "/redirect":
            self._send(302, "text/plain", b"", {"Location": f"http://localhost:{port}/page.html"})
        elif url.path == "/slow":
            time.sleep(3)
            self._send(200, "text/plain", b"late")
        elif url.path == "/search":
            self._send(200, "application/json", json.dumps(BRAVE_REPLY).encode())
        else:
            self._send(404, "text/plain", b"no such page")


@pytest.fixture
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.block_on_close = False  # do not wait for /slow
    Handler.seen = []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def on(**kw) -> WebPolicy:
    return WebPolicy(mode="on", allow_hosts=["127.0.0.1"], **kw)


def body(r) -> dict:
    assert not r.is_error, r.text
    return json.loads(r.text)


async def test_web_is_off_by_default(call, server: str) -> None:
    r = await call("web_fetch", {"url": f"{server}/page.html"})
    assert r.is_error and r.text == "web access is disabled for this task"
    r = await call("web_search", {"query": "tern"})
    assert r.is_error and r.text == "web access is disabled for this task"
    assert Handler.seen == []  # nothing was requested


async def test_fetch_html_as_markdown_and_text(call, ctx, server: str) -> None:
    ctx.web = on()
    r = body(await call("web_fetch", {"url": f"{server}/page.html"}))
    assert r["status"] == 200 and r["contentType"] == "text/html"
    assert r["title"] == "Tern 4.2 notes"
    assert r["text"] == (
        "# Tern 4.2\n\nOffline mode is **stable**. See [the FAQ](/faq).\n\n"
        "- purge --apply\n- shares"
    )
    assert r["extractMode"] == "markdown" and r["truncated"] is False
    assert r["length"] == len(r["text"])
    r = body(await call("web_fetch", {"url": f"{server}/page.html", "extractMode": "text"}))
    assert (
        r["text"] == "Tern 4.2\n\nOffline mode is stable. See the FAQ.\n\n- purge --apply\n- shares"
    )
    r = body(await call("web_fetch", {"url": f"{server}/data.json"}))
    assert r["text"] == '{"a": 1}'


async def test_fetch_size_cap_and_max_chars(call, ctx, server: str) -> None:
    ctx.web = on(max_bytes=1000)
    r = body(await call("web_fetch", {"url": f"{server}/big.txt"}))  # 5,000 bytes served
    assert r["truncated"] is True and r["length"] == 1000
    assert r["text"] == "0123456789" * 100
    ctx.web = on()
    r = body(await call("web_fetch", {"url": f"{server}/big.txt", "maxChars": 150}))
    assert r["truncated"] is True and r["text"] == "0123456789" * 15
    r = await call("web_fetch", {"url": f"{server}/big.txt", "maxChars": 10})
    assert r.is_error and "argument `maxChars`" in r.text  # the schema's minimum is 100


async def test_fetch_errors(call, ctx, server: str) -> None:
    ctx.web = on(timeout_s=0.5)
    r = await call("web_fetch", {"url": f"{server}/nope"})
    assert r.is_error and r.text == f"web_fetch: {server}/nope answered HTTP 404: no such page"
    r = await call("web_fetch", {"url": f"{server}/blob"})
    assert r.is_error and r.text.endswith("is application/octet-stream, not a text or HTML page")
    r = await call("web_fetch", {"url": f"{server}/redirect"})
    assert r.is_error
    assert r.text == (
        f"web_fetch: host localhost (of {server}/redirect or a redirect): not allowed for this task"
    )
    r = await call("web_fetch", {"url": f"{server}/slow"})
    assert r.is_error and r.text == f"web_fetch: {server}/slow did not answer within 0.5 s"
    r = await call("web_fetch", {"url": "ftp://127.0.0.1/x"})
    assert r.is_error and r.text == "web_fetch: 'ftp://127.0.0.1/x' is not an http(s) URL"
    r = await call("web_fetch", {"url": "http://example.org/"})
    assert r.is_error and r.text == "web_fetch: host example.org is not allowed for this task"
    # internal addresses need an explicit allow-list entry, even with no allow list at all
    ctx.web = WebPolicy(mode="on")
    r = await call("web_fetch", {"url": f"{server}/page.html"})
    assert r.is_error and r.text == "web_fetch: host 127.0.0.1 is not allowed for this task"
    # a closed port
    ctx.web = WebPolicy(mode="on", allow_hosts=["127.0.0.2"])
    r = await call("web_fetch", {"url": "http://127.0.0.2:9/"})
    assert r.is_error and r.text.startswith("web_fetch: could not fetch http://127.0.0.2:9/: ")


async def test_fetch_refuses_the_hosts_loopback_in_every_spelling(call, ctx, server) -> None:
    """With no allow list (any public host), the harness's own machine stays out of reach in
    every form a connection takes: 127.0.0.1 as a decimal, hex, octal or short number reached
    the host's scripted server (helper-142), and so does a name that resolves to it (this
    machine's own name, here). Each answered 200 before."""
    import socket

    port = server.rsplit(":", 1)[1]
    ctx.web = WebPolicy(mode="on")
    for host in ("2130706433", "0x7f000001", "017700000001", "127.1", "0177.0.0.1"):
        r = await call("web_fetch", {"url": f"http://{host}:{port}/page.html"})
        assert r.is_error and r.text == f"web_fetch: host {host} is not allowed for this task"
    name = socket.gethostname().lower()
    try:
        address = socket.getaddrinfo(name, int(port))[0][4][0]
    except OSError:
        pytest.skip(f"this machine's name {name} does not resolve")
    if ipaddress.ip_address(address).is_global:
        pytest.skip(f"this machine's name {name} resolves to a public address ({address})")
    url = f"http://{name}:{port}/page.html"
    r = await call("web_fetch", {"url": url})
    assert r.is_error and r.text == (
        f"web_fetch: host {name} (of {url} or a redirect): it resolves to {address}, a local or "
        "private address"
    )
    # named in the allow list, it is the task's choice
    ctx.web = WebPolicy(mode="on", allow_hosts=[name])
    assert body(await call("web_fetch", {"url": url}))["status"] == 200


async def test_a_direct_connection_checks_the_address_it_connects_to(server) -> None:
    """DNS rebinding (helper-143): the request hook's check resolved the name, and httpx
    resolved it again to connect, so an answer changed in between reached a private address.
    The live fetch's transport resolves and checks where it connects: on its own (no hook), a
    name resolving to loopback is refused before any connection; named by the task, it is
    reached."""
    import httpx

    from clawrig.web.service import HostNotAllowed, PublicOnlyTransport

    url = server.replace("127.0.0.1", "localhost") + "/page.html"
    Handler.seen = []
    transport = PublicOnlyTransport(WebPolicy(mode="on"))
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(HostNotAllowed, match="resolves to .*a local or private address"):
            await client.get(url)
    assert Handler.seen == []  # refused before it connected
    transport = PublicOnlyTransport(WebPolicy(mode="on", allow_hosts=["localhost"]))
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get(url)).status_code == 200
    assert len(Handler.seen) == 1


async def test_search_needs_a_key(call, ctx, monkeypatch) -> None:
    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    ctx.web = on()
    r = await call("web_search", {"query": "tern"})
    assert r.is_error and r.text.startswith("web_search: no search API key is configured")
    ctx.web = on(search_provider="bing", search_api_key="k")
    r = await call("web_search", {"query": "tern"})
    assert r.is_error and "provider 'bing' is not supported" in r.text


async def test_search_through_the_brave_api_shape(call, ctx, server: str, monkeypatch) -> None:
    monkeypatch.setenv("CLAWRIG_BRAVE_ENDPOINT", f"{server}/search")
    ctx.web = on(search_api_key="test-key")
    r = body(await call("web_search", {"query": "tern docs", "count": 2, "region": "DE"}))
    assert r["provider"] == "brave" and r["query"] == "tern docs"
    assert r["results"] == [
        {
            "title": "Tern",
            "url": HIT1["url"],
            "description": "Tern docs",
            "published": "2 days ago",
        },
        {"title": "Tern 4.2", "url": HIT2["url"], "description": "notes", "published": None},
    ]
    req = Handler.seen[-1]
    assert req["query"] == {"q": ["tern docs"], "count": ["2"], "country": ["DE"]}
    assert req["X-Subscription-Token"] == "test-key"
    r = await call("web_search", {"query": "x", "count": 11})
    assert r.is_error and "argument `count`" in r.text  # the schema's maximum is 10


def test_html_to_text_skips_scripts_and_keeps_pre() -> None:
    title, text = html_to_text("<title>T</title><pre>a  b\n c</pre><script>bad()</script><p>x</p>")
    assert title == "T"
    assert text == "```\na  b\n c\n```\n\nx"
