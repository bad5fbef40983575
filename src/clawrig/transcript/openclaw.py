"""OpenClaw session transcripts (chat.jsonl) <-> :class:`clawrig.spec.transcript.Transcript`.

Format: shared/reference/formats.md section 4; the shapes written here are those of a real file
written by OpenClaw 2026.3.24 (shared/reference/openclaw-2026.3.24/chat.example.jsonl)::

    {"type":"session","version":3,"id":"chat","timestamp":"2026-11-29T18:31:44.779Z","cwd":...}
    {"type":"model_change","id":"675dcb7b","parentId":null,"timestamp":...,"provider","modelId"}
    {"type":"thinking_level_change","id",...,"parentId":"675dcb7b","thinkingLevel":"off"}
    {"type":"custom","customType":"model-snapshot","data":{"timestamp":<ms>,"provider",
     "modelApi":"openai-completions","modelId"},"id","parentId","timestamp"}
    {"type":"message","id","parentId","timestamp":<ISO>,"message":{"role":"user",
     "content":[{"type":"text","text":...}],"timestamp":<ms>}}
    {"type":"message",...,"message":{"role":"assistant","content":[thinking, text, toolCall...],
     "api","provider","model","usage":{"input","output","cacheRead","cacheWrite","totalTokens",
     "cost":{"input","output","cacheRead","cacheWrite","total"}},"stopReason","timestamp",
     "responseId","errorMessage"?}}
    {"type":"message",...,"message":{"role":"toolResult","toolCallId","toolName",
     "content":[text/image blocks],"details"?,"isError","timestamp"}}

Entry ids are 8 hex digits; every entry after ``session`` has ``parentId`` = the previous entry's
id (the first has ``null``). Entry timestamps are ISO-8601 UTC with milliseconds and ``Z``;
message timestamps are Unix milliseconds. Token counts are tokens; costs are USD. clawrig's
:class:`~clawrig.spec.trial.Usage` keeps only the total cost, so the per-part costs are written
as 0 and ``cost.total`` carries the total. Tool-call arguments: see
:mod:`clawrig.transcript._messages` (invalid JSON is kept as ``{"_raw": "<string>"}``).

Readers skip entry types and message roles they do not know (compaction, branch summaries,
custom messages...), and also accept Anthropic-style blocks (``tool_use``, ``tool_result``) and
OpenAI-style ``role: "tool"`` messages.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clawrig.errors import TaskFormatError
from clawrig.jsonl import jsonl_lines
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.transcript._messages import (
    Where,
    arguments_to_object,
    parse_timestamp_ms,
    read_message,
)

SESSION_VERSION = 3
"""OpenClaw 2026.3.24 writes session format version 3."""
DEFAULT_API = "openai-completions"
"""The ``api`` OpenClaw records for an OpenAI-compatible chat-completions provider."""

_FINISH_TO_STOP = {
    "stop": "stop",
    "tool_calls": "toolUse",
    "function_call": "toolUse",
    "length": "length",
    "content_filter": "error",
}


def stop_reason_from_finish_reason(finish_reason: str | None) -> str:
    """Map an OpenAI ``finish_reason`` to OpenClaw's ``stopReason``.

    stop -> stop, tool_calls/function_call -> toolUse, length -> length, content_filter -> error
    (pi-ai's openai-completions mapping); anything else, or None, -> stop.
    """
    return _FINISH_TO_STOP.get(finish_reason or "stop", "stop")


def iso_from_ms(ms: int) -> str:
    """ISO-8601 UTC with milliseconds and ``Z`` (``2026-11-29T18:31:44.779Z``) from Unix ms."""
    seconds, millis = divmod(int(ms), 1000)
    base = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{millis:03d}Z"


def _num(x: float) -> int | float:
    """JSON numbers as JavaScript writes them: integral values without ``.0``."""
    return int(x) if float(x).is_integer() else x


class _Ids:
    """Unique 8-hex-digit entry ids; reproducible when ``seed`` is given."""

    def __init__(self, seed: int | None):
        self._rng = random.Random(seed) if seed is not None else random.SystemRandom()
        self._used: set[str] = set()

    def __call__(self) -> str:
        while True:
            value = f"{self._rng.getrandbits(32):08x}"
            if value not in self._used:
                self._used.add(value)
                return value


def _usage_dict(message: TranscriptMessage) -> dict[str, Any]:
    u = message.usage
    if u is None:
        inp = out = cr = cw = total = 0
        cost = 0.0
    else:
        inp, out = u.input_tokens, u.output_tokens
        cr, cw = u.cache_read_tokens, u.cache_write_tokens
        total = u.total_tokens or inp + out + cr + cw
        cost = u.cost_usd
    return {
        "input": inp,
        "output": out,
        "cacheRead": cr,
        "cacheWrite": cw,
        "totalTokens": total,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": _num(cost)},
    }


def _image_blocks(message: TranscriptMessage) -> list[dict[str, Any]]:
    return [
        {"type": "image", "data": img.get("data", ""), "mimeType": img.get("mimeType", "image/png")}
        for img in message.images
    ]


def _message_dict(m: TranscriptMessage, ts: int, transcript: Transcript, api: str) -> dict:
    if m.role == "user":
        content: list[dict[str, Any]] = []
        if m.text is not None:
            content.append({"type": "text", "text": m.text})
        content += _image_blocks(m)
        return {"role": "user", "content": content, "timestamp": ts}
    if m.role == "toolResult":
        content = [{"type": "text", "text": m.text or ""}] + _image_blocks(m)
        msg: dict[str, Any] = {
            "role": "toolResult",
            "toolCallId": m.tool_call_id or "",
            "toolName": m.tool_name or "",
            "content": content,
        }
        if m.details is not None:
            msg["details"] = m.details
        msg["isError"] = m.is_error
        msg["timestamp"] = ts
        return msg
    content = []
    if m.reasoning:
        content.append({"type": "thinking", "thinking": m.reasoning})
    if m.text:
        content.append({"type": "text", "text": m.text})
    content += _image_blocks(m)
    for call in m.tool_calls:
        content.append(
            {
                "type": "toolCall",
                "id": call.id,
                "name": call.name,
                "arguments": arguments_to_object(call.arguments),
            }
        )
    stop_reason = m.stop_reason or ("toolUse" if m.tool_calls else "stop")
    msg = {
        "role": "assistant",
        "content": content,
        "api": api,
        "provider": m.provider if m.provider is not None else transcript.provider,
        "model": m.model if m.model is not None else transcript.model,
        "usage": _usage_dict(m),
        "stopReason": stop_reason,
        "timestamp": ts,
    }
    if m.response_id is not None:
        msg["responseId"] = m.response_id
    if m.error_message is not None or stop_reason == "error":
        msg["errorMessage"] = m.error_message or ""
    return msg


def to_openclaw_entries(
    transcript: Transcript,
    *,
    seed: int | None = None,
    thinking_level: str = "off",
    api: str = DEFAULT_API,
    now_ms: int | None = None,
) -> list[dict[str, Any]]:
    """Return the OpenClaw session entries (one dict per chat.jsonl line) for ``transcript``.

    Entries: ``session``, ``model_change``, ``thinking_level_change``, ``custom``
    (model-snapshot), then one ``message`` per transcript message, with ids chained through
    ``parentId``. Ids are random 8-hex strings, reproducible when ``seed`` is given. Times:
    the session starts at ``transcript.started_ms``, else the first message's ``timestamp_ms``,
    else ``now_ms``, else the current time; a message without ``timestamp_ms`` takes the
    previous time. With a ``seed`` and a known start the output is fully deterministic.
    """
    ids = _Ids(seed)
    first_ts = next((m.timestamp_ms for m in transcript.messages if m.timestamp_ms), None)
    start = transcript.started_ms
    if start is None:
        start = first_ts
    if start is None:
        start = now_ms if now_ms is not None else int(time.time() * 1000)
    start_iso = iso_from_ms(start)

    entries: list[dict[str, Any]] = [
        {
            "type": "session",
            "version": SESSION_VERSION,
            "id": transcript.session_id,
            "timestamp": start_iso,
            "cwd": transcript.cwd,
        }
    ]
    parent: str | None = None

    def add(entry: dict[str, Any]) -> None:
        nonlocal parent
        parent = entry["id"]
        entries.append(entry)

    add(
        {
            "type": "model_change",
            "id": ids(),
            "parentId": parent,
            "timestamp": start_iso,
            "provider": transcript.provider,
            "modelId": transcript.model,
        }
    )
    add(
        {
            "type": "thinking_level_change",
            "id": ids(),
            "parentId": parent,
            "timestamp": start_iso,
            "thinkingLevel": thinking_level,
        }
    )
    add(
        {
            "type": "custom",
            "customType": "model-snapshot",
            "data": {
                "timestamp": start,
                "provider": transcript.provider,
                "modelApi": api,
                "modelId": transcript.model,
            },
            "id": ids(),
            "parentId": parent,
            "timestamp": start_iso,
        }
    )
    ts = start
    for m in transcript.messages:
        if m.timestamp_ms is not None:
            ts = m.timestamp_ms
        add(
            {
                "type": "message",
                "id": ids(),
                "parentId": parent,
                "timestamp": iso_from_ms(ts),
                "message": _message_dict(m, ts, transcript, api),
            }
        )
    return entries


def dumps_openclaw_jsonl(transcript: Transcript, **options: Any) -> str:
    """chat.jsonl text: one compact JSON object per line (UTF-8 kept), newline-terminated.

    ``options`` are those of :func:`to_openclaw_entries`.
    """
    entries = to_openclaw_entries(transcript, **options)
    return "".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in entries)


def write_openclaw_jsonl(transcript: Transcript, path: Path | str, **options: Any) -> Path:
    """Write ``transcript`` as chat.jsonl at ``path`` (UTF-8); return the path.

    ``options`` are those of :func:`to_openclaw_entries`. Parent folders must exist.
    """
    path = Path(path)
    path.write_text(dumps_openclaw_jsonl(transcript, **options), encoding="utf-8")
    return path


def _parse_lines(
    lines: Iterable[str], source: str, strict: bool
) -> list[tuple[int, dict[str, Any]]]:
    out: list[tuple[int, dict[str, Any]]] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:  # JSONDecodeError, or an int past Python's digit limit
            if not strict:
                continue
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)[:200]
            raise TaskFormatError(source, "entry", f"not valid JSON ({why})", line=n) from None
        if not isinstance(value, dict):
            if not strict:
                continue
            raise TaskFormatError(source, "entry", "not a JSON object", line=n)
        out.append((n, value))
    return out


def openclaw_entries_from_jsonl(
    text: str, *, source: str = "chat.jsonl", strict: bool = True
) -> list[dict[str, Any]]:
    """Parse chat.jsonl text into its entries (what graders receive as ``transcript=``).

    Blank lines are ignored. A line that is not a JSON object raises TaskFormatError naming
    ``source`` and the line, unless ``strict`` is False, in which case it is skipped (a file cut
    off mid-line by a killed agent).
    """
    return [entry for _, entry in _parse_lines(jsonl_lines(text), source, strict)]


def from_openclaw_entries(
    entries: Iterable[dict[str, Any]], *, source: str = "chat.jsonl"
) -> Transcript:
    """Build a Transcript from OpenClaw session entries (as parsed from chat.jsonl).

    ``session`` gives session_id, cwd and started_ms; the first ``model_change`` (else the
    model-snapshot, else the first assistant message) gives model and provider; ``message``
    entries give the messages (also Claude-Code-style entries of type ``user``/``assistant``
    holding a ``message``). Other entry types are skipped. Raises TaskFormatError naming
    ``source``, the 1-based entry number and the field for a malformed message.
    """
    return _from_numbered(enumerate(entries, start=1), source)


def _from_numbered(numbered: Iterable[tuple[int, Any]], source: str) -> Transcript:
    transcript = Transcript()
    have_session = have_model = False
    call_names: dict[str, str] = {}
    snapshot: tuple[str, str] | None = None
    for n, entry in numbered:
        if not isinstance(entry, dict):
            raise TaskFormatError(source, "entry", "not a JSON object", line=n)
        kind = entry.get("type")
        if kind == "session" and not have_session:
            have_session = True
            if isinstance(entry.get("id"), str):
                transcript.session_id = entry["id"]
            if isinstance(entry.get("cwd"), str):
                transcript.cwd = entry["cwd"]
            transcript.started_ms = parse_timestamp_ms(entry.get("timestamp"))
        elif kind == "model_change" and not have_model:
            have_model = True
            transcript.model = str(entry.get("modelId") or "")
            transcript.provider = str(entry.get("provider") or "")
        elif kind == "custom" and entry.get("customType") == "model-snapshot":
            data = entry.get("data")
            if isinstance(data, dict) and snapshot is None:
                snapshot = (str(data.get("modelId") or ""), str(data.get("provider") or ""))
        elif kind in ("message", "user", "assistant") and "message" in entry:
            where = Where(source, "message", line=n)
            transcript.messages += read_message(
                entry["message"],
                where,
                call_names,
                skip_unknown_roles=True,
                timestamp_ms=parse_timestamp_ms(entry.get("timestamp")),
            )
    if not have_model:
        if snapshot is not None:
            transcript.model, transcript.provider = snapshot
        else:
            first = next((m for m in transcript.messages if m.role == "assistant"), None)
            if first is not None:
                transcript.model = first.model or ""
                transcript.provider = first.provider or ""
    return transcript


def read_openclaw_jsonl(
    path_or_lines: Path | str | Iterable[str | dict[str, Any]], *, strict: bool = True
) -> Transcript:
    """Read an OpenClaw chat.jsonl into a Transcript.

    ``path_or_lines``: a path (Path or str) to the file, the JSONL text itself (a str starting
    with ``{``), or an iterable of JSONL lines (str) or of already parsed entries (dict), e.g. a
    grader's ``transcript=`` list. Raises
    TaskFormatError naming the file, line and field for bad input; a missing file raises
    TaskFormatError too. ``strict``: see :func:`openclaw_entries_from_jsonl`.
    """
    if isinstance(path_or_lines, str) and path_or_lines.lstrip().startswith("{"):
        lines = jsonl_lines(path_or_lines)
        return _from_numbered(_parse_lines(lines, "<transcript>", strict), "<transcript>")
    if isinstance(path_or_lines, str | Path):
        path = Path(path_or_lines)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise TaskFormatError(path, "transcript", "file not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise TaskFormatError(path, "transcript", f"cannot read: {exc}") from None
        return _from_numbered(_parse_lines(jsonl_lines(text), str(path), strict), str(path))
    items = list(path_or_lines)
    entries = [i for i in items if isinstance(i, dict)]
    lines = [i for i in items if isinstance(i, str)]
    if len(entries) == len(items):
        return from_openclaw_entries(entries, source="<transcript>")
    if len(lines) == len(items):
        return _from_numbered(_parse_lines(lines, "<transcript>", strict), "<transcript>")
    raise TaskFormatError("<transcript>", "entries", "expected JSONL lines or entry objects")
