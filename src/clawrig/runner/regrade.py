"""Re-grade a finished trial from its folder: the same end state, transcript and gt, graded
again in a fresh sandbox (``clawrig grade TRIAL_DIR``).

The end state is rebuilt as: the task's initial workspace, overlaid with the trial's
``end_state/`` (every file the agent created or changed), the transcript from ``chat.jsonl``,
then gt/ injected. With a judge cache (:class:`clawrig.grading.cache.RecordedChatModel`, by
default the trial's own judge_chat.jsonl and judge_process_chat.jsonl) the judge's recorded
replies are replayed, so re-grading gives the same scores for free.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from clawrig.errors import UserError
from clawrig.grading.cache import RecordedChatModel
from clawrig.llm.base import ChatModel
from clawrig.runner.trial import TrialServices, _grade
from clawrig.sandbox import Limits, SandboxConfig, create_sandbox
from clawrig.sandbox.paths import PATHS
from clawrig.sandbox.workspace import inject_gt, materialise_workspace
from clawrig.spec.job import TrialConfig
from clawrig.spec.trial import TrialResult
from clawrig.tasks.registry import load_tasks
from clawrig.transcript import dumps_openclaw_jsonl, read_openclaw_jsonl


def load_trial(folder: Path) -> TrialResult:
    rj = folder / "result.json"
    if not rj.is_file():
        raise UserError(f"TRIAL_DIR: {folder} has no result.json (not a trial folder)")
    try:
        return TrialResult.model_validate_json(rj.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UserError(f"{rj}: not a valid trial result ({exc.__class__.__name__})") from None


async def regrade_trial(
    folder: Path,
    *,
    grader: str = "auto",
    judge: ChatModel | None = None,
    judge_cache: list[Path] | None = None,
    sandbox: str = "bwrap",
    out_dir: Path | None = None,
) -> dict[str, Any]:
    """Grade the trial in ``folder`` again. Returns {"before": {...}, "after": {...}, "same"}.

    ``judge_cache`` defaults to the trial's recorded judge logs; ``judge`` answers requests the
    cache lacks. Writes the new judge logs to ``out_dir`` (default: a temp folder).
    """
    trial = load_trial(folder)
    if trial.error is not None and trial.error.kind in ("infrastructure", "setup", "cancelled"):
        raise UserError(
            f"{folder}: the trial ended with a {trial.error.kind} error ({trial.error.phase}): "
            "there is no end state to grade; run it again"
        )
    if not trial.task_source:
        raise UserError(f"{folder}/result.json: task_source: unknown, cannot find the task")
    tasks = [t for t in load_tasks(Path(trial.task_source)) if t.id == trial.task_id]
    if not tasks:
        raise UserError(f"{trial.task_source}: no task {trial.task_id} there any more")
    task = tasks[0]
    caches = judge_cache
    if caches is None:
        caches = [
            p
            for p in (folder / "judge_chat.jsonl", folder / "judge_process_chat.jsonl")
            if p.is_file() and p.stat().st_size > 0
        ]
    model = RecordedChatModel(caches, fallback=judge) if caches else judge
    services = TrialServices(judge=model)
    transcript = read_openclaw_jsonl(folder / "chat.jsonl")
    work = Path(tempfile.mkdtemp(prefix="clawrig-regrade-"))
    logs = out_dir or Path(tempfile.mkdtemp(prefix="clawrig-regrade-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    ws = work / "workspace"
    try:
        materialise_workspace(task, ws)
        end_state = folder / "end_state"
        if end_state.is_dir():
            shutil.copytree(end_state, ws, dirs_exist_ok=True, symlinks=False)
        sb = create_sandbox(sandbox, SandboxConfig(workspace_dir=ws, limits=Limits()))
        await sb.start()
        try:
            await sb.write_file(PATHS.transcript, dumps_openclaw_jsonl(transcript))
            await inject_gt(sb, task)
            cfg = TrialConfig(model=trial.model, agent=trial.agent, grader=grader)  # type: ignore[arg-type]
            score, judge_score, process = await _grade(task, cfg, sb, transcript, logs, services)
        finally:
            await sb.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    before = trial.score.score if trial.score else None
    after = score.score if score else None
    return {
        "task_id": trial.task_id,
        "trial": str(folder),
        "before": {
            "score": before,
            "subscores": trial.score.subscores if trial.score else {},
            "process": trial.process,
        },
        "after": {
            "score": after,
            "subscores": score.subscores if score else {},
            "error": score.error if score else None,
            "process": process,
        },
        "same": before == after and (trial.process or {}) == (process or {}),
        "judge_cache": {"hits": getattr(model, "hits", 0), "misses": getattr(model, "misses", 0)},
    }
