"""The egress proxy holds a bounded number of connections, drops clients that never send a
request head, refuses this machine's own addresses under the `open` policy, and answers a bad
target with 400 (real unix-socket clients against a real proxy)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
from pathlib import Path

import pytest

from clawrig.egress import EgressProxy, NetworkPolicy
from clawrig.egress import proxy as proxy_mod


async def _ask(proxy: EgressProxy, head: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
    writer.write(head)
    await writer.drain()
    try:
        data = await asyncio.wait_for(reader.read(), 10)
    except ConnectionResetError:  # closed with our request unread: a refusal too
        data = b""
    writer.close()
    return data


async def test_connections_beyond_the_cap_are_refused_at_once(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(proxy_mod, "MAX_CONNECTIONS", 4)
    async with EgressProxy(tmp_path / "egress.jsonl", NetworkPolicy.parse("none")) as proxy:
        idle = [await asyncio.open_unix_connection(str(proxy.socket_path)) for _ in range(4)]
        await asyncio.sleep(0.2)  # the proxy has accepted them (they send nothing)
        answer = await _ask(proxy, b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
        assert answer in (b"", b"HTTP/1.1 503 Too Many Connections\r\nConnection: close\r\n\r\n")
        assert proxy.refused == 1
        assert proxy.records == []  # refused before any request was read
        for _, w in idle:
            w.close()


async def test_a_silent_client_is_dropped_after_the_head_timeout(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(proxy_mod, "HEAD_TIMEOUT_S", 0.3)
    async with EgressProxy(tmp_path / "egress.jsonl", NetworkPolicy.parse("open")) as proxy:
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        # the proxy closes the connection: read() returns at EOF instead of waiting forever
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()


async def test_open_policy_refuses_this_machines_addresses(tmp_path: Path):
    log = tmp_path / "egress.jsonl"
    async with EgressProxy(log, NetworkPolicy.parse("open"), phase="agent") as proxy:
        # and IPv6 addresses carrying one of its own (helper-152: ::ffff:0:127.0.0.1 was
        # "global" to Python's ipaddress)
        carried = ("[::ffff:0:127.0.0.1]:80", "[::127.0.0.1]:80", "[64:ff9b::10.1.2.3]:80")
        targets = ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "10.1.2.3:80", *carried)
        for target in targets:
            answer = await _ask(proxy, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 403"), (target, answer[:80])
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["verdict"] for r in records] == ["refused"] * len(targets)
    assert all("local or private" in r["reason"] for r in records)


def test_an_ipv6_address_is_public_only_when_the_ipv4_address_it_carries_is():
    from clawrig.egress.policy import is_public_address

    # each form's IPv4 address written into its bits by hand (RFC 4291, 2765, 6052, 3056)
    for v4, public in (("127.0.0.1", False), ("10.1.2.3", False), ("8.8.8.8", True)):
        a, b, c, d = (int(x) for x in v4.split("."))
        high, low = f"{a * 256 + b:x}", f"{c * 256 + d:x}"
        for spelled in (
            f"::ffff:{high}:{low}",  # mapped
            f"::ffff:0:{high}:{low}",  # translated
            f"64:ff9b::{high}:{low}",  # NAT64
            f"2002:{high}:{low}::1",  # 6to4
        ):
            assert is_public_address(spelled) is public, spelled
        assert is_public_address(f"::{high}:{low}") is False  # compatible: ::/96 is reserved
    assert is_public_address("2001:4860:4860::8888") is True
    assert is_public_address("2606:4700::6810:85e5") is True  # no IPv4 in it
    # a site's own networks Python 3.11 calls global, and multicast (helper-154)
    for local in ("fec0::1", "64:ff9b:1::7f00:1", "224.0.0.1", "ff02::1"):
        assert is_public_address(local) is False, local


async def test_bad_targets_are_a_400_with_a_logged_reason(tmp_path: Path):
    log = tmp_path / "egress.jsonl"
    async with EgressProxy(log, NetworkPolicy.parse("open")) as proxy:
        for head in (
            b"CONNECT example.com:99999 HTTP/1.1\r\n\r\n",
            b"CONNECT example.com:http HTTP/1.1\r\n\r\n",
            b"GET http://example.com:70000/ HTTP/1.1\r\n\r\n",
        ):
            assert (await _ask(proxy, head)).startswith(b"HTTP/1.1 400")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["verdict"] for r in records] == ["bad_request"] * 3
    assert all(r["reason"].startswith("bad target") for r in records)


async def test_a_flood_of_requests_is_logged_up_to_the_cap_then_counted(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setattr(proxy_mod, "MAX_LOG_RECORDS", 5)
    log = tmp_path / "egress.jsonl"
    async with EgressProxy(log, NetworkPolicy.parse("none"), phase="agent") as proxy:
        for i in range(12):
            answer = await _ask(proxy, f"CONNECT h{i}.example:443 HTTP/1.1\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 403")  # refused as before, just not logged
        assert len(proxy.records) == 5 and proxy.unlogged == 7
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["host"] for r in records[:5]] == [f"h{i}.example" for i in range(5)]
    assert records[5]["verdict"] == "unlogged" and records[5]["reason"].startswith("7 more")
    assert len(records) == 6


async def test_the_log_is_capped_in_bytes_and_long_hosts_are_a_400(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(proxy_mod, "MAX_LOG_BYTES", 2000)
    log = tmp_path / "egress.jsonl"
    async with EgressProxy(log, NetworkPolicy.parse("none"), phase="agent") as proxy:
        answer = await _ask(proxy, f"GET http://{'a' * 60000}.example/ HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 400")
        for i in range(40):
            await _ask(proxy, f"CONNECT host-{i:02}.example:443 HTTP/1.1\r\n\r\n".encode())
    text = log.read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["verdict"] == "bad_request" and len(lines[0]["host"]) == 67
    assert "60008 characters" in lines[0]["reason"]
    logged = lines[:-1]
    assert sum(len(json.dumps(r, ensure_ascii=False)) + 1 for r in logged) <= 2000
    assert lines[-1]["verdict"] == "unlogged"
    assert int(lines[-1]["reason"].split()[0]) == 41 - len(logged)


OUTPUTS_MD = Path(__file__).resolve().parents[2] / "docs" / "outputs.md"


async def test_the_log_writes_the_documented_fields_in_the_documented_units(
    tmp_path: Path, monkeypatch, scripted_server
):
    """Every key and verdict a real proxy writes is named in docs/outputs.md's egress.jsonl
    row, and bytes_up / bytes_down are the bytes after the request head each way."""
    srv = scripted_server(["through the proxy"])
    with socket.socket() as probe:  # a port nothing listens on: an allowed but failed target
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setattr(proxy_mod, "MAX_LOG_RECORDS", 4)
    log = tmp_path / "egress.jsonl"
    policy = NetworkPolicy.parse(f"allow:127.0.0.1:{srv.port},127.0.0.1:{closed}")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    async with EgressProxy(log, policy, phase="agent") as proxy:
        answer = await _ask(
            proxy,
            f"POST {srv.base_url}/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body,
        )
        assert answer.startswith(b"HTTP/1.1 200") and b"through the proxy" in answer
        assert (await _ask(proxy, b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")).startswith(
            b"HTTP/1.1 403"
        )
        failed = await _ask(proxy, f"CONNECT 127.0.0.1:{closed} HTTP/1.1\r\n\r\n".encode())
        assert failed.startswith(b"HTTP/1.1 502")
        assert (await _ask(proxy, b"HELLO\r\n\r\n")).startswith(b"HTTP/1.1 400")
        await _ask(proxy, b"CONNECT past.example:443 HTTP/1.1\r\n\r\n")  # past the cap of 4
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["verdict"] for r in records] == [
        "allowed", "refused", "failed", "bad_request", "unlogged"
    ]  # fmt: skip
    allowed = records[0]
    assert (allowed["method"], allowed["host"], allowed["port"]) == ("POST", "127.0.0.1", srv.port)
    assert allowed["bytes_up"] == len(body)  # the head is not counted
    assert allowed["bytes_down"] == len(answer)  # all the sandbox got back
    assert all(r["bytes_up"] == r["bytes_down"] == 0 for r in records[1:])
    for r in records[:4]:
        assert r["time"].endswith("+00:00") and len(r["time"].split(".")[1]) == len("123+00:00")
        assert r["seconds"] >= 0 and round(r["seconds"], 3) == r["seconds"]
    assert "seconds" not in records[4] and records[4]["reason"].startswith("1 more")
    assert "reason" not in allowed and all(r["reason"] for r in records[1:])

    row = next(ln for ln in OUTPUTS_MD.read_text().splitlines() if ln.startswith("| `egress"))
    quoted = set(re.findall(r"`([^`]+)`", row))
    written = {k for r in records for k in r} | {r["verdict"] for r in records}
    written |= {r["phase"] for r in records} | {"setup"}
    assert sorted(written - quoted) == []


OWN_ADDRESS_CHECK = """
import asyncio, http.server, json, sys, threading
from clawrig.egress import EgressProxy, NetworkPolicy
from clawrig.egress.policy import is_public_address
from clawrig.tools.base import WebPolicy
from clawrig.web.service import live_fetch

class Secret(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"SECRET")
    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Secret)
port = server.server_address[1]
threading.Thread(target=server.serve_forever, daemon=True).start()

async def main():
    fetched = await live_fetch(WebPolicy(mode="on"), f"http://8.8.4.4:{port}/")
    async with EgressProxy(sys.argv[1], NetworkPolicy.parse("open"), phase="agent") as proxy:
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.write(f"GET http://8.8.4.4:{port}/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".encode())
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    print(json.dumps({
        "public": [is_public_address("8.8.4.4"), is_public_address("8.8.8.8")],
        "fetch": [fetched.status, fetched.body.decode(), fetched.error],
        "proxy": answer.decode("latin-1").split("\\r\\n")[0],
    }))

asyncio.run(main())
"""


def test_this_machines_own_public_address_is_refused_under_open(tmp_path: Path):
    """helper-154: a machine holding a public address on an interface (bare metal, many VPS)
    served its own services to web_fetch and to the egress proxy under ``open`` through that
    address, those listening on every address (a `clawrig view --host 0.0.0.0`). Checked in a
    network namespace of its own holding 8.8.4.4 (the machine's own table is left alone)."""
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("needs root, unshare and ip (a network namespace of the test's own)")
    script = tmp_path / "own.py"
    script.write_text(OWN_ADDRESS_CHECK)
    inside = f"ip link set lo up && ip addr add 8.8.4.4/32 dev lo && exec {sys.executable} {script}"
    r = subprocess.run(
        ["unshare", "-n", "sh", "-c", f"{inside} {tmp_path / 'egress.jsonl'}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got["public"] == [False, True]  # its own; another (no route there: not its own)
    status, body, why = got["fetch"]
    assert body == "" and "8.8.4.4" in why and "local or private" in why, got
    assert got["proxy"].startswith("HTTP/1.1 403"), got
    (record,) = [json.loads(line) for line in (tmp_path / "egress.jsonl").read_text().splitlines()]
    assert record["verdict"] == "refused" and "local or private" in record["reason"]
