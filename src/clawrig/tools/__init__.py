"""OpenClaw's native action space, executed in a trial's sandbox.

- :class:`Toolset` (``catalog``): the tools of a profile (``coding`` = OpenClaw 2026.3.24's 17,
  ``minimal``, ``full``), their OpenAI schemas and ``await toolset.call(ctx, name, raw_json)``.
- :class:`ToolContext`, :class:`ToolResult`, :class:`WebPolicy` (``base``): what a call gets and
  returns.
- One module per group: ``fs`` (read, edit, write), ``shell`` (exec, process), ``cron``,
  ``memory`` (memory_search, memory_get), ``web`` (web_search, web_fetch), ``sessions``
  (sessions_*, session_status, subagents; :class:`SessionManager`), ``image``.
"""

from clawrig.tools.base import ToolContext, ToolResult, WebPolicy
from clawrig.tools.catalog import (
    DEFAULT_PROFILE,
    OPENCLAW_VERSION,
    PROFILES,
    Toolset,
    tool_schema,
)
from clawrig.tools.cron import CronMessage, CronScheduler
from clawrig.tools.sessions import Session, SessionManager

__all__ = [
    "DEFAULT_PROFILE",
    "OPENCLAW_VERSION",
    "PROFILES",
    "CronMessage",
    "CronScheduler",
    "Session",
    "SessionManager",
    "ToolContext",
    "ToolResult",
    "Toolset",
    "WebPolicy",
    "tool_schema",
]
