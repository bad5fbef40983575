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
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from clawrig.llm.base import ChatModel
from clawrig.sandbox.base import Bind, Sandbox
from clawrig.spec.task import Task
from clawrig.spec.transcript import Transcript
from clawrig.spec.trial import StopReason, Usage
from clawrig.tools.base import ToolContext

if TYPE_CHECKING:
    from clawrig.llm.gateway import Gateway


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
    held_chars: list[int] = field(default_factory=lambda: [0])
    """Characters of tool output and delivered messages the agent's conversations hold, its
    sub-agents' with them (one count, shared: :data:`clawrig.agents.native.
    MAX_CONVERSATION_CHARS`)."""

    _log_file: TextIO | None = field(default=None, repr=False, compare=False)

    def log(self, line: str) -> None:
        """Append one line to agent.log (when a path is set), written at once (line-buffered:
        ``tail -f`` follows it). The file stays open until :meth:`close_log` (opening it for
        every line was ~2% of the harness's event loop)."""
        if self.log_path is None:
            return
        fh = self._log_file
        if fh is None or fh.closed:
            fh = self._log_file = open(self.log_path, "a", encoding="utf-8", buffering=1)
        fh.write(f"[{time.monotonic() - self.started:8.3f}s] {line}\n")

    def close_log(self) -> None:
        """Close agent.log if :meth:`log` opened it (a later line opens it again)."""
        fh, self._log_file = self._log_file, None
        if fh is not None:
            fh.close()


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


class Agent(ABC):
    """An agent: subclass it, set :attr:`name`, implement :meth:`run`; override what else it
    needs. Register it in the ``clawrig.agents`` entry-point group (or with
    ``clawrig.agents.AGENTS.register``) to make ``--agent NAME`` find it; see
    docs/plugins.md for a ten-line example.

    Declared capabilities (the runner reads these, never probes with ``hasattr``):

    - ``needs_model``: the runner resolves a ChatModel (``--model``) and passes it in
      ``ctx.model``;
    - ``uses_gateway``: the agent runs its own model client inside the sandbox and needs the
      job's gateway (the runner sets :attr:`gateway` before :meth:`sandbox_needs`);
    - :meth:`sandbox_needs`: binds and environment the trial's sandbox must have;
    - :meth:`prepare`: one-time set-up before a job starts (e.g. an install);
    - :meth:`versions`: the versions of what runs it, recorded in each trial's result;
    - :attr:`raw_transcript`: the agent's own transcript text (it then becomes chat.jsonl byte
      for byte), or None to have the runner write ``ctx.transcript``.
    """

    name: str = ""
    needs_model: bool = True
    uses_gateway: bool = False
    gateway: Gateway | None = None
    raw_transcript: str | None = None

    def sandbox_needs(self, task: Task) -> SandboxNeeds:
        """What the trial's sandbox needs for ``task`` (default: nothing)."""
        return SandboxNeeds()

    def versions(self) -> dict[str, str]:
        """The versions of what runs the agent, by name (e.g. ``{"openclaw": "2026.3.24",
        "node": "24.22.3"}``), recorded in each trial's ``result.json`` ``versions`` beside
        clawrig's (default: none)."""
        return {}

    def prepare(self, log: Callable[[str], None] | None = None) -> None:
        """One-time set-up before a job starts (default: nothing). ``log`` takes one line per
        slow step. Raises UserError naming what is missing when set-up is impossible."""
        return None

    @abstractmethod
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        """Play the task in ``ctx.sandbox``, filling ``ctx.transcript`` in place."""


def now_ms() -> int:
    return int(time.time() * 1000)
