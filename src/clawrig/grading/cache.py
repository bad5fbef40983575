"""Replaying recorded judge calls as a chat model (re-grading without a model server).

:class:`RecordedChatModel` answers a judge's chat request from record files (a trial's
``model_calls.jsonl``, ``judge_chat.jsonl``, ``judge_process_chat.jsonl``, or a ``--judge-cache``
file), read by the gateway's record reader into a
:class:`clawrig.llm.gateway.ResponseCache` and keyed by the one request key of every recorded
call (:func:`clawrig.llm.gateway.request_key` under
:data:`clawrig.llm.gateway.JUDGE_KEY_MODEL`). A request with no record goes to ``fallback``
when one is given (a live judge), else raises :class:`JudgeCacheMiss`.

Prefer replaying through the gateway (:func:`clawrig.llm.gateway.replay_gateway`): it also
answers graders' judge proxies. This adapter serves callers that hold a chat model only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawrig.errors import GradingError, InfrastructureError, UserError
from clawrig.llm.base import ChatModel
from clawrig.llm.gateway import JUDGE_KEY_MODEL, ResponseCache, request_key
from clawrig.spec.llm import ChatResponse, ToolCall
from clawrig.spec.trial import Usage


class JudgeCacheMiss(GradingError, InfrastructureError):
    """The cache holds no reply for a request and no live judge was given."""


def judge_request_body(
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The request body a judge's chat call sends (the fields of the request key)."""
    body: dict[str, Any] = {"messages": messages}
    if tools:
        body["tools"] = tools
    if temperature is not None:
        body["temperature"] = temperature
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body | (extra or {})


class RecordedChatModel:
    """A :class:`clawrig.llm.base.ChatModel` that replays recorded judge replies.

    ``paths``: record files (UserError when one is missing or holds a line that is not JSON);
    ``fallback``: a live judge for requests the records lack. ``hits`` / ``misses`` count
    requests answered from the records / not found there.
    """

    def __init__(
        self, paths: list[Path], fallback: ChatModel | None = None, record_to: Path | None = None
    ):
        self.name = "judge-cache"
        self.fallback = fallback
        self.record_to = record_to
        self._cache = ResponseCache()
        for path in paths:
            if not Path(path).is_file():
                raise UserError(f"--judge-cache: no such file: {path}")
            self._cache.load_records(path)

    @property
    def hits(self) -> int:
        return self._cache.hits

    @property
    def misses(self) -> int:
        return self._cache.misses

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> ChatResponse:
        body = judge_request_body(
            messages, tools=tools, temperature=temperature, max_tokens=max_tokens, extra=extra
        )
        hit = self._cache.take(request_key(JUDGE_KEY_MODEL, body))
        if hit is not None:
            choice = (hit.get("choices") or [{}])[0]
            msg = choice.get("message") or {}
            calls = [
                ToolCall(
                    id=tc.get("id") or f"call_{i}",
                    name=(tc.get("function") or {}).get("name") or "",
                    arguments=(tc.get("function") or {}).get("arguments") or "{}",
                )
                for i, tc in enumerate(msg.get("tool_calls") or [])
            ]
            return ChatResponse(
                content=msg.get("content"),
                reasoning=msg.get("reasoning_content") or msg.get("reasoning"),
                tool_calls=calls,
                finish_reason=choice.get("finish_reason") or "stop",
                model=hit.get("model") or self.name,
                response_id=hit.get("id"),
                usage=Usage(),
            )
        if self.fallback is None:
            raise JudgeCacheMiss(
                "judge cache: no recorded reply for this request (pass --judge "
                "to ask a live judge for requests the cache lacks)"
            )
        return await self.fallback.chat(
            messages, tools=tools, temperature=temperature, max_tokens=max_tokens, extra=extra
        )
