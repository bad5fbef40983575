"""OpenAI ``formatted_dialog`` (four-folder datapoints) <-> :class:`Transcript`.

Format: shared/reference/formats.md section 2 and fourfolder-spec.md; a worked sample is
shared/examples/fourfolder/datapoints/000015.json. Shapes written::

    {"role": "user", "content": "<preamble + prompt>"}
    {"role": "assistant", "content": "", "reasoning": "...",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "read", "arguments": "<JSON string>"}}]}
    {"role": "tool", "tool_call_id": "call_1", "name": "read", "content": "<tool output>"}
    {"role": "assistant", "content": "<final answer>"}

``reasoning`` appears only when the step has reasoning text. There is no system role. A tool
result that is an error carries ``"is_error": true`` (clawrig's addition, written only when
true, so successful results have exactly the published keys). Images of a user message become
OpenAI ``image_url`` parts; tool-result images, usage, stop reasons and timestamps have no place
in this form and are dropped.

The reader also accepts ``reasoning_content``, content given as a list of text parts, and
Anthropic-style assistant content lists (``text``/``thinking``/``tool_use`` blocks) with user
``tool_result`` blocks; ``system``/``developer`` messages are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clawrig.errors import TaskFormatError
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.spec.trial import Usage
from clawrig.transcript._messages import Where, parse_usage, read_message


def _user_content(m: TranscriptMessage) -> str | list[dict[str, Any]]:
    if not m.images:
        return m.text or ""
    parts: list[dict[str, Any]] = []
    if m.text:
        parts.append({"type": "text", "text": m.text})
    for img in m.images:
        url = f"data:{img.get('mimeType', 'image/png')};base64,{img.get('data', '')}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def to_formatted_dialog(transcript: Transcript) -> list[dict[str, Any]]:
    """Return the transcript as an OpenAI-format ``formatted_dialog`` (list of message dicts).

    user -> {role, content}; assistant -> {role, content ("" when none), reasoning?,
    tool_calls?[{id, type: "function", function: {name, arguments: JSON string}}]};
    toolResult -> {role: "tool", tool_call_id, name, content, is_error? (only when true)}.
    Tool-call arguments are the model's raw strings, unchanged.
    """
    out: list[dict[str, Any]] = []
    for m in transcript.messages:
        if m.role == "user":
            out.append({"role": "user", "content": _user_content(m)})
        elif m.role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.text or ""}
            if m.reasoning:
                msg["reasoning"] = m.reasoning
            if m.tool_calls:
                msg["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in m.tool_calls
                ]
            out.append(msg)
        else:
            tool: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": m.tool_call_id or "",
                "name": m.tool_name or "",
                "content": m.text or "",
            }
            if m.is_error:
                tool["is_error"] = True
            out.append(tool)
    return out


def _dialog_list(messages: Any, source: str) -> Sequence[Any]:
    if isinstance(messages, Mapping):
        for key in ("formatted_dialog", "messages"):
            if isinstance(messages.get(key), list):
                return messages[key]
        conversation = messages.get("conversation")
        if isinstance(conversation, Mapping) and isinstance(
            conversation.get("formatted_dialog"), list
        ):
            return conversation["formatted_dialog"]
        raise TaskFormatError(source, "formatted_dialog", "missing (also looked for messages)")
    if not isinstance(messages, list | tuple):
        raise TaskFormatError(source, "formatted_dialog", "expected a list of messages")
    return messages


def from_formatted_dialog(
    messages: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    *,
    source: str = "formatted_dialog",
    cwd: str = "/tmp_workspace",
) -> Transcript:
    """Build a Transcript from an OpenAI-format dialog.

    ``messages``: the list itself, or a datapoint dict holding it under ``formatted_dialog``,
    ``messages`` or ``conversation.formatted_dialog``. Tool results without a ``name`` are named
    after the call they answer. Raises TaskFormatError naming ``source`` and the field
    (``formatted_dialog[3].role``) for a malformed message or an unknown role.
    """
    items = _dialog_list(messages, source)
    call_names: dict[str, str] = {}
    out: list[TranscriptMessage] = []
    for i, msg in enumerate(items):
        where = Where(source, f"formatted_dialog[{i}]")
        out += read_message(msg, where, call_names, skip_unknown_roles=False)
    model = ""
    if isinstance(messages, Mapping) and isinstance(messages.get("metadata"), Mapping):
        model = str(messages["metadata"].get("model") or "")
    return Transcript(cwd=cwd, model=model, messages=out)


def transcript_usage(transcript: Transcript) -> Usage | None:
    """Sum of the assistant messages' usages (tokens, USD), or None when none is known."""
    usages = [m.usage for m in transcript.messages if m.role == "assistant" and m.usage]
    if not usages:
        return None
    total = Usage()
    for u in usages:
        total = total.add(u)
    return total


def dialog_statistics(
    messages: Sequence[Mapping[str, Any]], usage: Usage | None = None
) -> dict[str, Any]:
    """The ``statistics`` object of a datapoint for an OpenAI-format dialog.

    Shape (shared/examples/fourfolder/datapoints/000015.json, plus ``turns`` and ``tokens``)::

        {"messages": <all messages>, "tool_calls": <calls>,
         "tool_calls_by_name": {name: count, in order of first use},
         "turns": <assistant messages>,
         "tokens": {"input_tokens", "output_tokens", "cache_read_tokens",
                    "cache_write_tokens", "total_tokens"}}   # only when usage is known

    Tokens come from ``usage`` when given, else from the sum of per-message OpenAI/OpenClaw
    ``usage`` dicts when the messages carry them.
    """
    by_name: dict[str, int] = {}
    calls = turns = 0
    for msg in messages:
        if msg.get("role") != "assistant":
            continue
        turns += 1
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, Mapping) else None
            name = fn.get("name") if isinstance(fn, Mapping) else None
            calls += 1
            by_name[str(name)] = by_name.get(str(name), 0) + 1
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, Mapping) and block.get("type") in ("tool_use", "toolCall"):
                    calls += 1
                    name = str(block.get("name"))
                    by_name[name] = by_name.get(name, 0) + 1
    stats: dict[str, Any] = {
        "messages": len(messages),
        "tool_calls": calls,
        "tool_calls_by_name": by_name,
        "turns": turns,
    }
    if usage is None:
        found = [parse_usage(m.get("usage")) for m in messages if m.get("usage")]
        known = [u for u in found if u is not None]
        if known:
            usage = Usage()
            for u in known:
                usage = usage.add(u)
    if usage is not None:
        stats["tokens"] = {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "total_tokens": usage.total_tokens,
        }
    return stats


def content_text(content: Any) -> str:
    """The text of an OpenAI message ``content``: a string as is, a list of parts joined by
    their ``text`` (other parts skipped), None as ""."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return "" if content is None else str(content)
