"""Harness waits: time a trial spends waiting on the harness, never counted toward its limits.

A trial waits on the harness for a sandbox-start slot, a grading slot, and (in the agent and
grading phases) a model-request slot (a provider's ``max_concurrency``). Those seconds are the
harness's congestion, not the agent's work: :class:`WaitClock` sums them per kind into the
trial's :class:`clawrig.spec.trial.HarnessWaits` (result.json ``waits``; the job summary's
``waits``), and moves the agent phase's deadline (an :func:`asyncio.timeout`) later by each wait
that happens while the agent runs, and the grader's limit by each wait while it runs (its judge
requests': :func:`clawrig.grading.programmatic.run_grader`), so the task's time limits measure
the agent and the grader.

While the agent or the grader runs, the event loop's own lateness counts too
(:func:`watch_loop`: the harness too busy to serve the trial). The runner sets the trial's
clock in a context variable (:func:`WaitClock.current`); code deep in the stack takes a slot
with :func:`slot`, which is a plain ``async with sem`` outside a trial. A slot of a
:class:`SharedSemaphore` (a provider's requests in flight, shared by the harness's event loop
and the model gateway's server thread) may be taken on another thread's event loop than the
trial's clock runs on: the clock is then told from there
(:meth:`asyncio.AbstractEventLoop.call_soon_threadsafe`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from clawrig.spec.trial import HarnessWaits

_CURRENT: contextvars.ContextVar[WaitClock | None] = contextvars.ContextVar(
    "clawrig_wait_clock", default=None
)


class SharedSemaphore:
    """A semaphore of ``value`` places shared by every thread and event loop of the process:
    :meth:`acquire` from a coroutine on any loop, :meth:`release` from any thread.

    ``asyncio.Semaphore`` belongs to one event loop; a provider's requests in flight are
    started both on the harness's loop and on the model gateway's server thread's loop, and one
    count must hold them all. A :class:`threading.Lock` guards the count and a FIFO of waiters,
    each a future of its own loop: :meth:`release` hands its place straight to the first waiter
    (woken with ``call_soon_threadsafe``), else adds it to the count, so a newcomer never takes
    a place ahead of one who waits. A waiter cancelled before its turn leaves the queue and
    takes nothing; one cancelled just after a place was handed to it passes that place on. A
    waiter whose loop has closed is skipped. Releasing more places than were taken raises
    ValueError."""

    class _Waiter:
        __slots__ = ("future", "granted", "loop")

        def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
            self.loop = loop
            self.future: asyncio.Future[None] = loop.create_future()
            self.granted = False

    def __init__(self, value: int) -> None:
        if value < 1:
            raise ValueError(f"a SharedSemaphore needs at least one place, not {value}")
        self.limit = value
        self._value = value
        self._waiters: collections.deque[SharedSemaphore._Waiter] = collections.deque()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        with self._lock:
            free, waiting = self._value, len(self._waiters)
        return f"<SharedSemaphore {free}/{self.limit} free, {waiting} waiting>"

    @property
    def free(self) -> int:
        """Places free now (0 while any waits)."""
        with self._lock:
            return self._value

    @property
    def waiting(self) -> int:
        """Acquirers waiting for a place now."""
        with self._lock:
            return len(self._waiters)

    def locked(self) -> bool:
        """True when an :meth:`acquire` now would wait."""
        with self._lock:
            return self._value == 0 or bool(self._waiters)

    def try_acquire(self) -> bool:
        """Take a place if one is free now (and no one waits for it); never waits."""
        with self._lock:
            if self._value > 0 and not self._waiters:
                self._value -= 1
                return True
            return False

    async def acquire(self, *, first: bool = False) -> bool:
        """Take a place, waiting for one in turn (FIFO; ``first``: ahead of every waiter, the
        next place freed is this one's). Returns True; raises CancelledError (holding no place)
        when cancelled while it waits."""
        if self.try_acquire():
            return True
        waiter = self._Waiter(asyncio.get_running_loop())
        with self._lock:
            if self._value > 0 and not self._waiters:  # freed meanwhile
                self._value -= 1
                return True
            if first:
                self._waiters.appendleft(waiter)
            else:
                self._waiters.append(waiter)
        try:
            await waiter.future
        except BaseException:
            with self._lock:
                granted = waiter.granted
                if not granted:
                    self._waiters.remove(waiter)
            if granted:  # handed a place as it was cancelled: the next one's
                self.release()
            raise
        return True

    def release(self) -> None:
        """Give a place back: to the first waiter whose loop runs, else to the count."""
        while True:
            with self._lock:
                if not self._waiters:
                    if self._value >= self.limit:
                        raise ValueError("SharedSemaphore released more often than acquired")
                    self._value += 1
                    return
                waiter = self._waiters.popleft()
                waiter.granted = True
            try:
                waiter.loop.call_soon_threadsafe(_wake, waiter.future)
                return
            except RuntimeError:  # its loop is closed: no one is left to take it
                continue

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


def _wake(future: asyncio.Future[None]) -> None:
    """A :class:`SharedSemaphore` waiter's turn (on its loop). A waiter cancelled meanwhile
    gives the place on itself (:meth:`SharedSemaphore.acquire`)."""
    if not future.done():
        future.set_result(None)


Slots = asyncio.Semaphore | SharedSemaphore
"""What :func:`slot` takes places of."""


class WaitClock:
    """One trial's harness waits (``waits``, seconds per kind) and the agent deadline they move.

    While a wait is in progress the agent's deadline is suspended; when it ends the deadline
    is put back, later by the time waited. Waits of one trial may overlap (sub-agents calling
    the model at once): the deadline moves by the time during which at least one was in
    progress, never by more.
    """

    def __init__(self) -> None:
        self.waits = HarnessWaits()
        self._deadline: asyncio.Timeout | None = None
        self.moved: list[asyncio.Timeout] = []
        """Other deadlines that waits move like the agent's (the trial's phase deadlines; add
        and remove them with :meth:`track` and :meth:`untrack`)."""
        self._owed = 0.0
        """Seconds :meth:`charge` recorded that the deadlines are not moved by yet."""
        self.postpone: Callable[[float | None], None] | None = None
        """A stop that is no asyncio deadline and that waits move too (the trial's sandbox's
        own whole-trial stop: :meth:`clawrig.sandbox.base.Sandbox.hold_stop` and
        ``postpone_stop``): called with None when a wait begins (hold the stop) and with the
        seconds waited when it ends or is charged (move it later by that and release it)."""
        self.paused_s = 0.0
        """Seconds during which at least one wait was in progress: what every deadline of the
        trial (its whole-trial deadline too) is moved by."""
        self._active = 0
        self._paused_at = 0.0
        self._paused_when: float | None = None
        self._moved_when: list[tuple[asyncio.Timeout, float]] = []
        self._holds: dict[Slots, int] = {}
        """Places of each semaphore the trial holds now (:func:`slot`; under :attr:`_holds_lock`:
        a :class:`SharedSemaphore`'s are taken on the gateway's thread too)."""
        self._holds_lock = threading.Lock()
        self._waits: dict[Slots, list[_Wait]] = {}
        """The trial's waits for a place of each semaphore in progress (:func:`_wait`; under
        :attr:`_holds_lock`)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop the trial's deadlines run on (set by :meth:`install` and
        :meth:`track`): a wait on another thread's loop is told to the clock there."""

    @staticmethod
    def current() -> WaitClock | None:
        """The clock of the trial running in this context, or None."""
        return _CURRENT.get()

    def install(self) -> contextvars.Token[WaitClock | None]:
        """Make this the clock of the current context (and of the tasks it starts); give the
        token to :meth:`uninstall` after."""
        self.loop = asyncio.get_running_loop()
        return _CURRENT.set(self)

    @staticmethod
    def uninstall(token: contextvars.Token[WaitClock | None]) -> None:
        """Undo :meth:`install`."""
        _CURRENT.reset(token)

    @property
    def deadline(self) -> asyncio.Timeout | None:
        """The agent phase's timeout while it runs (moved by waits), else None."""
        return self._deadline

    @deadline.setter
    def deadline(self, timeout: asyncio.Timeout | None) -> None:
        # what is owed is owed by the deadlines there were (the old one is done with)
        self._deadline = None
        self.settle()
        self._deadline = timeout

    def track(self, timeout: asyncio.Timeout) -> None:
        """Move ``timeout`` by the waits from now on, as the agent's deadline."""
        self.loop = asyncio.get_running_loop()
        self.settle()
        self.moved.append(timeout)

    def untrack(self, timeout: asyncio.Timeout) -> None:
        """Stop moving ``timeout`` (given to :meth:`track`; it may have ended)."""
        self.moved.remove(timeout)
        self.settle()

    def _timers(self) -> list[asyncio.Timeout]:
        return [*self.moved, *([self._deadline] if self._deadline is not None else [])]

    def charge(self, kind: str, seconds: float) -> None:
        """A wait that already happened (``seconds`` of ``kind``, e.g. the event loop too busy to
        serve the trial: :func:`watch_loop`): recorded, and every deadline and stop of the
        trial moved by it. Skipped while a slot wait is in progress (its deadlines are
        suspended; that wait covers the time).

        The deadlines and stops are moved in steps (:meth:`settle`): once :data:`SETTLE_S` is
        owed, or a deadline is due within what is owed plus :data:`SETTLE_S`, or the lateness
        ends (:func:`watch_loop`), or a wait begins. At -p 500 the loop watcher charges every
        trial several times a second; moving each timer each time (a new timer handle in the
        loop's heap) cost ~2 ms of the harness's CPU per trial."""
        if seconds <= 0 or self._active:
            return
        setattr(self.waits, kind, getattr(self.waits, kind) + seconds)
        self.paused_s += seconds
        self._owed += seconds
        if self._owed >= SETTLE_S or self._due_within(self._owed + SETTLE_S):
            self.settle()

    def _due_within(self, seconds: float) -> bool:
        """Whether a deadline of the trial is due within ``seconds`` (loop time)."""
        now: float | None = None
        for t in self._timers():
            when = t.when()
            if when is not None and not t.expired():
                if now is None:
                    now = asyncio.get_running_loop().time()
                if when - now <= seconds:
                    return True
        return False

    @property
    def waiting(self) -> bool:
        """Whether a wait of the trial is in progress now."""
        return self._active > 0

    @property
    def owed_s(self) -> float:
        """Seconds charged that the deadlines are not moved by yet (:meth:`charge`)."""
        return self._owed

    def settle(self) -> None:
        """Move every deadline of the trial (and its :attr:`postpone` stop) by what
        :meth:`charge` recorded since the last move."""
        owed, self._owed = self._owed, 0.0
        if owed <= 0:
            return
        for t in self._timers():
            when = t.when()
            if when is not None and not t.expired():
                with contextlib.suppress(RuntimeError):  # it ended: nothing left to move
                    t.reschedule(when + owed)
        if self.postpone is not None:
            self.postpone(owed)

    def _begin(self, at: float | None = None) -> None:
        """A wait begins (``at``: when, ``time.monotonic()``; default now)."""
        self.settle()
        self._active += 1
        if self._active > 1:
            return
        self._paused_at = time.monotonic() if at is None else at
        if self.postpone is not None:
            self.postpone(None)
        self._moved_when = [
            (t, when) for t in self.moved if not t.expired() and (when := t.when()) is not None
        ]
        for t, _ in self._moved_when:
            t.reschedule(None)
        deadline = self._deadline
        if deadline is not None and not deadline.expired() and deadline.when() is not None:
            self._paused_when = deadline.when()
            deadline.reschedule(None)

    def _end(self, kind: str, started: float, ended: float | None = None) -> None:
        """A wait of ``kind`` that began at ``started`` ends (at ``ended``; default now)."""
        now = time.monotonic() if ended is None else ended
        setattr(self.waits, kind, getattr(self.waits, kind) + (now - started))
        self._active -= 1
        if self._active > 0:
            return
        paused = now - self._paused_at
        self.paused_s += paused
        if self.postpone is not None:
            self.postpone(paused)
        for t, when in self._moved_when:
            if not t.expired():
                # a phase that ended meanwhile (its request's wait ended after it, told from
                # the gateway's thread): nothing left to move
                with contextlib.suppress(RuntimeError):
                    t.reschedule(when + paused)
        self._moved_when = []
        if self._paused_when is None:
            return
        when, self._paused_when = self._paused_when, None
        deadline = self._deadline
        if deadline is not None and not deadline.expired():
            deadline.reschedule(when + (now - self._paused_at))


class _Wait:
    """One wait of a trial for a place of a semaphore (:func:`_wait`). It is a harness wait
    (``counting``) while the trial holds no place of that semaphore: behind the trial's own
    request the queue is the trial's making (:func:`take_slot`). ``counting`` and ``changed``
    (when it last changed, ``time.monotonic()``) change under the clock's lock on any thread;
    ``applied`` is what the clock was told, on its own loop (:meth:`WaitClock._apply`)."""

    __slots__ = ("applied", "began", "changed", "counting", "kind")

    def __init__(self, kind: str, now: float) -> None:
        self.kind = kind
        self.counting = False
        self.applied = False
        self.changed = now
        self.began = now


def _apply(clock: WaitClock, wait: _Wait) -> None:
    """On the clock's loop: the wait's part in the clock (a harness wait in progress or not)
    made what it should be now, at the time it changed (any order of calls: each makes the
    clock agree with the wait's state)."""
    with clock._holds_lock:
        want, at, began = wait.counting, wait.changed, wait.began
        if want == wait.applied:
            return
        wait.applied = want
        if want:
            wait.began = at
    if want:
        clock._begin(at)
    else:
        clock._end(wait.kind, began, at)


def _tell(clock: WaitClock, wait: _Wait) -> None:
    """:func:`_apply` now on the clock's own loop, else on it (from another thread or loop)."""
    home = clock.loop
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if home is None or home is running:
        _apply(clock, wait)
        return
    with contextlib.suppress(RuntimeError):  # the trial's loop is closed: no one to tell
        home.call_soon_threadsafe(_apply, clock, wait)


class Held:
    """A place of a semaphore that :func:`take_slot` took: :meth:`release` gives it back (once;
    later calls do nothing), from the thread that took it or any other for a
    :class:`SharedSemaphore`. ``sem`` is None for a place of no semaphore (nothing to give)."""

    __slots__ = ("clock", "sem")

    def __init__(self, sem: Slots | None = None, clock: WaitClock | None = None) -> None:
        self.sem, self.clock = sem, clock

    def release(self) -> None:
        sem, self.sem = self.sem, None
        if sem is None:
            return
        sem.release()
        clock = self.clock
        if clock is not None:
            now = time.monotonic()
            with clock._holds_lock:
                if (left := clock._holds.pop(sem) - 1) > 0:
                    clock._holds[sem] = left
                # the trial holds no place now: its waits still in progress are the harness's
                resumed = [] if left > 0 else clock._waits.get(sem, [])
                resumed = [w for w in resumed if not w.counting]
                for wait in resumed:
                    wait.counting, wait.changed = True, now
            for wait in resumed:
                _tell(clock, wait)


async def _take_free(sem: Slots) -> bool:
    """Take a place of ``sem`` if one is free now (never waits)."""
    if isinstance(sem, SharedSemaphore):
        return sem.try_acquire()
    if sem.locked():
        return False
    await sem.acquire()  # free: returns at once (the loop runs nothing else meanwhile)
    return True


async def take_slot(
    sem: Slots | None, kind: str, clock: WaitClock | None = None, *, first: bool = False
) -> Held:
    """Take a place of ``sem`` (None: no limit, a :class:`Held` of nothing) and return it; give
    it back with :meth:`Held.release`. The time spent waiting for it is a harness wait of
    ``kind`` (a :class:`HarnessWaits` field) for ``clock`` (default: the current trial's
    :class:`WaitClock`, if any), during which the agent's deadline is suspended (and after which
    every stop of the trial is moved: :attr:`WaitClock.postpone`). On a thread whose event loop
    is not the clock's (the model gateway's server thread), the clock is told on its own loop
    (its deadlines are that loop's), with the times the wait began and ended here. ``first``:
    ahead of every waiter (:meth:`SharedSemaphore.acquire`; an ``asyncio.Semaphore``'s waiters
    keep their turn).

    Not while the trial itself holds a place of ``sem`` (an agent and its sub-agents calling
    the model at once): that queue is the agent's own making, and counted as the harness's it
    stood the deadline still for as long as the agent kept two requests going (an agent with a
    sub-agent ran 8 s past a 3 s limit, red team). Nor from the moment the trial takes one
    while the wait goes on: two requests queued behind other trials', the second waited on
    behind the first's place, and the deadline stood still while the first was answered (a
    grader's 8 s judge answer ran past its 2 s limit, red team). Raises CancelledError
    (holding no place) when cancelled while it waits."""
    if sem is None:
        return Held()
    clock = clock or _CURRENT.get()
    if clock is None:
        await _acquire(sem, first)
        return Held(sem)
    if not await _take_free(sem):
        await _wait(sem, kind, clock, first)
    now = time.monotonic()
    with clock._holds_lock:
        held = clock._holds.get(sem, 0)
        clock._holds[sem] = held + 1
        # the trial holds a place now: its other waits for one are behind its own request
        stopped = [w for w in clock._waits.get(sem, []) if w.counting] if held == 0 else []
        for wait in stopped:
            wait.counting, wait.changed = False, now
    for wait in stopped:
        _tell(clock, wait)
    return Held(sem, clock)


async def _acquire(sem: Slots, first: bool) -> None:
    """Wait for a place of ``sem`` (``first``: ahead of a :class:`SharedSemaphore`'s waiters)."""
    if first and isinstance(sem, SharedSemaphore):
        await sem.acquire(first=True)
    else:
        await sem.acquire()


async def _wait(sem: Slots, kind: str, clock: WaitClock, first: bool = False) -> None:
    """Wait for a place of ``sem``: a harness wait of ``kind`` for ``clock`` while the trial
    holds no place of ``sem`` (:class:`_Wait`; :func:`take_slot` and :meth:`Held.release`
    change that as the trial takes and gives back places meanwhile)."""
    wait = _Wait(kind, time.monotonic())
    with clock._holds_lock:
        wait.counting = clock._holds.get(sem, 0) == 0
        clock._waits.setdefault(sem, []).append(wait)
    _tell(clock, wait)
    try:
        await _acquire(sem, first)
    finally:
        with clock._holds_lock:
            waits = clock._waits.get(sem, [])
            waits.remove(wait)
            if not waits:
                clock._waits.pop(sem, None)
            if wait.counting:  # (else it stopped counting when it did: that time stands)
                wait.counting, wait.changed = False, time.monotonic()
        _tell(clock, wait)


async def provider_backoff(seconds: float, clock: WaitClock | None = None) -> None:
    """Sleep ``seconds``: a retry's back-off after the model's provider failed a request (a
    429, a 5xx, a dropped connection), as tenacity's ``sleep``. For ``clock`` (default: the
    current trial's :class:`WaitClock`) a wait of kind ``model``, the deadlines suspended and
    moved after: the provider's failure is not the agent's (or the grader's) time, and its
    retries end as the provider's infrastructure error, never as the trial's time limit (a
    429 whose back-off ran past the agent's limit scored it 0: helper-141). Without a clock,
    a plain sleep."""
    clock = clock or _CURRENT.get()
    if clock is None or seconds <= 0:
        await asyncio.sleep(seconds)
        return
    wait = _Wait("model", time.monotonic())
    wait.counting = True
    _tell(clock, wait)
    try:
        await asyncio.sleep(seconds)
    finally:
        wait.counting, wait.changed = False, time.monotonic()
        _tell(clock, wait)


@contextlib.asynccontextmanager
async def slot(
    sem: Slots | None,
    kind: str,
    clock: WaitClock | None = None,
) -> AsyncIterator[None]:
    """Hold a place of ``sem`` (None: no limit) for the body: :func:`take_slot` (the wait for
    it a harness wait of ``kind`` for ``clock``), given back when the body ends."""
    held = await take_slot(sem, kind, clock)
    try:
        yield
    finally:
        held.release()


_T = TypeVar("_T")
THREAD_START_GRACE_S = 5.0
"""Seconds a worker thread waits for the event loop to move the trial's deadlines before it
runs the call anyway (:func:`in_thread`)."""


async def in_thread(fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """``await asyncio.to_thread(fn, *args, **kwargs)`` for a trial's file work (the end state's
    walk, the disk's mount, copies): the time the call waits for one of the event loop's worker
    threads (busy with other trials' and the warm pool's work) is a harness wait (``thread``)
    of the current trial's :class:`WaitClock`, its deadlines suspended meanwhile and moved
    after, and ``fn`` starts only once they are moved (a deadline it reads, e.g. the phase's
    ``time.monotonic()`` end, is the moved one). Outside a trial it is plain ``to_thread``.
    Raises what ``fn`` raises."""
    call = functools.partial(fn, *args, **kwargs)
    clock = _CURRENT.get()
    if clock is None:
        return await asyncio.to_thread(call)
    loop = asyncio.get_running_loop()
    submitted = time.monotonic()
    moved = threading.Event()
    ended = False

    def end() -> None:
        nonlocal ended
        if not ended:
            ended = True
            clock._end("thread", submitted)
        moved.set()

    def run() -> _T:
        loop.call_soon_threadsafe(end)
        moved.wait(THREAD_START_GRACE_S)
        return call()

    clock._begin()
    try:
        return await asyncio.to_thread(run)
    finally:
        end()


SANDBOX_STARTS_PER_CPU = 32
"""Sandboxes starting at once, per CPU (at least 16): a start mostly waits (for its
supervisor's and forwarder's interpreters), so 16 at once on 2 cores left the CPU idle while
trials queued (200 trials at -p 200, 2 s per model call: 30% less wall time with 64 starts and
8 grading slots than with 16 and 2); a burst of hundreds at once would be all kernel work."""
GRADING_SLOTS_PER_CPU = 4
"""Trials grading at once, per CPU. Each grader runs in its own clean-room sandbox, so a slot
is much of the time a wait on that sandbox (the grader's interpreter starting, the verdict),
not CPU: with one slot per CPU the cores idled while graders queued (issue 19)."""


def harness_slots(cpus: int | None = None) -> tuple[asyncio.Semaphore, asyncio.Semaphore]:
    """A job's (sandbox-start, grading) slots for ``cpus`` CPUs (default: this machine's):
    ``max(16, 32 x cpus)`` and ``4 x cpus`` (:data:`SANDBOX_STARTS_PER_CPU`,
    :data:`GRADING_SLOTS_PER_CPU`). Time spent waiting for either is a harness wait."""
    n = cpus or os.cpu_count() or 2
    return (
        asyncio.Semaphore(max(16, SANDBOX_STARTS_PER_CPU * n)),
        asyncio.Semaphore(GRADING_SLOTS_PER_CPU * n),
    )


LAG_TICK_S = 0.1
"""How often :func:`watch_loop` looks at the event loop (seconds)."""
LAG_MIN_S = 0.05
"""Lateness of one look below which the loop counts as serving trials on time (seconds)."""
SETTLE_S = 1.0
"""Seconds of charged waits a trial's deadlines may not be moved by yet, and how far ahead of
a deadline they are moved at the latest (:meth:`WaitClock.charge`)."""
_WATCHERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWatcher] = (
    weakref.WeakKeyDictionary()
)


class _LoopWatcher:
    """An event loop's one watcher (:func:`watch_loop`): a timer that looks every
    :data:`LAG_TICK_S` while any clock is watched, and none otherwise. A timer, not a task:
    none is left pending when the loop stops with it armed (a task sleeping there was
    "destroyed but it is pending" when the RL bridge's loop thread ended with the process),
    and a clock watched again just after the last one left cannot start a second watcher
    charging every lateness twice (a sleeping task saw the clocks again and went on). A
    clock is charged only the part of a lateness since it was watched (helper-180: a stall
    just before a trial's phase began was charged to that phase, 2 s more for a 1 s limit)."""

    def __init__(self) -> None:
        self.clocks: dict[WaitClock, float] = {}  # -> when it was watched (the loop's time)
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = 0.0

    def add(self, clock: WaitClock, loop: asyncio.AbstractEventLoop) -> None:
        self.clocks[clock] = loop.time()
        if self._timer is None:
            self._arm(loop)

    def discard(self, clock: WaitClock) -> None:
        self.clocks.pop(clock, None)
        if not self.clocks and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        # (the loop is not held: it is the key of _WATCHERS, a weak one)
        self._armed_at = loop.time()
        self._timer = loop.call_later(LAG_TICK_S, self._look, loop)

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        late = now - self._armed_at - LAG_TICK_S
        self._timer = None
        if late > LAG_MIN_S:
            for clock, since in list(self.clocks.items()):
                if (its := min(late, now - since)) > 0:
                    clock.charge("loop", its)
        else:  # on time again: what the lateness owes every deadline is paid now
            for clock in list(self.clocks):
                if clock.owed_s:
                    clock.settle()
        if self.clocks:
            self._arm(loop)


@contextlib.contextmanager
def watch_loop(clock: WaitClock) -> Iterator[None]:
    """While the body runs, the event loop's lateness is a harness wait (``loop``) of
    ``clock``: one watcher per loop (:class:`_LoopWatcher`) looks every :data:`LAG_TICK_S`
    and charges how late it looked (beyond :data:`LAG_MIN_S`) to every watched clock
    (:meth:`WaitClock.charge`). A harness too busy to attend to a trial (hundreds of trials on
    a few cores) then does not use up the trial's time limit."""
    loop = asyncio.get_running_loop()
    watcher = _WATCHERS.get(loop)
    if watcher is None:
        watcher = _WATCHERS[loop] = _LoopWatcher()
    watcher.add(clock, loop)
    try:
        yield
    finally:
        watcher.discard(clock)
        clock.settle()
