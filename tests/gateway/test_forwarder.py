"""The gateway from inside a real bwrap sandbox: the forwarder on the sandbox's loopback reaches
it through the bound unix socket, the provider key never enters the sandbox, and the host's
other loopback services stay unreachable."""

from __future__ import annotations

import json
import shlex

from gw_helpers import REAL_KEY, key_search_argv, upstream

from clawrig.llm.gateway import FORWARDER_PORT, SANDBOX_GATEWAY_DIR, start_forwarder
from clawrig.testing.scripted_server import call, reply, usage

INSIDE_URL = f"http://127.0.0.1:{FORWARDER_PORT}/v1"
URLLIB_CLIENT = r"""
import json, os, sys, urllib.request
req = urllib.request.Request(
    sys.argv[1] + "/chat/completions",
    data=json.dumps({"model": "any", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"},
)
print(urllib.request.urlopen(req, timeout=20).read().decode())
"""


async def test_curl_and_python_inside_reach_the_gateway(scripted_server, make_gateway, gw_sandbox):
    srv = scripted_server(
        [
            reply("hello from the scripted server", usage=usage(12, 6)),
            reply(tool_calls=[call("exec", {"command": "ls"}, id="c1")], usage=usage(20, 4)),
            reply("streamed", usage=usage(3, 2)),
        ]
    )
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t")
    sb = await gw_sandbox(gw)
    fwd = await start_forwarder(sb, gw)
    assert fwd.base_url == f"http://127.0.0.1:{FORWARDER_PORT}/v1"
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "hi"}]})
    r = await sb.exec(
        f"curl -sS -H 'Authorization: Bearer {lease.token}' -H 'Content-Type: application/json'"
        f" -d {shlex.quote(body)} {fwd.base_url}/chat/completions"
    )
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["choices"][0]["message"]["content"] == "hello from the scripted server"
    await sb.write_file("/tmp/client.py", URLLIB_CLIENT)
    r = await sb.exec(["/usr/bin/python3", "/tmp/client.py", fwd.base_url, lease.token])
    assert r.exit_code == 0, r.stderr
    tool = json.loads(r.stdout)["choices"][0]["message"]["tool_calls"][0]
    assert (tool["id"], tool["function"]["name"]) == ("c1", "exec")
    stream = json.dumps(
        {"model": "x", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    )
    r = await sb.exec(
        f"curl -sS -N -H 'Authorization: Bearer {lease.token}' -d {shlex.quote(stream)}"
        f" {fwd.base_url}/chat/completions"
    )
    assert r.stdout.rstrip().endswith("data: [DONE]")
    assert '"content": "streamed"' in r.stdout or '"content":"streamed"' in r.stdout
    # what the scripted server served is what the gateway counted: 18 + 24 + 5 tokens
    assert lease.usage.total_tokens == 47 and lease.usage.request_count == 3
    assert [h["authorization"] for h in srv.headers] == [f"Bearer {REAL_KEY}"] * 3


async def test_the_real_key_is_nowhere_in_the_sandbox(scripted_server, make_gateway, gw_sandbox):
    srv = scripted_server([reply("ok")])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t")
    sb = await gw_sandbox(gw)
    await start_forwarder(sb, gw)
    r = await sb.exec(["/usr/bin/python3", "-c", URLLIB_CLIENT, INSIDE_URL, lease.token])
    assert r.exit_code == 0 and '"ok"' in r.stdout
    assert srv.headers[0]["authorization"] == f"Bearer {REAL_KEY}"  # the upstream got it
    # every process's environment and command line, and every file we can reach
    argv = key_search_argv(REAL_KEY, "/root", "/tmp", "/tmp_workspace", "/opt", "/run", "/etc")
    r = await sb.exec(argv, timeout_s=120)
    assert r.stdout.split() == ["procs:0", "files:0"], r.stdout + r.stderr
    # the gateway's folder holds only the socket, read-only
    r = await sb.exec(f"ls {SANDBOX_GATEWAY_DIR}; echo x > {SANDBOX_GATEWAY_DIR}/planted.py")
    assert r.stdout.split() == ["gateway.sock"]
    assert r.exit_code != 0 and "Read-only file system" in r.stderr


async def test_other_host_services_stay_unreachable(scripted_server, make_gateway, gw_sandbox):
    srv = scripted_server([reply("never")])
    gw = make_gateway()
    sb = await gw_sandbox(gw)
    await start_forwarder(sb, gw)
    # the scripted server and the gateway's own TCP port listen on the host's 127.0.0.1:
    # the sandbox's loopback is another one
    for url in (f"{srv.base_url}/models", f"{gw.host_url}/healthz"):
        r = await sb.exec(f"curl -sS -m 5 {url}")
        assert r.exit_code == 7, (url, r.stdout, r.stderr)  # couldn't connect
    r = await sb.exec(f"curl -sS -m 5 http://127.0.0.1:{FORWARDER_PORT}/healthz")
    assert (r.exit_code, r.stdout) == (0, "ok")
    assert srv.requests == []


async def test_a_sandbox_running_as_another_host_uid_reaches_it(
    scripted_server, make_gateway, gw_sandbox
):
    srv = scripted_server([reply("as another uid")])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t")
    sb = await gw_sandbox(gw, uid_drop=True)
    await start_forwarder(sb, gw)
    r = await sb.exec(["/usr/bin/python3", "-c", URLLIB_CLIENT, INSIDE_URL, lease.token])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["choices"][0]["message"]["content"] == "as another uid"


async def test_without_the_gateway_the_forwarder_answers_502(make_gateway, gw_sandbox):
    gw = make_gateway()
    sb = await gw_sandbox(gw)
    await start_forwarder(sb, gw)
    gw.stop()  # the socket is gone
    r = await sb.exec("curl -sS -m 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:18199/healthz")
    assert r.stdout == "502"
