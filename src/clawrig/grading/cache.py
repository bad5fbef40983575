"""Replaying recorded judge calls: re-grading is reproducible and free.

:class:`RecordedChatModel` answers a chat request from records of a ``judge_chat.jsonl`` /
``judge_process_chat.jsonl`` (written by :mod:`clawrig.grading.judge`: each record holds
``request.messages`` and ``response.content``). Requests match on their canonical JSON
(messages and temperature). A request with no record goes to ``fallback`` when one is given
(a live judge) and is appended to the cache file, else raises
:class:`clawrig.errors.GradingError`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from clawrig.errors import GradingError, InfrastructureError, UserError
from clawrig.llm.base import ChatModel
from clawrig.spec.llm import ChatResponse
from clawrig.spec.trial import Usage


class JudgeCacheMiss(GradingError, InfrastructureError):
    """The cache holds no reply for a request and no live judge was given."""


def request_key(messages: list[dict[str, Any]], temperature: float | None) -> str:
    blob = json.dumps(
        {"messages": messages, "temperature": temperature}, sort_keys=True, ensure_ascii=False
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class RecordedChatModel:
    """A :class:`clawrig.llm.base.ChatModel` that replays recorded judge replies."""

    def __init__(
        self, paths: list[Path], fallback: ChatModel | None = None, record_to: Path | None = None
    ):
        self.name = "judge-cache"
        self.fallback = fallback
        self.record_to = record_to
        self.hits = 0
        self.misses = 0
        self._replies: dict[str, list[dict[str, Any]]] = {}
        for path in paths:
            if not Path(path).is_file():
                raise UserError(f"--judge-cache: no such file: {path}")
            for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    raise UserError(f"{path}:{n}: judge cache: not a JSON line") from None
                req, resp = rec.get("request") or {}, rec.get("response")
                if not isinstance(resp, dict) or "messages" not in req:
                    continue
                key = request_key(req["messages"], req.get("temperature"))
                self._replies.setdefault(key, []).append(resp)
                if rec.get("model") and self.name == "judge-cache":
                    self.name = str(rec["model"])
        self._cursor: dict[str, int] = {}

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> ChatResponse:
        key = request_key(messages, temperature)
        replies = self._replies.get(key)
        if replies:
            i = self._cursor.get(key, 0)
            self._cursor[key] = i + 1
            rec = replies[min(i, len(replies) - 1)]
            self.hits += 1
            return ChatResponse(
                content=rec.get("content"),
                reasoning=rec.get("reasoning"),
                finish_reason=rec.get("finish_reason") or "stop",
                model=rec.get("model") or self.name,
                response_id=rec.get("response_id"),
                usage=Usage(),
            )
        self.misses += 1
        if self.fallback is None:
            raise JudgeCacheMiss(
                "judge cache: no recorded reply for this request (pass --judge "
                "to ask a live judge for requests the cache lacks)"
            )
        return await self.fallback.chat(
            messages, tools=tools, temperature=temperature, max_tokens=max_tokens, extra=extra
        )
