"""Shared pieces of the two transcript converters: tool-call arguments and message reading.

Both readers (OpenClaw chat.jsonl and OpenAI ``formatted_dialog``) accept the same three message
dialects, because real files mix them:

- OpenClaw / pi-ai (shared/reference/formats.md section 4): content blocks ``text``,
  ``thinking``, ``toolCall`` {id, name, arguments: object}, ``image`` {data, mimeType}; role
  ``toolResult`` with ``toolCallId``, ``toolName``, ``isError``, ``details``.
- OpenAI chat completions (formats.md section 2): ``content`` as a string or a list of text /
  ``image_url`` parts, ``reasoning`` or ``reasoning_content``, ``tool_calls`` [{id, type,
  function: {name, arguments: JSON string}}]; role ``tool`` with ``tool_call_id``, ``name``.
- Anthropic Messages: blocks ``tool_use`` {id, name, input}, ``tool_result`` {tool_use_id,
  content, is_error} inside a user message, ``thinking``, ``image`` {source: {data,
  media_type}}.

Tool-call arguments. :class:`clawrig.spec.llm.ToolCall` keeps the model's raw JSON string;
OpenClaw stores an object. :func:`arguments_to_object` parses the string; when it is not a JSON
object (invalid JSON, an array, a number...) the object is ``{"_raw": "<the string>"}``, and
:func:`arguments_from_value` turns that back into the exact string. A valid object is re-encoded
as ``json.dumps(obj, ensure_ascii=False)`` (default separators), so it round-trips byte for byte
when the model used that spacing and by value otherwise. (OpenClaw itself keeps ``{}`` for
unparseable arguments, which loses them; clawrig keeps them.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from clawrig.errors import TaskFormatError
from clawrig.jsonl import loads_strict
from clawrig.spec.llm import ToolCall
from clawrig.spec.transcript import TranscriptMessage
from clawrig.spec.trial import TOOL_ARGUMENTS_MAX_DEPTH, Usage, nested_deeper

RAW_ARGUMENTS_KEY = "_raw"
"""Key of the object that stands for tool-call arguments that are not a JSON object."""

_ANTHROPIC_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "toolUse",
    "max_tokens": "length",
    "refusal": "error",
}
_DATA_URL = re.compile(r"^data:(?P<mime>[^;,]+);base64,(?P<data>.*)$", re.DOTALL)


def arguments_to_object(raw: str) -> dict[str, Any]:
    """Return the OpenClaw ``arguments`` object for a raw JSON arguments string.

    A JSON object is returned parsed; anything else (invalid or non-RFC 8259 JSON such as
    ``NaN``, a non-object value, an
    object whose only key is ``_raw``, which would be ambiguous, or one nested deeper than
    :data:`TOOL_ARGUMENTS_MAX_DEPTH`) becomes ``{"_raw": raw}``.
    """
    try:
        value = loads_strict(raw)  # (NaN or 1e999 would be written back as bare tokens)
    # ValueError: any parse error (JSONDecodeError is one; so is an integer past Python's
    # int-conversion digit limit, and NaN/Infinity); RecursionError: nested past Python's limit
    except (ValueError, TypeError, RecursionError):
        return {RAW_ARGUMENTS_KEY: raw}
    if (
        isinstance(value, dict)
        and set(value) != {RAW_ARGUMENTS_KEY}
        and not nested_deeper(value, TOOL_ARGUMENTS_MAX_DEPTH)
    ):
        return value
    return {RAW_ARGUMENTS_KEY: raw}


def arguments_from_value(value: Any) -> str:
    """Return the raw arguments string for an arguments value read from a file.

    ``{"_raw": s}`` -> ``s``; another object -> ``json.dumps(obj, ensure_ascii=False)``; a string
    (OpenAI's form) is kept as is; ``None`` -> ``"{}"``; any other JSON value is dumped.
    """
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {RAW_ARGUMENTS_KEY}:
        raw = value[RAW_ARGUMENTS_KEY]
        if isinstance(raw, str):
            return raw
    return json.dumps(value, ensure_ascii=False)


def parse_timestamp_ms(value: Any) -> int | None:
    """Unix milliseconds from an int/float (ms) or an ISO-8601 string (``...Z`` allowed)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if dt.tzinfo is None:
            return None
        return int(dt.timestamp() * 1000 + (0.5 if dt.timestamp() >= 0 else -0.5))
    return None


@dataclass
class Where:
    """Location used in error messages: the file (or a label), the line and a field prefix."""

    source: str
    field: str
    line: int | None = None

    def error(self, sub: str, message: str) -> TaskFormatError:
        name = f"{self.field}.{sub}" if sub else self.field
        return TaskFormatError(self.source, name, message, line=self.line)


@dataclass
class _Parts:
    texts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[TranscriptMessage] = field(default_factory=list)
    images: list[dict[str, str]] = field(default_factory=list)


def _image(block: Mapping[str, Any]) -> dict[str, str] | None:
    if isinstance(block.get("data"), str):
        mime = block.get("mimeType") or block.get("mime_type") or "image/png"
        return {"data": block["data"], "mimeType": str(mime)}
    source = block.get("source")
    if isinstance(source, dict) and isinstance(source.get("data"), str):
        return {"data": source["data"], "mimeType": str(source.get("media_type") or "image/png")}
    image_url = block.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if isinstance(url, str):
        m = _DATA_URL.match(url)
        if m:
            return {"data": m["data"], "mimeType": m["mime"]}
    return None


def _tool_call(block: Mapping[str, Any], where: Where, sub: str) -> ToolCall:
    raw_fn = block.get("function")
    fn: Mapping[str, Any] = raw_fn if isinstance(raw_fn, dict) else block
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise where.error(f"{sub}.name", "tool call without a name")
    call_id = block.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise where.error(f"{sub}.id", f"tool call {name!r} without an id")
    if "arguments" in fn:
        args = fn["arguments"]
    else:
        args = fn.get("input")
    return ToolCall(id=call_id, name=name, arguments=arguments_from_value(args))


def _parts(content: Any, where: Where, sub: str = "content") -> _Parts:
    """Split message content (a string or a list of blocks of any dialect) into its parts."""
    parts = _Parts()
    if content is None:
        return parts
    if isinstance(content, str):
        parts.texts.append(content)
        return parts
    if not isinstance(content, list):
        got = type(content).__name__
        raise where.error(sub, f"expected a string or a list of blocks, got {got}")
    for i, block in enumerate(content):
        bsub = f"{sub}[{i}]"
        if isinstance(block, str):
            parts.texts.append(block)
            continue
        if not isinstance(block, dict):
            raise where.error(bsub, f"expected an object, got {type(block).__name__}")
        kind = block.get("type")
        if kind in ("text", "input_text", "output_text"):
            block_text = block.get("text")
            if not isinstance(block_text, str):
                raise where.error(f"{bsub}.text", "text block without a string 'text'")
            parts.texts.append(block_text)
        elif kind == "thinking":
            thinking = block.get("thinking")
            if isinstance(thinking, str):
                parts.reasoning.append(thinking)
        elif kind in ("toolCall", "tool_use", "function"):
            parts.tool_calls.append(_tool_call(block, where, bsub))
        elif kind == "tool_result":
            call_id = block.get("tool_use_id") or block.get("toolCallId")
            if not isinstance(call_id, str) or not call_id:
                raise where.error(f"{bsub}.tool_use_id", "tool_result block without tool_use_id")
            inner = _parts(block.get("content"), where, f"{bsub}.content")
            parts.tool_results.append(
                TranscriptMessage(
                    role="toolResult",
                    tool_call_id=call_id,
                    tool_name=block.get("name") or block.get("toolName"),
                    text="\n".join(inner.texts),
                    images=inner.images,
                    is_error=bool(block.get("is_error") or block.get("isError")),
                )
            )
        elif kind in ("image", "image_url", "input_image"):
            image = _image(block)
            if image is not None:
                parts.images.append(image)
        # Other block types (redacted_thinking, server tools, ...) are skipped.
    return parts


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def parse_usage(usage: Any) -> Usage | None:
    """Usage of one request from OpenClaw, OpenAI or Anthropic usage dicts (tokens; USD).

    ``request_count`` is 1: a message's usage is that of the one request that produced it.
    """
    if not isinstance(usage, dict):
        return None
    if "input" in usage or "output" in usage or "totalTokens" in usage:  # OpenClaw / pi-ai
        cost = usage.get("cost")
        total_cost = cost.get("total", 0.0) if isinstance(cost, dict) else cost
        inp, out = _int(usage.get("input")), _int(usage.get("output"))
        cr, cw = _int(usage.get("cacheRead")), _int(usage.get("cacheWrite"))
        total = _int(usage.get("totalTokens")) or inp + out + cr + cw
    elif "prompt_tokens" in usage or "completion_tokens" in usage:  # OpenAI
        inp, out = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
        cr = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
        cw = 0
        total = _int(usage.get("total_tokens")) or inp + out
        total_cost = usage.get("cost", 0.0)
    elif "input_tokens" in usage or "output_tokens" in usage:  # Anthropic
        inp, out = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
        cr = _int(usage.get("cache_read_input_tokens"))
        cw = _int(usage.get("cache_creation_input_tokens"))
        total = inp + out + cr + cw
        total_cost = usage.get("cost_usd", 0.0)
    else:
        return None
    return Usage(
        input_tokens=inp,
        output_tokens=out,
        cache_read_tokens=cr,
        cache_write_tokens=cw,
        total_tokens=total,
        cost_usd=float(total_cost) if isinstance(total_cost, int | float) else 0.0,
        request_count=1,
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def read_message(
    msg: Any,
    where: Where,
    call_names: dict[str, str],
    *,
    skip_unknown_roles: bool,
    timestamp_ms: int | None = None,
) -> list[TranscriptMessage]:
    """Normalise one message of any dialect into zero or more transcript messages.

    ``call_names`` maps tool-call ids seen so far to tool names; it is updated and used to name
    tool results that do not carry a name. A user message holding Anthropic ``tool_result``
    blocks yields those results first, then the user text when there is any. Roles
    ``system``/``developer`` and, when ``skip_unknown_roles``, any other unknown role yield
    nothing. Raises TaskFormatError (file, line, field) for malformed messages.
    """
    if not isinstance(msg, dict):
        raise where.error("", f"expected an object, got {type(msg).__name__}")
    role = msg.get("role")
    if not isinstance(role, str):
        raise where.error("role", "missing or not a string")
    ts = parse_timestamp_ms(msg.get("timestamp"))
    if ts is None:
        ts = timestamp_ms

    if role == "user":
        parts = _parts(msg.get("content"), where)
        out: list[TranscriptMessage] = []
        for result in parts.tool_results:
            if result.tool_name is None:
                result.tool_name = call_names.get(result.tool_call_id or "")
            result.timestamp_ms = ts
            out.append(result)
        if parts.texts or parts.images or not parts.tool_results:
            out.append(
                TranscriptMessage(
                    role="user",
                    text="\n".join(parts.texts) if parts.texts else "",
                    images=parts.images,
                    timestamp_ms=ts,
                )
            )
        return out

    if role == "assistant":
        parts = _parts(msg.get("content"), where)
        for key in ("reasoning", "reasoning_content"):
            if isinstance(msg.get(key), str) and msg[key]:
                parts.reasoning.insert(0, msg[key])
                break
        raw_calls = msg.get("tool_calls")
        if raw_calls is not None:
            if not isinstance(raw_calls, list):
                raise where.error("tool_calls", "expected a list")
            for i, call in enumerate(raw_calls):
                if not isinstance(call, dict):
                    raise where.error(f"tool_calls[{i}]", "expected an object")
                parts.tool_calls.append(_tool_call(call, where, f"tool_calls[{i}]"))
        for call in parts.tool_calls:
            call_names[call.id] = call.name
        text = "\n".join(parts.texts)
        stop_reason = _str(msg.get("stopReason"))
        if stop_reason is None and isinstance(msg.get("stop_reason"), str):
            stop_reason = _ANTHROPIC_STOP.get(msg["stop_reason"], msg["stop_reason"])
        return [
            TranscriptMessage(
                role="assistant",
                text=text or None,
                reasoning="\n".join(parts.reasoning) or None,
                tool_calls=parts.tool_calls,
                images=parts.images,
                usage=parse_usage(msg.get("usage")),
                model=_str(msg.get("model")),
                provider=_str(msg.get("provider")),
                stop_reason=stop_reason,
                error_message=_str(msg.get("errorMessage")) or _str(msg.get("error_message")),
                response_id=_str(msg.get("responseId")) or _str(msg.get("id")),
                timestamp_ms=ts,
            )
        ]

    if role in ("toolResult", "tool"):
        call_id = msg.get("toolCallId") or msg.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise where.error("toolCallId" if role == "toolResult" else "tool_call_id", "missing")
        parts = _parts(msg.get("content"), where)
        name = _str(msg.get("toolName")) or _str(msg.get("name")) or call_names.get(call_id)
        details = msg.get("details")
        is_error = msg.get("isError", msg.get("is_error", False))
        return [
            TranscriptMessage(
                role="toolResult",
                tool_call_id=call_id,
                tool_name=name,
                text="\n".join(parts.texts),
                images=parts.images,
                is_error=bool(is_error),
                details=details if isinstance(details, dict) else None,
                timestamp_ms=ts,
            )
        ]

    if role in ("system", "developer") or skip_unknown_roles:
        return []
    raise where.error("role", f"unknown role {role!r} (expected user, assistant, tool)")
