"""The agent's transcript, in one neutral shape that converts to both published forms.

- OpenClaw session JSONL (chat.jsonl; shared/reference/formats.md section 4, a real file in
  shared/reference/openclaw-2026.3.24/chat.example.jsonl): what graders read.
- OpenAI ``formatted_dialog`` (four-folder datapoints, formats.md section 2): what exports carry.

Converters live in ``clawrig.transcript``; this module holds data only.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from clawrig.spec.llm import ToolCall
from clawrig.spec.trial import Usage


class TranscriptMessage(BaseModel):
    """One message. ``role`` uses OpenClaw's names: user, assistant, toolResult.

    assistant: ``text``, ``reasoning``, ``tool_calls``, ``usage``, ``model``, ``provider``,
    ``stop_reason`` (stop | toolUse | length | error) and ``error_message``.
    toolResult: ``tool_call_id``, ``tool_name``, ``text``, ``is_error``, ``details``
    (exec: status, exitCode, durationMs, aggregated, cwd). ``timestamp_ms`` is Unix ms.
    ``images`` holds base64 image blocks ({"data", "mimeType"}) for multimodal results.
    """

    role: Literal["user", "assistant", "toolResult"]
    text: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    details: dict[str, Any] | None = None
    images: list[dict[str, str]] = Field(default_factory=list)
    usage: Usage | None = None
    model: str | None = None
    provider: str | None = None
    stop_reason: str | None = None
    error_message: str | None = None
    response_id: str | None = None
    timestamp_ms: int | None = None


class Transcript(BaseModel):
    """A whole session: ``session_id`` (OpenClaw uses "chat"), cwd, model/provider, messages."""

    session_id: str = "chat"
    cwd: str = "/tmp_workspace"
    model: str = ""
    provider: str = ""
    started_ms: int | None = None
    messages: list[TranscriptMessage] = Field(default_factory=list)

    def final_text(self) -> str:
        """Text of the LAST assistant message that has any text (DataClawBench final answer)."""
        for m in reversed(self.messages):
            if m.role == "assistant" and m.text and m.text.strip():
                return m.text
        return ""

    @property
    def steps(self) -> list[TranscriptMessage]:
        """Assistant messages, i.e. the agent's steps (metrics.md: numbered from 1)."""
        return [m for m in self.messages if m.role == "assistant"]
