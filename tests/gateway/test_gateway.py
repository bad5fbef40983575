"""The model gateway on loopback: forwarding (plain and SSE), per-trial usage and cost, budget
caps, recording, retries and replay, against the real scripted OpenAI-compatible server.

Expected numbers are worked out by hand from the scripted replies and the prices (USD per 1M
tokens), independently of the gateway's code.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os

import httpx
import pytest
from gw_helpers import REAL_KEY, upstream

from clawrig.errors import ModelRequestError
from clawrig.llm.client import provider_semaphore
from clawrig.llm.gateway import (
    RECORD_FILE,
    GatewayRefusal,
    ResponseCache,
    completion_from_chunks,
    read_records,
    request_key,
    sse_from_completion,
)
from clawrig.llm.pricing import Prices
from clawrig.llm.providers import ModelEndpoint
from clawrig.testing.scripted_server import call, error, reply, usage

PRICES = Prices(input=1.0, output=2.0, cache_read=0.5)
TOOLS = [{"type": "function", "function": {"name": "exec", "parameters": {"type": "object"}}}]


def sse_events(text: str) -> list[dict | str]:
    out: list[dict | str] = []
    for block in text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            data = block[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


async def test_forwards_with_the_real_key_and_counts_usage_per_trial(
    scripted_server, make_gateway, tmp_path
):
    srv = scripted_server(
        [
            reply(tool_calls=[call("exec", {"command": "ls"}, id="c1")], usage=usage(100, 20)),
            reply("done", usage=usage(50, 5, cached=10)),
        ]
    )
    gw = make_gateway()
    lease = gw.open_trial(
        upstream(srv, prices=PRICES), trial_id="t1", record_path=tmp_path / RECORD_FILE
    )
    model = lease.chat_model(stream=True)
    first = await model.chat([{"role": "user", "content": "hi"}], tools=TOOLS)
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("c1", "exec", '{"command": "ls"}')
    ]
    second = await lease.chat_model().chat([{"role": "user", "content": "again"}])
    assert second.content == "done"
    # the upstream saw the real key, the endpoint's model id, and usage asked for on the stream
    assert [h["authorization"] for h in srv.headers] == [f"Bearer {REAL_KEY}"] * 2
    assert [r["model"] for r in srv.requests] == ["scripted", "scripted"]
    assert srv.requests[0]["stream_options"] == {"include_usage": True}
    assert srv.requests[0]["tools"] == TOOLS
    # by hand: input 100 + (50 - 10 cached) = 140, output 25, cache read 10
    # cost = (100*1 + 20*2)/1e6 + (40*1 + 5*2 + 10*0.5)/1e6 = 140e-6 + 55e-6
    u = lease.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.total_tokens) == (
        140,
        25,
        10,
        175,
    )
    assert u.request_count == 2
    assert u.cost_usd == pytest.approx(195e-6)
    assert gw.spent_usd == pytest.approx(195e-6)
    # the client's own view of each call agrees with the gateway's
    assert first.usage.cost_usd + second.usage.cost_usd == pytest.approx(195e-6)


async def test_stream_passes_through_and_hides_usage_unless_asked(scripted_server, make_gateway):
    srv = scripted_server([reply("hello world", usage=usage(7, 3)), reply("x", usage=usage(7, 3))])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t")
    auth = {"Authorization": f"Bearer {lease.token}"}
    url = f"{gw.host_url}/v1/chat/completions"
    async with httpx.AsyncClient() as client:
        plain = await client.post(
            url,
            headers=auth,
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        )
        asked = await client.post(
            url,
            headers=auth,
            json={
                "model": "m",
                "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "hi"}],
            },
        )
    assert plain.headers["content-type"].startswith("text/event-stream")
    events = sse_events(plain.text)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    assert not any("usage" in c for c in chunks)  # the client did not ask for it
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "hello world"
    usage_chunks = [e for e in sse_events(asked.text) if isinstance(e, dict) and e.get("usage")]
    assert usage_chunks and usage_chunks[-1]["usage"]["prompt_tokens"] == 7
    # both were counted: 2 x (7 + 3)
    assert lease.usage.total_tokens == 20 and lease.usage.request_count == 2


async def test_unknown_and_closed_tokens_are_refused(scripted_server, make_gateway):
    srv = scripted_server(["x"])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient() as client:
        bad = await client.post(
            f"{gw.host_url}/v1/chat/completions", json=body, headers={"Authorization": "Bearer no"}
        )
        models = await client.get(f"{lease.host_base_url}/models")  # token in the path
        gw.close_trial(lease)
        closed = await client.post(f"{lease.host_base_url}/chat/completions", json=body)
    assert bad.status_code == 401 and "unknown or closed trial token" in bad.text
    assert [m["id"] for m in models.json()["data"]] == ["scripted"]
    assert closed.status_code == 401
    assert srv.requests == []


async def test_job_budget_refuses_once_spent(scripted_server, make_gateway):
    srv = scripted_server([reply("a", usage=usage(1000, 0)), reply("b", usage=usage(1000, 0))])
    gw = make_gateway(budget_usd=0.001)
    lease = gw.open_trial(upstream(srv, prices=Prices(input=1.0)), trial_id="t")
    model = lease.chat_model()
    await model.chat([{"role": "user", "content": "1"}])  # 1000 tokens x $1/1M = $0.001
    with pytest.raises(GatewayRefusal, match=r"budget of \$0.001 is spent") as refused:
        await model.chat([{"role": "user", "content": "2"}])
    assert refused.value.kind == "budget"
    assert len(srv.requests) == 1
    assert lease.refusals == ["budget"]
    other = gw.open_trial(upstream(srv), trial_id="t2")  # the cap is job-wide
    with pytest.raises(GatewayRefusal, match="HTTP 402"):
        await other.chat_model().chat([{"role": "user", "content": "3"}])


async def test_trial_caps_requests_and_tokens(scripted_server, make_gateway):
    srv = scripted_server([reply("a", usage=usage(30, 10)) for _ in range(4)])
    gw = make_gateway()
    turns = gw.open_trial(upstream(srv), trial_id="t", max_requests=2)
    for n in range(2):
        await turns.chat_model().chat([{"role": "user", "content": str(n)}])
    with pytest.raises(GatewayRefusal, match="limit of 2 model requests"):
        await turns.chat_model().chat([{"role": "user", "content": "x"}])
    tokens = gw.open_trial(upstream(srv), trial_id="u", max_tokens=40)
    await tokens.chat_model().chat([{"role": "user", "content": "y"}])  # 40 tokens used
    with pytest.raises(GatewayRefusal, match="token cap of 40"):
        await tokens.chat_model().chat([{"role": "user", "content": "z"}])
    assert (turns.refusals, tokens.refusals) == (["max_requests"], ["token_budget"])
    assert len(srv.requests) == 3


async def test_upstream_retries_then_reports_the_upstream_error(scripted_server, make_gateway):
    srv = scripted_server(
        [
            error(429, retry_after=0),
            reply("ok"),
            error(500, "boom"),
            error(500, "boom"),
            error(500, "still broken"),
        ]
    )
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t")
    ok = await lease.chat_model().chat([{"role": "user", "content": "1"}])
    assert ok.content == "ok"
    assert lease.usage.retries == 1 and lease.upstream_errors == []
    async with httpx.AsyncClient() as client:
        r = await client.post(
            f"{lease.host_base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "2"}]},
        )
    assert r.status_code == 500
    assert r.json()["error"]["message"] == "still broken"
    assert len(srv.requests) == 5  # 2 for the first call, 3 attempts for the second
    assert lease.upstream_errors == [
        f"scripted/scripted: HTTP 500 from scripted ({srv.base_url}) after 3 attempts: still broken"
    ]


async def test_records_every_call_compactly_and_rebuilds_whole_requests(
    scripted_server, make_gateway, tmp_path
):
    srv = scripted_server([reply(tool_calls=[call("exec", {"command": "ls"})]), reply("end")])
    gw = make_gateway()
    path = tmp_path / RECORD_FILE
    lease = gw.open_trial(upstream(srv), trial_id="t9", task_id="000015", record_path=path)
    model = lease.chat_model()
    sys_prompt = {"role": "system", "content": "S" * 5000}
    msgs = [sys_prompt, {"role": "user", "content": "go"}]
    first = await model.chat(msgs, tools=TOOLS)
    msgs2 = [
        *msgs,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": first.tool_calls[0].id,
                    "type": "function",
                    "function": {"name": "exec", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "a.txt"},
    ]
    await model.chat(msgs2, tools=TOOLS)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["seq"] for r in lines] == [1, 2]
    # the second line stores only the two new messages, on top of request 1
    assert lines[1]["base"] == {"seq": 1, "messages": 2}
    assert len(lines[1]["request"]["messages"]) == 2 and "tools" not in lines[1]["request"]
    assert len(path.read_text()) < 2 * 5000 + 4000
    records = read_records(path)
    assert records[1]["request"]["messages"] == msgs2
    assert records[1]["request"]["tools"] == TOOLS
    assert [r["key"] for r in records] == [
        request_key("scripted/scripted", r["request"]) for r in records
    ]
    assert records[0]["response"]["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "exec",
        "arguments": '{"command": "ls"}',
    }
    assert records[1]["response"]["choices"][0]["message"]["content"] == "end"
    assert [r["task_id"] for r in records] == ["000015", "000015"]
    assert records[1]["usage"]["total_tokens"] == 15


async def test_replay_answers_recorded_requests_without_any_server(
    scripted_server, make_gateway, tmp_path
):
    srv = scripted_server(
        [
            reply(tool_calls=[call("write", {"path": "a", "content": "x"})], usage=usage(40, 8)),
            reply("final", reasoning="because", usage=usage(60, 4)),
        ]
    )
    rec_gw = make_gateway()
    trial = tmp_path / "job" / "000015" / "m_20260101_0000_abcdef"
    lease = rec_gw.open_trial(
        upstream(srv), trial_id="x", task_id="000015", record_path=trial / RECORD_FILE
    )
    asked = [[{"role": "user", "content": "one"}], [{"role": "user", "content": "two"}]]
    modes = (True, False)
    live = [await lease.chat_model(stream=s).chat(m) for m, s in zip(asked, modes, strict=True)]
    srv.stop()  # no model server from here on
    # what the agent wrote (end_state/, task_output/) is not a record: a forged copy there
    # (another reply, another model) and a garbled judge log were read as recorded calls (a
    # red team's finding: the forged reply was served, a garbled file failed the replay)
    from clawrig.llm.gateway import recorded_models

    real = (trial / RECORD_FILE).read_text()
    forged = real.replace('"final"', '"FORGED"').replace('"scripted/', '"evil/')
    assert forged != real
    for planted in (trial / "end_state", trial / "task_output" / "deep" / "er"):
        planted.mkdir(parents=True)
        (planted / RECORD_FILE).write_text(forged)
        (planted / "judge_chat.jsonl").write_text("this is not json\n")
    assert recorded_models(tmp_path / "job") == {"agent": "scripted/scripted"}
    # the scan is kept while the files are unchanged: a copy of the same size with its
    # modification time restored (cp -p, rsync -a) is a change too
    record = trial / RECORD_FILE
    st = record.stat()
    record.write_text(real.replace('"scripted/scripted"', '"scripted/scriptex"'))
    os.utime(record, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert record.stat().st_size == st.st_size
    assert recorded_models(tmp_path / "job") == {"agent": "scripted/scriptex"}
    record.write_text(real)

    gw = make_gateway(cache=ResponseCache.from_job(tmp_path / "job"), cache_mode="only")
    again = gw.open_trial(upstream(srv), trial_id="y", task_id="000015")
    # served the other way round (stream vs plain) to show replay does not depend on it
    replayed = [
        await again.chat_model(stream=s).chat(m) for m, s in zip(asked, (False, True), strict=True)
    ]
    for a, b in zip(live, replayed, strict=True):
        assert (a.content, a.reasoning, a.tool_calls, a.finish_reason) == (
            b.content,
            b.reasoning,
            b.tool_calls,
            b.finish_reason,
        )
        assert a.response_id == b.response_id
        assert a.usage.total_tokens == b.usage.total_tokens
    assert again.usage.total_tokens == 48 + 64
    assert gw.spent_usd == 0.0  # cache hits cost nothing
    with pytest.raises(ModelRequestError, match="replay: no recorded response for request #3"):
        await again.chat_model().chat([{"role": "user", "content": "three"}])
    assert again.refusals == ["replay_miss"]


def test_cache_serves_in_order_prefers_the_same_scope_then_repeats_the_last():
    cache = ResponseCache()
    cache.add("k", {"id": "a"}, scope="t#0")
    cache.add("k", {"id": "b"}, scope="t#1")
    cache.add("k", {"id": "c"}, scope="t#1")
    assert cache.take("k", "t#1")["id"] == "b"
    assert cache.take("k", "t#0")["id"] == "a"
    assert cache.take("k", "t#0")["id"] == "c"  # none left in t#0: the next unserved one
    assert cache.take("k", "t#0")["id"] == "c"  # all served: the last one again
    assert cache.take("other") is None
    assert (cache.hits, cache.misses) == (4, 1)


def test_replay_of_a_folder_without_records_is_a_user_error(tmp_path):
    from clawrig.errors import UserError

    (tmp_path / "000001" / "trial").mkdir(parents=True)
    with pytest.raises(UserError, match="no recorded model calls"):
        ResponseCache.from_job(tmp_path)
    with pytest.raises(UserError, match="no such job or trial folder"):
        ResponseCache.from_job(tmp_path / "nope")
    bad = tmp_path / "000001" / "trial" / RECORD_FILE
    bad.write_text('{"seq": 1}\nnot json\n')
    with pytest.raises(UserError, match=rf"{RECORD_FILE}:2: recorded model calls: not a JSON"):
        ResponseCache.from_job(tmp_path)


def test_chunks_assemble_into_a_completion_and_stream_back():
    def args(piece: str) -> dict:
        tc = {"index": 0, "function": {"arguments": piece}}
        return {"choices": [{"delta": {"tool_calls": [tc]}}]}

    chunks = [
        {"id": "r1", "model": "m", "created": 5, "choices": [{"delta": {"role": "assistant"}}]},
        {"choices": [{"delta": {"reasoning_content": "thin"}}]},
        {"choices": [{"delta": {"reasoning_content": "k"}}]},
        {"choices": [{"delta": {"content": "He"}}]},
        {"choices": [{"delta": {"content": "llo"}}]},
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "c7", "function": {"name": "read", "arguments": ""}}
                        ]
                    }
                }
            ]
        },
        args('{"'),
        args('path":1}'),
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
    ]
    done = completion_from_chunks(chunks)
    msg = done["choices"][0]["message"]
    assert (done["id"], done["model"], done["created"]) == ("r1", "m", 5)
    assert (msg["content"], msg["reasoning_content"]) == ("Hello", "think")
    assert msg["tool_calls"] == [
        {"id": "c7", "type": "function", "function": {"name": "read", "arguments": '{"path":1}'}}
    ]
    assert done["choices"][0]["finish_reason"] == "tool_calls"
    assert done["usage"] == {"prompt_tokens": 3, "completion_tokens": 4}
    events = b"".join(sse_from_completion(done, include_usage=True)).decode()
    back = completion_from_chunks([e for e in sse_events(events) if isinstance(e, dict)])
    assert back == done
    no_usage = b"".join(sse_from_completion(done, include_usage=False)).decode()
    assert '"usage"' not in no_usage


async def test_replay_helpers_find_the_models_and_answer_without_settings(
    scripted_server, make_gateway, tmp_path
):
    from clawrig.grading.judge_proxy import upstream_endpoint
    from clawrig.llm.gateway import recorded_models, replay_gateway, replay_model

    srv = scripted_server([reply("agent says"), reply("judge says")])
    gw = make_gateway()
    folder = tmp_path / "job" / "t1" / "trial"
    agent = gw.open_trial(
        upstream(srv), trial_id="a", task_id="t1", record_path=folder / RECORD_FILE
    )
    judge = gw.open_trial(
        upstream(srv, "scripted/judge-2"),
        trial_id="a",
        role="judge",
        task_id="t1",
        record_path=folder / RECORD_FILE,
    )
    await agent.chat_model().chat([{"role": "user", "content": "q"}])
    await judge.chat_model().chat([{"role": "user", "content": "rate"}])
    srv.stop()
    assert recorded_models(tmp_path / "job") == {
        "agent": "scripted/scripted",
        "judge": "scripted/judge-2",
    }
    # a lease's model unwraps to the provider endpoint (never to the gateway itself)
    assert upstream_endpoint(agent.chat_model()).base_url == srv.base_url
    assert upstream_endpoint(object()) is None
    with replay_gateway(tmp_path / "job", retry=None) as rgw:
        a = rgw.open_trial(replay_model("scripted/scripted").endpoint, trial_id="x", task_id="t1")
        j = rgw.open_trial(
            replay_model("scripted/judge-2").endpoint, trial_id="x", role="judge", task_id="t1"
        )
        assert (await a.chat_model().chat([{"role": "user", "content": "q"}])).content == (
            "agent says"
        )
        assert (await j.chat_model().chat([{"role": "user", "content": "rate"}])).content == (
            "judge says"
        )


async def test_a_trials_leftover_requests_do_not_hold_the_next_trials_client(
    scripted_server, make_gateway
):
    # a red-team finding: close_trial gave a trial's upstream client back with its requests
    # still in flight, and the next trial got it (hundreds of slow leftovers filled its
    # connection cap: the next trial's first answer came 27 s late). It is lent again only
    # once they ended
    srv = scripted_server([reply("slow", delay=1.5), reply("b"), reply("c")])
    gw = make_gateway()
    leases = {}

    async def call_as(name: str) -> tuple[httpx.Response, object]:
        lease = leases[name] = gw.open_trial(upstream(srv), trial_id=name)
        url = f"{lease.host_base_url}/chat/completions"
        body = {"model": "m", "messages": [{"role": "user", "content": name}]}
        async with httpx.AsyncClient() as client:
            r = await client.post(url, json=body)
        return r, lease._upstream_client

    # its sandbox went away mid-request: the client leaves once the gateway has the request
    # upstream (a fixed 0.3 s client timeout could end before the gateway made its first upstream
    # client, aiohttp's import included, on a loaded machine: in_flight was still 0)
    first = asyncio.create_task(call_as("a"))
    for _ in range(1000):
        lease_a = leases.get("a")
        if lease_a is not None and lease_a.in_flight == 1 and lease_a._upstream_client:
            break
        await asyncio.sleep(0.01)
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await first
    a_client = leases["a"]._upstream_client
    assert leases["a"].in_flight == 1 and a_client is not None
    gw.close_trial(leases["a"])
    b, b_client = await call_as("b")
    assert b.status_code == 200 and b.json()["choices"][0]["message"]["content"] == "b"
    assert b_client is not a_client  # not lent while a's request is in flight
    gw.close_trial(leases["b"])
    await gw.settle(leases["a"], within_s=10)
    assert leases["a"].in_flight == 0
    c, c_client = await call_as("c")
    assert c.status_code == 200 and c_client is a_client  # lent again once a's request ended
    gw.close_trial(leases["c"])


async def test_a_request_whose_client_went_away_still_counts_once_settled(
    scripted_server, make_gateway
):
    # a lost Ray node: its request reached the gateway, then the node died. The provider still
    # answers and bills it, so the lease's usage, read after settle(), must include it
    srv = scripted_server([reply("late", usage=usage(1000, 0), delay=0.6)])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv, prices=Prices(input=1.0)), trial_id="t")
    url = f"{lease.host_base_url}/chat/completions"
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up (dies) mid-request
            await client.post(
                url,
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                timeout=0.3,
            )
    assert lease.in_flight == 1 and lease.requests == 1
    assert lease.usage.cost_usd == 0  # not answered yet: what close_trial alone would report
    gw.close_trial(lease)
    settled = await gw.settle(lease, within_s=10)
    assert lease.in_flight == 0
    assert settled.cost_usd == pytest.approx(1000 * 1.0 / 1e6)  # 1000 input tokens x $1/1M
    assert gw.spent_usd == pytest.approx(1e-3)


LAZY_SERVER = r"""
import sys, httpx
from clawrig.llm.gateway import Gateway
gw = Gateway().start()
before = ("fastapi" in sys.modules, "uvicorn" in sys.modules, gw.serving)
# the first connection (over the unix socket, as a sandbox's forwarder makes it) starts it
with httpx.Client(transport=httpx.HTTPTransport(uds=str(gw.socket_path))) as c:
    r = c.get("http://gateway/healthz", timeout=30)
after = ("fastapi" in sys.modules, gw.serving, r.status_code, r.text)
folder = gw.folder
gw.stop()
print(before, after, folder.exists(), gw.serving)
"""


def test_the_server_starts_at_the_first_connection_to_its_sockets():
    """A job whose sandboxes never call the gateway over its sockets never imports FastAPI or
    runs uvicorn (~0.35 s of CPU at every start); the first connection, waiting in the listen
    backlog, starts the server and is answered."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", LAZY_SERVER], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.strip().splitlines()[-1]
    assert line == "(False, False, False) (True, True, 200, 'ok') False False", line


async def test_a_trial_that_spent_its_share_of_the_job_budget_is_refused_as_its_own(
    scripted_server, make_gateway
):
    # blame follows control: once the job's $0.002 is spent, the trial that spent at least its
    # $0.001 share itself is refused as budget_share (graded); another trial (nothing spent)
    # as budget (cut short by the job: not scored)
    srv = scripted_server([reply(str(n), usage=usage(1000, 0)) for n in range(3)])
    gw = make_gateway(budget_usd=0.002, budget_share_usd=0.001)
    hog = gw.open_trial(upstream(srv, prices=Prices(input=1.0)), trial_id="hog")
    other = gw.open_trial(upstream(srv, prices=Prices(input=1.0)), trial_id="other")
    for n in range(2):  # 1000 tokens x $1/1M = $0.001 each
        await hog.chat_model().chat([{"role": "user", "content": str(n)}])
    with pytest.raises(GatewayRefusal, match=r"spent \$0.0020 of it, at least its share") as own:
        await hog.chat_model().chat([{"role": "user", "content": "x"}])
    with pytest.raises(GatewayRefusal, match=r"budget of \$0.002 is spent") as cut:
        await other.chat_model().chat([{"role": "user", "content": "y"}])
    assert (own.value.kind, cut.value.kind) == ("budget_share", "budget")
    assert (hog.refusals, other.refusals) == (["budget_share"], ["budget"])
    assert len(srv.requests) == 2
    # a trial's own cap comes first: over it and the job's budget, it is the trial's cap
    capped = gw.open_trial(upstream(srv), trial_id="capped", max_requests=0)
    with pytest.raises(GatewayRefusal, match="limit of 0 model requests"):
        await capped.chat_model().chat([{"role": "user", "content": "z"}])
    assert capped.refusals == ["max_requests"]


async def test_a_lease_has_at_most_four_requests_open_and_bodies_at_most_32_mib(
    scripted_server, make_gateway
):
    # a red-team finding: a program holding the trial's token sent 16 bodies of 48 MiB at once
    # and the harness held them all (2.9 GB). Four open requests per lease; the fifth and
    # sixth get a 429 before their body is read; a body over 32 MiB gets a 413
    srv = scripted_server([reply(f"slow{n}", delay=5.0) for n in range(4)] + [reply("after")])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t")
    url = f"{lease.host_base_url}/chat/completions"

    def body(n: int) -> dict:
        return {"model": "m", "messages": [{"role": "user", "content": str(n)}]}

    async with httpx.AsyncClient(timeout=60) as client:
        slow = [asyncio.create_task(client.post(url, json=body(n))) for n in range(4)]
        while len(srv.requests) < 4:  # the four are upstream, unanswered for 5 s
            await asyncio.sleep(0.05)
        over = [await client.post(url, json=body(n)) for n in (5, 6)]
        answered = await asyncio.gather(*slow)
        after = await client.post(url, json=body(7))  # a slot again once those ended
        big = await client.post(
            url, content=b"x" * (32 * 1024 * 1024 + 1), headers={"content-type": "text/plain"}
        )
        fits = await client.post(  # 32 MiB exactly is read (and is no JSON: a 400)
            url, content=b"x" * (32 * 1024 * 1024), headers={"content-type": "text/plain"}
        )
    assert [r.status_code for r in over] == [429, 429]
    assert "4 model requests open already" in over[0].text
    assert over[0].headers["retry-after"] == "1"
    assert [r.status_code for r in answered] == [200] * 4
    assert after.status_code == 200 and after.json()["choices"][0]["message"]["content"] == "after"
    assert big.status_code == 413 and "over 32 MiB" in big.text
    assert fits.status_code == 400
    assert len(srv.requests) == 5 and lease.busy_refused == 2


async def test_a_trials_record_file_keeps_bodies_up_to_its_cap(
    scripted_server, make_gateway, tmp_path, monkeypatch
):
    # a red-team finding: every body was recorded in full (369 MB in 60 s of a program's loop).
    # Past the cap (here 7,500 bytes) a record keeps usage, status and key; its bodies are
    # replaced by their size and SHA-256
    from clawrig.llm.gateway import server

    monkeypatch.setattr(server, "MAX_RECORD_BYTES", 7500)
    srv = scripted_server([reply(f"r{n}", usage=usage(10, 1)) for n in range(6)])
    gw = make_gateway()
    path = tmp_path / RECORD_FILE
    lease = gw.open_trial(upstream(srv, prices=PRICES), trial_id="t", record_path=path)
    bodies = [
        {"model": "m", "messages": [{"role": "user", "content": f"{n}" + "x" * 1500}]}
        for n in range(6)
    ]
    replies = []
    async with httpx.AsyncClient() as client:
        for b in bodies:
            r = await client.post(f"{lease.host_base_url}/chat/completions", json=b)
            assert r.status_code == 200
            replies.append(r.json())
    lines = path.read_bytes().splitlines(keepends=True)
    recs = [json.loads(line) for line in lines]
    whole = [r for r in recs if "omitted" not in r]
    assert len(recs) == 6 and len(whole) == 3  # ~2.4 KB a record: 3 fit in 7,500 bytes
    assert sum(len(line) for line in lines[:3]) <= 7500
    for rec, body, answer in zip(recs[3:], bodies[3:], replies[3:], strict=True):
        assert rec["request"] == {} and rec["response"] is None and rec["base"] is None
        sent = json.dumps(body, ensure_ascii=False).encode()
        got = json.dumps(answer, ensure_ascii=False).encode()
        assert rec["omitted"] == {
            "request": {"bytes": len(sent), "sha256": hashlib.sha256(sent).hexdigest()},
            "response": {"bytes": len(got), "sha256": hashlib.sha256(got).hexdigest()},
        }
    # the accounting stays exact: 6 x (10 x $1 + 1 x $2) / 1M
    assert [r["usage"]["total_tokens"] for r in recs] == [11] * 6
    assert lease.usage.cost_usd == pytest.approx(6 * 12e-6)
    assert [r["request"]["messages"][0]["content"][0] for r in read_records(path)[:3]] == list(
        "012"
    )


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_a_server_that_could_not_start_is_started_again_by_the_next_caller(
    scripted_server, make_gateway
):
    # a red-team finding: when the lazily started server could not start once (its 15 s under
    # load), every socket closed and every later trial of the job failed. Here its startup
    # (the app's lifespan, run for real by uvicorn) fails the first time only
    from contextlib import asynccontextmanager

    srv = scripted_server([reply("second caller")])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t")
    app = gw.app
    real = app.router.lifespan_context
    starts = []

    @asynccontextmanager
    async def flaky(a):
        starts.append(1)
        if len(starts) == 1:
            raise RuntimeError("startup failed once")
        async with real(a):
            yield

    app.router.lifespan_context = flaky
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    url = f"{lease.host_base_url}/chat/completions"
    async with httpx.AsyncClient(timeout=60) as client:
        with pytest.raises(httpx.TransportError):  # the caller waiting then: an error, no hang
            await client.post(url, json=body)
        # a caller that connects while the failed start still closes the connections waiting
        # then is one of them (under load the first caller's retry can be that quick: CI35):
        # the next one after it starts the server
        for _ in range(3):
            try:
                second = await client.post(url, json=body)
                break
            except httpx.TransportError:
                await asyncio.sleep(0.2)
    assert len(starts) == 2 and gw.serving
    assert second.status_code == 200
    assert second.json()["choices"][0]["message"]["content"] == "second caller"


async def test_a_judge_leases_waiting_requests_never_go_upstream_after_it_is_closed(
    scripted_server, make_gateway
):
    # a red-team finding: a judge lease's requests past MAX_IN_FLIGHT wait for a slot instead
    # of a 429; an agent's program the grader runs (it holds the judge token) queued requests
    # that, once grading ended and the token was revoked, still went to the judge (its real
    # key, spend after the trial's usage was taken). A request that waited past the close
    # gets the closed token's 401 and never reaches the judge
    srv = scripted_server([reply(f"slow{n}", delay=3.0) for n in range(4)] + [reply("late")] * 3)
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="j", role="judge")
    url = f"{lease.host_base_url}/chat/completions"

    def body(n: int) -> dict:
        return {"model": "m", "messages": [{"role": "user", "content": str(n)}]}

    async with httpx.AsyncClient(timeout=60) as client:
        slow = [asyncio.create_task(client.post(url, json=body(n))) for n in range(4)]
        while len(srv.requests) < 4:  # the four hold the lease's slots, unanswered for 3 s
            await asyncio.sleep(0.05)
        queued = [asyncio.create_task(client.post(url, json=body(n))) for n in range(4, 7)]
        slots = lease._route_slots
        while slots is None or len(slots._waiters or ()) < 3:  # the three wait for a slot
            await asyncio.sleep(0.05)
            slots = lease._route_slots
        gw.close_trial(lease)  # grading ended: the token is revoked
        answered = await asyncio.gather(*slow)
        late = await asyncio.gather(*queued)
    assert [r.status_code for r in answered] == [200] * 4
    assert [r.status_code for r in late] == [401] * 3
    assert "unknown or closed trial token" in late[0].text
    assert sorted(r["messages"][0]["content"] for r in srv.requests) == ["0", "1", "2", "3"]


async def test_request_bodies_no_provider_takes_get_a_400_not_a_500(scripted_server, make_gateway):
    # a red-team finding: a program holding the trial's token made the gateway fail with a 500
    # (an exception in the harness) with a body holding NaN, a number past a float (1e999), a
    # lone surrogate escape (no UTF-8 text holds it) or a stream_options that is no object
    srv = scripted_server([reply("fine")])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t")
    url = f"{lease.host_base_url}/chat/completions"
    user = '[{"role":"user","content":"x"}]'
    bodies = {
        f'{{"model":"m","temperature":NaN,"messages":{user}}}': "not JSON",
        f'{{"model":"m","max_tokens":1e999,"messages":{user}}}': "not JSON",
        '{"model":"m","messages":[{"role":"user","content":"a\\udcff"}]}': "lone surrogate",
        f'{{"model":"m","stream":true,"stream_options":"x","messages":{user}}}': "stream_options",
    }
    async with httpx.AsyncClient(timeout=60) as client:
        replies = [await client.post(url, content=b.encode()) for b in bodies]
        # a surrogate pair (an emoji as ensure_ascii JSON writes it) is text: it is sent
        pair = '{"model":"m","messages":[{"role":"user","content":"\\ud83d\\ude00"}]}'
        sent = await client.post(url, content=pair.encode())
    assert [r.status_code for r in replies] == [400] * 4, [r.text for r in replies]
    for r, why in zip(replies, bodies.values(), strict=True):
        assert why in r.json()["error"]["message"]
    assert sent.status_code == 200 and sent.json()["choices"][0]["message"]["content"] == "fine"
    assert [r["messages"][0]["content"] for r in srv.requests] == ["\U0001f600"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_leases_requests_cut_give_back_their_places(make_gateway, capfd, stream):
    # the harness's stall probe keeps the provider's max_concurrency and waits first in line
    # for a place; a trial's own silent request (an agent's program's, run by a grader) held
    # the only place, so the probe was never sent and the trial was voided as a stall (red
    # team). GatewayLease.cut_upstream ends the lease's requests in flight (waiting for the
    # reply's head, or a relayed stream stalled after its first chunk): each client gets an
    # answer or its stream's end, the place is free again, and the server logs no error
    opened: list[asyncio.StreamWriter] = []

    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        if stream:
            chunk = {"choices": [{"index": 0, "delta": {"content": "x"}}]}
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            line = f"data: {json.dumps(chunk)}\n\n".encode()
            writer.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            await writer.drain()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await reader.read()  # silent until the gateway closes the connection

    server = await asyncio.start_server(stall, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    provider = f"stalls{int(stream)}"
    endpoint = ModelEndpoint(
        name=f"{provider}/m",
        provider=provider,
        model_id="m",
        base_url=f"http://127.0.0.1:{port}/v1",
        max_concurrency=1,
    )
    gw = make_gateway()
    lease = gw.open_trial(endpoint, trial_id="j", role="judge")
    url = f"{lease.host_base_url}/chat/completions"
    body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    place = provider_semaphore(provider, 1)
    assert place is not None
    lines: list[str] = []

    async def ask(client: httpx.AsyncClient) -> httpx.Response:
        async with client.stream("POST", url, json=body) as resp:
            with contextlib.suppress(httpx.RemoteProtocolError):  # a stream cut: it ends short
                async for line in resp.aiter_lines():
                    lines.append(line)
        return resp

    async with httpx.AsyncClient(timeout=30) as client:
        asking = asyncio.create_task(ask(client))
        # upstream, holding the only place (a stream: its first chunk relayed)
        while lease.in_flight < 1 or place.free or (stream and not lines):
            await asyncio.sleep(0.02)
        assert lease.cut_upstream() == 1
        resp = await asyncio.wait_for(asking, 10)
    text = "\n".join(lines)
    server.close()
    if stream:
        assert resp.status_code == 200 and lines[0].startswith("data:"), lines
    else:
        assert resp.status_code == 504 and "cut" in text, text
    for _ in range(100):  # the place is given back as the cut request ends
        if place.free == 1:
            break
        await asyncio.sleep(0.02)
    assert place.free == 1 and lease.in_flight == 0
    assert lease.cut_upstream() == 0  # nothing left in flight
    if not stream:  # unanswered: its silence stands (a stream's first chunk was an answer)
        assert lease.watch.silent_s() > 0
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception in ASGI" not in err, err
