"""Re-grade a finished trial from its folder (``clawrig grade TRIAL_DIR``).

A :class:`clawrig.runner.trial.Trial` rebuilds the trial's grading conditions: the recorded
configuration (grader mode, sandbox kind, and so the same :class:`TimeoutPlan`: grader limit
= the grader's timeout x the recorded multiplier), the task's initial workspace overlaid with
``end_state/`` (every file the agent created or changed, service audits included) minus
``end_state_deleted.json``, the same binds (services environment, grader environment), the
transcript text the harness put at the session path (``chat.jsonl``), gt/ injected and the
services restarted from their saved audits, then the same grader.

Every judge call, a programmatic grader's (through the judge proxy) and the answer and process
judges', goes through a replay gateway of the trial folder
(:func:`clawrig.llm.gateway.replay_gateway`): it answers from the calls the trial recorded
(``model_calls.jsonl``, ``judge_chat.jsonl``, ``judge_process_chat.jsonl``) plus the
``judge_cache`` files given, under the one request key of every recorded call
(:func:`clawrig.llm.gateway.request_key`). A request the records lack is a *replay miss*: refused
(the report counts it and says so in one line) unless ``judge`` (a live model) is given, which
then answers it.

Nothing in the trial folder changes unless ``write=True``: then score.json, process_score.json
and result.json are replaced atomically (each written to a temporary file and renamed), and
the job folder's summary that lists the trial is recomputed from its trials' result.json
(:func:`refresh_job_summary`), so the trial and the job agree.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError

from clawrig.errors import ModelRequestError, UserError, first_invalid
from clawrig.leftovers import owned_tempdir, remove_tree
from clawrig.llm.base import ChatModel
from clawrig.llm.gateway import recorded_models, replay_gateway, replay_model
from clawrig.runner.trial import (
    END_STATE_MAX_BYTES,
    END_STATE_MAX_FILES,
    RecordedEndState,
    Trial,
    TrialServices,
)
from clawrig.spec.job import RL_JOB_ID, GraderMode, TrialConfig
from clawrig.spec.layout import (
    RESULT_LIMIT,
    JobPaths,
    TrialPaths,
    model_from_json_text,
    read_record,
    read_regular,
)
from clawrig.spec.process import ProcessScore
from clawrig.spec.task import Task
from clawrig.spec.trial import (
    ErrorKind,
    Score,
    ScoreFile,
    TrialError,
    TrialResult,
    recorded_score_problem,
)

if TYPE_CHECKING:
    from clawrig.spec.summary import JobSummary
from clawrig.tasks.registry import load_tasks


class GradeSide(BaseModel):
    """One side of a re-grade report: the counted score, sub-scores, error and process."""

    score: float | None = None
    subscores: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    process: ProcessScore = Field(default_factory=ProcessScore)


class RegradeReport(BaseModel):
    """What ``clawrig grade`` reports for one trial: the recorded and the re-graded outcome,
    whether they are the same (scores, sub-scores and process metrics), the judge records
    used (hits: answered from the records; misses: requests they lack, refused without a live
    ``--judge``, else asked of it), and whether the trial folder (and its job summary) was
    rewritten (``--write``)."""

    task_id: str
    trial: str
    before: GradeSide
    after: GradeSide
    same: bool
    judge_cache: dict[str, int]
    grader_timeout_s: float
    """The grader's limit used (the recorded trial's :class:`TimeoutPlan`), seconds."""
    written: bool = False
    live_judge: bool = False
    """True when a live judge answered what the records lack (``--judge``)."""
    summary: str | None = None
    """The job summary refreshed after ``--write`` (its path), None when none lists the trial."""
    not_gradable: str | None = None
    """Why the trial could not be re-graded at all (it ended with an infrastructure, setup or
    cancelled error, so it has no end state: ``after`` is empty and ``same`` False), None when
    it was re-graded."""
    unreadable: str | None = None
    """One line naming the file and what is wrong when the trial folder could not be read for
    re-grading (a result.json that is not a valid trial result, a task file gone): nothing
    graded or written for it (``after`` empty, ``same`` False); None when it was read."""
    task_changed: str | None = None
    """One line when the task read now is not the one the trial ran (its recorded
    ``task_digest`` differs: the task's file, grader or fixtures were edited since), which
    can explain a different score; None when it is the same or the trial recorded none."""
    score_file: str | None = None
    """One line when the folder's score.json disagrees with its result.json (the trial's
    record, which the summary, exports and viewer read; score.json is derived from it:
    :meth:`ScoreFile.of`), e.g. one edited by hand; None when they agree. ``--write`` writes
    score.json again from the new grading."""

    @property
    def replay_misses(self) -> int:
        """Judge requests the records lack that no live judge answered."""
        return 0 if self.live_judge else self.judge_cache.get("misses", 0)


def unreadable_report(folder: Path, problem: str) -> RegradeReport:
    """The report of a trial folder that could not be read for re-grading, ``problem`` (one
    line naming the file)."""
    return RegradeReport(
        task_id=Path(folder).parent.name,
        trial=str(folder),
        before=GradeSide(),
        after=GradeSide(),
        same=False,
        judge_cache={"hits": 0, "misses": 0},
        grader_timeout_s=0.0,
        unreadable=problem,
    )


@contextlib.contextmanager
def _removed(folder: Path | None) -> Iterator[None]:
    """Remove ``folder`` (when not None) at the end, however the block ends."""
    try:
        yield
    finally:
        if folder is not None:
            remove_tree(folder)


def load_trial(folder: Path) -> TrialResult:
    """result.json of a trial folder. Raises UserError naming the file when missing/invalid."""
    rj = TrialPaths(folder).result
    if not os.path.lexists(rj):
        if not folder.exists():
            raise UserError(f"TRIAL_DIR: no such folder: {folder}")
        raise UserError(
            f"TRIAL_DIR: {folder} has no result.json (not a trial folder, nor a job or task "
            "folder with finished trials in it)"
        )
    try:
        text = read_record(rj)
    except OSError:  # a link, a FIFO, a folder, past 64 MiB: no record (helper-191)
        raise UserError(
            f"{rj}: not a valid trial result: no regular file of at most {RESULT_LIMIT} bytes"
        ) from None
    try:
        # (a lone surrogate's escape is kept: a grader may echo one in its verdict, and the
        # harness wrote it so; printing it is the console's: cli.main)
        trial = model_from_json_text(TrialResult, text)
        # (its score as written: pydantic took "1.0" for 1.0 and 7 for a score: helper-189)
        if problem := recorded_score_problem(json.loads(text)):
            raise UserError(f"{rj}: not a valid trial result: {problem}")
        return trial
    except ValidationError as exc:
        where, what = first_invalid(exc)
        raise UserError(f"{rj}: not a valid trial result: {where}: {what}") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise UserError(f"{rj}: not a valid trial result ({exc.__class__.__name__})") from None


def score_file_problem(folder: Path, trial: TrialResult) -> str | None:
    """One line when ``folder``'s score.json is missing, unreadable or says another score,
    sub-scores or error than ``trial`` (its result.json, the record: score.json is
    :meth:`ScoreFile.of` it), else None."""
    path = TrialPaths(folder).score
    try:
        found = model_from_json_text(ScoreFile, read_record(path))
    except OSError:
        # (a FIFO in its place held the command for good, past SIGTERM: helper-189)
        return (
            f"{path}: missing or no regular file (result.json is the record; --write writes "
            "it again)"
        )
    except ValueError as exc:
        return f"{path}: not a valid score file ({exc.__class__.__name__})"
    want = ScoreFile.of(trial)
    fields = ("score", "subscores", "error")
    differ = [f for f in fields if getattr(found, f) != getattr(want, f)]
    if not differ:
        return None
    said = ", ".join(
        f"{f} {getattr(found, f)!r} (result.json: {getattr(want, f)!r})" for f in differ
    )
    return f"{path} disagrees with result.json, the trial's record: {said}"


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


def _listed_trials(path: Path, summary: JobSummary) -> list[str]:
    """The trial folders ``summary`` (read from ``path``) lists, each once, in its order: a
    row's ``trial`` is ``<task folder>/<trial folder>`` inside the job. Raises UserError
    naming the row for any other path (a hand-edited summary made ``grade --write`` read a
    result.json outside the job: helper-121); a row listed twice was counted twice."""
    listed: dict[str, None] = {}
    for i, row in enumerate(summary.tasks):
        if not JobPaths.is_trial_path(row.trial):
            raise UserError(
                f"{path}: tasks[{i}].trial {row.trial!r} is not a trial folder of this job "
                "(<task folder>/<trial folder>)"
            )
        listed.setdefault(row.trial, None)
    return list(listed)


def refresh_job_summary(trial_folder: Path) -> Path | None:
    """Recompute the summary of the job folder that holds ``trial_folder``
    (``<job>/<task_id>/<trial>``) from the result.json of every trial it lists
    (:func:`clawrig.grading.aggregate.rescore_summary`), written atomically with
    ``regraded_at`` set, and mark the task folder changed so a running viewer re-reads the
    trial. The summary named for the trial's model goes first: a copy beside it
    (``summary_oracle.bak.json``, sorted before it) was the one rewritten. Returns the
    summary's path, None when no summary lists the trial. Raises UserError naming a summary or
    a listed trial's result.json that cannot be read."""
    import datetime as dt

    from clawrig.grading.aggregate import rescore_summary
    from clawrig.runner.batch import recorded_spend, write_json_atomic
    from clawrig.spec.summary import JobSummary

    trial_folder = Path(trial_folder)
    job = JobPaths(trial_folder.parent.parent)
    rel = f"{trial_folder.parent.name}/{trial_folder.name}"
    own = job.summary(load_trial(trial_folder).model)
    for path in sorted(job.summaries(), key=lambda path: path != own):
        try:
            summary = model_from_json_text(JobSummary, read_record(path))
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: not a readable summary ({exc.__class__.__name__})") from None
        if not any(row.trial == rel for row in summary.tasks):
            continue
        results = [load_trial(job.root / trial) for trial in _listed_trials(path, summary)]
        spend = recorded_spend(job.root, summary.job_id, results) if summary.job_id else None
        fresh = rescore_summary(summary, results, spend).model_copy(
            update={"regraded_at": dt.datetime.now(dt.UTC).isoformat()}
        )
        write_json_atomic(path, fresh.to_json())
        os.utime(trial_folder.parent)  # the viewer's index re-reads changed task folders
        return path
    return None


NO_END_STATE = (ErrorKind.INFRASTRUCTURE, ErrorKind.SETUP, ErrorKind.CANCELLED, ErrorKind.BUDGET)
"""Error kinds after which a trial folder has no end state to grade."""


def _not_gradable(folder: Path, trial: TrialResult, why: str) -> RegradeReport:
    """The report of a trial with no end state to grade, ``why`` (one clause)."""
    return RegradeReport(
        task_id=trial.task_id,
        trial=str(folder),
        before=GradeSide(
            score=trial.counted_score(), error=trial.score.error if trial.score else None
        ),
        after=GradeSide(),
        same=False,
        judge_cache={"hits": 0, "misses": 0},
        grader_timeout_s=0.0,
        not_gradable=why,
    )


INCOMPLETE_END_STATE = "end_state/ is incomplete"
"""How :func:`end_state_left_out`'s reason begins."""


def end_state_left_out(trial: TrialResult) -> str | None:
    """Why ``trial``'s recorded ``end_state/`` is not the end state it was graded on (files
    its caps left out: :attr:`TrialResult.end_state_left_out`), None when it is whole."""
    if trial.end_state_left_out <= 0:
        return None
    return (
        f"{INCOMPLETE_END_STATE}: {trial.end_state_left_out} file(s) or folder(s) the agent "
        f"made or changed were left out of it (it keeps at most {END_STATE_MAX_FILES} files and "
        f"{END_STATE_MAX_BYTES} bytes), so grading it would grade another end state"
    )


def no_end_state(folder: Path, trial: TrialResult) -> str | None:
    """Why ``folder`` has no end state to grade, None when it has one: the trial ended with
    an infrastructure, setup, cancelled or budget error (NO_END_STATE), its ``end_state/``
    left files out (:func:`end_state_left_out`), or its ``end_state/`` folder is gone (every
    trial that reached its end state has one, empty when the agent changed nothing; grading
    without it would grade the initial workspace)."""
    if trial.error is not None and trial.error.kind in NO_END_STATE:
        phase = f" in the {trial.error.phase} phase" if trial.error.phase else ""
        kind = trial.error.kind
        if trial.job_id == RL_JOB_ID:  # an RL episode's folder (its job id): no job's to resume
            again = "a trainer runs the episode anew"
        elif folder.resolve().parent.name == JobPaths.RETRIED:
            # an attempt set aside: its trial ran again, or --resume runs it (helper-219: this
            # said --resume runs it again of a job resumed and finished since)
            again = (
                "an attempt set aside in _retried/, never counted: its trial ran again, or "
                "clawrig run --resume runs it, in a folder of its own"
            )
        else:
            again = "clawrig run --resume runs it again"
        return (
            f"it ended with {'an' if kind[0] in 'aeiou' else 'a'} {kind} error{phase}, so it "
            f"has no end state to grade ({again})"
        )
    paths = TrialPaths(folder)
    if (left_out := end_state_left_out(trial)) is not None:
        return left_out
    if paths.end_state.is_dir() and not paths.end_state.is_symlink():
        return None
    # a folder written before end_state/ was always made: its log says nothing changed
    log = read_regular(paths.agent_log, RESULT_LIMIT)
    nothing_changed = log is not None and NOTHING_CHANGED.encode() in log
    if nothing_changed:
        return None
    if paths.end_state.is_symlink():
        return f"end_state/ is a link: {paths.end_state} (not the end state the trial recorded)"
    return f"end_state/ missing: {paths.end_state} (the recorded end state is gone)"


NOTHING_CHANGED = "end state: 0 file(s) created or changed"
"""The line of the trial's log (``TrialPaths.agent_log``; :meth:`Trial.stop_agent`) when the
agent created or changed no file: older trial folders have no ``end_state/`` then."""


async def regrade_trial(
    folder: Path,
    *,
    grader: GraderMode | None = None,
    judge: ChatModel | None = None,
    judge_cache: list[Path] | None = None,
    sandbox: str | None = None,
    out_dir: Path | None = None,
    write: bool = False,
    refresh: bool = True,
) -> RegradeReport:
    """Grade the trial in ``folder`` again under its recorded conditions (module docs).

    ``grader`` / ``sandbox``: None = as recorded. ``judge_cache``: record files replayed
    beside the trial's own; ``judge``: a live model for requests the records lack (without
    it such a request is a replay miss: counted in the report, a grading error). The new
    judge logs go to ``out_dir`` (default: a temporary folder). ``write``: replace the
    folder's score.json, process_score.json and result.json with the new grading (never
    otherwise; not after a replay miss, whose grading error would replace a real grading),
    then, with ``refresh``, the job summary that lists the trial (:func:`refresh_job_summary`;
    re-grading many trials of one job: pass False and refresh once at the end). A trial that
    ended with an infrastructure, setup or cancelled error, or whose ``end_state/`` is gone,
    has no end state: its report says why in ``not_gradable`` (nothing graded, nothing
    written). Raises UserError for a folder
    that is not a trial (no result.json), a task that cannot be found or a missing
    ``judge_cache`` file.
    """
    folder = Path(folder)
    trial = load_trial(folder)
    if write:  # before any grading: nothing of the trial half-written (helper-193)
        paths = TrialPaths(folder)
        for path in (paths.score, paths.process_score):
            if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
                raise UserError(f"{path}: not a regular file: --write does not replace it")
    if (why := no_end_state(folder, trial)) is not None:
        return _not_gradable(folder, trial, why)
    task = _task_of(trial, folder)
    config = recorded_config(trial)
    update: dict[str, Any] = {}
    if grader is not None:
        update["grader"] = grader
    if sandbox is not None:
        update["sandbox"] = sandbox
    config = config.model_copy(update=update)
    paths = TrialPaths(folder)
    extra = list(judge_cache or [])
    for path in extra:
        if not Path(path).is_file():
            raise UserError(f"--judge-cache: no such file: {path}")
    recorded_judge = recorded_models(folder).get("judge")
    if recorded_judge is None and extra:
        recorded_judge = "judge"
    model = judge or (replay_model(recorded_judge) if recorded_judge else None)
    recorded = RecordedEndState.of(folder)
    logs = out_dir or owned_tempdir("regrade")  # the re-grading's own logs, removed after
    gateway = replay_gateway(
        folder, extra=extra, live=judge is not None, what="TRIAL_DIR", allow_empty=True
    )
    with gateway, _removed(logs if out_dir is None else None):
        services = TrialServices(judge=model, gateway=gateway)
        async with Trial(
            task, config, services=services, folder=logs, run_index=trial.run_index
        ) as again:
            await again.sandbox_up(recorded=recorded, with_agent=False)
            await again.put_transcript(recorded.transcript_text)
            await again.gt_in()
            try:
                score, _judge_score, process = await again.grade()
            except ModelRequestError as exc:  # a judge's replay miss (or a live judge refusing)
                score, process = Score(grader="judge", error=str(exc)), ProcessScore()
                again.result.score = score
                again.result.error = TrialError(
                    kind=ErrorKind.GRADING, message=str(exc), phase="grading"
                )
    records = gateway.cache
    assert records is not None  # a replay gateway always has its cache
    before_score = trial.score
    after_result = again.result
    before = GradeSide(
        score=trial.counted_score(),
        subscores=before_score.subscores if before_score else {},
        error=before_score.error if before_score else None,
        process=trial.process,
    )
    # the agent's own error (not its grading's) stands: it counts 0 whatever the grader says
    # now, as it did when the trial ran (helper-202: re-graded "1.0" against a recorded 0 it
    # could never be, every grade after --write said DIFFERENT)
    after_error = after_result.error or _kept_error(trial)
    after = GradeSide(
        score=after_result.model_copy(update={"error": after_error}).counted_score(),
        subscores=score.subscores if score else {},
        error=score.error if score else None,
        process=process,
    )
    score_file = score_file_problem(folder, trial)
    same = (
        before.score == after.score
        and before.subscores == after.subscores
        and trial.process == process
        and score_file is None
    )
    written = False
    summary: Path | None = None
    misses = 0 if judge is not None else records.misses
    if write and not misses:
        from clawrig.runner.batch import write_json_atomic

        updated = trial.model_copy(
            update={
                "score": score,
                "judge_score": after_result.judge_score,
                "process": process,
                "task_digest": task.digest(),  # the score written is the task's as it is now
                # a new grading replaces the old grading's error, whatever its kind (a grader
                # that crashed on the agent's end state is an agent error in the grading
                # phase: it stayed, the fixed grader's 1.0 counted 0, helper-200); the agent's
                # own error (its phase, its time limit) stays
                "error": after_error,
            }
        )
        write_json_atomic(paths.score, ScoreFile.of(updated).model_dump(mode="json"))
        write_json_atomic(paths.process_score, updated.process.model_dump(mode="json"))
        write_json_atomic(paths.result, updated.model_dump(mode="json"))
        written = True
        summary = refresh_job_summary(folder) if refresh else None
    return RegradeReport(
        task_id=trial.task_id,
        trial=str(folder),
        before=before,
        after=after,
        same=same,
        judge_cache={"hits": records.hits, "misses": records.misses},
        grader_timeout_s=again.plan.grader_s,
        written=written,
        live_judge=judge is not None,
        summary=str(summary) if summary is not None else None,
        task_changed=_task_changed(trial, task),
        score_file=score_file,
    )


def _kept_error(trial: TrialResult) -> TrialError | None:
    """The error of ``trial`` a new grading leaves in place: one not of its grading (neither
    of kind ``grading`` nor raised in the grading phase), None otherwise."""
    err = trial.error
    if err is None or err.kind == ErrorKind.GRADING or err.phase == "grading":
        return None
    return err


def _task_changed(trial: TrialResult, task: Task) -> str | None:
    """:attr:`RegradeReport.task_changed` of ``trial`` re-graded with ``task``."""
    now = task.digest()
    if not trial.task_digest or trial.task_digest == now:
        return None
    return (
        f"task {task.id} changed since the trial ran (digest {trial.task_digest[:12]} then, "
        f"{now[:12]} now; read from {trial.task_source or task.source.path}): the re-grading "
        "used the task as it is now"
    )
