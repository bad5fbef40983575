"""The egress proxy in real bubblewrap sandboxes, with loopback servers as the outside."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from egress_helpers import OUTSIDE, PROBE_DIST, PROBE_VALUE

from clawrig.egress import EgressProxy, NetworkPolicy, proxy_env, start_egress_forwarder
from clawrig.egress.policy import HostRule, registry_hosts
from clawrig.errors import UserError
from clawrig.sandbox import Limits, SandboxConfig, create_sandbox

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(
        __import__("shutil").which("bwrap") is None, reason="bubblewrap is not installed"
    ),
]


def test_policy_parsing() -> None:
    assert NetworkPolicy.parse("none").allows("pypi.org", 443) is False
    assert NetworkPolicy.parse("open").allows("anything.example", 1) is True
    p = NetworkPolicy.parse("allow:example.com,*.cdn.test,10.0.0.5:8080")
    assert p.rules == (
        HostRule("example.com"),
        HostRule("*.cdn.test"),
        HostRule("10.0.0.5", 8080),
    )
    assert p.allows("EXAMPLE.com.", 443)
    assert p.allows("a.b.cdn.test", 80)
    assert not p.allows("cdn.test.evil", 80)
    assert p.allows("10.0.0.5", 8080) and not p.allows("10.0.0.5", 22)
    assert str(p) == "allow:example.com,*.cdn.test,10.0.0.5:8080"
    for bad in ("allow:", "some", "allow:a b", "allow:host:99999"):
        with pytest.raises(UserError, match="--network"):
            NetworkPolicy.parse(bad)


def test_registries_follow_this_machines_configuration(monkeypatch, tmp_path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("npm_config_registry", "http://npm.example:4873/")
    hosts = registry_hosts()
    assert "mirror.example" in hosts and "npm.example:4873" in hosts
    assert "pypi.org" not in hosts  # an index-url replaces PyPI
    policy = NetworkPolicy.parse("registries")
    assert policy.allows("npm.example", 4873) and not policy.allows("npm.example", 80)


def test_registries_are_read_again_when_the_configuration_changes(monkeypatch, tmp_path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://one.example/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    assert "one.example" in registry_hosts() and "one.example" in registry_hosts()
    conf.write_text("[global]\nindex-url = https://second.example/simple\n")
    hosts = registry_hosts()  # the file's size changed: read again
    assert "second.example" in hosts and "one.example" not in hosts
    monkeypatch.setenv("PIP_INDEX_URL", "https://third.example:8443/simple")
    assert "third.example:8443" in registry_hosts()
    monkeypatch.delenv("PIP_CONFIG_FILE")
    monkeypatch.delenv("PIP_INDEX_URL")
    assert "second.example" not in registry_hosts()


async def _sandbox(tmp_path: Path, proxy: EgressProxy):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    box = create_sandbox(
        "bwrap",
        SandboxConfig(
            workspace_dir=ws,
            limits=Limits(command_timeout_s=120),
            binds=proxy.sandbox_binds(),
            env=proxy_env(),
        ),
    )
    await box.start()
    await start_egress_forwarder(box, proxy)
    return box


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_allowed_and_refused_hosts_are_logged(tmp_path, outside_files, echo_server) -> None:
    host, port = echo_server
    allowed_port = int(outside_files["allowed"].rsplit(":", 1)[1])
    log = tmp_path / "egress.jsonl"
    policy = NetworkPolicy.parse(f"allow:{OUTSIDE}:{allowed_port},{host}:{port}")
    async with EgressProxy(log, policy, phase="agent") as proxy:
        box = await _sandbox(tmp_path, proxy)
        try:
            fetch = (
                "import urllib.request, sys\n"
                "try:\n"
                "    r = urllib.request.urlopen(sys.argv[1], timeout=20)\n"
                "    print(r.read().decode(), end='')\n"
                "except Exception as e:\n"
                "    print('ERR', getattr(e, 'code', e))\n"
            )
            ok = await box.exec(["python3", "-c", fetch, outside_files["allowed"] + "/hello.txt"])
            assert ok.stdout == outside_files["text"]
            no = await box.exec(["python3", "-c", fetch, outside_files["other"] + "/hello.txt"])
            assert no.stdout.strip() == "ERR 403"
            # a CONNECT tunnel carries bytes both ways, counted exactly
            tunnel = textwrap.dedent(
                f"""
                import socket
                s = socket.create_connection(("127.0.0.1", 18200))
                s.sendall(b"CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\n\\r\\n")
                head = b""
                while not head.endswith(b"\\r\\n\\r\\n"):
                    head += s.recv(1)
                payload = bytes(range(256)) * 40
                s.sendall(payload)
                got = b""
                while len(got) < len(payload):
                    got += s.recv(65536)
                s.close()
                print(head.split(b"\\r\\n")[0].decode(), got == payload)
                """
            )
            r = await box.exec(["python3", "-c", tunnel])
            assert r.stdout.strip() == "HTTP/1.1 200 Connection established True", r
            # no direct route: without the proxy the outside is unreachable
            direct = await box.exec(
                ["python3", "-c", f"import socket; socket.create_connection(('{host}', {port}), 3)"]
            )
            assert direct.exit_code != 0
        finally:
            await box.stop()
    records = _log(log)
    by_host = {(r["host"], r["verdict"]) for r in records}
    assert (OUTSIDE, "allowed") in by_host
    assert ("127.0.0.3", "refused") in by_host
    tunnel_rec = next(r for r in records if r["method"] == "CONNECT")
    assert (tunnel_rec["bytes_up"], tunnel_rec["bytes_down"]) == (10240, 10240)
    get_rec = next(r for r in records if r["method"] == "GET" and r["verdict"] == "allowed")
    assert get_rec["bytes_down"] > len(outside_files["text"])
    assert all(r["phase"] == "agent" for r in records)


async def test_pip_installs_from_a_loopback_index_through_the_proxy(
    tmp_path, package_index
) -> None:
    log = tmp_path / "egress.jsonl"
    async with EgressProxy(log, NetworkPolicy.parse("allow:" + OUTSIDE)) as proxy:
        box = await _sandbox(tmp_path, proxy)
        try:
            r = await box.exec(
                [
                    "python3",
                    "-m",
                    "pip",
                    "install",
                    "--no-cache-dir",
                    "--target",
                    "/tmp/site",
                    "--index-url",
                    package_index,
                    PROBE_DIST,
                ],
                merge_stderr=True,
            )
            assert r.exit_code == 0, r.stdout
            r = await box.exec(
                ["python3", "-c", "import egress_probe; print(egress_probe.VALUE)"],
                env={"PYTHONPATH": "/tmp/site"},
            )
            assert r.stdout.strip() == PROBE_VALUE
            # the same install with the host refused fails (pip gets 403 from the proxy)
            proxy.policy = NetworkPolicy.parse("none")
            r = await box.exec(
                [
                    "python3",
                    "-m",
                    "pip",
                    "install",
                    "--no-cache-dir",
                    "--target",
                    "/tmp/site2",
                    "--index-url",
                    package_index,
                    "--retries",
                    "0",
                    PROBE_DIST,
                ],
                merge_stderr=True,
            )
            assert r.exit_code != 0
        finally:
            await box.stop()
    verdicts = [r["verdict"] for r in _log(log)]
    assert "allowed" in verdicts and verdicts[-1] == "refused"
