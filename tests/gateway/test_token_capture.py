"""Token capture: with a vLLM or SGLang upstream the gateway asks for the sampled token ids and
logprobs and records them per request in model_calls.jsonl, identical to what the server sent.

Expected tokens come from the scripted server's documented tokenizer, worked out here on its
own (8-character pieces of the reply, CRC-32 mod 100000, logprob -((id % 997) + 1) / 1000) and
cross-checked with what the server logged it sent.
"""

from __future__ import annotations

import json
import zlib

import httpx
import pytest
from gw_helpers import upstream

from clawrig.llm.gateway import RECORD_FILE, read_records, read_token_capture, request_key
from clawrig.llm.gateway.tokens import tokens_from_completion
from clawrig.testing.scripted_server import call, reply

ARGS = '{"command": "ls -la /tmp"}'


def tid(piece: str) -> int:
    return zlib.crc32(piece.encode()) % 100_000


def expected(content: str, tool: tuple[str, str] | None, messages: list[dict]) -> dict:
    pieces = [content[i : i + 8] for i in range(0, len(content), 8)]
    if tool:
        pieces += [tool[0]] + [tool[1][i : i + 8] for i in range(0, len(tool[1]), 8)]
    ids = [tid(p) for p in pieces]
    words = [w for m in messages for w in f"{m['role']}: {m['content']}".split()]
    return {
        "prompt_token_ids": [tid(w) for w in words],
        "completion_token_ids": ids,
        "completion_logprobs": [-((i % 997) + 1) / 1000 for i in ids],
    }


MESSAGES = [
    {"role": "system", "content": "You are a careful agent."},
    {"role": "user", "content": "List the files in /tmp please"},
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("server", ["vllm", "sglang"])
async def test_tokens_recorded_are_those_the_server_sent(
    scripted_server, make_gateway, tmp_path, server, stream
):
    srv = scripted_server(
        [
            reply("Let me look at that folder.", tool_calls=[call("exec", ARGS, id="c1")]),
            reply("Done: two files."),
        ]
    )
    gw = make_gateway()
    lease = gw.open_trial(
        upstream(srv, name=f"{server}/qwen"), trial_id="t1", record_path=tmp_path / RECORD_FILE
    )
    model = lease.chat_model(stream=stream)
    first = await model.chat(MESSAGES)
    assert first.content == "Let me look at that folder."
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("exec", ARGS)]
    second_msgs = [*MESSAGES, {"role": "user", "content": "and now?"}]
    second = await model.chat(second_msgs)
    assert second.content == "Done: two files."

    # the upstream was asked in its own dialect; SGLang streams are asked as whole replies
    for req in srv.requests:
        assert req["logprobs"] is True
        if server == "vllm":
            assert req["return_token_ids"] is True
            assert bool(req.get("stream")) is stream
        else:
            assert req["return_prompt_token_ids"] is True and req["return_meta_info"] is True
            assert not req.get("stream") and "stream_options" not in req

    want = [
        expected("Let me look at that folder.", ("exec", ARGS), MESSAGES),
        expected("Done: two files.", None, second_msgs),
    ]
    assert srv.sent_tokens == want
    got = read_token_capture(tmp_path)
    assert [g["token_capture"] for g in got] == want
    assert [g["message"]["content"] for g in got] == [first.content, second.content]

    # the request key is that of the client's request (the capture fields are not in it), and
    # the recorded reply is plain OpenAI (no extension fields)
    for rec in read_records(tmp_path / RECORD_FILE):
        assert rec["key"] == request_key(f"{server}/qwen", rec["request"])
        assert "logprobs" not in rec["request"]
        choice = rec["response"]["choices"][0]
        assert not {"token_ids", "prompt_token_ids", "meta_info", "logprobs"} & set(choice)


async def test_the_client_gets_a_plain_reply_unless_it_asked(scripted_server, make_gateway):
    srv = scripted_server([reply("hello there"), reply("hello again")])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv, name="vllm/qwen"), trial_id="t1")
    url = f"{lease.host_base_url}/chat/completions"
    async with httpx.AsyncClient() as client:
        plain = (await client.post(url, json={"model": "x", "messages": MESSAGES})).json()
        asked = (
            await client.post(url, json={"model": "x", "messages": MESSAGES, "logprobs": True})
        ).json()
    assert "prompt_token_ids" not in plain
    assert set(plain["choices"][0]) == {"index", "message", "finish_reason"}
    # a client that asks for logprobs gets them (token texts are the scripted pieces)
    content = asked["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in content] == ["hello ag", "ain"]
    assert [e["logprob"] for e in content] == [
        -((tid(p) % 997) + 1) / 1000 for p in ("hello ag", "ain")
    ]


async def test_no_capture_for_other_upstreams_or_when_turned_off(
    scripted_server, make_gateway, tmp_path
):
    srv = scripted_server([reply("a"), reply("b"), reply("c")])
    gw = make_gateway()
    other = gw.open_trial(upstream(srv), trial_id="o", record_path=tmp_path / "o.jsonl")
    await other.chat_model().chat(MESSAGES)
    off = gw.open_trial(
        upstream(srv, name="vllm/qwen"),
        trial_id="f",
        record_path=tmp_path / "f.jsonl",
        token_capture=False,
    )
    await off.chat_model().chat(MESSAGES)
    # an explicit server setting turns it on for any provider name
    ep = upstream(srv, name="mylab/qwen").model_copy(update={"server": "vllm"})
    on = gw.open_trial(ep, trial_id="n", record_path=tmp_path / "n.jsonl")
    await on.chat_model().chat(MESSAGES)
    assert [set(r) & {"logprobs", "return_token_ids"} for r in srv.requests] == [
        set(),
        set(),
        {"logprobs", "return_token_ids"},
    ]
    for name in ("o", "f"):
        rec = json.loads((tmp_path / f"{name}.jsonl").read_text())
        assert "token_capture" not in rec
    rec = json.loads((tmp_path / "n.jsonl").read_text())
    assert rec["token_capture"]["completion_token_ids"] == [tid("c")]


def test_ids_from_older_vllm_logprob_tokens_and_missing_tokens():
    # vLLM without return_token_ids but with return_tokens_as_token_ids: ids in the tokens
    old = {
        "choices": [
            {
                "message": {"role": "assistant", "content": "hi"},
                "logprobs": {
                    "content": [
                        {"token": "token_id:17", "logprob": -0.5},
                        {"token": "token_id:4", "logprob": -1.25},
                    ]
                },
            }
        ]
    }
    assert tokens_from_completion("vllm", old) == {
        "prompt_token_ids": None,  # (not returned: not an empty prompt)
        "completion_token_ids": [17, 4],
        "completion_logprobs": [-0.5, -1.25],
    }
    # helper-211: a vLLM-shaped reply read as SGLang's has prompt ids and logprobs but no
    # completion ids: those are None, not [] (an empty completion), and logprobs that line up
    # with no ids are dropped
    vllm_shaped = {
        "prompt_token_ids": [1001],
        "choices": [
            {
                "message": {"role": "assistant", "content": "hi"},
                "token_ids": [7, 8],
                "logprobs": {"content": [{"token": "a", "logprob": -1.0}] * 5},
            }
        ],
    }
    assert tokens_from_completion("sglang", vllm_shaped) == {
        "prompt_token_ids": [1001],
        "completion_token_ids": None,
        "completion_logprobs": None,
    }
    # an upstream that returned nothing: no capture
    bare = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    assert tokens_from_completion("vllm", bare) is None
    assert tokens_from_completion("sglang", bare) is None
    # SGLang's object form of output_token_logprobs
    sg = {
        "choices": [
            {
                "prompt_token_ids": [1, 2],
                "meta_info": {
                    "output_token_logprobs": [
                        {"token_id": 9, "logprob": -0.1},
                        {"token_id": 8, "logprob": -0.2},
                    ]
                },
            }
        ]
    }
    assert tokens_from_completion("sglang", sg) == {
        "prompt_token_ids": [1, 2],
        "completion_token_ids": [9, 8],
        "completion_logprobs": [-0.1, -0.2],
    }
