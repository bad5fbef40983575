"""The scripted server's wire format, read with plain httpx (no openai SDK), and its CLI."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from clawrig.errors import UserError
from clawrig.testing.scripted_server import (
    Reply,
    ScriptedServer,
    call,
    drop,
    error,
    load_script,
    reply,
    usage,
)

USER = [{"role": "user", "content": "hi"}]


def chat(**fields: object) -> dict:
    """A well-formed chat request body (model "m", one user message) plus ``fields``."""
    return {"model": "m", "messages": USER, **fields}


def sse_events(text: str) -> list[dict | str]:
    events: list[dict | str] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        data = block[len("data: ") :]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_models_and_context_manager():
    with ScriptedServer(models=["m1", "m2"]) as srv:
        assert srv.base_url.startswith("http://127.0.0.1:") and srv.base_url.endswith("/v1")
        body = httpx.get(f"{srv.base_url}/models").json()
        assert body["object"] == "list"
        assert [m["id"] for m in body["data"]] == ["m1", "m2"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{srv.base_url}/models")


def test_unrecorded_server_answers_and_keeps_nothing():
    with ScriptedServer(["one", "two"], record=False) as srv:
        texts = []
        for _ in range(2):
            r = httpx.post(f"{srv.base_url}/chat/completions", json=chat(), timeout=10)
            texts.append(r.json()["choices"][0]["message"]["content"])
        assert texts == ["one", "two"]  # the script is consumed in order, as recorded
        assert srv.remaining == 0
        assert (srv.requests, srv.headers, srv.peers) == ([], [], [])


def test_non_streaming_shape_and_recording(scripted_server):
    srv = scripted_server(
        [
            reply(
                "hi",
                reasoning="r",
                tool_calls=[call("exec", {"command": "ls"})],
                usage=usage(7, 3, cached=2, cost=0.5),
            )
        ]
    )
    req = {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": []}
    body = httpx.post(f"{srv.base_url}/chat/completions", json=req).json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "m"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": "hi",
        "reasoning_content": "r",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "exec", "arguments": '{"command": "ls"}'},
            }
        ],
    }
    assert body["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 2},
        "cost": 0.5,
    }
    assert srv.requests == [req]


def test_streaming_shape_with_usage(scripted_server):
    srv = scripted_server(
        [reply("hello world, streamed", tool_calls=[call("exec", {"command": "ls -la"}, id="t1")])]
    )
    req = {
        "model": "m",
        "messages": USER,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{srv.base_url}/chat/completions", json=req) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = sse_events(resp.read().decode())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["total_tokens"] == 15  # the default 10 + 5
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    assert "".join(d.get("content") or "" for d in deltas) == "hello world, streamed"
    call_deltas = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert call_deltas[0] == {
        "index": 0,
        "id": "t1",
        "type": "function",
        "function": {"name": "exec", "arguments": ""},
    }
    assert all(set(d) == {"index", "function"} for d in call_deltas[1:])
    assert "".join(d["function"]["arguments"] for d in call_deltas) == '{"command": "ls -la"}'
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_streaming_without_usage_option(scripted_server):
    srv = scripted_server([reply("x")])
    resp = httpx.post(f"{srv.base_url}/chat/completions", json=chat(stream=True))
    events = sse_events(resp.text)
    assert all("usage" not in e for e in events[:-1])
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_error_replies(scripted_server):
    srv = scripted_server([error(429, "slow down", retry_after=2), error(500)])
    url = f"{srv.base_url}/chat/completions"
    first = httpx.post(url, json=chat(n=1))
    assert first.status_code == 429
    assert first.headers["retry-after"] == "2"
    assert first.json()["error"]["message"] == "slow down"
    second = httpx.post(url, json=chat(n=2))
    assert second.status_code == 500
    assert "retry-after" not in second.headers
    third = httpx.post(url, json=chat(n=3))
    assert third.status_code == 500
    assert third.json()["error"]["message"] == (
        "ScriptedServer: script exhausted: request #3 came after all 2 scripted replies were used"
    )
    assert [r["n"] for r in srv.requests] == [1, 2, 3]


def test_dropped_connection(scripted_server):
    srv = scripted_server([drop(), "after"])
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(f"{srv.base_url}/chat/completions", json=chat())
    body = httpx.post(f"{srv.base_url}/chat/completions", json=chat()).json()
    assert body["choices"][0]["message"]["content"] == "after"


def test_add_and_responder(scripted_server):
    seen = []

    def responder(body):
        seen.append(body["k"])
        return f"responder {body['k']}"

    srv = scripted_server(["scripted"], responder=responder)
    srv.add(reply("added"))
    url = f"{srv.base_url}/chat/completions"
    texts = [
        httpx.post(url, json=chat(k=k)).json()["choices"][0]["message"]["content"] for k in range(3)
    ]
    assert texts == ["scripted", "added", "responder 2"]
    assert seen == [2]
    assert srv.remaining == 0


def test_responder_failure_is_a_500_no_client_retries(scripted_server):
    """A responder that raises, or returns what is no reply, fails every retry alike: a 500
    with ``x-should-retry: false`` (as an exhausted script's), its one-line message naming
    the fault; a client retried it for minutes (helper-140)."""
    srv = scripted_server(responder=lambda body: 1 / 0)
    resp = httpx.post(f"{srv.base_url}/chat/completions", json=chat())
    assert resp.status_code == 500 and resp.headers["x-should-retry"] == "false"
    assert resp.json()["error"]["message"] == (
        "ScriptedServer responder failed: ZeroDivisionError: division by zero"
    )
    srv = scripted_server(responder=lambda body: 12345)
    resp = httpx.post(f"{srv.base_url}/chat/completions", json=chat())
    assert resp.status_code == 500 and resp.headers["x-should-retry"] == "false"
    fields = ", ".join(Reply.model_fields)
    assert resp.json()["error"]["message"] == (
        "ScriptedServer responder failed: it returned 12345, not a reply (reply: a reply is "
        f"text, or a dict of {fields}: docs in clawrig.testing.scripted_server)"
    )
    # a misspelt key is named (helper-151 wrote "message" for "error_message")
    srv = scripted_server(responder=lambda body: {"error": 400, "message": "too long"})
    said = httpx.post(f"{srv.base_url}/chat/completions", json=chat()).json()["error"]
    assert said["message"].startswith(
        "ScriptedServer responder failed: it returned {'error': 400, 'message': 'too long'}, "
        "not a reply (message: a reply is text, or a dict of content, tool_calls, "
    )
    assert "error_message" in said["message"]


MALFORMED = [
    # (body, status, param, code, message): what api.openai.com answers each
    ([USER], 400, None, None, "Invalid type for request body: expected an object, but got an "
     "array instead."),
    ({"messages": USER}, 400, None, None, "you must provide a model parameter"),
    ({"model": 7, "messages": USER}, 400, "model", "invalid_type",
     "Invalid type for 'model': expected a string, but got a number instead."),
    ({"model": "m"}, 400, "messages", "missing_required_parameter",
     "Missing required parameter: 'messages'."),
    ({"model": "m", "messages": "hi"}, 400, "messages", "invalid_type",
     "Invalid type for 'messages': expected an array of objects, but got a string instead."),
    ({"model": "m", "messages": []}, 400, "messages", "empty_array",
     "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an "
     "empty array instead."),
    ({"model": "m", "messages": ["hi"]}, 400, "messages[0]", "invalid_type",
     "Invalid type for 'messages[0]': expected an object, but got a string instead."),
    ({"model": "m", "messages": USER + [{"content": "x"}]}, 400, "messages[1].role",
     "missing_required_parameter", "Missing required parameter: 'messages[1].role'."),
    ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role",
     "invalid_value", "Invalid value: \"robot\". Supported values are: 'system', 'assistant', "
     "'user', 'function', 'tool', and 'developer'."),
    # red team: these three were a 500 (a traceback in the server's log)
    ({"model": "m", "messages": [{"role": ["user"], "content": "x"}]}, 400, "messages[0].role",
     "invalid_value", "Invalid value: [\"user\"]. Supported values are: 'system', "
     "'assistant', 'user', 'function', 'tool', and 'developer'."),
    ({"model": "m", "messages": [{"role": {"a": 1}}]}, 400, "messages[0].role",
     "invalid_value", "Invalid value: {\"a\": 1}. Supported values are: 'system', "
     "'assistant', 'user', 'function', 'tool', and 'developer'."),
    ({"model": "m", "messages": USER, "stream": True, "stream_options": "usage"}, 400,
     "stream_options", "invalid_type",
     "Invalid type for 'stream_options': expected an object, but got a string instead."),
    ({"model": "gpt-9", "messages": USER}, 404, None, "model_not_found",
     "The model `gpt-9` does not exist or you do not have access to it."),
]  # fmt: skip


@pytest.mark.parametrize(("body", "status", "param", "code", "message"), MALFORMED)
def test_malformed_request_gets_the_apis_4xx(scripted_server, body, status, param, code, message):
    srv = scripted_server(["kept for the next good request"], models=["m", "m2"])
    url = f"{srv.base_url}/chat/completions"
    resp = httpx.post(url, json=body)
    assert resp.status_code == status
    assert resp.json() == {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": code,
        }
    }
    assert srv.requests == [body]  # recorded, and no scripted reply was used
    assert srv.remaining == 1
    good = httpx.post(url, json=chat(model="m2")).json()
    assert good["choices"][0]["message"]["content"] == "kept for the next good request"


def test_body_that_is_not_json_is_a_400(scripted_server):
    srv = scripted_server(["unused"])
    resp = httpx.post(f"{srv.base_url}/chat/completions", content=b"{not json")
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["message"].startswith("We could not parse the JSON body of your request.")
    assert srv.remaining == 1


def test_body_nested_past_pythons_limit_is_a_400(scripted_server):
    # red team: JSON nested 100,000 deep raised RecursionError in the parser: a 500
    srv = scripted_server(["unused"])
    deep = b"[" * 100_000 + b"]" * 100_000
    resp = httpx.post(f"{srv.base_url}/chat/completions", content=deep)
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "invalid_request_error"
    assert srv.remaining == 1


def test_without_models_any_model_is_served(scripted_server):
    srv = scripted_server(["a", "b"])
    url = f"{srv.base_url}/chat/completions"
    for name in ("gpt-9", "scripted"):
        assert httpx.post(url, json=chat(model=name)).json()["model"] == name
    assert [m["id"] for m in httpx.get(f"{srv.base_url}/models").json()["data"]] == ["scripted"]


@contextlib.contextmanager
def _cli_server(script: Path) -> Iterator[str]:
    """``python -m clawrig.testing.scripted_server --script SCRIPT --port 0`` running; yields
    the first line it prints (the URL it serves at)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "clawrig.testing.scripted_server", "--script", str(script)]
        + ["--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_cli_script_models_refuse_other_models(tmp_path):
    script = tmp_path / "demo.json"
    script.write_text(json.dumps({"models": ["demo"], "replies": [{"content": "ok"}]}))
    with _cli_server(script) as line:
        base_url = line.split(": ", 1)[1].split()[0]
        refused = httpx.post(f"{base_url}/chat/completions", json=chat(model="other"))
        assert (refused.status_code, refused.json()["error"]["code"]) == (404, "model_not_found")
        body = httpx.post(f"{base_url}/chat/completions", json=chat(model="demo")).json()
        assert body["choices"][0]["message"]["content"] == "ok"


def test_load_script_forms_and_errors(tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_text(
        json.dumps(
            [{"content": "hi"}, {"tool_calls": [{"name": "exec", "arguments": {"command": "ls"}}]}]
        )
    )
    replies, models = load_script(plain)
    assert [r.content for r in replies] == ["hi", None]
    assert replies[1].tool_calls[0].arguments_text() == '{"command": "ls"}'
    assert models is None  # no "models": any model name is served
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"replies": [{"error": 429, "retry_after": 0}], "models": ["x"]}))
    replies, models = load_script(wrapped)
    assert (replies[0].error, replies[0].retry_after, models) == (429, 0, ["x"])

    bad_field = tmp_path / "bad.json"
    bad_field.write_text(json.dumps([{"content": "ok"}, {"delay": "soon"}]))
    with pytest.raises(UserError) as info:
        load_script(bad_field)
    assert str(info.value).startswith(f"{bad_field}: replies.1.delay: Input should be a valid")
    bad_json = tmp_path / "broken.json"
    bad_json.write_text('[\n{"content": "a"},\n{oops}\n]')
    with pytest.raises(UserError, match=r"broken\.json:3: invalid JSON: "):
        load_script(bad_json)


def test_cli_serves_a_script(tmp_path):
    script = tmp_path / "demo.json"
    script.write_text(json.dumps([{"content": "from the CLI"}]))
    with _cli_server(script) as line:
        assert line.startswith("scripted OpenAI-compatible server: http://127.0.0.1:"), line
        assert line.rstrip("\n").endswith("/v1 (1 scripted reply)"), line
        base_url = line.split(": ", 1)[1].split()[0]
        body = httpx.post(f"{base_url}/chat/completions", json=chat()).json()
        assert body["choices"][0]["message"]["content"] == "from the CLI"


def test_cli_bad_script_is_one_line(tmp_path):
    script = tmp_path / "bad.json"
    script.write_text(json.dumps([{"tool_calls": [{"arguments": {}}]}]))
    proc = subprocess.run(
        [sys.executable, "-m", "clawrig.testing.scripted_server", "--script", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"error: {script}: replies.0.tool_calls.0.name: Field required\n"
