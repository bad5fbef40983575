"""The gateway's HTTP server: FastAPI routes served by uvicorn in a background thread (started
at the first connection to its sockets), the forwarding to upstreams with retries, caps, replay
and the per-trial records."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import functools
import hashlib
import json
import os
import secrets
import select
import shutil
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from clawrig.errors import UserError
from clawrig.jsonl import loads_strict
from clawrig.leftovers import SUN_PATH_MAX, fits_socket, socket_tempdir
from clawrig.llm.client import (
    MAX_REPLY_BYTES,
    SHOULD_RETRY_HEADER,
    UPSTREAM_ATTEMPTS_HEADER,
    UPSTREAM_FAILURE_HEADER,
    OpenAIChatModel,
    RetryPolicy,
    RetryWait,
    StopUnreached,
    is_connect_failure,
    mark_answered,
    mark_unreached,
    refuses_retry,
    retry_after_seconds,
    retryable_status,
    take_provider_slot,
    usage_from_openai,
    with_retries,
)
from clawrig.llm.gateway.forwarder import SANDBOX_GATEWAY_DIR, SOCKET_NAME
from clawrig.llm.gateway.lease import (
    IN_PROCESS_CLIENT,
    SHARED_UPSTREAM,
    UPSTREAM_CLIENT,
    GatewayLease,
    UpstreamClients,
    placeholder_endpoint,
)
from clawrig.llm.gateway.replay import (
    JUDGE_KEY_MODEL,
    KEY_EXCLUDED,
    CacheMode,
    ResponseCache,
    _delta,
    canonical_json,
    request_key,
)
from clawrig.llm.gateway.tally import SpendTally
from clawrig.llm.gateway.tokens import (
    StreamTokens,
    capture_fields,
    capture_server,
    strip_capture_fields,
    tokens_from_completion,
)
from clawrig.llm.gateway.wire import (
    _error_body,
    _one_line,
    _upstream_message,
    completion_from_chunks,
    sse_from_completion,
)
from clawrig.llm.providers import ModelEndpoint
from clawrig.serving import ThreadedServer, tcp_listener
from clawrig.sizes import format_bytes
from clawrig.spec.layout import json_text
from clawrig.spec.llm import AGENT_SESSION
from clawrig.spec.trial import Usage
from clawrig.waits import Held, WaitClock, provider_backoff

if TYPE_CHECKING:
    from fastapi import FastAPI

    from clawrig.spec.llm import ChatResponse


class _Retryable(Exception):
    def __init__(self, status: int, headers: httpx.Headers, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = headers
        self.body = body


class _LeaseClosed(Exception):
    """The trial's lease was closed while its request waited for a place of the provider's
    ``max_concurrency``: nobody reads the answer, so it is not sent (not paid for)."""


class _Relayed(StreamingResponse):
    """A relayed upstream stream that calls ``done`` (gives back the request's place of the
    provider's requests in flight) when the response ends, sent or not: a client gone before
    the first line never starts the body's generator, whose own ``finally`` then never runs."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        done: Callable[[], None],
        was_cut: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__(content, media_type="text/event-stream")
        self.done = done
        self.was_cut = was_cut

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or not self.was_cut():
                raise
            task.uncancel()  # cut by the harness (GatewayLease.cut_upstream): the stream ends
        finally:
            self.done()


def _cut_reply(lease: GatewayLease, seq: int) -> Response:
    """The answer to a request :meth:`GatewayLease.cut_upstream` cancelled (its phase ended):
    unanswered for the stall watch, an error for its client."""
    lease.watch.end(seq, answered=False)
    return _error_body(504, "clawrig gateway: the request was cut: its phase ended", "cut")


MAX_REQUEST_BYTES = 32 * 1024 * 1024
"""Largest request body the gateway reads (a program in a sandbox can send any length: a
larger one gets a 413 after at most this much is read, never the harness's memory). Providers
refuse larger ones too (OpenAI's and Anthropic's request limits are 32 MB or less)."""
MAX_IN_FLIGHT = 4
"""Requests one lease may have open at once over the gateway's sockets (its body being read,
parsed, sent upstream, answered): more get a 429 before their body is read. A sandbox's
program holding the trial's token could otherwise make the harness hold 64 bodies of
:data:`MAX_REQUEST_BYTES` at once, ~4x that in Python objects (an agent's own loop makes one
request at a time; OpenClaw's sub-agents a few). A judge lease's requests (a grader's judge
calls through the judge proxy, ``role="judge"``) are never refused by it: the ones beyond it
wait, body unread, until one of the lease's open requests is answered (the grader is the
task's code, run after every agent process is gone; a 429 would fail its grading); one still
waiting when the lease is closed gets the closed token's 401, never the judge (a program of the
agent's a grader runs holds the judge token and could queue requests for after grading)."""
MAX_RECORD_BYTES = 64 * 1024 * 1024
"""Bytes one lease's record file (a trial's ``model_calls.jsonl``) may hold with request and
response bodies; beyond it each record keeps its usage, status and key, and its bodies are
replaced by their size and SHA-256 (``omitted``: a program looping requests with the trial's
token filled 369 MB in 60 s)."""
MAX_ERROR_BYTES = 1024 * 1024
"""Bytes of an upstream error reply the gateway reads (the rest is dropped)."""
LISTEN_BACKLOG = 2048
"""The sockets' listen backlog (uvicorn's default): connections made before the server has
started wait there."""


async def _read_request(request: Request, cap: int) -> bytes | None:
    """The request's body, or None when it is over ``cap`` bytes (by Content-Length at once,
    else while reading)."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > cap:
        return None
    parts: list[bytes] = []
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > cap:
            return None
        parts.append(chunk)
    return b"".join(parts)


async def _read_reply(resp: httpx.Response, cap: int) -> bytes | None:
    """An upstream reply's body (then closed), or None when it is over ``cap`` bytes (by
    Content-Length at once, else while reading: the rest is never read)."""
    try:
        length = resp.headers.get("content-length", "")
        if length.isdigit() and int(length) > cap:
            return None
        parts: list[bytes] = []
        seen = 0
        async for chunk in resp.aiter_bytes():  # decoded: a gzip bomb is capped too
            seen += len(chunk)
            if seen > cap:
                return None
            parts.append(chunk)
        return b"".join(parts)
    finally:
        await resp.aclose()


def _unsendable(data: bytes, body: dict[str, Any]) -> str | None:
    """Why a parsed request body cannot be sent upstream as JSON text, or None: a lone
    surrogate escape (``\\udcff``) no UTF-8 text holds; a ``stream_options`` that is no
    object."""
    if b"\\ud" in data or b"\\uD" in data:  # only then encode it all to find a lone one
        try:
            json.dumps(body, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            return "a string holds a lone surrogate escape (\\ud800-\\udfff): no UTF-8 text can"
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        return "stream_options must be a JSON object"
    return None


def _wire_body(body: dict[str, Any], made: dict[str, str]) -> bytes | None:
    """``body`` as the compact JSON an HTTP client sends (httpx's ``json=``), the fields in
    ``made`` given as JSON text already (put last: key order means nothing to a server);
    None when JSON cannot hold the rest (NaN, say: httpx then says so)."""
    rest = {k: v for k, v in body.items() if k not in made}
    try:
        text = json.dumps(rest, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return None
    parts = [text[:-1]] if rest else ["{"]
    for i, (k, v) in enumerate(made.items()):
        parts.append(f"{',' if rest or i else ''}{json.dumps(k, ensure_ascii=False)}:{v}")
    parts.append("}")
    return "".join(parts).encode()


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, _Retryable | httpx.TransportError) and not refuses_retry(exc)


def _failure_headers(attempts: int, upstream: httpx.Headers | None = None) -> dict[str, str]:
    """Headers of a relayed upstream failure: the attempts made (the client's message reports
    them) and the upstream's ``x-should-retry`` when it sent one."""
    out = {UPSTREAM_ATTEMPTS_HEADER: str(attempts)}
    if upstream is not None and upstream.get(SHOULD_RETRY_HEADER):
        out[SHOULD_RETRY_HEADER] = upstream[SHOULD_RETRY_HEADER]
    return out


def _chained_refusal(data: bytes) -> str | None:
    """The refusal kind in a clawrig gateway's 402 body (``{"error": {"type": kind}}``), or
    None when ``data`` is not one."""
    try:
        error = json.loads(data).get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("type") if isinstance(error, dict) else None


def _retry_after(exc: BaseException) -> float | None:
    return retry_after_seconds(exc.headers) if isinstance(exc, _Retryable) else None


UNKNOWN_TOKEN = "clawrig gateway: unknown or closed trial token"
CACHED_HEADER = "x-clawrig-cached"
"""Set (``1``) on a reply the gateway served from its cache: a gateway in front of it (a Ray
node's) records that call as cached too, and counts no spend for it."""


@functools.lru_cache(maxsize=64)
def _url(text: str) -> httpx.URL:
    """``text`` parsed as httpx parses a request's URL (kept: ~0.2 ms of CPU a request to parse
    the same upstream URL again). Raises httpx.InvalidURL."""
    return httpx.URL(text)


@functools.cache
def upstream_tls() -> ssl.SSLContext:
    """The TLS context of every upstream client of this process: httpx's default (the CA
    bundle of ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set, else certifi's), made once."""
    return httpx.create_ssl_context()


async def send(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    """``await client.send(request, stream=True)`` without httpx's client layer: the request
    goes straight to the client's transport for its URL (an environment proxy's mount, else
    :class:`clawrig.llm.gateway.transport.UpstreamTransport`), skipping its auth and redirect
    steps (the gateway sets the key itself and follows no redirect either way) and its cookie
    jar (httpx turns every reply into urllib's request and message objects to look for
    cookies, a third of its client layer's CPU; an upstream model API's cookies are no
    trial's business, and one client serves many trials). The response's body is unread
    (stream it, then ``aclose``). Raises RuntimeError for a closed client, httpx's
    TransportError subclasses as the transport does."""
    if client.is_closed:
        raise RuntimeError("Cannot send a request, as the client has been closed.")
    response = await client._transport_for_url(request.url).handle_async_request(request)
    response.request = request
    return response


class Gateway:
    """The job's model gateway (see the module docs).

    ``budget_usd``: the job's cap in USD on real upstream spend (cache hits are free); None = no
    cap. ``budget_share_usd``: a trial's share of it (USD; the job sets ``budget_usd / min(parallel,
    trials)``): once the budget is spent, a trial that spent at least this much itself is refused as
    ``budget_share`` (graded), any other as ``budget`` (not scored); None: every refusal is
    ``budget``. ``cache`` / ``cache_mode``: the default for leases (``--replay``: a
    :meth:`ResponseCache.from_job` cache with mode ``only``). ``retry``: upstream retries.
    ``socket_dir``: the folder for the unix socket and the forwarder script (default: a new
    temporary folder, removed by :meth:`stop`). ``tcp``: also listen on 127.0.0.1 (needed by
    :meth:`GatewayLease.chat_model`). ``host``: the address the TCP listener binds (``127.0.0.1``;
    the Ray executor binds the driver's cluster address so nodes reach it). ``timeout_s``: seconds
    per upstream attempt.

    Thread-safe; :meth:`start` / :meth:`stop` (or ``with``) from any thread or event loop.
    """

    def __init__(
        self,
        *,
        budget_usd: float | None = None,
        budget_share_usd: float | None = None,
        cache: ResponseCache | None = None,
        cache_mode: CacheMode | None = None,
        retry: RetryPolicy | None = None,
        socket_dir: Path | None = None,
        tcp: bool = True,
        host: str = "127.0.0.1",
        timeout_s: float = 600.0,
        spend_file: Path | None = None,
    ) -> None:
        self.budget_usd = budget_usd
        self.budget_share_usd = budget_share_usd
        self.cache = cache
        self.cache_mode: CacheMode = cache_mode or ("prefer" if cache is not None else "off")
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        self._tcp = tcp
        self.host = host
        self._own_dir = socket_dir is None
        self._dir = Path(socket_dir) if socket_dir is not None else None
        self._leases: dict[str, GatewayLease] = {}
        self._lock = threading.Lock()
        self._spent = 0.0
        self._tally = SpendTally(spend_file) if spend_file is not None else None
        self._seq = 0
        self._port = 0
        self._server: ThreadedServer | None = None
        self._door: threading.Thread | None = None
        """Waits for the first connection to the sockets, then starts :attr:`_server`."""
        self._door_wake: tuple[int, int] | None = None
        self._serve_lock = threading.Lock()
        self._stopping = False
        self._sockets: list[socket.socket] = []
        self._clients: UpstreamClients | None = None
        """The server thread's upstream clients: each lease served over the sockets borrows
        one (:meth:`_socket_client`), so no client's pool grows with the trials alive."""
        self._tools_memo: tuple[str, list[Any], str, str | None] | None = None
        self._app: FastAPI | None = None
        self._app_lock = threading.Lock()

    @property
    def app(self) -> FastAPI:
        """The gateway's FastAPI app, made at its first use (the server's start, an in-process
        SDK client): importing FastAPI costs ~0.3 s of CPU, which a job whose sandboxes never
        call the gateway over its sockets (the native agent's calls are in process) does not
        pay."""
        with self._app_lock:
            if self._app is None:
                self._app = self._build_app()
            return self._app

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def folder(self) -> Path:
        """The host folder bound into sandboxes (socket + forwarder script)."""
        if self._dir is None:
            raise RuntimeError("the gateway is not started")
        return self._dir

    @property
    def socket_path(self) -> Path:
        """The gateway's unix socket on the host."""
        return self.folder / SOCKET_NAME

    @property
    def sandbox_socket(self) -> str:
        """The unix socket's path inside a sandbox bound with :meth:`sandbox_binds`."""
        return f"{SANDBOX_GATEWAY_DIR}/{SOCKET_NAME}"

    @property
    def host_url(self) -> str:
        """``http://<host>:<port>`` (no path) for host-side clients (and Ray nodes)."""
        if not self._port:
            raise RuntimeError("the gateway has no TCP listener (start it with tcp=True)")
        return f"http://{self.host}:{self._port}"

    @property
    def spent_usd(self) -> float:
        """USD spent upstream by the whole job so far (cache hits excluded; with a
        ``spend_file``, every process's that shares it)."""
        if self._tally is not None:
            return self._tally.total()
        with self._lock:
            return self._spent

    def add_spent(self, usd: float) -> None:
        """Count ``usd`` (USD) the job spent before this gateway started (a resumed job's
        finished trials) in :attr:`spent_usd`, so the budget refuses at the job's total."""
        with self._lock:
            self._spent += usd
        if self._tally is not None:
            self._tally.add(usd)

    @property
    def tally_path(self) -> Path | None:
        """The ``spend_file`` this gateway shares with the job's other processes, or None."""
        return self._tally.path if self._tally is not None else None

    def start(self) -> Gateway:
        """Create the socket folder and listen; the server (uvicorn in a background thread)
        starts at the first connection to a socket, which waits in the listen backlog until
        then (a job whose sandboxes never call the gateway never imports FastAPI or runs
        uvicorn). Idempotent."""
        if self._door is not None:
            return self
        if self._dir is None:
            self._dir = socket_tempdir("gw", SOCKET_NAME)
        elif not fits_socket(self._dir / SOCKET_NAME):
            raise UserError(
                f"Gateway socket_dir {self._dir}: too deep for a unix socket's path "
                f"(at most {SUN_PATH_MAX - 1 - len(SOCKET_NAME)} bytes)"
            )
        self._dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self._dir, 0o755)  # sandboxes may run as another host uid
        path = self.socket_path
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(str(path))
        os.chmod(path, 0o666)
        self._sockets = [unix]
        if self._tcp:
            tcp = tcp_listener(self.host, 0)
            self._port = tcp.getsockname()[1]
            self._sockets.append(tcp)
        for s in self._sockets:
            s.listen(LISTEN_BACKLOG)
        self._stopping = False
        self._door_wake = os.pipe()
        self._door = threading.Thread(
            target=self._wait_for_caller, name="clawrig-gateway-door", daemon=True
        )
        self._door.start()
        return self

    def _wait_for_caller(self) -> None:
        """The door thread: block until a socket has a connection waiting (then start the
        server, which accepts it) or :meth:`stop` wakes it."""
        assert self._door_wake is not None
        poller = select.poll()
        for fd in [s.fileno() for s in self._sockets] + [self._door_wake[0]]:
            poller.register(fd, select.POLLIN)
        while True:
            try:
                ready = poller.poll()
            except InterruptedError:
                continue
            except OSError:
                return
            if any(fd == self._door_wake[0] for fd, _ in ready):
                return
            if self._serve():
                return

    def _serve(self) -> bool:
        """Start the server on the sockets (in the door thread; not after :meth:`stop`); True
        when it runs (or need not). When it cannot start (its 15 s under load, say), the
        connections waiting now are closed (those callers get an error, not a hang) and the
        sockets stay open: the next connection tries again (before, every socket closed and
        every later trial of the job failed)."""
        with self._serve_lock:
            if self._server is not None or self._stopping:
                return True
            # assigned before start(): the first caller may be answered (by the server's
            # thread) before start() returns, and ``serving`` must already say so. The server
            # gets copies of the sockets: a failed start closes its own, not the gateway's
            self._server = ThreadedServer(
                self.app,
                [s.dup() for s in self._sockets],
                name="clawrig-gateway",
                start_timeout_s=15,
                stop_timeout_s=15,
                lifespan="on",
                timeout_graceful_shutdown=2,
                timeout_keep_alive=30,
                backlog=LISTEN_BACKLOG,
            )
            try:
                self._server.start()
            except RuntimeError:
                self._server = None
                for s in self._sockets:
                    s.setblocking(False)
                    with contextlib.suppress(OSError):
                        while True:
                            s.accept()[0].close()
                return False
            return True

    @property
    def serving(self) -> bool:
        """True once the server runs (the first connection to a socket started it)."""
        server = self._server
        return server is not None and server.alive

    def stop(self) -> None:
        """Stop serving, close the sockets, remove a temporary folder. Idempotent."""
        with self._serve_lock:
            self._stopping = True
        door, self._door = self._door, None
        if door is not None and self._door_wake is not None:
            os.write(self._door_wake[1], b"x")
            door.join()
        if self._door_wake is not None:
            for fd in self._door_wake:
                os.close(fd)
            self._door_wake = None
        if self._server is not None:
            self._server.stop()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()
        self._sockets = []
        self._server = None
        self._port = 0
        if self._dir is not None:
            if self._own_dir:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None
            else:
                with contextlib.suppress(FileNotFoundError):
                    (self._dir / SOCKET_NAME).unlink()

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def new_upstream_client(self) -> httpx.AsyncClient:
        """A new HTTP client for upstream calls (``timeout_s`` per attempt, 30 s to connect);
        bound to the event loop that first uses it. httpx over aiohttp
        (:func:`clawrig.llm.gateway.transport.upstream_client`: half the CPU per call of
        httpx's own transport). Every client shares one TLS context (:func:`upstream_tls`):
        making one reads the CA bundle, ~50 ms of CPU per trial."""
        timeout = httpx.Timeout(self.timeout_s, connect=30.0)
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        try:
            from clawrig.llm.gateway.transport import upstream_client
        except ImportError:  # a virtualenv made before httpx-aiohttp was a dependency
            return httpx.AsyncClient(timeout=timeout, limits=limits, verify=upstream_tls())
        return upstream_client(timeout=timeout, limits=limits, verify=upstream_tls())

    @asynccontextmanager
    async def shared_upstream(self) -> AsyncIterator[None]:
        """Within it, every in-process chat model of this gateway on this event loop (and in
        tasks it starts) sends upstream through a client borrowed from the job's
        :class:`UpstreamClients` (one trial's at a time), closed at the end: a job's trials
        keep their connections (a client made and connected anew costs each trial ~1 ms of
        CPU), and no client's pool grows with the trials alive. Models on other loops keep
        their own."""
        clients = UpstreamClients(self.new_upstream_client)
        token = SHARED_UPSTREAM.set((self, asyncio.get_running_loop(), clients))
        try:
            yield
        finally:
            SHARED_UPSTREAM.reset(token)
            await clients.aclose()

    def tools_texts(self, tools: list[Any]) -> tuple[list[Any], str, str | None]:
        """(a private deep copy, :func:`canonical_json`, compact JSON as sent upstream or None
        when JSON cannot hold it) of a request's tool list. The trials of a job send equal
        lists (~1.5 ms of CPU to make the three anew): the last list's are kept and given
        again for a list with the same ``repr`` (exact: ``1``, ``1.0`` and ``True`` differ, as
        in JSON). The copy is shared: never change it."""
        key = repr(tools)
        with self._lock:
            memo = self._tools_memo
        if memo is not None and memo[0] == key:
            return memo[1], memo[2], memo[3]
        canonical = canonical_json(tools)
        try:
            compact: str | None = json.dumps(
                tools, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            )
        except ValueError:
            compact = None
        snapshot = copy.deepcopy(tools)
        with self._lock:
            self._tools_memo = (key, snapshot, canonical, compact)
        return snapshot, canonical, compact

    # -- leases -------------------------------------------------------------------------------
    def open_trial(
        self,
        endpoint: ModelEndpoint | None,
        *,
        trial_id: str,
        role: str = "agent",
        task_id: str | None = None,
        run_index: int = 0,
        record_path: Path | None = None,
        record_format: Literal["calls", "judge"] = "calls",
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        max_requests: int | None = None,
        cache: ResponseCache | None = None,
        cache_mode: CacheMode | None = None,
        key_model: str | None = None,
        token_capture: bool | None = None,
        clock: WaitClock | None = None,
    ) -> GatewayLease:
        """Register a trial (or a grading phase) and return its lease with a fresh random
        token. ``cache``/``cache_mode`` default to the gateway's. ``token_capture``: None
        (default) records sampled token ids when the endpoint is a vLLM / SGLang server
        (:func:`clawrig.llm.gateway.tokens.capture_server`), False never; "calls" records
        only. ``clock``: the trial's wait clock (its socket requests' waits for a provider's
        place are harness waits). Other arguments: see :class:`GatewayLease`."""
        lease = GatewayLease(
            gateway=self,
            token=f"clawrig-{secrets.token_urlsafe(24)}",
            trial_id=trial_id,
            endpoint=endpoint,
            role=role,
            task_id=task_id,
            run_index=run_index,
            record_path=Path(record_path) if record_path is not None else None,
            record_format=record_format,
            max_cost_usd=max_cost_usd,
            max_tokens=max_tokens,
            max_requests=max_requests,
            cache=cache if cache is not None else self.cache,
            cache_mode=cache_mode or (self.cache_mode if cache is None else "prefer"),
            key_model=key_model if key_model is not None or role != "judge" else JUDGE_KEY_MODEL,
            clock=clock,
        )
        if record_format == "calls" and (token_capture is None or token_capture):
            lease.token_server = capture_server(endpoint)
        if lease.record_path is not None:
            lease.record_path.parent.mkdir(parents=True, exist_ok=True)
            lease.record_path.touch()
        with self._lock:
            self._leases[lease.token] = lease
        return lease

    def close_trial(self, lease: GatewayLease) -> Usage:
        """Revoke the lease's token (later requests get HTTP 401); returns its usage."""
        with self._lock:
            self._leases.pop(lease.token, None)
            client, lease._upstream_client = lease._upstream_client, None
            if client is not None and self._clients is not None:
                self._clients.give(client, lease)  # lent again once its requests ended
        lease.closed = True
        return lease.usage

    def _socket_client(self, lease: GatewayLease) -> httpx.AsyncClient | None:
        """The upstream client of ``lease``'s requests over the sockets (in the server's
        thread): one borrowed for the lease until :meth:`close_trial`."""
        with self._lock:
            if lease._upstream_client is None and self._clients is not None:
                lease._upstream_client = self._clients.take()
            return lease._upstream_client

    async def settle(self, lease: GatewayLease, within_s: float) -> Usage:
        """Wait until none of ``lease``'s upstream requests is in flight (each one's reply
        counted and recorded), at most ``within_s`` seconds, and return its usage then. For a
        lease whose client went away mid-request (a lost Ray node): the provider still answers
        and bills what was sent, so the trial's usage must wait for it. A request still open
        after ``within_s`` is missing from the returned usage (the job's spend,
        :attr:`spent_usd`, counts it whenever it ends)."""
        end = time.monotonic() + within_s
        while lease.in_flight and time.monotonic() < end:
            await asyncio.sleep(0.02)
        return lease.usage

    @asynccontextmanager
    async def trial(
        self, endpoint: ModelEndpoint | None, **kwargs: Any
    ) -> AsyncIterator[GatewayLease]:
        """``async with gw.trial(endpoint, trial_id=...) as lease``: open, then close."""
        lease = self.open_trial(endpoint, **kwargs)
        try:
            yield lease
        finally:
            self.close_trial(lease)

    def _lease_for(self, request: Request, token: str | None) -> GatewayLease | None:
        if token is None:
            auth = request.headers.get("authorization", "")
            if auth.lower().startswith("bearer "):
                token = auth[7:].strip()
            else:
                token = request.headers.get("x-api-key") or request.headers.get("api-key")
        if not token:
            return None
        with self._lock:
            return self._leases.get(token)

    # -- the app ------------------------------------------------------------------------------
    def _build_app(self) -> FastAPI:
        from fastapi import FastAPI

        @asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            clients = self._clients = UpstreamClients(self.new_upstream_client)
            try:
                yield
            finally:
                self._clients = None
                await clients.aclose()

        app = FastAPI(title="clawrig model gateway", lifespan=lifespan)

        @app.get("/healthz")
        async def healthz() -> PlainTextResponse:
            return PlainTextResponse("ok")

        async def models(request: Request, token: str | None = None) -> Response:
            lease = self._lease_for(request, token)
            if lease is None:
                return _error_body(401, UNKNOWN_TOKEN, "auth")
            ids = [lease.endpoint.model_id] if lease.endpoint is not None else []
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "clawrig"} for m in ids]
            return JSONResponse({"object": "list", "data": data})

        async def chat(request: Request, token: str | None = None) -> Response:
            lease = self._lease_for(request, token)
            if lease is None:
                return _error_body(401, UNKNOWN_TOKEN, "auth")
            if lease.role == "judge":  # a grader's judge calls wait for a slot (MAX_IN_FLIGHT)
                if lease._route_slots is None:
                    lease._route_slots = asyncio.Semaphore(MAX_IN_FLIGHT)
                async with lease._route_slots:
                    if lease.closed:  # grading ended while it waited: the token is revoked
                        return _error_body(401, UNKNOWN_TOKEN, "auth")
                    with lease._lock:
                        lease._route_open += 1
                    return await open_chat(request, lease)
            with lease._lock:
                busy = lease._route_open >= MAX_IN_FLIGHT
                if busy:
                    lease._busy_refused += 1
                else:
                    lease._route_open += 1
            if busy:  # the body is never read: the sandbox's program's, a 4xx it sees
                busy_reply = _error_body(
                    429,
                    f"clawrig gateway: trial {lease.trial_id} has {MAX_IN_FLIGHT} model requests "
                    "open already; send the next when one is answered",
                    "too_many_requests",
                )
                busy_reply.headers["retry-after"] = "1"
                return busy_reply
            return await open_chat(request, lease)

        async def open_chat(request: Request, lease: GatewayLease) -> Response:
            """:func:`route_chat` of a request counted in ``lease._route_open``, uncounted
            when it ends."""
            try:
                return await route_chat(request, lease)
            finally:
                with lease._lock:
                    lease._route_open -= 1

        async def route_chat(request: Request, lease: GatewayLease) -> Response:
            data = await _read_request(request, MAX_REQUEST_BYTES)
            if data is None:
                return _error_body(
                    413,
                    f"clawrig gateway: the request body is over {format_bytes(MAX_REQUEST_BYTES)}",
                    "request_too_large",
                )
            try:  # NaN, Infinity and 1e999 are no JSON a provider takes (a 500 here before)
                body = loads_strict(data)
            except (ValueError, RecursionError):
                return _error_body(
                    400, "clawrig gateway: the request body is not JSON", "bad_request"
                )
            if not isinstance(body, dict):
                return _error_body(
                    400, "clawrig gateway: the body must be a JSON object", "bad_request"
                )
            why = _unsendable(data, body)
            if why is not None:
                return _error_body(400, f"clawrig gateway: {why}", "bad_request")
            # a GatewayChatModel's streamed request, over httpx.ASGITransport: the loop's
            loop = request.client is not None and request.client.host == IN_PROCESS_CLIENT
            reply = await self._chat(lease, body, in_process=loop)
            assert isinstance(reply, Response)  # not raw: always a response
            return reply

        app.add_api_route("/v1/models", models, methods=["GET"])
        app.add_api_route("/t/{token}/v1/models", models, methods=["GET"])
        app.add_api_route("/v1/chat/completions", chat, methods=["POST"])
        app.add_api_route("/t/{token}/v1/chat/completions", chat, methods=["POST"])
        return app

    async def chat_in_process(self, token: str, body: dict[str, Any]) -> Response | dict[str, Any]:
        """A chat-completions request from this process (:class:`GatewayChatModel` in
        process): the route's work without HTTP, ``body`` as the JSON object the route would
        have parsed. A plain request answered 200 returns the completion object itself (the
        JSON the route's response would carry, parsed; the same object is recorded: do not
        change it), anything else the route's response (an unknown or closed ``token``: its
        401)."""
        with self._lock:
            lease = self._leases.get(token)
        if lease is None:
            return _error_body(401, UNKNOWN_TOKEN, "auth")
        return await self._chat(lease, body, raw=True)

    def _refusal(self, lease: GatewayLease) -> tuple[str, str] | None:
        """(kind, message) when a cap forbids another request for ``lease``: the trial's own
        caps first, then the job's budget; a trial refused by the job's budget that spent at
        least :attr:`budget_share_usd` itself gets ``budget_share`` (its own doing: it is
        graded), any other ``budget`` (cut short by the job: not scored)."""
        u = lease.usage
        own = self._own_refusal(lease, u)
        if own is not None:
            return own
        if self.budget_usd is not None and self.spent_usd >= self.budget_usd:
            share = self.budget_share_usd
            if share is not None and u.cost_usd >= share:
                return (
                    "budget_share",
                    f"clawrig gateway: the job's budget of ${self.budget_usd:g} is spent "
                    f"(${self.spent_usd:.4f}) and trial {lease.trial_id} spent ${u.cost_usd:.4f} "
                    f"of it, at least its share of ${share:g}; no more model requests "
                    "(--budget-usd)",
                )
            return (
                "budget",
                f"clawrig gateway: the job's budget of ${self.budget_usd:g} is spent "
                f"(${self.spent_usd:.4f}); no more model requests (--budget-usd)",
            )
        return None

    @staticmethod
    def _own_refusal(lease: GatewayLease, u: Usage) -> tuple[str, str] | None:
        """(kind, message) when one of ``lease``'s own caps (cost, tokens, requests) is
        reached."""
        if lease.max_cost_usd is not None and u.cost_usd >= lease.max_cost_usd:
            return (
                "cost_budget",
                f"clawrig gateway: trial {lease.trial_id} reached its cost cap of "
                f"${lease.max_cost_usd:g} (${u.cost_usd:.4f} spent)",
            )
        if lease.max_tokens is not None and u.total_tokens >= lease.max_tokens:
            return (
                "token_budget",
                f"clawrig gateway: trial {lease.trial_id} reached its token cap of "
                f"{lease.max_tokens} ({u.total_tokens} used)",
            )
        if lease.max_requests is not None and lease.requests >= lease.max_requests:
            return (
                "max_requests",
                f"clawrig gateway: trial {lease.trial_id} reached its limit of "
                f"{lease.max_requests} model requests (--max-turns)",
            )
        return None

    async def _chat(
        self,
        lease: GatewayLease,
        body: dict[str, Any],
        *,
        raw: bool = False,
        in_process: bool = False,
    ) -> Response | dict[str, Any]:
        """The answer to one chat-completions request of ``lease`` (caps, cache, upstream,
        record): an HTTP response, or with ``raw`` (an in-process caller) a plain reply's
        completion object itself (what the response's body would hold)."""
        lease.last_request = body
        in_process = in_process or raw
        if in_process:
            lease.in_process = True
        stream = bool(body.get("stream"))
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        tools = body.get("tools")
        texts = lease.tools_json(tools) if raw and isinstance(tools, list) else None
        said = lease.messages_json(body.get("messages"))
        key = request_key(
            lease.cache_model,
            body,
            tools_json=texts and texts[0],
            messages_json=said and said[0],
        )
        started = time.monotonic()
        with self._lock:
            self._seq += 1
            seq = self._seq
        refusal = self._refusal(lease)
        if refusal is not None:
            kind, msg = refusal
            lease._refuse(kind)
            self._record(lease, seq, key, body, status=402, error=msg, started=started)
            # the job's budget spent by this trial itself keeps its kind through a chain of
            # gateways (a Ray node's lease reads it: _chained_refusal)
            kinds = {"budget_share": "budget_share"}
            return _error_body(
                402, msg, kinds.get(kind, "budget_exceeded" if "budget" in kind else kind)
            )
        with lease._lock:
            lease._requests += 1
            n = lease._requests
        cache = lease.cache
        if cache is not None and lease.cache_mode != "off":
            recorded = cache.take_hit(key, lease.scope)
            if recorded is not None:
                hit = recorded.completion
                usage = usage_from_openai(hit.get("usage"), self._prices(lease))
                if recorded.cost_usd is not None:  # what the call cost when it was made
                    usage.cost_usd = recorded.cost_usd
                lease._count(usage)
                self._record(
                    lease,
                    seq,
                    key,
                    body,
                    status=200,
                    response=hit,
                    usage=usage,
                    cached=True,
                    started=started,
                )
                return self._answer(hit, stream, wants_usage, cached=True, raw=raw)
            if lease.cache_mode == "only":
                lease._refuse("replay_miss")
                of_task = f"task {lease.task_id} (run {lease.run_index}), " if lease.task_id else ""
                refused = cache.refused.get(key) if key not in cache else None
                if refused is not None:
                    lease._refuse("replay_refused")
                msg = (
                    f"clawrig gateway: replay: no recorded response for request #{n} of "
                    f"{of_task}trial {lease.trial_id} (key {key[:12]}): "
                    + (
                        f"the recorded job holds it refused by the provider (HTTP {refused}), "
                        "and a replay cannot replay a refusal"
                        if refused is not None
                        else "the run diverged from the recorded job"
                    )
                )
                self._record(lease, seq, key, body, status=404, error=msg, started=started)
                return _error_body(404, msg, "replay_miss")
        if lease.endpoint is None:
            lease._refuse("no_upstream")
            msg = (
                f"clawrig gateway: no model configured for {lease.role} requests of trial "
                f"{lease.trial_id} and no recorded response (set --judge / JUDGE_MODEL)"
            )
            self._record(lease, seq, key, body, status=503, error=msg, started=started)
            return _error_body(503, msg, "no_upstream")
        wire = {
            "tools": texts[1] if texts is not None else None,
            "messages": said[1] if said is not None else None,
        }
        wire_texts = {k: v for k, v in wire.items() if v is not None}
        # a request over the sockets is served in a task of its own, which the harness may
        # cancel once the lease's phase ended (GatewayLease.cut_upstream: its stall probe); an
        # in-process caller's task is the caller's, never cancelled from here
        task = asyncio.current_task() if UPSTREAM_CLIENT.get() is None else None
        with lease._lock:  # in flight until its usage is counted (_record), or it is cancelled
            lease._upstream_open.add(seq)
            if task is not None:
                tasks = lease._upstream_tasks
                for done in [s for s in tasks if s not in lease._upstream_open]:
                    del tasks[done]
                tasks[seq] = (asyncio.get_running_loop(), task)
        try:
            return await self._forward(
                lease, seq, key, body, stream, wants_usage, started, raw, wire_texts, in_process
            )
        except asyncio.CancelledError:
            with lease._lock:
                lease._upstream_open.discard(seq)
            if task is None or not lease.was_cut(seq):
                raise
            task.uncancel()
            return _cut_reply(lease, seq)
        except BaseException:
            with lease._lock:
                lease._upstream_open.discard(seq)
            raise

    @staticmethod
    def _prices(lease: GatewayLease) -> Any:
        from clawrig.llm.pricing import Prices

        return lease.endpoint.prices if lease.endpoint is not None else Prices()

    def _answer(
        self,
        completion: dict[str, Any],
        stream: bool,
        wants_usage: bool,
        cached: bool = False,
        raw: bool = False,
    ) -> Response | dict[str, Any]:
        if raw and not stream:  # an in-process caller reads the object itself
            return completion
        headers = {CACHED_HEADER: "1"} if cached else None
        if not stream:  # the provider's JSON: its lone surrogates (if any) as escapes
            return Response(
                json_text(completion, indent=None), media_type="application/json", headers=headers
            )
        events = sse_from_completion(completion, include_usage=wants_usage)

        async def gen() -> AsyncIterator[bytes]:
            for e in events:
                yield e

        return StreamingResponse(gen(), media_type="text/event-stream", headers=headers)

    def _upstream_failed(
        self,
        lease: GatewayLease,
        seq: int,
        key: str,
        body: dict[str, Any],
        status: int,
        msg: str,
        started: float,
        attempts: int,
        answered: bool = True,
        detail: str | None = None,
        in_process: bool = False,
    ) -> None:
        """An upstream that failed after ``attempts``: the lease's error list, its request
        count and one record (HTTP ``status``, ``msg``). ``answered``: a server answered the
        last attempt with ``status`` (else the gateway's own 502 for a broken connection),
        saying ``detail`` (its own message). The lease's last failure (its status, body and
        message: what the trial judges a 500 by) is this one's when the request is the agent
        loop's (:meth:`GatewayLease.agent_loop_request`)."""
        with lease._lock:
            lease._upstream_errors.append(msg)
            if lease.agent_loop_request(in_process):
                lease._upstream_failure_status = status if answered else None
                lease._upstream_failure_body = body if answered else None
                lease._upstream_failure_detail = detail if answered else None
        lease._count(None, retries=attempts - 1)
        self._record(
            lease, seq, key, body, status=status, error=msg, started=started, retries=attempts - 1
        )

    async def _forward(
        self,
        lease: GatewayLease,
        seq: int,
        key: str,
        body: dict[str, Any],
        stream: bool,
        wants_usage: bool,
        started: float,
        raw: bool = False,
        wire_texts: dict[str, str] | None = None,
        in_process: bool = False,
    ) -> Response | dict[str, Any]:
        """Send ``body`` upstream (retrying), count, record and answer. ``in_process``: the
        request came in process (``raw``, or a streamed one over ``httpx.ASGITransport``):
        the agent loop's, whose failure the lease records (:meth:`_upstream_failed`).
        ``wire_texts``: the body's ``tools`` / ``messages`` as compact JSON made earlier
        (:meth:`GatewayLease.tools_json`, :meth:`GatewayLease.messages_json`). The
        request is in flight (:attr:`GatewayLease.in_flight`) until it is counted and recorded
        (for a relayed stream, when the stream ends) or :meth:`_chat` is cancelled.

        Each attempt takes a place of the upstream's provider's requests in flight
        (:func:`clawrig.llm.client.take_provider_slot`: its ``max_concurrency``, one count with
        the harness's own requests; none when the caller holds one already, as the in-process
        agent does), waiting in turn for it (a harness wait of the lease's ``clock``, which is
        no silence of the provider's: :meth:`RequestWatch.queued`), and holds it until its reply
        is read (a relayed stream: until the response ends); a retry's back-off holds none."""
        ep = lease.endpoint
        client = UPSTREAM_CLIENT.get() or self._socket_client(lease)
        assert ep is not None and client is not None
        out = dict(body)
        out["model"] = ep.model_id
        stream_to_client = False
        for k, v in ep.extra_body.items():
            out.setdefault(k, v)
        server = lease.token_server
        if server is not None:
            out.update(capture_fields(server))
            if server == "sglang" and stream:  # SGLang returns no token ids on streams
                out.pop("stream_options", None)
                out["stream"] = stream = False
                stream_to_client = True
        if stream:
            out["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        headers = {"content-type": "application/json", **ep.headers}
        if ep.api_key is not None:
            headers["authorization"] = f"Bearer {ep.api_key.get_secret_value()}"
        url = f"{ep.base_url.rstrip('/')}/chat/completions"
        content = None
        made = {k: v for k, v in (wire_texts or {}).items() if out.get(k) is body.get(k)}
        if made:
            content = _wire_body(out, made)
        attempts = 0
        if lease.role != "agent" or body.get("stream"):
            # watched for a stall (ended by the request's record or a transport error); not an
            # agent program's non-streamed request: how long it stays silent is its choice
            lease.watch.begin(seq)

        hold = Held()  # the place of the attempt whose reply is being read
        read_body: bytes | None = None  # a plain 200 reply's body, read by its attempt
        body_read = False

        async def attempt() -> httpx.Response:
            nonlocal attempts, hold, read_body, body_read
            attempts += 1
            with lease.watch.queued(seq):  # the harness's wait, not the provider's silence
                held = await take_provider_slot(ep.provider, ep.max_concurrency, lease.clock)
            if lease.closed:  # its trial ended while it waited: sent now, nobody would read it
                held.release()
                raise _LeaseClosed
            try:
                if content is not None:
                    req = client.build_request("POST", _url(url), content=content, headers=headers)
                else:
                    req = client.build_request("POST", _url(url), json=out, headers=headers)
                resp = await send(client, req)
                if retryable_status(resp.status_code):
                    data = await _read_reply(resp, MAX_ERROR_BYTES) or b""
                    raise _Retryable(resp.status_code, resp.headers, data)
                if (
                    resp.status_code == 200
                    and not stream
                    and "text/event-stream" not in resp.headers.get("content-type", "")
                ):
                    # a plain reply is read whole within its attempt: one cut off mid-body
                    # (a dropped connection) is retried, as nothing reached the client yet
                    read_body = await _read_reply(resp, MAX_REPLY_BYTES)
                    body_read = True
            except BaseException:
                held.release()
                raise
            hold = held
            return resp

        policy = lease.retry or self.retry

        def retrying() -> AsyncRetrying:
            return AsyncRetrying(
                stop=stop_after_attempt(policy.attempts) | StopUnreached(policy, ep),
                wait=RetryWait(policy, _retry_after),
                retry=retry_if_exception(_retryable),
                reraise=True,
                sleep=lambda s: provider_backoff(s, lease.clock),  # the trial's wait
            )

        where = f"{ep.provider} ({ep.base_url})"
        try:
            resp: httpx.Response = await with_retries(retrying, attempt)
        except _LeaseClosed:
            with lease._lock:
                lease._upstream_open.discard(seq)
            lease.watch.end(seq, answered=False)
            return _error_body(401, UNKNOWN_TOKEN, "auth")
        except _Retryable as exc:
            said = _upstream_message(exc.body)
            msg = (
                f"{ep.name}: HTTP {exc.status} from {where} after {attempts} attempt"
                f"{'s' if attempts != 1 else ''}: {said}"
            )
            self._upstream_failed(
                lease,
                seq,
                key,
                body,
                exc.status,
                msg,
                started,
                attempts,
                detail=said,
                in_process=in_process,
            )
            return Response(
                exc.body,
                status_code=exc.status,
                media_type=exc.headers.get("content-type", "application/json"),
                headers=_failure_headers(attempts, exc.headers),
            )
        except httpx.TransportError as exc:
            lease.watch.end(seq, answered=False)
            connect = is_connect_failure(exc)  # the request never reached a server
            what = "could not connect to" if connect else "no reply from"
            cause = f"{type(exc).__name__}: {_one_line(str(exc))}"
            msg = (
                f"{ep.name}: {what} {where} after {attempts} attempt"
                f"{'s' if attempts != 1 else ''}: {cause}"
            )
            self._upstream_failed(
                lease,
                seq,
                key,
                body,
                502,
                msg,
                started,
                attempts,
                answered=False,
                in_process=in_process,
            )
            if connect:
                mark_unreached(ep, msg)
            # the 502 is the gateway's own answer, no server's: the header says what happened
            # upstream, so the client names it instead of the status (clawrig.llm.client)
            failed = _error_body(
                502,
                f"clawrig gateway: {what} the upstream: {cause}",
                "upstream_unreachable" if connect else "upstream_no_reply",
            )
            failed.headers.update(_failure_headers(attempts))
            failed.headers[UPSTREAM_FAILURE_HEADER] = "connect" if connect else "no_reply"
            return failed
        try:
            retries = attempts - 1
            ctype = resp.headers.get("content-type", "")
            cached = resp.headers.get(CACHED_HEADER) == "1"  # served by a gateway's cache upstream
            if resp.status_code != 200:
                data = await _read_reply(resp, MAX_ERROR_BYTES) or b""
                said = _upstream_message(data)
                msg = f"{ep.name}: HTTP {resp.status_code} from {where}: {said}"
                chained = _chained_refusal(data) if resp.status_code == 402 else None
                if chained == "budget_exceeded":
                    lease._refuse("budget")  # a gateway upstream (the Ray driver's): the job's cap
                elif chained == "budget_share":
                    lease._refuse("budget_share")  # ... which this trial spent its share of
                with lease._lock:
                    lease._upstream_refusals.append(resp.status_code)
                    lease._last_refusal = said
                lease._count(None, retries=retries)
                self._record(
                    lease,
                    seq,
                    key,
                    body,
                    status=resp.status_code,
                    error=msg,
                    started=started,
                    retries=retries,
                )
                return Response(
                    data, status_code=resp.status_code, media_type=ctype or "application/json"
                )
            if "text/event-stream" not in ctype:
                reply = read_body if body_read else await _read_reply(resp, MAX_REPLY_BYTES)
                try:
                    if reply is None:
                        raise ValueError(f"over {format_bytes(MAX_REPLY_BYTES)}")
                    completion = json.loads(reply)
                    if not isinstance(completion, dict):
                        raise ValueError("not a JSON object")
                except (ValueError, RecursionError) as exc:
                    why = "not JSON" if isinstance(exc, json.JSONDecodeError) else str(exc)
                    msg = f"{ep.name}: unusable reply from {where}: {why}"
                    self._record(
                        lease,
                        seq,
                        key,
                        body,
                        status=502,
                        error=msg,
                        started=started,
                        retries=retries,
                    )
                    return _error_body(502, f"clawrig gateway: {msg}", "bad_upstream_reply")
                tokens = None
                if server is not None:
                    tokens = tokens_from_completion(server, completion)
                    strip_capture_fields(completion, body)
                self._finish(
                    lease,
                    seq,
                    key,
                    body,
                    completion,
                    started,
                    retries,
                    tokens=tokens,
                    cached=cached,
                )
                return self._answer(completion, stream or stream_to_client, wants_usage, raw=raw)
            relayed = _Relayed(
                self._relay(
                    lease, seq, key, body, resp, wants_usage, started, retries, cached, in_process
                ),
                hold.release,
                functools.partial(lease.was_cut, seq),
            )
            hold = Held()  # the response gives it back
            return relayed
        finally:
            hold.release()

    async def _relay(
        self,
        lease: GatewayLease,
        seq: int,
        key: str,
        body: dict[str, Any],
        resp: httpx.Response,
        wants_usage: bool,
        started: float,
        retries: int,
        cached: bool = False,
        in_process: bool = False,
    ) -> AsyncIterator[bytes]:
        """Pass an upstream SSE stream through line by line, keeping the parsed chunks
        (``in_process``: :meth:`_forward`'s)."""
        chunks: list[dict[str, Any]] = []
        error: str | None = None
        done = False
        tokens = StreamTokens() if lease.token_server is not None else None
        seen = 0
        try:
            skip_blank = False
            async for line in resp.aiter_lines():
                seen += len(line) + 1
                if seen > MAX_REPLY_BYTES:  # the provider's fault: its stream ends here
                    error = f"upstream stream over {format_bytes(MAX_REPLY_BYTES)}"
                    break
                if line.startswith("data:"):
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        done = True
                    else:
                        try:
                            obj = json.loads(payload)
                        except ValueError:
                            obj = None
                        if isinstance(obj, dict):
                            chunks.append(obj)
                            if obj.get("choices"):
                                lease.watch.progress(seq)  # answering: not a stall
                            if tokens is not None:
                                tokens.feed(obj)
                            if not obj.get("choices") and obj.get("usage") and not wants_usage:
                                skip_blank = True
                                continue
                elif line == "" and skip_blank:
                    skip_blank = False
                    continue
                skip_blank = False
                # the wait for the client to take the line is the client's (a reader that
                # stopped reading holds it): not the provider's silence
                lease.watch.pause(seq)
                yield (line + "\n").encode("utf-8")
                lease.watch.resume(seq)
        except httpx.TransportError as exc:
            error = f"upstream stream broke: {type(exc).__name__}: {_one_line(str(exc))}"
            with lease._lock:
                lease._upstream_errors.append(f"{lease.model_name}: {error}")
                if lease.agent_loop_request(in_process):
                    lease._upstream_failure_status = lease._upstream_failure_body = None
                    lease._upstream_failure_detail = None
        finally:
            await resp.aclose()
            completion = completion_from_chunks(chunks)
            if error is None and not done and lease.was_cut(seq):
                error = "clawrig gateway: the stream was cut: its phase ended"
            if error is None and not done and not chunks:
                error = "upstream stream ended without any chunk"
            self._finish(
                lease,
                seq,
                key,
                body,
                completion,
                started,
                retries,
                error=error,
                tokens=tokens.result() if tokens is not None else None,
                cached=cached,
            )

    def _finish(
        self,
        lease: GatewayLease,
        seq: int,
        key: str,
        body: dict[str, Any],
        completion: dict[str, Any],
        started: float,
        retries: int,
        *,
        error: str | None = None,
        tokens: dict[str, Any] | None = None,
        cached: bool = False,
    ) -> None:
        """Count and record an upstream's 200 reply (``cached``: the upstream, a gateway,
        served it from its cache: recorded as cached, no spend)."""
        usage = usage_from_openai(completion.get("usage"), self._prices(lease))
        lease._count(usage, retries=retries)
        if error is None and lease.endpoint is not None:
            mark_answered(lease.endpoint)  # evidence for a later refusal (runner/trial.py)
        if not cached:
            with self._lock:
                self._spent += usage.cost_usd
            if self._tally is not None:
                self._tally.add(usage.cost_usd)
        if completion.get("error") and error is None:
            error = (
                f"{lease.model_name}: error in reply: {_one_line(json.dumps(completion['error']))}"
            )
        self._record(
            lease,
            seq,
            key,
            body,
            status=200,
            response=completion,
            usage=usage,
            cached=cached,
            error=error,
            started=started,
            retries=retries,
            tokens=tokens,
        )
        if error is None and lease.cache is not None and lease.cache_mode == "prefer":
            persist = self._judge_record(
                lease, key, body, completion, usage, False, None, time.monotonic() - started
            )
            lease.cache.add(key, completion, lease.scope, persist=persist)

    def count_probe(
        self,
        lease: GatewayLease,
        answer: ChatResponse,
        request: dict[str, Any] | None = None,
    ) -> None:
        """Count a request the harness sent ``lease``'s upstream itself for the lease's trial
        (its probe of the provider after a refusal: ``clawrig.runner.trial``): ``answer``'s
        usage (its cost priced) on the lease's usage (the trial's) and the job's spend
        (``--budget-usd``). With ``request`` (the probe's chat-completions body) it is
        recorded too, in a calls record file (model_calls.jsonl), as a whole request with
        ``role`` ``"probe"`` and a chat.completion built from ``answer``: every call the trial
        spent on is in its file (helper-153: usage.json counted one more than it held), and
        readers of the agent's calls take role ``agent`` only. Never cached."""
        usage = answer.usage
        lease._count(usage)
        with self._lock:
            self._spent += usage.cost_usd
        if self._tally is not None:
            self._tally.add(usage.cost_usd)
        if request is None:
            return
        message: dict[str, Any] = {"role": "assistant", "content": answer.content}
        completion = {
            "id": answer.response_id,
            "object": "chat.completion",
            "model": answer.model,
            "choices": [{"index": 0, "message": message, "finish_reason": answer.finish_reason}],
        }
        self._record_probe(
            lease,
            request,
            status=200,
            response=completion,
            usage=usage,
            started=time.monotonic() - answer.latency_s,
            retries=usage.retries,
        )

    def record_unanswered_probe(
        self, lease: GatewayLease, request: dict[str, Any], status: int | None, message: str
    ) -> None:
        """Record the harness's probe (:meth:`count_probe`) that the provider refused, or that
        failed after its retries, with HTTP ``status`` (None: no server answered, recorded as
        0) and ``message``, in a calls record file, ``role`` ``"probe"``, no usage (neither is
        counted, as an agent's is not): the file holds every request the harness sent for the
        trial (helper-155: only answered probes were there; helper-157: nor failed ones)."""
        self._record_probe(
            lease, request, status=status or 0, error=message, started=time.monotonic()
        )

    def _record_probe(self, lease: GatewayLease, request: dict[str, Any], **fields: Any) -> None:
        """One record of the harness's probe ``request`` (``role`` probe, the request whole)
        in ``lease``'s calls record file, if it has one; ``fields``: :meth:`_record`'s."""
        with self._lock:
            self._seq += 1
            seq = self._seq
        if lease.record_path is None or lease.record_format != "calls":
            return
        key = request_key(lease.cache_model, request)
        self._record(lease, seq, key, request, role="probe", **fields)

    # -- records ------------------------------------------------------------------------------
    def _record(
        self,
        lease: GatewayLease,
        seq: int,
        key: str,
        body: dict[str, Any],
        *,
        status: int,
        response: dict[str, Any] | None = None,
        usage: Usage | None = None,
        cached: bool = False,
        error: str | None = None,
        started: float,
        retries: int = 0,
        tokens: dict[str, Any] | None = None,
        role: str | None = None,
    ) -> None:
        """Append one line to the lease's record file. ``role``: the record's when not the
        lease's (a harness probe's, ``probe``: its request whole, no base for the next one).

        "calls" shape (:data:`RECORD_FILE`): {seq, ts (Unix s), trial_id, task_id, run_index,
        role, model (endpoint name), key, stream, request, base, status (HTTP), response (a
        chat.completion object; streams assembled) | null, usage (clawrig Usage) | null,
        cached, error | null, latency_s, retries, session, token_capture}. ``session`` (only
        for a sub-agent's call, :data:`clawrig.spec.llm.AGENT_SESSION`): its session key.
        ``token_capture`` (only
        when the lease's upstream is a token server, :mod:`clawrig.llm.gateway.tokens`):
        {prompt_token_ids [int] | null, completion_token_ids [int] | null (null: not in the
        reply), completion_logprobs [float] | null} | null (null: the upstream returned no
        tokens). ``key`` is :func:`request_key`
        of the full request. To keep the file linear in the conversation's length,
        ``request`` holds only what changed since the lease's previous recorded request when
        ``base`` is set:
        ``base = {"seq": s, "messages": k}`` means the full request is the one recorded at
        ``seq`` s, with the fields given here replacing its fields and ``messages`` = its first
        k messages + the messages given here (:func:`read_records` rebuilds full requests).
        "judge" shape (judge_chat.jsonl, always whole requests): see :meth:`_judge_record`.
        """
        lease.watch.end(seq, answered=True)  # a reply (or a refusal) came
        with lease._lock:  # counted (usage before the record): no longer in flight
            lease._upstream_open.discard(seq)
        path = lease.record_path
        if path is None:
            return
        latency = round(time.monotonic() - started, 6)
        with lease._lock:
            if lease.record_format == "judge":
                rec = self._judge_record(lease, key, body, response, usage, cached, error, latency)
            else:
                request, base = body, None
                if role is None:  # the lease's own: a delta of its previous one
                    request, base = _delta(lease._last_body, lease._last_seq, body)
                    lease._last_body, lease._last_seq = body, seq
                rec = {
                    "seq": seq,
                    "ts": time.time(),
                    "trial_id": lease.trial_id,
                    "task_id": lease.task_id,
                    "run_index": lease.run_index,
                    "role": role or lease.role,
                    "model": lease.model_name,
                    "key": key,
                    "stream": bool(body.get("stream")),
                    "request": request,
                    "base": base,
                    "status": status,
                    "response": response,
                    "usage": usage.model_dump() if usage is not None else None,
                    "cached": cached,
                    "error": error,
                    "latency_s": latency,
                    "retries": retries,
                }
                if role is None and (session := AGENT_SESSION.get()) is not None:
                    rec["session"] = session  # a sub-agent's call (native agent)
                if lease.token_server is not None:
                    rec["token_capture"] = tokens
            data = (json_text(rec, indent=None) + "\n").encode("utf-8")
            if lease._recorded_bytes + len(data) > MAX_RECORD_BYTES:
                data = self._omit_bodies(lease, rec, body).encode("utf-8")
            lease._recorded_bytes += len(data)
            with path.open("ab") as fh:
                fh.write(data)

    @staticmethod
    def _omit_bodies(lease: GatewayLease, rec: dict[str, Any], body: dict[str, Any]) -> str:
        """``rec``'s line with its ``request`` ({}) and ``response`` (null) left out (once the
        lease's file reached :data:`MAX_RECORD_BYTES`): ``omitted`` = {request, response:
        {bytes, sha256} of the JSON text (``json.dumps(x, ensure_ascii=False)``) of the whole
        request ("calls": ``body`` as received; "judge": the record's request) and of the
        response}; the next record holds its request whole (``base`` null). The usage, status
        and key stay: the accounting is exact; replay misses these requests."""
        omitted = {}
        whole = {"request": body if lease.record_format == "calls" else rec.get("request")}
        for name in ("request", "response"):
            value = whole.get(name, rec.get(name))
            if value is None:
                continue
            data = json_text(value, indent=None).encode("utf-8")
            omitted[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        if "request" in rec:
            rec["request"] = {}
        if "base" in rec:
            rec["base"] = None
        rec["response"] = None
        rec["omitted"] = omitted
        if lease.record_format == "calls":
            lease._last_body, lease._last_seq = None, None  # no delta against an omitted one
        return json_text(rec, indent=None) + "\n"

    @staticmethod
    def _judge_record(
        lease: GatewayLease,
        key: str,
        body: dict[str, Any],
        completion: dict[str, Any] | None,
        usage: Usage | None,
        cached: bool,
        error: str | None,
        latency: float,
    ) -> dict[str, Any]:
        """judge_chat.jsonl shape (that of :mod:`clawrig.grading.judge`, so either reader
        takes both): {ts, kind: "grader", model, key, request (the body without model and
        stream fields), response {content, reasoning, finish_reason, model, response_id,
        tool_calls, usage, latency_s, completion} | null, cached, valid, error}."""
        response = None
        if completion is not None:
            choice = (completion.get("choices") or [{}])[0]
            msg = choice.get("message") or {}
            response = {
                "content": msg.get("content"),
                "reasoning": msg.get("reasoning_content") or msg.get("reasoning"),
                "finish_reason": choice.get("finish_reason"),
                "model": completion.get("model"),
                "response_id": completion.get("id"),
                "tool_calls": msg.get("tool_calls"),
                "usage": usage.model_dump() if usage is not None else None,
                "latency_s": latency,
                "completion": completion,
            }
        return {
            "ts": time.time(),
            "kind": "grader",
            "model": lease.model_name,
            "key": key,
            "request": {k: v for k, v in body.items() if k not in KEY_EXCLUDED},
            "response": response,
            "cached": cached,
            "valid": response is not None and error is None,
            "error": error,
        }


_CURRENT: contextvars.ContextVar[Gateway | None] = contextvars.ContextVar(
    "clawrig_gateway", default=None
)


def current_gateway() -> Gateway | None:
    """The job's gateway set by :func:`use_gateway` in this context (asyncio tasks inherit
    it), or None."""
    return _CURRENT.get()


@contextlib.contextmanager
def use_gateway(gateway: Gateway | None) -> Any:
    """``with use_gateway(gw): asyncio.run(run_job(...))``: agents that need the gateway
    (``--agent openclaw``) use ``gw`` for the trials started inside."""
    token = _CURRENT.set(gateway)
    try:
        yield gateway
    finally:
        _CURRENT.reset(token)


def replay_gateway(
    trial_or_job_dir: Path | str,
    *,
    extra: Iterable[Path | str] = (),
    live: bool = False,
    what: str = "--replay",
    allow_empty: bool = False,
    **kwargs: Any,
) -> Gateway:
    """An (unstarted) gateway that answers every request, the agent's or a judge's (the judge
    model's lease and the graders' judge proxy), from the calls recorded in a finished job
    folder or one trial folder (``--replay JOB_DIR``; ``clawrig grade TRIAL_DIR``), plus the
    record files ``extra`` (``--judge-cache``). One key for all of them: :func:`request_key`.

    ``live``: False refuses a request the records lack (HTTP 404, one line: the run diverged);
    True forwards it to the lease's endpoint (a live ``--judge``) without adding it to the
    records. ``what`` names the option in errors; ``kwargs`` go to :class:`Gateway`. Raises
    UserError when the folder does not exist or holds no recorded call (unless
    ``allow_empty``: a re-grade of a trial that called no model, where any request is a miss).

    Re-grading: ``gw = replay_gateway(trial_dir, what="TRIAL_DIR").start()``, then
    ``TrialServices(gateway=gw, judge=live_judge or replay_model(recorded_models(trial_dir)
    ["judge"]))``; the trial's grading phase reaches the judge through the gateway.
    """
    cache = ResponseCache.from_job(
        trial_or_job_dir, extra=extra, what=what, allow_empty=allow_empty
    )
    return Gateway(cache=cache, cache_mode="prefer" if live else "only", **kwargs)


def replay_model(name: str, *, prices: Any = None) -> OpenAIChatModel:
    """A chat model for ``name`` that is only ever answered by a replay gateway (its endpoint
    is :func:`placeholder_endpoint`: no base URL or key needed)."""
    return OpenAIChatModel(placeholder_endpoint(name, prices=prices))
