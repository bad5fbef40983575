"""Model access: provider settings, model-name resolution, the OpenAI-compatible client, prices.

``get_model("openrouter/anthropic/claude-opus-4.5")`` returns a :class:`ChatModel` whose
``await model.chat(messages, tools=...)`` gives a :class:`clawrig.spec.llm.ChatResponse`.
Settings and env variables: :mod:`clawrig.llm.providers`; retries and usage:
:mod:`clawrig.llm.client`; cost formula: :mod:`clawrig.llm.pricing`.
"""

from clawrig.llm.base import ChatModel
from clawrig.llm.client import (
    OpenAIChatModel,
    ProviderRetriesExhausted,
    RetryPolicy,
    get_model,
    usage_from_openai,
)
from clawrig.llm.pricing import Prices, cost_usd
from clawrig.llm.providers import (
    ModelEndpoint,
    ProviderConfig,
    Settings,
    load_settings,
    model_env_key,
    resolve_model,
)

__all__ = [
    "ChatModel",
    "ModelEndpoint",
    "OpenAIChatModel",
    "Prices",
    "ProviderConfig",
    "ProviderRetriesExhausted",
    "RetryPolicy",
    "Settings",
    "cost_usd",
    "get_model",
    "load_settings",
    "model_env_key",
    "resolve_model",
    "usage_from_openai",
]
