""":class:`clawrig.waits.SharedSemaphore`: one count of places for every thread's event loop
(a provider's requests in flight, taken on the harness's loop and the model gateway's server
thread's loop), real event loops on real threads."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from clawrig.waits import SharedSemaphore


def test_waiters_on_two_loops_take_turns_and_never_exceed_the_limit():
    """Two places, 6 holders on this loop and 6 on another thread's loop, each holding 50 ms:
    never more than 2 held at once (counted by the holders), all 12 served, 2 free after."""
    sem = SharedSemaphore(2)
    lock = threading.Lock()
    held = [0, 0]  # now, most at once

    async def hold() -> None:
        async with sem:
            with lock:
                held[0] += 1
                held[1] = max(held[1], held[0])
            await asyncio.sleep(0.05)
            with lock:
                held[0] -= 1

    async def six() -> None:
        await asyncio.gather(*(hold() for _ in range(6)))

    thread = threading.Thread(target=asyncio.run, args=(six(),))
    thread.start()
    asyncio.run(six())
    thread.join(10)
    assert held == [0, 2]
    assert sem.free == 2


def test_a_place_handed_to_a_waiter_cancelled_at_once_goes_on():
    """The hand-off's race, on two threads' event loops: a waiter on another loop is handed the
    only place (release) and cancelled before it runs; it passes the place on, so the next
    waiter gets it and the count ends where it began."""
    sem = SharedSemaphore(1)
    order: list[str] = []

    async def main() -> None:
        await sem.acquire()
        other = asyncio.new_event_loop()
        ready = threading.Event()
        thread = threading.Thread(target=other.run_forever, daemon=True)
        thread.start()
        try:

            async def wait(name: str) -> None:
                ready.set()
                await sem.acquire()
                order.append(name)
                sem.release()

            doomed = asyncio.run_coroutine_threadsafe(wait("doomed"), other)
            ready.wait(5)
            while len(sem._waiters) < 1:
                await asyncio.sleep(0.001)
            later = asyncio.ensure_future(wait("later"))
            while len(sem._waiters) < 2:
                await asyncio.sleep(0.001)

            def hand_over_then_cancel() -> None:  # on the doomed waiter's loop: no step between
                sem.release()
                doomed.cancel()

            other.call_soon_threadsafe(hand_over_then_cancel)
            await asyncio.wait_for(later, 5)
            with pytest.raises(concurrent.futures.CancelledError):
                doomed.result(5)
        finally:
            other.call_soon_threadsafe(other.stop)
            thread.join(5)
            other.close()

    asyncio.run(main())
    assert order == ["later"]
    assert sem.free == 1
    with pytest.raises(ValueError):
        sem.release()
