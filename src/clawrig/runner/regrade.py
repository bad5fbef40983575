"""Re-grade a finished trial from its folder (``clawrig grade TRIAL_DIR``).

A :class:`clawrig.runner.trial.Trial` rebuilds the trial's grading conditions: the recorded
configuration (grader mode, sandbox kind, and so the same :class:`TimeoutPlan`: grader limit
= the grader's timeout x the recorded multiplier), the task's initial workspace overlaid with
``end_state/`` (every file the agent created or changed, service audits included) minus
``end_state_deleted.json``, the same binds (services environment, grader environment), the
transcript text the harness put at the session path (``chat.jsonl``), gt/ injected and the
services restarted from their saved audits, then the same grader.

Judge calls replay from the trial's records (``judge_chat.jsonl``, ``judge_process_chat.jsonl``,
or the ``judge_cache`` files given): a programmatic grader's judge calls go through the judge
proxy of a model gateway whose response cache holds them (:class:`clawrig.llm.gateway.
ResponseCache`, the gateway's request key), as in the run; the answer and process judges are
answered by :class:`clawrig.grading.cache.RecordedChatModel` (the seam left: its own request
key, until the gateway owns that one too). ``judge`` (a live model) answers what the records
lack; without it a missing reply is a grading error, never a silent 0.

Nothing in the trial folder changes unless ``write=True``: then score.json, process_score.json
and result.json are replaced atomically (each written to a temporary file and renamed).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from clawrig.errors import UserError
from clawrig.grading.cache import RecordedChatModel
from clawrig.llm.base import ChatModel
from clawrig.llm.gateway import Gateway, ResponseCache
from clawrig.runner.trial import RecordedEndState, Trial, TrialServices
from clawrig.spec.job import GraderMode, TrialConfig
from clawrig.spec.layout import TrialPaths
from clawrig.spec.task import GraderKind, Task
from clawrig.spec.trial import ScoreFile, TrialResult
from clawrig.tasks.registry import load_tasks


class GradeSide(BaseModel):
    """One side of a re-grade report: the counted score, sub-scores, error and process."""

    score: float | None = None
    subscores: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    process: dict[str, Any] = Field(default_factory=dict)


class RegradeReport(BaseModel):
    """What ``clawrig grade`` reports for one trial: the recorded and the re-graded outcome,
    whether they are the same (scores, sub-scores and process metrics), the judge records
    used (hits: answered from the trial's records; misses: asked of ``--judge``), and whether
    the trial folder was rewritten (``--write``)."""

    task_id: str
    trial: str
    before: GradeSide
    after: GradeSide
    same: bool
    judge_cache: dict[str, int]
    grader_timeout_s: float
    """The grader's limit used (the recorded trial's :class:`TimeoutPlan`), seconds."""
    written: bool = False


def load_trial(folder: Path) -> TrialResult:
    """result.json of a trial folder. Raises UserError naming the file when missing/invalid."""
    rj = TrialPaths(folder).result
    if not rj.is_file():
        raise UserError(f"TRIAL_DIR: {folder} has no result.json (not a trial folder)")
    try:
        return TrialResult.model_validate_json(rj.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UserError(f"{rj}: not a valid trial result ({exc.__class__.__name__})") from None


def recorded_config(trial: TrialResult) -> TrialConfig:
    """The trial's configuration as recorded (older folders: defaults with its model, agent
    and sandbox)."""
    if trial.config is not None:
        return trial.config
    return TrialConfig(model=trial.model, agent=trial.agent, sandbox=trial.sandbox)


def _task_of(trial: TrialResult, folder: Path) -> Task:
    if not trial.task_source:
        raise UserError(f"{folder}/result.json: task_source: unknown, cannot find the task")
    source = Path(trial.task_source)
    if not source.exists():
        raise UserError(f"{folder}/result.json: task_source: {source} does not exist any more")
    tasks = [t for t in load_tasks(source) if t.id == trial.task_id]
    if not tasks:
        raise UserError(f"{trial.task_source}: no task {trial.task_id} there any more")
    return tasks[0]


def _write_json_atomic(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, ensure_ascii=False, indent=2, default=str) + "\n")
    os.replace(tmp, path)


async def regrade_trial(
    folder: Path,
    *,
    grader: GraderMode | None = None,
    judge: ChatModel | None = None,
    judge_cache: list[Path] | None = None,
    sandbox: str | None = None,
    out_dir: Path | None = None,
    write: bool = False,
) -> RegradeReport:
    """Grade the trial in ``folder`` again under its recorded conditions (module docs).

    ``grader`` / ``sandbox``: None = as recorded. ``judge_cache`` defaults to the trial's
    recorded judge logs; ``judge`` answers requests the records lack. The new judge logs go to
    ``out_dir`` (default: a temporary folder). ``write``: replace the folder's score.json,
    process_score.json and result.json with the new grading (never otherwise). Raises
    UserError for a folder that is not a gradable trial (no result.json, an infrastructure,
    setup or cancelled error, a task that cannot be found).
    """
    folder = Path(folder)
    trial = load_trial(folder)
    if trial.error is not None and trial.error.kind in ("infrastructure", "setup", "cancelled"):
        raise UserError(
            f"{folder}: the trial ended with a {trial.error.kind} error ({trial.error.phase}): "
            "there is no end state to grade; run it again"
        )
    task = _task_of(trial, folder)
    config = recorded_config(trial)
    update: dict[str, Any] = {}
    if grader is not None:
        update["grader"] = grader
    if sandbox is not None:
        update["sandbox"] = sandbox
    config = config.model_copy(update=update)
    paths = TrialPaths(folder)
    caches = judge_cache
    if caches is None:
        caches = [p for p in paths.judge_logs if p.is_file() and p.stat().st_size > 0]
    model = RecordedChatModel(caches, fallback=judge) if caches else judge
    programmatic = task.grader.kind in (GraderKind.PROGRAMMATIC, GraderKind.BOTH)
    programmatic = programmatic and config.grader in ("auto", "programmatic")
    proxy_cache = ResponseCache()
    for path in caches if programmatic else []:
        proxy_cache.load_records(path)
    recorded = RecordedEndState.of(folder)
    logs = out_dir or Path(tempfile.mkdtemp(prefix="clawrig-regrade-logs-"))
    with Gateway() if programmatic else contextlib.nullcontext() as gateway:
        services = TrialServices(
            judge=judge if programmatic else model,  # the proxy forwards misses to ``judge``
            gateway=gateway,
            judge_cache=proxy_cache if programmatic else None,
        )
        async with Trial(
            task, config, services=services, folder=logs, run_index=trial.run_index
        ) as again:
            await again.sandbox_up(recorded=recorded, with_agent=False)
            await again.put_transcript(recorded.transcript_text)
            await again.gt_in()
            score, _judge_score, process = await again.grade()
    records = proxy_cache if programmatic else model
    before_score = trial.score
    after_result = again.result
    before = GradeSide(
        score=trial.counted_score(),
        subscores=before_score.subscores if before_score else {},
        error=before_score.error if before_score else None,
        process=trial.process,
    )
    after = GradeSide(
        score=after_result.counted_score(),
        subscores=score.subscores if score else {},
        error=score.error if score else None,
        process=process,
    )
    same = (
        before.score == after.score
        and before.subscores == after.subscores
        and (trial.process or {}) == (process or {})
    )
    written = False
    if write:
        updated = trial.model_copy(
            update={
                "score": score,
                "judge_score": after_result.judge_score,
                "process": process,
                "error": after_result.error if after_result.error else trial.error,
            }
        )
        _write_json_atomic(paths.score, ScoreFile.of(updated).model_dump(mode="json"))
        _write_json_atomic(paths.process_score, updated.process)
        _write_json_atomic(paths.result, updated.model_dump(mode="json"))
        written = True
    return RegradeReport(
        task_id=trial.task_id,
        trial=str(folder),
        before=before,
        after=after,
        same=same,
        judge_cache={
            "hits": getattr(records, "hits", 0),
            "misses": getattr(records, "misses", 0),
        },
        grader_timeout_s=again.plan.grader_s,
        written=written,
    )
