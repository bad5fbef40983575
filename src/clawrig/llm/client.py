"""``OpenAIChatModel``: the :class:`clawrig.llm.base.ChatModel` for any OpenAI-compatible API.

Built on the ``openai`` SDK's ``AsyncOpenAI`` with the SDK's own retries off (``max_retries=0``);
retries are done here with tenacity:

- retried: HTTP 408, 409, 429 and 5xx, timeouts, dropped or refused connections (also mid
  stream), and 200 replies whose body is an ``error`` object with such a code. Waits grow
  exponentially with jitter (``RetryPolicy.initial_s`` doubling up to ``max_s``, plus up to
  ``jitter_s``); a ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms`` header is
  honoured instead, capped at ``RetryPolicy.retry_after_cap_s``.
- fail fast: other 4xx (400, 401, 403, 404, 422 ...) raise :class:`ModelRequestError` at once,
  with one line: model, status, provider and the provider's message (API key redacted); so
  does any reply with the header ``x-should-retry: false`` (the OpenAI API's own signal, also
  sent by a scripted server whose script is exhausted: retrying cannot help).
- through the job's gateway (which retries upstream itself and reports
  ``x-clawrig-upstream-attempts``), messages name the upstream URL the user set and the
  attempts the gateway made (:meth:`OpenAIChatModel.where`).
- after ``RetryPolicy.attempts`` attempts: :class:`ProviderRetriesExhausted` (a
  :class:`clawrig.errors.ProviderError`, i.e. an infrastructure error).

Each call returns a :class:`clawrig.spec.llm.ChatResponse` whose ``usage`` counts this call
(see :func:`usage_from_openai` for the token classes and cost), ``usage.retries`` the retried
attempts, ``usage.elapsed_time`` the seconds of the whole call (retries and waits included) and
``latency_s`` the seconds of the attempt that succeeded.

Requests to one provider are limited to ``ModelEndpoint.max_concurrency`` in flight: one
:class:`clawrig.waits.SharedSemaphore` per provider name and limit in the process
(:func:`provider_semaphore`; with ``--workers``, this process's share of the limit), shared by
every model of that provider and by every event loop and thread: this module's requests on the
harness's loop (the native agent, the in-process judge) and the model gateway's requests over
its sockets on its server thread (a real OpenClaw in a sandbox, skills, graders calling a
judge: :mod:`clawrig.llm.gateway.server`). Each attempt holds a place while it is sent and its
reply read (a retry's back-off holds none); a request of this process that reaches the gateway
in its own task while it holds a place (the in-process agent's) takes no second one
(:func:`take_provider_slot`). The time a request waits for a place is a harness wait of the
trial it belongs to (:mod:`clawrig.waits`: not held against the agent).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import functools
import hashlib
import importlib
import json
import math
import sys
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pydantic import BaseModel, Field
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base
from tenacity.wait import wait_exponential, wait_random

from clawrig.errors import ModelRequestError, ProviderError
from clawrig.llm.pricing import Prices, cost_usd
from clawrig.llm.providers import ModelEndpoint, Role, Settings, load_settings, resolve_model
from clawrig.llm.stalls import current_watch
from clawrig.llm.stalls import progress as stall_progress
from clawrig.sizes import format_bytes
from clawrig.spec.llm import ChatResponse, ToolCall
from clawrig.spec.trial import Usage
from clawrig.waits import Held, SharedSemaphore, WaitClock, provider_backoff, take_slot

if TYPE_CHECKING:
    from openai import AsyncOpenAI


def _sdk_error(exc: BaseException, *names: str) -> bool:
    """True when ``exc`` is one of the openai SDK's exceptions ``names``. The SDK is imported
    only where a client is made (:meth:`OpenAIChatModel._client`; ~1 s of CPU, which a job
    whose model calls all reach the gateway in process never pays): before that, no exception
    can be one of its."""
    openai = sys.modules.get("openai")
    return openai is not None and isinstance(exc, tuple(getattr(openai, n) for n in names))


@functools.cache
def sdk_httpx() -> Any:
    """The HTTP library the openai SDK is built on: httpx2 (its fork) from openai 3, else
    httpx. Imported on first use (where an SDK client is made): ~50 ms of CPU that a job
    whose model calls all reach the gateway in process never pays."""
    try:
        return importlib.import_module("httpx2")
    except ImportError:  # pragma: no cover - older openai
        return httpx


def _http_errors(*names: str) -> tuple[type[BaseException], ...]:
    """httpx's exception classes ``names``, and the SDK's HTTP library's when it is another
    one and imported (before that, no exception can be one of its)."""
    libraries = [httpx] + [m for m in [sys.modules.get("httpx2")] if m is not None]
    return tuple(getattr(lib, n) for lib in libraries for n in names)


__all__ = [
    "OpenAIChatModel",
    "get_model",
    "ProviderRetriesExhausted",
    "RetryPolicy",
    "PROBE",
    "retryable_status",
    "provider_answers",
    "provider_semaphore",
    "provider_slot",
    "take_provider_slot",
    "share_concurrency",
    "concurrency_share",
    "usage_from_openai",
]

RETRY_STATUSES = frozenset({408, 409, 429})
"""HTTP statuses retried besides the 5xx ones (the same set the openai SDK retries)."""
PERMANENT_5XX = frozenset({501, 505})
"""5xx statuses that say the request will never work there (RFC 9110 15.6.2, 15.6.6: the
method or the HTTP version unsupported), not retried: a proxy's 501 was retried 6 times over
33 s (helper-204)."""


def retryable_status(status: int) -> bool:
    """Whether a reply of HTTP ``status`` is worth another attempt: 408, 409, 429 and 5xx but
    :data:`PERMANENT_5XX` (the openai SDK retries every 5xx)."""
    return status in RETRY_STATUSES or (500 <= status < 600 and status not in PERMANENT_5XX)


_MAX_MESSAGE = 300


class RetryPolicy(BaseModel):
    """How failed requests are retried. Times in seconds.

    ``attempts``: total tries (1 = no retry). Backoff before retry n (n >= 1) is
    ``min(max_s, initial_s * 2**(n-1)) + uniform(0, jitter_s)`` (tenacity's
    ``wait_exponential + wait_random``), unless the provider sent Retry-After, which is used
    as given but capped at ``retry_after_cap_s``. A connection that cannot be opened is tried
    ``unreached_attempts`` times at most (:class:`StopUnreached`).
    """

    attempts: int = Field(default=6, ge=1)
    initial_s: float = Field(default=1.0, ge=0)
    max_s: float = Field(default=60.0, ge=0)
    jitter_s: float | None = Field(default=None, ge=0)
    retry_after_cap_s: float = Field(default=120.0, ge=0)
    unreached_attempts: int = Field(default=3, ge=1)

    @property
    def jitter(self) -> float:
        """Jitter bound in seconds (default: ``initial_s``)."""
        return self.initial_s if self.jitter_s is None else self.jitter_s


class ProviderRetriesExhausted(ProviderError):
    """The provider kept failing with retryable errors. ``attempts`` made, ``retries`` =
    attempts - 1, ``status`` the last HTTP status (None for timeouts/connection errors),
    ``detail`` the server's own message in its last reply ("" when it sent none); the
    exception's text is the harness's line (model, status, server, attempts, message)."""

    def __init__(
        self, message: str, *, attempts: int, status: int | None, detail: str = ""
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.retries = max(0, attempts - 1)
        self.status = status
        self.detail = detail


class _BodyError(Exception):
    """A 200 reply that carries an ``error`` object (OpenRouter does this, also mid-stream)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ReplyTooLarge(_BodyError):
    """A reply body over the cap: the provider's fault, reported without reading the rest."""


class StatusReply(_BodyError):
    """A 4xx/5xx reply the gateway gave a request handed to it in process
    (:class:`clawrig.llm.gateway.lease.GatewayChatModel`): what the openai SDK's status error
    carries for the same reply (its status, its headers: ``retry-after``,
    ``x-should-retry``, the gateway's upstream headers; the provider's message, read from the
    body as :func:`_provider_message` reads the SDK's), made without importing the SDK or
    building the gateway's HTTP app (~0.5 s of CPU on the event loop, every trial waiting,
    at a job's first refused request). ``raw``: the reply's body."""

    def __init__(self, status: int, headers: Any, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace")
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = text
        data = body.get("error", body) if isinstance(body, dict) else body
        fallback = f"Error code: {status} - {body}"
        super().__init__(status, _message_in(data) or text or fallback)
        self.headers = headers


@functools.cache
def _capped_transport_class() -> type:
    """:func:`capped_transport`'s class (with its reply stream) over the SDK's HTTP library
    (:func:`sdk_httpx`), made on first use."""
    lib = sdk_httpx()

    class CappedStream(lib.AsyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, inner: Any, cap: int) -> None:
            self.inner, self.cap, self.seen = inner, cap, 0

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self.inner:
                self.seen += len(chunk)
                if self.seen > self.cap:
                    raise ReplyTooLarge(None, f"reply larger than {format_bytes(self.cap)}")
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    class CappedTransport(lib.AsyncHTTPTransport):  # type: ignore[misc,name-defined]
        def __init__(self, cap: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.cap = cap

        async def handle_async_request(self, request: Any) -> Any:
            response = await super().handle_async_request(request)
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > self.cap:
                await response.aclose()
                raise ReplyTooLarge(
                    None,
                    f"reply of {format_bytes(int(length))} over the cap of "
                    f"{format_bytes(self.cap)}",
                )
            response.stream = CappedStream(response.stream, self.cap)
            return response

    return CappedTransport


def capped_transport(cap: int, **kwargs: Any) -> Any:
    """A transport of the SDK's HTTP library (:func:`sdk_httpx`; ``kwargs`` go to its
    ``AsyncHTTPTransport``) that refuses reply bodies over ``cap`` bytes (by Content-Length
    at once, else while reading: :class:`ReplyTooLarge`), so one huge reply cannot take the
    harness's memory."""
    return _capped_transport_class()(cap, **kwargs)


_LIMITS: dict[tuple[str, int], SharedSemaphore] = {}
"""(provider name, places) -> its requests in flight in this process
(:func:`provider_semaphore`)."""
_LIMITS_LOCK = threading.Lock()
_HELD: contextvars.ContextVar[frozenset[SharedSemaphore]] = contextvars.ContextVar(
    "clawrig_provider_slots_held", default=frozenset()
)
"""The providers' semaphores a request of this context holds a place of (:func:`provider_slot`)."""


_SHARE: list[int] = [0, 1]
"""(this process's index, the job's harness processes): :func:`share_concurrency`."""


def share_concurrency(index: int, processes: int) -> None:
    """This is harness process ``index`` (0: the driver) of a job's ``processes`` (``--workers``):
    :func:`provider_semaphore` gives it only its share of each provider's ``max_concurrency``
    (:func:`concurrency_share`), so the job as a whole keeps the provider's limit. Every process
    had the whole limit: ``max_concurrency: 1`` let two requests in flight with two processes."""
    _SHARE[:] = [index, max(1, processes)]


def concurrency_share(limit: int, index: int, processes: int) -> int:
    """Process ``index``'s share of ``limit`` requests in flight split over ``processes``: the
    shares add up to ``limit`` (the first ``limit % processes`` get one more), and each is at
    least 1 (a job never runs more processes than its model's limit:
    :func:`clawrig.runner.executors.processes.job_processes`)."""
    return max(1, limit // processes + (1 if index < limit % processes else 0))


def provider_semaphore(provider: str, limit: int | None) -> SharedSemaphore | None:
    """The semaphore shared by every request to ``provider`` in this process, on any event loop
    or thread: ``limit`` requests in flight, or this process's share of them
    (:func:`share_concurrency`).

    None when ``limit`` is None (unlimited). One semaphore per provider and number of places
    (a job's endpoints of one provider carry its one ``max_concurrency``): a later job of the
    process (``Job(config).run()`` again, another ``--workers`` share) with another limit for
    the provider gets its own, not the first one's (the first limit seen won: a job with
    ``max_concurrency: 1`` after one with 3 sent 3 at once)."""
    if limit is None:
        return None
    index, processes = _SHARE
    places = concurrency_share(limit, index, processes)
    with _LIMITS_LOCK:
        sem = _LIMITS.get((provider, places))
        if sem is None:
            sem = _LIMITS[(provider, places)] = SharedSemaphore(places)
        return sem


def forget_provider_limits() -> None:
    """Forget every provider's semaphore: the next request to each makes a new one from its
    limit. For a process that runs independent jobs one after another, such as a test session
    (a test's limit for a provider name is not the next one's); requests holding a place of a
    forgotten one give it back to it."""
    with _LIMITS_LOCK:
        _LIMITS.clear()


async def take_provider_slot(
    provider: str, limit: int | None, clock: WaitClock | None = None, *, first: bool = False
) -> Held:
    """A place of ``provider``'s requests in flight (:func:`provider_semaphore`; ``limit``
    None: none needed) for one attempt of a request, waiting in turn for it: the wait is a
    harness wait (``model``) of ``clock``, default the current trial's
    (:func:`clawrig.waits.take_slot`). Give it back with :meth:`Held.release` once the attempt's
    reply is read. Nothing is taken (a :class:`Held` of nothing) when this context holds a
    place of that provider already (:func:`provider_slot`): the in-process agent's request
    reaching the model gateway in its own task (handed over, or through ``httpx.ASGITransport``,
    which runs the gateway's app in the caller's task) is the request that place is for, and a
    second place would deadlock at a limit of 1. ``first``: ahead of every request waiting
    (the harness's probe, :func:`provider_answers`). Raises CancelledError (holding nothing)
    when cancelled while it waits."""
    sem = provider_semaphore(provider, limit)
    if sem is None or sem in _HELD.get():
        return Held()
    return await take_slot(sem, "model", clock, first=first)


@asynccontextmanager
async def provider_slot(provider: str, limit: int | None) -> AsyncIterator[None]:
    """Hold a place of ``provider``'s requests in flight for the body (:func:`take_provider_slot`,
    the wait a harness wait of the current trial); within it, this context (and the tasks it
    starts) holds that provider's place: a request it makes through the model gateway in
    process takes no second one."""
    held = await take_provider_slot(provider, limit)
    token = _HELD.set(_HELD.get() | {held.sem}) if isinstance(held.sem, SharedSemaphore) else None
    try:
        yield
    finally:
        if token is not None:
            _HELD.reset(token)
        held.release()


def _upstream(endpoint: ModelEndpoint) -> tuple[str, str, str]:
    return (endpoint.provider, endpoint.model_id, endpoint.base_url.rstrip("/"))


_ANSWERED: set[tuple[str, str, str]] = set()
"""(provider, model id, base URL) of every model that answered a request in this process."""
_UNREACHED: dict[tuple[str, str, str], tuple[int, str]] = {}
"""Per (provider, model id, base URL): the requests in a row, since its last answer, that
could not connect after their retries, and the last one's message."""

OUTAGE_REQUESTS = 3
"""Requests in a row (each after its retries) that could not connect to a model that did
answer earlier in this process: an outage (:func:`unreachable`), the job stops."""


SETTINGS_REFUSALS = frozenset({401, 402, 403, 404})
"""HTTP statuses that refuse the key, the account or the model rather than one request: every
later request of the job would get the same (:func:`mark_refused`)."""
_REFUSED: dict[tuple[str, str, str], tuple[str, str | None]] = {}
"""Per (provider, model id, base URL): the line of a refusal after which no request of the
job can pass (a key revoked, credit run out, a model withdrawn: :data:`SETTINGS_REFUSALS`
after answers; a server refusing even a plain request; every trial's first prompt refused)
and what to do about it (None: check the model's settings), :func:`mark_refused`."""


PROMPTS_REFUSED = "its context takes none of this job's prompts"
"""What the job's stop line says of a model that refused the first request of several trials
and answers a plain conversation (``clawrig.runner.trial``): its own server works, so
``--resume`` on the same model would be refused the same (the console says no more)."""


def mark_refused(endpoint: ModelEndpoint, message: str, *, advice: str | None = None) -> None:
    """Note that ``endpoint``'s server refuses every request the job could send
    (``message``: one line; :func:`provider_stop`). ``advice``: what to do about it, when not
    to check the model's settings (its key, base URL: the job's stop line's default;
    :func:`refusal_advice`)."""
    _REFUSED[_upstream(endpoint)] = (message, advice)


def refusal_advice(endpoint: ModelEndpoint) -> str | None:
    """What to do about ``endpoint``'s refusal (:func:`mark_refused`'s ``advice``), or None."""
    refused = _REFUSED.get(_upstream(endpoint))
    return refused[1] if refused is not None else None


def provider_stop(endpoint: ModelEndpoint | None) -> str | None:
    """One line when no more requests to ``endpoint`` can succeed, else None: its server
    refused the key, account or model (:func:`mark_refused`), or cannot be reached
    (:func:`unreachable`). The job stops starting trials on it (:mod:`clawrig.runner.batch`)."""
    if endpoint is None:
        return None
    if (refused := _REFUSED.get(_upstream(endpoint))) is not None:
        return f"refuses its requests: {refused[0]}"
    if (why := unreachable(endpoint)) is not None:
        return f"cannot be reached: {why}"
    return None


_SHARED_ANSWERS: list[Path] = []
"""The folder where this job's processes (``--workers``) note the models that answered any of
them (:func:`share_answers`; empty: this process's notes only)."""


def share_answers(folder: Path | None) -> None:
    """Note answers in ``folder`` too (one empty file per model, named by a hash of its
    provider, model id and base URL), and count the answers the job's other processes noted
    there: a model that answered one ``--workers`` process has answered the job, so a refusal
    in another is not taken for a settings error (a job stop with exit 2) but judged as one
    process would (:func:`has_answered`). None: this process's notes only."""
    _SHARED_ANSWERS[:] = [folder] if folder is not None else []


def _answer_file(key: tuple[str, str, str]) -> Path | None:
    if not _SHARED_ANSWERS:
        return None
    name = hashlib.sha256("\0".join(key).encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return _SHARED_ANSWERS[0] / f"answered-{name}"


def _answered(key: tuple[str, str, str]) -> bool:
    """This process's note, else the job's other processes' (:func:`share_answers`)."""
    if key in _ANSWERED:
        return True
    shared = _answer_file(key)
    if shared is not None and shared.exists():
        _ANSWERED.add(key)
        return True
    return False


def mark_answered(endpoint: ModelEndpoint) -> None:
    """Note that ``endpoint``'s model answered a request (its settings work; it is reachable),
    for the job's other processes too (:func:`share_answers`)."""
    key = _upstream(endpoint)
    if key not in _ANSWERED and (shared := _answer_file(key)) is not None:
        with contextlib.suppress(OSError):
            shared.touch()
    _ANSWERED.add(key)
    _UNREACHED.pop(key, None)


def forget_upstreams() -> None:
    """Forget what this process noted of its model servers (:func:`mark_answered`,
    :func:`mark_unreached`, :func:`mark_refused`, :func:`note_first_refusal`): the next
    request to each is judged as a fresh process's first. For a process that runs independent
    jobs one after another, such as a test session, where a later test's model server can get
    an earlier one's port (the records are keyed by base URL)."""
    _ANSWERED.clear()
    _UNREACHED.clear()
    _REFUSED.clear()
    _SHARED_ANSWERS.clear()
    _FIRST_REFUSED.clear()


_FIRST_REFUSED: dict[tuple[str, str, str], int] = {}
"""Per (provider, model id, base URL): trials whose first request it refused for what the
request held (:func:`note_first_refusal`)."""


def note_first_refusal(endpoint: ModelEndpoint) -> int:
    """Note that ``endpoint``'s server refused a trial's first request for what it held (the
    same request with a plain conversation answered: ``clawrig.runner.trial``) before the model
    answered any; returns how many such trials this process has seen."""
    key = _upstream(endpoint)
    _FIRST_REFUSED[key] = _FIRST_REFUSED.get(key, 0) + 1
    return _FIRST_REFUSED[key]


def has_answered(endpoint: ModelEndpoint) -> bool:
    """True when ``endpoint``'s provider, model id and base URL answered a request in this
    process (evidence that a later refusal of a request is about its content, not the
    settings)."""
    return _answered(_upstream(endpoint))


def is_connect_failure(exc: BaseException | None) -> bool:
    """True when ``exc`` (or the error it wraps) is a connection that could not be opened:
    refused, no route, unknown host, connect timeout (httpx's ``ConnectError`` /
    ``ConnectTimeout``): the request never reached a server."""
    seen = 0
    while exc is not None and seen < 4:
        if isinstance(exc, _http_errors("ConnectError", "ConnectTimeout")):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def mark_unreached(endpoint: ModelEndpoint, message: str) -> None:
    """Note that a request to ``endpoint`` could not connect after its retries (``message``:
    the one line saying so)."""
    key = _upstream(endpoint)
    count, _ = _UNREACHED.get(key, (0, ""))
    _UNREACHED[key] = (count + 1, message)


def unreachable(endpoint: ModelEndpoint | None) -> str | None:
    """One line when ``endpoint``'s server cannot be reached, else None: a request could not
    connect before the model ever answered in this process (a wrong base URL, a server not
    started), or :data:`OUTAGE_REQUESTS` requests in a row could not since its last answer (the
    server went away). The job stops on it (:mod:`clawrig.runner.batch`) instead of running
    every trial into the same wall."""
    if endpoint is None:
        return None
    key = _upstream(endpoint)
    count, message = _UNREACHED.get(key, (0, ""))
    if count == 0 or (_answered(key) and count < OUTAGE_REQUESTS):
        return None
    if _answered(key):
        return f"{message} ({count} requests in a row since its last answer)"
    return message


class StopUnreached(stop_base):
    """tenacity stop: a connection that could not be opened to ``endpoint`` (nothing
    listening, no route, connect timeout) is tried only ``policy.unreached_attempts`` times,
    whether or not its model answered earlier in this process: a wrong base URL, a server not
    started or one that went away mid-job is one clear line in seconds (the job stops after
    :data:`OUTAGE_REQUESTS` such requests in a row), not ~30 s of backoff per request."""

    def __init__(self, policy: RetryPolicy, endpoint: ModelEndpoint | None) -> None:
        self.limit, self.endpoint = policy.unreached_attempts, endpoint

    def __call__(self, retry_state: RetryCallState) -> bool:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None and outcome.failed else None
        return (
            self.endpoint is not None
            and retry_state.attempt_number >= self.limit
            and is_connect_failure(exc)
        )


PROBE: list[dict[str, Any]] = [{"role": "user", "content": "Reply with the single word OK."}]
"""The harness's own request to a provider (up to 8 completion tokens): evidence of whether the
provider answers plain requests now, whatever a trial's requests held."""


PROBE_REPLY_BYTES = 1024 * 1024
"""Largest reply to :data:`PROBE` read (bytes): a longer one is no plain answer."""


async def provider_answers(
    endpoint: ModelEndpoint | None, within_s: float, queue_s: float | None = None
) -> bool:
    """True when the provider at ``endpoint`` answers :data:`PROBE` within ``within_s``
    seconds (one attempt, no retry; an OpenAI chat completion with ``choices``). The harness's
    evidence for a request that stayed silent past a phase's limit: the provider answering its
    own plain request now means it is up, so the silence was that request's (its content: the
    model's slow answer, or a request an agent's program chose to make), not an outage
    (:mod:`clawrig.llm.stalls`). False without an endpoint, or when the probe fails, is refused
    or takes longer. Never raises (but cancellation).

    The probe is a request to the provider like any other: it holds a place of the provider's
    ``max_concurrency`` (:func:`take_provider_slot`, ahead of every request waiting for one;
    the wait a harness wait of the current trial) while it is sent and its reply read, and the
    wait for that place does not count against ``within_s``. It waits ``queue_s`` seconds at
    most (default ``within_s``; the trial passes the stall limit,
    :func:`clawrig.llm.stalls.stall_limit_s`): no place freed by then is False too, as none of
    the provider's requests in flight ended in that time either (a place goes to the probe as
    soon as any one ends), the same silence that made the trial's request a stall, and nothing
    says the provider answers. The trial's own requests over the gateway are cut before the
    probe (:meth:`clawrig.llm.gateway.lease.GatewayLease.cut_upstream`: the phase is over), so
    they give it their places: held by an agent's program's slow request (a grader running it,
    limit 1), the probe waited in vain and the trial was voided as a stall. Sent anyway, the
    probe broke the limit it keeps.

    One POST with httpx, its client made before the clock starts: only the provider's time
    counts against ``within_s`` (the openai SDK's import, ~1 s of CPU and many seconds of a
    loaded machine's wall time, made a provider that answered at once look silent)."""
    if endpoint is None:
        return False
    headers = {"content-type": "application/json", **endpoint.headers}
    if endpoint.api_key is not None:
        headers["authorization"] = f"Bearer {endpoint.api_key.get_secret_value()}"
    body = {**endpoint.extra_body, "model": endpoint.model_id, "messages": PROBE, "max_tokens": 8}
    url = f"{endpoint.base_url.rstrip('/')}/chat/completions"
    try:
        async with asyncio.timeout(within_s if queue_s is None else queue_s):  # a place
            held = await take_provider_slot(endpoint.provider, endpoint.max_concurrency, first=True)
    except TimeoutError:
        return False
    try:
        async with httpx.AsyncClient(timeout=within_s) as http:
            async with (
                asyncio.timeout(within_s),
                http.stream("POST", url, json=body, headers=headers) as resp,
            ):
                if resp.status_code != 200:
                    return False
                data = b""
                async for chunk in resp.aiter_bytes():
                    data += chunk
                    if len(data) > PROBE_REPLY_BYTES:
                        return False
        answered = bool(json.loads(data).get("choices"))
    except (TimeoutError, httpx.HTTPError, OSError, ValueError, AttributeError):
        return False
    finally:
        held.release()
    if answered:
        mark_answered(endpoint)
    return answered


MAX_TOKENS_PER_REQUEST = 50_000_000
"""More tokens than any model reads or writes in one request: a larger count is a provider
fault (or an attack on the budget), counted as 0 and flagged."""
MAX_REPLY_BYTES = 64 * 1024 * 1024
"""Largest reply body read from a provider (bytes); a larger one is a provider fault."""


def _int(value: Any, rejected: list[str] | None = None, field: str = "") -> int:
    """A token count from a provider: 0 when missing; 0 (and ``field`` added to ``rejected``)
    when negative, not finite, not a number or over MAX_TOKENS_PER_REQUEST."""
    if value is None:
        return 0
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0 or number > MAX_TOKENS_PER_REQUEST:
        if rejected is not None:
            rejected.append(field)
        return 0
    return int(number)


def usage_from_openai(
    usage: dict[str, Any] | None, prices: Prices, rejected: list[str] | None = None
) -> Usage:
    """Usage of one request from an OpenAI ``usage`` object (as a dict).

    - cache read = ``prompt_tokens_details.cached_tokens`` (also DeepSeek's
      ``prompt_cache_hit_tokens``, Anthropic-style ``cache_read_input_tokens``);
    - cache write = ``prompt_tokens_details.cache_write_tokens`` (OpenRouter) or
      ``cache_creation_input_tokens``;
    - input = ``prompt_tokens`` - cache read - cache write (non-cached input, OpenClaw's
      ``usage.input``); output = ``completion_tokens`` (reasoning tokens included);
    - total = input + output + cache read + cache write;
    - cost (USD) = ``usage.cost`` when the provider sends it (OpenRouter), else
      :func:`clawrig.llm.pricing.cost_usd` from ``prices``.

    ``request_count`` is 1. A missing usage object gives zero tokens and zero cost. Impossible
    counts (negative, not finite, absurdly large) count 0 and are named in ``rejected``; a
    negative or non-finite reported cost is ignored (priced from the tokens instead), so the
    spend never decreases.
    """
    u = usage if isinstance(usage, dict) else {}
    details = u.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    prompt = _int(u.get("prompt_tokens"), rejected, "prompt_tokens")
    output = _int(u.get("completion_tokens"), rejected, "completion_tokens")
    cache_read = _int(
        details.get("cached_tokens")
        or u.get("prompt_cache_hit_tokens")
        or u.get("cache_read_input_tokens"),
        rejected,
        "cached_tokens",
    )
    cache_write = _int(
        details.get("cache_write_tokens") or u.get("cache_creation_input_tokens"),
        rejected,
        "cache_write_tokens",
    )
    input_tokens = max(0, prompt - cache_read - cache_write)
    reported = u.get("cost")
    if (
        isinstance(reported, int | float)
        and not isinstance(reported, bool)
        and math.isfinite(reported)
        and reported >= 0
    ):  # a negative or non-finite reported cost is ignored: it would defeat the budget
        cost = float(reported)
    else:
        if reported is not None and rejected is not None:
            rejected.append("cost")
        cost = cost_usd(
            prices,
            input_tokens=input_tokens,
            output_tokens=output,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
        )
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        total_tokens=input_tokens + output + cache_read + cache_write,
        cost_usd=cost,
        request_count=1,
    )


def _status_of(exc: BaseException) -> int | None:
    if _sdk_error(exc, "APIStatusError"):
        return exc.status_code  # type: ignore[attr-defined]
    if isinstance(exc, _BodyError):
        return exc.status
    return None


SHOULD_RETRY_HEADER = "x-should-retry"
"""``false``: the server says retrying this request cannot help (OpenAI API convention)."""

UPSTREAM_ATTEMPTS_HEADER = "x-clawrig-upstream-attempts"
"""Set by the gateway on a failed reply: how many times it tried the upstream."""
UPSTREAM_FAILURE_HEADER = "x-clawrig-upstream-failure"
"""Set by the gateway on its own 502 when no server answered: ``connect`` (the connection
could not be opened) or ``no_reply`` (it broke or timed out without a reply)."""


def _headers_of(exc: BaseException) -> Any:
    """The reply headers an error carries (an SDK error's response's; the gateway's own
    upstream errors' and :class:`StatusReply`'s ``headers``), or None."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    return headers if headers is not None else getattr(exc, "headers", None)


def _header(exc: BaseException, name: str) -> str | None:
    headers = _headers_of(exc)
    return headers.get(name) if headers is not None else None


def refuses_retry(exc: BaseException) -> bool:
    """True when the reply carried ``x-should-retry: false``."""
    return (_header(exc, SHOULD_RETRY_HEADER) or "").strip().lower() == "false"


def _retryable(exc: BaseException) -> bool:
    if refuses_retry(exc):
        return False
    if isinstance(exc, _BodyError) or _sdk_error(exc, "APIStatusError"):
        status = _status_of(exc)
        return status is None or retryable_status(status)
    return isinstance(exc, (*_http_errors("TransportError"), TimeoutError)) or _sdk_error(
        exc, "APITimeoutError", "APIConnectionError"
    )


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds a ``retry-after-ms`` or ``Retry-After`` header (seconds or an HTTP date) asks
    to wait, or None when there is none (RFC 9110 section 10.2.3)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _retry_after_s(exc: BaseException) -> float | None:
    """Seconds the provider asked us to wait in the error's response headers, or None."""
    return retry_after_seconds(_headers_of(exc))


class RetryWait:
    """tenacity wait: Retry-After when given (capped), else exponential backoff with jitter.

    ``retry_after(exc)`` reads the wait an exception carries (default: its response's
    headers)."""

    def __init__(
        self,
        policy: RetryPolicy,
        retry_after: Callable[[BaseException], float | None] | None = None,
    ) -> None:
        self.retry_after = retry_after or _retry_after_s
        self.policy = policy
        self.backoff = wait_exponential(
            multiplier=policy.initial_s, max=policy.max_s
        ) + wait_random(0, policy.jitter)

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        after = self.retry_after(exc) if exc is not None else None
        if after is not None:
            return min(after, self.policy.retry_after_cap_s)
        return self.backoff(state)


_T = TypeVar("_T")


async def with_retries(
    retrying: Callable[[], AsyncRetrying], attempt: Callable[[], Awaitable[_T]]
) -> _T:
    """``await retrying()(attempt)`` without tenacity's machinery (~0.3 ms of CPU a call) when
    the first attempt succeeds, as nearly every one does: ``attempt`` runs once, and only when
    it raises an Exception is ``retrying()`` made and handed that failure as its first attempt,
    so its retry rule, waits and stop see the same attempts as when it makes them all. Raises
    what ``retrying`` raises (with ``reraise=True``: the last attempt's exception)."""
    try:
        return await attempt()
    except Exception as exc:
        first: BaseException | None = exc

    async def again() -> _T:
        nonlocal first
        if first is not None:
            failed, first = first, None
            try:
                raise failed
            finally:  # the failure's traceback holds this frame: a cycle through ``failed``
                del failed
        return await attempt()

    retry = retrying()
    try:
        return await retry(again)
    except BaseException as exc:
        # tenacity's frames in the failure's traceback hold its attempt state, which holds
        # the failure: a cycle that kept the caller's frames (a whole trial) for the cyclic
        # collector. Their locals go; the traceback's lines and the message stay
        _clear_frames_of(exc, "tenacity")
        raise
    finally:  # its iteration state's actions are its own methods: a cycle, cleared
        retry.iter_state.reset()


def _clear_frames_of(exc: BaseException, package: str) -> None:
    """Clear the locals of ``package``'s finished frames in ``exc``'s traceback (frames
    still running are left: ``frame.clear`` refuses them)."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_globals.get("__name__", "").partition(".")[0] == package:
            with contextlib.suppress(RuntimeError):
                frame.clear()
        tb = tb.tb_next


def _one_line(text: str, secret: str | None = None) -> str:
    line = " ".join(str(text).split())
    if secret and len(secret) >= 4:
        line = line.replace(secret, "***")
    return line if len(line) <= _MAX_MESSAGE else line[: _MAX_MESSAGE - 3] + "..."


def _provider_message(exc: BaseException) -> str:
    """The provider's own error message from an SDK exception."""
    if isinstance(exc, _BodyError):
        return exc.message
    if _sdk_error(exc, "APIStatusError"):
        if message := _message_in(exc.body):  # type: ignore[attr-defined]
            return message
        try:
            text = exc.response.text  # type: ignore[attr-defined]
        except Exception:  # the body could not be read
            text = ""
        return text or exc.message  # type: ignore[attr-defined]
    if _sdk_error(exc, "APITimeoutError"):
        return "request timed out"
    cause = exc.__cause__ if _sdk_error(exc, "APIConnectionError") else exc
    if cause is not None and cause is not exc:
        return f"connection failed ({type(cause).__name__}: {cause})"
    return f"{type(exc).__name__}: {exc}"


def _message_in(body: Any) -> str | None:
    """The provider's message in an error reply's body (the SDK's ``body``: the reply's
    ``error`` object when it has one): ``error.message``, an ``error`` string, or
    ``message``; None when it holds none."""
    if not isinstance(body, dict):
        return None
    err = body.get("error", body)
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])
    if isinstance(err, str):
        return err
    if body.get("message"):
        return str(body["message"])
    return None


def _body_error(obj: Any) -> _BodyError | None:
    extra = getattr(obj, "model_extra", None) or {}
    err = extra.get("error")
    if not err:
        return None
    if isinstance(err, dict):
        code = err.get("code")
        status = code if isinstance(code, int) else None
        return _BodyError(status, str(err.get("message") or err))
    return _BodyError(None, str(err))


class _Fields:
    """A parsed JSON object read the way :meth:`OpenAIChatModel._read_completion` reads the
    SDK's models (``ChatCompletion.construct``, without building them: ~0.5 ms per reply):
    a field is an attribute (missing: None), an object a :class:`_Fields`, a list's items
    likewise; ``model_extra`` / ``model_dump()`` give the object's own dict."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        return _field(self._data.get(name))

    @property
    def model_extra(self) -> dict[str, Any]:
        return self._data

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return self._data


def _field(value: Any) -> Any:
    if isinstance(value, dict):
        return _Fields(value)
    if isinstance(value, list):
        return [_field(v) for v in value]
    return value


def completion_fields(completion: dict[str, Any]) -> Any:
    """A chat completion as parsed JSON, readable by :meth:`OpenAIChatModel._from_completion`
    as the SDK's ``ChatCompletion`` is (see :class:`_Fields`)."""
    return _Fields(completion)


def _extra_text(obj: Any, *names: str) -> str | None:
    """The first non-empty string attribute (declared or extra) among ``names``."""
    extra = getattr(obj, "model_extra", None) or {}
    for name in names:
        value = getattr(obj, name, None)
        if value is None:
            value = extra.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _args_text(arguments: Any) -> str:
    if arguments is None or arguments == "":
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


_LIVE_MODELS: weakref.WeakSet[OpenAIChatModel] = weakref.WeakSet()


async def aclose_all() -> None:
    """Close every model's HTTP client of the running event loop (end of a job, also after a
    Ctrl-C cancelled trials mid-request), so none is left to the garbage collector after the
    loop is gone (which prints "Event loop is closed" noise)."""
    for model in list(_LIVE_MODELS):
        with contextlib.suppress(Exception):
            await model.aclose()


class OpenAIChatModel:
    """A :class:`clawrig.llm.base.ChatModel` over an OpenAI-compatible chat-completions API.

    ``endpoint``: from :func:`clawrig.llm.providers.resolve_model`; ``retry``: the retry policy
    (default :class:`RetryPolicy`); ``stream``: use SSE streaming (with
    ``stream_options.include_usage``) and accumulate text, reasoning and tool-call deltas;
    ``timeout_s``: seconds per attempt (default: the endpoint's, else 600);
    ``max_reply_bytes``: a reply body larger than this many bytes fails the attempt
    (default :data:`MAX_REPLY_BYTES`).
    """

    notes_answers = True
    """Whether an answer is noted as the model answering (:func:`mark_answered`): not for the
    harness's own probe of a provider (``clawrig.runner.trial``), which says nothing of whether
    the model takes a trial's requests."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        *,
        retry: RetryPolicy | None = None,
        stream: bool = False,
        timeout_s: float | None = None,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        self.endpoint = endpoint
        self.max_reply_bytes = max_reply_bytes
        self.name = endpoint.name
        self.retry = retry or RetryPolicy()
        self.stream = stream
        self.timeout_s = timeout_s or endpoint.timeout_s or 600.0
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )
        _LIVE_MODELS.add(self)

    def __repr__(self) -> str:
        return f"OpenAIChatModel(name={self.name!r}, base_url={self.endpoint.base_url!r})"

    async def aclose(self) -> None:
        """Close this event loop's HTTP client (its connection pool). Idempotent; a later call
        opens a new one. Without it, a client left to the garbage collector after its loop
        closed prints "Event loop is closed" noise."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        client = self._clients.pop(loop, None)
        if client is not None:
            await client.close()
            # the SDK's client and its resources refer to each other: a cycle that held its
            # HTTP client and transport for the cyclic collector (a probe's model, one per
            # refused request: test_heap). Closed, it is never used again
            vars(client).clear()

    def _client(self) -> AsyncOpenAI:
        """One SDK client per event loop (httpx connection pools are bound to their loop)."""
        import openai

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            key = self.endpoint.api_key.get_secret_value() if self.endpoint.api_key else "EMPTY"
            client = openai.AsyncOpenAI(
                api_key=key,
                base_url=self.endpoint.base_url,
                max_retries=0,
                timeout=self.timeout_s,
                default_headers=self.endpoint.headers or None,
                http_client=openai.DefaultAsyncHttpxClient(
                    transport=capped_transport(self.max_reply_bytes)
                ),
            )
            self._clients[loop] = client
        return client

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> ChatResponse:
        """Send one chat-completions request (retrying as in the module docs).

        ``messages``: OpenAI chat dicts; ``tools``: OpenAI function tools; ``max_tokens``:
        completion tokens (default: the endpoint's); ``extra``: more request-body fields (e.g.
        ``tool_choice``, ``reasoning_effort``), merged over the endpoint's ``extra_body``.
        Raises ModelRequestError (400/401/403/404 ...) or ProviderRetriesExhausted.
        """
        # messages and tools travel in extra_body: the SDK otherwise walks them recursively
        # against its TypedDict annotations, ~10 ms of CPU per request with 17 tools; the JSON
        # on the wire is the same.
        params: dict[str, Any] = {"model": self.endpoint.model_id, "messages": []}
        body_extra: dict[str, Any] = {"messages": messages}
        if tools:
            body_extra["tools"] = tools
        if temperature is not None:
            params["temperature"] = temperature
        limit = max_tokens or self.endpoint.max_tokens
        if limit:
            params["max_tokens"] = limit
        params["extra_body"] = {**body_extra, **self.endpoint.extra_body, **(extra or {})}

        started = time.monotonic()
        attempts = 0
        watch = current_watch()  # the trial's: a provider silent past the agent's time

        async def attempt() -> ChatResponse:
            nonlocal attempts
            attempts += 1
            # waiting for a place of the provider's requests in flight: a harness wait
            async with provider_slot(self.endpoint.provider, self._concurrency()):
                with watch.request() if watch is not None else contextlib.nullcontext():
                    return await self._attempt(params)

        def retrying() -> AsyncRetrying:
            return AsyncRetrying(
                stop=stop_after_attempt(self.retry.attempts)
                | StopUnreached(self.retry, self.endpoint),
                wait=RetryWait(self.retry),
                retry=retry_if_exception(_retryable),
                reraise=True,
                sleep=provider_backoff,  # the trial's wait, not its time
            )

        try:
            response = await with_retries(retrying, attempt)
        except Exception as exc:
            failed: tuple[type[BaseException], ...] = (
                _BodyError,
                *_http_errors("TransportError"),
                TimeoutError,
            )
            if not isinstance(exc, failed) and not _sdk_error(exc, "APIError"):
                raise
            error = self._error(exc, attempts)
            if is_connect_failure(exc):
                mark_unreached(self.endpoint, str(error))
            try:
                raise error from None
            finally:  # its traceback holds this frame: a cycle through ``error`` that kept the
                del error  # whole trial (the agent loop's frames) until a full collection
        response.usage.retries = attempts - 1
        response.usage.elapsed_time = time.monotonic() - started
        if self.notes_answers:
            mark_answered(self.endpoint)
        return response

    def _concurrency(self) -> int | None:
        """The requests in flight this model's calls hold a place of (:func:`provider_slot`):
        its endpoint's ``max_concurrency``."""
        return self.endpoint.max_concurrency

    def has_answered(self) -> bool:
        """:func:`has_answered` of this model's endpoint."""
        return has_answered(self.endpoint)

    def where(self) -> str:
        """``provider (base URL)`` for messages: the server this model's requests are for."""
        return f"{self.endpoint.provider} ({self.endpoint.base_url})"

    def _error(self, exc: BaseException, attempts: int) -> Exception:
        ep = self.endpoint
        secret = ep.api_key.get_secret_value() if ep.api_key else None
        message = _one_line(_provider_message(exc), secret)
        status = _status_of(exc)
        where = self.where()
        with contextlib.suppress(TypeError, ValueError):
            attempts = max(attempts, int(_header(exc, UPSTREAM_ATTEMPTS_HEADER) or 0))
        if _retryable(exc):
            # the gateway's own 502 for an upstream that never answered is no server's status
            upstream = _header(exc, UPSTREAM_FAILURE_HEADER)
            if upstream is not None:
                status = None
            tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
            if upstream == "connect" or (upstream is None and is_connect_failure(exc)):
                line = f"{self.name}: could not connect to {where} {tries}: {message}"
            else:
                what = f"HTTP {status}" if status is not None else "no reply"
                line = f"{self.name}: {what} from {where} {tries}: {message}"
            return ProviderRetriesExhausted(line, attempts=attempts, status=status, detail=message)
        if status is None:
            return ModelRequestError(f"{self.name}: unusable reply from {where}: {message}")
        hint = ""
        if status in (401, 403) and ep.api_key_env:
            hint = f" (check {ep.api_key_env})"
        return ModelRequestError(
            f"{self.name}: HTTP {status} from {where}: {message}{hint}",
            status=status,
            detail=message,
        )

    async def _attempt(self, params: dict[str, Any]) -> ChatResponse:
        """One request. ``timeout_s`` bounds each read (the SDK's timeout), and the whole
        request is held to twice that: a provider sending a byte every few seconds never trips
        a per-read timeout and would hold the trial forever. A missed deadline raises
        TimeoutError: retried, then a provider (infrastructure) error."""
        began = time.monotonic()
        call = self._streamed(params) if self.stream else self._plain(params)
        async with asyncio.timeout(2 * self.timeout_s):
            response = await call
        response.latency_s = time.monotonic() - began
        return response

    async def _plain(self, params: dict[str, Any]) -> ChatResponse:
        completion = await self._client().chat.completions.create(**params)
        return self._from_completion(completion)

    def _from_completion(self, completion: Any) -> ChatResponse:
        """The :class:`ChatResponse` of an SDK ``ChatCompletion`` (raises _BodyError, a
        provider fault that is retried, for a reply without choices or of another shape: a
        null message, tool calls that are not a list, content that is not text)."""
        try:
            return self._read_completion(completion)
        except (AttributeError, TypeError, ValueError) as exc:  # ValidationError too
            raise _BodyError(None, f"a reply of the wrong shape: {_one_line(str(exc))}") from None

    def _read_completion(self, completion: Any) -> ChatResponse:
        if not completion.choices:
            raise _body_error(completion) or _BodyError(None, "reply has no choices")
        choice = completion.choices[0]
        message = choice.message
        calls: list[ToolCall] = []
        for index, tc in enumerate(message.tool_calls or []):
            fn = getattr(tc, "function", None)
            if fn is not None:
                name, arguments = fn.name, fn.arguments
            else:  # a "custom" tool call
                custom = getattr(tc, "custom", None)
                name, arguments = getattr(custom, "name", ""), getattr(custom, "input", "")
            calls.append(  # a call without a name is the model's: the tool layer says so to it
                ToolCall(
                    id=tc.id or f"call_{index}",
                    name=name if isinstance(name, str) else "",
                    arguments=_args_text(arguments),
                )
            )
        usage = completion.usage.model_dump(warnings=False) if completion.usage else None
        rejected: list[str] = []
        return ChatResponse(
            content=message.content,
            reasoning=_extra_text(message, "reasoning_content", "reasoning"),
            tool_calls=calls,
            finish_reason=choice.finish_reason or ("tool_calls" if calls else "stop"),
            usage=usage_from_openai(usage, self.endpoint.prices, rejected),
            model=completion.model or self.endpoint.model_id,
            provider=self.endpoint.provider,
            response_id=completion.id,
            usage_rejected=rejected,
        )

    async def _streamed(self, params: dict[str, Any]) -> ChatResponse:
        """The :class:`ChatResponse` of a streamed request (raises _BodyError, a provider fault
        that is retried, for a stream of the wrong shape: an event that is not JSON, not an
        object, or without a list of choices: as :meth:`_from_completion`)."""
        try:
            return await self._read_stream(params)
        except (AttributeError, TypeError, ValueError) as exc:  # JSONDecodeError too
            raise _BodyError(
                None, f"a streamed reply of the wrong shape: {_one_line(str(exc))}"
            ) from None

    async def _read_stream(self, params: dict[str, Any]) -> ChatResponse:
        stream = await self._client().chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}
        )
        content: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish: str | None = None
        usage: dict[str, Any] | None = None
        model = response_id = None
        async with stream:
            async for chunk in stream:
                if (err := _body_error(chunk)) is not None:
                    raise err
                response_id = response_id or chunk.id
                model = model or chunk.model
                if chunk.usage is not None:
                    usage = chunk.usage.model_dump(warnings=False)
                for choice in chunk.choices:
                    delta = choice.delta
                    if choice.finish_reason:
                        finish = choice.finish_reason
                    if delta is None:
                        continue
                    if delta.content or delta.tool_calls:
                        stall_progress()  # the provider is answering: not a stall
                    if delta.content:
                        content.append(delta.content)
                    if piece := _extra_text(delta, "reasoning_content", "reasoning"):
                        reasoning.append(piece)
                        stall_progress()
                    for tc in delta.tool_calls or []:
                        entry = calls.setdefault(tc.index, {"id": None, "name": "", "args": []})
                        if tc.id:
                            entry["id"] = tc.id
                        if tc.function is not None:
                            if tc.function.name and not entry["name"]:
                                entry["name"] = tc.function.name
                            if tc.function.arguments:
                                entry["args"].append(tc.function.arguments)
        if finish is None and not content and not calls:
            raise _BodyError(None, "stream ended without a reply")
        tool_calls = [
            ToolCall(
                id=entry["id"] or f"call_{index}",
                name=entry["name"],
                arguments=_args_text("".join(entry["args"])),
            )
            for index, entry in sorted(calls.items())
        ]
        rejected: list[str] = []
        return ChatResponse(
            content="".join(content) if content else None,
            reasoning="".join(reasoning) if reasoning else None,
            tool_calls=tool_calls,
            finish_reason=finish or ("tool_calls" if tool_calls else "stop"),
            usage=usage_from_openai(usage, self.endpoint.prices, rejected),
            model=model or self.endpoint.model_id,
            provider=self.endpoint.provider,
            response_id=response_id,
            usage_rejected=rejected,
        )


def get_model(
    name: str | None = None,
    settings: Settings | None = None,
    *,
    role: Role = "agent",
    retry: RetryPolicy | None = None,
    stream: bool = False,
    timeout_s: float | None = None,
) -> OpenAIChatModel:
    """The model a user named: ``resolve_model(name, settings, role=role)`` wrapped in an
    :class:`OpenAIChatModel`.

    ``name`` None uses ``DEFAULT_MODEL`` (``JUDGE_MODEL`` for ``role="judge"``); ``settings``
    None loads ``./.env``, ``./providers.yaml`` and the environment (:func:`load_settings`).
    Raises :class:`clawrig.errors.UserError` (one line) for an unusable name or settings.
    """
    endpoint = resolve_model(name, settings or load_settings(), role=role)
    return OpenAIChatModel(endpoint, retry=retry, stream=stream, timeout_s=timeout_s)
