"""Model requests in flight, and when a phase that ran out of time is the provider's fault.

A provider that hangs, or sends a byte every few seconds, never trips a per-read timeout and
can hold a request past the phase it runs in (the agent's time limit, the grader's). Ending such
a trial as the model's ``time_limit`` (a 0) or as a grader failure on the agent's end state
would count an outage against the model. The harness's own evidence decides instead: a
:class:`RequestWatch` notes when each model request began, when its reply last made progress
(a streamed chunk) and whether it was answered. When a phase runs out of time, the provider
**stalled** (an infrastructure error, retried by the job) if a request was still unanswered
after :func:`stall_limit_s` of silence: ``min(STALL_S, phase limit / 2)``, never below
:data:`STALL_MIN_S` (a phase shorter than that is too short to blame any provider), **and** the
provider does not answer the harness's own plain request either
(:func:`clawrig.llm.client.provider_answers` within :func:`probe_s`). A request that streams
tokens until the deadline (a model writing a long reply) is not silent: its time is the
model's. Nor is a request whose reader stopped reading: while the gateway waits for the client
to take a chunk (:meth:`RequestWatch.pause`) the silence clock stops: that wait is the
client's, not the provider's. Nor a request waiting for a place of its provider's
``max_concurrency`` (:meth:`RequestWatch.queued`): it is not in flight upstream yet, and that
wait is the harness's congestion (other trials' requests hold the places). And a provider that
answers the probe is up: the silent request was slow for what it asked (a model thinking long,
or a request an agent's program made to void its trial).

The agent's model calls are watched by the client (:class:`clawrig.llm.client.OpenAIChatModel`
reports to :func:`current_watch`, installed by the trial), the gateway's upstream calls by
each lease (:attr:`clawrig.llm.gateway.GatewayLease.watch`: OpenClaw's requests and a
grader's judge calls through the judge proxy).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
import time
from collections.abc import Iterator

__all__ = [
    "PROBE_S",
    "STALL_MIN_S",
    "STALL_S",
    "RequestWatch",
    "current_watch",
    "probe_s",
    "progress",
    "stall_limit_s",
    "watching",
]

STALL_S = 300.0
"""Seconds of silence after which a model request is the provider's stall, whatever the phase's
limit (a reply that takes five minutes to start is an outage, not a model's thinking)."""


STALL_MIN_S = 1.0
"""Seconds of silence below which no request is a stall, whatever the phase's limit: a task's
time limit of a microsecond made every honest trial's time limit a provider stall, unscored and
retried (helper-173), its probe given no time to answer."""


def stall_limit_s(phase_s: float) -> float:
    """Seconds of silence that make an unanswered request a stall in a phase of ``phase_s``
    seconds: ``min(STALL_S, phase_s / 2)``, at least :data:`STALL_MIN_S`."""
    return max(STALL_MIN_S, min(STALL_S, phase_s / 2))


PROBE_S = 20.0
"""Seconds, at most, the provider gets to answer the harness's probe once a request stalled."""


def probe_s(phase_s: float) -> float:
    """Seconds the provider gets to answer the probe in a phase of ``phase_s`` seconds:
    ``min(PROBE_S, stall_limit_s(phase_s))``."""
    return min(PROBE_S, stall_limit_s(phase_s))


class RequestWatch:
    """The model requests of one trial phase (thread-safe: the gateway updates it from its
    thread). :meth:`request` wraps one request; :meth:`silent_s` is the longest silence of a
    request still in flight or cut off unanswered (cancelled, e.g. by the phase's deadline)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._open: dict[int, float] = {}  # request -> when its reply last made progress
        self._paused: dict[int, float] = {}  # request -> since when it waits on its client
        self._cut_s = 0.0

    @contextlib.contextmanager
    def request(self) -> Iterator[int]:
        """Watch one request for the body; an exception (a cancellation too) leaves it
        unanswered (its silence counts), a normal exit answered."""
        rid = self.begin()
        token = _REQUEST.set((self, rid))
        answered = False
        try:
            yield rid
            answered = True
        finally:
            _REQUEST.reset(token)
            self.end(rid, answered=answered)

    def begin(self, rid: int | None = None) -> int:
        """Start watching request ``rid`` (default: a fresh id); returns its id."""
        rid = next(self._ids) if rid is None else rid
        with self._lock:
            self._open[rid] = time.monotonic()
        return rid

    def progress(self, rid: int) -> None:
        """Part of the reply arrived (a streamed chunk with content): the silence restarts."""
        with self._lock:
            if rid in self._open:
                self._open[rid] = time.monotonic()
                self._paused.pop(rid, None)

    def pause(self, rid: int) -> None:
        """Request ``rid`` waits on something other than the provider (the gateway waits for
        its client to take a chunk: backpressure, e.g. a reader that stopped reading; or for a
        place of the provider's ``max_concurrency``: :meth:`queued`): its silence clock stops
        until :meth:`resume`."""
        with self._lock:
            if rid in self._open:
                self._paused.setdefault(rid, time.monotonic())

    def resume(self, rid: int) -> None:
        """The wait of :meth:`pause` ended: the silence clock runs again from where it stopped."""
        with self._lock:
            since = self._paused.pop(rid, None)
            if since is not None and rid in self._open:
                self._open[rid] += time.monotonic() - since

    @contextlib.contextmanager
    def queued(self, rid: int) -> Iterator[None]:
        """Request ``rid`` waits for a place of its provider's ``max_concurrency`` for the body
        (:func:`clawrig.llm.client.take_provider_slot`): not in flight upstream, so its silence
        clock stops meanwhile (:meth:`pause`). Cut off there (an exception, a cancellation: the
        phase's deadline), it ends unanswered with the silence it had before the wait."""
        self.pause(rid)
        try:
            yield
        except BaseException:
            self.end(rid, answered=False)
            raise
        self.resume(rid)

    def _silence(self, rid: int, now: float) -> float:
        return self._paused.get(rid, now) - self._open[rid]

    def end(self, rid: int, *, answered: bool) -> None:
        with self._lock:
            if rid in self._open:
                if not answered:
                    self._cut_s = max(self._cut_s, self._silence(rid, time.monotonic()))
                del self._open[rid]
                self._paused.pop(rid, None)

    def silent_s(self) -> float:
        """Seconds: the longest silence of an unanswered request (in flight or cut off),
        not counting time spent waiting on its client or for a place of its provider's
        ``max_concurrency`` (:meth:`pause`)."""
        now = time.monotonic()
        with self._lock:
            return max([self._cut_s, *(self._silence(rid, now) for rid in self._open)])

    def stalled(self, phase_s: float) -> bool:
        """True when a request stayed silent for :func:`stall_limit_s` of ``phase_s``."""
        return self.silent_s() >= stall_limit_s(phase_s)


_REQUEST: contextvars.ContextVar[tuple[RequestWatch, int] | None] = contextvars.ContextVar(
    "clawrig_watched_request", default=None
)


def progress() -> None:
    """The reply of the request watched in this context made progress (a streamed chunk)."""
    current = _REQUEST.get()
    if current is not None:
        current[0].progress(current[1])


_CURRENT: contextvars.ContextVar[RequestWatch | None] = contextvars.ContextVar(
    "clawrig_request_watch", default=None
)


def current_watch() -> RequestWatch | None:
    """The watch of the trial phase running in this context (None outside one)."""
    return _CURRENT.get()


@contextlib.contextmanager
def watching(watch: RequestWatch) -> Iterator[RequestWatch]:
    """Make ``watch`` the current one for the body (and the tasks it starts)."""
    token = _CURRENT.set(watch)
    try:
        yield watch
    finally:
        _CURRENT.reset(token)
