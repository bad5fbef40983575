"""Agents: native (tool-calling loop), oracle (golden replay), nop, openclaw; one registry.

Third-party agents register in the ``clawrig.agents`` entry-point group (see
:mod:`clawrig.plugins` and docs/plugins.md).
"""

from __future__ import annotations

from clawrig.agents.base import Agent, AgentContext, AgentLimits, AgentOutcome, SandboxNeeds
from clawrig.errors import UserError
from clawrig.plugins import Registry

AGENTS: Registry[type[Agent]] = Registry(
    "agents",
    {
        "native": "clawrig.agents.native:NativeAgent",
        "oracle": "clawrig.agents.oracle:OracleAgent",
        "nop": "clawrig.agents.nop:NopAgent",
        "openclaw": "clawrig.agents.openclaw:OpenClawAgent",
    },
    flag="--agent",
)
AGENT_KINDS = ("native", "oracle", "nop", "openclaw")
"""The built-in agents (``AGENTS.names()`` adds registered ones)."""


def create_agent(kind: str) -> Agent:
    """Return a new agent named ``kind``; ``NAME@VERSION`` passes the version to its
    constructor (``openclaw@2026.3.24``). Raises UserError (one line) for an unknown name, a
    version given to an agent that takes none, or a class that is not an :class:`Agent`."""
    base, _, version = kind.partition("@")
    if base not in AGENTS:  # the list of names, and how a version is given (helper-126)
        names = ", ".join(AGENTS.names())
        raise UserError(
            f"--agent: unknown agent {base!r} (choose from {names}; openclaw@VERSION pins "
            "OpenClaw's version)"
        )
    cls = AGENTS.get(base)
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise UserError(f"--agent: {base!r} is registered as {cls!r}, not an Agent subclass")
    if not version:
        return cls()
    try:
        return cls(version)  # type: ignore[call-arg]
    except TypeError:
        raise UserError(f"--agent: the {base} agent takes no @VERSION") from None


__all__ = [
    "AGENTS",
    "AGENT_KINDS",
    "Agent",
    "AgentContext",
    "AgentLimits",
    "AgentOutcome",
    "SandboxNeeds",
    "create_agent",
]
