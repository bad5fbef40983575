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

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clawrig.agents.base import AgentContext
from clawrig.agents.oracle import OracleAgent
from clawrig.sandbox import Limits, SandboxConfig, create_sandbox
from clawrig.sandbox.workspace import install_skills, materialise_workspace, run_warmup
from clawrig.spec.task import Task
from clawrig.tools.base import ToolContext, WebPolicy

DELETED_FILE = "end_state_deleted.json"
"""Trial-folder file listing deleted workspace files, when the runner records them."""

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
    path = folder / DELETED_FILE
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
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
    tool calls (warmup first, as in the trial). Raises SetupError when the workspace cannot be
    made and SandboxError when the sandbox fails."""
    from clawrig.tools.catalog import Toolset

    work = Path(tempfile.mkdtemp(prefix="clawrig-export-replay-", dir=work_dir))
    os.chmod(work, 0o755)
    ws = work / "workspace"
    box = None
    try:
        materialise_workspace(task, ws)
        before = _files(ws)
        box = create_sandbox(
            sandbox,
            SandboxConfig(
                workspace_dir=ws,
                limits=Limits(command_timeout_s=max(task.timeout_seconds, 1.0)),
            ),
        )
        await box.start()
        await install_skills(box, task)
        await run_warmup(box, task.warmup)
        ctx = AgentContext(
            task=task.model_copy(update={"golden_dialog": dialog}),
            sandbox=box,
            tool_ctx=ToolContext(sandbox=box, web=WebPolicy(mode="off")),
            toolset=Toolset(task.tool_profile or tool_profile),
        )
        await OracleAgent().run(ctx)
        await box.kill_all()
        return before - _files(ws)
    finally:
        if box is not None:
            with contextlib.suppress(Exception):
                await box.stop()
        shutil.rmtree(work, ignore_errors=True)
