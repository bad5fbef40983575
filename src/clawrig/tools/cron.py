"""``cron``: jobs scheduled inside a trial (OpenClaw's cron tool, run by the harness).

A :class:`CronScheduler` per trial holds the jobs and fires them with asyncio tasks while the
trial runs. The tool creates it on first use in ``ctx.cron`` (share one between an agent and
its sub-agents by passing the same object). Two kinds of job:

- command jobs run a shell command in the sandbox (as exec: ``/bin/sh -c``, stdout+stderr
  merged, ``timeout`` seconds); each run's exit code and output are kept (action ``runs``);
- message jobs (OpenClaw payloads ``systemEvent`` {text} and ``agentTurn`` {message}) queue
  their text for the agent. **Delivery**: the agent loop calls
  ``ctx.cron.pending_messages()`` between model calls (when ``ctx.cron`` is not None) and adds
  each :class:`CronMessage` as a user message, e.g. ``[cron job-1] <text>``.

The agent loop stops the scheduler at the end of the trial with ``await ctx.cron.stop()``
(``Toolset.aclose`` does).

Job shape accepted by ``add`` (``job`` object; ``text`` at top level is a message payload)::

    {"name": "...",
     "schedule": {"kind": "at", "at": "2026-04-01T10:00:00Z"}       # or "atMs": epoch ms
               | {"kind": "every", "everyMs": 5000}                  # or "seconds"
               | {"kind": "delay", "delayMs": 2000}                  # or "seconds"
               | {"kind": "cron", "expr": "*/5 * * * *"},            # 5 fields, UTC
     "payload": {"kind": "command", "command": "...", "workdir": "...", "timeout": 60}
              | {"kind": "systemEvent", "text": "..."} | {"kind": "agentTurn", "message": "..."},
     "enabled": true}

Shortcuts: ``job.command`` / ``job.text`` / ``job.message`` for the payload; ``job.at``,
``job.everyMs``/``everySeconds``, ``job.delayMs``/``delaySeconds``, ``job.cron`` for the
schedule. One-shot jobs (at, delay) are disabled after they fire. Job ids are ``job-N``.
``gatewayUrl``, ``gatewayToken``, ``timeoutMs``, ``contextMessages`` and ``mode`` are accepted
and ignored (there is no gateway inside a trial).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import math
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from clawrig.errors import InfrastructureError
from clawrig.sandbox.base import Sandbox, truncate_middle
from clawrig.tools._common import WORKSPACE, error, json_result, resolve_path
from clawrig.tools.base import ToolContext, ToolResult

MIN_INTERVAL_S = 0.1
"""Shortest repeat interval of an ``every`` job (seconds)."""
MAX_SPAN_S = 100 * 365 * 86400.0
"""Longest interval or delay a schedule takes (seconds: 100 years)."""
MAX_RUNS_KEPT = 50
MAX_RUN_OUTPUT_KEPT = 16 * 1024
"""Most characters of a command run's output a job's history keeps (its last ones): 100 jobs
of 50 runs of 200 KB held 1 GB of the harness's memory (helper-143)."""
MAX_JOBS = 100
"""Most jobs a scheduler holds at once (``add`` past it is the agent's tool error)."""
MAX_PENDING_MESSAGES = 100
"""Most fired messages waiting for the agent's next turn; past it the oldest are dropped and
the next delivery says how many (50 jobs firing 10 KB every 0.1 s while the agent slept made a
52 MB transcript: helper-142)."""
MESSAGE_KINDS = ("systemEvent", "agentTurn", "message")
COMMAND_KINDS = ("command", "exec")


@dataclass
class CronMessage:
    """A fired message job: ``job_id``, ``text``, ``fired_at`` (ISO 8601, UTC)."""

    job_id: str
    text: str
    fired_at: str

    def as_user_text(self) -> str:
        """The text the agent loop shows the model: ``[cron JOB] TEXT``."""
        return f"[cron {self.job_id}] {self.text}"


@dataclass
class CronRun:
    """One firing: status ok|error|timeout, exit code and output (command jobs)."""

    job_id: str
    started_at: str
    status: str
    duration_ms: int = 0
    exit_code: int | None = None
    output: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobId": self.job_id,
            "startedAt": self.started_at,
            "status": self.status,
            "durationMs": self.duration_ms,
            "exitCode": self.exit_code,
            "output": self.output,
        }


@dataclass
class CronJob:
    """A job: schedule (``kind`` at|every|delay|cron and its value), payload (``kind``
    command|message), ``next_run`` (epoch seconds, None when nothing is due)."""

    id: str
    name: str
    schedule: dict[str, Any]
    payload: dict[str, Any]
    enabled: bool = True
    created_at: str = field(default_factory=lambda: _iso(time.time()))
    next_run: float | None = None
    runs: list[CronRun] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def as_dict(self) -> dict[str, Any]:
        last = self.runs[-1].as_dict() if self.runs else None
        return {
            "id": self.id,
            "name": self.name,
            "enabled": self.enabled,
            "schedule": self.schedule,
            "payload": self.payload,
            "createdAt": self.created_at,
            "nextRunAt": _iso(self.next_run) if self.next_run is not None else None,
            "runCount": len(self.runs),
            "lastRun": last,
        }


def _iso(epoch: float, what: str = "the time") -> str:
    """``epoch`` (seconds) as ISO 8601 UTC. Raises ValueError naming ``what`` for a time no
    date holds (helper-197: atMs 1e30 was an OverflowError traceback on the console)."""
    try:
        return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"{what} is out of range (a time before the year 10000)") from None


def _number(value: Any, what: str) -> float:
    """``value`` as a finite float; ValueError naming ``what`` otherwise (a JSON integer of
    400 digits made float() an OverflowError traceback: helper-198)."""
    try:
        number = float(value)
    except (OverflowError, ValueError, TypeError):
        raise ValueError(f"{what} must be a finite number") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} must be a finite number")
    return number


def _parse_time(value: Any) -> float:
    if isinstance(value, int | float):
        return _number(value, "schedule.atMs") / 1000.0  # epoch milliseconds
    text = str(value).strip()
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"schedule.at {value!r} is not an ISO 8601 time (e.g. 2026-04-01T10:00:00Z)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _seconds(spec: dict[str, Any], ms_key: str, s_keys: tuple[str, ...], what: str) -> float:
    if spec.get(ms_key) is not None:
        value = _number(spec[ms_key], f"schedule.{ms_key}") / 1000.0
    else:
        for key in s_keys:
            if spec.get(key) is not None:
                value = _number(spec[key], f"schedule.{key}")
                break
        else:
            raise ValueError(f"schedule of kind {what!r} needs {ms_key} (milliseconds)")
    if not math.isfinite(value) or abs(value) > MAX_SPAN_S:
        raise ValueError(f"schedule.{ms_key} must be a finite number of at most {MAX_SPAN_S:g} s")
    return value


# -- 5-field cron expressions --------------------------------------------------------------

_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


def _cron_field(text: str, lo: int, hi: int) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, step_s = part.split("/", 1)
            step = int(step_s)
            if step < 1:
                raise ValueError("step must be >= 1")
        if part in ("*", ""):
            a, b = lo, hi
        elif "-" in part:
            a_s, b_s = part.split("-", 1)
            a, b = int(a_s), int(b_s)
        else:
            a = b = int(part)
            if step != 1:
                b = hi
        if a < lo or b > hi or a > b:
            raise ValueError(f"{part} is outside {lo}-{hi}")
        out.update(range(a, b + 1, step))
    return out


def parse_cron(expr: str) -> builtins.list[set[int]]:
    """Parse a 5-field cron expression (minute hour day month weekday; numbers, ``*``, ``a-b``,
    ``*/n``, lists; weekday 0 or 7 = Sunday). Raises ValueError."""
    parts = expr.split()
    if len(parts) != 5:
        raise ValueError(f"cron expression {expr!r} must have 5 fields (min hour day month dow)")
    try:
        fields = [
            _cron_field(p.replace("7", "0") if i == 4 else p, *_CRON_RANGES[i])
            for i, p in enumerate(parts)
        ]
    except ValueError as exc:
        raise ValueError(f"cron expression {expr!r}: {exc}") from None
    return fields


def cron_next(expr: str, after: float) -> float:
    """Epoch seconds of the first minute after ``after`` matching ``expr`` (UTC)."""
    minutes, hours, days, months, dows = parse_cron(expr)
    t = datetime.fromtimestamp(after, UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    limit = t + timedelta(days=366 * 4)
    while t < limit:
        if t.month not in months:
            t = (t.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
            continue
        if t.day not in days or (t.weekday() + 1) % 7 not in dows:
            t = t.replace(hour=0, minute=0) + timedelta(days=1)
            continue
        if t.hour not in hours:
            t = t.replace(minute=0) + timedelta(hours=1)
            continue
        if t.minute in minutes:
            return t.timestamp()
        t += timedelta(minutes=1)
    raise ValueError(f"cron expression {expr!r} never fires")


# -- the scheduler -------------------------------------------------------------------------


class CronScheduler:
    """The jobs of one trial, fired by asyncio tasks on the running loop.

    ``sandbox`` runs command jobs (``exec_timeout_s`` default seconds, output capped at
    ``output_bytes`` keeping head and tail). Methods: :meth:`add`, :meth:`update`,
    :meth:`remove`, :meth:`run`, :meth:`list`, :meth:`status`, :meth:`pending_messages`,
    :meth:`stop`. Invalid job specs raise ValueError with a message fit for the model.
    """

    def __init__(
        self, sandbox: Sandbox, *, exec_timeout_s: float = 600.0, output_bytes: int = 200_000
    ):
        self.sandbox = sandbox
        self.exec_timeout_s = exec_timeout_s
        self.output_bytes = output_bytes
        self.jobs: dict[str, CronJob] = {}
        self._messages: list[CronMessage] = []
        self._dropped = 0
        """Messages dropped from the queue since the last delivery (:meth:`_queue`)."""
        self._next_id = 0
        self._stopped = False
        self._message_event = asyncio.Event()

    # normalisation -----------------------------------------------------------------------
    def _schedule(self, job: dict[str, Any]) -> dict[str, Any]:
        spec = job.get("schedule")
        if isinstance(spec, str):
            spec = {"kind": "cron", "expr": spec} if len(spec.split()) == 5 else {"at": spec}
        if spec is None:
            spec = {k: v for k, v in job.items() if k not in ("payload", "name")}
        if not isinstance(spec, dict):
            raise ValueError("job.schedule must be an object such as {kind: every, everyMs: 60000}")
        kind = spec.get("kind")
        if kind is None:
            if spec.get("at") is not None or spec.get("atMs") is not None:
                kind = "at"
            elif any(spec.get(k) is not None for k in ("everyMs", "everySeconds", "every")):
                kind = "every"
            elif any(spec.get(k) is not None for k in ("delayMs", "delaySeconds", "delay")):
                kind = "delay"
            elif spec.get("cron") is not None or spec.get("expr") is not None:
                kind = "cron"
        if kind == "at":
            at = spec.get("at") if spec.get("at") is not None else spec.get("atMs")
            return {"kind": "at", "at": _iso(_parse_time(at), "schedule.at")}
        if kind == "every":
            every = _seconds(spec, "everyMs", ("everySeconds", "seconds", "every"), "every")
            if every < MIN_INTERVAL_S:
                raise ValueError(f"schedule.everyMs must be >= {MIN_INTERVAL_S * 1000:g}")
            return {"kind": "every", "everyMs": round(every * 1000)}
        if kind in ("delay", "in", "after"):
            delay = _seconds(spec, "delayMs", ("delaySeconds", "seconds", "delay"), "delay")
            if delay < 0:
                raise ValueError("schedule.delayMs must be >= 0")
            return {
                "kind": "delay",
                "delayMs": round(delay * 1000),
                "at": _iso(time.time() + delay, "schedule.delayMs"),
            }
        if kind == "cron":
            expr = str(spec.get("expr") or spec.get("cron") or "")
            parse_cron(expr)
            return {"kind": "cron", "expr": expr, "tz": "UTC"}
        raise ValueError(
            "job.schedule is missing or has an unknown kind; use {kind: at, at: ISO time}, "
            "{kind: every, everyMs: N}, {kind: delay, delayMs: N} or {kind: cron, expr: '...'}"
        )

    def _payload(self, job: dict[str, Any], text: str | None = None) -> dict[str, Any]:
        p = job.get("payload")
        if p is None:
            if job.get("command") is not None:
                p = {"kind": "command", "command": job["command"]}
                for k in ("workdir", "timeout"):
                    if job.get(k) is not None:
                        p[k] = job[k]
            elif job.get("text") is not None or job.get("message") is not None or text:
                p = {"kind": "systemEvent", "text": job.get("text") or job.get("message") or text}
        if not isinstance(p, dict):
            raise ValueError(
                "job.payload is missing; use {kind: command, command: '...'} or "
                "{kind: systemEvent, text: '...'}"
            )
        kind = p.get("kind") or ("command" if p.get("command") else "systemEvent")
        if kind in COMMAND_KINDS:
            command = p.get("command")
            if not isinstance(command, str) or not command.strip():
                raise ValueError("payload.command must be a non-empty shell command")
            out: dict[str, Any] = {"kind": "command", "command": command}
            if p.get("workdir"):
                out["workdir"] = resolve_path(str(p["workdir"]))
            if p.get("timeout") is not None:
                t = _number(p["timeout"], "payload.timeout")
                if not 0 < t <= MAX_SPAN_S:
                    raise ValueError(
                        f"payload.timeout must be a positive number of seconds, at most "
                        f"{MAX_SPAN_S:g}"
                    )
                out["timeout"] = t
            return out
        if kind in MESSAGE_KINDS:
            body = p.get("text") if p.get("text") is not None else p.get("message")
            if not isinstance(body, str) or not body.strip():
                raise ValueError(f"payload of kind {kind} needs a non-empty text")
            return {"kind": kind, "text": body}
        raise ValueError(f"payload.kind {kind!r} is unknown; use command, systemEvent or agentTurn")

    # job life ------------------------------------------------------------------------------
    def _first_run(self, job: CronJob, now: float) -> float | None:
        s = job.schedule
        if s["kind"] in ("at", "delay"):
            return _parse_time(s["at"])
        if s["kind"] == "every":
            return now + s["everyMs"] / 1000.0
        return cron_next(s["expr"], now)

    def _arm(self, job: CronJob) -> None:
        if job.task is not None and job.task is not asyncio.current_task():
            job.task.cancel()
        job.task = None
        if not job.enabled or self._stopped:
            job.next_run = None
            return
        job.next_run = self._first_run(job, time.time())
        job.task = asyncio.create_task(self._loop(job), name=f"cron-{job.id}")

    async def _loop(self, job: CronJob) -> None:
        while (
            job.enabled
            and job.next_run is not None
            and not self._stopped
            and self.jobs.get(job.id) is job  # not removed (even if a cancel went astray)
        ):
            await asyncio.sleep(max(0.0, job.next_run - time.time()))
            try:
                await self._fire(job)
            except InfrastructureError:
                job.enabled = False
                job.next_run = None
                return
            s = job.schedule
            if s["kind"] in ("at", "delay"):
                job.enabled = False
                job.next_run = None
            elif s["kind"] == "every":
                job.next_run = max(job.next_run + s["everyMs"] / 1000.0, time.time())
            else:
                job.next_run = cron_next(s["expr"], time.time())

    async def _fire(self, job: CronJob) -> CronRun:
        started = time.time()
        p = job.payload
        if p["kind"] == "command":
            timeout = p.get("timeout", self.exec_timeout_s)
            try:
                r = await self.sandbox.exec(
                    p["command"],
                    cwd=p.get("workdir", WORKSPACE),
                    timeout_s=timeout,
                    merge_stderr=True,
                )
            except InfrastructureError as exc:
                job.runs.append(CronRun(job.id, _iso(started), "error", output=str(exc)))
                raise
            data, _ = truncate_middle((r.stdout + r.stderr).encode(), self.output_bytes, r.omitted)
            status = "timeout" if r.timed_out else ("ok" if r.exit_code == 0 else "error")
            run = CronRun(
                job_id=job.id,
                started_at=_iso(started),
                status=status,
                duration_ms=int(r.duration_s * 1000),
                exit_code=None if r.timed_out else r.exit_code,
                output=data.decode("utf-8", "replace").rstrip("\n"),
            )
        else:
            self._queue(CronMessage(job.id, p["text"], _iso(started)))
            run = CronRun(job_id=job.id, started_at=_iso(started), status="ok", output=p["text"])
        kept = run.output[-MAX_RUN_OUTPUT_KEPT:] if len(run.output) > MAX_RUN_OUTPUT_KEPT else None
        job.runs.append(run if kept is None else replace(run, output=kept))
        del job.runs[:-MAX_RUNS_KEPT]
        return run

    # public API ----------------------------------------------------------------------------
    def add(self, job: dict[str, Any], text: str | None = None) -> CronJob:
        """Validate, store and arm a job; returns it. Raises ValueError for a bad spec."""
        if self._stopped:
            raise ValueError("the scheduler has stopped (the trial is ending)")
        if len(self.jobs) >= MAX_JOBS:
            raise ValueError(f"at most {MAX_JOBS} cron jobs at once: remove one first")
        schedule = self._schedule(job)
        payload = self._payload(job, text)
        self._next_id += 1
        jid = f"job-{self._next_id}"
        cj = CronJob(
            id=jid,
            name=str(job.get("name") or jid),
            schedule=schedule,
            payload=payload,
            enabled=job.get("enabled", True) is not False,
        )
        self.jobs[jid] = cj
        self._arm(cj)
        return cj

    def get(self, job_id: str) -> CronJob:
        """The job ``job_id`` (raises KeyError naming the known ids)."""
        try:
            return self.jobs[job_id]
        except KeyError:
            known = ", ".join(self.jobs) or "none"
            raise KeyError(f"no cron job {job_id!r} (known jobs: {known})") from None

    def update(self, job_id: str, patch: dict[str, Any]) -> CronJob:
        """Change name, enabled, schedule or payload of a job and re-arm it."""
        job = self.get(job_id)
        if "schedule" in patch or any(
            k in patch for k in ("at", "atMs", "everyMs", "everySeconds", "delayMs", "cron")
        ):
            job.schedule = self._schedule(patch)
        if any(k in patch for k in ("payload", "command", "text", "message")):
            job.payload = self._payload(patch)
        if "name" in patch:
            job.name = str(patch["name"])
        if "enabled" in patch:
            job.enabled = bool(patch["enabled"])
        self._arm(job)
        return job

    def remove(self, job_id: str) -> CronJob:
        job = self.get(job_id)
        if job.task is not None:
            job.task.cancel()
        del self.jobs[job_id]
        return job

    async def run(self, job_id: str, force: bool = True) -> CronRun | None:
        """Fire a job now (``force``) or only if it is due; the run, or None if not due."""
        job = self.get(job_id)
        if not force and (job.next_run is None or job.next_run > time.time()):
            return None
        return await self._fire(job)

    def list(self, include_disabled: bool = False) -> builtins.list[CronJob]:
        return [j for j in self.jobs.values() if include_disabled or j.enabled]

    def status(self) -> dict[str, Any]:
        nexts = [j.next_run for j in self.jobs.values() if j.next_run is not None]
        return {
            "running": not self._stopped,
            "jobs": len(self.jobs),
            "enabledJobs": sum(1 for j in self.jobs.values() if j.enabled),
            "nextRunAt": _iso(min(nexts)) if nexts else None,
            "pendingMessages": len(self._messages),
        }

    def wake(self, text: str) -> CronMessage:
        """Queue ``text`` for the agent now (OpenClaw's ``wake``)."""
        msg = CronMessage("wake", text, _iso(time.time()))
        self._queue(msg)
        return msg

    def _queue(self, msg: CronMessage) -> None:
        """Add ``msg`` to the messages waiting for the agent (at most
        :data:`MAX_PENDING_MESSAGES`: the oldest dropped and counted)."""
        self._messages.append(msg)
        if len(self._messages) > MAX_PENDING_MESSAGES:
            del self._messages[0]
            self._dropped += 1
        self._message_event.set()

    def pending_messages(self) -> builtins.list[CronMessage]:
        """Take the fired message jobs not yet delivered (oldest first) and clear the queue; a
        first message says how many older ones were dropped, when some were."""
        out, self._messages = self._messages, []
        if self._dropped:
            note = (
                f"{self._dropped} earlier cron message(s) dropped: more than "
                f"{MAX_PENDING_MESSAGES} waited for this turn"
            )
            out.insert(0, CronMessage("dropped", note, _iso(time.time())))
            self._dropped = 0
        self._message_event.clear()
        return out

    async def wait_message(self, timeout_s: float | None = None) -> bool:
        """Wait until a message is pending (True) or ``timeout_s`` seconds pass (False)."""
        if self._messages:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._message_event.wait(), timeout_s)
        return bool(self._messages)

    async def stop(self) -> None:
        """Cancel every job's timer (idempotent). Jobs stay listed; nothing fires after."""
        self._stopped = True
        tasks = [j.task for j in self.jobs.values() if j.task is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        for j in self.jobs.values():
            j.task = None
            j.next_run = None


def scheduler(ctx: ToolContext) -> CronScheduler:
    """``ctx.cron``, created on first use."""
    if ctx.cron is None:
        ctx.cron = CronScheduler(
            ctx.sandbox, exec_timeout_s=ctx.exec_timeout_s, output_bytes=ctx.output_bytes
        )
    return ctx.cron


CRON_ACTIONS = ("status", "list", "add", "update", "remove", "run", "runs", "wake")


async def cron_tool(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """The ``cron`` tool (actions in :data:`CRON_ACTIONS`; see the module docstring).

    Errors: bad job spec, unknown jobId, missing jobId/text, a stopped scheduler.
    """
    action = args["action"]
    sched = scheduler(ctx)
    if action == "status":
        return json_result(sched.status())
    if action == "list":
        jobs = sched.list(bool(args.get("includeDisabled")))
        return json_result({"jobs": [j.as_dict() for j in jobs]})
    if action == "add":
        job = args.get("job")
        if job is None:
            job = {k: v for k, v in args.items() if k not in ("action", "text")}
            if not job and not args.get("text"):
                return error("cron: add needs `job` (see the tool description for its shape)")
        try:
            added = sched.add(dict(job), args.get("text"))
        except (ValueError, TypeError) as exc:
            return error(f"cron: add: {exc}")
        return json_result({"ok": True, "job": added.as_dict()})
    if action == "wake":
        text = args.get("text")
        if not text:
            return error("cron: wake needs `text` (the message to deliver)")
        msg = sched.wake(text)
        return json_result({"ok": True, "queued": msg.text, "at": msg.fired_at})

    job_id = args.get("jobId") or args.get("id")
    if not job_id:
        return error(f"cron: action {action!r} needs `jobId`")
    try:
        if action == "remove":
            job = sched.remove(job_id)
            return json_result({"ok": True, "removed": job.id})
        if action == "update":
            patch = args.get("patch")
            if not isinstance(patch, dict) or not patch:
                return error("cron: update needs `patch` (fields of the job to change)")
            job = sched.update(job_id, patch)
            return json_result({"ok": True, "job": job.as_dict()})
        if action == "run":
            run = await sched.run(job_id, force=args.get("runMode", "force") != "due")
            if run is None:
                return json_result({"ok": True, "ran": False, "reason": "not due"})
            return json_result({"ok": True, "ran": True, "run": run.as_dict()})
        if action == "runs":
            job = sched.get(job_id)
            return json_result({"jobId": job.id, "runs": [r.as_dict() for r in job.runs]})
    except KeyError as exc:
        return error(f"cron: {exc.args[0]}")
    except (ValueError, TypeError) as exc:
        return error(f"cron: {action}: {exc}")
    return error(f"cron: unknown action {action!r}; use one of {', '.join(CRON_ACTIONS)}")


TOOLS = {"cron": cron_tool}
