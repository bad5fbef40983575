"""A job: many trials in one asyncio process, with retries, resume, a budget cap and a summary.

- Scheduling: at most ``parallel`` trials at once (jittered starts); model connections are
  limited per provider by the LLM client; grading runs under its own limit.
- Retries: a trial that ends with a retryable (infrastructure) error is run again, up to
  ``max_attempts``, with exponential backoff (tenacity); the failed attempt's folder is moved to
  ``<output>/_retried/`` and never scored (what it spent counts: :func:`recorded_spend`). An
  attempt that failed with no result (the process running it died) whose whole folder is on
  disk has that folder's result: a trial has one.
- Resume (DataClawBench's progress file, formats.md section 3): ``progress_<model>.json`` =
  {model, suite, runs, job_id, completed[{task_id, run_index, result}]}, written atomically after
  trials that ended without error (one write at a time, of the latest state:
  :class:`ProgressWriter`). ``--resume`` refuses (UserError, exit 2) when model, suite
  or runs differ; it adopts whole trial folders of this job that a crash left out of the
  progress file, removes half-written ``.tmp-*`` folders, and runs the rest: every trial exactly
  once. The file is deleted when every trial finished without error.
- Budget: no new trial starts once the job's spend (USD; what earlier runs of the job spent
  included, :func:`recorded_spend`) reaches ``budget_usd``; running ones end normally; the
  summary says the budget stopped the job.
- Interrupt (SIGINT, SIGTERM): running trials are cancelled; once the executor's processes
  ended, a trial one of them finished as it was cancelled (its report not heard) is counted
  from its folder: the summary and the progress file hold every finished trial.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import errno
import json
import math
import os
import random
import secrets
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import EllipsisType
from typing import Any

from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, retry_if_result, stop_after_attempt, wait_exponential

from clawrig.choices import MAX_RUNS
from clawrig.errors import (
    AttemptLost,
    ClawrigError,
    SummaryNotWritten,
    UserError,
    first_invalid,
)
from clawrig.grading.aggregate import job_summary
from clawrig.held_signals import HeldSignals
from clawrig.leftovers import release_own_mounts
from clawrig.runner.executors import Executor, create_executor
from clawrig.runner.trial import (
    INTERRUPTED,
    TrialServices,
    move_to_retried,
    names_a_trial_of,
    remove_unfinished,
    set_aside_unfinished,
)
from clawrig.sandbox.pool import WarmPool, warm_pool_wanted
from clawrig.spec.job import (
    RL_JOB_ID,
    JobConfig,
    Progress,
    ProgressEntry,
    UnwrittenSpend,
    model_slug,
)
from clawrig.spec.layout import (
    TMP_PREFIX,
    JobPaths,
    TrialPaths,
    json_text,
    model_from_json_text,
    model_json_text,
    read_record,
)
from clawrig.spec.summary import OUTPUT_MOVED
from clawrig.spec.task import Task
from clawrig.spec.trial import ErrorKind, TrialError, TrialResult, Usage, finite_float
from clawrig.waits import harness_slots

EXITED_AT_ONCE = "interrupted: the job exited at once while this attempt ran (run again on resume)"
"""The error of an attempt cut short by a job leaving at once (a second Ctrl-C, or its trials
not stopping within :data:`INTERRUPT_GRACE_S`): :func:`set_aside_partial_trials`."""
INTERRUPT_GRACE_S = 10.0
"""Seconds a first Ctrl-C waits for running trials to stop before exiting anyway."""


@dataclass
class JobState:
    """Live counters for the progress view."""

    total: int = 0
    done: int = 0
    running: int = 0
    failed: int = 0
    skipped: int = 0
    spend_usd: float = 0.0
    started: float = field(default_factory=time.monotonic)
    budget_stopped: bool = False
    provider_stopped: str | None = None
    """Why the job stopped starting trials: a model's server cannot be reached or refused the
    key, account or model."""
    output_stopped: str | None = None
    """Why the job stopped starting trials: its output folder cannot be written (full, or
    read-only: :func:`output_stop_line`)."""
    interrupted: bool = False
    interrupted_by: str | None = None
    """The signal that interrupted the job (``SIGINT``: Ctrl-C, ``SIGTERM``: kill, timeout)."""
    unwritten: dict[tuple[str, int], Usage] = field(default_factory=dict)
    """(task id, run index) -> what a trial spent when its latest attempt left no folder (the
    progress file's ``unwritten``, this run's and earlier runs'): counted in the budget and the
    summary's totals beside what the folders record."""
    earlier_s: float = 0.0
    """Wall time of the job's earlier invocations (``--resume``: what its progress file or
    summary recorded), seconds."""
    set_aside: int = 0
    """``--resume``: attempts of the stopped run this run set aside in ``_retried/`` (trials it
    left half-written that recorded model calls, and whole attempts that ended in an error):
    their trials run again (:func:`_adopt_orphans`)."""
    removed: int = 0
    """``--resume``: half-written trial folders of the stopped run removed (no model call
    recorded there: nothing to keep)."""

    def elapsed_s(self) -> float:
        """The job's wall time so far in seconds: its earlier invocations' and this one's."""
        return self.earlier_s + time.monotonic() - self.started


@dataclass
class OutputLock:
    """A job's hold on its output folder: ``fd``, its open lock file; ``folder``, the folder's
    (st_dev, st_ino) when the lock was taken (:func:`output_moved_line`); ``released``: the
    lock file closed (the job over; its descriptor may be another file's now)."""

    fd: int
    folder: tuple[int, int]
    released: bool = False


def _lock_output(output: Path) -> int:
    """Hold ``<output>/.clawrig.lock`` for the job: two jobs writing into one output folder
    would interleave their progress and summaries. Raises UserError when another holds it."""
    import fcntl

    try:
        fd = _open_lock(JobPaths(output).lock)
    except UserError as exc:
        raise UserError(str(exc).replace("output: ", "--output: ", 1)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UserError(
            f"--output: another clawrig job is writing to {output}; wait for it or choose "
            "another folder"
        ) from None
    return fd


LOCK_PROBE_WAITS = 100
"""Times (10 ms apart) :func:`share_output` tries to hold a job lock shared before it calls
the folder a ``clawrig run`` job's: a check whether a job writes there (:func:`_lock_holder`)
holds it alone for a moment."""


KILLED_WRITER = (
    "interrupted: the process writing this RL output was killed while this episode ran (set "
    "aside by the next one to start there)"
)
"""The error of an RL episode's attempt a killed writer left half-written
(:func:`share_output`)."""


def share_output(output: Path, job: JobConfig, job_id: str) -> tuple[list[int], int]:
    """Hold an RL output folder that several processes may write at once
    (:class:`clawrig.rl.Rollouts`: trainer workers given one ``CLAWRIG_RL_OUTPUT``, or
    ``clawrig serve`` instances): ``.clawrig.lock`` shared (a ``clawrig run`` job holds it
    alone: refused), and ``.clawrig.writers.lock`` shared. A writer that can hold the latter
    alone (no other alive: a fresh folder, or every earlier writer gone, a kill -9 included)
    first sets aside the half-written trial folders (``<task>/.tmp-*``) the others left,
    with what their recorded model calls spent, else removes them (:func:`set_aside_killed`);
    a writer starting meanwhile waits for that. Their error: :data:`KILLED_WRITER`. Returns
    the locks' descriptors (closing them lets go) and how many trial folders it set aside or
    removed. Raises UserError when a ``clawrig run`` job holds the folder or ever wrote there
    (its summary or progress file), or a lock file cannot be opened (a folder, a link: never
    followed)."""
    import fcntl

    paths = JobPaths(output)
    if problem := retried_link_problem(output):
        raise UserError(problem)
    if records := paths.summaries() + paths.progresses():  # (helper-181: a run's folder
        # taken over: its crashed trials set aside as episodes', its --resume refused)
        raise UserError(
            f"output: {output} holds a clawrig run job ({records[0].name}): choose another folder"
        )
    held, swept = [_open_lock(paths.lock)], 0
    try:
        for _ in range(LOCK_PROBE_WAITS):  # (a probe holds it alone for a moment: wait)
            try:
                fcntl.flock(held[0], fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.01)
        else:
            raise UserError(
                f"output: a clawrig job is writing to {output}; wait for it or choose another "
                "folder"
            )
        held.append(_open_lock(paths.writers_lock))
        try:
            fcntl.flock(held[1], fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another writer is alive: its .tmp- folders are its trials in progress
        else:
            for tmp in partial_trial_folders(output):
                with contextlib.suppress(OSError):
                    set_aside_killed(tmp, None, job, job_id, KILLED_WRITER)
                    swept += 1
        fcntl.flock(held[1], fcntl.LOCK_SH)  # (waits while another sets aside)
    except BaseException:
        for fd in held:
            os.close(fd)
        raise
    return held, swept


def retried_link_problem(output: Path) -> str | None:
    """``output: ...`` when the job folder's ``_retried`` is a link, else None: attempts set
    aside would be moved where it leads, outside the folder (helper-181, helper-183); or when
    it is no folder (a file: a resume's set-aside raised FileExistsError, helper-185)."""
    retried = JobPaths(output).retried
    if retried.is_symlink():
        return (
            f"output: {retried} is a link: attempts set aside would go where it leads; make it "
            "a folder, or choose another output folder"
        )
    if os.path.lexists(retried) and not retried.is_dir():
        return (
            f"output: {retried} is no folder: attempts set aside go into it; remove or rename "
            "it, or choose another output folder"
        )
    return None


def _open_lock(path: Path) -> int:
    """A descriptor of the lock file ``path`` (made when missing; never through a link).
    Raises UserError naming it when it cannot be opened (a folder, a link, no permission)."""
    try:
        return os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        why = "a link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc)).lower()
        raise UserError(f"output: cannot use the lock file {path}: {why}") from None


def partial_trial_folders(output: Path, task_ids: Iterable[str] | None = None) -> list[Path]:
    """The half-written trial folders (``<task>/.tmp-*``) under the job folder ``output``, of
    ``task_ids`` (None: of every task folder there). Links are not followed, to a task folder
    or a trial folder, and other entries than folders are left out: what is set aside or
    removed is the job's own (helper-180: a linked task folder had a folder outside moved
    into ``_retried/``, another removed)."""
    found: list[Path] = []
    try:
        if task_ids is None:
            tasks = [e.name for e in os.scandir(output) if e.is_dir(follow_symlinks=False)]
        else:
            tasks = list(task_ids)
    except OSError:
        return found
    for name in tasks:
        task_dir = output / name
        try:
            if not task_dir.is_dir() or task_dir.is_symlink():
                continue
            entries = list(os.scandir(task_dir))
        except OSError:
            continue
        found += [
            task_dir / e.name
            for e in entries
            if e.name.startswith(TMP_PREFIX) and e.is_dir(follow_symlinks=False)
        ]
    return found


def _lock_holder(output: Path) -> bool:
    """True when another process holds ``<output>/.clawrig.lock`` (a job is writing there)."""
    import fcntl

    lock = JobPaths(output).lock
    if not lock.is_file():
        return False
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's lock
    return False


def output_state_problem(
    output: Path,
    model: str,
    *,
    resume: bool,
    check_lock: bool = True,
    suite: str | None = None,
    runs: int | None = None,
    replay: str | None | EllipsisType = ...,
    agent: str | None = None,
    task_ids: Iterable[str] = (),
) -> str | None:
    """Why a job of ``model`` may not start in ``output`` (one line), or None.

    An RL output folder (``rollouts.json``) refuses, and so does another job writing there
    (it holds the lock); an unfinished job of this model
    (``progress_<model>.json`` present: interrupted, stopped by the budget, or trials that
    errored) needs ``resume``; a finished one (a summary and no progress file) is not run again
    into the same folder (with ``resume`` the Job reports it finished and runs nothing).
    With ``resume``, a ``suite``, ``runs``, ``agent`` or ``replay`` source (when given;
    ``replay`` None is a live job) other than the job's there, finished or not, refuses
    (:func:`resume_mismatch`),
    and so does a folder holding jobs of other models only (:func:`other_jobs`: a mistyped
    ``-m`` would start a whole new job there).
    ``check_lock`` False: the caller holds the lock. ``task_ids``: the job's tasks, whose
    folders in ``output`` must not be links.
    """
    if (outer := enclosing_job(output)) is not None:
        # (helper-212: a job written into another job's task folder, read there as one of
        # its task's trials by its resume, export and viewer)
        return (
            f"--output: {output} is inside the job folder {outer}, whose task folders are its "
            "own: choose a folder outside it"
        )
    if not output.is_dir():
        return None
    if problem := retried_link_problem(output):
        return f"--{problem}"
    if linked := linked_task_folders(output, task_ids):
        # a task's folder that is a link: its trials were written where it leads (helper-191:
        # into another job's folder; helper-193: a dangling one failed every attempt)
        return (
            f"--output: {output / linked[0]} is a link: a job's task folders are its own; "
            "remove the link or choose another folder"
        )
    if JobPaths(output).is_rollouts():  # (helper-179: a job's trials mixed with episodes')
        return (
            f"--output: {output} is an RL output folder ({JobPaths.ROLLOUTS}: clawrig serve or "
            "clawrig.rl.Rollouts write episodes there): choose another folder"
        )
    if check_lock and _lock_holder(output):
        return (
            f"--output: another clawrig job is writing to {output}; wait for it or choose "
            "another folder"
        )
    ppath = progress_path(output, model)
    spath = summary_path(output, model)
    for record in (ppath, spath):
        if (kind := _not_a_file(record)) is not None:
            # (a folder there was called a finished or unfinished job: helper-218)
            return (
                f"--output: {record} is {kind}, where the job's record goes: remove it or "
                "choose another folder"
            )
    if ppath.exists() and not resume:
        done = "?"
        with contextlib.suppress(OSError, ValueError, UserError):
            if (prog := read_progress(ppath)) is not None:
                done = str(len(prog.completed))
        return (
            f"--output: {output} holds an unfinished job of {model} ({done} trial(s) done, "
            f"{ppath.name}): add --resume to continue it, or choose another folder"
        )
    if spath.exists() and not ppath.exists() and not resume:
        if (value := read_job_summary(output, model)) is not None and summary_unfinished(
            value, output
        ):
            gone = missing_trials(value, output)
            why = (
                f"{len(gone)} trial folder(s) it lists are gone, e.g. {gone[0]}"
                if gone and not summary_unfinished(value)
                else f"{value.get('not_run', '?')} trial(s) not run"
            )
            return (
                f"--output: {output} holds an unfinished job of {model} ({spath.name}: {why}): "
                "add --resume to continue it, or choose another folder"
            )
        return (
            f"--output: {output} holds a finished job of {model} ({spath.name}): choose "
            "another folder to run it again"
        )
    no_record = not ppath.exists() and not spath.exists()
    others = other_jobs(output) if no_record else []
    if misnamed := [file for name, file in others if name == model]:
        # a file of this model under another model's name (renamed or copied by hand)
        is_progress = output / misnamed[0] in JobPaths(output).progresses()
        right = (progress_path if is_progress else summary_path)(output, model)
        return (
            f"{'--resume' if resume else '--output'}: {output / misnamed[0]} records the model "
            f"{model}, but its name is another model's: rename it {right.name} to "
            f"{'resume' if resume else 'keep'} that job, or choose another folder"
        )
    if resume and others:
        shown = ", ".join(f"{name} ({file})" for name, file in others[:3])
        return (
            f"--resume: {output} holds no job of {model}, only of {shown}: resume with "
            "that -m (or --agent), or drop --resume to start a new job there"
        )
    if no_record and (ids := unrecorded_job_ids(output, model)):
        models = ", ".join(sorted({m for _, m in ids}))
        jobs = ", ".join(sorted({j for j, _ in ids})[:3])
        return (
            f"--output: {output} holds {sum(ids.values())} trial(s) of {models} (job {jobs}) "
            f"but no record of that job ({ppath.name} or {spath.name}, removed or renamed): put "
            "it back to --resume the job, or choose another folder (a new job there would mix "
            "with them)"
        )
    if resume and not ppath.exists() and spath.exists() and read_job_summary(output, model) is None:
        # (helper-212: read as no record, the finished job ran again from scratch beside its
        # trials, spending again, and the new summary counted only the new run)
        return (
            f"--resume: {spath} cannot be read as a job summary: it is the record of the job of "
            f"{model} in {output} (which trials ran, what they spent); put it back, or choose "
            "another folder"
        )
    if resume and (broken := unreadable_trial_record(output, model)) is not None:
        return broken
    if resume and ((suite, runs, agent) != (None, None, None) or replay is not ...):
        return resume_mismatch(output, model, suite=suite, runs=runs, replay=replay, agent=agent)
    return None


def enclosing_job(output: Path) -> Path | None:
    """The job folder ``output`` is a task folder or a trial folder of (its parent or
    grandparent, links and ``..`` resolved, holds a job's summary or progress file that reads
    as one, or is an RL output folder), or None. (helper-217: ``-o ..`` from a task folder
    was taken for a folder inside the job, and a folder's stray ``summary_notes.json`` for a
    job's record.)"""
    path = output.resolve()
    for up in (path.parent, path.parent.parent):
        if up == path:
            break
        with contextlib.suppress(OSError):
            paths = JobPaths(up)
            if paths.is_rollouts() or any(
                _job_record(f) for f in paths.summaries() + paths.progresses()
            ):
                return up
    return None


def _job_record(path: Path) -> bool:
    """Whether ``path`` reads as a job's summary or progress file: a JSON object naming its
    model and holding its trials (``tasks``, ``completed``)."""
    try:
        value = json.loads(read_record(path))
    except (OSError, ValueError, RecursionError):
        return False
    return (
        isinstance(value, dict)
        and isinstance(value.get("model"), str)
        and ("tasks" in value or "completed" in value)
    )


def unreadable_trial_record(output: Path, model: str) -> str | None:
    """One line naming the first ``result.json`` of a trial folder of ``model`` in ``output``
    (trial folders and ``_retried/``: those named for its slug, :func:`model_slug`, as
    :func:`clawrig.runner.trial.trial_folder_name` names them) that
    cannot be read as a trial result, or None. A resume reads each to know which trials ran
    and what they spent (the budget's spend so far): one passed over was a finished trial run
    again and its spend dropped from the totals and the budget (helper-212)."""
    paths = JobPaths(output)
    for rj in paths.trial_results() + paths.retried_results():
        if not names_a_trial_of(rj.parent.name, model):
            continue
        try:
            model_from_json_text(TrialResult, read_record(rj))
        except ValidationError as exc:
            where, what = first_invalid(exc)
            why = f"{where}: {what}"
        except (OSError, ValueError, RecursionError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        else:
            continue
        return (
            f"--resume: {rj} cannot be read as a trial result ({why[:200]}): it records a "
            f"trial of {model} and what it spent; put it back, or move its trial folder "
            f"{rj.parent} out of {output} to run that trial again"
        )
    return None


def unrecorded_job_ids(output: Path, model: str) -> dict[tuple[str, str], int]:
    """(job id, model) -> number of finished trial folders of jobs of ``model`` in ``output``: the
    folders named for its slug (:func:`model_slug`: the job records' name, so ``a/b`` and
    ``a_b`` are one), whose ``result.json`` names a model of that slug and a job (not ``""``,
    a trial run outside a job, nor :data:`RL_JOB_ID`); unreadable ones are passed over.
    :func:`output_state_problem` calls it when the folder holds no job record of ``model``:
    only those folders' JSON is read (a folder of 20,000 other trials took 2 s a call)."""
    slug = model_slug(model)
    ids: dict[tuple[str, str], int] = {}
    for rj in JobPaths(output).trial_results():
        if not rj.parent.name.startswith(f"{slug}_"):
            continue
        try:
            value = json.loads(read_record(rj))
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(value, dict) or model_slug(str(value.get("model"))) != slug:
            continue
        job_id = value.get("job_id")
        if isinstance(job_id, str) and job_id not in ("", RL_JOB_ID):
            key = (job_id, str(value.get("model")))
            ids[key] = ids.get(key, 0) + 1
    return ids


def other_jobs(output: Path) -> list[tuple[str, str]]:
    """(model, file name) of every job in ``output`` by its ``progress_*.json`` or
    ``summary_*.json`` (the model as the file records it; the file's own name when it cannot
    be read or records no name), one per model, sorted. Files that are not regular files (a
    named pipe would block the read) are passed over."""
    found: dict[str, str] = {}
    paths = JobPaths(output)
    for path in sorted([*paths.progresses(), *paths.summaries()]):
        if not path.is_file():
            continue
        name = path.stem.split("_", 1)[1]
        with contextlib.suppress(OSError, ValueError, AttributeError):
            recorded = json.loads(path.read_text(encoding="utf-8")).get("model")
            if isinstance(recorded, str) and recorded:
                name = recorded
        found.setdefault(name, path.name)
    return sorted(found.items())


def job_agent(output: Path, model: str) -> str | None:
    """The agent the job of ``model`` in ``output`` ran (``--agent``): its progress file's
    ``agent``, else its summary's; None when neither records one (files from before it was
    recorded, or no job)."""
    ppath, spath = progress_path(output, model), summary_path(output, model)
    with contextlib.suppress(OSError, ValueError, UserError):
        if ppath.is_file() and (prog := read_progress(ppath)) is not None and prog.agent:
            return prog.agent
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if spath.is_file():
            agent = json.loads(spath.read_text(encoding="utf-8")).get("agent")
            if isinstance(agent, str) and agent:
                return agent
    return None


def _summary_replay(spath: Path) -> str | None | EllipsisType:
    """The replay source a job's summary records (``replayed_from``: a folder, or None for a
    live job), or ``...`` when it records none that can be compared: no such entry (a summary
    from before it was), a summary that cannot be read, or a path that is not absolute (older
    versions wrote it as given on the command line: relative to a folder unknown now)."""
    try:
        value = json.loads(spath.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ...
    if not isinstance(value, dict) or "replayed_from" not in value:
        return ...
    source = value["replayed_from"]
    if not source:
        return None
    if not isinstance(source, str) or not os.path.isabs(source):
        return ...
    return source


def _suite_ids(suite: Any) -> Any:
    """A ``--suite`` value as the tasks it selects: ``all``, or the set of its comma-separated
    ids (trials start in task-id order whatever order it lists them in: helper-155's
    ``--resume`` with the same ids in another order was refused)."""
    if not isinstance(suite, str) or suite.strip() == "all":
        return suite
    return frozenset(part.strip() for part in suite.split(",") if part.strip())


def resume_mismatch(
    output: Path,
    model: str,
    *,
    suite: str | None = None,
    runs: int | None = None,
    replay: str | None | EllipsisType = ...,
    agent: str | None = None,
) -> str | None:
    """Why ``--resume`` with ``suite``, ``runs``, ``agent`` and ``replay`` does not continue
    the job of
    ``model`` in ``output`` (one line naming the file and what differs), or None (no job there,
    or the same options; ``suite``/``runs`` None and ``replay`` ``...`` are not compared).
    ``replay``: the job folder ``--replay`` answers from (:meth:`JobConfig.replay_source`), None
    for a live job: a job is replayed or live as a whole (its summary's ``replayed_from``).
    Read from ``progress_<model>.json`` (an unfinished job; its ``replay`` only when the file
    records one) or else ``summary_<model>.json`` (a finished one: the same refusal, not
    "nothing to run"). Raises UserError when the progress file is not valid."""
    ppath, spath = progress_path(output, model), summary_path(output, model)
    state = "interrupted"
    theirs_replay: str | None | EllipsisType = ...
    if ppath.is_file() and (prog := read_progress(ppath)) is not None:
        path = ppath
        theirs: dict[str, Any] = {"model": prog.model, "suite": prog.suite, "runs": prog.runs}
        if "replay" in prog.model_fields_set:
            theirs_replay = prog.replay
        elif spath.is_file():  # a file from before it was recorded: the summary may say
            theirs_replay = _summary_replay(spath)
    elif (value := read_job_summary(output, model)) is not None:
        path, state = spath, "interrupted" if summary_unfinished(value, output) else "finished"
        theirs = {"model": model, "suite": value.get("suite"), "runs": value.get("runs_per_task")}
        theirs_replay = _summary_replay(spath)
    else:
        return None
    theirs["agent"] = job_agent(output, model)
    mine = {"model": model, "suite": suite, "runs": runs, "agent": agent}
    # compared as the tasks they select: the same ids in another order are the same job
    ours = mine | {"suite": _suite_ids(suite)}
    recorded = theirs | {"suite": _suite_ids(theirs["suite"])}
    differ = [
        name
        for name in ("model", "suite", "runs", "agent")
        if ours[name] is not None and recorded[name] is not None and ours[name] != recorded[name]
    ]
    if theirs_replay is not ...:
        theirs_replay = theirs_replay or None  # ("" as null: a hand edit)
    if not differ and replay is not ... and theirs_replay is not ... and replay != theirs_replay:
        if theirs_replay and replay:
            return (
                f"{path}: --resume: the {state} job replayed {theirs_replay}, not {replay}: "
                f"resume it with --replay {theirs_replay}, or choose another --output"
            )
        if theirs_replay:
            return (
                f"{path}: --resume: the {state} job replayed {theirs_replay}; this is a live run "
                "(no --replay): a job is replayed or live as a whole, so resume it with "
                f"--replay {theirs_replay}, or choose another --output"
            )
        return (
            f"{path}: --resume: the {state} job called its models (live); this is --replay "
            f"{replay}: a job is replayed or live as a whole, so resume it as it ran, or choose "
            "another --output"
        )
    if not differ:
        return None
    what = " and ".join(differ)
    verb = "differs" if len(differ) == 1 else "differ"
    given = " ".join(f"{name}={mine[name]}" for name in differ)
    return (
        f"{path}: --resume: {what} {verb} from the {state} job's (it ran model={theirs['model']}"
        f" suite={theirs['suite']} runs={theirs['runs']}"
        + (f" agent={theirs['agent']}" if "agent" in differ else "")
        + f"; this run: {given}): run with the job's options (-m and --runs may be left out), "
        "or choose another --output"
    )


def job_runs(output: Path, model: str) -> int | None:
    """The runs per task of the job of ``model`` in ``output``: its progress file's
    (``runs``), else its summary's (``runs_per_task``); None when neither is there or says.
    Raises UserError when the progress file is not valid or the summary's count is no count
    (1 to :data:`MAX_RUNS`)."""
    ppath = progress_path(output, model)
    if ppath.is_file() and (prog := read_progress(ppath)) is not None:
        return prog.runs
    value = read_job_summary(output, model)
    if value is None or "runs_per_task" not in value:
        return None
    runs = value["runs_per_task"]
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
        raise UserError(  # (helper-226: true was read as 1, a job of 2 runs resumed as 1)
            f"--resume: {summary_path(output, model)}: runs_per_task: {json.dumps(runs)} is "
            f"not a count of runs (1 to {MAX_RUNS})"
        )
    return runs


def summary_unfinished(summary: dict[str, Any], output: Path | None = None) -> bool:
    """True when a job's summary says trials of it were not run (interrupted, stopped by the
    budget or a model's provider: ``interrupted``, ``not_run``), or (``output``: the job's
    folder) trials it lists have no folder there now (:func:`missing_trials`):
    ``--resume`` runs them."""
    not_run = summary.get("not_run")
    if summary.get("interrupted") or (isinstance(not_run, int) and not_run > 0):
        return True
    return output is not None and bool(missing_trials(summary, output))


def missing_trials(summary: dict[str, Any], output: Path) -> list[str]:
    """The trial folders (``<task>/<trial>``, as the summary's ``tasks`` rows name them) a
    job's summary lists that are gone from ``output`` now (:func:`trial_gone`): deleted by hand
    to run them again (helper-188: ``--resume`` said "every trial is done" and showed the
    summary with a trial whose folder was gone)."""
    rows = summary.get("tasks")
    rows = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    return [
        r["trial"]
        for r in rows
        if isinstance(r.get("trial"), str)
        and JobPaths.is_trial_path(r["trial"])
        and trial_gone(output, r["trial"], r.get("task_id"))
    ]


def gone_trial_lines(paths: list[Path], what: str) -> list[str]:
    """One line per summary of a job folder among ``paths`` that lists trials whose folders
    are gone (:func:`missing_trials`), saying they were not ``what`` ("re-graded",
    "exported"): re-grading the rest said "9/9 trials re-grade" of a job whose summary counts
    10 (helper-188), an export wrote 9 rows beside the summary's mean of 10 (helper-192)."""
    lines: list[str] = []
    for path in dict.fromkeys(Path(p) for p in paths):
        if not JobPaths(path).is_job():
            continue
        for spath in JobPaths(path).summaries():
            try:
                value = json.loads(read_record(spath))
            except (OSError, ValueError, RecursionError):
                continue
            if isinstance(value, dict) and (gone := missing_trials(value, path)):
                lines.append(
                    f"{spath}: lists {len(gone)} trial folder(s) that are gone (e.g. "
                    f"{gone[0]}): not {what}; clawrig run --resume runs them again"
                )
    return lines


def linked_task_folders(output: Path, task_ids: Iterable[str]) -> list[str]:
    """Those of ``task_ids`` whose folder in ``output`` is a link (to a folder, a file or
    nothing), sorted: a job's task folders must be its own (:func:`output_state_problem`)."""
    return sorted(t for t in set(task_ids) if os.path.islink(output / t))


def trial_gone(output: Path, trial: str, task_id: Any) -> bool:
    """Whether the trial folder ``trial`` (``<task>/<trial>``, relative to ``output``) that a
    summary row or a progress entry of task ``task_id`` names is not the job's now: no
    result.json that is a regular file, a task or trial folder that is a link (what it leads
    to is no trial of this job, as :meth:`JobPaths.trial_results` has it), or a folder of
    another task (helper-191: each counted as present, the trial never ran again)."""
    task, _, name = trial.partition("/")
    if task != task_id:
        return True
    folder = output / task / name
    if os.path.islink(output / task) or os.path.islink(folder):
        return True
    try:
        return not stat.S_ISREG(os.lstat(TrialPaths(folder).result).st_mode)
    except OSError:
        return True


def read_job_summary(output: Path, model: str) -> dict[str, Any] | None:
    """``summary_<model>.json`` in ``output`` when it is a readable JSON object, else None."""
    spath = summary_path(output, model)
    if not spath.is_file():
        return None
    try:
        value = json.loads(read_record(spath))  # (a regular file, 64 MiB at most)
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def finished_summary(output: Path, model: str) -> dict[str, Any] | None:
    """The summary of a finished job of ``model`` in ``output`` (summary present, no progress
    file, every trial run: :func:`summary_unfinished` false), or None."""
    if progress_path(output, model).exists():
        return None
    value = read_job_summary(output, model)
    return None if value is None or summary_unfinished(value, output) else value


def progress_from_summary(job: JobConfig, model: str) -> Progress | None:
    """For ``--resume`` of a job whose progress file is gone (removed by hand) but whose
    summary says trials were not run: a progress file of that job (its id, suite, runs, agent
    and replay source from the summary, its trial settings from a finished trial's
    ``result.json``, so a resume with other settings is refused as with the file; the trials
    it finished are found in their folders by that id, :func:`_adopt_orphans`); None when
    there is no such summary. Raises UserError when the summary names no job id."""
    value = read_job_summary(job.output, model)
    if value is None or not summary_unfinished(value, job.output):
        return None
    job_id = value.get("job_id")
    if not isinstance(job_id, str) or not job_id:
        raise UserError(
            f"{summary_path(job.output, model)}: job_id: the unfinished job's id is not readable "
            "and its progress file is gone: its finished trials cannot be told apart; choose "
            "another --output"
        )
    settings = _trial_settings(job.output, model, job_id)
    suite, runs, agent = value.get("suite"), value.get("runs_per_task"), value.get("agent")
    replayed = value.get("replayed_from")
    elapsed = finite_float(value.get("elapsed_s"))  # (a 400-digit one: helper-198)
    return Progress(
        model=model,
        suite=suite if isinstance(suite, str) else job.suite,
        runs=runs if isinstance(runs, int) else job.runs,
        job_id=job_id,
        agent=agent if isinstance(agent, str) else job.trial.agent,
        settings=settings,
        replay=replayed if isinstance(replayed, str) and replayed else None,
        task_digests=_summary_task_ids(value, job.output),
        elapsed_s=elapsed if elapsed is not None and elapsed >= 0 else 0.0,
        unwritten=_summary_unwritten(value, job.output),
    )


def _summary_unwritten(value: dict[str, Any], output: Path) -> list[UnwrittenSpend]:
    """The progress file's ``unwritten`` as a summary says it: its trial rows that spent
    (``cost_usd`` with ``retried_cost_usd``, its earlier attempts'; ``total_tokens``, the
    last attempt's: a row holds no more) and whose trial folder holds no result.json (a
    folder that could not be written: helper-214 found a resume from the summary dropping
    that spend from the budget)."""
    out = []
    for row in value.get("tasks") or []:
        if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
            continue
        costs = [finite_float(row.get(k)) for k in ("cost_usd", "retried_cost_usd")]
        cost = sum(max(0.0, c or 0.0) for c in costs)
        tokens = row.get("total_tokens")
        tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0
        run_index = row.get("run_index")
        trial = row.get("trial")
        if not isinstance(run_index, int) or not isinstance(trial, str) or not (cost or tokens):
            continue
        with contextlib.suppress(OSError, ValueError):
            if (output / trial / TrialPaths.RESULT).is_file():
                continue
            usage = {"cost_usd": cost, "total_tokens": max(0, tokens)}
            out.append(UnwrittenSpend(task_id=row["task_id"], run_index=run_index, usage=usage))
    return out


def _trial_settings(output: Path, model: str, job_id: Any) -> dict[str, Any]:
    """The trial settings (:meth:`TrialConfig.resume_settings`) a finished trial of job
    ``job_id`` for ``model`` under ``output`` ran with; {} when none says."""
    if not isinstance(job_id, str) or not job_id:
        return {}
    for rj in JobPaths(output).trial_results():
        with contextlib.suppress(OSError, ValueError):
            res = model_from_json_text(TrialResult, read_record(rj))
            if res.job_id == job_id and res.model == model and res.config is not None:
                return res.config.resume_settings()
    return {}


def _summary_task_ids(summary: dict[str, Any], output: Path | None = None) -> dict[str, str]:
    """Task id -> digest for every task a job's summary lists, run or not (``tasks``,
    ``unrun``): a summary holds no digests, so a run task's is its trial's ``task_digest``
    (the row's result.json in ``output``, read when given), else "" and
    :func:`changed_tasks_problem` compares that task by id."""
    lists = [summary.get(key) for key in ("tasks", "unrun")]
    rows = [r for rs in lists if isinstance(rs, list) for r in rs if isinstance(r, dict)]
    ids = {r["task_id"]: "" for r in rows if isinstance(r.get("task_id"), str)}
    for row in rows:
        trial, task_id = row.get("trial"), row.get("task_id")
        if output is None or ids.get(task_id) != "" or not isinstance(trial, str):
            continue
        if not JobPaths.is_trial_path(trial):
            continue  # (not a trial folder of the job: grade --write refuses such a row)
        with contextlib.suppress(OSError, ValueError, RecursionError):
            recorded = json.loads(read_record(TrialPaths(output / trial).result))
            digest = recorded.get("task_digest") if isinstance(recorded, dict) else None
            if isinstance(digest, str) and recorded.get("task_id") == task_id:
                ids[task_id] = digest
    return ids


def resumes_finished_job(job: JobConfig, model: str) -> bool:
    """True when ``job`` is a ``--resume`` of a folder whose job of ``model`` finished: it
    runs nothing and shows that job's summary again (:func:`finished_summary`), so nothing
    it would run with (a model, a judge) is needed."""
    return job.resume and finished_summary(job.output, model) is not None


def sweep_partial_trials(output: Path, trials: bool = True) -> int:
    """Remove half-written ``<task>/.tmp-*`` trial folders (not with ``trials`` False: a
    resumed job's :func:`_adopt_orphans` keeps what they spent) and ``.summary_*``/
    ``.progress_*`` temp files under ``output`` (only while this job holds the lock), and the
    task folders that leaves empty (:func:`clawrig.runner.trial.remove_unfinished`); returns
    how many trial folders and files."""
    removed = 0
    if not output.is_dir():
        return 0
    for tmp in output.glob(".*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed += 1
    for tdir in partial_trial_folders(output) if trials else ():
        remove_unfinished(tdir)
        removed += 1
    return removed


def _quiet_after_interrupt(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Loop exception handler once the job is interrupted: drops "exception was never
    retrieved" reports of clawrig errors and cancellations; passes on everything else."""
    exc = context.get("exception")
    if isinstance(exc, ClawrigError | asyncio.CancelledError):
        return
    loop.default_exception_handler(context)


def job_spend_usd(state: JobState, services: TrialServices) -> float:
    """The job's spend so far (USD): its finished trials', or the gateway's count when higher
    (it counts the requests of trials still running as their replies come)."""
    gateway = services.gateway
    return max(state.spend_usd, gateway.spent_usd if gateway is not None else 0.0)


def recorded_spend(
    output: Path,
    job_id: str,
    results: Iterable[TrialResult] = (),
    unwritten: dict[tuple[str, int], Usage] | None = None,
) -> dict[tuple[str, int], Usage]:
    """What job ``job_id`` spent per trial (task id, run index), as its folder ``output``
    records it (tokens, USD, requests, seconds): the one count behind the summary's ``usage``
    and the budget's spend so far. Every attempt of the job whose result.json is there counts:
    trial folders and ``_retried/`` (attempts set aside by a retry, by ``--resume``, or left
    there by a trial interrupted mid-retry). An attempt's ``retried_usage`` holds its trial's
    earlier attempts (those with no folder too, e.g. lost with a worker), carried over
    ``--resume`` as well, so a trial's spend is the largest :meth:`TrialResult.spent` of its
    attempts, or the sum of their own usage when larger (folders of jobs that did not carry
    it). ``results``: attempts known in memory too (one whose folder could not be written);
    their folders are not read again (a job's summary reads only what it does not hold).
    ``unwritten``: what trials spent whose latest attempt left no folder (the progress file's
    record: :attr:`JobState.unwritten`)."""
    unwritten = unwritten or {}
    paths = JobPaths(output)
    attempts: dict[tuple[str, int], list[TrialResult]] = {}
    for res in results:
        attempts.setdefault((res.task_id, res.run_index), []).append(res)
    known = {res.trial_id for res in results if res.trial_id}
    # (a trial folder's name is its trial id)
    files = [
        rj for rj in paths.trial_results() + paths.retried_results() if rj.parent.name not in known
    ]
    for res in _job_attempts(files, job_id):
        attempts.setdefault((res.task_id, res.run_index), []).append(res)
    spend = {}
    for key, found in attempts.items():
        own = Usage()
        for res in {r.trial_id or id(r): r for r in found}.values():  # each attempt once
            own = own.add(res.usage)
        spend[key] = max([own, *(r.spent() for r in found)], key=_spend_order)
    for key, usage in unwritten.items():  # (what no folder records: the progress file does)
        spend[key] = max(spend.get(key, Usage()), usage, key=_spend_order)
    return spend


def _spend_order(usage: Usage) -> tuple[float, int, int]:
    """The order of two counts of one trial's spend: the larger is the one that saw more."""
    return (usage.cost_usd, usage.total_tokens, usage.request_count)


def _record_unwritten(progress: Progress, state: JobState) -> None:
    """The progress file's ``unwritten`` from ``state.unwritten``."""
    progress.unwritten = [
        UnwrittenSpend(task_id=t, run_index=r, usage=u.model_dump(mode="json"))
        for (t, r), u in sorted(state.unwritten.items())
    ]


OUTPUT_FULL_ERRNOS = {errno.ENOSPC: "no space left", errno.EDQUOT: "disk quota exceeded",
                      errno.EROFS: "read-only file system"}  # fmt: skip
"""Errors writing a trial folder that every later trial of the job would meet too."""


def _not_a_file(path: Path) -> str | None:
    """What ``path`` is when it is there but no regular file: "a link (to ...)" (the job's
    readers refuse one: helper-221), "a folder", "a FIFO", ..., else None (no such file, a
    file, or a dangling link, which the job's first write replaces)."""
    try:
        mode = path.stat().st_mode
        if path.is_symlink():
            return f"a link (to {os.readlink(path)})"
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def output_stop_line(failed: TrialResult | BaseException | None, output: Path) -> str | None:
    """One line when ``failed`` says the job's output folder is full or read-only
    (:data:`OUTPUT_FULL_ERRNOS`): an attempt whose trial folder could not be written (as its
    error says it: ``[Errno N]``) when the folder then takes no small file either
    (:func:`_output_full`: one trial's end state too large for the room left ends that trial
    only), or an OSError writing the job's own files (its progress file); else None. The
    job then starts no trial and retries none: each would spend on its model and keep
    nothing (helper-212: 112 paid requests kept one trial). The trials not run stay
    resumable."""
    if isinstance(failed, OSError):
        what = OUTPUT_FULL_ERRNOS.get(failed.errno or 0)
    elif isinstance(failed, TrialResult) and failed.error is not None:
        error = failed.error
        said = any(f"[Errno {n}]" in error.message for n in OUTPUT_FULL_ERRNOS)
        # one trial's folder too large for the room left (its end state: the agent's doing)
        # ends that trial only; the job stops when the folder takes no more (CI227: a 4 MiB
        # end state on a 3 MiB disk stopped the honest trials after it)
        what = _output_full(output) if said and error.phase == "write" else None
    else:
        what = None
    if what is None:
        return None
    return (
        f"the output folder {output} could not be written ({what}): trials run now would "
        "keep nothing; free space there (or make it writable) and --resume"
    )


OUTPUT_PROBE_BYTES = 1024 * 1024
"""The room (bytes) a job's output folder must still take after a trial folder could not be
written there, for the job to go on: about what a small trial's folder needs."""


def output_moved_line(output: Path, lock: OutputLock) -> str | None:
    """One line when the job's output folder was removed or replaced (moved away, another in
    its place) while the job ran, or only its lock file was, else None: the folder at
    ``output`` is not the one locked, or the lock file the job holds open is no longer the one
    at ``<output>/.clawrig.lock`` (another job could then lock the folder). The trial folders
    written there before may be gone with the folder; a summary listing them would say they
    ran (helper-218: the job recreated the folder and exited 0)."""
    if lock.released:  # (a second Ctrl-C once the job ended: its fd closed, EBADF)
        return None
    path = JobPaths(output).lock
    held = os.fstat(lock.fd)
    folder = now = None
    with contextlib.suppress(OSError):
        folder = os.stat(output)
        now = os.stat(path, follow_symlinks=False)
    if folder is not None and (folder.st_dev, folder.st_ino) == lock.folder:
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return None
        return (
            f"the job's lock file {path} {OUTPUT_MOVED}: another job could write to {output}; "
            "the job started no more trials; --resume continues it"
        )
    return (
        f"the output folder {output} {OUTPUT_MOVED}: the job "
        "started no more trials, and trial folders it wrote before may be gone with it; "
        "--resume runs every trial whose folder is missing"
    )


def _record_at_a_moved_output(
    job: JobConfig,
    model: str,
    job_id: str,
    progress: Progress,
    summary: dict[str, Any],
    moved: str,
    own: dict[Path, tuple[int, int] | None],
) -> None:
    """Write the job's progress file and summary at its output path after the folder (or its
    lock file) was removed or replaced (``moved``: :func:`output_moved_line`), so --resume
    finds them, when the folder now there is the job's to write: its lock taken, no job of
    another model in it (helper-226: a resume there then had to name a model, and could run
    this job into the other's folder), and no progress file or summary of the model but the
    job's own (``own``: path -> (st_dev, st_ino) of the job's file there, :func:`file_id`: the
    progress file it wrote last, the summary an earlier run of it left; helper-226: with only
    the lock file removed, the job called its own file another's). Else they are not written
    (helper-222: a job run into the new folder meanwhile had its finished summary replaced by
    this one's; helper-224: a --resume of this job finished it there, and this one's summary
    of 6 trials not run replaced that): :class:`SummaryNotWritten` says why. Raises OSError
    when a write fails."""
    ppath, where = progress_path(job.output, model), summary_path(job.output, model)
    try:
        job.output.mkdir(parents=True, exist_ok=True)
        fd = _lock_output(job.output)
    except (OSError, UserError) as exc:
        why = "another job holds it" if isinstance(exc, UserError) else _os_reason(exc)
        line = _not_recorded(moved, job.output, why, summary)
        raise SummaryNotWritten(line, summary, where) from None
    try:
        ours = (ppath.name, where.name)
        others = [(m, file) for m, file in other_jobs(job.output) if file not in ours]
        if others:
            line = _not_recorded(
                moved, job.output, f"{others[0][1]} there is another model's job", summary
            )
            raise SummaryNotWritten(line, summary, where)
        for path in (ppath, where):
            if not os.path.lexists(path):
                continue
            if (mine := own.get(path)) is not None and file_id(path) == mine:
                continue  # the job's own, as it wrote it or found it
            theirs = None
            with contextlib.suppress(OSError, ValueError, AttributeError):
                theirs = json.loads(path.read_text(encoding="utf-8")).get("job_id")
            if theirs is not None and theirs != job_id:
                why = f"{path.name} there is another job's ({theirs})"
            else:  # (helper-224: a --resume of this job finished it there meanwhile)
                why = f"{path.name} there was written since"
            line = _not_recorded(moved, job.output, why, summary)
            raise SummaryNotWritten(line, summary, where)
        _write_text_atomic(ppath, model_json_text(progress))
        write_json_atomic(where, summary)
    finally:
        os.close(fd)


def _os_reason(exc: OSError) -> str:
    return str(exc.strerror or exc).lower()


def _not_recorded(moved: str, output: Path, why: str, summary: dict[str, Any]) -> str:
    """The line of a job whose summary and progress file were not written at its moved output
    folder ``output`` (:func:`_record_at_a_moved_output`) because of ``why``."""
    return (
        f"{moved}; the job's summary and progress file were not written to {output} ({why}): "
        f"the job spent {_spent_usd(summary)}; its trials there cannot be resumed"
    )


def _spent_usd(summary: dict[str, Any]) -> str:
    """What the job of ``summary`` spent, as its lines say it ("$0.0123")."""
    return f"${float((summary.get('usage') or {}).get('cost_usd') or 0):.4f}"


def job_file_stop_line(exc: OSError, path: Path, output: Path) -> str:
    """The one line for a job file (``path``: its progress file or summary) that could not be
    written: :func:`output_stop_line`'s when the output folder is full or read-only, else one
    naming the file and the error (a folder where the file goes, an I/O error). A job whose
    progress file cannot be written starts no more trials: a crash would lose the record of
    every trial run after it."""
    if (line := output_stop_line(exc, output)) is not None:
        return line
    return (
        f"{path} could not be written ({exc.strerror or exc}): the job started no more trials "
        f"(a crash would lose track of them); {_unblock(exc)} and --resume"
    )


def _unblock(exc: OSError) -> str:
    """What to do about a job file that could not be written (``exc``)."""
    if exc.errno == errno.EISDIR:
        return "remove the folder in its place"
    return "make it writable"


def _output_full(output: Path) -> str | None:
    """Why ``output`` takes no :data:`OUTPUT_PROBE_BYTES` file now (a probe written and
    removed: :data:`OUTPUT_FULL_ERRNOS`'s words), or None when it does."""
    probe = output / f".clawrig-room-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            for _ in range(OUTPUT_PROBE_BYTES // 65536):
                os.write(fd, bytes(65536))
            os.fsync(fd)  # (a file system that allocates at write-back says so here)
        finally:
            os.close(fd)
    except OSError as exc:
        return OUTPUT_FULL_ERRNOS.get(exc.errno or 0, exc.strerror or str(exc))
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def _final(result: TrialResult) -> bool:
    """A trial whose outcome stands (no error, or an agent error scored 0): not re-run."""
    return result.error is None or str(result.error.kind) == "agent"


def budget_share(budget_usd: float | None, at_once: int, trials: int) -> float | None:
    """A trial's share of the job's budget (USD): what each of the trials that run at once
    (``at_once``: ``-p``, or an executor's slots, at most the job's ``trials``) would get;
    None without a budget. A trial refused by the budget after it spent its share itself is
    graded (blame follows control: docs/security.md)."""
    if budget_usd is None:
        return None
    return budget_usd / max(1, min(at_once, trials))


def progress_path(output: Path, model: str) -> Path:
    return JobPaths(output).progress(model)


def summary_path(output: Path, model: str) -> Path:
    return JobPaths(output).summary(model)


def write_json_atomic(path: Path, value: Any) -> None:
    """Write JSON (:func:`clawrig.spec.layout.json_text`; a pydantic model as its JSON dump) to
    a temp file in the same folder, fsync, then rename over ``path``. Safe from several threads
    at once (one temp file each). Raises OSError."""
    text = model_json_text(value) if isinstance(value, BaseModel) else json_text(value)
    _write_text_atomic(path, text)


def file_id(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of what is at ``path`` (a link itself, not followed), or None."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _write_text_atomic(path: Path, text: str) -> tuple[int, int]:
    """:func:`write_json_atomic` of JSON text ``text`` (a newline added); returns the file's
    (st_dev, st_ino). The temp file is a new file (a link or a file left at its name is removed
    first, never written through); the rename replaces whatever ``path`` was, a link included,
    without following it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileExistsError:  # (a crashed writer's of the same pid and thread)
            tmp.unlink()
            fd = os.open(tmp, flags, 0o666)
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            st = os.fstat(fh.fileno())
        os.replace(tmp, path)
        return st.st_dev, st.st_ino
    except BaseException:  # a Ctrl-C mid-write leaves no temp file behind
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


PROGRESS_INTERVAL_S = 1.0
"""Seconds between the starts of two progress file writes (:class:`ProgressWriter`)."""


class ProgressWriter:
    """Writes the progress file (:func:`write_json_atomic`, off the event loop) after trials
    finish: one write at a time, each of the latest state, so a trial that finishes while a
    write is under way is in the next one and no trial waits for a disk write (at hundreds of
    trials at once, one write per trial of a file that grows with the job was quadratic).
    Writes start at most one per ``min_interval_s`` seconds (:data:`PROGRESS_INTERVAL_S`;
    :meth:`flush` writes at once): each replaces the file, so frees an inode, and at hundreds
    of trials a second those made every file the harness created on an ext4 without a journal
    scan past them (:mod:`clawrig.sandbox.disk`).
    A crash loses at most the trials finished since the last write: ``--resume`` adopts their
    whole folders. A failed write is raised by :meth:`flush`."""

    def __init__(
        self,
        path: Path,
        progress: Progress,
        min_interval_s: float | None = None,
        elapsed_s: Callable[[], float] | None = None,
        guard: Callable[[], str | None] | None = None,
    ) -> None:
        self.path = path
        self.progress = progress
        self.elapsed_s = elapsed_s
        self.guard = guard
        """Asked before each write: a line (the job's output folder is no longer its own:
        :func:`output_moved_line`) stops the writes for good, kept in :attr:`moved`."""
        self.moved: str | None = None
        """The job's wall time so far (seconds), recorded as the progress's ``elapsed_s`` at
        each write; None: left as it is."""
        self.min_interval_s = PROGRESS_INTERVAL_S if min_interval_s is None else min_interval_s
        self.writes = 0
        """Writes done so far."""
        self.written = file_id(path)
        """(st_dev, st_ino) of the file at :attr:`path` that is the job's: the one there when
        the writer was made (the job holds its folder's lock), then the last one it wrote."""
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._last = -math.inf
        """When the last write started (the event loop's clock, seconds)."""
        self._now = asyncio.Event()
        """Set by :meth:`flush`: no more waiting between writes."""

    def changed(self) -> None:
        """The progress changed: write it soon (from the running event loop)."""
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        while self._dirty and self._error is None:
            wait = self._last + self.min_interval_s - loop.time()
            if wait > 0 and not self._now.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._now.wait(), wait)
            self._last = loop.time()
            self._dirty = False
            if self.moved is None and self.guard is not None:
                self.moved = self.guard()
            if self.moved is not None:
                return  # (another job's folder may be at the path now: helper-222)
            if self.elapsed_s is not None:
                self.progress.elapsed_s = round(self.elapsed_s(), 3)
            text = model_json_text(self.progress)  # the state now, made in ~0.1 ms
            try:
                self.written = await asyncio.to_thread(_write_text_atomic, self.path, text)
            except Exception as exc:  # noqa: BLE001 - raised by flush(), at the job's end
                self._error = exc
            self.writes += 1

    @property
    def error(self) -> BaseException | None:
        """What a write raised (writes stop then), or None."""
        return self._error

    async def flush(self) -> None:
        """Wait until the latest state is written (or dropped: :attr:`moved`). Raises what a
        write raised (OSError)."""
        self._now.set()
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
        if self._error is not None:
            raise self._error


def _id_hint(missing: list[str], tasks: list[Task]) -> str:
    """What the user may have meant by ids ``missing`` from ``--suite`` (helper-209: "1" for
    000001, "a b" for a,b): a comma-separated list, or the suite's ids that read alike."""
    if any(any(c.isspace() for c in w) for w in missing):
        return " (separate ids with commas: --suite a,b)"
    import difflib

    ids = [t.id for t in tasks]
    alike: list[str] = []
    for w in missing:
        alike += [i for i in ids if w.isdigit() and i.isdigit() and int(i) == int(w)]
        alike += difflib.get_close_matches(w, ids, n=3, cutoff=0.75)
    alike = list(dict.fromkeys(alike))[:5]
    return f" (did you mean {', '.join(alike)}?)" if alike else ""


def select_tasks(tasks: list[Task], suite: str, categories: list[str]) -> list[Task]:
    """``suite`` "all" or comma-separated ids (a task matches by its id, its upstream id in
    metadata, or an id prefix like ``task_001``); ``categories`` filters by category."""
    chosen = tasks
    if suite and suite != "all":
        wanted = [s.strip() for s in suite.split(",") if s.strip()]
        chosen = []
        for t in tasks:
            ids = {t.id, str(t.metadata.get("upstream_id", "")), str(t.metadata.get("task_id", ""))}
            if any(w in ids or t.id.startswith(w + "_") for w in wanted):
                chosen.append(t)
        missing = [
            w
            for w in wanted
            if not any(
                w == t.id
                or t.id.startswith(w + "_")
                or w in (str(t.metadata.get("upstream_id", "")), str(t.metadata.get("task_id", "")))
                for t in chosen
            )
        ]
        if missing:
            raise UserError(
                f"--suite: no task with id {', '.join(missing)}{_id_hint(missing, tasks)}"
            )
    if categories:
        known = sorted({t.category for t in tasks if t.category})
        if unknown := [c for c in categories if c not in known]:  # a typo is said, not dropped
            raise UserError(
                f"--category: no task in {', '.join(unknown)} (the suite's categories: "
                f"{', '.join(known[:10]) or 'none'}{', ...' if len(known) > 10 else ''})"
            )
        chosen = [t for t in chosen if t.category in categories]
        if not chosen:
            raise UserError(f"--category: no task of --suite {suite} is in {', '.join(categories)}")
    return chosen


def read_progress(path: Path) -> Progress | None:
    """The progress file at ``path``, or None when there is none. Raises UserError (one line
    naming the file and the first field that is wrong) when it is not a valid one."""
    if not path.exists():
        return None

    def invalid(why: str) -> UserError:
        # and what to do about it (helper-212: the line said nothing more)
        summary = JobPaths.summary_beside(path)
        todo = (
            f"put it back, or remove it: --resume then goes on from {summary.name}"
            if summary.is_file()
            else "put it back (it is the job's record of its finished trials)"
        )
        return UserError(f"{path}: not a valid progress file ({why}); {todo}")

    if not path.is_file():  # (a named pipe would block the read)
        raise invalid("not a regular file")
    try:
        return Progress.model_validate_json(read_record(path))  # (64 MiB at most: helper-185)
    except ValidationError as exc:
        where, what = first_invalid(exc, "file")
        raise invalid(f"{where}: {what}") from None
    except (OSError, ValueError) as exc:
        raise invalid(exc.__class__.__name__) from None


def _load_progress(job: JobConfig, model: str) -> Progress | None:
    """The job's progress file, without the finished trials whose folders are gone
    (:func:`trial_gone`: deleted by hand to run them again; helper-191: an interrupted job's
    deleted trial was counted done and never run), or None."""
    progress = read_progress(progress_path(job.output, model))
    if progress is not None:
        progress.completed = [
            e for e in progress.completed if not trial_gone(job.output, e.result, e.task_id)
        ]
    return progress


def changed_tasks_problem(
    job: JobConfig,
    model: str,
    progress: Progress | None,
    digests: dict[str, str],
    *,
    state: str = "interrupted",
    record: Path | None = None,
) -> str | None:
    """With ``--resume``, why the tasks of ``job`` (``digests``: id -> :meth:`Task.digest`)
    are not those its interrupted job ran (one line: the ids whose digest differs from the
    ``progress`` file's, that the job did not have, or that the suite no longer has), or None
    (no progress file). A resume into a job of another suite ran that suite's tasks under the
    job's id and summed both (``not_run`` went negative). A progress file made from the
    summary (:func:`progress_from_summary`) knows the job's task ids but not their digests
    (""); one from before digests were recorded knows the tasks it finished only: those are
    compared. ``state`` and ``record`` (default: the progress file) name the job in the line:
    a finished job is checked from its summary."""
    if not job.resume or progress is None:
        return None
    theirs = progress.task_digests or {e.task_id: "" for e in progress.completed}
    changed = [t for t, d in digests.items() if theirs.get(t) not in (None, "", d)]
    kinds = (
        (f"differ from those the {state} job ran", changed),
        (
            f"are not the {state} job's",
            [t for t in digests if t not in theirs] if progress.task_digests else [],
        ),
        (
            f"of the {state} job are not in the suite now",
            [t for t in theirs if t not in digests],
        ),
    )
    said = [
        f"{len(ids)} task(s) {what} ({', '.join(sorted(ids)[:3])}{', ...' if len(ids) > 3 else ''})"
        for what, ids in kinds
        if ids
    ]
    if not said:
        return None
    return (
        f"{record or progress_path(job.output, model)}: --resume: {'; '.join(said)}: "
        f"{job.suite_path} is "
        "another suite, its tasks changed, or they were chosen otherwise (--suite, --category); "
        "resume with the same suite and options, or choose another --output"
    )


def changed_settings_problem(
    job: JobConfig, model: str, progress: Progress | None, record: Path | None = None
) -> str | None:
    """With ``--resume``, why the trial settings of ``job`` are not those the job in its
    folder (interrupted, stopped, or finished) ran with (one line naming the settings that
    differ: :attr:`Progress.settings`, and ``record``, the file they come from: default the
    progress file), or None (no progress file, or one that records none)."""
    if not job.resume or progress is None or not progress.settings:
        return None
    mine = job.trial.resume_settings()
    differ = sorted(
        k for k in mine.keys() | progress.settings.keys() if mine.get(k) != progress.settings.get(k)
    )
    if not differ:
        return None
    shown = ", ".join(f"{k} {progress.settings.get(k)!r} -> {mine.get(k)!r}" for k in differ[:4])
    return (
        f"{record or progress_path(job.output, model)}: --resume: trial settings differ from the "
        f"job's ({shown}): its trials and these would be summed as one job; run with the same "
        "options, or these as a new job with another --output"
        + (" (--suite IDS for only the tasks left)" if record is None else "")
    )


def resume_problem(job: JobConfig, tasks: list[Task], model: str) -> str | None:
    """Why ``--resume`` of ``job`` for ``model`` cannot continue what its output folder holds
    (one line), or None: :func:`output_state_problem` with the job's suite, runs and replay
    source, then :func:`changed_tasks_problem`. A Job checks it before anything else (its
    models, the replay's records): a resume refused is told why in that one line, not behind
    a model's or a recording's complaint that only follows from it. Raises UserError (an
    invalid progress file)."""
    if problem := output_state_problem(
        job.output,
        model,
        resume=True,
        suite=job.suite,
        runs=job.runs,
        replay=job.replay_source(),
        agent=job.trial.agent,
        task_ids=[t.id for t in tasks],
    ):
        return problem
    progress = _load_progress(job, model) or progress_from_summary(job, model)
    digests = {t.id: t.digest() for t in tasks}
    if progress is None and (done := finished_summary(job.output, model)) is not None:
        # a finished job resumed with another suite showed it "finished" and never ran the
        # tasks it added (helper-120): its summary's task ids
        # and one resumed with other trial settings said "nothing to run" (helper-168: an
        # unfinished one is refused for them); a finished trial's result.json says its own
        ids = Progress(
            model=model,
            suite=job.suite,
            runs=job.runs,
            settings=_trial_settings(job.output, model, done.get("job_id")),
            task_digests=_summary_task_ids(done, job.output),
        )
        record = summary_path(job.output, model)
        return changed_settings_problem(job, model, ids, record) or changed_tasks_problem(
            job, model, ids, digests, state="finished", record=record
        )
    if progress is not None and not progress_path(job.output, model).exists():
        # made from the summary (its progress file gone, or a finished job whose trial folders
        # were deleted): the line names the summary, and a finished job as finished
        record = summary_path(job.output, model)
        value = read_job_summary(job.output, model) or {}
        state = "interrupted" if summary_unfinished(value) else "finished"
        return changed_settings_problem(job, model, progress, record) or changed_tasks_problem(
            job, model, progress, digests, state=state, record=record
        )
    return changed_settings_problem(job, model, progress) or changed_tasks_problem(
        job, model, progress, digests
    )


def _trial_folders(
    output: Path, task_id: str, job_id: str, known: frozenset[str] = frozenset()
) -> list[tuple[Path, TrialResult]]:
    """The whole trial folders of job ``job_id`` under ``<output>/<task_id>/`` (renamed, with a
    readable result.json), by name, with their results; folders named in ``known`` are not
    read."""
    tdir = output / task_id
    if not tdir.is_dir() or tdir.is_symlink():  # (a link leads out of the job: helper-184)
        return []
    found = []
    for entry in sorted(tdir.iterdir()):
        rj = TrialPaths(entry).result
        if entry.name.startswith(TMP_PREFIX) or entry.name in known or entry.is_symlink():
            continue
        try:
            res = model_from_json_text(TrialResult, read_record(rj))
        except (OSError, ValueError):
            continue
        if res.job_id == job_id and res.task_id == task_id:
            # (a trial folder moved by hand into another task's folder is not that task's:
            # adopted as its trial, the moved task never ran again: helper-193)
            found.append((entry, res))
    return found


def set_aside_killed(
    tmp: Path, task: Task | None, job: JobConfig, job_id: str, why: str | None = None
) -> Usage | None:
    """A trial folder a killed job left half-written (``.tmp-*``): set aside in ``_retried/``
    with what its recorded model calls spent (:func:`clawrig.runner.trial.set_aside_unfinished`;
    ``why``: its error's message, default an interrupted job's), else removed
    (:func:`clawrig.runner.trial.remove_unfinished`); either way its task's folder goes when
    that leaves it empty. Returns what the set-aside attempt spent, or None. ``task`` None: a
    task not known here (an RL output's, :func:`share_output`): its id is the folder's parent's
    name, its category left empty.

    A Ray driver's record of an attempt that came back whole (the driver died between the
    rename and the record's removal: :func:`clawrig.runner.executors.ray.settle_record`) is
    removed: its calls are that trial's, counted there."""
    from clawrig.runner.executors.ray import settle_record

    if settle_record(tmp):
        remove_unfinished(tmp)
        return None
    base = TrialResult(
        task_id=task.id if task is not None else tmp.parent.name,
        category=task.category if task is not None else "",
        trial_id="",
        job_id=job_id,
        model=job.trial.model,
        agent=job.trial.agent,
        sandbox=job.trial.sandbox,
    )
    spent = set_aside_unfinished(tmp, base, JobPaths(job.output).retried, why or INTERRUPTED)
    if spent is None:
        remove_unfinished(tmp)
    return spent


def set_aside_partial_trials(
    job: JobConfig, tasks: list[Task], job_id: str, why: str | None = None
) -> tuple[int, int]:
    """Each half-written trial folder (``<task>/.tmp-*``) of ``tasks`` under the job's output
    set aside with what its recorded model calls spent, else removed
    (:func:`set_aside_killed`, ``why`` its error): what a job leaving at once (a second
    Ctrl-C), or resumed after a crash, keeps of its trials in progress. Returns how many were
    (set aside, removed); a folder that could be neither is in neither."""
    set_aside = removed = 0
    for task in tasks:
        for tmp in partial_trial_folders(job.output, [task.id]):
            with contextlib.suppress(OSError):
                if set_aside_killed(tmp, task, job, job_id, why) is not None:
                    set_aside += 1
                elif not os.path.lexists(tmp):
                    removed += 1
    return set_aside, removed


def _adopt_orphans(
    job: JobConfig, job_id: str, progress: Progress, tasks: list[Task]
) -> tuple[int, int]:
    """Set aside half-written trial folders; record whole ones of this job the crash missed.
    Returns how many attempts were (set aside in ``_retried/``, removed): the half-written
    folders (:func:`set_aside_partial_trials`) and whole attempts that ended in an error."""
    done = progress.done()
    set_aside, removed = set_aside_partial_trials(job, tasks, job_id)
    for task in tasks:
        for entry, res in _trial_folders(job.output, task.id, job_id):
            key = (res.task_id, res.run_index)
            if not _final(res):
                # an errored attempt is re-run: set it aside so the trial exists once
                move_to_retried(entry, JobPaths(job.output), task.id, entry.name)
                set_aside += 1
                # and no longer done when the progress file listed this folder as its result
                # (an edited folder: helper-230 saw it set aside and never run again)
                where = str(entry.relative_to(job.output))
                kept = [
                    e
                    for e in progress.completed
                    if (e.task_id, e.run_index) != key or e.result != where
                ]
                if len(kept) != len(progress.completed):
                    progress.completed = kept
                    done.discard(key)
                continue
            if key not in done:
                progress.completed.append(
                    ProgressEntry(
                        task_id=res.task_id,
                        run_index=res.run_index,
                        result=str(entry.relative_to(job.output)),
                    )
                )
                done.add(key)
    return set_aside, removed


def _tried(output: Path, job_id: str) -> set[tuple[str, int]]:
    """(task id, run index) of every trial of job ``job_id`` with an attempt set aside in
    ``output``'s ``_retried/`` (an error, an interrupt, a lost worker; by this run's
    :func:`_adopt_orphans` or an earlier one's)."""
    files = JobPaths(output).retried_results()
    return {(res.task_id, res.run_index) for res in _job_attempts(files, job_id)}


def _job_attempts(files: list[Path], job_id: str) -> Iterator[TrialResult]:
    """The attempts of job ``job_id`` among the result.json ``files`` (those that cannot be
    read or parsed left out)."""
    for rj in files:
        try:
            res = model_from_json_text(TrialResult, read_record(rj))
        except (OSError, ValueError):
            continue
        if res.job_id == job_id:
            yield res


def exit_now_reason(running: int, kept: int | None) -> str:
    """Why a job a second signal ends at once leaves as it does, for its last line:
    ``running``, its trials in progress; ``kept``, how many of their half-written folders it
    set aside in ``_retried/`` (what their recorded model calls spent), or None when it swept
    none because the output folder is no longer the job's."""
    if not running:  # (helper-227: said of trials in progress when none was; helper-229:
        # "still", the first signal stopped those that were)
        return "no trial was still running; --resume runs those not run"
    if kept:  # (they are not lost: helper-155)
        return (
            "the trials in progress are not finished: what they spent is in _retried/, "
            "--resume runs them again"
        )
    if kept == 0:  # none had a model call recorded (an oracle job's: helper-225)
        return (
            "the trials in progress are not finished (no model call of theirs was recorded: "
            "nothing to keep); --resume runs them again"
        )
    return (  # (nothing was set aside: helper-226)
        "the trials in progress are not finished; the output folder is no longer the job's: "
        "nothing of them was kept"
    )


async def run_job(
    job: JobConfig,
    tasks: list[Task],
    services: TrialServices,
    *,
    on_update: Callable[[JobState, TrialResult | None], None] | None = None,
    executor: Executor | None = None,
    held: HeldSignals | None = None,
) -> dict[str, Any]:
    """Run every (task, run_index) of the job not already done; return the summary dict.

    ``executor``: where trial attempts run (default: the one ``job.executor`` names,
    :func:`clawrig.runner.executors.create_executor`), started once the output folder is
    locked and checked, closed at the end. ``held``: once the trials ended with no signal,
    Ctrl-C and SIGTERM are held there (:meth:`HeldSignals.hold`; the caller releases them)
    while the summary is written, instead of raised in the middle of it.

    Raises UserError when ``--resume`` finds a progress file for another model, suite or runs,
    and :class:`clawrig.errors.ModelRequestError` when the provider refuses a request.
    """
    try:
        job.output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--output: cannot create {job.output}: {exc.strerror or exc}") from None
    lock_fd = _lock_output(job.output)
    folder = os.stat(job.output)
    lock = OutputLock(lock_fd, (folder.st_dev, folder.st_ino))
    try:
        return await _run_locked(
            job,
            tasks,
            services,
            on_update,
            executor or create_executor(job, tasks, services),
            lock,
            held,
        )
    finally:
        lock.released = True
        os.close(lock_fd)


async def _run_locked(
    job: JobConfig,
    tasks: list[Task],
    services: TrialServices,
    on_update: Callable[[JobState, TrialResult | None], None] | None,
    executor: Executor,
    output_lock: OutputLock,
    held: HeldSignals | None = None,
) -> dict[str, Any]:
    model = job.trial.model
    problem = output_state_problem(
        job.output,
        model,
        resume=job.resume,
        check_lock=False,
        suite=job.suite,
        runs=job.runs,
        replay=job.replay_source(),
        agent=job.trial.agent,
        task_ids=[t.id for t in tasks],
    )
    if problem:
        raise UserError(problem)
    if job.resume and (finished := finished_summary(job.output, model)) is not None:
        finished["already_finished"] = True  # nothing run: every trial is done
        if on_update:
            total = len(tasks) * job.runs
            spent = (finished.get("usage") or {}).get("cost_usd")  # (its bar said $0: helper-229)
            spend = float(spent) if isinstance(spent, int | float) else 0.0
            on_update(JobState(total=total, done=total, skipped=total, spend_usd=spend), None)
        return finished
    # what a killed job left half-written (its trials' folders: by _adopt_orphans, on resume)
    sweep_partial_trials(job.output, trials=not job.resume)
    ppath = progress_path(job.output, model)
    progress = _load_progress(job, model) if job.resume else None
    if progress is None and job.resume:  # its progress file removed: the summary's job
        progress = progress_from_summary(job, model)
    digests = {t.id: t.digest() for t in tasks}
    if problem := changed_settings_problem(job, model, progress) or changed_tasks_problem(
        job, model, progress, digests
    ):
        raise UserError(problem)
    if progress is not None and "replay" not in progress.model_fields_set:
        progress.replay = job.replay_source()  # a file from before it was recorded
    if progress is not None and not progress.agent:
        progress.agent = job.trial.agent  # (likewise)
    if progress is not None and not progress.settings:
        progress.settings = job.trial.resume_settings()  # (likewise)
    if progress is None or not progress.job_id:
        progress = progress or Progress(
            model=model,
            suite=job.suite,
            runs=job.runs,
            agent=job.trial.agent,
            settings=job.trial.resume_settings(),
            replay=job.replay_source(),
        )
        progress.job_id = f"{dt.datetime.now():%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"
    job_id = progress.job_id
    progress.task_digests = {**progress.task_digests, **digests}
    set_aside = removed = 0
    if job.resume:
        set_aside, removed = _adopt_orphans(job, job_id, progress, tasks)
    created = not ppath.exists()
    try:
        write_json_atomic(ppath, progress)
    except OSError as exc:  # (a full disk was a traceback: helper-214)
        raise UserError(
            f"--output: {ppath} could not be written ({exc.strerror or exc}): free space there "
            "(or make it writable) and run again"
        ) from None

    done = progress.done()
    todo = [(t, r) for t in tasks for r in range(job.runs) if (t.id, r) not in done]
    if job.resume:
        # the trials never tried go before those tried already (an attempt set aside, by this
        # --resume or an earlier one: helper-160): a model that stopped the job refusing its
        # first trials' prompts met the same ones first again, and the rest never ran
        # (helper-155's note)
        tried = _tried(job.output, job_id)
        todo.sort(key=lambda tr: (tr[0].id, tr[1]) in tried)
    state = JobState(
        total=len(tasks) * job.runs,
        done=len(done),
        skipped=len(done),
        earlier_s=progress.elapsed_s,
        set_aside=set_aside,
        removed=removed,
    )
    results: dict[tuple[str, int], TrialResult] = {}
    for entry in progress.completed:
        rj = TrialPaths(job.output / entry.result).result
        with contextlib.suppress(OSError, ValueError):
            res = model_from_json_text(TrialResult, read_record(rj))
            results[(entry.task_id, entry.run_index)] = res
    # what earlier runs of the job spent, every recorded attempt (a trial run again carries
    # its part on as its earlier attempts')
    carried = recorded_spend(job.output, job_id)
    trials = {(t.id, r) for t in tasks for r in range(job.runs)}
    for i, gone in enumerate(progress.unwritten):  # attempts that left no folder: its record
        key = (gone.task_id, gone.run_index)
        if key not in trials:  # (helper-214: counted in the budget and the totals)
            raise UserError(
                f"{ppath}: unwritten.{i}: {gone.task_id!r} run {gone.run_index} is no trial of "
                "the job"
            )
        usage = Usage.model_validate(gone.usage)
        state.unwritten[key] = usage
        carried[key] = max(carried.get(key, Usage()), usage, key=_spend_order)
    state.spend_usd = sum(u.cost_usd for u in carried.values())
    if services.gateway is not None and state.spend_usd:
        # the budget is the job's: what its earlier runs spent counts toward the gateway's
        # refusals too, not only toward starting trials
        services.gateway.add_spent(state.spend_usd)
    if on_update:  # a resumed job's bar starts at what its earlier runs finished
        on_update(state, None)
    pool = None
    if (
        services.pool is None
        and executor.in_process
        and job.trial.sandbox == "bwrap"
        and warm_pool_wanted()
    ):
        from clawrig.runner.executors.processes import job_processes, worker_parallel

        # this process's share of the trials at once (all of them unless --workers)
        share = worker_parallel(job.parallel, job_processes(job, tasks, services))
        pool = services.pool = WarmPool(parallel=share, work_dir=services.work_dir)
    try:
        try:
            await executor.start()
        except BaseException:
            if created:  # nothing ran (a cluster it could not join): the folder holds no job,
                # and the same command runs again as it is, not only with --resume
                # (helper-204's Ray join)
                with contextlib.suppress(OSError):
                    ppath.unlink()
            raise
        return await _run_trials(
            job,
            tasks,
            services,
            on_update,
            executor,
            progress,
            todo,
            state,
            results,
            carried,
            output_lock,
            held,
        )
    finally:
        await executor.close()
        if pool is not None:  # job end, Ctrl-C: every idle sandbox stopped and removed
            services.pool = None
            await pool.close()


async def _run_trials(
    job: JobConfig,
    tasks: list[Task],
    services: TrialServices,
    on_update: Callable[[JobState, TrialResult | None], None] | None,
    executor: Executor,
    progress: Progress,
    todo: list[tuple[Task, int]],
    state: JobState,
    results: dict[tuple[str, int], TrialResult],
    carried: dict[tuple[str, int], Usage],
    output_lock: OutputLock,
    held: HeldSignals | None = None,
) -> dict[str, Any]:
    """Run ``todo``'s trials of the job and write its summary; ``output_lock``: the job's hold on
    its output folder (:func:`output_moved_line`)."""
    model, job_id = job.trial.model, progress.job_id
    ppath = progress_path(job.output, model)
    slots = asyncio.Semaphore(max(1, executor.capacity or job.parallel))
    at_once = executor.capacity

    def share_budget() -> None:
        # an executor's own slots (Ray's) are the trials at once, not -p (docs/ray.md: not
        # used there): a trial's share of the budget is theirs (helper-141)
        if at_once and services.gateway is not None and job.budget_usd is not None:
            trials = len(tasks) * job.runs
            services.gateway.budget_share_usd = budget_share(job.budget_usd, at_once, trials)

    def more_slots(n: int) -> None:  # nodes that joined the cluster mid-job (Ray)
        nonlocal at_once
        at_once = (at_once or 0) + n
        share_budget()
        for _ in range(n):
            slots.release()

    share_budget()

    executor.on_capacity = more_slots
    # separate limits: sandbox starts and grading (waiting for either is a harness wait)
    starts, grading = harness_slots()
    services.sandbox_starts = services.sandbox_starts or starts
    services.grading_slots = services.grading_slots or grading
    if services.pool is not None:  # its starts ahead wait while trials wait for starts
        services.pool.foreground = services.sandbox_starts
    lock = asyncio.Lock()
    writer = ProgressWriter(
        ppath,
        progress,
        elapsed_s=state.elapsed_s,
        guard=lambda: output_moved_line(job.output, output_lock),
    )
    summary_at_start = file_id(summary_path(job.output, model))  # (an earlier run's: --resume)
    paths = JobPaths(job.output)

    def check_output() -> None:
        """Stop the job (``state.output_stopped``) when its progress file cannot be written
        (helper-214) or its output folder is no longer the one it locked (helper-218)."""
        if state.output_stopped is None and isinstance(writer.error, OSError):
            state.output_stopped = job_file_stop_line(writer.error, ppath, job.output)
        if state.output_stopped is None:
            state.output_stopped = writer.moved or output_moved_line(job.output, output_lock)

    async def one(task: Task, run_index: int) -> None:
        async with slots:
            if state.interrupted:
                return
            if job.budget_usd is not None and job_spend_usd(state, services) >= job.budget_usd:
                state.budget_stopped = True
                return
            check_output()
            if state.provider_stopped is not None or state.output_stopped is not None:
                return  # not run: resumable
            if job.parallel > 1:
                await asyncio.sleep(random.uniform(0, 0.02))
            state.running += 1
            if on_update:
                on_update(state, None)
            try:
                result, folder = await _with_retries(task, run_index)
            except UserError:
                # a refusal that stops the job (the model's settings): no trial starts or
                # goes on (cancelled trials leave nothing: resumable), it is raised at the end
                this = asyncio.current_task()
                for other in tasks_running:
                    if other is not this:
                        other.cancel()
                raise
            finally:
                state.running -= 1
            result_folder = str(folder.relative_to(job.output))
            async with lock:
                results[(task.id, run_index)] = result
                # (what earlier runs spent on it is counted since the start)
                before = carried.get((task.id, run_index), Usage())
                state.spend_usd += result.spent().cost_usd - before.cost_usd
                state.done += 1
                if result.error is not None and result.error.kind == ErrorKind.BUDGET:
                    # the job's budget ran out while it ran: the job is budget-stopped even
                    # when no trial was left to refuse a start (it said exit 1, not 3, and
                    # budget_stopped false: helper-136)
                    state.budget_stopped = True
                if not folder.is_dir() and result.spent().request_count:
                    # spent on its model, and no folder records it: the progress file does
                    state.unwritten[(task.id, run_index)] = result.spent()
                    _record_unwritten(progress, state)
                    writer.changed()
                elif state.unwritten.pop((task.id, run_index), None) is not None:
                    _record_unwritten(progress, state)  # (its folder carries it now)
                    writer.changed()
                if result.error is not None and not _final(result):
                    state.failed += 1
                else:
                    progress.completed.append(
                        ProgressEntry(task_id=task.id, run_index=run_index, result=result_folder)
                    )
                    writer.changed()
            if on_update:
                on_update(state, result)

    async def _with_retries(task: Task, run_index: int) -> tuple[TrialResult, Path]:
        attempt = 0
        last: tuple[TrialResult, Path] | None = None
        spent_before = carried.get((task.id, run_index), Usage())

        async def one_attempt() -> tuple[TrialResult, Path]:
            nonlocal attempt, last, spent_before
            attempt += 1
            if last is not None:  # the previous attempt failed retryably: set it aside
                prev = last[1]
                if prev.is_dir():  # (a trial whose folder could not be written has none)
                    move_to_retried(prev, paths, task.id, prev.name)
                # (its retried_usage is this trial's earlier attempts, a lost one's included)
                spent_before = last[0].spent()
            # what the failed attempts spent counts too (budget, totals): the attempt's
            # result.json keeps it apart (retried_usage), written before the folder's
            # rename, never rewritten afterwards
            try:
                last = await executor.run(
                    task, run_index, job_id=job_id, attempt=attempt, earlier=spent_before
                )
            except (UserError, asyncio.CancelledError):
                raise
            except Exception as exc:  # noqa: BLE001 - one trial's failure never ends the job
                # the process that ran it may have died after the folder's rename, before
                # its report: that folder is the attempt's (run again, the trial had two)
                last = _written(job, task, run_index, job_id, attempt) or _unstarted(
                    task, job, run_index, job_id, attempt, exc, spent_before
                )
            if last[0].error is not None and state.provider_stopped is None:
                state.provider_stopped = executor.provider_stop()
            if state.output_stopped is None:
                state.output_stopped = output_stop_line(last[0], job.output)
            check_output()  # no retry into a folder that is not the job's (helper-224)
            return last

        # called, not iterated: iterated, tenacity's retrying object and its attempt state
        # hold each other and the attempt's result, so every trial's result outlived it until
        # the cyclic collector ran; its iteration state's actions (methods of the retrying
        # object) are a cycle of its own, cleared at the end
        retrying = AsyncRetrying(
            stop=stop_after_attempt(max(1, job.max_attempts)),
            wait=wait_exponential(multiplier=0.5, max=30),
            retry=retry_if_result(
                lambda r: (
                    r[0].error is not None
                    and r[0].error.retryable
                    and state.provider_stopped is None
                    and state.output_stopped is None
                )
            ),
            retry_error_callback=lambda rs: rs.outcome.result(),  # type: ignore[union-attr]
            reraise=True,
        )
        try:
            result: tuple[TrialResult, Path] = await retrying(one_attempt)
        finally:
            retrying.iter_state.reset()
        return result

    loop = asyncio.get_running_loop()
    tasks_running = [asyncio.create_task(one(t, r)) for t, r in todo]
    interrupts = 0

    def leave_workers() -> None:
        """Before os._exit: the executor's worker processes killed (each in a session of its
        own: a stopped or stuck one outlived the job, its sandboxes and mounts with it:
        helper-147), and what they left swept."""
        if (kill := getattr(executor, "kill_now", None)) is not None:
            kill()
            from clawrig.leftovers import sweep_dead_again

            sweep_dead_again()

    def sweep_own(set_aside: bool) -> int | None:
        """The half-written trial folders at the output path swept (``set_aside``: what they
        spent kept in ``_retried/`` first), unless the folder there is no longer the job's
        (helper-224: a job stopped after its folder was replaced swept the half-written
        trials of the job running in the new one). Returns how many it set aside, or None
        when it swept nothing (the folder is not the job's)."""
        if output_moved_line(job.output, output_lock) is not None:
            return None
        kept = 0
        if set_aside:
            kept, _ = set_aside_partial_trials(job, tasks, job_id, EXITED_AT_ONCE)
        sweep_partial_trials(job.output)
        return kept

    def exit_now(signum: int, frame: object = None) -> None:
        leave_workers()
        # what the trials in progress spent kept (helper-152: swept with their folders)
        kept = sweep_own(set_aside=True)
        release_own_mounts(every_folder=True)  # os._exit runs no atexit: mounts, folders
        why = exit_now_reason(state.running, kept).encode()
        os.write(2, b"clawrig: interrupted again: exiting now (" + why + b")\n")
        os._exit(128 + signum)

    def on_signal(signum: int) -> None:
        """SIGINT (Ctrl-C) and SIGTERM (kill, timeout) alike: the first stops the job cleanly
        (summary written, resumable), a second exits at once; exit 128 + the signal."""
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            exit_now(signum)
        state.interrupted = True
        state.interrupted_by = signal.Signals(signum).name
        # a sandbox stopped under a trial being cancelled (a terminal's Ctrl-C does not reach
        # it: each is in a session of its own, bwrap.py): inner tasks that die of that
        # (SandboxDied) are not tracebacks for the user; other reports stay
        loop.set_exception_handler(_quiet_after_interrupt)
        for t in tasks_running:
            t.cancel()
        # a safety net: if clean shutdown stalls, leave anyway (sandboxes die with us)
        loop.call_later(INTERRUPT_GRACE_S, _give_up)

    def _give_up() -> None:
        # Known issue: now and then a cancelled trial does not finish cancelling (the stacks
        # below say where it waits). Finished trials are on disk and in the progress file.
        if os.environ.get("CLAWRIG_DEBUG_INTERRUPT"):
            for t in asyncio.all_tasks(loop):
                t.print_stack(limit=8, file=sys.stderr)
        leave_workers()
        sweep_own(set_aside=True)
        release_own_mounts(every_folder=True)
        os.write(
            2,
            b"clawrig: interrupted: trials did not stop within the grace time, exiting now; "
            b"finished trials are kept (--resume continues)\n",
        )
        os._exit(128 + signal.Signals[state.interrupted_by or "SIGINT"].value)

    installed: dict[signal.Signals, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, on_signal, int(signum))
            installed[signum] = previous
    try:
        outcomes = await asyncio.gather(*tasks_running, return_exceptions=True)
        if state.interrupted:
            # a trial another process finished as the job cancelled it was not heard of: once
            # the executor's processes ended, every trial folder written is on disk
            await executor.close()
            for result, folder in _unheard(job, tasks, job_id, results):
                results[(result.task_id, result.run_index)] = result
                state.spend_usd += result.spent().cost_usd
                progress.completed.append(
                    ProgressEntry(
                        task_id=result.task_id,
                        run_index=result.run_index,
                        result=str(folder.relative_to(job.output)),
                    )
                )
                writer.changed()
        if len(progress.completed) < len(tasks) * job.runs:
            # an unfinished job's wall time up to this invocation's end, not its last finished
            # trial (the resumed job's counted that much less: helper-199)
            writer.changed()
        try:
            await writer.flush()  # the progress file holds every finished trial before the end
        except OSError as exc:
            if len(progress.completed) < len(tasks) * job.runs:
                line = job_file_stop_line(exc, ppath, job.output)
                state.output_stopped = state.output_stopped or line
            # else every trial ran: the summary is the job's record (a stop line then said
            # "--resume" with nothing left to run, and stayed in the summary: helper-218)
    finally:
        for signum, previous in installed.items():
            loop.remove_signal_handler(signum)
            if interrupts:
                # interrupted once: a second Ctrl-C while the job ends (summary, pool, exit
                # clean-up) exits at once too, not a KeyboardInterrupt out of whatever runs
                # then (an atexit callback's traceback: CI at 1ea2323)
                signal.signal(signum, exit_now)
            elif signum != signal.SIGINT and previous is not None:
                signal.signal(signum, previous)  # the loop left SIG_DFL: the caller's again
        if not interrupts and held is not None:
            held.hold()  # (a signal from now on: after every trial ended)
        sweep_own(set_aside=False)  # cancelled trials' half-written folders
    for out in outcomes:
        if isinstance(out, BaseException) and not isinstance(out, asyncio.CancelledError):
            if state.interrupted:
                # a trial may end with its sandbox's death (stopped meanwhile) instead of
                # its cancellation; it is not run
                continue
            raise out
    from clawrig.llm.client import aclose_all

    await aclose_all()  # every model client of this loop, per-trial ones included
    moved = writer.moved or output_moved_line(job.output, output_lock)
    if moved is not None:
        # the trials it held before may be gone: not a job that ran (helper-218)
        state.output_stopped = moved
    all_ok = (
        not state.interrupted
        and not state.budget_stopped
        and state.provider_stopped is None
        and state.output_stopped is None
        and len(progress.completed) == len(tasks) * job.runs
    )
    summary = build_summary(job, tasks, list(results.values()), state, job_id)
    try:
        if moved is None:
            write_json_atomic(summary_path(job.output, model), summary)
        else:
            own = {ppath: writer.written, summary_path(job.output, model): summary_at_start}
            _record_at_a_moved_output(job, model, job_id, progress, summary, moved, own)
    except OSError as exc:
        where = summary_path(job.output, model)
        if moved is not None:
            line = _not_recorded(moved, job.output, _os_reason(exc), summary)
            raise SummaryNotWritten(line, summary, where) from None
        spent = f"the job has spent {_spent_usd(summary)}"
        kept = "its trial folders and progress file are kept"
        if (what := OUTPUT_FULL_ERRNOS.get(exc.errno or 0)) is not None:
            raise SummaryNotWritten(
                f"the output folder {job.output} could not be written ({what}): the job's "
                f"summary was not written ({spent}; {kept}); free space there (or make it "
                "writable) and --resume",
                summary,
                where,
            ) from None
        raise SummaryNotWritten(
            f"{where} could not be written ({exc.strerror or exc}): the job's summary was not "
            f"written ({spent}; {kept}); {_unblock(exc)} and --resume",
            summary,
            where,
        ) from None
    if all_ok:
        with contextlib.suppress(OSError):  # (gone, or what took its place: not the job's)
            ppath.unlink()
    return summary


def _written(
    job: JobConfig, task: Task, run_index: int, job_id: str, attempt: int
) -> tuple[TrialResult, Path] | None:
    """The whole folder of attempt ``attempt`` of the trial (``task``, ``run_index``) of job
    ``job_id`` with its result, or None when it has none."""
    for folder, result in _trial_folders(job.output, task.id, job_id):
        if result.run_index == run_index and result.attempts == attempt:
            return result, folder
    return None


def _unheard(
    job: JobConfig, tasks: list[Task], job_id: str, results: dict[tuple[str, int], TrialResult]
) -> list[tuple[TrialResult, Path]]:
    """The trials of job ``job_id`` with a whole folder whose outcome stands (:func:`_final`)
    but no entry in ``results``, with their folders (one each)."""
    found: dict[tuple[str, int], tuple[TrialResult, Path]] = {}
    known = frozenset(r.trial_id for r in results.values())  # not read again
    for task in tasks:
        for folder, result in _trial_folders(job.output, task.id, job_id, known):
            key = (result.task_id, result.run_index)
            if _final(result) and key not in results:
                found.setdefault(key, (result, folder))
    return list(found.values())


def _unstarted(
    task: Task,
    job: JobConfig,
    run_index: int,
    job_id: str,
    attempt: int,
    exc: Exception,
    earlier: Usage,
) -> tuple[TrialResult, Path]:
    """The result of a trial that failed before it had a folder of its own (e.g. no space
    for its work folder on the host), or whose attempt was lost with the process that ran it:
    an infrastructure error, retried; no folder. ``earlier`` is what its earlier attempts
    spent; a lost attempt's spend (:class:`clawrig.errors.AttemptLost`, set aside in
    ``_retried/``) is added to it, so the trial's next attempt carries it too (it said 0:
    helper-141)."""
    lost = exc.spent if isinstance(exc, AttemptLost) else None
    if isinstance(lost, Usage):
        earlier = earlier.add(lost)
    result = TrialResult(
        task_id=task.id,
        category=task.category,
        run_index=run_index,
        trial_id="",
        job_id=job_id,
        model=job.trial.model,
        agent=job.trial.agent,
        sandbox=job.trial.sandbox,
        attempts=attempt,
        retried_usage=earlier,
        error=TrialError(
            kind=ErrorKind.INFRASTRUCTURE,
            message=(
                f"the attempt was lost: {exc}"
                if isinstance(lost, Usage)
                else f"the trial could not start: {type(exc).__name__}: {exc}"
            ),
            phase="agent" if isinstance(lost, Usage) else "setup",
            retryable=True,
        ),
    )
    return result, JobPaths(job.output).task_dir(task.id) / ".unwritten"


def build_summary(
    job: JobConfig,
    tasks: list[Task],
    results: list[TrialResult],
    state: JobState,
    job_id: str,
) -> dict[str, Any]:
    """``summary_<model>.json`` (:class:`clawrig.spec.summary.JobSummary`) as a JSON object,
    with the data the job ran on (``data``: :func:`clawrig.data.manifest.data_summary`) and its
    web (``web``: :func:`clawrig.web.service.web_summary`)."""
    from clawrig.data.manifest import data_summary
    from clawrig.web.service import web_summary

    return job_summary(
        job,
        tasks,
        results,
        job_id=job_id,
        spend=recorded_spend(job.output, job_id, results, state.unwritten),
        budget_stopped=state.budget_stopped,
        provider_stopped=state.provider_stopped,
        output_stopped=state.output_stopped,
        interrupted=state.interrupted,
        interrupted_by=state.interrupted_by,
        elapsed_s=state.elapsed_s(),
        data=data_summary(job.suite_path, job.root),
        web=web_summary(job, results),
    ).to_json()
