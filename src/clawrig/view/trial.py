"""Read one trial folder for its page, lazily and defensively (docs/outputs.md lists the files).

Every reader returns plain dicts and lists for the templates and never raises for a missing or
malformed file: a file that cannot be read shows as absent, with the reason where useful. Large
content is cut (:data:`TEXT_LIMIT` characters per text, :data:`RECORD_LIMIT` records per log)
so a trial with thousands of events still renders quickly.
"""

from __future__ import annotations

import difflib
import json
import re
import reprlib
from pathlib import Path
from typing import Any

from clawrig.spec.layout import TrialPaths, read_regular
from clawrig.spec.process import ProcessScore
from clawrig.spec.trial import TrialResult
from clawrig.transcript.dialog import content_text

TEXT_LIMIT = 20_000
"""Characters shown of one message, tool result or file before a "cut" note."""
RECORD_LIMIT = 2_000
"""Records shown of one log (model calls, judge chats, egress and web logs)."""
FILE_LIMIT = 262_144
"""Bytes of an end-state file read for its content and diff."""
KNOWN_FILES = {
    TrialPaths.RESULT, TrialPaths.SCORE, TrialPaths.PROCESS_SCORE, TrialPaths.USAGE,
    TrialPaths.CHAT, TrialPaths.DIALOG, TrialPaths.AGENT_LOG, *TrialPaths.JUDGE_LOGS,
    TrialPaths.MODEL_CALLS, TrialPaths.END_STATE_DELETED, TrialPaths.OPENCLAW_CHAT,
    TrialPaths.EGRESS, TrialPaths.WEB_CALLS,
}  # fmt: skip
EGRESS_FILE = TrialPaths.EGRESS
"""The egress proxy's per-trial log (:data:`clawrig.egress.proxy.LOG_FILE`)."""
WEB_FILE = TrialPaths.WEB_CALLS
"""The recorded web exchanges (:data:`clawrig.web.records.WEB_RECORD_FILE`)."""


JSON_LIMIT = 64 * 1024**2
"""Bytes of a trial's JSON file (result.json, score.json ...) read at most; a larger one shows
as absent."""
_SURROGATE = re.compile("[\ud800-\udfff]")


def shown(text: str) -> str:
    """``text`` with every lone surrogate made visible: a byte of a file name that is not UTF-8
    (Python's ``surrogateescape``, U+DC80-U+DCFF) as ``\\xNN``, any other as ``\\uXXXX``, so a
    page holding it can be sent as UTF-8 (an agent's file named ``bad\\xff.md`` made its
    trial's page an HTTP 500: helper-134)."""

    def escape(m: re.Match[str]) -> str:
        code = ord(m.group())
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"

    return _SURROGATE.sub(escape, text)


def regular_files(root: Path) -> list[Path]:
    """The regular files below ``root``, sorted (:func:`clawrig.sandbox.endstate.regular_files`:
    no link entered, links, FIFOs and the like left out: the viewer shows what the harness
    wrote, never what a link leads to)."""
    from clawrig.sandbox.endstate import regular_files as files_of

    return [path for _, path in files_of(root)]


def cut(text: str | None, limit: int = TEXT_LIMIT) -> str:
    """``text`` cut to ``limit`` characters with a note saying how much was left out."""
    if not text:
        return ""
    if not isinstance(text, str):  # (a record's field of another type: 7, a list)
        text = pretty(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit:,} more characters not shown]"


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a dict, else an empty dict (for reading files defensively)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a list, else an empty list (for reading files defensively)."""
    return value if isinstance(value, list) else []


def read_json(path: Path) -> Any:
    """Parsed JSON of ``path``; None when missing, not a regular file (:func:`read_regular`),
    over :data:`JSON_LIMIT` bytes, or not JSON (nested too deeply too)."""
    data = read_regular(path, JSON_LIMIT + 1)
    if data is None or len(data) > JSON_LIMIT:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def read_jsonl(path: Path, limit: int = RECORD_LIMIT) -> tuple[list[dict[str, Any]], int]:
    """The first ``limit`` JSON objects of a JSONL file (bad lines skipped) and the total count
    of non-blank lines."""
    records: list[dict[str, Any]] = []
    total = 0
    data = read_regular(path, JSON_LIMIT)
    for line in (data or b"").decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        total += 1
        if len(records) >= limit:
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            records.append(value)
    return records, total


def pretty(value: Any) -> str:
    """JSON text of ``value`` indented for reading (strings that hold JSON are parsed first).
    JSON nested past the interpreter's recursion limit (a model's tool-call arguments 100,000
    lists deep made the trial's page a traceback) is shown as it came, or cut by ``reprlib``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return reprlib.repr(value)


# --------------------------------------------------------------------------------------------
# Transcript timeline
# --------------------------------------------------------------------------------------------


def _session_events(
    path: Path, folder: Path, depth: int = 0, start_ms: int | None = None
) -> dict[str, Any]:
    """A transcript (OpenClaw chat.jsonl) as timeline events: ``{"events": [...], "error"}``.

    Event kinds: ``user`` (``cron`` when the text starts with ``[cron``), ``reasoning``,
    ``assistant`` (text), ``tool`` (name, arguments, result, is_error, ``subagent`` nested
    session for sessions_spawn), each with ``t`` = seconds since the session start."""
    from clawrig.transcript.openclaw import read_openclaw_jsonl

    data = read_regular(path, JSON_LIMIT + 1)  # (a link out of the job is not followed)
    if data is None:
        return {"events": [], "error": f"{path.name}: not a regular file"}
    if len(data) > JSON_LIMIT:
        return {"events": [], "error": f"{path.name}: over {JSON_LIMIT // 1024**2} MiB"}
    try:
        lines = data.decode("utf-8", errors="replace").splitlines()
        transcript = read_openclaw_jsonl(lines, strict=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable transcript shows as a note
        return {"events": [], "error": str(exc).splitlines()[0] if str(exc) else repr(exc)}
    start = start_ms if start_ms is not None else transcript.started_ms
    results = {
        m.tool_call_id: m for m in transcript.messages if m.role == "toolResult" and m.tool_call_id
    }
    events: list[dict[str, Any]] = []
    step = 0

    def rel(ms: int | None) -> float | None:
        if ms is None or start is None:
            return None
        try:  # (a 401-digit timestamp overflowed the division: a 500, helper-138)
            return round((ms - start) / 1000, 3)
        except (OverflowError, TypeError, ValueError):
            return None

    for m in transcript.messages:
        t = rel(m.timestamp_ms)
        if m.role == "user":
            text = m.text or ""
            kind = "cron" if text.lstrip().startswith("[cron") else "user"
            events.append({"kind": kind, "t": t, "text": cut(text)})
        elif m.role == "assistant":
            step += 1
            usage = m.usage.model_dump() if m.usage else None
            if m.reasoning:
                events.append({"kind": "reasoning", "t": t, "step": step, "text": cut(m.reasoning)})
            if m.text or not m.tool_calls:
                events.append({"kind": "assistant", "t": t, "step": step, "text": cut(m.text),
                               "usage": usage, "stop": m.stop_reason,
                               "error": m.error_message})  # fmt: skip
            for i, call in enumerate(m.tool_calls):
                res = results.get(call.id)
                ev: dict[str, Any] = {
                    "kind": "tool",
                    "t": t,
                    "step": step,
                    "name": call.name,
                    "id": call.id,
                    "arguments": cut(pretty(call.arguments)),
                    "result": cut(res.text) if res is not None else None,
                    "is_error": bool(res.is_error) if res is not None else False,
                    "result_t": rel(res.timestamp_ms) if res is not None else None,
                    # a step without text shows its model usage on its first tool call
                    "usage": usage if i == 0 and not (m.text or not m.tool_calls) else None,
                }
                if call.name == "sessions_spawn" and res is not None and depth < 3:
                    ev["subagent"] = _subagent(res.text or "", folder, depth, start)
                events.append(ev)
    return {"events": events, "error": None}


def _subagent(result_text: str, folder: Path, depth: int, start: int | None) -> dict | None:
    try:
        key = json.loads(result_text).get("childSessionKey")
    except (ValueError, AttributeError):
        return None
    if not isinstance(key, str):
        return None
    path = TrialPaths(folder).subagent(key)
    try:  # in the trial's folder, through no link (a linked subagents/ led out: helper-138)
        inside = path.resolve(strict=True).is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        inside = False
    if not inside or not path.is_file() or path.is_symlink():
        return None
    session = _session_events(path, folder, depth + 1, start)
    session["key"] = key
    return session


# --------------------------------------------------------------------------------------------
# Logs
# --------------------------------------------------------------------------------------------


def model_calls(folder: Path) -> dict[str, Any]:
    """model_calls.jsonl as rows: seq, role, model, status, tokens (input, output, cache read),
    cost (USD), latency (s), cached, retries, error, and the reply's text / tool calls."""
    records, total = read_jsonl(TrialPaths(folder).model_calls)
    rows = []
    for rec in records:
        usage = as_dict(rec.get("usage"))
        response = as_dict(rec.get("response"))
        choice = as_dict((as_list(response.get("choices")) or [{}])[0])
        msg = as_dict(choice.get("message"))
        calls = [
            f"{as_dict(c.get('function')).get('name')}({as_dict(c.get('function')).get('arguments')})"
            for c in as_list(msg.get("tool_calls"))
            if isinstance(c, dict)
        ]
        rows.append({
            "seq": rec.get("seq"),
            "role": rec.get("role"),
            "model": rec.get("model"),
            "status": rec.get("status"),
            "input": usage.get("input_tokens"),
            "output": usage.get("output_tokens"),
            "cache_read": usage.get("cache_read_tokens"),
            "cost": usage.get("cost_usd"),
            "latency": rec.get("latency_s"),
            "cached": rec.get("cached"),
            "retries": rec.get("retries"),
            "error": rec.get("error"),
            "reply": cut(content_text(msg.get("content")) if msg else "", 2000),
            "calls": cut("\n".join(calls), 2000),
            "finish": choice.get("finish_reason") if isinstance(choice, dict) else None,
        })  # fmt: skip
    return {"rows": rows, "total": total}


def judge_chats(folder: Path) -> list[dict[str, Any]]:
    """judge_chat.jsonl and judge_process_chat.jsonl: per record the request's messages, the
    reply, model, usage (tokens, USD), latency (s), cached, valid and error."""
    out = []
    for name in TrialPaths.JUDGE_LOGS:
        records, _ = read_jsonl(folder / name)
        for rec in records:
            request = as_dict(rec.get("request"))
            response = as_dict(rec.get("response"))
            messages = [
                {"role": m.get("role"), "text": cut(content_text(m.get("content")), 8000)}
                for m in as_list(request.get("messages"))
                if isinstance(m, dict)
            ]
            out.append({
                "file": name,
                "kind": rec.get("kind"),
                "model": rec.get("model") or response.get("model"),
                "messages": messages,
                "reply": cut(content_text(response.get("content")) if response else "", 8000),
                "reasoning": cut(response.get("reasoning") or "", 4000) if response else "",
                "usage": response.get("usage") if response else None,
                "latency": response.get("latency_s") if response else None,
                "cached": rec.get("cached"),
                "valid": rec.get("valid"),
                "error": rec.get("error"),
            })  # fmt: skip
    return out


def egress_log(folder: Path) -> dict[str, Any] | None:
    """egress.jsonl (one line per connection through the trial's egress proxy: time, phase,
    method, host, port, verdict, bytes_up, bytes_down, seconds, reason; see
    :mod:`clawrig.egress.proxy`) as ``{"rows", "total", "refused"}``; None when absent."""
    path = folder / EGRESS_FILE
    if not path.is_file():
        return None
    rows, total = read_jsonl(path)
    return {"rows": rows, "total": total,
            "refused": sum(1 for r in rows if r.get("verdict") != "allowed")}  # fmt: skip


def web_log(folder: Path) -> dict[str, Any] | None:
    """web_calls.jsonl (every search and fetch of a recorded job; see
    :mod:`clawrig.web.records`) as ``{"rows": [{kind, what, status, error}], "total"}``;
    None when absent."""
    path = folder / WEB_FILE
    if not path.is_file():
        return None
    records, total = read_jsonl(path)
    rows = []
    for rec in records:
        req, resp = as_dict(rec.get("request")), as_dict(rec.get("response"))
        rows.append({
            "kind": rec.get("kind"),
            "what": req.get("query") or req.get("url") or json.dumps(req)[:200],
            "status": resp.get("status"),
            "detail": resp.get("provider") or resp.get("content_type") or "",
            "error": resp.get("error"),
        })  # fmt: skip
    return {"rows": rows, "total": total}


def other_logs(folder: Path) -> list[dict[str, Any]]:
    """Logs the viewer has no page part for (any other ``*.jsonl`` / ``*.log`` / ``*.json`` in
    the trial folder or its ``logs/``): name, record count and the first records or lines."""
    out = []
    candidates = sorted(p for p in folder.glob("*") if p.is_file() and not p.is_symlink())
    candidates += regular_files(folder / "logs")
    for path in candidates:
        name = str(path.relative_to(folder))
        if name in KNOWN_FILES or path.suffix not in (".jsonl", ".log", ".json"):
            continue
        if path.suffix == ".jsonl":
            records, total = read_jsonl(path, limit=500)
            body = [json.dumps(r, ensure_ascii=False)[:2000] for r in records]
        else:
            data = read_regular(path, 4 * 50_000)
            if data is None:
                continue
            text = data.decode("utf-8", errors="replace")
            body = [cut(text, 50_000)]
            total = text.count("\n")
        out.append({"name": name, "label": "log", "total": total, "lines": body})
    return out


# --------------------------------------------------------------------------------------------
# End state
# --------------------------------------------------------------------------------------------


def _initial_file(task: Any, rel: str) -> bytes | None:
    """The task's initial content of workspace path ``rel`` (relative to /tmp_workspace): its
    inline files, copied files, exec_dir and tmp_dir (WildClawBench's tmp/ mapping)."""
    ws = getattr(task, "workspace", None)
    if ws is None:
        return None
    inline = ws.inline_files.get(rel)
    if inline is not None:
        if inline.text is not None:
            return inline.text.encode()
        if inline.base64 is not None:
            import base64

            return base64.b64decode(inline.base64)
    for f in ws.files:
        if f.dest.strip("/") == rel:
            return _read_bytes(f.source)
    if ws.tmp_dir is not None and rel.startswith("tmp/"):
        return _read_bytes(Path(ws.tmp_dir) / rel[4:])
    if ws.exec_dir is not None:
        return _read_bytes(Path(ws.exec_dir) / rel)
    return None


def _read_bytes(path: Path) -> bytes | None:
    return read_regular(path, FILE_LIMIT)


def _text(data: bytes | None) -> str | None:
    if data is None or b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def end_state(folder: Path, task: Any | None) -> dict[str, Any]:
    """The end-state tree (end_state/: files the agent created or changed) with a unified diff
    against the initial workspace when ``task`` is known, the deleted files, and task_output/.

    Each file: ``path``, ``size`` (bytes), ``status`` (created | changed | unknown when the
    task's initial workspace could not be read), ``diff`` / ``content`` for text files."""
    files = []
    root = TrialPaths(folder).end_state
    paths = regular_files(root)
    for p in paths[:RECORD_LIMIT]:
        rel = p.relative_to(root).as_posix()
        data = _read_bytes(p)
        new = _text(data)
        before = _initial_file(task, rel) if task is not None else None
        status = "unknown" if task is None else ("changed" if before is not None else "created")
        diff = None
        if new is not None and before is not None and _text(before) is not None:
            diff = "".join(
                difflib.unified_diff(
                    _text(before).splitlines(keepends=True),  # type: ignore[union-attr]
                    new.splitlines(keepends=True),
                    fromfile=f"a/{rel}",
                    tofile=f"b/{rel}",
                )
            )
        files.append({
            "path": rel,
            "size": p.lstat().st_size,
            "status": status,
            "diff": cut(diff, 50_000) if diff else None,
            "content": cut(new, 50_000) if new is not None and diff is None else None,
            "binary": new is None,
        })  # fmt: skip
    deleted = read_json(TrialPaths(folder).end_state_deleted)
    out_root = TrialPaths(folder).task_output
    outputs = regular_files(out_root)
    return {
        "files": files,
        "total": len(paths),
        "deleted": [str(d) for d in deleted] if isinstance(deleted, list) else [],
        "outputs": [
            {
                "path": p.relative_to(out_root).as_posix(),
                "size": p.lstat().st_size,
                "content": cut(_text(_read_bytes(p)), 20_000),
            }
            for p in outputs[:200]
        ],  # fmt: skip
    }


# --------------------------------------------------------------------------------------------
# The whole page
# --------------------------------------------------------------------------------------------


def _process_score(folder: Path) -> dict[str, Any] | None:
    """process_score.json through :class:`ProcessScore` (None when absent or not that shape)."""
    raw = read_json(TrialPaths(folder).process_score)
    try:
        return ProcessScore.model_validate(raw).model_dump(mode="json") if raw else None
    except ValueError:
        return None


def read_trial(folder: Path, task: Any | None = None) -> dict[str, Any]:
    """Everything the trial page shows. ``result`` is the TrialResult (None when result.json is
    unreadable, with ``result_error`` saying why); ``score`` score.json; ``process``
    process_score.json; ``usage`` usage.json; ``timeline`` the transcript events;
    ``model_calls``, ``judge``, ``end_state``, ``egress`` and ``web`` (None when absent),
    ``logs`` (other logs) and ``agent_log`` (agent.log text)."""
    raw = read_json(TrialPaths(folder).result)
    result, result_error = None, None
    try:
        result = TrialResult.model_validate(raw)
    except ValueError as exc:
        result_error = f"result.json: {str(exc).splitlines()[0] if str(exc) else exc!r}"
    log = read_regular(TrialPaths(folder).agent_log, 4 * 100_000)
    agent_log = log.decode("utf-8", errors="replace") if log is not None else ""
    chat = TrialPaths(folder).chat
    return {
        "folder": folder,
        "result": result,
        "raw": raw if isinstance(raw, dict) else {},
        "result_error": result_error,
        "score": as_dict(read_json(TrialPaths(folder).score)),
        "process": _process_score(folder),
        "usage": read_json(TrialPaths(folder).usage),
        "timeline": _session_events(chat, folder)
        if chat.is_file()
        else {"events": [], "error": "no chat.jsonl"},
        "model_calls": model_calls(folder),
        "judge": judge_chats(folder),
        "end_state": end_state(folder, task),
        "egress": egress_log(folder),
        "web": web_log(folder),
        "logs": other_logs(folder),
        "agent_log": cut(agent_log, 100_000),
    }
