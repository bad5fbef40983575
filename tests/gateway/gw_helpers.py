"""Helpers shared by the gateway tests (imported by name: tests are not a package)."""

from __future__ import annotations

from pydantic import SecretStr

from clawrig.llm.client import RetryPolicy
from clawrig.llm.pricing import Prices
from clawrig.llm.providers import ModelEndpoint
from clawrig.testing.scripted_server import ScriptedServer

REAL_KEY = "sk-real-7f3c9a1e5b2d4c6e8a0b1c2d3e4f5a6b"
"""A provider key that must reach the upstream and never a sandbox."""
FAST_RETRY = RetryPolicy(attempts=3, initial_s=0.001, max_s=0.01, retry_after_cap_s=0.05)


def upstream(
    srv: ScriptedServer, name: str = "scripted/scripted", prices: Prices | None = None
) -> ModelEndpoint:
    """The scripted server as the trial's upstream, with :data:`REAL_KEY` as its key."""
    return srv.endpoint(name, prices=prices).model_copy(update={"api_key": SecretStr(REAL_KEY)})
