"""The tool interface: OpenClaw's native tools executed inside a trial's sandbox.

A tool receives parsed arguments (aliases already resolved by the tool itself) and a
:class:`ToolContext`, and returns a :class:`ToolResult`. Errors a model can act on (bad
arguments, missing file, non-unique edit, timeout) are results with ``is_error=True``, never
exceptions (shared/reference/openclaw-tools.md). Only infrastructure failures
(:class:`clawrig.errors.SandboxDied`) propagate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, Field

from clawrig.sandbox.base import Sandbox


class ToolResult(BaseModel):
    """What a tool returns: text content, an error flag, optional details and images.

    ``details`` mirrors OpenClaw's toolResult details (exec: status, exitCode, durationMs,
    aggregated, cwd). ``images`` are {"data": base64, "mimeType": str} blocks.
    """

    text: str
    is_error: bool = False
    details: dict[str, Any] | None = None
    images: list[dict[str, str]] = Field(default_factory=list)


class WebPolicy(BaseModel):
    """Whether web tools may answer, and how. ``mode``: off (default; a clear tool error), or
    the job's web mode (live, record, replay, corpus; ``on`` = live; see :mod:`clawrig.web`).
    ``max_bytes`` (bytes) / ``timeout_s`` (seconds) cap web_fetch; ``search_provider`` is
    brave or tavily (its key from ``search_api_key`` or the provider's environment variable)."""

    mode: str = "off"
    allow_hosts: list[str] = Field(default_factory=list)
    max_bytes: int = 2_000_000
    timeout_s: float = 20.0
    search_provider: str = "brave"
    search_api_key: str | None = None
    search_endpoint: str | None = None
    """Search API URL (default: the provider's; a proxy or a recorded replay)."""


@dataclass
class ToolContext:
    """Everything a tool call may use. One per agent session.

    ``sandbox`` is the trial's sandbox; ``session_key`` names the calling session ("main" for
    the top-level agent); ``sessions`` is the trial's session manager (sessions_* and subagents
    tools; None when sub-agents are unavailable); ``cron`` the trial's scheduler;
    ``can_see_images`` whether the model accepts image content; ``state`` free per-trial
    storage for tools (e.g. exec background sessions).
    """

    sandbox: Sandbox
    session_key: str = "main"
    web: WebPolicy = field(default_factory=WebPolicy)
    web_backend: Any = None
    """The trial's :class:`clawrig.web.WebSession` (None: a live one made on first use)."""
    sessions: Any = None
    cron: Any = None
    can_see_images: bool = False
    exec_timeout_s: float = 1800.0
    output_bytes: int = 200_000
    state: dict[str, Any] = field(default_factory=dict)
    edits: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by each ``edit`` call (one at a time in a trial, its sub-agents' too: a sub-agent's
    context is a copy holding the same lock), so the harness holds one edited file at once:
    50 edits of a turn held 50 files of 16 MiB, 6.8 GB (helper-143)."""


class Tool(Protocol):
    """One native tool. ``schema`` is the OpenAI function tool dict sent to models."""

    name: str
    schema: dict[str, Any]

    async def __call__(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult: ...


ToolFn = Callable[[ToolContext, dict[str, Any]], Awaitable[ToolResult]]
