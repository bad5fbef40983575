"""OpenClaw chat.jsonl converters, checked against the real file written by OpenClaw 2026.3.24."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from clawrig.errors import TaskFormatError
from clawrig.spec.llm import ToolCall
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.testing.paths import SHARED
from clawrig.transcript import (
    dumps_openclaw_jsonl,
    from_openclaw_entries,
    iso_from_ms,
    openclaw_entries_from_jsonl,
    read_openclaw_jsonl,
    stop_reason_from_finish_reason,
    to_openclaw_entries,
    write_openclaw_jsonl,
)

CHAT_EXAMPLE = SHARED / "reference" / "openclaw-2026.3.24" / "chat.example.jsonl"


def _by_type(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """First entry of each type; messages keyed by role ("message:<role>")."""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        key = e["type"] if e["type"] != "message" else f"message:{e['message']['role']}"
        out.setdefault(key, e)
    return out


# --- reading the real file -------------------------------------------------------------------


def test_real_file_entries_are_what_graders_get(chat_example_entries):
    entries = openclaw_entries_from_jsonl(CHAT_EXAMPLE.read_text())
    assert entries == chat_example_entries
    assert [e["type"] for e in entries] == [
        "session",
        "model_change",
        "thinking_level_change",
        "custom",
        "message",
        "message",
        "message",
        "message",
    ]


def test_real_file_reads_to_exactly_its_messages():
    t = read_openclaw_jsonl(CHAT_EXAMPLE)
    # By hand from the file: 1 user, 2 assistant, 1 toolResult.
    assert [m.role for m in t.messages] == ["user", "assistant", "toolResult", "assistant"]
    user, call, result, final = t.messages
    assert user.text == "Say hello using a tool"
    assert user.timestamp_ms == 1795977104795
    assert call.text is None and call.reasoning is None
    assert [(c.id, c.name) for c in call.tool_calls] == [("call_0_0", "exec")]
    assert json.loads(call.tool_calls[0].arguments) == {"command": "echo hi from openclaw"}
    assert call.stop_reason == "toolUse"
    assert call.response_id == "cmpl-0"
    assert result.tool_call_id == "call_0_0"
    assert result.tool_name == "exec"
    assert result.text == "hi from openclaw"
    assert result.is_error is False
    assert result.details == {
        "status": "completed",
        "exitCode": 0,
        "durationMs": 12,
        "aggregated": "hi from openclaw",
        "cwd": "/tmp_workspace",
    }
    assert final.text == "final answer" and final.tool_calls == []
    assert final.stop_reason == "stop"
    assert t.final_text() == "final answer"
    for m in (call, final):
        assert (m.usage.input_tokens, m.usage.output_tokens, m.usage.total_tokens) == (100, 10, 110)
        assert m.usage.cost_usd == 0
        assert m.model == "scripted" and m.provider == "custom-127-0-0-1-46373"
    assert len(t.steps) == 2
    assert (t.session_id, t.cwd) == ("chat", "/tmp_workspace")
    assert (t.model, t.provider) == ("scripted", "custom-127-0-0-1-46373")
    # 2026-11-29T18:31:44.779Z; the snapshot 13 ms later is stamped 1795977104792 in the file.
    assert t.started_ms == 1795977104779


def test_read_accepts_lines_and_parsed_entries(chat_example_entries):
    lines = CHAT_EXAMPLE.read_text().splitlines()
    from_path = read_openclaw_jsonl(str(CHAT_EXAMPLE))
    assert read_openclaw_jsonl(lines) == from_path
    assert read_openclaw_jsonl(chat_example_entries) == from_path
    assert from_openclaw_entries(chat_example_entries) == from_path
    assert read_openclaw_jsonl(CHAT_EXAMPLE.read_text()) == from_path


def test_claude_code_style_entries():
    entries = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "hi"}},
        {
            "type": "assistant",
            "uuid": "a1",
            "message": {
                "id": "msg_01",
                "role": "assistant",
                "model": "claude-x",
                "content": [{"type": "text", "text": "hello"}],
                "stop_reason": "end_turn",
            },
        },
        {"type": "summary", "summary": "skipped"},
    ]
    t = from_openclaw_entries(entries)
    assert [(m.role, m.text) for m in t.messages] == [("user", "hi"), ("assistant", "hello")]
    assert (t.messages[1].stop_reason, t.messages[1].response_id) == ("stop", "msg_01")
    assert t.model == "claude-x"


# --- writing: the same shapes as the real file ------------------------------------------------


def test_rewriting_the_real_file_gives_its_message_objects(chat_example_entries):
    written = to_openclaw_entries(read_openclaw_jsonl(CHAT_EXAMPLE), seed=7)
    assert len(written) == len(chat_example_entries)
    for ours, real in zip(written, chat_example_entries, strict=True):
        assert list(ours) == list(real), real["type"]
        if real["type"] == "message":
            # The whole message object, key order included, is the one OpenClaw wrote.
            assert json.dumps(ours["message"]) == json.dumps(real["message"])
    assert written[0] == chat_example_entries[0]  # session entry: no id/parentId
    assert written[1]["provider"] == "custom-127-0-0-1-46373"
    assert written[1]["modelId"] == "scripted"
    assert written[2]["thinkingLevel"] == "off"
    assert written[3]["customType"] == "model-snapshot"
    assert list(written[3]["data"]) == list(chat_example_entries[3]["data"])
    assert written[3]["data"]["modelApi"] == "openai-completions"


def test_written_shapes_match_the_real_file(rich_transcript, chat_example_entries):
    real = _by_type(chat_example_entries)
    written = to_openclaw_entries(rich_transcript, seed=1)
    ours = _by_type(written)
    # Compare with the exec result, which carries details like the real one.
    ours["message:toolResult"] = written[-2]
    assert written[-2]["message"]["toolName"] == "exec"
    assert set(ours) == set(real)
    for key, entry in ours.items():
        assert list(entry) == list(real[key]), key
        if key.startswith("message:"):
            real_msg = real[key]["message"]
            msg_keys = [k for k in entry["message"] if k != "errorMessage"]
            assert msg_keys == list(real_msg), key
    call_msg = ours["message:assistant"]["message"]
    real_call = real["message:assistant"]["message"]
    assert list(call_msg["usage"]) == list(real_call["usage"])
    assert list(call_msg["usage"]["cost"]) == list(real_call["usage"]["cost"])
    real_block = real_call["content"][0]
    tool_blocks = [b for b in call_msg["content"] if b["type"] == "toolCall"]
    assert [list(b) for b in tool_blocks] == [list(real_block)] * 3
    assert [b["type"] for b in call_msg["content"]] == ["thinking", "text"] + ["toolCall"] * 3
    assert call_msg["content"][0] == {"type": "thinking", "thinking": "Read the file, then count."}
    assert call_msg["usage"] == {
        "input": 120,
        "output": 30,
        "cacheRead": 64,
        "cacheWrite": 8,
        "totalTokens": 222,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0.0125},
    }


def test_ids_chain_and_timestamps(rich_transcript):
    entries = to_openclaw_entries(rich_transcript, seed=3)
    assert "parentId" not in entries[0]
    ids = [e["id"] for e in entries[1:]]
    assert all(re.fullmatch(r"[0-9a-f]{8}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert entries[1]["parentId"] is None
    assert [e["parentId"] for e in entries[2:]] == ids[:-1]
    iso = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
    assert all(iso.fullmatch(e["timestamp"]) for e in entries)
    # 1_700_000_000_000 ms = 2023-11-14T22:13:20Z (Unix time 1700000000).
    assert entries[0]["timestamp"] == "2023-11-14T22:13:20.000Z"
    assert entries[4]["timestamp"] == "2023-11-14T22:13:20.010Z"
    assert entries[4]["message"]["timestamp"] == 1_700_000_000_010
    assert entries[3]["data"]["timestamp"] == 1_700_000_000_000


def test_iso_from_ms_matches_openclaw():
    # The real file stamps its snapshot data 1795977104792 and the entry "...44.792Z".
    assert iso_from_ms(1795977104792) == "2026-11-29T18:31:44.792Z"
    assert iso_from_ms(0) == "1970-01-01T00:00:00.000Z"
    assert iso_from_ms(1_000_000_000_007) == "2001-09-09T01:46:40.007Z"


def test_seeded_ids_are_deterministic(rich_transcript):
    a = dumps_openclaw_jsonl(rich_transcript, seed=42)
    assert a == dumps_openclaw_jsonl(rich_transcript, seed=42)
    assert a != dumps_openclaw_jsonl(rich_transcript, seed=43)


def test_missing_timestamps_take_the_previous_one():
    t = Transcript(
        messages=[
            TranscriptMessage(role="user", text="hi"),
            TranscriptMessage(role="assistant", text="yo", timestamp_ms=5_000),
            TranscriptMessage(role="user", text="again"),
        ]
    )
    entries = to_openclaw_entries(t, seed=0)
    # No started_ms: the session starts at the first known message time.
    assert entries[0]["timestamp"] == "1970-01-01T00:00:05.000Z"
    assert [e["message"]["timestamp"] for e in entries[4:]] == [5_000, 5_000, 5_000]
    fixed = to_openclaw_entries(Transcript(), seed=0, now_ms=1_000)
    assert fixed[0]["timestamp"] == "1970-01-01T00:00:01.000Z"


def test_write_file_is_compact_utf8_jsonl(rich_transcript, tmp_path):
    path = write_openclaw_jsonl(rich_transcript, tmp_path / "chat.jsonl", seed=5)
    raw = path.read_bytes()
    assert raw.endswith(b"}\n")
    lines = raw.decode("utf-8").splitlines()
    assert len(lines) == 4 + 6
    assert "Count the lines – café" in lines[4]  # not \u-escaped, like JSON.stringify
    assert ", " not in lines[0] and '": ' not in lines[0]
    assert [json.loads(line) for line in lines] == to_openclaw_entries(rich_transcript, seed=5)


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\u0085"])
def test_line_separators_inside_strings_do_not_split_records(tmp_path, sep):
    """JSON strings hold these raw (``ensure_ascii=False``, as OpenClaw writes); str.splitlines
    splits on them, so a tool call with one in its command was cut in two and dropped."""
    command = f"rm -rf /tmp_workspace/x{sep}echo hidden"
    t = Transcript(
        messages=[
            TranscriptMessage(role="user", text="go"),
            TranscriptMessage(
                role="assistant",
                tool_calls=[
                    ToolCall(id="c1", name="exec", arguments=json.dumps({"command": command}))
                ],
            ),
            TranscriptMessage(role="toolResult", tool_call_id="c1", text=f"out{sep}put"),
            TranscriptMessage(role="assistant", text="done"),
        ]
    )
    path = write_openclaw_jsonl(t, tmp_path / "chat.jsonl", seed=1)
    assert path.read_text(encoding="utf-8").count("\n") == 4 + 4  # one record a line
    back = read_openclaw_jsonl(path)  # strict: a split record would raise
    assert [m.role for m in back.messages] == ["user", "assistant", "toolResult", "assistant"]
    assert json.loads(back.messages[1].tool_calls[0].arguments)["command"] == command
    assert back.messages[2].text == f"out{sep}put"
    text = path.read_text(encoding="utf-8")
    assert openclaw_entries_from_jsonl(text) == [json.loads(x) for x in text.split("\n") if x]


# --- round trip ---------------------------------------------------------------------------


def _assert_same_messages(back: Transcript, original: Transcript) -> None:
    assert len(back.messages) == len(original.messages)
    for b, o in zip(back.messages, original.messages, strict=True):
        assert b.role == o.role
        assert b.text == o.text
        assert b.reasoning == o.reasoning
        assert b.tool_calls == o.tool_calls  # ids, names and raw argument strings
        assert (b.tool_call_id, b.tool_name, b.is_error) == (
            o.tool_call_id,
            o.tool_name,
            o.is_error,
        )


def test_round_trip_through_openclaw(rich_transcript):
    back = read_openclaw_jsonl(dumps_openclaw_jsonl(rich_transcript, seed=9).splitlines())
    _assert_same_messages(back, rich_transcript)
    for b, o in zip(back.messages, rich_transcript.messages, strict=True):
        assert b.details == o.details
        assert b.timestamp_ms == o.timestamp_ms
        assert b.stop_reason == o.stop_reason
        assert b.response_id == o.response_id
        if o.usage is not None:
            fields = ["input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"]
            fields += ["total_tokens", "cost_usd"]
            assert b.usage.model_dump(include=set(fields)) == o.usage.model_dump(
                include=set(fields)
            )
            assert b.model == "scripted" and b.provider == "custom-127-0-0-1-9"
    assert (back.model, back.provider, back.started_ms) == (
        "scripted",
        "custom-127-0-0-1-9",
        1_700_000_000_000,
    )


def test_arguments_that_are_not_an_object_round_trip(rich_transcript):
    entries = to_openclaw_entries(rich_transcript, seed=1)
    blocks = [b for b in entries[5]["message"]["content"] if b["type"] == "toolCall"]
    assert blocks[0]["arguments"] == {"path": "/tmp_workspace/a.txt"}
    assert blocks[1]["arguments"] == {"_raw": '{"command": "wc -l a.txt"'}
    assert blocks[2]["arguments"] == {"_raw": "[1, 2]"}
    # A model that really sent {"_raw": ...} is not confused with a wrapped string.
    t = Transcript(
        messages=[
            TranscriptMessage(
                role="assistant",
                tool_calls=[ToolCall(id="c", name="exec", arguments='{"_raw": "x"}')],
            )
        ]
    )
    back = read_openclaw_jsonl(to_openclaw_entries(t, seed=1, now_ms=0))
    assert back.messages[0].tool_calls[0].arguments == '{"_raw": "x"}'


def test_error_stop_and_images_round_trip():
    t = Transcript(
        started_ms=0,
        messages=[
            TranscriptMessage(
                role="user", text="look", images=[{"data": "aGk=", "mimeType": "image/jpeg"}]
            ),
            TranscriptMessage(
                role="toolResult",
                tool_call_id="c1",
                tool_name="image",
                text="see image",
                images=[{"data": "AAAA", "mimeType": "image/png"}],
            ),
            TranscriptMessage(
                role="assistant", stop_reason="error", error_message="429 Too Many Requests"
            ),
        ],
    )
    entries = to_openclaw_entries(t, seed=2)
    assert entries[4]["message"]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image", "data": "aGk=", "mimeType": "image/jpeg"},
    ]
    assert entries[5]["message"]["content"][1] == {
        "type": "image",
        "data": "AAAA",
        "mimeType": "image/png",
    }
    err = entries[6]["message"]
    assert (err["stopReason"], err["errorMessage"], err["content"]) == (
        "error",
        "429 Too Many Requests",
        [],
    )
    back = from_openclaw_entries(entries)
    assert back.messages[0].images == [{"data": "aGk=", "mimeType": "image/jpeg"}]
    assert back.messages[1].images == [{"data": "AAAA", "mimeType": "image/png"}]
    assert (back.messages[2].stop_reason, back.messages[2].error_message) == (
        "error",
        "429 Too Many Requests",
    )


# --- other dialects and bad input -----------------------------------------------------------


def test_anthropic_style_blocks_and_tool_role():
    lines = [
        {
            "type": "session",
            "version": 3,
            "id": "s1",
            "timestamp": "2026-01-02T03:04:05.006Z",
            "cwd": "/w",
        },
        {"type": "compaction", "id": "x", "summary": "ignored"},
        {"type": "message", "message": {"role": "user", "content": "do it"}},
        {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "plan"},
                    {"type": "text", "text": "ok"},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "exec",
                        "input": {"command": "ls"},
                    },
                    {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "a"}},
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 2},
            },
        },
        {
            "type": "message",
            "message": {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a\nb"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "no such file"}],
                        "is_error": True,
                    },
                ],
            },
        },
        {"type": "message", "message": {"role": "bashExecution", "command": "ls"}},
        {
            "type": "message",
            "message": {"role": "tool", "tool_call_id": "toolu_2", "content": "again"},
        },
        {
            "type": "message",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        },
    ]
    t = read_openclaw_jsonl([json.dumps(x) for x in lines])
    assert (t.session_id, t.cwd, t.started_ms) == ("s1", "/w", 1767323045006)
    assert [m.role for m in t.messages] == [
        "user",
        "assistant",
        "toolResult",
        "toolResult",
        "toolResult",
        "assistant",
    ]
    call = t.messages[1]
    assert (call.text, call.reasoning, call.stop_reason) == ("ok", "plan", "toolUse")
    assert [(c.id, c.name, json.loads(c.arguments)) for c in call.tool_calls] == [
        ("toolu_1", "exec", {"command": "ls"}),
        ("toolu_2", "read", {"path": "a"}),
    ]
    assert (call.usage.input_tokens, call.usage.output_tokens, call.usage.cache_read_tokens) == (
        7,
        3,
        2,
    )
    assert call.usage.total_tokens == 12
    r1, r2, r3 = t.messages[2:5]
    assert (r1.tool_call_id, r1.tool_name, r1.text, r1.is_error) == (
        "toolu_1",
        "exec",
        "a\nb",
        False,
    )
    assert (r2.tool_call_id, r2.tool_name, r2.text, r2.is_error) == (
        "toolu_2",
        "read",
        "no such file",
        True,
    )
    assert (r3.tool_call_id, r3.tool_name, r3.text) == ("toolu_2", "read", "again")
    assert t.final_text() == "done"
    # The model came from no model_change, so it is empty; messages carry none either.
    assert t.model == ""


def test_arguments_stored_as_string_are_kept():
    entry = {
        "type": "message",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "toolCall", "id": "c", "name": "exec", "arguments": '{"command":"ls"}'}
            ],
        },
    }
    assert from_openclaw_entries([entry]).messages[0].tool_calls[0].arguments == '{"command":"ls"}'


def test_bad_json_line_names_file_and_line(tmp_path):
    path = tmp_path / "chat.jsonl"
    lines = CHAT_EXAMPLE.read_text().splitlines()
    path.write_text(
        "\n".join(lines[:5] + ['{"type":"message","message":{"role":"assi'] + lines[5:]) + "\n"
    )
    with pytest.raises(TaskFormatError) as err:
        read_openclaw_jsonl(path)
    assert str(err.value).startswith(f"{path}:6: entry: not valid JSON")
    assert len(read_openclaw_jsonl(path, strict=False).messages) == 4


def test_malformed_message_names_field(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(
        '{"type":"session","id":"chat"}\n{"type":"message","message":{"role":"toolResult","content":[]}}\n'
    )
    with pytest.raises(TaskFormatError, match=r"chat\.jsonl:2: message\.toolCallId: missing"):
        read_openclaw_jsonl(path)
    path.write_text(
        '{"type":"message","message":{"role":"assistant","content":[{"type":"toolCall","id":"c1"}]}}\n'
    )
    with pytest.raises(
        TaskFormatError, match=r":1: message\.content\[0\]\.name: tool call without a name"
    ):
        read_openclaw_jsonl(path)
    with pytest.raises(TaskFormatError, match="file not found"):
        read_openclaw_jsonl(tmp_path / "missing.jsonl")


def test_stop_reason_from_finish_reason():
    assert stop_reason_from_finish_reason("stop") == "stop"
    assert stop_reason_from_finish_reason("tool_calls") == "toolUse"
    assert stop_reason_from_finish_reason("length") == "length"
    assert stop_reason_from_finish_reason("content_filter") == "error"
    assert stop_reason_from_finish_reason(None) == "stop"
