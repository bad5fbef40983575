"""Reading a finished job for export: its graded trials and the tasks they ran.

A job folder (:mod:`clawrig.runner.batch`) holds ``<task_id>/<trial folder>/`` trial folders
(result.json, score.json, usage.json, chat.jsonl, formatted_dialog.json, end_state/ ...) and
one ``summary_<model>.json`` per model, whose ``suite_path`` names the suite the tasks were
read from. Folders under ``_retried/`` and half-written ``.tmp-*`` folders are skipped.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrig.errors import ClawrigError, UserError, not_a_folder
from clawrig.jsonl import JSONL_LIMIT, jsonl_lines
from clawrig.spec.layout import (
    RESULT_LIMIT,
    JobPaths,
    TrialPaths,
    model_from_json_text,
    read_record,
    read_regular,
)
from clawrig.spec.llm import surrogate_free_json
from clawrig.spec.summary import JobSummary
from clawrig.spec.task import Task
from clawrig.spec.trial import TrialResult, Usage, recorded_score_problem
from clawrig.tasks.registry import Suite, find_task, load_suite

"""Bytes of a result.json read at most (a larger one cannot be read)."""
UNREADABLE = "result.json cannot be read"
"""How :func:`find_trials` says why it left a trial folder out."""


class ExportError(ClawrigError):
    """An export could not be written as asked (e.g. a host path would leak into it)."""


@dataclass
class JobTrial:
    """One trial folder of a job, read back: ``result`` (result.json), ``folder``, and the
    raw result.json dict (for keys newer than :class:`TrialResult`)."""

    folder: Path
    result: TrialResult
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def paths(self) -> TrialPaths:
        return TrialPaths(self.folder)

    @property
    def score(self) -> float | None:
        """The trial's counted score in [0, 1] (:meth:`TrialResult.counted_score`: an agent
        error counts 0), None when it is not scored."""
        return self.result.counted_score()

    @property
    def graded(self) -> bool:
        """Scored: :attr:`score` is a number."""
        return self.score is not None

    def dialog(self) -> dict[str, Any]:
        """formatted_dialog.json: ``{"formatted_dialog": [...], "tool_schema": [...]}``.
        Raises ExportError when missing or unreadable."""
        path = self.paths.dialog
        try:
            # (a lone surrogate's escape decodes to U+FFFD: the rows are written as UTF-8)
            data = json.loads(surrogate_free_json(read_record(path)))
        except (OSError, ValueError, RecursionError) as exc:
            raise ExportError(f"{path}: cannot read the trial's dialog ({exc})") from None
        if not isinstance(data, dict) or not isinstance(data.get("formatted_dialog"), list):
            raise ExportError(f"{path}: formatted_dialog: missing or not a list")
        return data

    def usage(self) -> Usage:
        """usage.json (tokens, USD, seconds), else the result's usage."""
        path = self.paths.usage
        try:
            return Usage.model_validate_json(read_record(path))
        except (OSError, ValueError):
            return self.result.usage

    def transcript_entries(self) -> list[dict[str, Any]]:
        """chat.jsonl parsed: one dict per line (unparsable lines skipped)."""
        path = self.paths.chat
        entries: list[dict[str, Any]] = []
        try:
            lines = jsonl_lines(read_record(path, JSONL_LIMIT))
        except OSError:
            return entries
        for line in lines:
            if line.strip():
                try:
                    value = json.loads(surrogate_free_json(line))
                except (ValueError, RecursionError):
                    continue
                if isinstance(value, dict):
                    entries.append(value)
        return entries


class _BadScore(ValueError):
    """A result.json whose score is no number in [0, 1] (:func:`recorded_score_problem`)."""


def find_trials(job_dir: Path, unreadable: dict[str, str] | None = None) -> list[JobTrial]:
    """Every trial folder of the job with a readable result.json, sorted by (task id, run
    index, trial id). An output folder may hold trials of earlier jobs too: only those of the
    jobs its ``summary_<model>.json`` files describe (their ``job_id``) are taken; an RL output
    folder (:meth:`JobPaths.is_rollouts`) gives all of its trials. Each trial folder whose
    result.json cannot be read goes into ``unreadable`` (``<task>/<trial>`` -> why) when given.
    Raises UserError when ``job_dir`` is not a job folder."""
    job_dir = Path(job_dir)
    if not job_dir.is_dir():
        raise not_a_folder("JOB_DIR", job_dir)
    layout = JobPaths(job_dir)
    summaries = layout.summaries()
    if not summaries and not layout.is_rollouts():
        raise UserError(
            f"{job_dir}: not a job folder (no summary_<model>.json, nor the {JobPaths.ROLLOUTS} "
            "of an RL output folder)"
        )
    job_ids: set[str] = set()
    for path in summaries:
        try:
            job_id = json.loads(read_record(path)).get("job_id")
        except (OSError, ValueError, AttributeError, RecursionError):
            continue  # (a summary nested 100,000 deep: helper-189)
        if isinstance(job_id, str) and job_id:
            job_ids.add(job_id)
    trials: list[JobTrial] = []
    for rj in layout.trial_results():
        folder = rj.parent
        try:
            data = read_regular(rj, RESULT_LIMIT)  # (a FIFO hung the exports: helper-138)
            if data is None:
                raise OSError("not a regular file")
            raw = json.loads(surrogate_free_json(data.decode("utf-8")))
            result = TrialResult.model_validate(raw)
            if problem := recorded_score_problem(raw):
                raise _BadScore(problem)
        except (OSError, ValueError, RecursionError) as exc:
            if unreadable is not None:
                why = (
                    str(exc)
                    if isinstance(exc, _BadScore)
                    else "not JSON"
                    if isinstance(exc, json.JSONDecodeError | RecursionError)
                    else "not a trial's result"
                    if isinstance(exc, ValueError)
                    else str(exc) or exc.__class__.__name__
                )
                unreadable[f"{folder.parent.name}/{folder.name}"] = f"{UNREADABLE} ({why})"
            continue
        if job_ids and result.job_id not in job_ids:
            continue  # a trial of an earlier job in the same output folder
        trials.append(JobTrial(folder=folder, result=result, raw=raw))
    trials.sort(key=lambda t: (t.result.task_id, t.result.run_index, t.result.trial_id))
    return trials


def read_summary(job_dir: Path, model: str) -> JobSummary:
    """``summary_<model>.json`` of the job. Raises UserError when missing or unreadable."""
    path = JobPaths(Path(job_dir)).summary(model)
    if not path.exists():
        raise UserError(f"{path}: no summary for model {model!r} in the job")
    try:
        return model_from_json_text(JobSummary, read_record(path))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable summary ({exc.__class__.__name__})") from None


def recorded_suite_paths(job_dir: Path, recorded: object) -> list[Path]:
    """Where a summary's ``suite_path`` (``recorded``) may be: itself when absolute, else
    tried against the current folder, the job folder and its parent (the job was run from
    one of them); [] when it names none."""
    if not isinstance(recorded, str) or not recorded:
        return []
    p = Path(recorded)
    return [p] if p.is_absolute() else [Path.cwd() / p, job_dir / p, job_dir.parent / p]


def suite_location(job_dir: Path, recorded: object) -> Path | None:
    """The suite a summary's ``suite_path`` names, resolved: the first of
    :func:`recorded_suite_paths` that exists; None when none does."""
    for path in recorded_suite_paths(job_dir, recorded):
        with contextlib.suppress(OSError):
            if path.exists():
                return path.resolve()
    return None


def _suite_candidates(
    job_dir: Path, trial: JobTrial, summary: JobSummary | dict[str, Any]
) -> list[Path]:
    """Where the job's suite may be: the summary's ``suite_path``
    (:func:`recorded_suite_paths`), then the trial's ``task_source``."""
    recorded = summary.suite_path if isinstance(summary, JobSummary) else summary.get("suite_path")
    out = recorded_suite_paths(job_dir, recorded)
    source = trial.raw.get("task_source")
    if isinstance(source, str) and source:
        out.append(Path(source))
    return out


class TaskResolver:
    """Finds the task a trial ran: re-loads the suite named by the job's summary
    (``suite_path``; relative paths are tried against the current folder and the job folder),
    else the trial's ``task_source``; ``suite`` overrides both. Suites are loaded once."""

    def __init__(self, job_dir: Path, suite: Path | None = None) -> None:
        self.job_dir = Path(job_dir)
        self.suite = suite
        self._loaded: dict[Path, Suite] = {}
        self.suite_roots: set[Path] = set()

    def _find(self, path: Path, task_id: str) -> Task:
        """Task ``task_id`` of the suite at ``path`` (read once). A file of the suite that does
        not read stops only the trials whose task it may be (:meth:`Suite.errors_for`, as
        ``run --suite`` reads a suite: helper-215's export stopped at a sample the job never
        ran). Raises UserError (TaskFormatError for the task's own broken file)."""
        key = path.resolve()
        if key not in self._loaded:
            self._loaded[key] = load_suite(key)
            self.suite_roots.add(key)
        return self._loaded[key].chosen(lambda tasks: [find_task(tasks, task_id)], quiet=True)[0]

    def task_for(self, trial: JobTrial) -> Task:
        """The Task of ``trial``. Raises UserError naming the summary when no suite is found
        and the id is not in it."""
        if self.suite is not None:
            if not self.suite.exists():
                raise UserError(f"--suite: no such file or folder: {self.suite}")
            return self._find(self.suite, trial.result.task_id)
        layout = JobPaths(self.job_dir)
        if layout.is_rollouts() and not layout.summary(trial.result.model).is_file():
            # an RL output folder: each episode's task is named by its own result.json
            for path in _suite_candidates(self.job_dir, trial, {}):
                if path.exists():
                    return self._find(path, trial.result.task_id)
            raise UserError(
                f"{trial.paths.result}: task_source: {trial.raw.get('task_source')!r} not "
                "found (give the suite with --suite)"
            )
        summary = read_summary(self.job_dir, trial.result.model)
        candidates = _suite_candidates(self.job_dir, trial, summary)
        for path in candidates:
            if path.exists():
                return self._find(path, trial.result.task_id)
        raise UserError(
            f"{layout.summary(trial.result.model)}: suite_path: "
            f"{summary.suite_path!r} not found (give the suite with --suite)"
        )
