"""Model access: provider settings, model-name resolution, the OpenAI-compatible client, prices.

``get_model("openrouter/anthropic/claude-opus-4.5")`` returns a :class:`ChatModel` whose
``await model.chat(messages, tools=...)`` gives a :class:`clawrig.spec.llm.ChatResponse`.
Settings and env variables: :mod:`clawrig.llm.providers`; retries and usage:
:mod:`clawrig.llm.client`; cost formula: :mod:`clawrig.llm.pricing`.

Names are imported lazily (the ``openai`` SDK takes ~0.3 s to import), so importing
``clawrig.llm.base`` stays cheap for the CLI's start-up.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ChatModel": "clawrig.llm.base",
    "OpenAIChatModel": "clawrig.llm.client",
    "ProviderRetriesExhausted": "clawrig.llm.client",
    "RetryPolicy": "clawrig.llm.client",
    "get_model": "clawrig.llm.client",
    "usage_from_openai": "clawrig.llm.client",
    "Prices": "clawrig.llm.pricing",
    "cost_usd": "clawrig.llm.pricing",
    "ModelEndpoint": "clawrig.llm.providers",
    "ProviderConfig": "clawrig.llm.providers",
    "Settings": "clawrig.llm.providers",
    "load_settings": "clawrig.llm.providers",
    "model_env_key": "clawrig.llm.providers",
    "resolve_model": "clawrig.llm.providers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'clawrig.llm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
