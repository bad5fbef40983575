"""Shared fixtures for the transcript converter tests: real files and a hand-built transcript."""

from __future__ import annotations

import json
from typing import Any

import pytest

from clawrig.spec.llm import ToolCall
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.spec.trial import Usage
from clawrig.testing.paths import SHARED

CHAT_EXAMPLE = SHARED / "reference" / "openclaw-2026.3.24" / "chat.example.jsonl"
DATAPOINT_15 = SHARED / "examples" / "fourfolder" / "datapoints" / "000015.json"


@pytest.fixture
def chat_example_entries() -> list[dict[str, Any]]:
    """The real OpenClaw 2026.3.24 file, parsed line by line with the stdlib."""
    return [json.loads(line) for line in CHAT_EXAMPLE.read_text().splitlines() if line.strip()]


@pytest.fixture
def datapoint_15() -> dict[str, Any]:
    return json.loads(DATAPOINT_15.read_text())


@pytest.fixture
def rich_transcript() -> Transcript:
    """A transcript touching every field the two forms can carry."""
    return Transcript(
        session_id="chat",
        cwd="/tmp_workspace",
        model="scripted",
        provider="custom-127-0-0-1-9",
        started_ms=1_700_000_000_000,
        messages=[
            TranscriptMessage(
                role="user", text="Count the lines – café", timestamp_ms=1_700_000_000_010
            ),
            TranscriptMessage(
                role="assistant",
                text="Let me look.",
                reasoning="Read the file, then count.",
                tool_calls=[
                    ToolCall(
                        id="call_a", name="read", arguments='{"path": "/tmp_workspace/a.txt"}'
                    ),
                    ToolCall(id="call_b", name="exec", arguments='{"command": "wc -l a.txt"'),
                    ToolCall(id="call_c", name="exec", arguments="[1, 2]"),
                ],
                usage=Usage(
                    input_tokens=120,
                    output_tokens=30,
                    cache_read_tokens=64,
                    cache_write_tokens=8,
                    total_tokens=222,
                    cost_usd=0.0125,
                ),
                stop_reason="toolUse",
                response_id="resp-1",
                timestamp_ms=1_700_000_000_500,
            ),
            TranscriptMessage(
                role="toolResult",
                tool_call_id="call_a",
                tool_name="read",
                text="one\ntwo\nthree",
                timestamp_ms=1_700_000_000_600,
            ),
            TranscriptMessage(
                role="toolResult",
                tool_call_id="call_b",
                tool_name="exec",
                text="Invalid tool arguments: not valid JSON",
                is_error=True,
                timestamp_ms=1_700_000_000_601,
            ),
            TranscriptMessage(
                role="toolResult",
                tool_call_id="call_c",
                tool_name="exec",
                text="3 a.txt",
                details={
                    "status": "completed",
                    "exitCode": 0,
                    "durationMs": 4,
                    "aggregated": "3 a.txt",
                    "cwd": "/tmp_workspace",
                },
                timestamp_ms=1_700_000_000_700,
            ),
            TranscriptMessage(
                role="assistant",
                text="The file has 3 lines.",
                usage=Usage(input_tokens=200, output_tokens=12, total_tokens=212, cost_usd=0.001),
                stop_reason="stop",
                response_id="resp-2",
                timestamp_ms=1_700_000_001_000,
            ),
        ],
    )
