"""The in-sandbox layout (WildClawBench / OpenClaw contract, shared/reference/formats.md).

Frozen constants so every module names a sandbox path the same way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxPaths:
    workspace: str = "/tmp_workspace"
    workspace_tmp: str = "/tmp_workspace/tmp"
    gt: str = "/tmp_workspace/gt"
    results: str = "/tmp_workspace/results"
    services_state: str = "/tmp_workspace/.services"
    home: str = "/root"
    sessions: str = "/root/.openclaw/agents/main/sessions"
    transcript: str = "/root/.openclaw/agents/main/sessions/chat.jsonl"
    transcript_fallback: str = "/claude_code/log/chat.json"
    skills: str = "/root/skills"
    tmp: str = "/tmp"
    run: str = "/run/clawrig"
    """The harness's own writable folder in the sandbox: the supervisor's log, service code,
    each grading's runner and grader (a private folder of the sandbox's on the host)."""
    clawrig: str = "/opt/clawrig"
    """Read-only harness files inside the sandbox (supervisor, grader runner)."""
    grader_env: str = "/opt/clawrig-grader-env"
    """Read-only Python environment for graders, bound for the grading phase only."""


PATHS = SandboxPaths()
