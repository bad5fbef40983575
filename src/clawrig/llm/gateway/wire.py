"""The OpenAI chat-completions wire format as the gateway sees it: completion objects, SSE
chunks assembled into a completion and a completion streamed back as SSE, error bodies.

Shapes: OpenAI's ``chat.completion`` and ``chat.completion.chunk`` objects
(https://platform.openai.com/docs/api-reference/chat).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from typing import Any

from starlette.responses import JSONResponse  # FastAPI's JSONResponse (it re-exports it)


def _completion(
    *,
    content: str | None,
    model: str,
    response_id: str | None = None,
    finish_reason: str = "stop",
    tool_calls: list[dict[str, Any]] | None = None,
    reasoning: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = tool_calls
    out: dict[str, Any] = {
        "id": response_id or f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def completion_from_chunks(chunks: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Assemble streamed ``chat.completion.chunk`` objects into one ``chat.completion``.

    Text, reasoning (``reasoning_content`` or ``reasoning``) and tool-call deltas (by
    ``index``: id, name, argument pieces) are joined; the last ``finish_reason`` and ``usage``
    win; id, model and created come from the first chunk that has them. An ``error`` object in
    a chunk is kept under the top-level ``error`` key.
    """
    content: list[str] = []
    reasoning: list[str] = []
    reasoning_key = "reasoning_content"
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage = None
    head: dict[str, Any] = {}
    error = None
    for ch in chunks:
        for k in ("id", "model", "created"):
            if k not in head and ch.get(k):
                head[k] = ch[k]
        if ch.get("usage"):
            usage = ch["usage"]
        if ch.get("error"):
            error = ch["error"]
        for choice in ch.get("choices") or []:
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                content.append(delta["content"])
            for rk in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(rk), str) and delta[rk]:
                    reasoning.append(delta[rk])
                    reasoning_key = rk
            for tc in delta.get("tool_calls") or []:
                idx = int(tc.get("index", len(calls)))
                entry = calls.setdefault(
                    idx, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                if tc.get("id"):
                    entry["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name") and not entry["function"]["name"]:
                    entry["function"]["name"] = fn["name"]
                if fn.get("arguments"):
                    entry["function"]["arguments"] += fn["arguments"]
    tool_calls = [calls[i] for i in sorted(calls)]
    for i, tc in enumerate(tool_calls):
        tc["id"] = tc["id"] or f"call_{i}"
    out = _completion(
        content="".join(content) if content else None,
        model=str(head.get("model", "")),
        response_id=head.get("id"),
        finish_reason=finish or ("tool_calls" if tool_calls else "stop"),
        tool_calls=tool_calls or None,
        usage=usage,
    )
    if reasoning:
        msg = out["choices"][0]["message"]
        msg[reasoning_key] = "".join(reasoning)
    if head.get("created"):
        out["created"] = head["created"]
    if error is not None:
        out["error"] = error
    return out


def _pieces(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def sse_from_completion(completion: dict[str, Any], *, include_usage: bool) -> list[bytes]:
    """The SSE events (``data: {...}\\n\\n`` ... ``data: [DONE]\\n\\n``) that stream
    ``completion`` in OpenAI's chunk shape (what a replayed streamed request receives)."""
    cid = completion.get("id") or f"chatcmpl-{uuid.uuid4().hex[:12]}"
    created = completion.get("created") or int(time.time())
    model = completion.get("model", "")
    choice = (completion.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    finish = choice.get("finish_reason") or "stop"

    def event(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        obj = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()

    out = [event({"role": "assistant", "content": ""})]
    for rk in ("reasoning_content", "reasoning"):
        if isinstance(msg.get(rk), str) and msg[rk]:
            out += [event({rk: p}) for p in _pieces(msg[rk])]
    if isinstance(msg.get("content"), str) and msg["content"]:
        out += [event({"content": p}) for p in _pieces(msg["content"])]
    for index, tc in enumerate(msg.get("tool_calls") or []):
        fn = tc.get("function") or {}
        head = {"index": index, "id": tc.get("id"), "type": "function"}
        out.append(
            event({"tool_calls": [head | {"function": {"name": fn.get("name"), "arguments": ""}}]})
        )
        for p in _pieces(fn.get("arguments") or ""):
            if p:
                out.append(event({"tool_calls": [{"index": index, "function": {"arguments": p}}]}))
    out.append(event({}, finish))
    if include_usage and completion.get("usage") is not None:
        obj = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": completion["usage"],
        }
        out.append(f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode())
    out.append(b"data: [DONE]\n\n")
    return out


def _error_body(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": status}}, status_code=status
    )


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _upstream_message(body: bytes) -> str:
    try:
        obj = json.loads(body)
    except ValueError:
        return _one_line(body.decode("utf-8", "replace")) or "(empty body)"
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and err.get("message"):
            return _one_line(str(err["message"]))
        if isinstance(err, str):
            return _one_line(err)
    return _one_line(json.dumps(obj)[:300])
