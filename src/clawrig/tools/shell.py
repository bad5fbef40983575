"""``exec`` and ``process``: shell commands in the trial's sandbox (OpenClaw 2026.3.24).

exec runs ``/bin/sh -c COMMAND`` in the sandbox, cwd = ``workdir`` (relative to /tmp_workspace)
or /tmp_workspace, ``env`` merged over the sandbox environment, stdout and stderr merged.

Result text (the demo suite's golden trajectories hold it verbatim)::

    <output, trailing newlines stripped, or "(no output)">
    [exit code N]

``details`` = {status: completed|failed|timeout|running, exitCode, durationMs, aggregated,
cwd} as in OpenClaw's exec toolResult. A non-zero exit code is a normal result (status
``failed``, ``is_error`` False: the model reads the code); a timeout is an error result, after
the command's whole process tree was killed. Output longer than ``ToolContext.output_bytes``
keeps its head and tail with a note (the sandbox cuts at its own ``Limits.output_bytes`` first).

Background runs: ``background: true`` returns at once (all output then comes through
``process poll``), ``yieldMs: N`` returns after N ms if the command still runs, with the output
so far (else the normal result). Either way the text is
``Command still running (session ID, pid P). ...`` and ``details.sessionId`` names the run for
the ``process`` tool: list, poll (status + output since the last poll; ``timeout`` ms to wait),
log (``offset``/``limit`` in lines; only ``limit`` = the last lines), write (``data``, ``eof``),
send-keys (``keys`` names such as Enter, Tab, Escape, Up, C-c; ``hex`` bytes; ``literal``),
submit (``data``/``text`` + newline), paste (``text``/``data``; ``bracketed`` wraps it in
bracketed-paste markers), kill, clear (forget a finished run), remove (kill if needed, forget).
Background runs are killed after ``timeout`` seconds too (default ``ToolContext.exec_timeout_s``).

The run table lives in ``ctx.state["exec_sessions"]`` (id -> :class:`ExecSession`, ids
``proc-1``, ``proc-2`` ... per agent session); call
:func:`close` when the agent session ends (``Toolset.aclose`` does).

Policy for OpenClaw's remaining exec parameters: ``pty`` is accepted and ignored (no terminal:
plain pipes), ``security``/``ask``/``node`` are accepted and ignored, ``host`` must be
``sandbox`` (or absent), and ``elevated: true`` is refused: commands already run as root
inside the sandbox and nothing runs outside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from clawrig.sandbox.base import ExecResult, ProcessHandle, truncate_middle
from clawrig.tools._common import WORKSPACE, error, resolve_path
from clawrig.tools.base import ToolContext, ToolResult

STATE_KEY = "exec_sessions"
POLL_INTERVAL_S = 0.05
PROCESS_ACTIONS = (
    "list",
    "poll",
    "log",
    "write",
    "send-keys",
    "submit",
    "paste",
    "kill",
    "clear",
    "remove",
)
KEY_SEQUENCES = {
    "enter": "\n",
    "return": "\n",
    "tab": "\t",
    "escape": "\x1b",
    "esc": "\x1b",
    "space": " ",
    "backspace": "\x7f",
    "bspace": "\x7f",
    "delete": "\x1b[3~",
    "up": "\x1b[A",
    "down": "\x1b[B",
    "right": "\x1b[C",
    "left": "\x1b[D",
    "home": "\x1b[H",
    "end": "\x1b[F",
    "pageup": "\x1b[5~",
    "pagedown": "\x1b[6~",
}
"""send-keys names -> bytes written (tmux-style names; ``C-x`` is the control character)."""


@dataclass
class ExecSession:
    """One background exec run. ``status``: running, completed, failed, timeout, killed.
    ``poll_offset`` is the byte offset of the log already returned by ``poll``."""

    id: str
    command: str
    cwd: str
    handle: ProcessHandle
    timeout_s: float
    started: float = field(default_factory=time.monotonic)
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    status: str = "running"
    exit_code: int | None = None
    ended: float | None = None
    poll_offset: int = 0
    killed_as: str | None = None
    watchdog: asyncio.Task[None] | None = None

    @property
    def runtime_ms(self) -> int:
        return int(((self.ended or time.monotonic()) - self.started) * 1000)

    async def refresh(self) -> None:
        """Update ``status``/``exit_code`` from the sandbox."""
        if self.status != "running":
            return
        code = await self.handle.poll()
        if code is not None and self.killed_as is not None:
            self._finish(self.killed_as, None)  # our own kill ended it
        elif code is not None:
            self._finish("completed" if code == 0 else "failed", code)

    def _finish(self, status: str, code: int | None) -> None:
        self.status = status
        self.exit_code = code
        self.ended = time.monotonic()
        if self.watchdog is not None and self.watchdog is not asyncio.current_task():
            self.watchdog.cancel()
        # kept, the cancelled watchdog's exception holds its frame, which holds this session
        self.watchdog = None

    async def kill(self, status: str = "killed") -> None:
        """Kill the run's whole process tree (no-op when it has ended)."""
        await self.refresh()
        if self.status == "running":
            self.killed_as = status
            await self.handle.kill()
            self._finish(status, None)

    def summary(self) -> dict[str, Any]:
        return {
            "sessionId": self.id,
            "status": self.status,
            "exitCode": self.exit_code,
            "pid": getattr(self.handle, "pid", None),
            "command": self.command,
            "cwd": self.cwd,
            "startedAt": self.started_at,
            "runtimeMs": self.runtime_ms,
        }


def exec_sessions(ctx: ToolContext) -> dict[str, ExecSession]:
    """The background run table of ``ctx`` (created on first use)."""
    return ctx.state.setdefault(STATE_KEY, {})


async def close(ctx: ToolContext) -> None:
    """Stop the timeout watchdogs of ``ctx``'s background runs (the processes themselves are
    killed with the sandbox, or by ``Sandbox.kill_all`` before grading)."""
    for s in exec_sessions(ctx).values():
        if s.watchdog is not None:
            s.watchdog.cancel()
            s.watchdog = None  # (a cycle through its exception's frame, as in _finish)


def _status_line(status: str, code: int | None, timeout_s: float | None = None) -> str:
    if status == "timeout":
        return f"[timed out after {timeout_s:g} s: the process and its children were killed]"
    if status == "killed":
        return "[killed]"
    if status == "running":
        return "[still running]"
    return f"[exit code {code}]"


def _clip(ctx: ToolContext, text: str, earlier: Sequence[int] = ()) -> tuple[str, bool]:
    """``text`` within the tool's output cap; ``earlier``: the counts of the supervisor's
    notes in it (:attr:`ExecResult.omitted`)."""
    data, cut = truncate_middle(text.encode("utf-8"), ctx.output_bytes, earlier)
    return data.decode("utf-8", errors="replace"), cut


def _final_result(
    ctx: ToolContext,
    output: str,
    *,
    status: str,
    code: int | None,
    duration_ms: int,
    cwd: str,
    timeout_s: float,
    truncated: bool = False,
    omitted: Sequence[int] = (),
) -> ToolResult:
    output, cut = _clip(ctx, output.rstrip("\n"), omitted)
    body = output if output else "(no output)"
    text = f"{body}\n{_status_line(status, code, timeout_s)}"
    details = {
        "status": status,
        "exitCode": code,
        "durationMs": duration_ms,
        "aggregated": output,
        "cwd": cwd,
    }
    if truncated or cut:
        details["truncated"] = True
    return ToolResult(text=text, is_error=status == "timeout", details=details)


def _workdir_missing(r: ExecResult) -> bool:
    """The supervisor reports a missing cwd as exit 127 before anything ran."""
    return (
        r.exit_code == 127
        and not r.stdout
        and r.duration_s == 0.0
        and r.stderr.startswith("[Errno 2]")
    )


async def exec_tool(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Run a shell command (see the module docstring for the result format).

    Errors: empty command, refused policy options (elevated, host), a bad timeout/yieldMs, a
    missing workdir, a timeout.
    """
    command: str = args["command"]
    if not command.strip():
        return error("exec: `command` is empty")
    if args.get("elevated"):
        return error(
            "exec: elevated mode is not available: commands already run as root inside the "
            "trial sandbox, and nothing runs outside it. Retry without `elevated`."
        )
    host = args.get("host")
    if host not in (None, "", "sandbox", "auto"):
        return error(
            f"exec: host={host!r} is not available: commands run in the trial sandbox only. "
            "Retry without `host`."
        )
    timeout = args.get("timeout")
    if timeout is not None and not 0 < timeout < math.inf:
        return error(
            f"exec: `timeout` must be a finite positive number of seconds (got {timeout!r})"
        )
    timeout_s = float(timeout) if timeout is not None else ctx.exec_timeout_s
    yield_ms = args.get("yieldMs")
    if yield_ms is not None and yield_ms < 0:
        return error(f"exec: `yieldMs` must be >= 0 milliseconds (got {yield_ms!r})")
    cwd = resolve_path(args["workdir"]) if args.get("workdir") else WORKSPACE
    env = {str(k): str(v) for k, v in (args.get("env") or {}).items()}

    if args.get("background") or yield_ms is not None:
        return await _exec_background(
            ctx,
            command,
            cwd,
            env or None,
            timeout_s,
            0.0 if args.get("background") or yield_ms is None else yield_ms,
        )
    start = time.monotonic()
    r = await ctx.sandbox.exec(
        command, cwd=cwd, env=env or None, timeout_s=timeout_s, merge_stderr=True
    )
    if _workdir_missing(r):
        return error(f"exec: workdir {cwd} does not exist")
    duration_ms = int(round((r.duration_s or (time.monotonic() - start)) * 1000))
    if r.timed_out:
        status, code = "timeout", None
    else:
        status, code = ("completed" if r.exit_code == 0 else "failed"), r.exit_code
    return _final_result(
        ctx,
        r.stdout + r.stderr,
        status=status,
        code=code,
        duration_ms=duration_ms,
        cwd=cwd,
        timeout_s=timeout_s,
        truncated=r.truncated,
        omitted=r.omitted,
    )


async def _watchdog(session: ExecSession) -> None:
    with contextlib.suppress(Exception):
        await asyncio.sleep(session.timeout_s)
        await session.kill(status="timeout")


async def _exec_background(
    ctx: ToolContext,
    command: str,
    cwd: str,
    env: dict[str, str] | None,
    timeout_s: float,
    yield_ms: float,
) -> ToolResult:
    # a missing workdir would make spawn fail inside the supervisor: check it first
    check = await ctx.sandbox.exec(["test", "-d", cwd], timeout_s=30)
    if check.exit_code != 0:
        return error(f"exec: workdir {cwd} does not exist")
    handle = await ctx.sandbox.spawn(command, cwd=cwd, env=env)
    counter = ctx.state[STATE_KEY + ".next"] = ctx.state.get(STATE_KEY + ".next", 0) + 1
    sid = f"proc-{counter}"
    session = ExecSession(id=sid, command=command, cwd=cwd, handle=handle, timeout_s=timeout_s)
    session.watchdog = asyncio.create_task(_watchdog(session))
    table = exec_sessions(ctx)
    table[sid] = session
    deadline = session.started + yield_ms / 1000.0
    while yield_ms > 0:
        await session.refresh()
        if session.status != "running" or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(POLL_INTERVAL_S, max(0.0, deadline - time.monotonic())))
    if yield_ms > 0 and session.status != "running":  # done within yieldMs: an exec result
        del table[sid]
        output, _, omitted = await handle.read_log_ends(0, ctx.output_bytes)
        return _final_result(
            ctx,
            output,
            status=session.status,
            code=session.exit_code,
            duration_ms=session.runtime_ms,
            cwd=cwd,
            timeout_s=timeout_s,
            truncated=bool(omitted),
            omitted=omitted,
        )
    output = ""
    if yield_ms > 0:  # what the model waited for; background: true leaves it all to poll
        # (its head and tail so far, past 4 MiB too: helper-202; polls go on from its end)
        output, session.poll_offset, omitted = await handle.read_log_ends(0, ctx.output_bytes)
        output, _ = _clip(ctx, output.rstrip("\n"), omitted)
    pid = getattr(handle, "pid", None)
    text = (
        f"Command still running (session {sid}, pid {pid}). Use process "
        f"(list/poll/log/write/kill/clear/remove) with sessionId {sid} for follow-up."
    )
    if output:
        text += f"\n\nOutput so far:\n{output}"
    details = {
        "status": "running",
        "sessionId": sid,
        "pid": pid,
        "exitCode": None,
        "durationMs": session.runtime_ms,
        "aggregated": output,
        "cwd": cwd,
    }
    return ToolResult(text=text, details=details)


# -- process -------------------------------------------------------------------------------


def _keys_to_text(keys: list[str]) -> str:
    out = []
    for key in keys:
        k = key.strip()
        low = k.lower()
        if low in KEY_SEQUENCES:
            out.append(KEY_SEQUENCES[low])
        elif (low.startswith("c-") or low.startswith("ctrl-")) and len(k.split("-", 1)[1]) == 1:
            ch = k.split("-", 1)[1].lower()
            if not ("a" <= ch <= "z" or ch in "[\\]^_@"):
                raise ValueError(f"unknown key {key!r}")
            out.append(chr(ord(ch.upper()) & 0x1F))
        elif len(k) == 1:
            out.append(k)
        else:
            raise ValueError(
                f"unknown key {key!r} (use names like Enter, Tab, Escape, Up, Down, C-c, "
                "or `literal` for text)"
            )
    return "".join(out)


def _hex_to_bytes(items: list[str]) -> bytes:
    out = bytearray()
    for item in items:
        h = item.strip().lower().removeprefix("0x").replace(" ", "")
        out += bytes.fromhex(h)
    return bytes(out)


async def process(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Manage background exec runs (actions in :data:`PROCESS_ACTIONS`).

    Errors: unknown action, missing or unknown sessionId, writing to an ended run or a closed
    stdin, unknown key names, bad hex, clearing a run that still runs.
    """
    action = args["action"].strip().lower()
    table = exec_sessions(ctx)
    if action not in PROCESS_ACTIONS:
        return error(
            f"process: unknown action {args['action']!r}; use one of {', '.join(PROCESS_ACTIONS)}"
        )
    if action == "list":
        for s in table.values():
            await s.refresh()
        rows = [s.summary() for s in table.values()]
        if not rows:
            return ToolResult(text="No background sessions.", details={"sessions": []})
        lines = [
            f"{r['sessionId']}  {r['status']:<9}  {r['runtimeMs'] / 1000:.1f}s  "
            f"pid {r['pid']}  :: {r['command'][:120]}"
            for r in rows
        ]
        return ToolResult(text="\n".join(lines), details={"sessions": rows})

    sid = args.get("sessionId")
    if not sid:
        return error(f"process: action {action!r} needs `sessionId` (see action list)")
    session = table.get(sid)
    if session is None:
        known = ", ".join(table) or "none"
        return error(f"process: no session {sid!r} (known sessions: {known})")
    await session.refresh()

    if action == "poll":
        wait_ms = float(args.get("timeout") or 0)
        deadline = time.monotonic() + wait_ms / 1000.0
        while True:
            new, nxt = await session.handle.read_log(session.poll_offset, ctx.output_bytes)
            if new or session.status != "running" or time.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL_INTERVAL_S)
            await session.refresh()
        more = nxt - session.poll_offset >= ctx.output_bytes
        session.poll_offset = nxt
        new = new.rstrip("\n")
        body = new if new else "(no new output)"
        if more:
            body += "\n[more output is waiting: poll again]"
        text = f"{body}\n{_status_line(session.status, session.exit_code, session.timeout_s)}"
        details = {**session.summary(), "aggregated": new, "more": more}
        return ToolResult(text=text, details=details)

    if action == "log":
        # (a log past 4 MiB: its head and tail, the note between them among the lines)
        full, _, omitted = await session.handle.read_log_ends(0)
        lines = full.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        total = len(lines)
        offset, limit = args.get("offset"), args.get("limit")
        if offset is None and limit is not None:
            start = max(0, total - int(limit))
        else:
            start = max(0, int(offset or 0))
        end = total if limit is None else min(total, start + int(limit))
        chunk, cut = _clip(ctx, "\n".join(lines[start:end]), omitted)
        body = chunk if chunk else "(no output)"
        # past 4 MiB the lines are those of the log's head, the note and its tail (helper-202:
        # read as the log's own numbers)
        of = f"{total} of its head, the note and its tail" if omitted else str(total)
        text = (
            f"{body}\n[lines {start}-{max(start, end - 1)} of {of} (0-based); "
            f"{_status_line(session.status, session.exit_code, session.timeout_s)[1:-1]}]"
        )
        details = {**session.summary(), "offset": start, "lines": end - start, "total": total}
        if cut or omitted:
            details["truncated"] = True
        return ToolResult(text=text, details=details)

    if action in ("kill", "remove"):
        was = session.status
        await session.kill()
        if action == "remove":
            del table[sid]
            return ToolResult(text=f"Removed session {sid}.", details=session.summary())
        if was != "running":
            line = _status_line(session.status, session.exit_code, session.timeout_s)
            return ToolResult(
                text=f"Session {sid} had already ended {line}.", details=session.summary()
            )
        return ToolResult(text=f"Killed session {sid}.", details=session.summary())

    if action == "clear":
        if session.status == "running":
            return error(f"process: session {sid} is still running; kill it first, or use remove")
        del table[sid]
        return ToolResult(text=f"Cleared session {sid}.", details=session.summary())

    # write, send-keys, submit, paste: input for the run's stdin
    if session.status != "running":
        line = _status_line(session.status, session.exit_code, session.timeout_s)
        return error(f"process: session {sid} has ended {line}; it takes no more input")
    eof = bool(args.get("eof"))
    payload: bytes
    if action == "write":
        if args.get("data") is None and not eof:
            return error("process: write needs `data` (text for the process's stdin)")
        payload = (args.get("data") or "").encode("utf-8")
    elif action == "send-keys":
        keys, hexes, literal = args.get("keys"), args.get("hex"), args.get("literal")
        if not keys and not hexes and literal is None:
            return error('process: send-keys needs `keys` (e.g. ["C-c"]), `hex` or `literal`')
        try:
            payload = (literal or "").encode("utf-8")
            payload += _keys_to_text(keys or []).encode("utf-8")
            payload += _hex_to_bytes(hexes or [])
        except ValueError as exc:
            return error(f"process: send-keys: {exc}")
    elif action == "submit":
        submitted = args.get("data") if args.get("data") is not None else args.get("text")
        payload = ((submitted or "") + "\n").encode("utf-8")
    else:  # paste
        pasted = args.get("text") if args.get("text") is not None else args.get("data")
        if pasted is None:
            return error("process: paste needs `text`")
        if args.get("bracketed"):
            pasted = f"\x1b[200~{pasted}\x1b[201~"
        payload = str(pasted).encode("utf-8")
    try:
        await session.handle.write_stdin(payload, eof=eof)
    except (BrokenPipeError, ValueError) as exc:
        return error(f"process: stdin of session {sid} is closed ({exc})")
    note = " and closed stdin" if eof else ""
    return ToolResult(
        text=f"Wrote {len(payload)} bytes to session {sid}{note}.",
        details={**session.summary(), "bytes": len(payload)},
    )


TOOLS = {"exec": exec_tool, "process": process}
