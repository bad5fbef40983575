"""Agents: native (tool-calling loop), oracle (golden replay), nop; one factory."""

from __future__ import annotations

from clawrig.agents.base import Agent, AgentContext, AgentLimits, AgentOutcome
from clawrig.errors import UserError

AGENT_KINDS = ("native", "oracle", "nop", "openclaw")


def create_agent(kind: str) -> Agent:
    """Return the agent named ``kind`` (``openclaw[@VERSION]`` included). UserError otherwise."""
    base, _, version = kind.partition("@")
    if base == "native":
        from clawrig.agents.native import NativeAgent

        return NativeAgent()
    if base == "oracle":
        from clawrig.agents.oracle import OracleAgent

        return OracleAgent()
    if base == "nop":
        from clawrig.agents.nop import NopAgent

        return NopAgent()
    if base == "openclaw":
        from clawrig.agents.openclaw import OpenClawAgent  # type: ignore[import-not-found]

        return OpenClawAgent(version or None)
    raise UserError(f"--agent: unknown agent {kind!r} (choose from {', '.join(AGENT_KINDS)})")


__all__ = ["AGENT_KINDS", "Agent", "AgentContext", "AgentLimits", "AgentOutcome", "create_agent"]
