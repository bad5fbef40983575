"""The viewer's pages, rendered with Jinja2 from the folder index and trial files.

One :class:`Site` renders every page for both the live server (:mod:`clawrig.view.server`) and
the static bundle (:mod:`clawrig.view.bundle`); pages link to each other with relative paths,
so the same HTML works under ``http://127.0.0.1:PORT/`` and from ``file://``:

- ``index.html``: the jobs, with links; ``compare.html``: every job side by side per task;
- ``<job key>/index.html``: one job (headline numbers, errors, plots, the trial table);
- ``<job key>/trials/<task id>/<trial folder>.html``: one trial;
- ``static/``: the stylesheet and the one script (no library, nothing fetched from elsewhere).

Headline numbers come from the job's summary_<model>.json (DataClawBench's and WildClawBench's
rules as the job wrote them, docs/outputs.md); while a job runs (no summary of it yet) the page
shows what is known so far from the trial rows: counted scores, errors by kind, usage sums.
"""

from __future__ import annotations

import json
import secrets
import statistics
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from clawrig.spec.layout import JobPaths, TrialPaths
from clawrig.spec.summary import OUTPUT_MOVED, headline_benchmarks
from clawrig.spec.trial import finite_float
from clawrig.view import plots
from clawrig.view.index import JobView, Row, jobs_started_since
from clawrig.view.trial import as_dict, read_json, read_trial, shown

STATIC_DIR = Path(__file__).parent / "static"
ERROR_KINDS = ("agent", "grading", "setup", "infrastructure", "budget", "cancelled")
HIST_BINS = ("0", "0–.2", ".2–.4", ".4–.6", ".6–.8", ".8–1", "1")
"""Score histogram bins: exactly 0, (0, .2), [.2, .4), ..., [.8, 1), exactly 1."""


def hist_bin(score: float) -> int:
    """The :data:`HIST_BINS` index of a score in [0, 1]."""
    if score <= 0:
        return 0
    if score >= 1:
        return 6
    return 1 + min(4, int(score / 0.2))


def _number(v: Any) -> bool:
    """A finite number (not a bool): what the pages format; anything else a record of a job
    folder holds (NaN, Infinity, 1e999, a string) shows as a dash (it was an HTTP 500)."""
    return finite_float(v) is not None


def fmt_score(v: Any) -> str:
    return f"{v:.4f}" if _number(v) else "—"


def fmt_usd(v: Any) -> str:
    return f"${v:,.4f}" if _number(v) else "—"


def fmt_int(v: Any) -> str:
    return f"{int(v):,}" if _number(v) else "—"


def fmt_s(v: Any) -> str:
    return f"{v:,.1f} s" if _number(v) else "—"


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("clawrig.view", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(score=fmt_score, usd=fmt_usd, int=fmt_int, secs=fmt_s)
    # `is number`: a finite number, not a bool (a 400-digit integer passed Jinja's own test and
    # made '%.3f' raise OverflowError: a 500, helper-184)
    env.tests["number"] = _number
    env.globals["palette"] = plots.colour
    env.filters["tojson_compact"] = lambda v: Markup(script_json(v))
    return env


def script_json(value: Any) -> str:
    """Compact JSON safe inside ``<script type="application/json">`` (``<``, ``>``, ``&``
    escaped as ``\\u003c`` ...)."""
    return (
        json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def status(
    running: bool,
    summary: dict[str, Any] | None,
    unreadable: bool = False,
    deleted: bool = False,
    rollouts: bool = False,
) -> str:
    """A job's status in words, as the jobs list and the job page show it: "running" (another
    process holds the folder's lock), "folder deleted" (``deleted``: gone since the viewer
    started), "RL episodes" (``rollouts``: an RL output folder no process writes to now; it
    never has a summary), "no summary" (none written yet), "summary unreadable"
    (``unreadable``: its file holds no summary), "interrupted (SIGINT)"
    (or SIGTERM), "stopped by the budget", "stopped: model server" (``provider_stopped``), "stopped:
    output not writable" (``output_stopped``: full or read-only; "stopped: output removed
    or replaced" when the folder or its lock file was, under the job),
    else "finished", or "finished, N not scored" when N trials ended with an error that left
    them unscored (the summary's ``error_count``: infrastructure, setup, grading ...; an agent
    error is scored 0 and not among them), as ``clawrig run``'s table caption counts them."""
    if running:
        return "running"
    if deleted:
        return "folder deleted"
    if summary is None:
        if rollouts:
            return "RL episodes"
        return "summary unreadable" if unreadable else "no summary"
    if summary.get("interrupted"):
        by = summary.get("interrupted_by")
        return f"interrupted ({by})" if by else "interrupted"
    if summary.get("budget_stopped"):
        return "stopped by the budget"
    if summary.get("provider_stopped"):
        return "stopped: model server"
    if stopped := summary.get("output_stopped"):
        moved = OUTPUT_MOVED in stopped
        return "stopped: output removed or replaced" if moved else "stopped: output not writable"
    unscored = summary.get("error_count") or 0
    return f"finished, {unscored} not scored" if unscored else "finished"


def set_aside_spend(folder: Path, job_id: str) -> tuple[int, float]:
    """(attempts, USD) of job ``job_id`` set aside in the job folder's ``_retried/`` (cut by a
    stop or a kill, or retried): what a job's summary counts in its cost, added to the live
    numbers of a job that has none yet, or never will (an RL output folder: helper-182, its
    page left out the spend of episodes a killed server left). Unreadable records and
    impossible costs are passed over. Read again only when ``_retried/`` changed (an attempt
    set aside is a new folder there): the pages ask every second (helper-183: 5,000 attempts
    took 0.4 s a poll)."""
    paths = JobPaths(folder)
    try:
        stamp = paths.retried.stat().st_mtime_ns
    except OSError:
        return 0, 0.0
    key = (str(folder), job_id)
    with _SET_ASIDE_LOCK:
        if (held := _SET_ASIDE.get(key)) is not None and held[0] == stamp:
            return held[1]
    attempts, cost = 0, 0.0
    for rj in paths.retried_results():
        raw = read_json(rj)
        if not isinstance(raw, dict) or raw.get("job_id") != job_id:
            continue
        attempts += 1
        used = finite_float(as_dict(raw.get("usage")).get("cost_usd"))
        if used is not None and 0 <= used < 1e12:
            cost += used
    with _SET_ASIDE_LOCK:
        _SET_ASIDE[key] = (stamp, (attempts, cost))
    return attempts, cost


_SET_ASIDE: dict[tuple[str, str], tuple[int, tuple[int, float]]] = {}
"""(job folder, job id) -> (``_retried/``'s mtime, :func:`set_aside_spend`'s answer)."""
_SET_ASIDE_LOCK = threading.Lock()


def headline(job: JobView, rows: list[Row]) -> dict[str, Any]:
    """The job page's numbers: from the job's summary when it has one, else live from rows.

    Keys: source ("summary" | "live"), running, model, agent, suite, job_id, timestamp, trials,
    graded, wildclaw (overall or None), wild_categories, wild_modalities (multimodal /
    pure-text: {score, task_count}), acc (DataClawBench overall_score); the WildClawBench
    and DataClawBench keys are None/empty unless its format ran (:func:`clawrig.spec.summary.
    headline_benchmarks`; an older summary that does not say keeps them),
    mean ({mean, low, high, n, unit} or None), process ({ee, gpr, tpe, tgpr: {mean, n}}),
    pass (``{k: {pass_at_k, pass_hat_k, tasks}}``), errors (kind -> count), cost (USD),
    tokens, requests, elapsed (s), not_run, budget_stopped, interrupted, status (:func:`status`),
    replayed_from (the job folder ``--replay`` answered the model calls from, "" for a live
    job)."""
    running = job.running()
    # a running job's summary is an earlier run's (interrupted, now resumed: helper-171 saw
    # its numbers beside the live count): the numbers so far until the job writes its own
    s = None if running else job.job_summary()
    graded = [r["score"] for r in rows if r["score"] is not None]
    live_errors: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["err"]:
            live_errors[r["err"]] += 1
    base = {
        "running": running,
        "trials": len(rows),
        "graded": len(graded),
        "job_id": job.job_id(),
        "title": job.title,
        "folder": str(job.folder),
        "replayed_from": job.replayed_from(),
    }
    if s is None:
        rollouts = JobPaths(job.folder).is_rollouts()
        set_aside, set_aside_cost = set_aside_spend(job.folder, job.job_id())
        return base | {
            "status": status(running, None, job.summary_unreadable(), job.deleted(), rollouts),
            "source": "live",
            "rollouts": rollouts,
            "set_aside": set_aside,
            "model": rows[0]["model"] if rows else job.slug,
            "wildclaw": None,
            "wild_categories": {},
            "wild_modalities": {},
            "acc": None,
            "mean": {"mean": _mean(graded), "n": len(graded), "unit": "trial"} if graded else None,
            "process": {},
            "pass": {},
            "errors": dict(sorted(live_errors.items())),
            "cost": sum(r["cost"] for r in rows) + set_aside_cost,
            "tokens": sum(r["tok"] for r in rows),
            "requests": sum(r["req"] for r in rows),  # (helper-199: "—" for an RL folder)
            "elapsed": None,
        }
    # a benchmark's own number only for a suite of its format, as the command's headline
    # (cli/run.py headline): a four-folder set's job showed the WildClawBench average and
    # DataClawBench's Acc beside its mean, three cards of one number. A summary without
    # formats (an older one) keeps them all
    shown = headline_benchmarks(s)
    wild = as_dict(s.get("wildclaw")) if shown is None or "wildclaw" in shown else {}
    usage = as_dict(s.get("usage"))
    cats = as_dict(wild.get("categories"))
    return base | {
        "status": status(running, s),
        # why the model server stopped the job, as its summary says (helper-155: the page
        # said "stopped: model server" only)
        "stopped_why": next(
            (s[k] for k in ("provider_stopped", "output_stopped") if isinstance(s.get(k), str)),
            None,
        ),
        "source": "summary",
        "model": s.get("model"),
        "agent": s.get("agent"),
        "suite": s.get("suite_path") or s.get("suite"),
        "timestamp": s.get("timestamp"),
        "wildclaw": wild.get("overall"),
        "wild_categories": {
            k: v.get("score") if isinstance(v, dict) else v for k, v in sorted(cats.items())
        },
        "wild_modalities": {
            k: as_dict(v) for k, v in sorted(as_dict(wild.get("modalities")).items())
        },
        "acc": s.get("overall_score") if shown is None or "dataclaw" in shown else None,
        "mean": s.get("mean") if isinstance(s.get("mean"), dict) else None,
        "process": as_dict(s.get("process")),
        "pass": as_dict(s.get("pass")),
        # (a trial folder the summary counted whose result.json cannot be read now is one
        # more error here: "errors 0" beside "1 not scored", helper-208)
        "errors": as_dict(s.get("errors_by_kind"))
        | ({"unreadable": unreadable} if (unreadable := live_errors.get("unreadable")) else {}),
        "cost": usage.get("cost_usd"),
        "tokens": usage.get("total_tokens"),
        "requests": usage.get("request_count"),
        "elapsed": s.get("elapsed_s", usage.get("elapsed_time")),
        "evaluated": s.get("evaluated_count"),
        "error_count": s.get("error_count"),
        "not_run": s.get("not_run"),
        "budget_stopped": s.get("budget_stopped"),
        "interrupted": s.get("interrupted"),
    }


def category_scores(head: dict[str, Any], rows: list[Row]) -> dict[str, float | None]:
    """Score per category: the summary's WildClawBench category averages when it has them,
    else the mean counted score of the category's graded trials."""
    if head.get("wild_categories"):
        return dict(head["wild_categories"])
    per: dict[str, list[float]] = defaultdict(list)
    cats: set[str] = set()
    for r in rows:
        cats.add(r["cat"] or "(none)")
        if r["score"] is not None:
            per[r["cat"] or "(none)"].append(r["score"])
    return {c: _mean(per[c]) for c in sorted(cats)}


SCORE_DIGITS = 12
"""Decimals a task's mean score is rounded to: five runs of 0.98 average to
0.9800000000000001 and three to 0.98, and the compare page called two identical jobs
different on that task (helper-223)."""


def task_means(rows: list[Row]) -> dict[str, dict[str, Any]]:
    """Per task: ``score`` (mean counted score over its graded runs, None if none; rounded to
    :data:`SCORE_DIGITS`), ``cost`` (mean USD per run), ``runs``, ``cat`` and ``trials`` (row
    ids)."""
    per: dict[str, dict[str, Any]] = {}
    for r in rows:
        t = per.setdefault(r["task"], {"scores": [], "costs": [], "trials": [], "cat": r["cat"]})
        if r["score"] is not None:
            t["scores"].append(r["score"])
        t["costs"].append(r["cost"])
        t["trials"].append(r)
    return {
        k: {
            "score": None if (m := _mean(v["scores"])) is None else round(m, SCORE_DIGITS),
            "cost": _mean(v["costs"]),
            "runs": len(v["trials"]),
            "cat": v["cat"],
            "trials": v["trials"],
        }
        for k, v in sorted(per.items())
    }


def edited_tasks(rows: list[dict[str, Any]]) -> list[str]:
    """The tasks of compare rows (:meth:`Site.compare_rows`) whose trials ran different
    versions of them (more than one ``task_digest``: what the task asks or how it is graded
    changed between the runs; its workspace files are named in the digest, not read), by id:
    their scores are not of one task. Trials that recorded no digest count as neither."""
    out = []
    for row in rows:
        digests = {t["digest"] for cell in row["cells"] if cell for t in cell["trials"]}
        if len(digests - {""}) > 1:
            out.append(row["task"])
    return sorted(out)


def job_plots(heads: list[dict[str, Any]], rowsets: list[list[Row]]) -> dict[str, str]:
    """The plots of one job (or several side by side): score by category, cost vs score (one
    point per task), the score histogram, pass@k / pass^k over k, process metrics."""
    names = [h["title"] for h in heads]
    per_cat = [category_scores(h, r) for h, r in zip(heads, rowsets, strict=True)]
    cats = sorted({c for pc in per_cat for c in pc})
    out = {
        "category": plots.bars(
            cats, names, [[pc.get(c) for c in cats] for pc in per_cat], title="Score by category"
        ),
        "cost": plots.scatter(
            names,
            [
                [
                    (t["cost"], t["score"], task)
                    for task, t in task_means(r).items()
                    if t["score"] is not None and t["cost"] is not None
                ]
                for r in rowsets
            ],
            title="Cost vs score (one point per task)",
            x_label="mean cost per run (USD)",
            y_label="mean score",
        ),  # fmt: skip
    }
    hist = []
    for r in rowsets:
        counts = [0] * len(HIST_BINS)
        for row in r:
            if row["score"] is not None:
                counts[hist_bin(row["score"])] += 1
        hist.append(counts)
    out["hist"] = plots.columns(
        HIST_BINS, names, hist, title="Score distribution (graded trials)", y_label="trials"
    )
    # k: a few ASCII digits ("²" is a digit to str.isdigit, and int() refuses 5,000 digits)
    ks = sorted({int(k) for h in heads for k in h.get("pass", {}) if _small_int(k)})
    if ks:
        series, values = [], []
        for h in heads:
            p = h.get("pass", {})
            for key, label in (("pass_at_k", "pass@k"), ("pass_hat_k", "pass^k")):
                series.append(f"{h['title']} {label}" if len(heads) > 1 else label)
                values.append([(p.get(str(k)) or {}).get(key) for k in ks])
        out["pass"] = plots.lines(
            ks, series, values, title="Success over k runs (pass@k, pass^k)", x_label="k"
        )
    else:
        out["pass"] = plots._empty("pass@k: one run per task (run with --runs N > 1 to see it)")
    metrics = ("ee", "gpr", "tpe", "tgpr")
    proc = [[(h.get("process", {}).get(m) or {}).get("mean") for m in metrics] for h in heads]
    if any(v is not None for vs in proc for v in vs):
        out["process"] = plots.bars(
            [m.upper() for m in metrics], names, proc, title="Process metrics (DataClawBench)"
        )
    else:
        out["process"] = plots._empty(
            "Process metrics: none (they need tasks with gold steps and milestones)"
        )
    return out


TABLE_KEYS = ("id", "task", "cat", "run", "score", "err", "msg", "cost", "tok", "time",
              "turns", "tools", "stop")  # fmt: skip


def _small_int(text: Any) -> bool:
    """True when ``text`` is 1-6 ASCII digits (a pass@k key)."""
    return isinstance(text, str) and 1 <= len(text) <= 6 and text.isascii() and text.isdigit()


def _compact(key: str, value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6 if key == "cost" else 4)
    return value


def table_rows(rows: list[Row]) -> dict[str, Any]:
    """The rows the job page's script renders, column-wise to keep a 10,000-trial page small:
    ``{"keys": TABLE_KEYS, "values": [[value per key] per trial]}`` (a trial's page is
    ``trials/<id>.html``; floats rounded: cost to 6 decimals, others to 4)."""
    return {
        "keys": list(TABLE_KEYS),
        "values": [[_compact(k, r.get(k)) for k in TABLE_KEYS] for r in rows],
    }


JOBS_RESCAN_S = 1.0
"""Seconds at least between two looks of :meth:`Site.add_new_jobs` for new job folders."""


@dataclass
class Site:
    """Renders every page of the jobs ``jobs``; ``live`` pages poll the server's state API.
    ``folders``: the folders the jobs were opened from, where :meth:`add_new_jobs` looks for
    jobs started since (none for a static bundle)."""

    jobs: list[JobView]
    live: bool = True
    folders: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.env = _env()
        self.by_key = {j.key: j for j in self.jobs}
        self._jobs_lock = threading.Lock()
        self._jobs_looked = time.monotonic()
        self._tasks: dict[str, Any] = {}
        self._resolvers: dict[Path, Any] = {}
        self._memo: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._boot = secrets.token_hex(3)

    def add_new_jobs(self) -> None:
        """Add the jobs started in subfolders of :attr:`folders` since the last look
        (:func:`clawrig.view.index.jobs_started_since`), at most every :data:`JOBS_RESCAN_S`
        seconds; thread-safe (the server's routes run in a thread pool)."""
        if not self.folders or time.monotonic() - self._jobs_looked < JOBS_RESCAN_S:
            return
        with self._jobs_lock:
            if time.monotonic() - self._jobs_looked < JOBS_RESCAN_S:
                return
            for job in jobs_started_since(self.folders, self.jobs):
                self.jobs.append(job)
                self.by_key[job.key] = job
            self._jobs_looked = time.monotonic()

    def _cached(self, kind: str, job: JobView, compute: Any) -> Any:
        """``compute()`` once per (kind, job) until the job's rows or summary change."""
        stamp = (job.index.version, job.job_id(), job._summary_cache[0])
        hit = self._memo.get((kind, job.key))
        if hit is None or hit[0] != stamp:
            hit = (stamp, compute())
            self._memo[(kind, job.key)] = hit
        return hit[1]

    def _job_parts(self, job: JobView) -> tuple[list[Row], dict[str, Any], Any, str, str]:
        """(rows, headline, table rows, plots HTML, table rows as script JSON) of a job; all
        but the headline cached while nothing changed."""
        rows = job.rows()
        head = headline(job, rows)

        def parts() -> tuple[dict[str, Any], str, str]:
            plots_html = self.env.get_template("_plots.html").render(p=job_plots([head], [rows]))
            table = table_rows(rows)
            return table, plots_html, script_json(table)

        table, plots_html, table_json = self._cached("parts", job, parts)
        return rows, head, table, plots_html, table_json

    def _render(self, template: str, root: str, **ctx: Any) -> str:
        return shown(
            self.env.get_template(template).render(root=root, jobs=self.jobs, live=self.live, **ctx)
        )

    def index_page(self) -> str:
        self.add_new_jobs()
        items = []
        for j in self.jobs:
            rows = j.rows()
            items.append({"job": j, "head": headline(j, rows)})
        return self._render("index.html", "", items=items)

    def _version(self, job: JobView) -> str:
        """A stamp that changes when the job's rows or summary change (and per server run)."""
        job.summary()
        return f"{self._boot}.{job.index.version}.{job._summary_cache[0]}"

    def job_state(self, key: str, since: str = "") -> str:
        """The job page's live state as JSON text: ``version``, ``running``, ``source``,
        ``headline`` (HTML), and, when ``version`` differs from ``since``, ``plots`` (HTML)
        and ``rows`` (all of them, as :func:`table_rows`; spliced in from the cached JSON)."""
        job = self.by_key[key]
        _, head, _, plots_html, table_json = self._job_parts(job)
        version = self._version(job)
        state: dict[str, Any] = {
            "version": version,
            "running": head["running"],
            "source": head["source"],
            "headline": self.env.get_template("_headline.html").render(h=head, root="../"),
        }
        if since == version:
            return shown(json.dumps(state))
        state["plots"] = plots_html
        return shown(json.dumps(state)[:-1] + ', "rows": ' + table_json + "}")

    def job_page(self, key: str) -> str:
        job = self.by_key[key]
        rows, head, _, plots_html, table_json = self._job_parts(job)
        meta = {
            "key": key,
            "live": self.live,
            "version": self._version(job),
            "running": head["running"],
            "api": f"../api/{key}/state.json",
        }
        data = Markup(script_json(meta)[:-1] + ',"rows":' + table_json + "}")
        return self._render(
            "job.html",
            "../",
            job=job,
            h=head,
            plots_html=plots_html,
            data=data,
            kinds=sorted({r["err"] for r in rows if r["err"]}),
            cats=sorted({r["cat"] for r in rows if r["cat"]}),
            # (a text browser, curl or an archive reached no trial page: helper-139)
            plain_rows=sorted(rows, key=lambda r: r["id"]),
        )

    def _resolver(self, job: JobView) -> Any | None:
        """A TaskResolver fixed on the job's suite (looked for once per folder, where the
        exports look: the summary's suite_path, else a trial's task_source), None when the
        suite is not on this machine."""
        if job.folder not in self._resolvers:
            self._resolvers[job.folder] = None
            first = next(iter(job.rows()), None)
            if first is not None:
                from clawrig.export.job import TaskResolver, _suite_candidates

                trial = self._job_trial(job, first)
                suites = _suite_candidates(job.folder, trial, job.summary() or {})
                suite = next((c for c in suites if c.exists()), None)
                if suite is not None:
                    self._resolvers[job.folder] = TaskResolver(job.folder, suite=suite)
        return self._resolvers[job.folder]

    @staticmethod
    def _job_trial(job: JobView, row: Row) -> Any:
        from clawrig.export.job import JobTrial
        from clawrig.spec.trial import TrialResult

        folder = job.folder / row["id"]
        raw = read_json(TrialPaths(folder).result)  # (a FIFO hung the page: helper-138)
        return JobTrial(folder=folder, result=TrialResult.model_validate(raw), raw=raw)

    def _task(self, job: JobView, row: Row) -> Any | None:
        """The task a trial ran (for the end-state diff), None when its suite is not found."""
        key = f"{job.folder}:{row['task']}"
        if key not in self._tasks:
            self._tasks[key] = None
            try:
                resolver = self._resolver(job)
                if resolver is not None:
                    self._tasks[key] = resolver.task_for(self._job_trial(job, row))
            except Exception:  # noqa: BLE001 - task not found: the tree shows without a diff
                pass
        return self._tasks[key]

    def trial_page(self, key: str, rel: str) -> str | None:
        """The page of trial folder ``rel`` (``<task id>/<trial folder>``) of job ``key``; None
        when the folder is not a trial of the job's folder, or is gone."""
        job = self.by_key.get(key)
        if job is None:
            return None
        row = job.row(rel)
        if row is None:
            return None
        if not TrialPaths(job.folder / rel).result.is_file():
            # deleted since the index listed it: no page of "no transcript", "no model calls"
            # and a validation error of nothing (helper-195)
            return None
        trial = read_trial(job.folder / rel, self._task(job, row))
        return self._render("trial.html", "../../../", job=job, row=row, t=trial)

    def compare_rows(self, jobs: list[JobView]) -> list[dict[str, Any]]:
        """One row per task over ``jobs``: per-job mean counted score and trial links;
        ``spread`` = max - min of the scores of the jobs that graded it (None when fewer than
        two did); ``gap``: some job did not run or grade it. Sorted: disagreements (spread >
        0, largest first), then gaps, then agreements, each by task id. (A gap counted as a
        disagreement of 1 flagged every row of jobs run on different subsets: helper-129.)"""
        means = [task_means(j.rows()) for j in jobs]
        tasks = sorted({t for m in means for t in m})
        out: list[dict[str, Any]] = []
        for task in tasks:
            cells = [m.get(task) for m in means]
            scores = [c["score"] if c else None for c in cells]
            known = [s for s in scores if s is not None]
            spread = (max(known) - min(known)) if len(known) >= 2 else None
            cat = next((c["cat"] for c in cells if c), "")
            out.append({"task": task, "cat": cat, "cells": cells, "scores": scores,
                        "spread": spread, "gap": len(known) < len(scores)})  # fmt: skip

        def rank(row: dict[str, Any]) -> tuple[int, float, str]:
            spread = row["spread"] or 0.0
            return (0 if spread > 0 else 1 if row["gap"] else 2, -spread, row["task"])

        out.sort(key=rank)
        return out

    def paired_differences(
        self, jobs: list[JobView], rows: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Each job after the first against the first, paired over the tasks both graded
        (``rows``: :meth:`compare_rows`): ``n`` tasks, ``mean`` difference of their task means
        (this job's minus the first's), its t-based ``low``/``high`` (95%; None below two
        tasks) and the tasks it scored ``better``/``worse``/``same`` on. Pairing by task
        takes the tasks' own difficulty out of the comparison, as E. Miller, "Adding Error
        Bars to Evals" (arXiv:2411.00640, section 4) recommends for two models on one
        benchmark."""
        from clawrig.grading.aggregate import mean_ci

        out: list[dict[str, Any]] = []
        for i, job in enumerate(jobs[1:], start=1):
            diffs = [
                r["scores"][i] - r["scores"][0]
                for r in rows
                if r["scores"][0] is not None and r["scores"][i] is not None
            ]
            ci = mean_ci(diffs)
            # a difference of scores in [0, 1] is in [-1, 1]: the interval clipped to it, as
            # the means' are to [0, 1] (helper-215 saw [-1.003, -0.993])
            low = max(-1.0, ci.low) if ci.low is not None else None
            high = min(1.0, ci.high) if ci.high is not None else None
            out.append({
                "job": job, "n": ci.n, "mean": ci.mean, "low": low, "high": high,
                "better": sum(d > 0 for d in diffs), "worse": sum(d < 0 for d in diffs),
                "same": sum(d == 0 for d in diffs),
            })  # fmt: skip
        return out

    def compare_page(self, keys: list[str] | None = None) -> str:
        """The compare page of jobs ``keys`` (default: all), cached until one of them changes."""
        self.add_new_jobs()
        jobs = [self.by_key[k] for k in keys if k in self.by_key] if keys else self.jobs
        stamp = tuple(self._version(j) for j in jobs)
        memo_key = ("compare", ",".join(j.key for j in jobs))
        hit = self._memo.get(memo_key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        rowsets = [j.rows() for j in jobs]
        heads = [headline(j, r) for j, r in zip(jobs, rowsets, strict=True)]
        rows = self.compare_rows(jobs)
        # jobs of different suites: their tasks are paired by id all the same (helper-215: a
        # job of an edited copy of the suite was compared task by task without a word)
        from clawrig.export.job import suite_location

        suites = [(j.title, h.get("suite")) for j, h in zip(jobs, heads, strict=True)]
        # one suite named two ways (relative to where each job ran, or absolute) is one suite
        where = {
            str(suite_location(j.folder, (j.summary() or {}).get("suite_path")) or s)
            for j, (_, s) in zip(jobs, suites, strict=True)
        }
        differ = len(where) > 1
        html = self._render(
            "compare.html",
            "",
            cjobs=jobs,
            heads=heads,
            suites=suites if differ else [],
            edited=edited_tasks(rows),
            unshared=sorted(r["task"] for r in rows if any(c is None for c in r["cells"])),
            ntasks=len(rows),
            rows=rows,
            paired=self.paired_differences(jobs, rows),
            p=job_plots(heads, rowsets),
        )
        self._memo[memo_key] = (stamp, html)
        return html
