"""A provider's ``max_concurrency`` holds for every request of the harness process: the model
gateway's over its sockets (a real OpenClaw, skills, graders calling a judge) and the harness's
own in process, one count for both (:func:`clawrig.llm.client.provider_semaphore`).

Against real things: the scripted model server on 127.0.0.1 (its own count of the requests it
is answering at once, ``max_in_flight``, is the measure), a started :class:`Gateway` (uvicorn in
its server thread, reached over its TCP listener and its unix socket with httpx, as OpenClaw's
forwarder would), and the in-process chat models the native agent uses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from clawrig.llm.client import PROBE, RetryPolicy, provider_answers, provider_semaphore
from clawrig.llm.gateway import Gateway, GatewayLease
from clawrig.llm.stalls import RequestWatch
from clawrig.testing.scripted_server import ScriptedServer, error, reply
from clawrig.waits import SharedSemaphore, WaitClock

RETRY = RetryPolicy(attempts=3, initial_s=0.001, max_s=0.01, retry_after_cap_s=2.0)


def echo(delay: float):
    """A responder: each request answered with its last message's text after ``delay`` s."""

    def respond(body: dict[str, Any]) -> Any:
        return reply(str(body["messages"][-1]["content"]), delay=delay)

    return respond


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    gw = Gateway(retry=RETRY).start()
    yield gw
    gw.stop()


def lease_on(
    gw: Gateway, srv: ScriptedServer, limit: int | None, trial: str = "t", **kw: Any
) -> GatewayLease:
    """A trial's lease on ``srv`` as provider ``limited`` with ``max_concurrency`` ``limit``
    (a lease takes at most 4 requests open at once over the sockets: MAX_IN_FLIGHT)."""
    endpoint = srv.endpoint("limited/m", max_concurrency=limit)
    return gw.open_trial(endpoint, trial_id=trial, **kw)


async def over_socket(lease: GatewayLease, text: str, *, unix: bool = False) -> str:
    """One chat request as a program in a sandbox sends it: over the gateway's TCP listener
    or its unix socket (what a sandbox's forwarder connects to), the lease's token as the
    API key. Returns the reply's text (raises for a status other than 200)."""
    if unix:
        transport = httpx.AsyncHTTPTransport(uds=str(lease.gateway.socket_path))
        base = "http://gateway/v1"
    else:
        transport = httpx.AsyncHTTPTransport()
        base = lease.host_base_url
    async with httpx.AsyncClient(transport=transport, timeout=30) as http:
        resp = await http.post(
            f"{base}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": text}]},
            headers={"authorization": f"Bearer {lease.token}"},
        )
    assert resp.status_code == 200, resp.text
    return str(resp.json()["choices"][0]["message"]["content"])


async def test_socket_requests_keep_the_providers_limit(scripted_server, gateway):
    """8 requests of 0.3 s at once (4 trials' 2 each) over the gateway's TCP listener and unix
    socket, with ``max_concurrency: 2``: the model server never answers more than 2 at once (it
    answered all 8 at once before: the gateway's requests had no limit), so they take 4
    rounds."""
    srv = scripted_server(responder=echo(0.3))
    leases = [lease_on(gateway, srv, 2, f"t{n}") for n in range(4)]
    began = time.monotonic()
    texts = await asyncio.gather(
        *(over_socket(leases[n % 4], f"q{n}", unix=n % 2 == 1) for n in range(8))
    )
    took = time.monotonic() - began
    assert sorted(texts) == sorted(f"q{n}" for n in range(8))
    assert srv.max_in_flight == 2
    assert took >= 4 * 0.3, took  # 8 requests, 2 at a time, 0.3 s each
    assert sum(lease.usage.request_count for lease in leases) == 8


async def test_no_limit_lets_socket_requests_overlap(scripted_server, gateway):
    """The same without ``max_concurrency``: the server sees them at once (the measure above
    can see more than 2)."""
    srv = scripted_server(responder=echo(0.3))
    leases = [lease_on(gateway, srv, None, f"t{n}") for n in range(3)]
    await asyncio.gather(*(over_socket(leases[n % 3], f"q{n}") for n in range(6)))
    assert srv.max_in_flight > 2


async def test_socket_and_in_process_requests_share_one_limit(scripted_server, gateway):
    """With ``max_concurrency: 2``, 4 requests over the gateway's socket (its server thread's
    event loop), 2 plain and 2 streamed requests of the in-process agent's chat model (this
    event loop) and 2 of a direct client to the same provider, all at once: never more than 2
    at the server together (each event loop had a semaphore of its own before: 2 + 2)."""
    srv = scripted_server(responder=echo(0.3))
    lease, sandboxed = lease_on(gateway, srv, 2, "native"), lease_on(gateway, srv, 2, "openclaw")
    plain = lease.chat_model()
    streamed = lease.chat_model(stream=True)
    direct = srv.chat_model("limited/other-model", max_concurrency=2)

    async def ask(model: Any, text: str) -> str:
        return str((await model.chat([{"role": "user", "content": text}])).content)

    calls = [over_socket(sandboxed, f"s{n}", unix=n == 0) for n in range(4)]
    calls += [ask(plain, "p0"), ask(plain, "p1"), ask(streamed, "t0"), ask(streamed, "t1")]
    calls += [ask(direct, "d0"), ask(direct, "d1")]
    texts = await asyncio.gather(*calls)
    for model in (plain, streamed, direct):
        await model.aclose()
    assert sorted(texts) == sorted(["s0", "s1", "s2", "s3", "p0", "p1", "t0", "t1", "d0", "d1"])
    assert srv.max_in_flight == 2


async def test_limit_one_and_an_in_process_request_do_not_deadlock(scripted_server, gateway):
    """``max_concurrency: 1``: the in-process agent's request holds the provider's place while
    the gateway serves it in its task (plain: handed over; streamed: through the gateway's app
    over httpx's ASGITransport) and takes no second one, and a chat model over the gateway's
    TCP listener takes none of its own (the gateway's thread takes it): each answers (a second
    place would wait forever for the first), and with socket requests at once the server still
    answers one at a time."""
    srv = scripted_server(responder=echo(0.2))
    lease, sandboxed = lease_on(gateway, srv, 1, "native"), lease_on(gateway, srv, 1, "openclaw")
    models = [lease.chat_model(), lease.chat_model(stream=True), lease.chat_model(in_process=False)]
    for n, model in enumerate(models):
        got = await asyncio.wait_for(model.chat([{"role": "user", "content": f"alone{n}"}]), 10)
        assert got.content == f"alone{n}"
    together = [m.chat([{"role": "user", "content": f"m{n}"}]) for n, m in enumerate(models)]
    socket_calls = [over_socket(sandboxed, "s0"), over_socket(sandboxed, "s1", unix=True)]
    answers = await asyncio.wait_for(asyncio.gather(*together, *socket_calls), 20)
    for model in models:
        await model.aclose()
    assert sorted(a if isinstance(a, str) else a.content for a in answers) == [
        "m0",
        "m1",
        "m2",
        "s0",
        "s1",
    ]
    assert srv.max_in_flight == 1


async def test_a_cancelled_waiter_frees_nothing_it_did_not_hold(scripted_server, gateway):
    """``max_concurrency: 1``: a socket request holds the place for 1 s; an in-process request
    waiting for it is cancelled; a third request sent right after must still wait for the first
    (a cancelled waiter that gave a place back would let it in: 2 at the server), and once all
    ended the provider's one place is free again (none leaked)."""
    srv = scripted_server(responder=echo(1.0))
    lease = lease_on(gateway, srv, 1)
    model = lease_on(gateway, srv, 1, "native").chat_model()
    first = asyncio.ensure_future(over_socket(lease, "first"))
    while not srv.requests:  # the first is at the server: it holds the place
        await asyncio.sleep(0.01)
    waiter = asyncio.ensure_future(model.chat([{"role": "user", "content": "cancelled"}]))
    await asyncio.sleep(0.2)
    sem = provider_semaphore("limited", 1)
    assert sem is not None and sem.locked()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    third = await over_socket(lease, "third")
    assert (await first, third) == ("first", "third")
    await model.aclose()
    assert [r["messages"][-1]["content"] for r in srv.requests] == ["first", "third"]
    assert srv.max_in_flight == 1
    assert sem.free == 1


async def test_a_retrys_back_off_holds_no_place(scripted_server, gateway):
    """``max_concurrency: 1``: a socket request answered 429 with Retry-After 0.8 s waits that
    long before its retry without holding the provider's place: another request is answered
    meanwhile (the server sees first, other, first again)."""
    srv = scripted_server([error(429, retry_after=0.8)], responder=echo(0.0))
    lease = lease_on(gateway, srv, 1)
    first = asyncio.ensure_future(over_socket(lease, "first"))
    while not srv.requests:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # its 429 came: it is waiting to retry
    began = time.monotonic()
    assert await over_socket(lease, "other") == "other"
    assert time.monotonic() - began < 0.6  # not behind the first's back-off
    assert await first == "first"
    assert [r["messages"][-1]["content"] for r in srv.requests] == ["first", "other", "first"]


async def test_a_socket_requests_wait_is_its_trials_harness_wait(scripted_server, gateway):
    """A trial's request over the gateway's socket waits ~1 s for the provider's only place
    (held by another trial's request): that wait is the trial's (its clock's ``model`` wait,
    told from the gateway's thread to this event loop), and the agent's deadline of 0.8 s moves
    by it: the request (1 s wait + 0.1 s answer) ends within it."""

    def respond(body: dict[str, Any]) -> Any:  # answered after the seconds it asks for
        return reply("ok", delay=float(body["messages"][-1]["content"]))

    srv = scripted_server(responder=respond)
    clock = WaitClock()
    token = clock.install()
    try:
        own = lease_on(gateway, srv, 1, "own", clock=clock)
        other = lease_on(gateway, srv, 1, "other")
        holder = asyncio.ensure_future(over_socket(other, "1.0"))
        while not srv.requests:
            await asyncio.sleep(0.01)
        began = time.monotonic()
        async with asyncio.timeout(0.8) as deadline:
            clock.deadline = deadline
            assert await over_socket(own, "0.1") == "ok"
        took = time.monotonic() - began
        clock.deadline = None
        assert await holder == "ok"
    finally:
        WaitClock.uninstall(token)
    assert took >= 0.9, took
    assert 0.8 <= clock.waits.model <= took, (clock.waits, took)
    assert clock.paused_s == pytest.approx(clock.waits.model)


def test_a_later_job_in_the_process_keeps_its_own_limit(scripted_server):
    """Two jobs one after the other in one process (``Job(config).run()`` twice, each its own
    event loop), the same provider name: the first with ``max_concurrency: 3``, the second
    with ``max_concurrency: 1``. The second's 3 requests at once reach its server one at a
    time (the first job's semaphore of 3 places was kept for the provider's name, and its
    requests went 3 at once)."""

    async def job(srv: ScriptedServer, limit: int) -> None:
        model = srv.chat_model("limited/m", max_concurrency=limit)
        msgs = [[{"role": "user", "content": f"q{n}"}] for n in range(3)]
        await asyncio.gather(*(model.chat(m) for m in msgs))
        await model.aclose()

    first, second = scripted_server(responder=echo(0.3)), scripted_server(responder=echo(0.3))
    asyncio.run(job(first, 3))
    asyncio.run(job(second, 1))
    assert first.max_in_flight == 3
    assert second.max_in_flight == 1


async def test_a_request_of_a_closed_trial_is_never_sent(scripted_server, gateway):
    """``max_concurrency: 1`` held by another request: a trial's socket request waits for the
    place; the trial ends meanwhile (its lease closed, as when its grader is stopped). When the
    place comes free the request is answered 401 (the closed token) and never reaches the
    provider (it was sent then, and paid for, with nobody to read it)."""
    srv = scripted_server(responder=echo(0.0))
    lease = lease_on(gateway, srv, 1, "ended")
    held = provider_semaphore("limited", 1)
    assert held is not None
    await held.acquire()
    transport = httpx.AsyncHTTPTransport(uds=str(gateway.socket_path))
    async with httpx.AsyncClient(transport=transport, timeout=30) as http:
        waiting = asyncio.ensure_future(
            http.post(
                "http://gateway/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "late"}]},
                headers={"authorization": f"Bearer {lease.token}"},
            )
        )
        for _ in range(200):  # until the gateway has it (counted as open on the lease)
            if lease.in_flight:
                break
            await asyncio.sleep(0.01)
        assert lease.in_flight
        gateway.close_trial(lease)
        held.release()
        resp = await waiting
    assert resp.status_code == 401
    assert srv.requests == []
    assert not lease.in_flight
    other = lease_on(gateway, srv, 1, "next")  # the place was given back
    assert await over_socket(other, "next") == "next"


def by_content(body: dict[str, Any]) -> Any:
    """A responder: a request whose last message is a number is answered after that many
    seconds, any other (the harness's probe) at once."""
    text = str(body["messages"][-1]["content"])
    try:
        delay = float(text)
    except ValueError:
        delay = 0.0
    return reply("ok", delay=delay)


async def test_the_stall_probe_takes_a_place_of_the_providers_limit(scripted_server, gateway):
    """``max_concurrency: 1`` held by another trial's request for 1 s: the harness's probe
    (:func:`provider_answers`, 0.5 s to answer) waits for the place, then is answered: True,
    though it waited longer than its 0.5 s (the wait is the harness's, not the provider's), and
    the server never had 2 requests at once (it had: the probe went straight upstream)."""
    srv = scripted_server(responder=by_content)
    holder = asyncio.ensure_future(over_socket(lease_on(gateway, srv, 1, "other"), "1.0"))
    while not srv.requests:
        await asyncio.sleep(0.01)
    clock = WaitClock()
    token = clock.install()
    try:
        began = time.monotonic()
        answered = await provider_answers(srv.endpoint("limited/m", max_concurrency=1), 0.5, 5.0)
        took = time.monotonic() - began
    finally:
        WaitClock.uninstall(token)
    assert await holder == "ok"
    assert answered
    assert took >= 0.8, took
    assert [r["messages"] for r in srv.requests][1:] == [PROBE]
    assert srv.max_in_flight == 1
    assert clock.waits.model >= 0.8, clock.waits  # the trial's harness wait


async def test_the_stall_probe_goes_ahead_of_waiting_requests(scripted_server, gateway):
    """``max_concurrency: 1``: one request at the server (0.6 s), another trial's request
    waiting for the place; the probe asked then gets the place first (the first place freed
    says the provider answers), and the waiting request follows it."""
    srv = scripted_server(responder=by_content)
    lease = lease_on(gateway, srv, 1, "other")
    first = asyncio.ensure_future(over_socket(lease, "0.6"))
    while not srv.requests:
        await asyncio.sleep(0.01)
    queued = asyncio.ensure_future(over_socket(lease, "0.0"))
    sem = provider_semaphore("limited", 1)
    assert sem is not None
    while "1 waiting" not in repr(sem):
        await asyncio.sleep(0.01)
    assert await provider_answers(srv.endpoint("limited/m", max_concurrency=1), 2.0, 2.0)
    assert (await first, await queued) == ("ok", "ok")
    said = [r["messages"][-1]["content"] for r in srv.requests]
    assert said == ["0.6", PROBE[-1]["content"], "0.0"]
    assert srv.max_in_flight == 1


async def test_a_stall_probe_with_no_place_freed_in_time_is_no_answer(scripted_server):
    """``max_concurrency: 1`` whose place stays held (no request of the provider ends): the
    probe waits its 0.4 s for a place and says False without sending anything, and holds no
    place after (the one place is free once its holder gives it back)."""
    srv = scripted_server(responder=by_content)
    sem = provider_semaphore("limited", 1)
    assert sem is not None
    await sem.acquire()
    began = time.monotonic()
    answered = await provider_answers(srv.endpoint("limited/m", max_concurrency=1), 5.0, 0.4)
    took = time.monotonic() - began
    sem.release()
    assert not answered
    assert 0.4 <= took < 2.0, took
    assert srv.requests == []
    assert sem.free == 1


async def test_a_requests_wait_for_a_place_is_not_the_providers_silence(scripted_server, gateway):
    """``max_concurrency: 1`` held 1 s by another trial's request: a grader's request to the
    judge (watched for stalls) waits for the place, then is answered after 0.4 s. Its silence,
    sampled all along, is the 0.4 s it was in flight upstream, not the 1.4 s since it reached
    the gateway (which made a trial timed out behind the limit look stalled: an extra probe
    request and an infrastructure verdict); answered, it is silent no more."""
    srv = scripted_server(responder=by_content)
    holder = asyncio.ensure_future(over_socket(lease_on(gateway, srv, 1, "other"), "1.0"))
    while not srv.requests:
        await asyncio.sleep(0.01)
    judged = lease_on(gateway, srv, 1, "judged", role="judge")
    own = asyncio.ensure_future(over_socket(judged, "0.4"))
    began, most = time.monotonic(), 0.0
    while not own.done():
        most = max(most, judged.watch.silent_s())
        await asyncio.sleep(0.02)
    took = time.monotonic() - began
    assert (await own, await holder) == ("ok", "ok")
    assert took >= 1.2, took
    assert 0.3 <= most <= 0.7, most
    assert judged.watch.silent_s() == 0.0
    assert srv.max_in_flight == 1


async def test_a_request_cut_off_while_waiting_for_a_place_was_never_silent():
    """A watched request waits for a place of a limit whose holder never gives it back and is
    cancelled there (the phase's deadline) after 0.3 s: cut off unanswered, its silence is the
    time before the wait (none), not the 0.3 s queued nor the time since."""
    watch, sem = RequestWatch(), SharedSemaphore(1)
    await sem.acquire()
    rid = watch.begin()

    async def queued() -> None:
        with watch.queued(rid):
            await sem.acquire()

    waiting = asyncio.ensure_future(queued())
    await asyncio.sleep(0.3)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0.2)
    assert watch.silent_s() < 0.05, watch.silent_s()
    assert sem.free == 0  # the cancelled waiter took nothing
