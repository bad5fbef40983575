"""Serving an ASGI app (FastAPI) from a background thread: the model gateway, the scripted model
server and anything else the harness hosts on loopback or a unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from clawrig.leftovers import socket_tempdir
from clawrig.sandbox.base import Bind

if TYPE_CHECKING:
    import uvicorn


def tcp_listener(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A bound TCP socket for uvicorn on ``host`` (an IPv4 or IPv6 address, or a name: IPv6
    when it holds a colon, ``::`` every address). ``proto=IPPROTO_TCP`` matters: asyncio sets
    TCP_NODELAY on accepted connections only when the socket says it is TCP; without it every
    reply on a kept-alive connection waits ~40 ms for a delayed ACK (Nagle). An IPv6 address
    may come in a URL's brackets (``[fd00::2]``: helper-170, "Name or service not known").
    Raises OSError."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


ANY_ADDRESS = frozenset({"", "0.0.0.0", "::", "::ffff:0:0"})
"""Listening addresses (as :func:`_as_bound` spells them) that take connections on every
address of the machine (``::ffff:0:0``, ``::ffff:0.0.0.0`` as given: every IPv4 one)."""


def _as_bound(host: str) -> str:
    """``host`` as bind reads it: an IPv4 address in any form ``inet_aton`` takes (127.1, 0)
    spelled in full, an IPv6 address in its short form (``::0`` and ``::0.0.0.0`` are ``::``:
    helper-154); anything else (a name) as it is."""
    import ipaddress

    with contextlib.suppress(OSError):
        return socket.inet_ntoa(socket.inet_aton(host))
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host.strip("[]")))
    return host


def _is_loopback(host: str) -> bool:
    """True when ``host`` (as :func:`_as_bound` reads it) is a loopback address or
    ``localhost``."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return _without_root_dot(host.lower()) == "localhost"
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1 (not loopback to 3.11)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def named_hosts(host: str) -> frozenset[str] | None:
    """The names (lower case; IPv6 addresses without brackets) a browser may put in the Host
    header of a request to a server listening on ``host`` (an address or name), or None when
    any may (``host`` is one of :data:`ANY_ADDRESS`: the server is reached under names it
    cannot know). Loopback adds ``localhost``, ``127.0.0.1`` and ``::1``; any other address
    adds this machine's host name and fully qualified name."""
    host = _as_bound(host)
    if host in ANY_ADDRESS:
        return None
    names = {_without_root_dot(host.lower().strip("[]"))}
    if _is_loopback(host):
        names |= {"localhost", "127.0.0.1", "::1"}
    else:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset(names)


def exposure_warning(host: str, command: str, reach: str) -> str | None:
    """The warning ``clawrig COMMAND`` prints listening on ``host`` when that is not loopback
    (other machines reach it, and it asks no password: anyone who does can ``reach``), or None
    on loopback. On every address (:data:`ANY_ADDRESS`) it adds that the Host check
    (:class:`HostGuard`) is off too."""
    if _is_loopback(_as_bound(host)):
        return None
    line = (
        f"warning: with --host {host} other machines reach clawrig {command}, which asks no "
        f"password: anyone who reaches it can {reach}"
    )
    if named_hosts(host) is None:
        line += "; on every address the Host check against DNS rebinding is off too"
    return line


_HOST_FORM = re.compile(r"(?:\[[^\[\]@/?#\s]+\]|[^\[\]:@/?#\s]+)(?::[0-9]*)?")
"""A Host header's form (RFC 3986 section 3.2.2): a bracketed address or a name with no
userinfo, path, query or fragment in it, then an optional ``:port``."""


def host_name(header: str) -> str | None:
    """The host a Host header names (``name[:port]``, ``[v6]:port``): lower case, IPv6 without
    brackets, a name without its root's trailing dot; None when it names none (empty,
    malformed: userinfo, a path, query or fragment, anything after the brackets but a port, a
    port that is no number in 0-65535; RFC 9110 section 7.2, RFC 3986 section 3.2)."""
    from urllib.parse import urlsplit

    if _HOST_FORM.fullmatch(header) is None:  # (urlsplit drops a@ and /x: helper-169)
        return None
    try:
        parts = urlsplit(f"//{header}")
        name = parts.hostname or None
        parts.port  # noqa: B018 - raises ValueError for a port out of range or no number
    except ValueError:
        return None
    # an address in the spelling the server's own names have (_as_bound: a server listening
    # on ::ffff:127.0.0.1 refused [::ffff:127.0.0.1] for ::ffff:7f00:1, helper-156)
    if name is not None and ":" in name:
        return _as_bound(name)
    return _without_root_dot(name) if name else None


def _bracketed_ipv6(host: str) -> str | None:
    """``host`` (a Host header) as HTTP wants it when it is an IPv6 address without the
    brackets around it (``::1`` -> ``[::1]``; ``::1:8080``, read as address and port, ->
    ``[::1]:8080``: helper-164), else None (RFC 9110 section 7.2, RFC 3986 section 3.2.2)."""
    import ipaddress

    def ipv6(text: str) -> bool:
        try:
            return ipaddress.ip_address(text).version == 6
        except ValueError:
            return False

    if ipv6(host):
        return f"[{host}]"
    address, _, port = host.rpartition(":")
    if port.isdigit() and ipv6(address):
        return f"[{address}]:{port}"
    return None


def _without_root_dot(name: str) -> str:
    """A DNS name without the trailing dot of its fully qualified spelling (``localhost.`` is
    ``localhost``: RFC 1034 section 3.1); one dot only (``a..`` stays malformed)."""
    return name[:-1] if name.endswith(".") and not name.endswith("..") else name


class HostGuard:
    """ASGI middleware answering, instead of the app, a request whose Host header names none
    of ``allowed`` (:func:`named_hosts`): ``refusal(line)`` makes the HTTP response (400), a
    websocket is closed. So a web page the user opens cannot reach a loopback server by DNS
    rebinding (its own name made to resolve to 127.0.0.1: its requests carry that name)."""

    def __init__(self, app: Any, *, allowed: frozenset[str], refusal: Any) -> None:
        self.app, self.allowed, self.refusal = app, allowed, refusal

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = [v for k, v in scope["headers"] if k == b"host"]
            said = headers[0].decode("latin-1") if headers else ""
            name = host_name(said) if len(headers) == 1 else None
            if name not in self.allowed:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                line = (
                    # RFC 9112 section 3.2: a request with more than one Host header is a 400
                    f"host: {len(headers)} Host headers in one request (HTTP takes one)"
                    if len(headers) > 1
                    else f"host: {said or '(no Host header)'!s} is not a name of this server "
                    f"(it answers to {', '.join(sorted(self.allowed))}; listening with --host "
                    "0.0.0.0 it takes any)"
                )
                bracketed = _bracketed_ipv6(said) if len(headers) == 1 else None
                if bracketed is not None:  # (helper-159: "::1 ... answers to ::1")
                    line += f"; an IPv6 address goes in brackets: {bracketed}"
                await self.refusal(line)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def guard_hosts(app: Any, host: str, refusal: Any) -> None:
    """Make ``app`` (a FastAPI app, before it serves) answer ``refusal(line)`` (a response
    with status 400) to a request whose Host header names none of :func:`named_hosts` of its
    listening ``host`` (:class:`HostGuard`)."""
    allowed = named_hosts(host)
    if allowed is not None:
        app.add_middleware(HostGuard, allowed=allowed, refusal=refusal)


@functools.cache
def _woken_server() -> type[uvicorn.Server]:
    """:class:`_WokenServer`'s class, made at first use (importing uvicorn costs ~50 ms of CPU
    that a job which never serves does not pay)."""
    import uvicorn

    class _WokenServer(uvicorn.Server):
        """uvicorn's server, woken to stop instead of polling for it: uvicorn's main loop looks
        at ``should_exit`` every 0.1 s, ten wake-ups a second of an idle thread that competes
        for the interpreter lock with the harness's event loop (~2% of the harness's CPU in a
        job). This one ticks once a second (the Date header's refresh, the request limit) and
        :meth:`wake` ends its wait at once."""

        _loop: asyncio.AbstractEventLoop | None = None
        _woken: asyncio.Event | None = None

        async def main_loop(self) -> None:
            self._woken = asyncio.Event()
            self._loop = asyncio.get_running_loop()
            counter = 0
            should_exit = await self.on_tick(counter)
            while not should_exit:
                counter = (counter + 10) % 864000  # uvicorn's ticks are 0.1 s; these are 1 s
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._woken.wait()
                should_exit = await self.on_tick(counter)

        def wake(self) -> None:
            """From any thread: end the main loop's wait now (after ``should_exit`` is set)."""
            loop, woken = self._loop, self._woken
            if loop is not None and woken is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to wake
                    loop.call_soon_threadsafe(woken.set)

    return _WokenServer


class ThreadedServer:
    """uvicorn serving ``app`` on ``sockets`` in a daemon thread.

    ``start()`` returns once the server accepts (RuntimeError after ``start_timeout_s``
    seconds); ``stop()`` asks it to exit and joins the thread (``stop_timeout_s`` seconds).
    ``config`` goes to :class:`uvicorn.Config` (log_level, lifespan, timeouts ...;
    ``proxy_headers`` is off unless given).
    """

    def __init__(
        self,
        app: Any,
        sockets: list[socket.socket],
        *,
        name: str,
        start_timeout_s: float = 10.0,
        stop_timeout_s: float = 10.0,
        **config: Any,
    ):
        self.sockets = sockets
        self.name = name
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        # no X-Forwarded-For from a loopback peer taken for the client (uvicorn trusts
        # 127.0.0.1's by default): clawrig's servers sit behind no proxy, and the gateway
        # tells the agent loop's requests by their client (helper-162: a program spoofed it)
        settings: dict[str, Any] = {
            "log_level": "critical",
            "access_log": False,
            "proxy_headers": False,
            **config,
        }
        import uvicorn

        self.server: Any = _woken_server()(uvicorn.Config(app, **settings))  # a _WokenServer
        self.thread: threading.Thread | None = None

    def start(self) -> ThreadedServer:
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": self.sockets}, name=self.name, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} could not start")
            time.sleep(0.005)
        return self

    @property
    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def stop(self) -> None:
        self.server.should_exit = True
        self.server.wake()
        if self.thread is not None:
            self.thread.join(timeout=self.stop_timeout_s)
        for s in self.sockets:
            try:
                s.close()
            except OSError:
                pass
        self.thread = None


PIPE_CHUNK = 65536


async def pipe_streams(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    """Copy ``reader`` to ``writer`` until EOF (then half-close ``writer``); returns the bytes
    copied. A connection error ends the copy quietly (the other side went away)."""
    total = 0
    try:
        while data := await reader.read(PIPE_CHUNK):
            total += len(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
    return total


REFUSED_REPLY = b"HTTP/1.1 503 Too Many Connections\r\nConnection: close\r\n\r\n"


class SandboxSocketServer:
    """A unix socket the harness serves for one sandbox: it lives in a fresh host folder (with
    ``files`` copied beside it, e.g. the in-sandbox forwarder script) that is bound read-only at
    ``sandbox_dir`` inside the sandbox; the folder is ``socket_tempdir(kind, ...)``, so the next
    harness removes it after a ``kill -9``. At most ``max_connections`` connections are handled at
    once; more get ``503`` and are counted in :attr:`refused` (never a log line each), so one
    sandbox cannot exhaust the harness's file descriptors.

    Subclasses implement :meth:`handle` (one connection; exceptions and cancellation end only
    that connection). ``await start()`` (or ``async with``) in the event loop that serves it;
    :meth:`stop` closes every open connection and removes the folder (idempotent).
    ``head_limit``: the stream reader's buffer limit (bytes) for ``readline``/``readuntil``.
    """

    def __init__(
        self,
        *,
        socket_name: str,
        sandbox_dir: str,
        kind: str,
        files: dict[str, Path] | None = None,
        max_connections: int = 64,
        head_limit: int | None = None,
    ) -> None:
        self.socket_name = socket_name
        self.sandbox_dir = sandbox_dir
        self.kind = kind
        self.files = dict(files or {})
        self.max_connections = max_connections
        self.head_limit = head_limit
        self.folder: Path | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.refused = 0
        """Connections refused because ``max_connections`` were open."""

    @property
    def socket_path(self) -> Path:
        if self.folder is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self.folder / self.socket_name

    def sandbox_binds(self) -> list[Bind]:
        """The read-only bind that makes the socket (and ``files``) reachable in a sandbox."""
        if self.folder is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return [Bind(source=self.folder, dest=self.sandbox_dir, read_only=True)]

    async def start(self) -> Self:
        """Create the folder, copy ``files`` in and listen. Idempotent."""
        if self._server is not None:
            return self
        self.folder = socket_tempdir(self.kind, self.socket_name)
        os.chmod(self.folder, 0o755)  # sandboxes may run as another host uid
        for name, source in self.files.items():
            shutil.copyfile(source, self.folder / name)
            os.chmod(self.folder / name, 0o644)
        self.on_start()
        kwargs = {} if self.head_limit is None else {"limit": self.head_limit}
        self._server = await asyncio.start_unix_server(
            self._accept, path=str(self.socket_path), **kwargs
        )
        os.chmod(self.socket_path, 0o666)
        return self

    async def stop(self) -> None:
        """Stop listening, close every open connection, remove the folder. Idempotent."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self.on_stop()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def on_start(self) -> None:
        """Called by :meth:`start` before listening (the folder exists)."""

    def on_stop(self) -> None:
        """Called by :meth:`stop` after the last connection ended, before the folder goes."""

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._tasks) >= self.max_connections:
            self.refused += 1
            with contextlib.suppress(Exception):
                writer.write(REFUSED_REPLY)
                writer.close()
            return
        self._tasks.add(task)
        try:
            await self.handle(reader, writer)
        except (asyncio.CancelledError, ConnectionError, OSError):
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()
