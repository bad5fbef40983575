"""The egress proxy holds a bounded number of connections, drops clients that never send a
request head, refuses this machine's own addresses under the `open` policy, and answers a bad
target with 400 (real unix-socket clients against a real proxy)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

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
        assert proxy.refused_busy == 1
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
        for target in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "10.1.2.3:80"):
            answer = await _ask(proxy, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 403"), (target, answer[:80])
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["verdict"] for r in records] == ["refused"] * 4
    assert all("local or private" in r["reason"] for r in records)


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
