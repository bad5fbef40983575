"""Fixtures for the grading tests: real DataClawBench tasks and a transcript builder.

- ``dcb``: ``dcb("hypothesis_verification/hard001")`` -> the Task read by clawrig's DataClawBench
  reader from the real files in /work/shared/data/dataclawbench (gold + upstream task file when
  there is one); ``dcb.gold(...)`` -> the gold JSON itself, read with the stdlib.
- ``make_transcript(steps, final=None)``: an agent transcript whose assistant messages are the
  given steps, in order. A step is ``(assistant_text, [tool_output, ...])``: each tool output is
  the result of one ``exec`` call of that step. ``final`` appends a last assistant message with
  that text and no tool call (stopReason "stop"). The user prompt comes first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import pytest

from clawrig.spec.llm import ToolCall
from clawrig.spec.task import Task
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.tasks.dataclaw import read_dataclaw_root
from clawrig.tasks.text import IssueCollector
from clawrig.testing.paths import SHARED

DATACLAW = SHARED / "data" / "dataclawbench"
QA_GOLD = DATACLAW / "assets" / "qa_gold"


@cache
def _tasks_by_gold() -> dict[str, Task]:
    tasks = read_dataclaw_root(DATACLAW, IssueCollector())
    return {
        t.metadata["gold_file"].removeprefix("qa_gold/").removesuffix(".json"): t for t in tasks
    }


class _Dcb:
    def __call__(self, key: str) -> Task:
        return _tasks_by_gold()[key]

    def gold(self, key: str) -> dict[str, Any]:
        return json.loads((QA_GOLD / f"{key}.json").read_text(encoding="utf-8"))


@pytest.fixture
def dcb() -> _Dcb:
    return _Dcb()


Step = tuple[str, Sequence[str]]


def build_transcript(steps: Sequence[Step], final: str | None = None) -> Transcript:
    messages = [TranscriptMessage(role="user", text="task prompt")]
    for i, (text, outputs) in enumerate(steps, start=1):
        calls = [
            ToolCall(id=f"call_{i}_{k}", name="exec", arguments=json.dumps({"command": f"s{i}"}))
            for k in range(len(outputs))
        ]
        messages.append(
            TranscriptMessage(
                role="assistant",
                text=text or None,
                tool_calls=calls,
                stop_reason="toolUse" if calls else "stop",
            )
        )
        for call, out in zip(calls, outputs, strict=True):
            messages.append(
                TranscriptMessage(
                    role="toolResult", tool_call_id=call.id, tool_name="exec", text=out
                )
            )
    if final is not None:
        messages.append(TranscriptMessage(role="assistant", text=final, stop_reason="stop"))
    return Transcript(messages=messages)


@pytest.fixture
def make_transcript() -> Callable[..., Transcript]:
    return build_transcript
