"""WaitClock moves a trial's deadlines by the harness's lateness in steps (clawrig.waits)."""

from __future__ import annotations

import asyncio
import time

from clawrig import waits
from clawrig.waits import SETTLE_S, WaitClock


async def test_small_charges_are_owed_then_moved_once_in_full():
    loop = asyncio.get_running_loop()
    clock = WaitClock()
    async with asyncio.timeout(100.0) as deadline:
        clock.deadline = deadline
        when0 = deadline.when()
        assert when0 is not None
        for _ in range(4):
            clock.charge("loop", 0.2)  # 0.8 s owed: far from the deadline, under SETTLE_S
        assert deadline.when() == when0
        assert abs(clock.owed_s - 0.8) < 1e-9
        assert abs(clock.waits.loop - 0.8) < 1e-9 and abs(clock.paused_s - 0.8) < 1e-9
        clock.charge("loop", 0.3)  # 1.1 s owed: moved by all of it
        assert abs(deadline.when() - (when0 + 1.1)) < 1e-9
        assert clock.owed_s == 0.0
        assert loop.time() < deadline.when()
        clock.deadline = None


async def test_a_deadline_near_is_moved_at_once():
    clock = WaitClock()
    async with asyncio.timeout(SETTLE_S / 2) as deadline:
        clock.deadline = deadline
        when0 = deadline.when()
        assert when0 is not None
        clock.charge("loop", 0.06)  # due within what is owed + SETTLE_S: moved now
        assert abs(deadline.when() - (when0 + 0.06)) < 1e-9
        clock.deadline = None


async def test_what_is_owed_moves_only_the_deadlines_there_were():
    clock = WaitClock()
    async with asyncio.timeout(100.0) as first:
        clock.track(first)
        when_first = first.when()
        assert when_first is not None
        clock.charge("loop", 0.5)
        async with asyncio.timeout(100.0) as second:
            when_second = second.when()
            clock.track(second)  # the 0.5 s owed is the first's alone
            assert abs(first.when() - (when_first + 0.5)) < 1e-9
            assert second.when() == when_second
            clock.charge("loop", 0.25)
            clock.track(first)  # (tracked twice: a change of deadlines) the 0.25 s moves both
            clock.untrack(first)
            assert abs(second.when() - (when_second + 0.25)) < 1e-9
            assert abs(first.when() - (when_first + 0.75)) < 1e-9
            clock.charge("loop", 0.25)
        clock.untrack(second)  # ended: not moved (an ended timeout cannot be), the rest are
        assert second.when() == when_second + 0.25
        assert abs(first.when() - (when_first + 1.0)) < 1e-9
        clock.untrack(first)
        clock.deadline = first
        clock.charge("loop", 0.25)
    clock.deadline = None  # after it ended: no error


async def test_the_loop_watcher_pays_what_is_owed_once_the_loop_is_on_time(monkeypatch):
    """The event loop stalls 0.3 s (a late look: charged, under SETTLE_S, owed), then runs on
    time: the next on-time look moves the deadline by what was charged."""
    monkeypatch.setattr(waits, "LAG_TICK_S", 0.02)
    clock = WaitClock()
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(100.0) as deadline:
        clock.deadline = deadline
        when0 = deadline.when()
        assert when0 is not None
        with waits.watch_loop(clock):
            await asyncio.sleep(0.05)
            time.sleep(0.3)  # the loop stalled
            stalled_until = loop.time()
            while clock.waits.loop == 0.0:
                await asyncio.sleep(0.01)
            assert clock.waits.loop > 0.2, clock.waits  # the stall, less at most a look
            for _ in range(500):  # until a look is on time (the machine may be busy)
                if clock.owed_s == 0.0:
                    break
                await asyncio.sleep(0.01)
            assert clock.owed_s == 0.0
            assert abs(deadline.when() - (when0 + clock.waits.loop)) < 1e-9
            assert loop.time() > stalled_until
        clock.deadline = None


async def test_a_wait_that_ends_after_its_phase_ended_moves_nothing():
    """A phase deadline tracked by the clock ends (its ``async with`` left) while a wait that
    began in it is still in progress (a grader's judge request waiting for a provider's place
    on the gateway's thread, its grader stopped meanwhile): when that wait ends, the clock
    records it and moves nothing; it raised RuntimeError (a finished Timeout rescheduled) in
    the event loop's callback, and the clock's deadline bookkeeping stopped half way."""
    clock = WaitClock()
    async with asyncio.timeout(30) as phase:
        clock.track(phase)
        started = time.monotonic()
        clock._begin(started)
    clock.untrack(phase)
    clock._end("model", started, started + 2.0)
    assert clock.waits.model == 2.0
    assert not clock.waiting


async def test_a_clock_watched_again_at_once_is_charged_a_stall_once(monkeypatch):
    """The last watched clock leaves and another comes within a look (RL episodes one after
    another): one watcher still looks. A watcher task asleep when the clocks emptied saw the
    new clock on waking and went on beside the new one: each stall was charged twice."""
    monkeypatch.setattr(waits, "LAG_TICK_S", 0.05)
    first, second = WaitClock(), WaitClock()
    with waits.watch_loop(first):
        await asyncio.sleep(0.01)
    with waits.watch_loop(second):
        await asyncio.sleep(0.01)
        time.sleep(0.4)  # the loop stalls 0.4 s
        for _ in range(100):  # every look that could charge the stall has come
            await asyncio.sleep(0.01)
    # the one stall, less at most one look's tick and its allowed lateness
    assert 0.4 - 0.05 - waits.LAG_MIN_S <= second.waits.loop <= 0.4 + 0.05, second.waits


async def test_the_loop_watcher_leaves_no_task_behind():
    """Once no clock is watched nothing of the watcher is pending: a loop stopped then (the RL
    bridge's loop thread at the process's exit) said "Task was destroyed but it is pending"
    of a watcher asleep in it."""
    with waits.watch_loop(WaitClock()):
        await asyncio.sleep(0.01)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_a_clock_is_charged_only_the_lateness_since_it_was_watched(monkeypatch):
    """helper-180: the loop stalled 2 s while one clock was watched; a clock watched right
    after the stall was charged all of it (its 1 s limit moved to 3 s), as the look that
    came late was armed before it."""
    monkeypatch.setattr(waits, "LAG_TICK_S", 0.05)
    loop = asyncio.get_running_loop()
    before, after = WaitClock(), WaitClock()
    with waits.watch_loop(before):
        await asyncio.sleep(0.01)
        time.sleep(0.5)  # the loop stalls; the late look has not run yet
        watched = loop.time()
        with waits.watch_loop(after):
            await asyncio.sleep(0.2)
            looked = loop.time()
    assert before.waits.loop >= 0.5 - 0.05 - waits.LAG_MIN_S, before.waits
    assert after.waits.loop <= looked - watched, after.waits  # at most its own time watched
