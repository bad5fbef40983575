"""The gateway's upstream HTTP client: httpx's API (requests, responses, streams, exceptions)
over aiohttp's connection pool and C HTTP parser (httpx-aiohttp's :class:`AiohttpTransport`, the
transport of the openai SDK's ``DefaultAioHttpClient``).

Why: every model call of a trial crosses it once, and httpx's own transport (httpcore, h11,
anyio) costs the harness ~4 ms of CPU per call of a 12 KB chat request; over aiohttp ~2 ms
(issue 19; a client thread's CPU per POST to a local server).

Imported at the first upstream client (``import aiohttp`` costs ~0.3 s of CPU: it loads the
system's CA store twice), not at start-up."""

from __future__ import annotations

import contextlib
import ssl
import weakref
from collections.abc import AsyncIterator

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from clawrig.net import env_proxy_mounts


def httpx_error(exc: BaseException) -> type[httpx.TransportError] | None:
    """The httpx exception class httpx's own transport raises for the failure an aiohttp
    exception ``exc`` stands for, or None when ``exc`` is none of aiohttp's client errors:
    connection not made (refused, DNS, TLS) ``ConnectError``; connect (or pool) timeout
    ``ConnectTimeout``; silence past the read timeout ``ReadTimeout``; the server closed the
    connection or sent a malformed or short reply ``RemoteProtocolError``; a proxy refused
    ``ProxyError``; other connection faults (a reset) ``ReadError``; a URL that is not http(s)
    ``UnsupportedProtocol``. (httpx-aiohttp's own map calls a refused connection and a closed
    one ``ConnectTimeout``: a server that went away mid-reply would read as never reached.)"""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return httpx.ProxyError
    if isinstance(
        exc,
        aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientResponseError,
    ):
        return httpx.RemoteProtocolError
    if isinstance(exc, aiohttp.ClientConnectionError):
        return httpx.ReadError
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return httpx.UnsupportedProtocol
    return None


def _remapped(exc: BaseException, request: httpx.Request) -> BaseException:
    """``exc`` (raised by httpx-aiohttp: its mapped httpx error, whose cause is aiohttp's, or
    aiohttp's own) as :func:`httpx_error` names it; any other exception as it is."""
    cause = exc.__cause__ if isinstance(exc, httpx.TransportError) else exc
    kind = httpx_error(cause) if cause is not None else None
    if kind is None or cause is None:
        return exc
    mapped = kind(str(cause) or type(cause).__name__, request=request)
    mapped.__cause__ = cause
    return mapped


class _Stream(httpx.AsyncByteStream):
    """A reply body whose transport errors are :func:`httpx_error`'s."""

    def __init__(self, inner: httpx.AsyncByteStream, request: httpx.Request) -> None:
        self._inner = inner
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except (httpx.TransportError, aiohttp.ClientError) as exc:
            raise _remapped(exc, self._request)  # noqa: B904 (its cause: aiohttp's error)

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        except (httpx.TransportError, aiohttp.ClientError) as exc:
            raise _remapped(exc, self._request)  # noqa: B904 (its cause: aiohttp's error)


class UpstreamTransport(AiohttpTransport):
    """httpx-aiohttp's transport with :func:`httpx_error`'s exceptions, on an aiohttp session
    made at its first request (in the event loop it is bound to) that keeps no cookies (httpx
    keeps the client's) and reads no proxy or netrc settings (aiohttp's ``trust_env`` looks up
    ``~/.netrc`` in a thread for every request; proxies: :func:`upstream_client`).

    ``verify``: the TLS context; ``limits``: ``max_connections`` (the pool's cap) and
    ``keepalive_expiry`` (seconds an idle connection is kept)."""

    def __init__(self, *, verify: ssl.SSLContext, limits: httpx.Limits) -> None:
        super().__init__(verify=verify, limits=limits, client=self._session)

    def _session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            ssl=self.ssl_context,
            limit=self.limits.max_connections or 0,
            keepalive_timeout=self.limits.keepalive_expiry,
        )
        return aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except (httpx.TransportError, aiohttp.ClientError) as exc:
            raise _remapped(exc, request)  # noqa: B904 (its cause: aiohttp's error)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Stream(response.stream, request)
        return response


def upstream_client(
    *, timeout: httpx.Timeout, limits: httpx.Limits, verify: ssl.SSLContext
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` (``timeout``, ``limits``, TLS context ``verify``) whose requests
    go over :class:`UpstreamTransport`, except those the environment sends through a proxy
    (``HTTPS_PROXY``, ``ALL_PROXY``, ... but not ``NO_PROXY``: httpx's reading of them), which
    keep httpx's own transport to that proxy as a plain ``httpx.AsyncClient`` would."""
    mounts = env_proxy_mounts(verify=verify, limits=limits)
    transport = UpstreamTransport(verify=verify, limits=limits)
    client = httpx.AsyncClient(timeout=timeout, limits=limits, transport=transport, mounts=mounts)
    weakref.finalize(client, _let_go, transport)
    return client


def _let_go(transport: UpstreamTransport) -> None:
    """A client dropped without ``aclose`` (an httpx client may be; a test's chat model, say):
    its connections closed now and quietly (aiohttp logs "Unclosed client session" and
    "Unclosed connector" for a session left to the garbage collector; httpx says nothing)."""
    session = transport.client
    if isinstance(session, aiohttp.ClientSession) and not session.closed:
        connector = session.connector
        session.detach()
        if connector is not None:
            with contextlib.suppress(Exception):
                connector._close()  # the public close() is a coroutine: no loop may run now
