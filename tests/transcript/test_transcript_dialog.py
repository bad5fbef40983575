"""OpenAI formatted_dialog converters, checked against the worked four-folder sample 000015."""

from __future__ import annotations

import json

import pytest

from clawrig.errors import TaskFormatError
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.spec.trial import Usage
from clawrig.transcript import (
    dialog_statistics,
    from_formatted_dialog,
    read_openclaw_jsonl,
    to_formatted_dialog,
    to_openclaw_entries,
    transcript_usage,
)

FINAL_15 = (
    "Done. The shortest chain is Vikram Shah \u2013 Berta Alonso \u2013 Saif Hamdan (2 edges), "
    "written to /tmp_workspace/results/results.md."
)


def test_datapoint_15_reads_to_its_trajectory(datapoint_15):
    t = from_formatted_dialog(datapoint_15["formatted_dialog"])
    roles = [m.role for m in t.messages]
    assert roles == ["user"] + ["assistant", "toolResult"] * 4 + ["assistant"]
    calls = [c for m in t.steps for c in m.tool_calls]
    assert [c.name for c in calls] == ["read", "exec", "write", "read"]
    assert [c.id for c in calls] == ["call_1", "call_2", "call_3", "call_4"]
    assert json.loads(calls[1].arguments) == {"command": "mkdir -p /tmp_workspace/results"}
    assert json.loads(calls[2].arguments) == {
        "path": "/tmp_workspace/results/results.md",
        "content": "# shortest\nVikram Shah \u2013 Berta Alonso \u2013 Saif Hamdan\n",
    }
    assert t.final_text() == FINAL_15
    first_step = t.steps[0]
    assert first_step.text is None
    assert first_step.reasoning == (
        "I need the graph first; read the input file to see its structure."
    )
    results = [m for m in t.messages if m.role == "toolResult"]
    assert [(r.tool_call_id, r.tool_name) for r in results] == [
        ("call_1", "read"),
        ("call_2", "exec"),
        ("call_3", "write"),
        ("call_4", "read"),
    ]
    assert results[1].text == "(no output)\n[exit code 0]"
    assert not any(r.is_error for r in results)
    assert t.messages[0].text.startswith("## Role & Context\n")
    assert "## Task\nSorry, I'm buried in reschedules" in t.messages[0].text


def test_datapoint_15_round_trips_exactly(datapoint_15):
    dialog = datapoint_15["formatted_dialog"]
    assert to_formatted_dialog(from_formatted_dialog(dialog)) == dialog
    # Key order too: the written JSON is the published one.
    back = to_formatted_dialog(from_formatted_dialog(dialog))
    assert json.dumps(back, ensure_ascii=False) == json.dumps(dialog, ensure_ascii=False)


def test_datapoint_dict_and_metadata_model(datapoint_15):
    t = from_formatted_dialog(datapoint_15)
    assert t.model == "example"
    assert len(t.messages) == 10
    assert (
        from_formatted_dialog({"messages": datapoint_15["formatted_dialog"]}).messages == t.messages
    )
    wrapped = {"conversation": {"formatted_dialog": datapoint_15["formatted_dialog"]}}
    assert from_formatted_dialog(wrapped).messages == t.messages


def test_statistics_match_the_example(datapoint_15):
    stats = dialog_statistics(datapoint_15["formatted_dialog"])
    for key, value in datapoint_15["statistics"].items():
        assert stats[key] == value, key
    assert list(stats["tool_calls_by_name"]) == ["read", "exec", "write"]
    assert stats["turns"] == 5
    assert "tokens" not in stats


def test_statistics_tokens_when_usage_known(rich_transcript):
    dialog = to_formatted_dialog(rich_transcript)
    stats = dialog_statistics(dialog, usage=transcript_usage(rich_transcript))
    # By hand: 120+200 input, 30+12 output, 64 cache read, 8 cache write, 222+212 total.
    assert stats["tokens"] == {
        "input_tokens": 320,
        "output_tokens": 42,
        "cache_read_tokens": 64,
        "cache_write_tokens": 8,
        "total_tokens": 434,
    }
    assert (stats["messages"], stats["tool_calls"], stats["turns"]) == (6, 3, 2)
    assert stats["tool_calls_by_name"] == {"read": 1, "exec": 2}
    with_usage = dialog + [
        {"role": "assistant", "content": "x", "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    ]
    assert dialog_statistics(with_usage)["tokens"]["total_tokens"] == 7


def test_written_shapes_match_the_example(rich_transcript, datapoint_15):
    example = datapoint_15["formatted_dialog"]
    ours = to_formatted_dialog(rich_transcript)
    assert list(ours[0]) == list(example[0])
    assert list(ours[1]) == list(example[1])  # role, content, reasoning, tool_calls
    assert list(ours[1]["tool_calls"][0]) == list(example[1]["tool_calls"][0])
    assert list(ours[1]["tool_calls"][0]["function"]) == list(
        example[1]["tool_calls"][0]["function"]
    )
    assert list(ours[2]) == list(example[2])  # a successful tool result
    assert ours[3] == {
        "role": "tool",
        "tool_call_id": "call_b",
        "name": "exec",
        "content": "Invalid tool arguments: not valid JSON",
        "is_error": True,
    }
    assert ours[-1] == {"role": "assistant", "content": "The file has 3 lines."}
    assert list(ours[-1]) == list(example[-1])
    # Raw argument strings, even invalid JSON, are passed through unchanged.
    assert [c["function"]["arguments"] for c in ours[1]["tool_calls"]] == [
        '{"path": "/tmp_workspace/a.txt"}',
        '{"command": "wc -l a.txt"',
        "[1, 2]",
    ]


def test_round_trip_through_dialog(rich_transcript):
    back = from_formatted_dialog(to_formatted_dialog(rich_transcript))
    assert len(back.messages) == len(rich_transcript.messages)
    for b, o in zip(back.messages, rich_transcript.messages, strict=True):
        assert (b.role, b.text, b.reasoning) == (o.role, o.text, o.reasoning)
        assert b.tool_calls == o.tool_calls
        assert (b.tool_call_id, b.tool_name, b.is_error) == (
            o.tool_call_id,
            o.tool_name,
            o.is_error,
        )


def test_dialog_to_openclaw_and_back(datapoint_15):
    """A golden trajectory written as chat.jsonl reads back as the same dialog."""
    dialog = datapoint_15["formatted_dialog"]
    entries = to_openclaw_entries(from_formatted_dialog(dialog), seed=15, now_ms=0)
    assert to_formatted_dialog(read_openclaw_jsonl(entries)) == dialog
    exec_block = entries[7]["message"]["content"][1]  # 4 header entries, user, step, result
    assert exec_block == {
        "type": "toolCall",
        "id": "call_2",
        "name": "exec",
        "arguments": {"command": "mkdir -p /tmp_workspace/results"},
    }


def test_accepted_variants():
    dialog = [
        {"role": "system", "content": "ignored"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "think first",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "exec", "arguments": {"command": "ls"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "a.txt"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "now read"},
                {"type": "text", "text": "reading"},
                {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {"path": "a.txt"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_9",
                    "content": "hello",
                    "is_error": False,
                },
                {"type": "text", "text": "continue"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "hello it says"}]},
    ]
    t = from_formatted_dialog(dialog)
    assert [m.role for m in t.messages] == [
        "user",
        "assistant",
        "toolResult",
        "assistant",
        "toolResult",
        "user",
        "assistant",
    ]
    assert t.messages[0].text == "part one\npart two"
    step1 = t.messages[1]
    assert (step1.text, step1.reasoning) == (None, "think first")
    assert [(c.id, c.name, c.arguments) for c in step1.tool_calls] == [
        ("c1", "exec", '{"command": "ls"}')
    ]
    assert (t.messages[2].tool_name, t.messages[2].text) == ("exec", "a.txt")  # name from the call
    step2 = t.messages[3]
    assert (step2.text, step2.reasoning) == ("reading", "now read")
    assert [(c.id, c.name, json.loads(c.arguments)) for c in step2.tool_calls] == [
        ("toolu_9", "read", {"path": "a.txt"})
    ]
    assert (t.messages[4].tool_call_id, t.messages[4].tool_name, t.messages[4].text) == (
        "toolu_9",
        "read",
        "hello",
    )
    assert t.messages[5].text == "continue"
    assert t.final_text() == "hello it says"
    stats = dialog_statistics(dialog)
    assert (stats["tool_calls"], stats["tool_calls_by_name"], stats["turns"]) == (
        2,
        {"exec": 1, "read": 1},
        3,
    )


def test_user_images_become_image_url_parts():
    t = Transcript(
        messages=[
            TranscriptMessage(
                role="user", text="what is it", images=[{"data": "aGk=", "mimeType": "image/png"}]
            )
        ]
    )
    dialog = to_formatted_dialog(t)
    assert dialog == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is it"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
            ],
        }
    ]
    assert from_formatted_dialog(dialog).messages[0].images == [
        {"data": "aGk=", "mimeType": "image/png"}
    ]


def test_bad_dialogs_name_the_field():
    with pytest.raises(
        TaskFormatError, match=r"^d\.json: formatted_dialog\[1\]\.role: unknown role 'robot'"
    ):
        from_formatted_dialog(
            [{"role": "user", "content": "x"}, {"role": "robot"}], source="d.json"
        )
    with pytest.raises(TaskFormatError, match=r"formatted_dialog\[0\]\.role: missing"):
        from_formatted_dialog([{"content": "x"}])
    bad_call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}],
    }
    with pytest.raises(TaskFormatError, match=r"formatted_dialog\[0\]\.tool_calls\[0\]\.name"):
        from_formatted_dialog([bad_call])
    with pytest.raises(TaskFormatError, match=r"formatted_dialog\[0\]\.tool_call_id: missing"):
        from_formatted_dialog([{"role": "tool", "content": "x"}])
    with pytest.raises(TaskFormatError, match=r"formatted_dialog\[0\]\.content: expected a string"):
        from_formatted_dialog([{"role": "user", "content": 5}])
    with pytest.raises(TaskFormatError, match=r"^x\.json: formatted_dialog: missing"):
        from_formatted_dialog({"id": "1"}, source="x.json")


def test_transcript_usage_sums_assistant_messages(rich_transcript):
    u = transcript_usage(rich_transcript)
    assert (u.input_tokens, u.output_tokens, u.total_tokens) == (320, 42, 434)
    assert u.cost_usd == pytest.approx(0.0135)
    assert transcript_usage(Transcript()) is None
    assert isinstance(u, Usage)
