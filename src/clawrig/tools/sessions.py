"""Sessions and sub-agents of one trial: ``sessions_*``, ``session_status``, ``subagents``.

A :class:`SessionManager` (one per trial, in ``ToolContext.sessions``) holds the trial's
sessions: the main agent's and those of the sub-agents it spawns. A sub-agent is real: the
manager is built with a ``runner`` (``async runner(session) -> str``) that the agent loop
supplies; it runs a model loop on the same sandbox with its own transcript, using
``session.context`` (a :class:`ToolContext` for the child: same sandbox, web policy, cron
scheduler and manager, its own ``session_key`` and ``state``) and returns its final answer.

Runner contract:

- ``session.task`` is the task text; ``session.messages`` the session's history so far (empty
  on the first run; a session finished earlier and sent a new message is run again, so a runner
  continues from its history);
- before each model call it takes new messages with ``session.drain_inbox()`` (steering from
  ``subagents steer`` and ``sessions_send``) and may wait for some with
  ``await session.wait_inbox(seconds)``;
- it may add intermediate messages (assistant tool calls, tool results; OpenAI chat dicts) with
  ``session.record(message)``; the manager records the task, every message sent to the session
  and the runner's final answer itself;
- ``session.model`` / ``session.thinking`` are the requested model override and thinking level
  (None: the trial's). Cancellation (``subagents kill``, ``runTimeoutSeconds``) arrives as
  ``asyncio.CancelledError``;
- a runner's exception makes the session ``failed`` (its parent reads why), except that an
  :class:`clawrig.errors.InfrastructureError` (a provider outage) is also kept as the
  manager's ``fatal``: the agent loop re-raises it (:meth:`SessionManager.raise_fatal`), so it
  ends the trial as an infrastructure error rather than counting against the agent.

Session keys: the main agent is ``main`` (``ToolContext.session_key``'s default); the n-th
sub-agent of a trial is ``agent:<agentId>:subagent:<n>`` (agentId defaults to ``main``), as
OpenClaw's ``agent:main:subagent:<id>``. A label given at spawn works wherever a key does.
Sub-agents cannot spawn further sub-agents unless ``max_depth`` > 1 (OpenClaw's default).

Results flow back OpenClaw's way: a finished sub-agent's answer is handed to its parent by
``sessions_yield`` (which ends the caller's turn: its result has ``details["yielded"] = True``)
or by :meth:`SessionManager.take_results`, which the agent loop may call between turns. The main
session's inbox (messages other sessions send to ``main``) is read by the agent loop with
``manager.session("main").drain_inbox()``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from clawrig.errors import InfrastructureError
from clawrig.tools._common import WORKSPACE, error, json_result, resolve_path
from clawrig.tools.base import ToolContext, ToolResult

MAIN_KEY = "main"
RUNNING = "running"
FINISHED = ("done", "failed", "timeout", "killed")
YIELD_WAIT_S = 600.0
"""Longest time sessions_yield waits for a running sub-agent to finish (seconds)."""
ATTACH_DIR = f"{WORKSPACE}/.attachments"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class Session:
    """One agent session of the trial.

    ``status``: idle (main, or not started), running, done, failed, timeout, killed.
    ``messages``: OpenAI chat dicts (role, content, optional tool_calls / tool_call_id / name),
    each with a ``timestamp`` (ms). ``result``/``error``: the last run's answer or failure.
    """

    key: str
    kind: str = "subagent"
    label: str | None = None
    parent: str | None = None
    depth: int = 0
    task: str = ""
    agent_id: str = "main"
    status: str = "idle"
    messages: list[dict[str, Any]] = field(default_factory=list)
    result: str | None = None
    error: str | None = None
    model: str | None = None
    thinking: str | None = None
    cwd: str = WORKSPACE
    context: ToolContext | None = None
    run_timeout_s: float | None = None
    cleanup: str = "keep"
    runs: int = 0
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    reported: bool = True
    _inbox: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _manager: SessionManager | None = None

    def record(self, message: dict[str, Any]) -> None:
        """Append a chat message to the session's history (a ``timestamp`` is added)."""
        msg = dict(message)
        msg.setdefault("timestamp", int(time.time() * 1000))
        self.messages.append(msg)
        self._touch()

    def drain_inbox(self) -> list[str]:
        """Take the messages sent to this session and not yet read (oldest first)."""
        out, self._inbox = self._inbox, []
        return out

    async def wait_inbox(self, timeout_s: float | None = None) -> bool:
        """Wait until the inbox holds a message (True) or ``timeout_s`` passes (False)."""
        assert self._manager is not None
        return await self._manager._wait(lambda: bool(self._inbox), timeout_s)

    def _touch(self) -> None:
        self.updated = time.time()
        if self._manager is not None:
            self._manager._bump()

    def info(self, message_limit: int = 0) -> dict[str, Any]:
        """A JSON-able summary (sessions_list / session_status)."""
        end = self.ended or time.time()
        out: dict[str, Any] = {
            "sessionKey": self.key,
            "kind": self.kind,
            "label": self.label,
            "status": self.status,
            "parent": self.parent,
            "agentId": self.agent_id,
            "model": self.model,
            "createdAt": datetime.fromtimestamp(self.created, UTC).isoformat(),
            "updatedAt": datetime.fromtimestamp(self.updated, UTC).isoformat(),
            "runtimeMs": int((end - self.started) * 1000) if self.started else 0,
            "messageCount": len(self.messages),
        }
        if self.kind == "subagent":
            out["task"] = self.task
            out["result"] = self.result
            if self.error:
                out["error"] = self.error
        if message_limit > 0:
            out["messages"] = visible_messages(self.messages, include_tools=False)[-message_limit:]
        return out


def visible_messages(messages: list[dict[str, Any]], include_tools: bool) -> list[dict[str, Any]]:
    """History as sessions_history shows it: without tool calls and results unless
    ``include_tools``."""
    if include_tools:
        return list(messages)
    out = []
    for m in messages:
        if m.get("role") == "tool":
            continue
        if m.get("tool_calls"):
            if not m.get("content"):
                continue
            m = {k: v for k, v in m.items() if k != "tool_calls"}
        out.append(m)
    return out


Runner = Callable[[Session], Awaitable[str]]


class SessionManager:
    """The sessions of one trial (see the module docstring for the runner contract).

    ``runner``: starts sub-agents (None: sessions_spawn is an error result saying why:
    ``unavailable``, the reason there is none). ``max_depth``:
    how deep sub-agents may nest (1 = only the main agent spawns). ``max_children``: running
    sub-agents per parent at once. ``fatal``: the first
    :class:`clawrig.errors.InfrastructureError` a sub-agent's run ended on (its session is
    ``failed`` too), re-raised by :meth:`raise_fatal`.
    """

    def __init__(
        self,
        runner: Runner | None = None,
        *,
        max_depth: int = 1,
        max_children: int = 5,
        main_key: str = MAIN_KEY,
        unavailable: str = "no agent runner",
    ):
        self.runner = runner
        self.unavailable = unavailable
        self.max_depth = max_depth
        self.max_children = max_children
        self.main_key = main_key
        self.sessions: dict[str, Session] = {}
        self._count = 0
        self._event = asyncio.Event()
        self._closed = False
        self.fatal: InfrastructureError | None = None
        main = Session(key=main_key, kind="main", depth=0, _manager=self)
        self.sessions[main_key] = main

    # change notification -----------------------------------------------------------------
    def _bump(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def _wait(self, pred: Callable[[], bool], timeout_s: float | None) -> bool:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not pred():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), remaining)
        return True

    # lookup --------------------------------------------------------------------------------
    def session(self, key: str) -> Session:
        """The session with key (or label) ``key``; creates ``key`` when it is the main key
        of a context the manager has not seen. Raises KeyError naming the known sessions."""
        if key in self.sessions:
            return self.sessions[key]
        for s in self.sessions.values():
            if s.label and s.label == key:
                return s
        known = ", ".join(self.sessions)
        raise KeyError(f"no session {key!r} (known sessions: {known})")

    def caller(self, ctx: ToolContext) -> Session:
        """The calling session of ``ctx`` (registered on first use)."""
        key = ctx.session_key
        if key not in self.sessions:
            self.sessions[key] = Session(key=key, kind="main", _manager=self)
        return self.sessions[key]

    def children(self, key: str) -> list[Session]:
        return [s for s in self.sessions.values() if s.parent == key]

    # runs ----------------------------------------------------------------------------------
    def spawn(
        self,
        parent_ctx: ToolContext,
        task: str,
        *,
        label: str | None = None,
        agent_id: str | None = None,
        model: str | None = None,
        thinking: str | None = None,
        cwd: str | None = None,
        run_timeout_s: float | None = None,
        cleanup: str = "keep",
    ) -> Session:
        """Create a sub-agent session of ``parent_ctx``'s session and start its run.
        Raises ValueError (no runner, too deep, too many running, label taken)."""
        if self.runner is None:
            raise ValueError(f"sub-agents are not available in this trial ({self.unavailable})")
        if self._closed:
            raise ValueError("the trial is ending; no new sub-agents")
        parent = self.caller(parent_ctx)
        if parent.depth + 1 > self.max_depth:
            raise ValueError(
                f"session {parent.key} may not spawn sub-agents (max depth {self.max_depth})"
            )
        running = [c for c in self.children(parent.key) if c.status == RUNNING]
        if len(running) >= self.max_children:
            raise ValueError(
                f"{len(running)} sub-agents are already running (max {self.max_children}); "
                "wait with sessions_yield or kill one with subagents"
            )
        if label:
            try:
                self.session(label)
            except KeyError:
                pass
            else:
                raise ValueError(f"label {label!r} is already used by another session")
        self._count += 1
        aid = agent_id or "main"
        key = f"agent:{aid}:subagent:{self._count}"
        s = Session(
            key=key,
            kind="subagent",
            label=label,
            parent=parent.key,
            depth=parent.depth + 1,
            task=task,
            agent_id=aid,
            model=model,
            thinking=thinking,
            cwd=cwd or WORKSPACE,
            run_timeout_s=run_timeout_s,
            cleanup=cleanup,
            _manager=self,
        )
        s.context = dataclasses.replace(parent_ctx, session_key=key, state={}, sessions=self)
        self.sessions[key] = s
        s.record({"role": "user", "content": task})
        self._start(s)
        return s

    def _start(self, s: Session) -> None:
        s.status = RUNNING
        s.runs += 1
        s.started = time.time()
        s.ended = None
        s.result = None
        s.error = None
        s.reported = False
        s._task = asyncio.create_task(self._run(s), name=f"subagent-{s.key}")
        s._touch()

    async def _run(self, s: Session) -> None:
        assert self.runner is not None
        try:
            if s.run_timeout_s:
                answer = await asyncio.wait_for(self.runner(s), s.run_timeout_s)
            else:
                answer = await self.runner(s)
        except TimeoutError:
            s.status, s.error = "timeout", f"run timed out after {s.run_timeout_s:g} s"
        except asyncio.CancelledError:
            s.status, s.error = "killed", "killed"
        except Exception as exc:  # the sub-agent failed; the parent reads why
            s.status, s.error = "failed", f"{type(exc).__name__}: {exc}"
            if isinstance(exc, InfrastructureError) and self.fatal is None:
                # the harness's or the provider's failure, not the sub-agent's: the trial's
                self.fatal = exc
        else:
            s.status, s.result = "done", answer
            last = s.messages[-1] if s.messages else {}
            if not (last.get("role") == "assistant" and last.get("content") == answer):
                s.record({"role": "assistant", "content": answer})
        finally:
            s.ended = time.time()
            s._touch()

    def send(self, sender: str, target: Session, message: str) -> None:
        """Deliver ``message`` to ``target``'s inbox; a finished sub-agent runs again.
        Raises ValueError (to itself, to a killed session, no runner to resume)."""
        if target.key == sender:
            raise ValueError("a session cannot send a message to itself")
        if target.status == "killed":
            raise ValueError(f"session {target.key} was killed; spawn a new sub-agent")
        target.record({"role": "user", "content": message, "from": sender})
        target._inbox.append(message)
        target._touch()
        if target.kind == "subagent" and target.status in FINISHED:
            if self._closed:  # (close() is clearing the sessions: a run started now is lost)
                raise ValueError("the trial is ending; sub-agents do not run again")
            if self.runner is None:
                raise ValueError(f"sub-agents cannot be resumed in this trial ({self.unavailable})")
            self._start(target)

    async def wait_reply(self, target: Session, after: int, timeout_s: float) -> str | None:
        """The first assistant message of ``target`` after history index ``after`` (its
        content), waiting up to ``timeout_s`` seconds; None when none came."""

        def reply() -> str | None:
            for m in target.messages[after:]:
                if m.get("role") == "assistant" and m.get("content") and not m.get("tool_calls"):
                    return str(m["content"])
            return None

        await self._wait(
            lambda: (
                reply() is not None or (target.kind == "subagent" and target.status in FINISHED)
            ),
            timeout_s,
        )
        return reply()

    async def kill(self, s: Session) -> bool:
        """Cancel a running sub-agent (True) or do nothing (False)."""
        if s.status != RUNNING or s._task is None:
            return False
        s._task.cancel()
        with contextlib.suppress(BaseException):
            await s._task
        if s.status == RUNNING:  # cancelled before its run even started
            s.status, s.error, s.ended = "killed", "killed", time.time()
            s._touch()
        return True

    def take_results(self, parent_key: str) -> list[dict[str, Any]]:
        """Results of ``parent_key``'s finished sub-agents not yet handed over (marks them
        handed over; sessions with ``cleanup="delete"`` are then forgotten)."""
        out = []
        for c in self.children(parent_key):
            if c.status in FINISHED and not c.reported:
                c.reported = True
                item = {"sessionKey": c.key, "label": c.label, "status": c.status}
                item["result"] = c.result
                if c.error:
                    item["error"] = c.error
                out.append(item)
                if c.cleanup == "delete":
                    del self.sessions[c.key]
        return out

    def raise_fatal(self) -> None:
        """Raise the first :class:`clawrig.errors.InfrastructureError` a sub-agent's run
        ended on (a :class:`~clawrig.errors.ProviderError`: the provider failed during it),
        so the trial ends as that error instead of the agent being scored with a sub-agent
        it never got; nothing when there is none. Agent loops call it between turns."""
        if self.fatal is not None:
            raise self.fatal

    async def close(self) -> None:
        """Cancel every running sub-agent (end of the trial). Idempotent."""
        self._closed = True
        for s in list(self.sessions.values()):
            await self.kill(s)
        # references back to this manager (a session's, its tool context's, and through the
        # runner the agent's context's): cycles reference counting cannot free at the end
        self.runner = None
        for s in self.sessions.values():
            s._manager, s._task, s.context = None, None, None
        self.fatal = None  # its traceback's frames hold this manager (raised: raise_fatal)


# -- tools ---------------------------------------------------------------------------------


def _manager(ctx: ToolContext, tool: str) -> SessionManager | ToolResult:
    if isinstance(ctx.sessions, SessionManager):
        return ctx.sessions
    return error(f"{tool}: sessions are not available in this trial (no session manager)")


def _resolve(mgr: SessionManager, key: str, tool: str) -> Session | ToolResult:
    try:
        return mgr.session(key)
    except KeyError as exc:
        return error(f"{tool}: {exc.args[0]}")


async def sessions_list(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """List sessions (filters: kinds, activeMinutes, limit; messageLimit adds messages)."""
    mgr = _manager(ctx, "sessions_list")
    if isinstance(mgr, ToolResult):
        return mgr
    mgr.caller(ctx)
    kinds = {k.lower() for k in args.get("kinds") or []}
    unknown = kinds - {"main", "subagent"}
    if unknown:
        return error(f"sessions_list: unknown kinds {sorted(unknown)} (use main, subagent)")
    rows = list(mgr.sessions.values())
    if kinds:
        rows = [s for s in rows if s.kind in kinds]
    if args.get("activeMinutes"):
        since = time.time() - float(args["activeMinutes"]) * 60
        rows = [s for s in rows if s.updated >= since or s.status == RUNNING]
    rows.sort(key=lambda s: s.updated, reverse=True)
    if args.get("limit"):
        rows = rows[: int(args["limit"])]
    limit = int(args.get("messageLimit") or 0)
    return json_result({"count": len(rows), "sessions": [s.info(limit) for s in rows]})


async def sessions_history(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Messages of a session. Errors: unknown session."""
    mgr = _manager(ctx, "sessions_history")
    if isinstance(mgr, ToolResult):
        return mgr
    mgr.caller(ctx)
    s = _resolve(mgr, args["sessionKey"], "sessions_history")
    if isinstance(s, ToolResult):
        return s
    msgs = visible_messages(s.messages, bool(args.get("includeTools")))
    if args.get("limit"):
        msgs = msgs[-int(args["limit"]) :]
    return json_result({"sessionKey": s.key, "status": s.status, "messages": msgs})


async def sessions_send(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Send a message to a session; with timeoutSeconds > 0 wait for its reply.

    Errors: no target (sessionKey or label), unknown session, sending to itself or to a
    killed session."""
    mgr = _manager(ctx, "sessions_send")
    if isinstance(mgr, ToolResult):
        return mgr
    me = mgr.caller(ctx)
    key = args.get("sessionKey") or args.get("label")
    if not key:
        return error("sessions_send: name the target with `sessionKey` or `label`")
    target = _resolve(mgr, key, "sessions_send")
    if isinstance(target, ToolResult):
        return target
    if args.get("agentId") and target.agent_id != args["agentId"]:
        return error(
            f"sessions_send: session {target.key} belongs to agent {target.agent_id!r}, "
            f"not {args['agentId']!r}"
        )
    after = len(target.messages)
    try:
        mgr.send(me.key, target, args["message"])
    except ValueError as exc:
        return error(f"sessions_send: {exc}")
    timeout = float(args.get("timeoutSeconds") or 0)
    if timeout <= 0:
        return json_result({"status": "sent", "sessionKey": target.key})
    reply = await mgr.wait_reply(target, after + 1, timeout)
    if reply is None:
        out: dict[str, Any] = {"status": "timeout", "sessionKey": target.key}
        if target.status in FINISHED and target.error:
            out["status"] = target.status
            out["error"] = target.error
        else:
            out["note"] = f"no reply within {timeout:g} s; the message was delivered"
        return json_result(out)
    return json_result({"status": "ok", "sessionKey": target.key, "reply": reply})


async def sessions_yield(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """End the caller's turn and hand over finished sub-agents' results (waiting for a
    running one, up to :data:`YIELD_WAIT_S`, when none has finished)."""
    mgr = _manager(ctx, "sessions_yield")
    if isinstance(mgr, ToolResult):
        return mgr
    me = mgr.caller(ctx)
    if args.get("message"):
        me.record({"role": "assistant", "content": args["message"], "yield": True})

    def ready() -> bool:
        kids = mgr.children(me.key)
        return any(c.status in FINISHED and not c.reported for c in kids) or not any(
            c.status == RUNNING for c in kids
        )

    await mgr._wait(ready, YIELD_WAIT_S)
    results = mgr.take_results(me.key)
    running = [c.key for c in mgr.children(me.key) if c.status == RUNNING]
    payload: dict[str, Any] = {"status": "yielded", "results": results, "running": running}
    if not results and not running:
        payload["note"] = "no sub-agent results pending"
    res = json_result(payload)
    assert res.details is not None
    res.details["yielded"] = True
    return res


def _attachments(items: list[dict[str, Any]], mount: str) -> list[tuple[str, bytes]] | ToolResult:
    out = []
    for i, item in enumerate(items):
        name = item.get("name")
        content = item.get("content")
        if not isinstance(name, str) or not isinstance(content, str):
            return error(f"sessions_spawn: attachments[{i}] needs `name` and `content` strings")
        if not name or "/" in name or name in (".", ".."):
            return error(
                f"sessions_spawn: attachments[{i}].name {name!r} must be a plain file name"
            )
        if item.get("encoding") == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError):
                return error(f"sessions_spawn: attachments[{i}].content is not valid base64")
        else:
            data = content.encode("utf-8")
        out.append((f"{mount}/{name}", data))
    return out


async def sessions_spawn(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Start a sub-agent (returns at once, or waits ``timeoutSeconds`` for its result).

    Errors: no manager/runner, runtime other than subagent, too deep, too many running, a
    taken label, bad attachments, unknown resumeSessionId, an empty task.
    """
    mgr = _manager(ctx, "sessions_spawn")
    if isinstance(mgr, ToolResult):
        return mgr
    task = args["task"].strip()
    if not task:
        return error("sessions_spawn: `task` is empty")
    if args.get("runtime") not in (None, "subagent"):
        return error(f"sessions_spawn: runtime {args['runtime']!r} is not available; use subagent")
    me = mgr.caller(ctx)
    if args.get("resumeSessionId"):
        target = _resolve(mgr, args["resumeSessionId"], "sessions_spawn")
        if isinstance(target, ToolResult):
            return target
        try:
            mgr.send(me.key, target, task)
        except ValueError as exc:
            return error(f"sessions_spawn: {exc}")
        return json_result({"status": "accepted", "childSessionKey": target.key, "resumed": True})
    if mgr.runner is None:
        return error(
            f"sessions_spawn: sub-agents are not available in this trial ({mgr.unavailable})"
        )
    # stage attachments before the child starts
    files: list[tuple[str, bytes]] = []
    if args.get("attachments"):
        mount = (args.get("attachAs") or {}).get("mountPath")
        mount = resolve_path(mount) if mount else f"{ATTACH_DIR}/{mgr._count + 1}"
        got = _attachments(args["attachments"], mount)
        if isinstance(got, ToolResult):
            return got
        files = got
        for path, data in files:
            await ctx.sandbox.write_file(path, data)
        task += "\n\nAttached files:\n" + "\n".join(f"- {p}" for p, _ in files)
    if ctx.cron is None:  # share one scheduler between the agent and its sub-agents
        from clawrig.tools.cron import scheduler

        scheduler(ctx)
    run_timeout = args.get("runTimeoutSeconds")
    try:
        child = mgr.spawn(
            ctx,
            task,
            label=args.get("label"),
            agent_id=args.get("agentId"),
            model=args.get("model"),
            thinking=args.get("thinking"),
            cwd=resolve_path(args["cwd"]) if args.get("cwd") else None,
            run_timeout_s=float(run_timeout) if run_timeout else None,
            cleanup=args.get("cleanup") or "keep",
        )
    except ValueError as exc:
        return error(f"sessions_spawn: {exc}")
    payload: dict[str, Any] = {
        "status": "accepted",
        "childSessionKey": child.key,
        "runId": f"{child.key}#run{child.runs}",
        "label": child.label,
    }
    if files:
        payload["attachments"] = [p for p, _ in files]
    wait = float(args.get("timeoutSeconds") or 0)
    if wait > 0:
        await mgr._wait(lambda: child.status in FINISHED, wait)
        if child.status in FINISHED:
            child.reported = True
            payload.update(status=child.status, result=child.result)
            if child.error:
                payload["error"] = child.error
    return json_result(payload)


def _targets(mgr: SessionManager, me: Session, target: str | None) -> list[Session] | ToolResult:
    kids = mgr.children(me.key)
    if not target:
        return error("subagents: name the sub-agent with `target` (key, label, 'last' or 'all')")
    if target == "all":
        return kids
    if target == "last":
        return kids[-1:] if kids else error("subagents: this session has no sub-agents")
    for c in kids:
        if target in (c.key, c.label):
            return [c]
    known = ", ".join(f"{c.key}" + (f" ({c.label})" if c.label else "") for c in kids) or "none"
    return error(f"subagents: no sub-agent {target!r} of this session (known: {known})")


async def subagents(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """list (default), steer (target + message), kill (target) the caller's sub-agents.

    Errors: missing/unknown target, steering a sub-agent that is not running, no message.
    """
    mgr = _manager(ctx, "subagents")
    if isinstance(mgr, ToolResult):
        return mgr
    me = mgr.caller(ctx)
    action = args.get("action") or "list"
    if action == "list":
        kids = mgr.children(me.key)
        if args.get("recentMinutes"):
            since = time.time() - float(args["recentMinutes"]) * 60
            kids = [c for c in kids if c.status == RUNNING or c.updated >= since]
        return json_result({"count": len(kids), "subagents": [c.info() for c in kids]})
    targets = _targets(mgr, me, args.get("target"))
    if isinstance(targets, ToolResult):
        return targets
    if action == "steer":
        message = args.get("message")
        if not message:
            return error("subagents: steer needs `message` (the guidance to send)")
        steered = []
        for c in targets:
            if c.status != RUNNING:
                return error(
                    f"subagents: {c.key} is not running (status {c.status}); "
                    "use sessions_send to start it again"
                )
            c.record({"role": "user", "content": message, "from": me.key, "steer": True})
            c._inbox.append(message)
            c._touch()
            steered.append(c.key)
        return json_result({"status": "steered", "targets": steered})
    killed = []
    for c in targets:
        if await mgr.kill(c):
            killed.append(c.key)
    return json_result({"status": "ok", "killed": killed})


async def session_status(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Status of ``sessionKey`` (default: the caller); ``model`` sets an override that the
    session's next run uses. Errors: unknown session."""
    mgr = _manager(ctx, "session_status")
    if isinstance(mgr, ToolResult):
        return mgr
    me = mgr.caller(ctx)
    s = me
    if args.get("sessionKey"):
        got = _resolve(mgr, args["sessionKey"], "session_status")
        if isinstance(got, ToolResult):
            return got
        s = got
    info = s.info()
    if args.get("model"):
        s.model = args["model"]
        info["model"] = s.model
        info["note"] = f"model override {s.model!r} set; it applies from the session's next run"
    kids = mgr.children(s.key)
    info["subagents"] = {
        "running": sum(1 for c in kids if c.status == RUNNING),
        "finished": sum(1 for c in kids if c.status in FINISHED),
    }
    return json_result(info)


TOOLS = {
    "sessions_list": sessions_list,
    "sessions_history": sessions_history,
    "sessions_send": sessions_send,
    "sessions_yield": sessions_yield,
    "sessions_spawn": sessions_spawn,
    "subagents": subagents,
    "session_status": session_status,
}
