"""Model-call data shared by the LLM client, the agents, the judge and the gateway.

Messages are OpenAI chat-completions dicts (``{"role", "content", "tool_calls", ...}``); tools
are OpenAI function tools (``{"type": "function", "function": {...}}``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from clawrig.spec.trial import Usage


class ToolCall(BaseModel):
    """One tool call as the model sent it. ``arguments`` is the raw JSON string (may be invalid)."""

    id: str
    name: str
    arguments: str = "{}"


class ChatResponse(BaseModel):
    """One assistant reply. ``usage`` counts this request only; ``latency_s`` is seconds.

    ``finish_reason`` is the provider's (stop, tool_calls, length, content_filter).
    ``reasoning`` holds reasoning text when the API returns it (``reasoning`` or
    ``reasoning_content``).
    """

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    model: str = ""
    provider: str = ""
    response_id: str | None = None
    usage_rejected: list[str] = Field(default_factory=list)
    """Usage fields the provider reported with impossible values (negative, not finite, or
    over :data:`clawrig.llm.client.MAX_TOKENS_PER_REQUEST`), counted as 0 instead."""
