"""The one interface every model call goes through (agents, judge, gateway).

Implementations: :class:`clawrig.llm.client.OpenAIChatModel` (any OpenAI-compatible endpoint
via the ``openai`` SDK). Tests drive it against ``clawrig.testing.scripted_server`` on loopback.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from clawrig.spec.llm import ChatResponse


@runtime_checkable
class ChatModel(Protocol):
    """An async chat-completions model.

    ``messages`` are OpenAI chat dicts; ``tools`` OpenAI function tools. Raises
    :class:`clawrig.errors.ProviderError` after retries are exhausted (infrastructure),
    :class:`clawrig.errors.ModelRequestError` on 400/401/403/404 (fail fast).
    """

    name: str
    """The model name as the user gave it, e.g. ``openrouter/anthropic/claude-opus-4.5``."""

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> ChatResponse: ...
