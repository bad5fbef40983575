"""Which initial workspace files did a trial delete? Found by replaying its tool calls.

A trial folder's ``end_state/`` holds the files the agent created or changed, not the ones it
deleted. When a trial folder does not list its deletions (``end_state_deleted.json``, a list
of workspace-relative paths, when the runner writes one), the exporter replays the trial's
tool calls in order through the real tools in a fresh sandbox on the initial workspace (the
oracle agent, as :mod:`clawrig.agents.oracle` replays a golden trajectory) and compares the
files before and after. Only tools that can remove files trigger a replay: ``read``,
``write`` and ``edit`` cannot.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clawrig.spec.job import TrialConfig
from clawrig.spec.layout import TrialPaths, read_record
from clawrig.spec.task import Task

CANNOT_DELETE = {
    "read", "write", "edit", "web_search", "web_fetch", "memory_search", "memory_get",
    "sessions_list", "sessions_history", "session_status",
}  # fmt: skip
"""Tools that never remove a workspace file."""


def may_delete(dialog: Sequence[Mapping[str, Any]]) -> bool:
    """True when the dialog calls a tool that can remove files (exec, process, ...)."""
    for msg in dialog:
        calls = (msg.get("tool_calls") or []) if msg.get("role") == "assistant" else []
        for call in calls:
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping) and fn.get("name") not in CANNOT_DELETE:
                return True
    return False


def recorded_deletions(folder: Path) -> set[str] | None:
    """The deletions a trial folder records (``end_state_deleted.json``), else None."""
    path = TrialPaths(folder).end_state_deleted
    try:
        value = json.loads(read_record(path))
    except (OSError, ValueError):
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return set(value)
    return None


def _files(root: Path) -> set[str]:
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            out.add(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return out


async def deleted_by_replay(
    task: Task,
    dialog: list[dict[str, Any]],
    *,
    sandbox: str = "bwrap",
    tool_profile: str = "coding",
    work_dir: Path | None = None,
) -> set[str]:
    """Initial workspace files (relative paths) that are gone after replaying ``dialog``'s
    tool calls through a :class:`clawrig.runner.trial.Trial` (services, skills and warmup
    first, the trial's time limits, as in the trial). Raises SetupError when the workspace
    cannot be made and SandboxError when the sandbox fails."""
    from clawrig.runner.trial import Trial, TrialServices

    config = TrialConfig(agent="oracle", model="oracle", sandbox=sandbox, tool_profile=tool_profile)
    replayed = task.model_copy(update={"golden_dialog": dialog})
    async with Trial(replayed, config, services=TrialServices(work_dir=work_dir)) as trial:
        await trial.sandbox_up()
        before = _files(trial.workspace)
        await trial.workspace_and_services()
        await trial.run_agent()
        await trial.stop_agent(copy_end_state=False)
        return before - _files(trial.workspace)
