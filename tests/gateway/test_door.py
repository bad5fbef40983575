"""Attack class 3 (issue 14) on the model gateway: each sandbox reaches it through its own door
(a capped unix socket the harness serves), never through the gateway's own socket, so one
sandbox opening thousands of connections costs the harness at most the door's cap of file
descriptors while other sandboxes keep being served. Real bwrap sandboxes, a real gateway and a
scripted upstream on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import shlex

from gw_helpers import upstream

from clawrig.llm.gateway import SANDBOX_GATEWAY_DIR, GatewayDoor, start_forwarder
from clawrig.llm.gateway import door as door_mod
from clawrig.testing.scripted_server import reply

FLOOD = r"""
import socket, sys, time
held, failed = [], 0
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[2])
        held.append(s)
    except OSError:
        failed += 1
print("opened", len(held), "failed", failed, flush=True)
time.sleep(60)
"""


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_connection_flood_costs_the_harness_at_most_the_cap(
    scripted_server, make_gateway, gw_sandbox
):
    srv = scripted_server([reply("still served")])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="honest")
    attacker = await gw_sandbox(gw)
    honest = await gw_sandbox(gw)
    before = _fds()
    await attacker.write_file("/tmp/flood.py", FLOOD)
    flood = await attacker.spawn(
        ["/usr/bin/python3", "/tmp/flood.py", "3000", f"{SANDBOX_GATEWAY_DIR}/gateway.sock"]
    )
    text = ""
    for _ in range(600):
        text, _ = await flood.read_log(0)
        if "opened" in text:
            break
        await asyncio.sleep(0.1)
    assert "opened 3000" in text  # the kernel queued every one; the harness holds few
    await asyncio.sleep(1.0)  # the door has accepted (and refused) what it will
    assert _fds() - before <= door_mod.MAX_CONNECTIONS + 16
    # the other sandbox is served meanwhile, through its own door
    fwd = await start_forwarder(honest, gw)
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "hi"}]})
    r = await honest.exec(
        f"curl -sS -m 30 -H 'Authorization: Bearer {lease.token}' "
        f"-d {shlex.quote(body)} {fwd.base_url}/chat/completions"
    )
    assert json.loads(r.stdout)["choices"][0]["message"]["content"] == "still served"
    await flood.kill()


async def test_the_sandbox_sees_its_door_never_the_gateways_socket(make_gateway, gw_sandbox):
    gw = make_gateway()
    sb = await gw_sandbox(gw)
    r = await sb.exec(["stat", "-L", "-c", "%d:%i", f"{SANDBOX_GATEWAY_DIR}/gateway.sock"])
    inside = r.stdout.strip()
    st = os.stat(gw.socket_path)
    assert inside and inside != f"{st.st_dev}:{st.st_ino}"
    r = await sb.exec(["ls", SANDBOX_GATEWAY_DIR])
    assert r.stdout.split() == ["gateway.sock"]


async def test_a_silent_connection_is_dropped_and_a_full_door_refuses_at_once(
    make_gateway, monkeypatch
):
    monkeypatch.setattr(door_mod, "FIRST_BYTE_TIMEOUT_S", 0.3)
    monkeypatch.setattr(door_mod, "MAX_CONNECTIONS", 3)
    gw = make_gateway()
    async with GatewayDoor(gw) as door:
        assert door.folder is not None
        sock = str(door.folder / "gateway.sock")
        reader, writer = await asyncio.open_unix_connection(sock)
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the door
        writer.close()
        assert door.dropped == 1
        idle = [await asyncio.open_unix_connection(sock) for _ in range(3)]
        await asyncio.sleep(0.1)
        reader, writer = await asyncio.open_unix_connection(sock)
        answer = await asyncio.wait_for(reader.read(), 10)
        assert answer.startswith(b"HTTP/1.1 503") and door.refused == 1
        writer.close()
        for _, w in idle:
            w.close()
        # a request through a free slot reaches the gateway
        await asyncio.sleep(0.5)
        reader, writer = await asyncio.open_unix_connection(sock)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
        writer.close()
