"""The egress proxy: the only way out of a sandbox, run by the harness on the host.

An HTTP proxy on asyncio streams that understands exactly two request forms (RFC 9110 s. 9.3.6
and RFC 9112 s. 3.2.2):

- ``CONNECT host:port HTTP/1.1``: after the policy allows ``host:port``, a TCP tunnel
  (``200 Connection established``), then bytes both ways (TLS stays end to end; the proxy
  never sees a key or a body);
- ``GET http://host[:port]/path HTTP/1.1`` (any method, absolute-form ``http://``): the request
  is sent on to ``host`` in origin-form with ``Connection: close`` and the ``Proxy-*`` headers
  removed, then bytes both ways until either side closes (one request per connection).

A refused host gets ``403`` with a one-line reason; an unreachable one ``502``. Every
connection is one JSON line in the trial's ``egress.jsonl``: ``time`` (ISO 8601 UTC),
``phase`` (setup | agent ...), ``method``, ``host``, ``port``, ``verdict`` (allowed | refused |
failed | bad_request), ``bytes_up`` / ``bytes_down`` (bytes sent to / received from the host,
after the head), ``seconds``, and ``reason`` for a refusal or failure. The log is capped
(:data:`MAX_LOG_RECORDS` lines, :data:`MAX_LOG_BYTES` bytes: a sandbox that floods the proxy
cannot fill the job's disk or the harness's memory); connections past the cap are counted and
summed up in one last line (``verdict`` ``unlogged``) when the proxy stops.

The proxy listens on a unix socket in a folder bound read-only into the sandbox
(:data:`SANDBOX_EGRESS_DIR`); inside, the sandbox's supervisor forwards the sandbox's
own loopback at ``127.0.0.1:EGRESS_PORT``, and :func:`proxy_env` points ``HTTP(S)_PROXY`` there.
There is no other route out: the sandbox's network namespace has loopback only. The proxy adds
nothing to requests (no key, no header): model keys go through the model gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from clawrig.egress.policy import NetworkPolicy, is_public_address
from clawrig.llm.gateway.forwarder import open_forward
from clawrig.sandbox.base import Forward, Sandbox
from clawrig.serving import SandboxSocketServer, pipe_streams
from clawrig.spec.layout import TrialPaths

EGRESS_PORT = 18200
"""The port of the egress forwarder on the sandbox's loopback."""
SANDBOX_EGRESS_DIR = "/opt/clawrig-egress"
"""Where the proxy's folder (its socket) is bound read-only in a sandbox."""
SOCKET_NAME = "egress.sock"
LOG_FILE = TrialPaths.EGRESS
"""The per-trial connection log (in the trial folder)."""
NO_PROXY = "localhost,127.0.0.1,::1"
"""Never proxied: the sandbox's own loopback (warmup services, the model gateway forwarder)."""
MAX_HEAD_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 30.0
HEAD_TIMEOUT_S = 10.0
"""Seconds a client has to send its request head; a silent connection is closed."""
MAX_HOST_CHARS = 253
"""The longest host name DNS allows (RFC 1035 s. 2.3.4); a longer one is a 400."""
MAX_LOG_RECORDS = 10_000
"""Lines of ``egress.jsonl`` per proxy (a trial); later connections are only counted."""
MAX_LOG_BYTES = 8 * 1024 * 1024
"""Bytes of ``egress.jsonl`` per proxy (a trial); later connections are only counted."""
MAX_CONNECTIONS = 64
"""Connections one trial's proxy holds at once; more are refused at once (503), so one sandbox
cannot exhaust the harness's file descriptors."""
_HOP_HEADERS = {"proxy-connection", "proxy-authorization", "connection", "keep-alive"}


def proxy_env(port: int = EGRESS_PORT) -> dict[str, str]:
    """Environment that sends pip, npm, apt, curl, requests, httpx and node's fetch (with
    ``NODE_USE_ENV_PROXY``) through the forwarder at ``127.0.0.1:port``."""
    url = f"http://127.0.0.1:{port}"
    env = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = url
    env["NO_PROXY"] = env["no_proxy"] = NO_PROXY
    env["npm_config_proxy"] = env["npm_config_https_proxy"] = url
    env["NODE_USE_ENV_PROXY"] = "1"
    return env


def _response(status: int, reason: str, text: str) -> bytes:
    body = (text.rstrip("\n") + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _split_hostport(text: str, default_port: int) -> tuple[str, int]:
    """(host, port) of ``host[:port]`` or ``[v6][:port]``. Raises ValueError for a port that
    is not a number in 1..65535."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") else default_port
    else:
        host, sep, port_text = text.rpartition(":")
        if not (sep and host):
            host, port = text, default_port
        else:
            port = int(port_text)
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range")
    return host, port


class EgressProxy(SandboxSocketServer):
    """One trial's egress proxy (see the module docs).

    ``policy``: the :class:`NetworkPolicy` in force; change it (and ``phase``) between phases,
    e.g. the setup policy for warmup, then the agent's. ``log_path``: the ``egress.jsonl`` file
    (appended to). ``resolve``: host -> address overrides (tests point names at loopback
    servers). Start with :meth:`start` (or ``async with``) inside a running event loop.
    """

    def __init__(
        self,
        log_path: Path | str,
        policy: NetworkPolicy | None = None,
        *,
        phase: str = "setup",
        resolve: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            socket_name=SOCKET_NAME,
            sandbox_dir=SANDBOX_EGRESS_DIR,
            kind="egress",
            max_connections=MAX_CONNECTIONS,
            head_limit=MAX_HEAD_BYTES,
        )
        self.log_path = Path(log_path)
        self.policy = policy or NetworkPolicy()
        self.phase = phase
        self.resolve = {k.lower(): v for k, v in (resolve or {}).items()}
        self.records: list[dict[str, Any]] = []
        """The logged records (at most :data:`MAX_LOG_RECORDS`), as in ``egress.jsonl``."""
        self.unlogged = 0
        """Connections past the log's cap (counted, not logged)."""
        self._log_bytes = 0

    def on_start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.touch()

    def on_stop(self) -> None:
        """The ``unlogged`` line when connections went past the log's cap."""
        if self.unlogged:
            summary = {
                "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
                "phase": self.phase,
                "method": "",
                "host": "",
                "port": 0,
                "verdict": "unlogged",
                "bytes_up": 0,
                "bytes_down": 0,
                "reason": f"{self.unlogged} more connection(s) past the log's cap of "
                f"{MAX_LOG_RECORDS} lines / {MAX_LOG_BYTES} bytes",
            }
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(summary) + "\n")
            self.unlogged = 0

    def _log(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        size = len(line.encode("utf-8"))
        if len(self.records) >= MAX_LOG_RECORDS or self._log_bytes + size > MAX_LOG_BYTES:
            self.unlogged += 1
            return
        self.records.append(record)
        self._log_bytes += size
        with open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(line)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        started = time.monotonic()
        record: dict[str, Any] = {
            "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
            "phase": self.phase,
            "method": "",
            "host": "",
            "port": 0,
            "verdict": "bad_request",
            "bytes_up": 0,
            "bytes_down": 0,
        }
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            TimeoutError,
        ):
            return  # nothing that names a host: not a connection attempt worth a line
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            record["reason"] = "not an HTTP/1.x request line"
            return await self._refuse(writer, record, 400, "Bad Request", started)
        method, target, version = parts
        record["method"] = method
        try:
            if method == "CONNECT":
                host, port = _split_hostport(target, 443)
                url = None
            else:
                url = urlsplit(target)
                host, port = url.hostname or "", url.port or 80
        except ValueError as exc:
            record["reason"] = f"bad target {target[:200]!r}: {exc}"
            return await self._refuse(writer, record, 400, "Bad Request", started)
        if url is None:
            upstream_head = None
        else:
            if url.scheme != "http" or not url.hostname:
                record["reason"] = "only CONNECT and absolute http:// requests are proxied"
                return await self._refuse(writer, record, 400, "Bad Request", started)
            path = url.path or "/"
            if url.query:
                path += "?" + url.query
            headers = [
                line
                for line in lines[1:]
                if line and line.split(":", 1)[0].strip().lower() not in _HOP_HEADERS
            ]
            upstream_head = "\r\n".join(
                [f"{method} {path} {version}", *headers, "Connection: close", "", ""]
            ).encode("latin-1")
        if len(host) > MAX_HOST_CHARS:
            record["host"] = host[:64].lower() + "..."
            record["reason"] = f"a host name of {len(host)} characters (at most {MAX_HOST_CHARS})"
            return await self._refuse(writer, record, 400, "Bad Request", started)
        record["host"], record["port"] = host.lower(), port
        if not self.policy.allows(host, port):
            record["verdict"] = "refused"
            record["reason"] = f"not allowed by the {self.phase} policy {self.policy}"
            return await self._refuse(
                writer,
                record,
                403,
                "Forbidden",
                started,
                f"clawrig egress: {host}:{port} is not allowed by the {self.phase} network "
                f"policy ({self.policy})",
            )
        address = self.resolve.get(host.lower(), host)
        if self.policy.mode == "open" and host.lower() not in self.resolve:
            # "open" means the internet, not this machine or its private network: a name that
            # resolves to loopback, private or link-local addresses is refused
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(address, port)
            except OSError:
                infos = []
            local = [i[4][0] for i in infos if not is_public_address(str(i[4][0]))]
            if local:
                record["verdict"] = "refused"
                record["reason"] = f"{host} resolves to a local or private address ({local[0]})"
                return await self._refuse(
                    writer, record, 403, "Forbidden", started, f"clawrig egress: {record['reason']}"
                )
            if infos:
                address = str(infos[0][4][0])
        try:
            up_r, up_w = await asyncio.wait_for(
                asyncio.open_connection(address, port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            record["verdict"] = "failed"
            record["reason"] = f"{type(exc).__name__}: {exc}"
            return await self._refuse(
                writer,
                record,
                502,
                "Bad Gateway",
                started,
                f"clawrig egress: cannot reach {host}:{port} ({record['reason']})",
            )
        record["verdict"] = "allowed"
        try:
            if upstream_head is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                up_w.write(upstream_head)
            counts = await asyncio.gather(pipe_streams(reader, up_w), pipe_streams(up_r, writer))
            record["bytes_up"], record["bytes_down"] = counts
        finally:
            with contextlib.suppress(Exception):
                up_w.close()
            record["seconds"] = round(time.monotonic() - started, 3)
            self._log(record)

    async def _refuse(
        self,
        writer: asyncio.StreamWriter,
        record: dict[str, Any],
        status: int,
        reason: str,
        started: float,
        text: str | None = None,
    ) -> None:
        record["seconds"] = round(time.monotonic() - started, 3)
        self._log(record)
        with contextlib.suppress(ConnectionError, OSError):
            writer.write(_response(status, reason, text or f"clawrig egress: {record['reason']}"))
            await writer.drain()


async def start_egress_forwarder(
    sandbox: Sandbox, proxy: EgressProxy, *, port: int = EGRESS_PORT
) -> Forward:
    """Forward ``sandbox``'s ``127.0.0.1:port`` to the proxy (the sandbox was created with
    ``proxy.sandbox_binds()``); listening on return. Raises
    :class:`clawrig.errors.SandboxError` when it cannot listen."""
    return await open_forward(
        sandbox, f"{SANDBOX_EGRESS_DIR}/{SOCKET_NAME}", port=port, what="the egress forwarder"
    )
