"""Model-call data shared by the LLM client, the agents, the judge and the gateway.

Messages are OpenAI chat-completions dicts (``{"role", "content", "tool_calls", ...}``); tools
are OpenAI function tools (``{"type": "function", "function": {...}}``).
"""

from __future__ import annotations

import contextvars
import json
import re
from typing import Any

from pydantic import BaseModel, Field, field_validator

from clawrig.spec.trial import Usage

AGENT_SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "clawrig_agent_session", default=None
)
"""The sub-agent session (its ``sessions_spawn`` key) whose model calls the current asyncio task
makes; None for the trial's own agent. The native agent's sub-agent runner sets it; the model
gateway writes it in each such call's record (``session`` in ``model_calls.jsonl``), so an RL
episode's turns are its agent's own conversation (:mod:`clawrig.rl.episode`: helper-213 found
sub-agents' calls among them, each paired with another message)."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(
    r"(?<!\\)((?:\\\\)*)"  # an even run of backslashes before: the escape is one
    r"\\u(?:([dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?|[dD][c-fC-F][0-9a-fA-F]{2})"
)


def surrogate_free(value: Any, *, allow_nan: bool = True) -> Any:
    """``value`` (JSON data) with each lone surrogate in its strings written as U+FFFD
    (:func:`surrogate_free_json` over its JSON text): what no UTF-8 encoder refuses. Raises
    what ``json.dumps`` raises for data JSON cannot carry (TypeError; ValueError for a NaN
    unless ``allow_nan``; RecursionError)."""
    return json.loads(surrogate_free_json(json.dumps(value, allow_nan=allow_nan)))


def model_text(text: str | None) -> str | None:
    """A model's text as clawrig keeps it: lone surrogates (a provider may send the JSON escape
    ``"\\udcff"``; no UTF-8 file can hold one, so the transcript, the records and the trial
    folder could not be written) become U+FFFD, as a UTF-8 decoder makes of invalid bytes."""
    return text if text is None or not _SURROGATE.search(text) else _SURROGATE.sub("\ufffd", text)


def model_arguments(raw: str) -> str:
    """A tool call's raw JSON arguments as clawrig keeps them: :func:`surrogate_free_json`."""
    return surrogate_free_json(raw)


def surrogate_free_json(raw: str) -> str:
    """JSON text that decodes to no lone surrogate: :func:`model_text`, and a JSON escape of a
    lone surrogate (``\\udcff``, which would decode to one) written as ``\\ufffd``; an escaped
    pair (``\\ud83d\\ude00``) stays. For a tool call's arguments, and for a trial folder's
    JSON files an export writes out again (helper-189: a ``"\\ud800"`` in a hand-edited
    formatted_dialog.json made ``export sft`` a UnicodeEncodeError traceback)."""
    raw = model_text(raw) or ""

    def fix(m: re.Match[str]) -> str:
        if m.group(2) and m.group(3):
            return m.group(0)
        return m.group(1) + "\\ufffd"

    return _ESCAPED_SURROGATE.sub(fix, raw) if "\\u" in raw else raw


class ToolCall(BaseModel):
    """One tool call as the model sent it. ``arguments`` is the raw JSON string (may be invalid)."""

    id: str
    name: str
    arguments: str = "{}"

    @field_validator("name", "id")
    @classmethod
    def _text(cls, value: str) -> str:
        return model_text(value) or ""

    @field_validator("arguments")
    @classmethod
    def _arguments(cls, value: str) -> str:
        return model_arguments(value)


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

    @field_validator("content", "reasoning")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return model_text(value)
