"""The viewer's index of a job folder: one small row per trial, built once and cached.

A job folder (docs/outputs.md) holds ``<task_id>/<trial folder>/result.json`` per trial and
``summary_<model>.json`` / ``progress_<model>.json`` per model. Reading 10,000 result.json files
on every page load would be slow, so :class:`FolderIndex` keeps one row per trial (the numbers
the job page shows) in ``<job folder>/.clawrig_view_index.json`` and, on each refresh, re-reads
only the task folders whose modification time changed (a trial folder is renamed into its task
folder whole, which changes that folder's mtime; ``clawrig grade --write`` touches the task
folder too), comparing each trial's result.json mtime. The first open of a job checks every
result.json's mtime, so a trial re-graded while no viewer ran is picked up as well. Everything
else a trial holds (transcript, model calls, end state) is read only when its page is asked for.

A folder may hold several jobs (one per model, and earlier jobs of the same model): a
:class:`JobView` is one model's current job: the ``job_id`` of its progress file when there is
one (a running or unfinished job), else that of its summary, else the most recently started
job's. A job is *running* while another process holds ``.clawrig.lock`` in the folder
(:mod:`clawrig.runner.batch` holds it for the whole job), or, in an RL output folder, its
writers' lock (:func:`clawrig.runner.batch.share_output`).

Scores are the counted score (:meth:`clawrig.spec.trial.TrialResult.counted_score`: an agent
error counts 0; other errors are not scored); error kinds those of
:func:`clawrig.grading.aggregate.error_counts`.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrig.errors import UserError, not_a_folder
from clawrig.grading.aggregate import error_counts
from clawrig.spec.job import model_slug
from clawrig.spec.layout import JobPaths, TrialPaths
from clawrig.spec.trial import TrialResult, finite_float

INDEX_FILE = ".clawrig_view_index.json"
INDEX_VERSION = 4
LOCK_FILE = JobPaths.LOCK

Row = dict[str, Any]
"""One trial: ``id`` (``<task>/<trial folder>``), ``task``, ``cat``, ``run``, ``job``, ``model``,
``score`` (counted score in [0, 1] or None), ``err`` (error kind or None), ``msg`` (error
message), ``cost`` (USD), ``tok`` (tokens), ``req`` (model requests), ``time`` (seconds),
``turns``, ``tools``, ``stop``,
``started``, ``ee``/``gpr``/``tpe``/``tgpr`` (process metrics or None), ``digest`` (the task's
``task_digest`` when the trial ran: what it asks and how it is graded; "" when unknown), ``mt``
(result.json mtime, ns)."""


def counted_score(result: TrialResult) -> float | None:
    """The one score rule: :meth:`TrialResult.counted_score`."""
    return result.counted_score()


def error_kind(result: TrialResult) -> str | None:
    """The kind of error that keeps the trial from a graded score, None when graded."""
    kinds = error_counts([result])
    return next(iter(kinds), None)


def row_from_result(rel: str, raw: Any, mtime_ns: int) -> Row:
    """The index row of one trial from its parsed result.json (``raw``). A result.json that is
    not a TrialResult gives a row with error kind ``unreadable`` and the reason."""
    task, _, _ = rel.partition("/")
    try:
        if raw is None:
            raise ValueError("not JSON (cut short?), not a regular file, or too large to read")
        r = TrialResult.model_validate(raw)
    except ValueError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # its job and model when it still names them (a row of no job was shown by none:
        # helper-206), else "" (:meth:`JobView.rows` shows it in every job of its folder)
        job, model = (
            (v if isinstance(v := raw.get(k), str) else "" for k in ("job_id", "model"))
            if isinstance(raw, dict)
            else ("", "")
        )
        return {"id": rel, "task": task, "cat": "", "run": 0, "job": job, "model": model,
                "score": None, "err": "unreadable", "msg": f"result.json: {first}", "cost": 0.0,
                "tok": 0, "req": 0, "time": 0.0, "turns": 0, "tools": 0, "stop": None,
                "started": "", "digest": "",
                "ee": None, "gpr": None, "tpe": None, "tgpr": None, "mt": mtime_ns}  # fmt: skip
    msg = r.error.message if r.error else (r.score.error if r.score and r.score.error else None)
    score = counted_score(r)
    if score is not None and not 0.0 <= score <= 1.0:  # (NaN, 1e308 in a result.json: 500s)
        score, msg = None, msg or f"result.json: the score {score!r} is not in [0, 1]"
    return {
        "id": rel,
        "task": r.task_id,
        "cat": r.category,
        "run": r.run_index,
        "job": r.job_id,
        "model": r.model,
        "score": score,
        "err": error_kind(r),
        "msg": (msg or "")[:300] or None,
        "cost": r.usage.cost_usd,
        "tok": r.usage.total_tokens,
        "req": r.usage.request_count,
        "time": r.usage.elapsed_time,
        "turns": r.turns,
        "tools": r.tool_calls,
        "stop": str(r.stop_reason) if r.stop_reason else None,
        "started": r.started_at,
        "digest": r.task_digest,
        **{k: v if v is None or abs(v) <= 1e9 else None for k, v in r.process.metrics().items()},
        "mt": mtime_ns,
    }


@functools.lru_cache(maxsize=256)
def _slug(model: str) -> str:
    return model_slug(model)


def _read_json(path: Path) -> Any:
    """:func:`clawrig.view.trial.read_json`: a regular file's JSON, else None (a FIFO in place
    of result.json hung the viewer; a link is not followed)."""
    from clawrig.view.trial import read_json

    return read_json(path)


_ROW_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("id", "task", "cat", "job", "model", "started", "digest"), (str,)),
    **dict.fromkeys(("run", "turns", "tools", "tok", "req", "mt"), (int,)),
    **dict.fromkeys(("cost", "time"), (int, float)),
    **dict.fromkeys(("score", "ee", "gpr", "tpe", "tgpr"), (int, float, type(None))),
    **dict.fromkeys(("err", "msg", "stop"), (str, type(None))),
}
"""The type of each field of an index row (:func:`row_from_result`)."""


def _valid_row(row: Any) -> bool:
    """True when a cached index row has :data:`_ROW_TYPES`' fields and types (a cache edited
    or written by another version: a row's ``"score": "x"`` made every job page a 500)."""
    return (
        isinstance(row, dict)
        and all(
            isinstance(row.get(k), types)
            and not isinstance(row.get(k), bool)
            # (NaN, or an integer too large for a float: a 500, helper-184)
            and not (isinstance(row.get(k), int | float) and finite_float(row[k]) is None)
            for k, types in _ROW_TYPES.items()
        )
        and (row["score"] is None or 0.0 <= row["score"] <= 1.0)
    )


def is_locked(folder: Path) -> bool:
    """True while another process holds the folder's job lock (a job is running), or, in an
    RL output folder, its writers' lock (``clawrig serve`` or a trainer writes there)."""
    paths = JobPaths(folder)
    return _held(paths.lock, fcntl.LOCK_SH) or _held(paths.writers_lock, fcntl.LOCK_EX)


def _held(lock: Path, mode: int) -> bool:
    """True when ``lock`` cannot be held in ``mode`` now (another process holds it); False
    when it is free or there is no such file (a link is not followed)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class FolderIndex:
    """Every trial row of one output folder, cached in ``INDEX_FILE`` (see the module doc).

    ``refresh()`` is cheap when nothing changed (one ``scandir`` of the folder); it is
    throttled to once per ``min_interval`` seconds. Thread-safe. Raises UserError when the
    folder does not exist."""

    def __init__(self, folder: Path, *, min_interval: float = 0.5) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise not_a_folder("JOB_DIR", self.folder)
        self.min_interval = min_interval
        self.rows: dict[str, Row] = {}
        self.dir_mtimes: dict[str, int] = {}
        self._in_dir: dict[str, set[str]] = {}
        self.version = 0
        self._lock = threading.Lock()
        self._checked = 0.0
        self._load_cache()
        self._refresh(full=True)

    @property
    def cache_path(self) -> Path:
        return self.folder / INDEX_FILE

    def _load_cache(self) -> None:
        data = _read_json(self.cache_path)
        if not isinstance(data, dict) or data.get("version") != INDEX_VERSION:
            return
        rows, dirs = data.get("rows"), data.get("dirs")
        if isinstance(rows, list) and isinstance(dirs, dict):
            self.rows = {r["id"]: r for r in rows if _valid_row(r)}
            bad = {r["id"].partition("/")[0] for r in rows if isinstance(r, dict)
                   and isinstance(r.get("id"), str) and r["id"] not in self.rows}  # fmt: skip
            # (a task folder with a row dropped is scanned again: its mtime is forgotten)
            self.dir_mtimes = {k: v for k, v in dirs.items() if isinstance(v, int) and k not in bad}
            for rid in self.rows:
                self._in_dir.setdefault(rid.partition("/")[0], set()).add(rid)

    def _save_cache(self) -> None:
        data = {"version": INDEX_VERSION, "dirs": self.dir_mtimes, "rows": list(self.rows.values())}
        tmp = self.folder / f".{INDEX_FILE}.{os.getpid()}.tmp"
        try:
            tmp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
            os.replace(tmp, self.cache_path)
        except OSError:  # a read-only job folder: keep the index in memory only
            with contextlib.suppress(OSError):
                tmp.unlink()

    def refresh(self) -> bool:
        """Pick up new, removed and (on the first call) re-written trials. True when a row
        changed (``version`` goes up)."""
        now = time.monotonic()
        if now - self._checked < self.min_interval:
            return False
        return self._refresh(full=False)

    def _refresh(self, *, full: bool) -> bool:
        with self._lock:
            self._checked = time.monotonic()
            changed = False
            seen: set[str] = set()
            try:
                entries = list(os.scandir(self.folder))
            except OSError:  # the folder is gone (deleted, renamed): the rows last seen stay,
                return False  # as its pages say (helper-171: they said so over 0 trials)
            for entry in entries:
                name = entry.name
                if name.startswith(("_", ".")) or not entry.is_dir(follow_symlinks=False):
                    continue
                seen.add(name)
                try:
                    mtime = entry.stat().st_mtime_ns
                except OSError:
                    continue
                if full or self.dir_mtimes.get(name) != mtime:
                    changed |= self._scan_task_dir(name)
                    self.dir_mtimes[name] = mtime
            for gone in [d for d in set(self.dir_mtimes) | set(self._in_dir) if d not in seen]:
                self.dir_mtimes.pop(gone, None)
                for rid in self._in_dir.pop(gone, set()):
                    self.rows.pop(rid, None)
                changed = True
            if changed:
                self.version += 1
                self._save_cache()
            return changed

    def _scan_task_dir(self, name: str) -> bool:
        changed = False
        present: set[str] = set()
        try:
            trials = list(os.scandir(self.folder / name))
        except OSError:
            trials = []
        for trial in trials:
            if trial.name.startswith(".") or not trial.is_dir(follow_symlinks=False):
                continue
            rel = f"{name}/{trial.name}"
            rpath = TrialPaths(Path(trial.path)).result
            try:
                mtime = rpath.stat().st_mtime_ns
            except OSError:
                continue
            present.add(rel)
            old = self.rows.get(rel)
            if old is not None and old.get("mt") == mtime:
                continue  # a re-graded trial (``clawrig grade --write``) has a new mtime
            raw = _read_json(rpath)  # (None: cut, not JSON, no regular file: unreadable too)
            self.rows[rel] = row_from_result(rel, raw, mtime)
            changed = True
        known = self._in_dir.setdefault(name, set())
        for rid in known - present:
            self.rows.pop(rid, None)
            changed = True
        self._in_dir[name] = present
        return changed


@dataclass
class JobView:
    """One model's current job in a folder (see the module doc). ``key`` names it in URLs."""

    key: str
    index: FolderIndex
    slug: str
    _summary_cache: tuple[int, Any] = field(default=(0, None), repr=False)
    _rows_cache: tuple[Any, list[Row]] = field(default=(None, []), repr=False)
    _progress_cache: tuple[int, str, str, str] = field(default=(0, "", "", ""), repr=False)

    @property
    def folder(self) -> Path:
        return self.index.folder

    def _file(self, prefix: str) -> Path:
        paths = JobPaths(self.folder)
        return paths.progress(self.slug) if prefix == "progress" else paths.summary(self.slug)

    def summary(self) -> dict[str, Any] | None:
        """The job's summary file (re-read when it changes), None when absent or unreadable."""
        path = self._file("summary")
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return None
        if self._summary_cache[0] != mtime:
            data = _read_json(path)
            self._summary_cache = (mtime, _valid_fields(data) if isinstance(data, dict) else None)
        return self._summary_cache[1]

    def deleted(self) -> bool:
        """True when the job's folder is gone (deleted while the viewer runs): its pages say
        so instead of "no summary" over the trials the viewer's index last saw."""
        return not self.folder.is_dir()

    def summary_unreadable(self) -> bool:
        """True when the job's summary file is there but holds no summary (cut, or edited
        into something else): its pages then say so instead of "no summary" (helper-164)."""
        return self.summary() is None and self._file("summary").is_file()

    def _progress(self) -> tuple[str, str, str]:
        """(job id, model, replayed job folder) in the progress file (re-read when the file
        changes), "" each when absent."""
        path = self._file("progress")
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return "", "", ""
        if self._progress_cache[0] != mtime:
            data = _read_json(path)
            keys = ("job_id", "model", "replay")
            got = [data.get(k) if isinstance(data, dict) else None for k in keys]
            jid, model, replay = (v if isinstance(v, str) else "" for v in got)
            self._progress_cache = (mtime, jid, model, replay)
        return self._progress_cache[1:]

    def _progress_job_id(self) -> str:
        """The job id in the progress file, "" when absent."""
        return self._progress()[0]

    def job_id(self) -> str:
        """The current job's id: the progress file's, else the summary's, else an RL output
        folder's (its rollouts.json), else the latest trial's."""
        if jid := self._progress_job_id():
            return jid
        s = self.summary()
        if isinstance(s, dict) and isinstance(s.get("job_id"), str) and s["job_id"]:
            return s["job_id"]
        rollouts = _read_json(JobPaths(self.folder).rollouts)
        if isinstance(rollouts, dict) and isinstance(rollouts.get("job_id"), str):
            if rollouts["job_id"]:
                return rollouts["job_id"]
        mine = [r for r in self.index.rows.values() if self._mine(r)]
        return max(mine, key=lambda r: r.get("started") or "")["job"] if mine else ""

    def replayed_from(self) -> str:
        """The job folder whose recorded model calls this job replayed (``clawrig run
        --replay``: the summary's ``replayed_from``, else the progress file's ``replay``), ""
        for a job that called its models."""
        s = self.summary()
        recorded = s.get("replayed_from") if isinstance(s, dict) else None
        return recorded if isinstance(recorded, str) and recorded else self._progress()[2]

    def model(self) -> str:
        """The model the summary, else the progress file, records ("" when neither does)."""
        s = self.summary()
        recorded = s.get("model") if isinstance(s, dict) else None
        return recorded if isinstance(recorded, str) and recorded else self._progress()[1]

    def _mine(self, row: Row) -> bool:
        """Whether ``row`` is of this view's model: the file name's, or the model its summary
        or progress file records (a summary renamed by hand, ``summary_oracle.bak.json``,
        showed its mean over 0 trials)."""
        if not self.slug:
            return True
        recorded = self.model()
        return _slug(row["model"]) in (self.slug, _slug(recorded) if recorded else self.slug)

    @property
    def title(self) -> str:
        """``<folder name> · <model>``: the model as the summary, else the progress file,
        else a trial of the job records it; the slug when none does."""
        model = self.model() or None
        if model is None and (rows := self.rows()):
            model = rows[0]["model"]
        return f"{self.folder.name} · {model or self.slug or 'job'}"

    def running(self) -> bool:
        return is_locked(self.folder)

    def rows(self) -> list[Row]:
        """This job's trial rows, sorted by (task, run, id)."""
        self.index.refresh()
        jid = self.job_id()
        key = (self.index.version, jid)
        if self._rows_cache[0] != key:
            out = [
                r
                for r in self.index.rows.values()
                if (self._mine(r) and (not jid or r["job"] == jid))
                or (  # a row that cannot be read: of this job as far as it says (helper-208)
                    r["err"] == "unreadable"
                    and r["job"] in ("", jid)
                    and (not r["model"] or self._mine(r))
                )
            ]
            out.sort(key=lambda r: (r["task"], r["run"], r["id"]))
            self._rows_cache = (key, out)
        return self._rows_cache[1]

    def job_summary(self) -> dict[str, Any] | None:
        """The summary when it describes the current job (not an earlier one), else None."""
        s = self.summary()
        return s if s is not None and s.get("job_id") in (None, self.job_id()) else None

    def row(self, rel: str) -> Row | None:
        """The row of trial folder ``<task>/<trial>`` of this folder (any job), None if unknown."""
        self.index.refresh()
        return self.index.rows.get(rel)


def _valid_fields(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` without the top-level keys whose values :class:`JobSummary` refuses (a
    hand-edited summary: ``"pass": {"1": 5}`` failed the whole bundle with a traceback); the
    pages read the rest, as they read an older summary without those keys. Missing keys are
    not a reason to drop any."""
    from pydantic import ValidationError

    from clawrig.spec.summary import JobSummary

    try:
        JobSummary.model_validate(summary)
    except ValidationError as exc:
        bad = {e["loc"][0] for e in exc.errors() if e["loc"] and e["type"] != "missing"}
        return {k: v for k, v in summary.items() if k not in bad}
    return summary


def _job_files(folder: Path) -> bool:
    """Whether ``folder`` holds a job's summary or progress file."""
    paths = JobPaths(folder)
    return bool(paths.summaries() or paths.progresses())


def open_jobs(folders: list[Path]) -> list[JobView]:
    """One JobView per model found in each folder (its summary or progress file; a folder with
    neither yet, e.g. a job that just started, gives one view over its trials' model), and in
    each of its subfolders that holds a job (a folder of jobs, as ``output/``: a new user's
    ``clawrig view output`` showed none of them). Raises UserError naming the folder when it
    does not exist or neither it nor a subfolder is a job folder. An empty folder is a folder
    of jobs with none yet (``output/`` before the first run: helper-170), none of its own."""
    views: list[JobView] = []
    seen: set[Path] = set()
    problems: list[str] = []  # every bad folder named, not the first alone (helper-200)
    for given in folders:
        given = Path(given)
        try:
            if not given.is_dir():
                raise not_a_folder("JOB_DIR", given)
            if not any(given.iterdir()):
                continue
            subs = _job_subfolders(given)
            own = _holds_a_job(given) or not subs
            # a folder given twice (or inside another one given) is one job, not two
            fresh = [f for f in [given] * own + subs if f.resolve() not in seen]
            views += _folder_views(fresh, len(views))
        except UserError as exc:
            problems.append(str(exc))
            continue
        seen.update(f.resolve() for f in fresh)
    if problems:
        raise UserError("; ".join(problems))
    return views


def folders_of_jobs(folders: list[Path]) -> list[Path]:
    """Those of ``folders`` (given to :func:`open_jobs`) that hold jobs in subfolders and are
    no job themselves (``output/``): where :func:`jobs_started_since` looks (a job folder's
    subfolders are its tasks': not looked through again)."""
    return [Path(f) for f in folders if Path(f).is_dir() and not _holds_a_job(Path(f))]


def _holds_a_job(folder: Path) -> bool:
    """Whether ``folder`` is a job's own (its summary, progress or lock file, or an RL output
    folder's rollouts.json)."""
    return _job_files(folder) or (folder / LOCK_FILE).exists() or JobPaths(folder).is_rollouts()


def _job_subfolders(folder: Path) -> list[Path]:
    """The subfolders of ``folder`` that hold a job (its summary or progress file, or an RL
    output folder's rollouts.json: it has neither, ever), sorted."""
    return [
        p
        for p in sorted(folder.iterdir())
        if p.is_dir() and (_job_files(p) or JobPaths(p).is_rollouts())
    ]


def jobs_started_since(folders: list[Path], known: list[JobView]) -> list[JobView]:
    """Views of the jobs in subfolders of ``folders`` (the folders of jobs given to
    :func:`open_jobs`, as ``output/``) that none of ``known`` shows: a job started there after
    the viewer opened the folder (helper-168: it never appeared). Keyed on from
    ``len(known)``. A folder that cannot be read now, or a new one that is no job folder after
    all, gives none."""
    have = {view.folder.resolve() for view in known}
    fresh: list[Path] = []
    for given in folders:
        try:
            subs = _job_subfolders(Path(given))
        except OSError:  # (gone, or no folder now)
            continue
        for sub in subs:
            if (real := sub.resolve()) not in have:
                have.add(real)
                fresh.append(sub)
    views: list[JobView] = []
    for folder in fresh:
        with contextlib.suppress(UserError, OSError):
            views += _folder_views([folder], len(known) + len(views))
    return views


def _folder_views(folders: list[Path], start: int) -> list[JobView]:
    views: list[JobView] = []
    for folder in folders:
        paths = JobPaths(folder)  # (its summary and progress files, not task folders so named)
        slugs = sorted(
            {p.name[len(pre) + 1 : -5] for pre, files in (("summary", paths.summaries()),
             ("progress", paths.progresses())) for p in files}
        )  # fmt: skip
        index = FolderIndex(folder)
        if not slugs:
            slugs = sorted({model_slug(r["model"]) for r in index.rows.values() if r["model"]})
        if not slugs and not (folder / LOCK_FILE).exists() and not paths.is_rollouts():
            # (an RL output folder whose every episode was set aside: no trial, no lock file
            # when it was copied without its hidden files)
            raise UserError(f"{folder}: not a job folder (no summary_<model>.json, no trials)")
        # a job recorded twice (a backup copy ``summary_oracle.bak.json`` of the summary) is
        # one job: the view of the file named for its model is kept
        mine = [JobView(key="", index=index, slug=slug) for slug in slugs or [""]]
        seen: dict[tuple[str, str], JobView] = {}
        for view in sorted(mine, key=lambda v: v.slug != _slug(v.model() or v.slug)):
            seen.setdefault((_slug(view.model() or view.slug), view.job_id()), view)
        kept = {id(v) for v in seen.values()}
        for view in mine:
            if id(view) in kept:
                view.key = f"job{start + len(views)}"
                views.append(view)
    return views
