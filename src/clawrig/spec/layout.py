"""The on-disk layout of a trial folder and a job folder: every file and folder name lives here.

A job folder (one ``clawrig run -o OUTPUT``)::

    OUTPUT/
      .clawrig.lock                 held while a job writes here (shared by RL writers)
      .clawrig.writers.lock         an RL output's: held shared by each writer, at once by the
                                    one setting aside what killed writers left
      progress_<model>.json         resume state (DataClawBench, formats.md section 3)
      summary_<model>.json          the job summary (:class:`clawrig.spec.summary.JobSummary`)
      _retried/<task>__<trial>/     failed attempts of retried trials (never counted)
      <task_id>/.tmp-<trial>-<rnd>/ a trial being written (renamed when whole)
      <task_id>/<trial>/            a finished trial folder (below)

A trial folder (``<model>_<YYYYmmdd_HHMM>_<6 hex>``, DataClawBench's per-run layout plus
clawrig's files)::

    result.json                 :class:`clawrig.spec.trial.TrialResult` (written last, before
                                the folder's atomic rename; never rewritten)
    score.json                  :class:`clawrig.spec.trial.ScoreFile`
    process_score.json          process metrics (EE/GPR/TPE/TGPR), {} when none apply
    usage.json                  :class:`clawrig.spec.trial.Usage`
    agent.log                   the harness's log of the trial
    chat.jsonl                  the transcript as the harness wrote it (OpenClaw JSONL)
    judge_chat.jsonl            judge requests and replies (answer judge, judge proxy)
    judge_process_chat.jsonl    the process judge's requests and replies
    model_calls.jsonl           every model call through the gateway (when one ran)
    formatted_dialog.json       :class:`clawrig.spec.trial.DialogFile`
    end_state/                  every workspace file the agent created or changed
    end_state_deleted.json      initial workspace files that were gone after the agent
    end_state_dropped.json      {path: kind} of links, FIFOs, sockets, devices removed from
                                the end state (only when there were any)
    task_output/                the end state's results folder
    subagents/<key>.jsonl       transcripts of sub-agent sessions
    egress.jsonl                the egress proxy's log, one JSON line per connection out
                                (:mod:`clawrig.egress.proxy`): time (ISO 8601 UTC, ms),
                                phase (setup | agent), method, host, port, verdict
                                (allowed | refused | failed | bad_request | unlogged),
                                bytes_up / bytes_down (bytes after the request head),
                                seconds (accepted to closed), reason (not when allowed);
                                at most 10,000 lines / 8 MiB, then one ``unlogged`` line
    openclaw_chat.jsonl         OpenClaw's own session file (``--agent openclaw``)
    web_calls.jsonl, web_blobs/ recorded web calls and bodies (``--web record``)
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pydantic_core
from pydantic import BaseModel, ValidationError

from clawrig.spec.job import model_slug


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON text that always encodes as UTF-8 (files of a trial folder, saved
    audits): non-ASCII kept as is, unless a string holds a lone surrogate (a file name that is
    not UTF-8, a ``"\\udcff"`` escape an agent sent a service), then every non-ASCII character
    is written as a ``\\uXXXX`` escape. Values JSON cannot hold are written with ``str``.

    Indented text (``indent`` not None) is made by pydantic-core's serializer
    (:func:`indented_json`): ``json.dumps`` with an indent runs its pure-Python encoder, ~10x
    slower (~3 ms of CPU per trial folder). The text is ``json.dumps``'s but for how some
    floats are spelled (``0.00001`` for ``1e-05``: the same number to every JSON reader)."""
    if indent is not None:
        fast = indented_json(value, indent)
        if fast is not None:
            return fast
    text = json.dumps(value, ensure_ascii=False, indent=indent, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, indent=indent, default=str)
    return text


def indented_json(value: Any, indent: int = 2) -> str | None:
    """``json.dumps(value, ensure_ascii=False, indent=indent, default=str)``'s text made by
    pydantic-core (compiled; pydantic models are dumped as ``model_dump(mode="json")``), or
    None when it cannot make the same text: a lone surrogate (which UTF-8 cannot hold), bytes,
    a dict key that is None (``json`` writes ``"null"``, pydantic-core ``"None"``)."""
    try:
        text = pydantic_core.to_json(
            value, indent=indent, fallback=str, inf_nan_mode="constants"
        ).decode("utf-8")
    except (pydantic_core.PydanticSerializationError, UnicodeDecodeError, ValueError):
        return None
    if '"None"' in text and _has_none_key(value):
        return None
    return text


def model_json_text(model: BaseModel) -> str:
    """:func:`json_text` of ``model.model_dump(mode="json")``, made without the dump when
    pydantic-core can (:func:`indented_json`; ~0.5 ms less per result.json)."""
    fast = indented_json(model)
    return fast if fast is not None else json_text(model.model_dump(mode="json"))


def _has_none_key(value: Any) -> bool:
    """Whether a dict anywhere in ``value`` has the key None."""
    if isinstance(value, dict):
        return None in value or any(_has_none_key(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_none_key(v) for v in value)
    return False


_Model = TypeVar("_Model", bound=BaseModel)


def model_from_json_text(model: type[_Model], text: str) -> _Model:
    """``model`` from JSON text :func:`json_text` wrote (a trial folder's result.json, a job's
    summary): ``model.model_validate_json``, except for text holding a lone surrogate escape
    (``"\\udcff"``: a non-UTF-8 file name, a string an agent sent that a grader echoed), which
    pydantic's JSON parser refuses, so the harness could not read back its own file (a trial
    dropped from a resumed job's summary, a re-grade refused): that text is parsed by
    ``json.loads`` first. Raises pydantic's ValidationError (a ValueError)."""
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        if exc.errors()[0]["type"] != "json_invalid" or "\\ud" not in text.lower():
            raise
        try:
            data = json.loads(text)
        except ValueError:
            raise exc from None  # not JSON for either parser: pydantic's error says where
    return model.model_validate(data)


_LAST_TEXTS: dict[str, tuple[str, str]] = {}


def json_text_reusing(value: dict[str, Any], last: str, *, key: str | None = None) -> str:
    """:func:`json_text` of the dict ``value`` (indent 2), the same text, made faster when its
    last key ``last`` holds a value that repeats from call to call (each trial folder's tool
    schema, ~10 KB whose indented text costs ~1 ms of CPU to make): that value's text is
    kept (one per ``last``, found again by ``key`` when given: the caller's name for the
    value, one name for one value, like a tool profile's; else by ``repr``, ~0.2 ms for a
    tool schema: exact, ``1``, ``1.0`` and ``True`` differ as in JSON) and joined to the
    rest's."""
    if not value or list(value)[-1] != last or len(value) < 2:
        return json_text(value)
    key = f"key:{key}" if key is not None else repr(value[last])
    kept = _LAST_TEXTS.get(last)
    if kept is None or kept[0] != key:
        inner = indented_json(value[last])
        if inner is None:  # a lone surrogate in it: all of it escaped (json_text)
            return json_text(value)
        # one level deeper: JSON text holds no raw newline but between its tokens
        kept = _LAST_TEXTS[last] = (key, inner.replace("\n", "\n  "))
    rest = indented_json({k: v for k, v in value.items() if k != last})
    if rest is None or not last.isprintable():
        return json_text(value)
    return f"{rest[:-2]},\n  {json.dumps(last, ensure_ascii=False)}: {kept[1]}\n}}"


TMP_PREFIX = ".tmp-"
"""Prefix of a trial folder that is still being written (removed or renamed, never read)."""


RETURNED_AS = "returned_as"
"""A file of a Ray driver's ``<task>/.tmp-ray-*`` record of an attempt's calls: the name of
the trial folder the attempt came back as, written just before that folder is renamed into
place beside the record (:func:`clawrig.runner.executors.ray.unpack_trial`). When that folder
exists the record holds its calls, counted there: a resumed job removes the record instead of
setting it aside."""


def unfinished_trial_name(folder_name: str) -> str | None:
    """The trial's name in the name of a folder still being written
    (``.tmp-<trial>-<random>``: :data:`TMP_PREFIX`), or None for any other name."""
    if not folder_name.startswith(TMP_PREFIX):
        return None
    return folder_name.removeprefix(TMP_PREFIX).rsplit("-", 1)[0]


@dataclass(frozen=True)
class TrialPaths:
    """The files of one trial folder ``root`` (see the module docstring for their shapes)."""

    root: Path

    RESULT = "result.json"
    SCORE = "score.json"
    PROCESS_SCORE = "process_score.json"
    USAGE = "usage.json"
    AGENT_LOG = "agent.log"
    CHAT = "chat.jsonl"
    JUDGE_CHAT = "judge_chat.jsonl"
    JUDGE_PROCESS_CHAT = "judge_process_chat.jsonl"
    MODEL_CALLS = "model_calls.jsonl"
    DIALOG = "formatted_dialog.json"
    END_STATE = "end_state"
    END_STATE_DELETED = "end_state_deleted.json"
    END_STATE_DROPPED = "end_state_dropped.json"
    """What was removed from the end state: ``{path: kind}``
    (:class:`clawrig.sandbox.endstate.EndState` ``dropped``)."""
    TASK_OUTPUT = "task_output"
    SUBAGENTS = "subagents"
    JUDGE_LOGS = (JUDGE_CHAT, JUDGE_PROCESS_CHAT)
    """The judge logs' names: the answer judge's / judge proxy's, the process judge's."""
    EGRESS = "egress.jsonl"
    """The egress proxy's log (:mod:`clawrig.egress.proxy`)."""
    OPENCLAW_CHAT = "openclaw_chat.jsonl"
    """OpenClaw's own session file, byte for byte (``--agent openclaw``)."""
    WEB_CALLS = "web_calls.jsonl"
    WEB_BLOBS = "web_blobs"
    """Recorded web calls and their content-addressed bodies (``--web record``)."""

    @property
    def result(self) -> Path:
        return self.root / self.RESULT

    @property
    def score(self) -> Path:
        return self.root / self.SCORE

    @property
    def process_score(self) -> Path:
        return self.root / self.PROCESS_SCORE

    @property
    def usage(self) -> Path:
        return self.root / self.USAGE

    @property
    def agent_log(self) -> Path:
        return self.root / self.AGENT_LOG

    @property
    def chat(self) -> Path:
        return self.root / self.CHAT

    @property
    def judge_chat(self) -> Path:
        return self.root / self.JUDGE_CHAT

    @property
    def judge_process_chat(self) -> Path:
        return self.root / self.JUDGE_PROCESS_CHAT

    @property
    def judge_logs(self) -> tuple[Path, Path]:
        """The two judge logs (answer/proxy judge, process judge)."""
        return (self.judge_chat, self.judge_process_chat)

    @property
    def model_calls(self) -> Path:
        return self.root / self.MODEL_CALLS

    @property
    def dialog(self) -> Path:
        return self.root / self.DIALOG

    @property
    def end_state(self) -> Path:
        return self.root / self.END_STATE

    @property
    def end_state_deleted(self) -> Path:
        return self.root / self.END_STATE_DELETED

    @property
    def end_state_dropped(self) -> Path:
        return self.root / self.END_STATE_DROPPED

    @property
    def task_output(self) -> Path:
        return self.root / self.TASK_OUTPUT

    @property
    def subagents(self) -> Path:
        return self.root / self.SUBAGENTS

    def subagent(self, key: str) -> Path:
        """``subagents/<key>.jsonl``: the sub-agent session ``key``'s transcript. The key is the
        agent's to choose (``sessions_spawn``'s ``agentId``), so its file name keeps only
        ``[A-Za-z0-9._-]`` (others become ``_``) and at most 100 characters, a longer key
        ending in 16 hex digits of its sha256 (a 300-character key must not fail the trial
        with "file name too long")."""
        safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in key)
        if len(safe) > 100:
            digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
            safe = f"{safe[:83]}-{digest}"
        return self.subagents / f"{safe}.jsonl"

    def is_trial(self) -> bool:
        """True when the folder holds a result.json."""
        return self.result.is_file()


RESULT_LIMIT = 64 * 1024**2
"""The most bytes of a job folder's record (a trial's result.json) :func:`read_record` reads."""


def read_record(path: Path, limit: int = RESULT_LIMIT) -> str:
    """The text of a job folder's record ``path`` (a trial's result.json), read through
    :func:`read_regular`: a link is not followed, a FIFO not opened for reading, at most
    ``limit`` bytes (helper-184: a FIFO as a result.json held ``--resume`` for good, a link
    to /dev/zero ran it out of memory). Raises OSError when it is no regular file, is over
    ``limit`` or cannot be read; ValueError (UnicodeDecodeError) when it is not UTF-8."""
    data = read_regular(path, limit + 1)
    if data is None:
        raise OSError(f"{path}: not a regular file")
    if len(data) > limit:
        raise OSError(f"{path}: over {limit} bytes")
    return data.decode("utf-8")


def read_regular(path: Path, limit: int | None = None) -> bytes | None:
    """The first ``limit`` bytes of ``path`` (all of it when None) when it is a regular file,
    else None: a link is not followed (a job folder from elsewhere may link to /etc/shadow),
    a FIFO or device is not read (a FIFO blocked the viewer, and a replay's start, forever),
    and a huge or sparse file is not read whole (helper-134, helper-137). Files of a job
    folder that anyone may have edited are read through it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        parts: list[bytes] = []
        left = -1 if limit is None else limit  # (-1: to the end)
        while left != 0:
            chunk = os.read(fd, 1 << 20 if left < 0 else min(left, 1 << 20))
            if not chunk:
                break
            parts.append(chunk)
            left = left - len(chunk) if left > 0 else left
        return b"".join(parts)
    except OSError:
        return None
    finally:
        os.close(fd)


def umask_mode(mode: int) -> int:
    """``mode`` less this process's umask: the mode ``open``/``mkdir`` would give a new file
    or folder (``tempfile``'s are 0600/0700 whatever the umask; a trial folder and the files
    ``tasks build-dataclaw`` writes are chmod-ed to this, helper-135)."""
    return mode & ~_umask()


@functools.cache
def _umask() -> int:
    """This process's umask, read once (every trial folder asks) from /proc/self/status
    (setting it to read it would race other threads); 0o022 where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


@dataclass(frozen=True)
class JobPaths:
    """The files of one job folder ``root`` (``clawrig run -o ROOT``)."""

    root: Path

    LOCK = ".clawrig.lock"
    WRITERS_LOCK = ".clawrig.writers.lock"
    RETRIED = "_retried"
    ROLLOUTS = "rollouts.json"
    """The file an RL output folder (:class:`clawrig.rl.episode.Rollouts`, ``clawrig serve``)
    holds instead of a summary: ``{"format": "clawrig rollouts", "job_id": ...}``."""

    @property
    def lock(self) -> Path:
        return self.root / self.LOCK

    @property
    def writers_lock(self) -> Path:
        return self.root / self.WRITERS_LOCK

    @property
    def rollouts(self) -> Path:
        return self.root / self.ROLLOUTS

    def is_rollouts(self) -> bool:
        """True when the folder is an RL output folder (it holds :attr:`ROLLOUTS`)."""
        return self.rollouts.is_file()

    @property
    def retried(self) -> Path:
        return self.root / self.RETRIED

    def progress(self, model: str) -> Path:
        """``progress_<model slug>.json``."""
        return self.root / f"progress_{model_slug(model)}.json"

    def summary(self, model: str) -> Path:
        """``summary_<model slug>.json``."""
        return self.root / f"summary_{model_slug(model)}.json"

    @staticmethod
    def summary_beside(progress: Path) -> Path:
        """The summary file of the job whose progress file is ``progress`` (same folder, same
        model slug)."""
        return progress.with_name("summary_" + progress.name.removeprefix("progress_"))

    def summaries(self) -> list[Path]:
        """Every ``summary_*.json`` of the folder that is no folder, sorted (a task's folder
        may have such a name: a task ``summary_notes.json``, helper-183)."""
        return sorted(p for p in self.root.glob("summary_*.json") if not p.is_dir())

    def progresses(self) -> list[Path]:
        """Every ``progress_*.json`` of the folder that is no folder, sorted."""
        return sorted(p for p in self.root.glob("progress_*.json") if not p.is_dir())

    def task_dir(self, task_id: str) -> Path:
        return self.root / task_id

    def trial_files(self, *names: str) -> list[Path]:
        """The files called one of ``names`` at the top of each finished trial folder of this
        job (``<task>/<trial>/NAME``), or of ``root`` itself when it is a trial folder
        (``NAME``), sorted: recorded model and web calls for a replay. ``_retried/`` attempts,
        ``.tmp-`` trials and anything deeper are left out: a trial's ``end_state/`` and
        ``task_output/`` hold what its agent wrote, and a ``model_calls.jsonl`` the agent left
        there was read as recorded calls (forged replies, a forged model name: a red-team
        finding). A ``root`` that is a trial folder (a result.json, or records of its own at
        its top) gives its own files alone: its subfolders are its agent's (``end_state/X/``
        was walked as a task folder, and a record forged or broken there was served first or
        made the trial impossible to re-grade)."""
        found = [self.root / name for name in names]
        if TrialPaths(self.root).is_trial() or any(p.is_file() for p in found):
            return sorted(p for p in found if p.is_file())
        for task in _subfolders(self.root):
            if task.name != self.RETRIED and not task.name.startswith(TMP_PREFIX):
                for trial in _subfolders(task):
                    if not trial.name.startswith(TMP_PREFIX):
                        found += [trial / name for name in names]
        return sorted(p for p in found if p.is_file())

    def task_trials(self, task_id: str) -> list[Path]:
        """The finished trial folders of task ``task_id`` (``<task>/<trial>/`` with a
        result.json; not ``.tmp-`` ones, not links), sorted."""
        return sorted(
            trial
            for trial in _subfolders(self.task_dir(task_id))
            if not trial.name.startswith(TMP_PREFIX) and TrialPaths(trial).is_trial()
        )

    def is_job(self) -> bool:
        """True when the folder holds a job's own files (a summary, a progress file, its
        lock) or is an RL output folder (:meth:`is_rollouts`)."""
        return bool(
            self.summaries() or self.progresses() or self.lock.exists() or self.is_rollouts()
        )

    def trial(self, task_id: str, name: str) -> TrialPaths:
        return TrialPaths(self.root / task_id / name)

    def retried_trial(self, task_id: str, name: str) -> Path:
        """Where a failed attempt's folder is set aside: ``_retried/<task>__<trial>``."""
        return self.retried / f"{task_id}__{name}"

    @staticmethod
    def is_trial_path(trial: str) -> bool:
        """True when ``trial`` (a summary row's) is ``<task folder>/<trial folder>``: a trial
        folder inside the job, never one a ``..`` or an absolute path leads out of it."""
        parts = trial.split("/")
        return len(parts) == 2 and not any(part in ("", ".", "..") for part in parts)

    def trial_results(self) -> list[Path]:
        """result.json of every finished trial folder (not ``_retried``, not ``.tmp-*``),
        sorted by path. Links to folders are not followed, a task's or a trial's: what they
        lead to is no trial of this job (helper-184: a linked task folder's attempt was
        counted, and taken into the job on resume)."""
        out = []
        for task in _subfolders(self.root):
            if task.name.startswith(("_", ".")):
                continue
            for folder in _subfolders(task):
                rj = folder / TrialPaths.RESULT
                if not folder.name.startswith(".") and os.path.lexists(rj):
                    out.append(rj)
        return sorted(out)

    def retried_results(self) -> list[Path]:
        """result.json of every attempt set aside in ``_retried/``, sorted by path (not
        through a link: ``_retried`` itself or one of its entries)."""
        if self.retried.is_symlink():
            return []
        found = (folder / TrialPaths.RESULT for folder in _subfolders(self.retried))
        return sorted(rj for rj in found if os.path.lexists(rj))


def _subfolders(folder: Path) -> list[Path]:
    """The folders directly in ``folder`` (links to folders left out); none when it cannot be
    listed."""
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
