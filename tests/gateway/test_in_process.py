"""The native agent's in-process path to the gateway (a request handed over as a dict, the
reply object handed back) against the HTTP path (the SDK over the gateway's TCP listener): for
the same scripted server and the same requests, the same model_calls.jsonl records, the same
replies and the same errors, live and from a replay.

Each path gets its own gateway and its own scripted server with the same script, so sequence
numbers, call ids and usage line up; only what the server makes up per reply (``id``,
``created``) and the clocks (``ts``, ``latency_s``) differ.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from gw_helpers import upstream

from clawrig.errors import ModelRequestError
from clawrig.llm.gateway import RECORD_FILE, GatewayRefusal, read_records, replay_gateway
from clawrig.llm.pricing import Prices
from clawrig.testing.scripted_server import call, drop, error, reply, usage

PRICES = Prices(input=1.0, output=2.0, cache_read=0.5)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "exec",
            "description": "Run a command ünïcode",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def script() -> list[Any]:
    return [
        reply(
            tool_calls=[call("exec", {"command": "ls -l"}, id="c1"), call("exec", "{bad json")],
            reasoning="list first",
            usage=usage(100, 20, cached=10, cost=0.00125),
        ),
        reply("done: ✓", reasoning="all good", reasoning_key="reasoning", usage=usage(50, 5)),
        error(400, "the prompt is too long"),
        reply(None, usage=usage(7, 0, reasoning_tokens=3)),
    ]


def conversation() -> list[list[dict[str, Any]]]:
    """The requests, each the whole message list so far (as the agent sends them)."""
    first = [{"role": "system", "content": "S"}, {"role": "user", "content": "go"}]
    second = [
        *first,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "exec", "arguments": '{"command": "ls -l"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    ]
    third = [*second, {"role": "assistant", "content": "done: ✓"}, {"role": "user", "content": "x"}]
    return [first, second, third, [*third, {"role": "user", "content": "y"}]]


async def run_path(gw: Any, endpoint: Any, folder: Path, in_process: bool) -> list[Any]:
    """Every request of :func:`conversation` (and one past the trial's cap of 4) through one
    lease; returns the replies and the errors' (type, message)."""
    lease = gw.open_trial(
        endpoint,
        trial_id="t1",
        task_id="task_a",
        run_index=2,
        record_path=folder / RECORD_FILE,
        max_requests=4,
    )
    model = lease.chat_model(in_process=in_process)
    out: list[Any] = []
    for messages in [*conversation(), [{"role": "user", "content": "over the cap"}]]:
        try:
            out.append(await model.chat(messages, tools=TOOLS, max_tokens=64))
        except (ModelRequestError, GatewayRefusal) as exc:
            out.append((type(exc).__name__, str(exc)))
    await model.aclose()
    gw.close_trial(lease)
    assert lease.usage.request_count == 3  # two answered, the last one empty; caps refused
    return out


def comparable_reply(r: Any, record: dict[str, Any] | None, base_url: str) -> Any:
    if isinstance(r, tuple):
        return r[0], r[1].replace(base_url, "<upstream>")
    assert record is not None and r.response_id == record["response"]["id"]
    return r.model_dump(exclude={"latency_s": True, "response_id": True, "usage": {"elapsed_time"}})


def comparable_records(path: Path, base_url: str) -> list[dict[str, Any]]:
    """The record file's lines as written, without the clocks and what the server made up
    (its address in error messages too)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line.replace(base_url, "<upstream>"))
        assert isinstance(rec.pop("ts"), float) and isinstance(rec.pop("latency_s"), float)
        if rec["response"] is not None:
            assert rec["response"].pop("id").startswith("chatcmpl-")
            assert isinstance(rec["response"].pop("created"), int)
        out.append(rec)
    return out


async def test_in_process_calls_record_and_answer_as_the_http_path(
    scripted_server, make_gateway, tmp_path
):
    runs = {}
    for in_process in (True, False):
        srv = scripted_server(script())
        folder = tmp_path / ("in-process" if in_process else "http")
        gw = make_gateway()
        replies = await run_path(gw, upstream(srv, prices=PRICES), folder, in_process)
        runs[in_process] = (replies, folder, srv.base_url)
    (fast, fast_dir, fast_url), (http, http_dir, http_url) = runs[True], runs[False]
    fast_records = comparable_records(fast_dir / RECORD_FILE, fast_url)
    assert fast_records == comparable_records(http_dir / RECORD_FILE, http_url)
    assert len(fast_records) == 5
    assert [r["status"] for r in fast_records] == [200, 200, 400, 200, 402]
    # worked out from the script: 90 input + 10 cache-read tokens at $1 / $0.5 per 1M and 20
    # output at $2 per 1M would be $0.000135, but the provider's own cost is used when sent
    assert fast_records[0]["usage"]["cost_usd"] == pytest.approx(0.00125)
    assert fast_records[1]["request"]["messages"][-1]["content"] == "a.txt"  # a delta
    whole = read_records(fast_dir / RECORD_FILE)
    assert whole[3]["request"]["messages"] == conversation()[3]
    assert whole[3]["request"]["tools"] == TOOLS
    by_seq = {r["seq"]: r for r in read_records(fast_dir / RECORD_FILE)}
    http_records = read_records(http_dir / RECORD_FILE)
    assert [comparable_reply(r, by_seq.get(n), fast_url) for n, r in enumerate(fast, 1)] == [
        comparable_reply(r, rec, http_url) for r, rec in zip(http, http_records, strict=True)
    ]
    first, second, bad, empty, capped = fast
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("c1", "exec", '{"command": "ls -l"}'),
        ("call_1", "exec", "{bad json"),
    ]
    assert (first.reasoning, first.finish_reason) == ("list first", "tool_calls")
    assert (second.content, second.reasoning) == ("done: ✓", "all good")
    assert bad[0] == "ModelRequestError" and "HTTP 400" in bad[1]
    assert "the prompt is too long" in bad[1]
    assert (empty.content, empty.finish_reason, empty.usage.output_tokens) == (None, "stop", 0)
    assert capped[0] == "GatewayRefusal" and "limit of 4 model requests" in capped[1]

    # a replay of the recorded trial answers both paths from the records alike
    replayed = {}
    for in_process in (True, False):
        gw = replay_gateway(fast_dir, what="TRIAL_DIR").start()
        try:
            folder = tmp_path / f"replay-{in_process}"
            lease = gw.open_trial(
                upstream(srv, prices=PRICES),
                trial_id="t1",
                task_id="task_a",
                run_index=2,
                record_path=folder / RECORD_FILE,
            )
            model = lease.chat_model(in_process=in_process)
            again = [await model.chat(m, tools=TOOLS, max_tokens=64) for m in conversation()[:2]]
            await model.aclose()
            replayed[in_process] = (again, comparable_records(folder / RECORD_FILE, srv.base_url))
        finally:
            gw.stop()
    assert replayed[True][1] == replayed[False][1]
    assert [r["cached"] for r in replayed[True][1]] == [True, True]
    assert [r.model_dump(exclude={"latency_s", "usage"}) for r in replayed[True][0]] == [
        r.model_dump(exclude={"latency_s", "usage"}) for r in replayed[False][0]
    ]
    assert replayed[True][0][1].content == "done: ✓"


async def test_trials_sending_equal_tool_lists_get_their_exact_json(
    scripted_server, make_gateway, tmp_path
):
    # three trials' tool lists: two equal (distinct objects), one that differs only in a
    # value's JSON type (1 where the others say true: equal in Python, not in JSON)
    strict = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "strict": True}}]
    same = json.loads(json.dumps(strict))
    numeric = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "strict": 1}}]
    assert strict == same == numeric and strict is not same
    srv = scripted_server([reply("a"), reply("b"), reply("c"), reply("d")])
    gw = make_gateway()
    keys = []
    for n, tools in enumerate([strict, same, numeric, strict]):
        lease = gw.open_trial(upstream(srv), trial_id=f"t{n}", record_path=tmp_path / f"{n}.jsonl")
        model = lease.chat_model()
        await model.chat([{"role": "user", "content": "go"}], tools=tools)
        await model.aclose()
        gw.close_trial(lease)
        keys.append(read_records(tmp_path / f"{n}.jsonl")[0]["key"])
    sent = [json.dumps(r["tools"]) for r in srv.requests]
    assert sent == [json.dumps(t) for t in (strict, same, numeric, strict)]
    assert '"strict": 1' in sent[2] and '"strict": true' in sent[0]
    assert keys[0] == keys[1] == keys[3] != keys[2]


async def test_a_jobs_trials_share_one_upstream_connection(scripted_server, make_gateway):
    # within Gateway.shared_upstream (a job), each trial's model (made and closed per trial)
    # sends over the job's one kept-alive connection; outside it, each model has its own
    srv = scripted_server([reply(str(n)) for n in range(6)])
    gw = make_gateway()

    async def trial(n: int) -> str:
        lease = gw.open_trial(upstream(srv), trial_id=f"t{n}")
        model = lease.chat_model()
        try:
            return (await model.chat([{"role": "user", "content": "go"}])).content
        finally:
            await model.aclose()
            gw.close_trial(lease)

    async with gw.shared_upstream():
        shared = [await trial(n) for n in range(3)]
    alone = [await trial(n) for n in range(3, 6)]
    assert shared + alone == ["0", "1", "2", "3", "4", "5"]
    ports = srv.peers
    assert None not in ports and len(set(ports[:3])) == 1
    assert len(set(ports[3:])) == 3 and ports[0] not in ports[3:]


async def test_a_jobs_trials_at_once_each_borrow_a_client_of_their_own(
    scripted_server, make_gateway
):
    # trials alive at once never share a client (one pool scanned per request for all the
    # job's connections cost each request CPU in proportion to the trials alive): a trial
    # calling while another's model is open connects anew, though the other's connection is
    # idle (a shared client would reuse it); a trial after them gets one of theirs back
    srv = scripted_server([reply(str(n)) for n in range(4)])
    gw = make_gateway()
    leases = [gw.open_trial(upstream(srv), trial_id=f"t{n}") for n in range(3)]
    models = [lease.chat_model() for lease in leases]
    go = [{"role": "user", "content": "go"}]
    async with gw.shared_upstream():
        first = (await models[0].chat(go)).content
        second = (await models[1].chat(go)).content  # the first's model still open
        again = (await models[0].chat(go)).content
        for model in models[:2]:
            await model.aclose()
        later = (await models[2].chat(go)).content
        await models[2].aclose()
    for lease in leases:
        gw.close_trial(lease)
    assert [first, second, again, later] == ["0", "1", "2", "3"]
    ports = srv.peers
    assert None not in ports
    assert ports[0] != ports[1]  # at once: a connection each
    assert ports[2] == ports[0]  # a trial's calls keep its connection
    assert ports[3] in ports[:2]  # a later trial reuses a kept one


async def test_leases_over_the_socket_each_borrow_a_client_of_their_own(
    scripted_server, make_gateway
):
    # over the gateway's TCP listener (OpenClaw's way): the same rule per lease; a lease
    # closed gives its client back, with its connection, to the next
    srv = scripted_server([reply(str(n)) for n in range(4)])
    gw = make_gateway()
    leases = [gw.open_trial(upstream(srv), trial_id=f"s{n}") for n in range(3)]
    models = [lease.chat_model(in_process=False) for lease in leases]
    go = [{"role": "user", "content": "go"}]
    first = (await models[0].chat(go)).content
    second = (await models[1].chat(go)).content  # the first lease still open
    again = (await models[0].chat(go)).content
    for lease in leases[:2]:
        gw.close_trial(lease)
    later = (await models[2].chat(go)).content
    gw.close_trial(leases[2])
    for model in models:
        await model.aclose()
    assert [first, second, again, later] == ["0", "1", "2", "3"]
    ports = srv.peers
    assert None not in ports
    assert ports[0] != ports[1] and ports[2] == ports[0] and ports[3] in ports[:2]


async def test_a_trials_requests_send_and_key_each_conversation_as_its_whole_json(
    scripted_server, make_gateway, tmp_path
):
    # one trial's growing conversation, in process: what the server received and each
    # record's key are those of the whole message list, also when a message is replaced by
    # one equal in Python but not in JSON (1.0 for 1), changed in its place, or dropped
    srv = scripted_server([reply(str(n)) for n in range(6)])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t", record_path=tmp_path / "calls.jsonl")
    model = lease.chat_model()
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go ü", "n": 1}]
    sent: list[list[dict[str, Any]]] = []

    async def send() -> None:
        sent.append(json.loads(json.dumps(msgs)))  # the list as it is now, by value
        await model.chat(msgs, tools=TOOLS)

    await send()
    msgs.append({"role": "assistant", "content": "a"})
    await send()
    msgs[0] = {"role": "user", "content": "go ü", "n": 1.0}  # == the old one, JSON differs
    await send()
    msgs[1] = {"role": "assistant", "content": "changed"}
    msgs.append({"role": "user", "content": "more"})
    await send()
    del msgs[1]
    await send()
    await model.aclose()
    gw.close_trial(lease)
    got = [r["messages"] for r in srv.requests]
    assert [json.dumps(m) for m in got] == [json.dumps(m) for m in sent]
    assert '"n": 1.0' in json.dumps(got[2]) and '"n": 1}' in json.dumps(got[1])
    keys = [r["key"] for r in read_records(tmp_path / "calls.jsonl")]
    want = []
    for received in srv.requests:  # the key's formula by hand: SHA-256 of the sorted JSON
        kept = {k: v for k, v in received.items() if k not in ("model", "stream")}
        blob = json.dumps(
            {"model": lease.model_name, "body": kept}, sort_keys=True, ensure_ascii=False
        )
        want.append(hashlib.sha256(blob.encode()).hexdigest())
    assert keys == want and len(set(keys)) == 5


@pytest.mark.parametrize("in_process", [True, False])
async def test_a_reply_cut_off_mid_body_is_retried(
    scripted_server, make_gateway, tmp_path, in_process
):
    """README: "dropped connections | retried with backoff". A 200 whose body was cut off (the
    server closed the connection mid-reply) ended the request after 1 attempt: the body was read
    after the retries were done (helper-133: an RL episode masked by one drop)."""
    srv = scripted_server([drop(), reply("second try")])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t", record_path=tmp_path / "r.jsonl")
    model = lease.chat_model(in_process=in_process)
    try:
        answer = await model.chat([{"role": "user", "content": "go"}])
    finally:
        await model.aclose()
        gw.close_trial(lease)
    assert answer.content == "second try"
    assert len(srv.requests) == 2 and lease.usage.request_count == 1
    assert lease.usage.retries == 1
    (record,) = read_records(tmp_path / "r.jsonl")
    assert record["status"] == 200 and record["retries"] == 1


REFUSED_IN_PROCESS = """
import asyncio, sys
from clawrig.errors import ModelRequestError
from clawrig.llm.gateway import Gateway
from clawrig.testing.scripted_server import ScriptedServer, error

srv = ScriptedServer([error(400, "the prompt is too long")]).start()


async def main():
    with Gateway() as gw:
        model = gw.open_trial(srv.endpoint(), trial_id="t").chat_model()
        try:
            await model.chat([{"role": "user", "content": "hi"}])
        except ModelRequestError as exc:
            print(exc.status, exc.detail, sep="|")
        await model.aclose()
        print("openai" in sys.modules, gw._app is not None, sep="|")


asyncio.run(main())
srv.stop()
"""


def test_a_refusal_in_process_loads_no_sdk_and_builds_no_app():
    """A request the provider refused, handed to the gateway in process: the same error as
    over HTTP (test above), made without importing the openai SDK or building the gateway's
    HTTP app. Both were made for it: ~0.5 s of CPU on the harness's event loop at a job's
    first refused request, every trial waiting (helper-148 saw 1 s of ``waits.loop``)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", REFUSED_IN_PROCESS], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["400|the prompt is too long", "False|False"]


@pytest.mark.parametrize("stream", [False, True], ids=["dict", "streamed"])
async def test_a_programs_failed_request_does_not_replace_the_loops_in_the_leases_record(
    scripted_server, make_gateway, stream
):
    """helper-160: the lease's last failure (what the trial judges a 500 by: the request
    sent again, its status, the server's message) was any request's of the trial: the native
    agent's loop failed with a repeatable 500, then a program of its (over HTTP, with the
    task's keys) met a dropped connection, and the lease held no failure: the 500 was judged
    an outage, a free abstention. The loop's requests are in process; a program's HTTP
    failure no longer replaces the loop's. With no request in process (OpenClaw's loop and
    its programs both over HTTP) the last failure stands, as before. A streaming loop's
    requests reach the gateway's app over httpx.ASGITransport, in process too (helper-161:
    they were taken for HTTP ones, and the free abstention was back)."""
    import httpx

    from clawrig.llm.client import ProviderRetriesExhausted
    from clawrig.runner.trial import _fails_again

    def respond(request: dict) -> Any:
        said = json.dumps(request["messages"])
        if "BOOM" in said:
            return error(500, "content the model cannot serve", retry_after=0)
        return drop() if "DROP" in said else reply("ok")

    srv = scripted_server(responder=respond)
    gw = make_gateway()
    boom = {"messages": [{"role": "user", "content": "BOOM"}]}
    dropped = {"model": "x", "messages": [{"role": "user", "content": "DROP"}]}
    for loop_in_process in (True, False):
        lease = gw.open_trial(upstream(srv), trial_id=f"t-{loop_in_process}-{stream}")
        async with httpx.AsyncClient(timeout=60) as client:
            if loop_in_process:  # the native agent's loop: the lease's in-process model
                model = lease.chat_model(stream=stream)
                try:
                    with pytest.raises(ProviderRetriesExhausted):
                        await model.chat(boom["messages"])
                finally:
                    await model.aclose()
            else:
                r = await client.post(f"{lease.host_base_url}/chat/completions", json=boom)
                assert r.status_code == 500
            r = await client.post(f"{lease.host_base_url}/chat/completions", json=dropped)
            assert r.status_code == 502  # a program's request: no server's answer
        if loop_in_process:
            assert lease.upstream_failure_status == 500
            assert (lease.upstream_failure_body or {}).get("messages") == boom["messages"]
            assert lease.upstream_failure_detail == "content the model cannot serve"
            assert await _fails_again(lease.endpoint, lease.upstream_failure_body, lease)
        else:
            assert lease.upstream_failure_status is None and lease.upstream_failure_body is None
        gw.close_trial(lease)


async def test_a_request_over_tcp_cannot_pass_for_the_loops(scripted_server, make_gateway):
    """helper-162: uvicorn took a loopback peer's X-Forwarded-For for the request's client,
    so a program reaching the gateway's TCP listener could name itself the in-process
    client, its failures then standing for the agent loop's. The gateway's server reads no
    proxy headers."""
    import httpx

    from clawrig.llm.gateway.lease import IN_PROCESS_CLIENT

    srv = scripted_server(responder=lambda request: reply("ok"))
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t-spoof")
    async with httpx.AsyncClient(timeout=60) as client:
        r = await client.post(
            f"{lease.host_base_url}/chat/completions",
            json={"model": "x", "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-forwarded-for": IN_PROCESS_CLIENT, "x-real-ip": IN_PROCESS_CLIENT},
        )
    assert r.status_code == 200
    assert lease.in_process is False
    gw.close_trial(lease)
