"""A trial's access to the gateway: its token, upstream, caps, counters and chat model."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
from pydantic import SecretStr

from clawrig.errors import BudgetExceeded, ModelRequestError
from clawrig.llm.client import (
    OpenAIChatModel,
    RetryPolicy,
    StatusReply,
    _BodyError,
    completion_fields,
    sdk_httpx,
)
from clawrig.llm.gateway.forwarder import FORWARDER_PORT
from clawrig.llm.gateway.replay import CacheMode, ResponseCache, canonical_json
from clawrig.llm.gateway.tokens import TokenServer
from clawrig.llm.providers import ModelEndpoint
from clawrig.llm.stalls import RequestWatch
from clawrig.spec.llm import ChatResponse
from clawrig.spec.trial import StopReason, Usage
from clawrig.waits import WaitClock

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from clawrig.llm.gateway.server import Gateway


IN_PROCESS_CLIENT = "clawrig-in-process"
"""The ASGI client host of a request a :class:`GatewayChatModel` sends the gateway's app in
process (streamed: over ``httpx.ASGITransport``, no socket): the agent loop's, as a request
handed over as a dict is; a socket's peer is an address, which no program can make this."""


@dataclass
class GatewayLease:
    """One trial's (or one grading phase's) access to the gateway.

    ``token``: the placeholder credential the sandbox sees; ``endpoint``: the upstream (None:
    answer from the cache only); ``role``: agent | judge; ``task_id``/``run_index``: the replay
    scope; ``record_path``: the JSONL file every request is appended to, in ``record_format``
    ("calls": :data:`RECORD_FILE` lines, "judge": judge_chat.jsonl lines); caps (None = no
    cap): ``max_cost_usd`` (USD), ``max_tokens`` (tokens), ``max_requests`` (requests);
    ``cache`` / ``cache_mode``: see :data:`CacheMode`; ``key_model``: the model name used in
    cache keys (default: the endpoint's name; judge proxies use :data:`JUDGE_KEY_MODEL`, so a
    recorded judge reply matches whichever judge endpoint is configured, or none); ``retry``:
    upstream retries for this lease (default: the gateway's; a client that retries on its own,
    like OpenClaw, gets a shorter one so retries do not multiply); ``token_server``: ``vllm`` /
    ``sglang`` when the gateway asks the upstream for sampled token ids and records them
    (:mod:`clawrig.llm.gateway.tokens`; set by :meth:`Gateway.open_trial`); ``clock``: the
    trial's :class:`clawrig.waits.WaitClock`, charged with the time its requests over the
    gateway's sockets wait for a place of the provider's ``max_concurrency`` (None: not
    charged).

    Counters (read them with the properties; they are updated from the gateway's thread): ``usage``
    (a :class:`Usage` copy), ``requests``, ``refusals`` (why requests were refused: ``budget``,
    ``budget_share``, ``cost_budget``, ``token_budget``, ``max_requests``, ``replay_miss``
    (and ``replay_refused`` when the records hold that request refused), ``no_upstream``),
    ``upstream_errors`` (one line per upstream failure after retries), ``upstream_refusals``
    (the 4xx statuses the upstream refused requests with), ``last_refusal`` (the upstream's own
    message with the latest of them); ``watch``: the lease's upstream
    requests in flight (a stall: :mod:`clawrig.llm.stalls`; an agent lease watches streamed
    requests only).
    """

    gateway: Gateway
    token: str
    trial_id: str
    endpoint: ModelEndpoint | None
    role: str = "agent"
    task_id: str | None = None
    run_index: int = 0
    record_path: Path | None = None
    record_format: Literal["calls", "judge"] = "calls"
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    max_requests: int | None = None
    cache: ResponseCache | None = None
    cache_mode: CacheMode = "off"
    key_model: str | None = None
    retry: RetryPolicy | None = None
    token_server: TokenServer | None = None
    clock: WaitClock | None = None
    closed: bool = False
    _usage: Usage = field(default_factory=Usage)
    _requests: int = 0
    _refusals: list[str] = field(default_factory=list)
    _upstream_errors: list[str] = field(default_factory=list)
    _upstream_failure_status: int | None = None
    _upstream_failure_body: dict[str, Any] | None = None
    _upstream_failure_detail: str | None = None
    in_process: bool = False
    """True once the lease has had a request handed to the gateway in process (the native
    agent's loop: :meth:`Gateway.chat_in_process`); its HTTP requests are then its programs'."""
    _upstream_refusals: list[int] = field(default_factory=list)
    _last_refusal: str | None = None
    _recorded_bytes: int = 0
    """Bytes written to ``record_path`` by this lease (``MAX_RECORD_BYTES``)."""
    _route_open: int = 0
    """This lease's requests open in the gateway's HTTP route (at most ``MAX_IN_FLIGHT``)."""
    _busy_refused: int = 0
    """Requests answered 429 because ``MAX_IN_FLIGHT`` were open (:attr:`busy_refused`)."""
    _route_slots: asyncio.Semaphore | None = None
    """A judge lease's ``MAX_IN_FLIGHT`` slots: its requests beyond them wait (made on the
    gateway's event loop at its first request)."""
    _upstream_open: set[int] = field(default_factory=set)
    """Sequence numbers of this lease's requests sent upstream and not yet recorded."""
    _upstream_tasks: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = field(
        default_factory=dict
    )
    """The tasks (and their loops) serving this lease's requests over the gateway's sockets,
    by sequence number, while they may be in :attr:`_upstream_open` (:meth:`cut_upstream`)."""
    _cut: set[int] = field(default_factory=set)
    """Sequence numbers of requests :meth:`cut_upstream` cancelled."""
    watch: RequestWatch = field(default_factory=RequestWatch)
    """The upstream requests of this lease in flight (:mod:`clawrig.llm.stalls`)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    last_request: dict[str, Any] | None = None
    """The body of the lease's last chat-completions request as it reached the gateway (None
    before one): what a refusal of it was sent with (``clawrig.runner.trial``'s probe asks
    the same with a plain conversation). Do not change it."""
    _last_body: dict[str, Any] | None = None
    _last_seq: int | None = None
    _tools_json: tuple[Any, Any, str, str | None] | None = None
    _upstream_client: httpx.AsyncClient | None = None
    """The client borrowed for this lease's requests over the gateway's sockets (from the
    server's :class:`UpstreamClients`; given back at :meth:`Gateway.close_trial`)."""
    _messages_texts: tuple[list[dict[str, Any]], list[str], list[str]] | None = None
    """The last request's messages (copies of the dicts) and each one's canonical and
    compact JSON (:meth:`messages_json`)."""

    @property
    def model_name(self) -> str:
        """The endpoint's name (``provider/model``), or "" without an endpoint."""
        return self.endpoint.name if self.endpoint is not None else ""

    @property
    def cache_model(self) -> str:
        """The model name in this lease's cache keys (``key_model``, else the endpoint's
        name)."""
        return self.key_model if self.key_model is not None else self.model_name

    @property
    def scope(self) -> str | None:
        return f"{self.task_id}#{self.run_index}" if self.task_id is not None else None

    @property
    def usage(self) -> Usage:
        """Tokens, USD, requests and retries counted for this lease so far (a copy)."""
        with self._lock:
            return self._usage.model_copy()

    @property
    def requests(self) -> int:
        with self._lock:
            return self._requests

    @property
    def in_flight(self) -> int:
        """Requests of this lease sent upstream whose reply is not yet counted and recorded."""
        with self._lock:
            return len(self._upstream_open)

    def cut_upstream(self) -> int:
        """Cancel this lease's requests in flight upstream over the gateway's sockets (each
        answered with an error, its place of the provider's ``max_concurrency`` given back):
        the harness's stall probe after the lease's phase ended, whose place the trial's own
        silent requests would hold otherwise (:func:`clawrig.llm.client.provider_answers`:
        an agent's program, run by a grader, kept the only place of the judge's provider with a
        slow request, so the probe was never sent and its trial was voided as the judge's
        stall). Returns how many were cancelled (told to their loops; thread-safe)."""
        with self._lock:
            tasks = {s: t for s, t in self._upstream_tasks.items() if s in self._upstream_open}
            self._upstream_tasks = tasks
        for seq, (loop, task) in tasks.items():
            with contextlib.suppress(RuntimeError):  # its loop closed: nothing in flight there
                loop.call_soon_threadsafe(self._cut_one, seq, task)
        return len(tasks)

    def _cut_one(self, seq: int, task: asyncio.Task[Any]) -> None:
        """On the request's own loop: cancel it if it is still in flight upstream."""
        with self._lock:
            if seq not in self._upstream_open or task.done():
                return
            self._cut.add(seq)
        task.cancel()

    def was_cut(self, seq: int) -> bool:
        """Whether request ``seq`` was cancelled by :meth:`cut_upstream`."""
        with self._lock:
            return seq in self._cut

    @property
    def busy_refused(self) -> int:
        """Requests over the sockets refused (429) because this lease had ``MAX_IN_FLIGHT``
        (:mod:`clawrig.llm.gateway.server`) requests open already."""
        with self._lock:
            return self._busy_refused

    @property
    def refusals(self) -> list[str]:
        with self._lock:
            return list(self._refusals)

    @property
    def upstream_errors(self) -> list[str]:
        with self._lock:
            return list(self._upstream_errors)

    @property
    def upstream_failure_status(self) -> int | None:
        """The HTTP status (a 5xx, or a 429) a server answered the last of
        :attr:`upstream_errors` with after the retries; None when no server answered it (a
        connection or stream that broke, a timeout) or there is none."""
        with self._lock:
            return self._upstream_failure_status

    def agent_loop_request(self, in_process: bool) -> bool:
        """True when a request (``in_process``: handed to the gateway in process, as a dict
        or streamed over ``httpx.ASGITransport`` (:data:`IN_PROCESS_CLIENT`), else over
        HTTP) is taken for the agent loop's own, whose failures the trial judges (the last
        failure's status, body and message): an in-process one, or any while the lease has
        had none in process (OpenClaw's loop and its programs both use HTTP and the lease's
        key: not told apart). A program of the native agent's (HTTP, with the task's keys)
        failing after the loop's request no longer replaces what the loop's failed with
        (helper-160: a dropped connection of its made the loop's repeatable 500 an outage, a
        free abstention)."""
        return in_process or not self.in_process

    @property
    def upstream_failure_detail(self) -> str | None:
        """The server's own message in its reply with :attr:`upstream_failure_status` (its
        error body's message, else the body's text, one line); None when there is none."""
        with self._lock:
            return self._upstream_failure_detail

    @property
    def upstream_failure_body(self) -> dict[str, Any] | None:
        """The request body (as received) a server failed with :attr:`upstream_failure_status`
        after the retries; None when there is none."""
        with self._lock:
            return self._upstream_failure_body

    @property
    def upstream_refusals(self) -> list[int]:
        """HTTP statuses (4xx) with which the upstream refused requests of this lease."""
        with self._lock:
            return list(self._upstream_refusals)

    @property
    def last_refusal(self) -> str | None:
        """The upstream's own message (one line) with its latest refusal of this lease's
        requests (:attr:`upstream_refusals`), or None."""
        with self._lock:
            return self._last_refusal

    @property
    def host_base_url(self) -> str:
        """``http://127.0.0.1:<port>/t/<token>/v1``: the gateway for host-side clients."""
        return f"{self.gateway.host_url}/t/{self.token}/v1"

    @staticmethod
    def sandbox_base_url(port: int = FORWARDER_PORT) -> str:
        """``http://127.0.0.1:<port>/v1``: the gateway through a sandbox's forwarder (the
        lease's token goes in the Authorization header, as the API key)."""
        return f"http://127.0.0.1:{port}/v1"

    def chat_model(
        self,
        *,
        retry: RetryPolicy | None = None,
        stream: bool = False,
        timeout_s: float | None = None,
        in_process: bool = True,
    ) -> GatewayChatModel:
        """An :class:`OpenAIChatModel` on this lease (host side). The gateway does the upstream
        retries, so by default the client makes one attempt per call; ``in_process``: see
        :class:`GatewayChatModel`."""
        return GatewayChatModel(
            self, retry=retry, stream=stream, timeout_s=timeout_s, in_process=in_process
        )

    def tools_json(self, tools: list[Any]) -> tuple[str, str | None]:
        """``tools`` (a request's tool list) as (:func:`canonical_json`, compact JSON as sent
        upstream; None when JSON cannot hold it, NaN say). The agent in this process sends the
        same list object with each request: made once for it, and again when the list is
        another or was changed since (compared with a copy); a list equal to the one another
        trial sent gets that trial's texts (:meth:`Gateway.tools_texts`)."""
        memo = self._tools_json
        if memo is not None and memo[0] is tools and memo[1] == tools:
            return memo[2], memo[3]
        snapshot, canonical, compact = self.gateway.tools_texts(tools)
        self._tools_json = (tools, snapshot, canonical, compact)
        return canonical, compact

    def messages_json(self, messages: Any) -> tuple[str, str | None] | None:
        """``messages`` (a request's message list) as (:func:`canonical_json`, compact JSON as
        sent upstream; None when JSON cannot hold it, NaN say), or None when ``messages`` is
        not a list of dicts (or JSON cannot hold it at all). Each message's two texts are kept
        for the lease's next request, whose list is this one with messages added: a message
        whose keys (in order) and values are the very objects of the message at its place in
        the last list gets its kept texts (in process, a message's values stay the agent's own
        objects: the gateway's snapshot copies only the dicts), so a trial's requests encode
        each message once instead of the whole conversation per request (~1.3 ms of CPU a
        request with a 100 KB conversation). As with the record's delta, a message the
        caller changes in place after sending it is not seen as changed."""
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return None
        old, canon, wire = self._messages_texts or ([], [], [])
        k = 0
        for a, b in zip(old, messages, strict=False):
            if len(a) != len(b) or any(
                ka is not kb or va is not vb
                for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
            ):
                break
            k += 1
        canon, wire = canon[:k], wire[:k]
        try:
            for m in messages[k:]:
                canon.append(canonical_json(m))
                wire.append(_compact_json(m))
        except (TypeError, ValueError, RecursionError):
            self._messages_texts = None
            return None
        self._messages_texts = ([dict(m) for m in messages], canon, wire)
        compact = None if _NO_JSON in wire else f"[{','.join(wire)}]"
        return f"[{', '.join(canon)}]", compact

    def _count(self, usage: Usage | None, retries: int = 0) -> None:
        with self._lock:
            if usage is not None:
                self._usage = self._usage.add(usage)
            self._usage.retries += retries

    def _refuse(self, why: str) -> None:
        with self._lock:
            self._refusals.append(why)


_NO_JSON = "\x00"
"""A message's compact text when JSON cannot hold it (NaN, say): its list has none."""


def _compact_json(value: Any) -> str:
    """``value`` as the compact JSON httpx sends (``json=``), or :data:`_NO_JSON`; raises
    TypeError for a value JSON cannot encode at all."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:
        if "Out of range float" in str(exc):
            return _NO_JSON
        raise


def placeholder_endpoint(name: str, *, prices: Any = None) -> ModelEndpoint:
    """An endpoint that is never called (replay without a model server): ``name`` is
    ``provider/model``; the base URL is unroutable."""
    provider, _, model_id = name.partition("/")
    ep = ModelEndpoint(
        name=name,
        provider=provider or "replay",
        model_id=model_id or name,
        base_url="http://replay.invalid/v1",
    )
    if prices is not None:
        ep.prices = prices
    return ep


CAP_REFUSALS = ("budget", "budget_share", "cost_budget", "token_budget", "max_requests")
"""Refusal kinds that are caps (job budget, job budget spent by the trial itself, trial cost,
trial tokens, trial requests)."""
JOB_BUDGET_REFUSAL = "budget"
"""The refusal of :data:`CAP_REFUSALS` for the job's spend cap (``--budget-usd``) reached by
others: a trial it cuts short is not scored (a ``budget`` error, run again by ``--resume``).
The others are the trial's own doing, graded as it stands with the matching stop reason
(:data:`CAP_STOPS`): its own caps, and ``budget_share``, the job's cap reached while the trial
had itself spent at least its share of it (:attr:`Gateway.budget_share_usd`: blame follows
control; a program looping requests with the trial's token must not get its trial re-run)."""
CAP_STOPS = {
    "budget": StopReason.COST_BUDGET,
    "budget_share": StopReason.COST_BUDGET,
    "cost_budget": StopReason.COST_BUDGET,
    "token_budget": StopReason.TOKEN_BUDGET,
    "max_requests": StopReason.MAX_TURNS,
}
"""The agent's stop reason for each of :data:`CAP_REFUSALS`."""


class GatewayRefusal(BudgetExceeded):
    """The gateway refused a request for a cap. ``kind``: one of :data:`CAP_REFUSALS`
    (the runner ends the agent phase with the matching stop reason and grades the trial)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


UPSTREAM_CLIENT: contextvars.ContextVar[httpx.AsyncClient | None] = contextvars.ContextVar(
    "clawrig_gateway_upstream", default=None
)
"""The upstream HTTP client of an in-process request (set by :class:`GatewayChatModel`; the
gateway's own client, bound to its server thread's loop, serves requests over its sockets)."""


class UpstreamClients:
    """A job's upstream HTTP clients on one event loop, each lent to one trial's chat model at a
    time (:meth:`take`, :meth:`give`) and kept with its connections for the next trial.

    Why not one client for the whole job: httpcore's connection pool scans its every connection
    and queued request on each request it starts or ends (``_assign_requests_to_connections``;
    one scan even counts the connections once per connection), so with hundreds of trials
    calling at once each request cost the harness CPU in proportion to the trials alive: 1.2 ms
    of CPU a request alone on its client vs 25-29 ms with 500 at once on one pool (2.4 ms
    with 32 pools), and 115 ms at 1,000 once its 256-connection cap queued requests (issue 19;
    a request of 0.5 s against a local server, 3 per caller). A client per trial keeps each
    pool to the connections of one trial (its sub-agents' calls at once)."""

    def __init__(self, make: Callable[[], httpx.AsyncClient]) -> None:
        self._make = make
        self._idle: list[httpx.AsyncClient] = []
        self._parked: list[tuple[httpx.AsyncClient, GatewayLease]] = []
        self._all: list[httpx.AsyncClient] = []
        self.closed = False

    def take(self) -> httpx.AsyncClient:
        """An idle client (the most recently given back: its connections are the freshest),
        or a new one. A client given back with its lease's requests still in flight is idle
        only once they ended."""
        if self._parked:
            busy = []
            for client, lease in self._parked:
                if lease.in_flight:
                    busy.append((client, lease))
                elif not client.is_closed:
                    self._idle.append(client)
            self._parked = busy
        if self._idle:
            return self._idle.pop()
        client = self._make()
        self._all.append(client)
        return client

    def give(self, client: httpx.AsyncClient, lease: GatewayLease | None = None) -> None:
        """Take back a client from :meth:`take` for the next trial (a closed one is dropped).
        While ``lease`` (the trial it was lent to) still has upstream requests in flight, the
        client is lent to no one: a trial's leftover requests (hundreds of slow ones, sent
        before its sandbox went away) would fill its connection cap and stall the next
        trial's calls behind them (a red-team finding)."""
        if self.closed or client.is_closed:
            return
        if lease is not None and lease.in_flight:
            self._parked.append((client, lease))
        else:
            self._idle.append(client)

    async def aclose(self) -> None:
        """Close every client made (lent ones too: their trials are over). Idempotent."""
        self.closed = True
        self._idle, self._parked = [], []
        clients, self._all = self._all, []
        for client in clients:
            with contextlib.suppress(Exception):
                await client.aclose()


SHARED_UPSTREAM: contextvars.ContextVar[
    tuple[Any, asyncio.AbstractEventLoop, UpstreamClients] | None
] = contextvars.ContextVar("clawrig_gateway_shared_upstream", default=None)
"""(gateway, event loop, clients) while :meth:`Gateway.shared_upstream` runs: each in-process
chat model of that gateway on that loop borrows one of those clients for its upstream calls
and gives it back when it is closed."""


class GatewayChatModel(OpenAIChatModel):
    """An :class:`OpenAIChatModel` whose requests go through a :class:`GatewayLease` (same
    name, provider, model id and prices as the upstream endpoint, so transcripts and usage are
    those of a direct call). ``lease`` is kept for agents that need the gateway itself.

    ``in_process`` (default): requests reach the gateway in the caller's event loop (a plain
    request handed over as a dict, :meth:`Gateway.chat_in_process`; streamed ones through the
    gateway's app over ``httpx.ASGITransport``: no socket, no hop to the gateway's server
    thread), and the gateway's upstream call uses this model's own HTTP client (one per event
    loop, closed by :meth:`aclose`); the same counting, caps, records and replay as over the
    socket. A request holds its place of the provider's ``max_concurrency`` here, and the
    gateway takes none for it. False: over the gateway's TCP listener
    (``http://127.0.0.1:<port>``); the gateway's server thread takes the place (charging the
    lease's ``clock``), this model none (two places for one request deadlock at a limit of 1)."""

    def __init__(
        self,
        lease: GatewayLease,
        *,
        retry: RetryPolicy | None = None,
        stream: bool = False,
        timeout_s: float | None = None,
        in_process: bool = True,
    ) -> None:
        upstream = lease.endpoint or placeholder_endpoint("gateway/unknown")
        base = "http://clawrig-gateway.invalid" if in_process else lease.gateway.host_url
        endpoint = upstream.model_copy(
            update={
                "base_url": f"{base}/v1",
                "api_key": SecretStr(lease.token),
                "api_key_env": None,
                "extra_body": {},
                "headers": {},
            }
        )
        super().__init__(
            endpoint,
            retry=retry or RetryPolicy(attempts=1),
            stream=stream,
            timeout_s=timeout_s or upstream.timeout_s or 600.0,
        )
        self.lease = lease
        self.upstream = upstream
        self.in_process = in_process
        self._upstreams: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self._lenders: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, UpstreamClients] = (
            weakref.WeakKeyDictionary()
        )
        """Per loop, the job's clients the upstream client there was borrowed from."""

    def _client(self) -> AsyncOpenAI:
        """The SDK client of this event loop: over ``httpx.ASGITransport`` to the gateway's
        app when in process, else over TCP (:meth:`OpenAIChatModel._client`)."""
        if not self.in_process:
            return super()._client()
        import openai

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            # the SDK's own HTTP library (httpx2 from openai 3), so its error mapping holds
            transport = sdk_httpx().ASGITransport(
                app=self.lease.gateway.app,
                raise_app_exceptions=False,
                client=(IN_PROCESS_CLIENT, 0),  # (the agent loop's: agent_loop_request)
            )
            client = openai.AsyncOpenAI(
                api_key=self.lease.token,
                base_url=self.endpoint.base_url,
                max_retries=0,
                timeout=self.timeout_s,
                http_client=sdk_httpx().AsyncClient(transport=transport, timeout=self.timeout_s),
            )
            self._clients[loop] = client
        return client

    async def _plain(self, params: dict[str, Any]) -> ChatResponse:
        """In process: the request body handed to the gateway as the SDK would send it (its
        fields and ``extra_body`` merged), without building an HTTP request or parsing one;
        the reply read as the SDK reads it (a 4xx/5xx raised as the SDK's status error). Over
        TCP: :meth:`OpenAIChatModel._plain`."""
        if not self.in_process:
            return await super()._plain(params)
        body = {k: v for k, v in params.items() if k != "extra_body"}
        body.update(params.get("extra_body") or {})
        # the gateway keeps the body (records diff each request against the previous one):
        # a snapshot of the message list, which the agent goes on appending to
        body["messages"] = [dict(m) if isinstance(m, dict) else m for m in body["messages"]]
        reply = await self.lease.gateway.chat_in_process(self.lease.token, body)
        if isinstance(reply, dict):  # a 200 reply's completion object, as the SDK would parse it
            return self._from_completion(completion_fields(reply))
        raw = bytes(reply.body)
        if reply.status_code >= 400:
            raise StatusReply(reply.status_code, reply.headers, raw)
        try:
            data = json.loads(raw)
        except ValueError:
            raise _BodyError(reply.status_code, "the reply is not JSON") from None
        if not isinstance(data, dict):
            raise _BodyError(None, "the reply is not a JSON object")
        return self._from_completion(completion_fields(data))

    def _concurrency(self) -> int | None:
        """In process: the upstream's limit (the gateway takes no place for a request that holds
        one). Over TCP: None (the gateway's server thread takes the request's place)."""
        return self.upstream.max_concurrency if self.in_process else None

    def where(self) -> str:
        """The upstream the gateway calls (the URL the user set), not the gateway itself."""
        return f"{self.upstream.provider} ({self.upstream.base_url})"

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        """:meth:`OpenAIChatModel.chat`; a request the gateway refused for a cap raises
        :class:`GatewayRefusal` (a :class:`clawrig.errors.BudgetExceeded`) instead of
        ModelRequestError. A replay miss stays a ModelRequestError (it stops the job)."""
        before = len(self.lease.refusals)
        token = None
        if self.in_process:
            loop = asyncio.get_running_loop()
            upstream = self._upstreams.get(loop)
            if upstream is None:
                shared = SHARED_UPSTREAM.get()
                if shared is not None and shared[0] is self.lease.gateway and shared[1] is loop:
                    # one of the job's: its connections outlive this trial
                    upstream = shared[2].take()
                    self._lenders[loop] = shared[2]
                else:
                    upstream = self.lease.gateway.new_upstream_client()
                self._upstreams[loop] = upstream
            token = UPSTREAM_CLIENT.set(upstream)
        try:
            return await super().chat(messages, **kwargs)
        except ModelRequestError as exc:
            new = self.lease.refusals[before:]
            if new and new[-1] in CAP_REFUSALS:
                raise GatewayRefusal(str(exc), new[-1]) from None
            raise
        finally:
            if token is not None:
                UPSTREAM_CLIENT.reset(token)

    async def aclose(self) -> None:
        """Close this event loop's SDK client and upstream client (one borrowed from the job's
        :class:`UpstreamClients` is given back instead). Idempotent."""
        await super().aclose()
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            upstream = self._upstreams.pop(loop, None)
            lender = self._lenders.pop(loop, None)
            if upstream is not None and lender is not None:
                lender.give(upstream, self.lease)
            elif upstream is not None:
                await upstream.aclose()
