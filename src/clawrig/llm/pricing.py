"""Model prices and the cost of one request.

Prices are US dollars per 1,000,000 tokens, per token class, the way providers publish them
(OpenRouter's model pages, OpenAI's pricing table) and DataClawBench's .env writes them:

    cost_usd = input * p_input / 1e6 + output * p_output / 1e6
             + cache_read * p_cache_read / 1e6 + cache_write * p_cache_write / 1e6

``input`` is the *non-cached* prompt tokens (OpenClaw's ``usage.input``), so cached prompt tokens
are charged once, at the cache-read price. When a provider reports the cost itself (OpenRouter's
``usage.cost``) that number is used instead (see :func:`clawrig.llm.client.usage_from_openai`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

PER_TOKENS = 1_000_000
"""Prices are per this many tokens."""


class Prices(BaseModel):
    """USD per 1M tokens for each token class. ``None`` means "not known" (counted as 0)."""

    model_config = ConfigDict(extra="forbid")

    input: float | None = Field(default=None, ge=0)
    output: float | None = Field(default=None, ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)

    @property
    def known(self) -> bool:
        """True when at least one price is set."""
        return any(
            v is not None for v in (self.input, self.output, self.cache_read, self.cache_write)
        )

    def merged(self, override: Prices | None) -> Prices:
        """These prices with every price set in ``override`` replacing ours."""
        if override is None:
            return self
        return Prices(
            **(
                self.model_dump()
                | {k: v for k, v in override.model_dump().items() if v is not None}
            )
        )


def cost_usd(
    prices: Prices,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float:
    """The USD cost of one request from token counts and ``prices`` (formula in module docs).

    Unknown prices count as 0. Token counts are non-negative integers.
    """
    return (
        input_tokens * (prices.input or 0.0)
        + output_tokens * (prices.output or 0.0)
        + cache_read_tokens * (prices.cache_read or 0.0)
        + cache_write_tokens * (prices.cache_write or 0.0)
    ) / PER_TOKENS
