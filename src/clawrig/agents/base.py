"""The agent interface: one module per agent (native, oracle, nop, openclaw ...).

An agent gets an :class:`AgentContext` (the task, the started sandbox, the tools bound to it, a
model when it needs one, limits) and fills ``ctx.transcript`` *in place* as it goes, so a
trial cut short by its time limit still keeps what happened. It returns an
:class:`AgentOutcome`. A provider failure after retries is raised as
:class:`clawrig.errors.ProviderError` (infrastructure; the runner retries the trial); a refused
request (:class:`clawrig.errors.ModelRequestError`) is a user error that stops the job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from clawrig.llm.base import ChatModel
from clawrig.sandbox.base import Bind, Sandbox
from clawrig.spec.task import Task
from clawrig.spec.transcript import Transcript
from clawrig.spec.trial import StopReason, Usage
from clawrig.tools.base import ToolContext


@dataclass
class AgentLimits:
    """max_turns: assistant messages; time_s: wall seconds for the agent phase; tokens and
    cost_usd: per-trial budgets (None: no cap)."""

    max_turns: int = 100
    time_s: float | None = None
    tokens: int | None = None
    cost_usd: float | None = None


@dataclass
class AgentContext:
    task: Task
    sandbox: Sandbox
    tool_ctx: ToolContext
    toolset: Any
    model: ChatModel | None = None
    limits: AgentLimits = field(default_factory=AgentLimits)
    preamble: str | None = None
    transcript: Transcript = field(default_factory=Transcript)
    usage: Usage = field(default_factory=Usage)
    log_path: Path | None = None
    started: float = field(default_factory=time.monotonic)
    subagent_transcripts: dict[str, Transcript] = field(default_factory=dict)

    def log(self, line: str) -> None:
        """Append one line to agent.log (when a path is set)."""
        if self.log_path is not None:
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(f"[{time.monotonic() - self.started:8.3f}s] {line}\n")


@dataclass
class AgentOutcome:
    stop_reason: StopReason
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    error: str | None = None


@dataclass
class SandboxNeeds:
    """What an agent needs in the trial's sandbox before it starts (e.g. a pinned OpenClaw
    install bound read-only, a gateway forwarder socket)."""

    binds: list[Bind] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


class Agent(Protocol):
    """``needs_model``: the runner resolves a ChatModel for it. Optional method
    ``sandbox_needs(task) -> SandboxNeeds`` adds binds/env to the trial's sandbox."""

    name: str
    needs_model: bool

    async def run(self, ctx: AgentContext) -> AgentOutcome: ...


def now_ms() -> int:
    return int(time.time() * 1000)
