"""OpenAIChatModel through the real openai SDK over HTTP against the scripted server."""

from __future__ import annotations

import asyncio

import pytest

from clawrig.errors import ModelRequestError, ProviderError
from clawrig.llm.base import ChatModel
from clawrig.llm.client import (
    OpenAIChatModel,
    ProviderRetriesExhausted,
    RetryPolicy,
    get_model,
    usage_from_openai,
    with_retries,
)
from clawrig.llm.pricing import Prices
from clawrig.llm.providers import load_settings, resolve_model
from clawrig.spec.llm import ToolCall
from clawrig.testing.scripted_server import call, drop, error, reply, usage

USER = [{"role": "user", "content": "List the files."}]
EXEC_TOOL = {
    "type": "function",
    "function": {
        "name": "exec",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
FAST = RetryPolicy(attempts=4, initial_s=0.001, max_s=0.005, retry_after_cap_s=0.01)


async def test_text_reply(scripted_server):
    srv = scripted_server([reply("Hello there.")])
    model = srv.chat_model("scripted/my-model")
    assert isinstance(model, ChatModel)
    resp = await model.chat(USER, temperature=0.2, max_tokens=64)
    assert resp.content == "Hello there."
    assert resp.tool_calls == []
    assert resp.reasoning is None
    assert resp.finish_reason == "stop"
    assert resp.model == "my-model"
    assert resp.provider == "scripted"
    assert resp.usage.retries == 0
    assert resp.usage.request_count == 1
    sent = srv.requests[0]
    assert sent["model"] == "my-model"
    assert sent["messages"] == USER
    assert sent["temperature"] == 0.2
    assert sent["max_tokens"] == 64
    assert "tools" not in sent


async def test_tool_calls_parsed_and_tools_sent(scripted_server):
    srv = scripted_server(
        [
            reply(
                "Let me look.",
                tool_calls=[
                    call("exec", {"command": "ls -la"}, id="call_a"),
                    call("read", {"path": "notes.md", "limit": 20}, id="call_b"),
                ],
            )
        ]
    )
    resp = await srv.chat_model().chat(USER, tools=[EXEC_TOOL])
    assert resp.content == "Let me look."
    assert resp.finish_reason == "tool_calls"
    assert resp.tool_calls == [
        ToolCall(id="call_a", name="exec", arguments='{"command": "ls -la"}'),
        ToolCall(id="call_b", name="read", arguments='{"path": "notes.md", "limit": 20}'),
    ]
    assert srv.requests[0]["tools"] == [EXEC_TOOL]


async def test_malformed_tool_arguments_pass_through_raw(scripted_server):
    raw = '{"command": "ls", '
    srv = scripted_server([reply(tool_calls=[call("exec", raw, id="c1")])] * 2)
    for stream in (False, True):
        resp = await srv.chat_model(stream=stream).chat(USER, tools=[EXEC_TOOL])
        assert resp.tool_calls == [ToolCall(id="c1", name="exec", arguments=raw)]


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
@pytest.mark.parametrize("stream", [False, True])
async def test_reasoning_kept(scripted_server, key, stream):
    thought = "The user wants a listing; exec ls is the simplest way."
    srv = scripted_server([reply("Done.", reasoning=thought, reasoning_key=key)])
    resp = await srv.chat_model(stream=stream).chat(USER)
    assert resp.reasoning == thought
    assert resp.content == "Done."


async def test_usage_and_cost_from_prices(scripted_server):
    prices = Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    srv = scripted_server([reply("ok", usage=usage(1000, 200, cached=400, cache_write=100))])
    resp = await srv.chat_model(prices=prices).chat(USER)
    u = resp.usage
    # non-cached input = 1000 prompt - 400 cache read - 100 cache write
    assert (u.input_tokens, u.output_tokens) == (500, 200)
    assert (u.cache_read_tokens, u.cache_write_tokens) == (400, 100)
    assert u.total_tokens == 1200
    # 500*3 + 200*15 + 400*0.3 + 100*3.75 = 1500 + 3000 + 120 + 375 = 4995 USD per 1M tokens
    assert u.cost_usd == pytest.approx(0.004995)


async def test_usage_cost_from_provider_wins(scripted_server):
    prices = Prices(input=3.0, output=15.0)
    srv = scripted_server([reply("ok", usage=usage(1000, 200, cost=0.0123))])
    resp = await srv.chat_model(prices=prices).chat(USER)
    assert resp.usage.cost_usd == pytest.approx(0.0123)
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (1000, 200)


async def test_usage_without_prices_costs_nothing(scripted_server):
    srv = scripted_server([reply("ok", usage=usage(70, 30))])
    resp = await srv.chat_model().chat(USER)
    assert resp.usage.cost_usd == 0.0
    assert resp.usage.total_tokens == 100


def test_usage_from_openai_other_cache_fields():
    prices = Prices(input=1.0, output=2.0, cache_read=0.5, cache_write=4.0)
    u = usage_from_openai(
        {"prompt_tokens": 100, "completion_tokens": 10, "prompt_cache_hit_tokens": 60}, prices
    )
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens) == (40, 60, 0)
    # 40*1 + 10*2 + 60*0.5 = 90 USD per 1M tokens
    assert u.cost_usd == pytest.approx(90e-6)
    u = usage_from_openai(
        {"prompt_tokens": 100, "completion_tokens": 10, "cache_creation_input_tokens": 30}, prices
    )
    assert (u.input_tokens, u.cache_write_tokens) == (70, 30)
    # 70*1 + 10*2 + 30*4 = 210
    assert u.cost_usd == pytest.approx(210e-6)
    assert usage_from_openai(None, prices).total_tokens == 0


async def test_burst_of_429_retried_and_counted(scripted_server):
    srv = scripted_server([error(429, "slow down", retry_after=0)] * 3 + [reply("finally")])
    resp = await srv.chat_model(retry=FAST).chat(USER)
    assert resp.content == "finally"
    assert resp.usage.retries == 3
    assert len(srv.requests) == 4
    assert all(r["messages"] == USER for r in srv.requests)


@pytest.mark.timeout(20)
async def test_retry_after_is_capped(scripted_server):
    # Retry-After asks for 1 hour; the policy caps it at 0.01 s, so this returns promptly
    # (uncapped it would hit the test timeout).
    srv = scripted_server([error(429, retry_after=3600), reply("ok")])
    resp = await srv.chat_model(retry=FAST).chat(USER)
    assert resp.content == "ok"
    assert resp.usage.retries == 1


async def test_500_then_success(scripted_server):
    srv = scripted_server([error(500, "upstream exploded"), reply("recovered")])
    resp = await srv.chat_model(retry=FAST).chat(USER)
    assert resp.content == "recovered"
    assert resp.usage.retries == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_dropped_connection_retried(scripted_server, stream):
    srv = scripted_server([drop(), reply("second try")])
    resp = await srv.chat_model(retry=FAST, stream=stream).chat(USER)
    assert resp.content == "second try"
    assert resp.usage.retries == 1
    assert len(srv.requests) == 2


async def test_timeout_retried(scripted_server):
    srv = scripted_server([reply("too late", delay=3.0), reply("in time")])
    model = srv.chat_model(retry=FAST, timeout_s=0.3)
    resp = await model.chat(USER)
    assert resp.content == "in time"
    assert resp.usage.retries == 1


async def test_401_fails_fast_with_one_line(scripted_server):
    srv = scripted_server([error(401, "Invalid API key\nprovided."), reply("never")])
    model = srv.chat_model(retry=FAST)
    with pytest.raises(ModelRequestError) as info:
        await model.chat(USER)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg == (
        f"scripted/scripted: HTTP 401 from scripted ({srv.base_url}): Invalid API key provided."
    )
    assert "scripted-key" not in msg
    assert len(srv.requests) == 1  # not retried
    assert srv.remaining == 1


@pytest.mark.parametrize("status", [400, 403, 404, 422])
async def test_client_errors_fail_fast(scripted_server, status):
    srv = scripted_server([error(status, f"nope {status}")])
    with pytest.raises(ModelRequestError, match=f"HTTP {status} from scripted .*: nope {status}$"):
        await srv.chat_model(retry=FAST).chat(USER)
    assert len(srv.requests) == 1


async def test_401_names_the_key_variable(scripted_server):
    srv = scripted_server([error(401, "bad key sk-or-secret-123")])
    settings = load_settings(
        environ={"OPENROUTER_API_KEY": "sk-or-secret-123", "OPENROUTER_BASE_URL": srv.base_url}
    )
    model = OpenAIChatModel(resolve_model("openrouter/openai/gpt-4.1", settings), retry=FAST)
    with pytest.raises(ModelRequestError) as info:
        await model.chat(USER)
    msg = str(info.value)
    assert "sk-or-secret-123" not in msg
    assert msg.endswith("bad key *** (check OPENROUTER_API_KEY)")


async def test_exhausted_retries_raise_provider_error(scripted_server):
    srv = scripted_server([error(503, "overloaded")] * 4 + [reply("too late")])
    with pytest.raises(ProviderError) as info:
        await srv.chat_model(retry=FAST).chat(USER)
    exc = info.value
    assert isinstance(exc, ProviderRetriesExhausted)
    assert not isinstance(exc, ModelRequestError)
    assert (exc.attempts, exc.retries, exc.status) == (4, 3, 503)
    assert str(exc) == (
        f"scripted/scripted: HTTP 503 from scripted ({srv.base_url}) after 4 attempts: overloaded"
    )
    assert len(srv.requests) == 4
    assert srv.remaining == 1


async def test_exhausted_script_fails_at_once_naming_the_server(scripted_server):
    """The exhausted server says ``x-should-retry: false``: one request, no waiting, and a
    request error (it stops a job) that names the URL the user set."""
    srv = scripted_server([])
    policy = RetryPolicy(attempts=6, initial_s=30, max_s=60)  # minutes, were it to retry
    with pytest.raises(ModelRequestError) as info:
        await asyncio.wait_for(srv.chat_model(retry=policy).chat(USER), timeout=20)
    assert str(info.value).startswith(f"scripted/scripted: HTTP 500 from scripted ({srv.base_url})")
    assert "script exhausted" in str(info.value)
    assert len(srv.requests) == 1


async def test_through_the_gateway_messages_name_the_upstream_and_its_attempts(scripted_server):
    """Via the job's gateway: the message names the upstream URL (not the gateway's port) and
    the attempts the gateway made (not the client's single one)."""
    from clawrig.llm.gateway import Gateway

    srv = scripted_server([error(503, "overloaded")] * 3)
    fast = RetryPolicy(attempts=3, initial_s=0.001, max_s=0.005)
    with Gateway(retry=fast) as gw:
        lease = gw.open_trial(srv.chat_model().endpoint, trial_id="t1")
        with pytest.raises(ProviderRetriesExhausted) as info:
            await lease.chat_model().chat(USER)
        assert str(info.value) == (
            f"scripted/scripted: HTTP 503 from scripted ({srv.base_url}) after 3 attempts: "
            "overloaded"
        )
        assert info.value.attempts == 3 and len(srv.requests) == 3

        exhausted = scripted_server([])  # says x-should-retry: false: the gateway tries once
        lease = gw.open_trial(exhausted.chat_model().endpoint, trial_id="t2")
        with pytest.raises(ModelRequestError, match=f"from scripted \\({exhausted.base_url}\\)"):
            await lease.chat_model().chat(USER)
        assert len(exhausted.requests) == 1


async def test_connection_refused_is_provider_error(scripted_server):
    srv = scripted_server([])
    model = srv.chat_model(retry=RetryPolicy(attempts=2, initial_s=0.001, max_s=0.001))
    srv.stop()
    with pytest.raises(ProviderRetriesExhausted) as info:
        await model.chat(USER)
    assert info.value.attempts == 2
    assert info.value.status is None
    assert f"could not connect to scripted ({srv.base_url}) after 2 attempts" in str(info.value)


async def test_a_server_gone_after_answering_is_tried_only_unreached_attempts_times(
    scripted_server,
):
    """A model server that answered and then went away (nothing listening: refused) is tried
    ``unreached_attempts`` times per request, not the policy's full ``attempts`` with their
    backoff: the job's breaker (3 such requests in a row) then stops it in seconds."""
    srv = scripted_server([reply("hello")])
    policy = RetryPolicy(attempts=6, unreached_attempts=2, initial_s=0.001, max_s=0.001)
    model = srv.chat_model(retry=policy)
    assert (await model.chat(USER)).content == "hello"
    srv.stop()
    for _ in range(2):
        with pytest.raises(ProviderRetriesExhausted) as info:
            await model.chat(USER)
        assert info.value.attempts == 2 and info.value.status is None


async def test_streaming_equals_non_streaming(scripted_server):
    def script():
        return [
            reply(
                "I will run two commands, then summarise what they print for you.",
                reasoning="Two commands are needed: one to list, one to count the lines.",
                tool_calls=[
                    call("exec", {"command": "ls -la /tmp_workspace", "timeout": 30}, id="c1"),
                    call("exec", {"command": "wc -l notes.md | sort -n"}, id="c2"),
                ],
                usage=usage(1234, 321, cached=1000, cost=0.0042),
            ),
            reply("All done.", usage=usage(50, 3)),
        ]

    plain_srv, stream_srv = scripted_server(script()), scripted_server(script())
    plain = plain_srv.chat_model(prices=Prices(input=1, output=2))
    streamed = stream_srv.chat_model(prices=Prices(input=1, output=2), stream=True)
    ignore = {"latency_s": True, "response_id": True, "usage": {"elapsed_time"}}
    for _ in range(2):
        a = await plain.chat(USER, tools=[EXEC_TOOL])
        b = await streamed.chat(USER, tools=[EXEC_TOOL])
        assert a.model_dump(exclude=ignore) == b.model_dump(exclude=ignore)
    assert a.usage.cost_usd == pytest.approx((50 * 1 + 3 * 2) / 1e6)
    assert stream_srv.requests[0]["stream"] is True
    assert stream_srv.requests[0]["stream_options"] == {"include_usage": True}
    assert "stream" not in plain_srv.requests[0]


async def test_concurrency_limit_per_provider(scripted_server):
    srv = scripted_server([reply(f"r{i}", delay=0.15) for i in range(6)])
    a = srv.chat_model("limited/model-a", max_concurrency=2)
    b = srv.chat_model("limited/model-b", max_concurrency=2)
    results = await asyncio.gather(*(m.chat(USER) for m in (a, b, a, b, a, b)))
    assert sorted(r.content for r in results) == [f"r{i}" for i in range(6)]
    assert srv.max_in_flight == 2


async def test_no_limit_lets_requests_overlap(scripted_server):
    srv = scripted_server([reply(f"r{i}", delay=0.3) for i in range(4)])
    model = srv.chat_model("unlimited/model")
    await asyncio.gather(*(model.chat(USER) for _ in range(4)))
    assert srv.max_in_flight > 2


async def test_openrouter_settings_reach_the_wire(scripted_server):
    srv = scripted_server([reply("hi", usage=usage(10, 5, cost=0.00021))])
    settings = load_settings(
        environ={"OPENROUTER_API_KEY": "sk-or-test", "OPENROUTER_BASE_URL": srv.base_url}
    )
    endpoint = resolve_model("openrouter/anthropic/claude-opus-4.5", settings)
    resp = await OpenAIChatModel(endpoint).chat(USER, extra={"tool_choice": "auto"})
    assert resp.usage.cost_usd == pytest.approx(0.00021)
    sent = srv.requests[0]
    assert sent["model"] == "anthropic/claude-opus-4.5"
    assert sent["usage"] == {"include": True}
    assert sent["tool_choice"] == "auto"
    assert srv.headers[0]["authorization"] == "Bearer sk-or-test"


async def test_custom_endpoint_with_env_prices(scripted_server, tmp_path):
    srv = scripted_server([reply("ok", usage=usage(2000, 100, cached=1000))])
    env = tmp_path / ".env"
    env.write_text(
        f"OPENCLAW_CUSTOM_BASE_URL={srv.base_url}\n"
        "OPENCLAW_CUSTOM_API_KEY=local-key\n"
        "OPENCLAW_CUSTOM_MODEL_ID=Qwen/Qwen3-32B\n"
        "DEFAULT_MODEL=qwen/qwen3-32b\n"
        "MODEL_COST_INPUT=0.5\nMODEL_COST_OUTPUT=2\nMODEL_COST_CACHE_READ=0.1\n"
    )
    settings = load_settings(env, environ={})
    model = OpenAIChatModel(resolve_model(None, settings))
    assert model.name == "qwen/qwen3-32b"
    resp = await model.chat(USER)
    assert srv.requests[0]["model"] == "Qwen/Qwen3-32B"
    assert srv.headers[0]["authorization"] == "Bearer local-key"
    # 1000 non-cached * 0.5 + 100 * 2 + 1000 cached * 0.1 = 800 USD per 1M tokens
    assert resp.usage.cost_usd == pytest.approx(800e-6)


def test_model_usable_across_event_loops(scripted_server):
    srv = scripted_server([reply("one"), reply("two")])
    model = srv.chat_model()
    assert asyncio.run(model.chat(USER)).content == "one"
    assert asyncio.run(model.chat(USER)).content == "two"


async def test_responder_drives_a_loop(scripted_server):
    def responder(body):
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        if done < 3:
            return reply(tool_calls=[call("exec", {"command": f"echo {done}"}, id=f"t{done}")])
        return "three commands ran"

    srv = scripted_server(responder=responder)
    model = srv.chat_model()
    messages = list(USER)
    for _ in range(10):
        resp = await model.chat(messages, tools=[EXEC_TOOL])
        if not resp.tool_calls:
            break
        messages.append(
            {
                "role": "assistant",
                "content": resp.content,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": c.model_dump(exclude={"id"})}
                    for c in resp.tool_calls
                ],
            }
        )
        for c in resp.tool_calls:
            messages.append({"role": "tool", "tool_call_id": c.id, "content": "ok"})
    assert resp.content == "three commands ran"
    assert len(srv.requests) == 4
    assert srv.requests[3]["messages"][1]["tool_calls"][0]["function"] == {
        "name": "exec",
        "arguments": '{"command": "echo 0"}',
    }


async def test_get_model_from_dotenv_in_cwd(scripted_server, tmp_path, monkeypatch):
    srv = scripted_server([reply("judged")])
    (tmp_path / ".env").write_text(
        f"JUDGE_CUSTOM_BASE_URL={srv.base_url}\nJUDGE_CUSTOM_MODEL_ID=judge-1\n"
        "JUDGE_MODEL=custom/judge-1\n"
    )
    monkeypatch.chdir(tmp_path)
    for var in ("JUDGE_MODEL", "JUDGE_CUSTOM_BASE_URL", "JUDGE_CUSTOM_MODEL_ID"):
        monkeypatch.delenv(var, raising=False)
    model = get_model(role="judge")
    assert model.name == "custom/judge-1"
    assert (await model.chat(USER)).content == "judged"
    assert srv.requests[0]["model"] == "judge-1"


async def test_with_retries_hands_the_first_failure_to_tenacity():
    from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

    made: list[int] = []  # attempt numbers tenacity waited after
    tries: list[str] = []

    def retrying() -> AsyncRetrying:
        made.append(0)
        return AsyncRetrying(
            stop=stop_after_attempt(3),
            wait=lambda state: made.append(state.attempt_number) or 0.0,
            retry=retry_if_exception_type(ConnectionError),
            reraise=True,
        )

    async def flaky() -> str:
        tries.append("try")
        if len(tries) < 3:
            raise ConnectionError(f"fail {len(tries)}")
        return "ok"

    assert await with_retries(retrying, flaky) == "ok"
    # three attempts in all; tenacity counted the first one (made outside it) as its 1st
    assert tries == ["try"] * 3 and made == [0, 1, 2]

    made.clear()
    tries.clear()
    assert await with_retries(retrying, lambda: asyncio.sleep(0, "fine")) == "fine"
    assert made == []  # a first success never builds the retrying object

    async def refused() -> str:
        tries.append("try")
        raise ValueError("not retried")

    with pytest.raises(ValueError, match="not retried"):
        await with_retries(retrying, refused)
    assert tries == ["try"] and made == [0]

    async def down() -> str:
        tries.append("try")
        raise ConnectionError(f"down {len(tries)}")

    tries.clear()
    with pytest.raises(ConnectionError, match="down 3"):
        await with_retries(retrying, down)
    assert len(tries) == 3


@pytest.mark.parametrize("status", [501, 505])
async def test_a_status_that_never_works_there_is_not_retried(scripted_server, status):
    """501 (method not supported) and 505 (HTTP version not supported) say the request will
    never work at that server: one request and a request error, directly and through the
    gateway (a proxy's 501 was retried 6 times over 33 s: helper-204); 502 still is."""
    from clawrig.llm.gateway import Gateway

    srv = scripted_server([error(status, "Unsupported method")] * 2 + [reply("no")])
    with pytest.raises(ModelRequestError) as info:
        await srv.chat_model(retry=FAST).chat(USER)
    assert str(info.value).startswith(f"scripted/scripted: HTTP {status} from scripted (")
    assert len(srv.requests) == 1
    fast = RetryPolicy(attempts=3, initial_s=0.001, max_s=0.005)
    with Gateway(retry=fast) as gw:
        lease = gw.open_trial(srv.chat_model().endpoint, trial_id="t1")
        with pytest.raises(ModelRequestError):
            await lease.chat_model().chat(USER)
    assert len(srv.requests) == 2
    flaky = scripted_server([error(502, "bad gateway"), reply("ok")])
    assert (await flaky.chat_model(retry=FAST).chat(USER)).content == "ok"
    assert len(flaky.requests) == 2
