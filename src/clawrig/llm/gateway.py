"""The model gateway: one OpenAI-compatible endpoint that every model call of a job goes through.

Whoever calls a model (clawrig's native agent, a real OpenClaw inside a sandbox, a grader
asking a judge), the request reaches this gateway, which

- identifies the *trial* from a per-trial token (``Authorization: Bearer <token>``, or the URL
  path ``/t/<token>/v1/...``): the token is all a sandbox ever sees, never a provider key;
- forwards the request to that trial's upstream (:class:`clawrig.llm.providers.ModelEndpoint`:
  base URL and the real key) with the body unchanged except ``model`` (the endpoint's model id),
  the endpoint's ``extra_body`` fields, and ``stream_options.include_usage`` on streams (so
  usage is always counted; the usage-only chunk is passed on only when the client asked);
- retries the upstream on 408/409/429/5xx and dropped connections before any byte reaches the
  client (exponential backoff with jitter, ``Retry-After`` honoured; :class:`RetryPolicy`);
- counts tokens and cost per trial (:func:`clawrig.llm.client.usage_from_openai`: OpenClaw's
  token classes, the provider's ``usage.cost`` when sent, else the endpoint's prices);
- enforces the job's budget (USD) and per-trial caps (USD, tokens, requests): a request past a
  cap is refused with HTTP 402 and a one-line message;
- records every request and response, one JSON line per request in the trial's record file
  (:data:`RECORD_FILE`, shape in :meth:`Gateway._record`), or in the judge_chat.jsonl shape for
  judge proxies;
- answers from a recorded :class:`ResponseCache` (replay: the same request gets the recorded
  response; in ``only`` mode a request not in the cache is refused with HTTP 404 and a clear
  message, so a diverging replay stops instead of calling a model).

Serving: FastAPI + uvicorn in a background thread, on a unix socket (bound read-only into
sandboxes, where :mod:`clawrig.llm.forwarder` exposes it on ``127.0.0.1:FORWARDER_PORT``) and on
``127.0.0.1:<free port>`` for host-side clients (:meth:`GatewayLease.chat_model`). Routes:
``POST /v1/chat/completions`` (streaming SSE and plain JSON, tool calls, usage),
``GET /v1/models``, ``GET /healthz``; the same under ``/t/<token>``.

Usage::

    with Gateway(budget_usd=5.0) as gw:
        lease = gw.open_trial(endpoint, trial_id="t1", record_path=folder / RECORD_FILE)
        model = lease.chat_model()          # an OpenAIChatModel that goes through the gateway
        ...                                 # or, in a sandbox bound with gw.sandbox_binds():
        fwd = await start_forwarder(sandbox, gw)   # http://127.0.0.1:18199/v1, key lease.token
        gw.close_trial(lease); lease.usage  # per-trial Usage (tokens, USD, requests, retries)
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import SecretStr
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from clawrig.errors import BudgetExceeded, ModelRequestError, SandboxError, UserError
from clawrig.llm.client import (
    RETRY_STATUSES,
    OpenAIChatModel,
    RetryPolicy,
    RetryWait,
    retry_after_seconds,
    usage_from_openai,
)
from clawrig.llm.forwarder import READY_PREFIX
from clawrig.llm.providers import ModelEndpoint
from clawrig.sandbox.base import Bind, ProcessHandle, Sandbox
from clawrig.serving import ThreadedServer, tcp_listener
from clawrig.spec.trial import Usage

__all__ = [
    "FORWARDER_PORT",
    "JUDGE_KEY_MODEL",
    "RECORD_FILE",
    "SANDBOX_GATEWAY_DIR",
    "CacheMode",
    "Forwarder",
    "Gateway",
    "GatewayChatModel",
    "GatewayLease",
    "GatewayRefusal",
    "ResponseCache",
    "completion_from_chunks",
    "current_gateway",
    "placeholder_endpoint",
    "read_records",
    "recorded_models",
    "replay_gateway",
    "replay_model",
    "request_key",
    "sse_from_completion",
    "start_forwarder",
    "use_gateway",
]

FORWARDER_PORT = 18199
"""The TCP port the in-sandbox forwarder listens on (the sandbox's own loopback)."""
SANDBOX_GATEWAY_DIR = "/opt/clawrig-gateway"
"""Where the gateway's folder (socket + forwarder script) is bound read-only in a sandbox."""
SOCKET_NAME = "gateway.sock"
FORWARDER_NAME = "forwarder.py"
JUDGE_KEY_MODEL = "judge"
"""The model name in the cache keys of judge calls (:func:`request_key`)."""
RECORD_FILE = "model_calls.jsonl"
"""The per-trial record of every model request through the gateway (in the trial folder)."""
KEY_EXCLUDED = frozenset({"model", "stream", "stream_options"})
"""Request fields left out of the cache key: the model is keyed by the endpoint's name, and a
recorded reply can be served streamed or not."""

CacheMode = Literal["off", "prefer", "only"]
"""off: always forward; prefer: answer from the cache when it has the request, else forward
and add the reply; only: answer from the cache, refuse a request it does not hold (replay)."""


# ------------------------------------------------------------------------------ cache keys


def request_key(model: str, body: dict[str, Any]) -> str:
    """SHA-256 (hex) of a request: ``model`` (the endpoint's name) and the body's canonical JSON
    (sorted keys, UTF-8) without :data:`KEY_EXCLUDED`."""
    kept = {k: v for k, v in body.items() if k not in KEY_EXCLUDED}
    blob = json.dumps({"model": model, "body": kept}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """Recorded chat completions by request key, served in recorded order.

    ``add(key, completion, scope)`` stores one; ``take(key, scope)`` returns the first unserved
    completion recorded in the same ``scope`` (``"<task_id>#<run_index>"``), else the first
    unserved one of any scope, else (every one served) the last one again, so a repeated
    identical request (a re-grade) gets the same answer. ``append_to``: a JSONL file that new
    entries are appended to (the ``--judge-cache`` file). Thread-safe.
    """

    def __init__(self, append_to: Path | None = None) -> None:
        self._entries: dict[str, list[tuple[str | None, dict[str, Any]]]] = {}
        self._served: dict[str, set[int]] = {}
        self._lock = threading.Lock()
        self.append_to = Path(append_to) if append_to is not None else None
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._entries.values())

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._entries

    def add(
        self,
        key: str,
        completion: dict[str, Any],
        scope: str | None = None,
        *,
        persist: dict[str, Any] | None = None,
    ) -> None:
        """Store ``completion`` under ``key``; ``persist`` (a record) is appended to
        :attr:`append_to` when set."""
        with self._lock:
            self._entries.setdefault(key, []).append((scope, completion))
            if persist is not None and self.append_to is not None:
                self.append_to.parent.mkdir(parents=True, exist_ok=True)
                with self.append_to.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(persist, ensure_ascii=False, default=str) + "\n")

    def take(self, key: str, scope: str | None = None) -> dict[str, Any] | None:
        """The completion to serve for ``key`` (rules in the class docs), or None."""
        with self._lock:
            entries = self._entries.get(key)
            if not entries:
                self.misses += 1
                return None
            served = self._served.setdefault(key, set())
            pick = next(
                (i for i, (s, _) in enumerate(entries) if i not in served and s == scope), None
            )
            if pick is None:
                pick = next((i for i in range(len(entries)) if i not in served), None)
            if pick is None:
                pick = len(entries) - 1
            served.add(pick)
            self.hits += 1
            return entries[pick][1]

    def load_records(self, path: Path | str) -> int:
        """Add every answered request of a record file: the gateway's :data:`RECORD_FILE`, a
        judge proxy's or :mod:`clawrig.grading.judge`'s ``judge_chat.jsonl``. Returns how many
        were added. Raises UserError naming the file and line for a line that is not JSON."""
        p = Path(path)
        try:
            records = read_records(p)
        except OSError as exc:
            why = exc.strerror or exc
            raise UserError(f"{p}: cannot read recorded model calls: {why}") from None
        added = 0
        for rec in records:
            entry = _cache_entry(rec)
            if entry is not None:
                key, completion, scope = entry
                self.add(key, completion, scope)
                added += 1
        return added

    @classmethod
    def from_file(cls, path: Path | str, *, append: bool = True) -> ResponseCache:
        """A cache read from a record file that does not need to exist yet (``--judge-cache``);
        with ``append`` new replies are added to it."""
        p = Path(path)
        cache = cls(append_to=p if append else None)
        if p.exists():
            cache.load_records(p)
        return cache

    @classmethod
    def from_job(cls, job_dir: Path | str) -> ResponseCache:
        """Every recorded model call of a finished job folder (``<job>/<task>/<trial>/``
        :data:`RECORD_FILE` and the judge proxies' ``judge_chat.jsonl``; ``_retried`` trials
        are skipped). Raises UserError when the folder holds no recorded call."""
        root = Path(job_dir)
        if not root.is_dir():
            raise UserError(f"--replay: no such job folder: {root}")
        cache = cls()
        files = sorted(
            p
            for name in (RECORD_FILE, "judge_chat.jsonl")
            for p in root.glob(f"**/{name}")
            if "_retried" not in p.relative_to(root).parts
            and not any(part.startswith(".tmp-") for part in p.relative_to(root).parts)
        )
        for p in files:
            cache.load_records(p)
        if len(cache) == 0:
            raise UserError(
                f"--replay: {root}: no recorded model calls ({RECORD_FILE}) in its trial folders"
            )
        return cache


def _cache_entry(rec: dict[str, Any]) -> tuple[str, dict[str, Any], str | None] | None:
    """(key, completion, scope) of one record line, or None when it holds no usable reply."""
    scope = None
    if rec.get("task_id") is not None:
        scope = f"{rec.get('task_id')}#{rec.get('run_index', 0)}"
    request = rec.get("request")
    if not isinstance(request, dict):
        return None
    response = rec.get("response")
    if not isinstance(response, dict):
        return None
    if isinstance(response.get("completion"), dict):  # a judge proxy record
        completion = response["completion"]
    elif "choices" in response:  # a gateway record
        completion = response
    elif "content" in response:  # clawrig.grading.judge's judge_chat.jsonl record
        completion = _completion(
            content=response.get("content"),
            model=str(response.get("model") or rec.get("model") or ""),
            response_id=response.get("response_id"),
            finish_reason=response.get("finish_reason") or "stop",
        )
    else:
        return None
    if rec.get("status") not in (None, 200):
        return None
    key = rec.get("key")
    if not isinstance(key, str):  # clawrig.grading.judge's records: judge calls
        model = JUDGE_KEY_MODEL if "kind" in rec else str(rec.get("model") or "")
        key = request_key(model, request)
    return key, completion, scope


# ------------------------------------------------------------------------------ wire shapes


def _completion(
    *,
    content: str | None,
    model: str,
    response_id: str | None = None,
    finish_reason: str = "stop",
    tool_calls: list[dict[str, Any]] | None = None,
    reasoning: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = tool_calls
    out: dict[str, Any] = {
        "id": response_id or f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def completion_from_chunks(chunks: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Assemble streamed ``chat.completion.chunk`` objects into one ``chat.completion``.

    Text, reasoning (``reasoning_content`` or ``reasoning``) and tool-call deltas (by
    ``index``: id, name, argument pieces) are joined; the last ``finish_reason`` and ``usage``
    win; id, model and created come from the first chunk that has them. An ``error`` object in
    a chunk is kept under the top-level ``error`` key.
    """
    content: list[str] = []
    reasoning: list[str] = []
    reasoning_key = "reasoning_content"
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage = None
    head: dict[str, Any] = {}
    error = None
    for ch in chunks:
        for k in ("id", "model", "created"):
            if k not in head and ch.get(k):
                head[k] = ch[k]
        if ch.get("usage"):
            usage = ch["usage"]
        if ch.get("error"):
            error = ch["error"]
        for choice in ch.get("choices") or []:
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                content.append(delta["content"])
            for rk in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(rk), str) and delta[rk]:
                    reasoning.append(delta[rk])
                    reasoning_key = rk
            for tc in delta.get("tool_calls") or []:
                idx = int(tc.get("index", len(calls)))
                entry = calls.setdefault(
                    idx, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                if tc.get("id"):
                    entry["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name") and not entry["function"]["name"]:
                    entry["function"]["name"] = fn["name"]
                if fn.get("arguments"):
                    entry["function"]["arguments"] += fn["arguments"]
    tool_calls = [calls[i] for i in sorted(calls)]
    for i, tc in enumerate(tool_calls):
        tc["id"] = tc["id"] or f"call_{i}"
    out = _completion(
        content="".join(content) if content else None,
        model=str(head.get("model", "")),
        response_id=head.get("id"),
        finish_reason=finish or ("tool_calls" if tool_calls else "stop"),
        tool_calls=tool_calls or None,
        usage=usage,
    )
    if reasoning:
        msg = out["choices"][0]["message"]
        msg[reasoning_key] = "".join(reasoning)
    if head.get("created"):
        out["created"] = head["created"]
    if error is not None:
        out["error"] = error
    return out


def _pieces(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def sse_from_completion(completion: dict[str, Any], *, include_usage: bool) -> list[bytes]:
    """The SSE events (``data: {...}\\n\\n`` ... ``data: [DONE]\\n\\n``) that stream
    ``completion`` in OpenAI's chunk shape (what a replayed streamed request receives)."""
    cid = completion.get("id") or f"chatcmpl-{uuid.uuid4().hex[:12]}"
    created = completion.get("created") or int(time.time())
    model = completion.get("model", "")
    choice = (completion.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    finish = choice.get("finish_reason") or "stop"

    def event(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        obj = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()

    out = [event({"role": "assistant", "content": ""})]
    for rk in ("reasoning_content", "reasoning"):
        if isinstance(msg.get(rk), str) and msg[rk]:
            out += [event({rk: p}) for p in _pieces(msg[rk])]
    if isinstance(msg.get("content"), str) and msg["content"]:
        out += [event({"content": p}) for p in _pieces(msg["content"])]
    for index, tc in enumerate(msg.get("tool_calls") or []):
        fn = tc.get("function") or {}
        head = {"index": index, "id": tc.get("id"), "type": "function"}
        out.append(
            event({"tool_calls": [head | {"function": {"name": fn.get("name"), "arguments": ""}}]})
        )
        for p in _pieces(fn.get("arguments") or ""):
            if p:
                out.append(event({"tool_calls": [{"index": index, "function": {"arguments": p}}]}))
    out.append(event({}, finish))
    if include_usage and completion.get("usage") is not None:
        obj = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": completion["usage"],
        }
        out.append(f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode())
    out.append(b"data: [DONE]\n\n")
    return out


def _error_body(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": status}}, status_code=status
    )


def _delta(
    prev: dict[str, Any] | None, prev_seq: int | None, body: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, int] | None]:
    """(request to record, base) for ``body`` given the previous recorded request."""
    if prev is None or prev_seq is None:
        return body, None
    old = prev.get("messages")
    new = body.get("messages")
    if not isinstance(old, list) or not isinstance(new, list):
        return body, None
    k = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        k += 1
    if k == 0:
        return body, None
    changed = {f: v for f, v in body.items() if f != "messages" and prev.get(f, _MISSING) != v}
    dropped = [f for f in prev if f not in body and f != "messages"]
    out = {**changed, "messages": new[k:]}
    if dropped:
        out["__dropped__"] = dropped
    return out, {"seq": prev_seq, "messages": k}


_MISSING = object()


def read_records(path: Path | str) -> list[dict[str, Any]]:
    """The records of a gateway record file (:data:`RECORD_FILE`) with every ``request``
    rebuilt whole (see :meth:`Gateway._record`). Raises UserError naming the file and line for
    a line that is not JSON or a ``base`` that is not in the file."""
    p = Path(path)
    full: dict[int, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            raise UserError(f"{p}:{n}: recorded model calls: not a JSON line") from None
        if not isinstance(rec, dict):
            continue
        rec["request"] = _rebuild(rec, full, p, n)
        if isinstance(rec.get("seq"), int):
            full[rec["seq"]] = rec["request"]
        rec.pop("base", None)
        out.append(rec)
    return out


def _rebuild(
    rec: dict[str, Any], full: dict[int, dict[str, Any]], path: Path, line: int
) -> dict[str, Any]:
    request = rec.get("request")
    base = rec.get("base")
    if not isinstance(request, dict) or not isinstance(base, dict):
        return request if isinstance(request, dict) else {}
    prev = full.get(base.get("seq"))  # type: ignore[arg-type]
    if prev is None:
        raise UserError(f"{path}:{line}: base: request seq {base.get('seq')} is not in the file")
    dropped = set(request.get("__dropped__") or [])
    body = {k: v for k, v in prev.items() if k not in dropped}
    body.update({k: v for k, v in request.items() if k not in ("messages", "__dropped__")})
    body["messages"] = list(prev.get("messages") or [])[: int(base.get("messages", 0))] + list(
        request.get("messages") or []
    )
    return body


# ------------------------------------------------------------------------------ leases


@dataclass
class GatewayLease:
    """One trial's (or one grading phase's) access to the gateway.

    ``token``: the placeholder credential the sandbox sees; ``endpoint``: the upstream (None:
    answer from the cache only); ``role``: agent | judge; ``task_id``/``run_index``: the replay
    scope; ``record_path``: the JSONL file every request is appended to, in ``record_format``
    ("calls": :data:`RECORD_FILE` lines, "judge": judge_chat.jsonl lines); caps (None = no
    cap): ``max_cost_usd`` (USD), ``max_tokens`` (tokens), ``max_requests`` (requests);
    ``cache`` / ``cache_mode``: see :data:`CacheMode`; ``key_model``: the model name used in
    cache keys (default: the endpoint's name; judge proxies use :data:`JUDGE_KEY_MODEL`, so a
    recorded judge reply matches whichever judge endpoint is configured, or none); ``retry``:
    upstream retries for this lease (default: the gateway's; a client that retries on its own,
    like OpenClaw, gets a shorter one so retries do not multiply).

    Counters (read them with the properties; they are updated from the gateway's thread):
    ``usage`` (a :class:`Usage` copy), ``requests``, ``refusals`` (why requests were refused:
    ``budget``, ``cost_budget``, ``token_budget``, ``max_requests``, ``replay_miss``,
    ``no_upstream``), ``upstream_errors`` (one line per upstream failure after retries).
    """

    gateway: Gateway
    token: str
    trial_id: str
    endpoint: ModelEndpoint | None
    role: str = "agent"
    task_id: str | None = None
    run_index: int = 0
    record_path: Path | None = None
    record_format: Literal["calls", "judge"] = "calls"
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    max_requests: int | None = None
    cache: ResponseCache | None = None
    cache_mode: CacheMode = "off"
    key_model: str | None = None
    retry: RetryPolicy | None = None
    closed: bool = False
    _usage: Usage = field(default_factory=Usage)
    _requests: int = 0
    _refusals: list[str] = field(default_factory=list)
    _upstream_errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last_body: dict[str, Any] | None = None
    _last_seq: int | None = None

    @property
    def model_name(self) -> str:
        """The endpoint's name (``provider/model``), or "" without an endpoint."""
        return self.endpoint.name if self.endpoint is not None else ""

    @property
    def cache_model(self) -> str:
        """The model name in this lease's cache keys (``key_model``, else the endpoint's
        name)."""
        return self.key_model if self.key_model is not None else self.model_name

    @property
    def scope(self) -> str | None:
        return f"{self.task_id}#{self.run_index}" if self.task_id is not None else None

    @property
    def usage(self) -> Usage:
        """Tokens, USD, requests and retries counted for this lease so far (a copy)."""
        with self._lock:
            return self._usage.model_copy()

    @property
    def requests(self) -> int:
        with self._lock:
            return self._requests

    @property
    def refusals(self) -> list[str]:
        with self._lock:
            return list(self._refusals)

    @property
    def upstream_errors(self) -> list[str]:
        with self._lock:
            return list(self._upstream_errors)

    @property
    def host_base_url(self) -> str:
        """``http://127.0.0.1:<port>/t/<token>/v1``: the gateway for host-side clients."""
        return f"{self.gateway.host_url}/t/{self.token}/v1"

    @staticmethod
    def sandbox_base_url(port: int = FORWARDER_PORT) -> str:
        """``http://127.0.0.1:<port>/v1``: the gateway through a sandbox's forwarder (the
        lease's token goes in the Authorization header, as the API key)."""
        return f"http://127.0.0.1:{port}/v1"

    def chat_model(
        self,
        *,
        retry: RetryPolicy | None = None,
        stream: bool = False,
        timeout_s: float | None = None,
    ) -> GatewayChatModel:
        """An :class:`OpenAIChatModel` on this lease (host side). The gateway does the upstream
        retries, so by default the client makes one attempt per call."""
        return GatewayChatModel(self, retry=retry, stream=stream, timeout_s=timeout_s)

    def _count(self, usage: Usage | None, retries: int = 0) -> None:
        with self._lock:
            if usage is not None:
                self._usage = self._usage.add(usage)
            self._usage.retries += retries

    def _refuse(self, why: str) -> None:
        with self._lock:
            self._refusals.append(why)


def placeholder_endpoint(name: str, *, prices: Any = None) -> ModelEndpoint:
    """An endpoint that is never called (replay without a model server): ``name`` is
    ``provider/model``; the base URL is unroutable."""
    provider, _, model_id = name.partition("/")
    ep = ModelEndpoint(
        name=name,
        provider=provider or "replay",
        model_id=model_id or name,
        base_url="http://replay.invalid/v1",
    )
    if prices is not None:
        ep.prices = prices
    return ep


CAP_REFUSALS = ("budget", "cost_budget", "token_budget", "max_requests")
"""Refusal kinds that are caps (job budget, trial cost, trial tokens, trial requests)."""


class GatewayRefusal(BudgetExceeded):
    """The gateway refused a request for a cap. ``kind``: one of :data:`CAP_REFUSALS`
    (the runner ends the agent phase with the matching stop reason and grades the trial)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class GatewayChatModel(OpenAIChatModel):
    """An :class:`OpenAIChatModel` whose requests go through a :class:`GatewayLease` (same
    name, provider, model id and prices as the upstream endpoint, so transcripts and usage are
    those of a direct call). ``lease`` is kept for agents that need the gateway itself."""

    def __init__(
        self,
        lease: GatewayLease,
        *,
        retry: RetryPolicy | None = None,
        stream: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        upstream = lease.endpoint or placeholder_endpoint("gateway/unknown")
        endpoint = upstream.model_copy(
            update={
                "base_url": f"{lease.gateway.host_url}/v1",
                "api_key": SecretStr(lease.token),
                "api_key_env": None,
                "extra_body": {},
                "headers": {},
            }
        )
        super().__init__(
            endpoint,
            retry=retry or RetryPolicy(attempts=1),
            stream=stream,
            timeout_s=timeout_s or upstream.timeout_s or 600.0,
        )
        self.lease = lease

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        """:meth:`OpenAIChatModel.chat`; a request the gateway refused for a cap raises
        :class:`GatewayRefusal` (a :class:`clawrig.errors.BudgetExceeded`) instead of
        ModelRequestError. A replay miss stays a ModelRequestError (it stops the job)."""
        before = len(self.lease.refusals)
        try:
            return await super().chat(messages, **kwargs)
        except ModelRequestError as exc:
            new = self.lease.refusals[before:]
            if new and new[-1] in CAP_REFUSALS:
                raise GatewayRefusal(str(exc), new[-1]) from None
            raise


# ------------------------------------------------------------------------------ the gateway


class _Retryable(Exception):
    def __init__(self, status: int, headers: httpx.Headers, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = headers
        self.body = body


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, _Retryable | httpx.TransportError)


def _retry_after(exc: BaseException) -> float | None:
    return retry_after_seconds(exc.headers) if isinstance(exc, _Retryable) else None


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _upstream_message(body: bytes) -> str:
    try:
        obj = json.loads(body)
    except ValueError:
        return _one_line(body.decode("utf-8", "replace")) or "(empty body)"
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and err.get("message"):
            return _one_line(str(err["message"]))
        if isinstance(err, str):
            return _one_line(err)
    return _one_line(json.dumps(obj)[:300])


class Gateway:
    """The job's model gateway (see the module docs).

    ``budget_usd``: the job's cap in USD on real upstream spend (cache hits are free); None =
    no cap. ``cache`` / ``cache_mode``: the default for leases (``--replay``: a
    :meth:`ResponseCache.from_job` cache with mode ``only``). ``retry``: upstream retries.
    ``socket_dir``: the folder for the unix socket and the forwarder script (default: a new
    temporary folder, removed by :meth:`stop`). ``tcp``: also listen on 127.0.0.1 (needed by
    :meth:`GatewayLease.chat_model`). ``timeout_s``: seconds per upstream attempt.

    Thread-safe; :meth:`start` / :meth:`stop` (or ``with``) from any thread or event loop.
    """

    def __init__(
        self,
        *,
        budget_usd: float | None = None,
        cache: ResponseCache | None = None,
        cache_mode: CacheMode | None = None,
        retry: RetryPolicy | None = None,
        socket_dir: Path | None = None,
        tcp: bool = True,
        timeout_s: float = 600.0,
    ) -> None:
        self.budget_usd = budget_usd
        self.cache = cache
        self.cache_mode: CacheMode = cache_mode or ("prefer" if cache is not None else "off")
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        self._tcp = tcp
        self._own_dir = socket_dir is None
        self._dir = Path(socket_dir) if socket_dir is not None else None
        self._leases: dict[str, GatewayLease] = {}
        self._lock = threading.Lock()
        self._spent = 0.0
        self._seq = 0
        self._port = 0
        self._server: ThreadedServer | None = None
        self._thread: threading.Thread | None = None
        self._sockets: list[socket.socket] = []
        self._client: httpx.AsyncClient | None = None
        self.app = self._build_app()

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def folder(self) -> Path:
        """The host folder bound into sandboxes (socket + forwarder script)."""
        if self._dir is None:
            raise RuntimeError("the gateway is not started")
        return self._dir

    @property
    def socket_path(self) -> Path:
        """The gateway's unix socket on the host."""
        return self.folder / SOCKET_NAME

    @property
    def sandbox_socket(self) -> str:
        """The unix socket's path inside a sandbox bound with :meth:`sandbox_binds`."""
        return f"{SANDBOX_GATEWAY_DIR}/{SOCKET_NAME}"

    @property
    def host_url(self) -> str:
        """``http://127.0.0.1:<port>`` (no path) for host-side clients."""
        if not self._port:
            raise RuntimeError("the gateway has no TCP listener (start it with tcp=True)")
        return f"http://127.0.0.1:{self._port}"

    @property
    def spent_usd(self) -> float:
        """USD spent upstream by the whole job so far (cache hits excluded)."""
        with self._lock:
            return self._spent

    def sandbox_binds(self) -> list[Bind]:
        """The read-only bind that makes the gateway reachable from a sandbox (through
        :func:`start_forwarder`)."""
        return [Bind(source=self.folder, dest=SANDBOX_GATEWAY_DIR, read_only=True)]

    def start(self) -> Gateway:
        """Create the socket folder, listen, and serve in a background thread. Idempotent."""
        if self._thread is not None:
            return self
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="clawrig-gw-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self._dir, 0o755)  # sandboxes may run as another host uid
        shutil.copyfile(Path(__file__).with_name("forwarder.py"), self._dir / FORWARDER_NAME)
        os.chmod(self._dir / FORWARDER_NAME, 0o644)
        path = self.socket_path
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(str(path))
        os.chmod(path, 0o666)
        self._sockets = [unix]
        if self._tcp:
            tcp = tcp_listener("127.0.0.1", 0)
            self._port = tcp.getsockname()[1]
            self._sockets.append(tcp)
        try:
            self._server = ThreadedServer(
                self.app,
                self._sockets,
                name="clawrig-gateway",
                start_timeout_s=15,
                stop_timeout_s=15,
                lifespan="on",
                timeout_graceful_shutdown=2,
                timeout_keep_alive=30,
            ).start()
        except RuntimeError:
            self.stop()
            raise RuntimeError("the model gateway could not start") from None
        self._thread = self._server.thread
        return self

    def stop(self) -> None:
        """Stop serving, close the sockets, remove a temporary folder. Idempotent."""
        if self._server is not None:
            self._server.stop()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()
        self._sockets = []
        self._server = self._thread = None
        self._port = 0
        if self._dir is not None:
            if self._own_dir:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None
            else:
                with contextlib.suppress(FileNotFoundError):
                    (self._dir / SOCKET_NAME).unlink()

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- leases -------------------------------------------------------------------------------
    def open_trial(
        self,
        endpoint: ModelEndpoint | None,
        *,
        trial_id: str,
        role: str = "agent",
        task_id: str | None = None,
        run_index: int = 0,
        record_path: Path | None = None,
        record_format: Literal["calls", "judge"] = "calls",
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        max_requests: int | None = None,
        cache: ResponseCache | None = None,
        cache_mode: CacheMode | None = None,
        key_model: str | None = None,
    ) -> GatewayLease:
        """Register a trial (or a grading phase) and return its lease with a fresh random
        token. ``cache``/``cache_mode`` default to the gateway's. Arguments: see
        :class:`GatewayLease`."""
        lease = GatewayLease(
            gateway=self,
            token=f"clawrig-{secrets.token_urlsafe(24)}",
            trial_id=trial_id,
            endpoint=endpoint,
            role=role,
            task_id=task_id,
            run_index=run_index,
            record_path=Path(record_path) if record_path is not None else None,
            record_format=record_format,
            max_cost_usd=max_cost_usd,
            max_tokens=max_tokens,
            max_requests=max_requests,
            cache=cache if cache is not None else self.cache,
            cache_mode=cache_mode or (self.cache_mode if cache is None else "prefer"),
            key_model=key_model,
        )
        if lease.record_path is not None:
            lease.record_path.parent.mkdir(parents=True, exist_ok=True)
            lease.record_path.touch()
        with self._lock:
            self._leases[lease.token] = lease
        return lease

    def close_trial(self, lease: GatewayLease) -> Usage:
        """Revoke the lease's token (later requests get HTTP 401); returns its usage."""
        with self._lock:
            self._leases.pop(lease.token, None)
        lease.closed = True
        return lease.usage

    @asynccontextmanager
    async def trial(
        self, endpoint: ModelEndpoint | None, **kwargs: Any
    ) -> AsyncIterator[GatewayLease]:
        """``async with gw.trial(endpoint, trial_id=...) as lease``: open, then close."""
        lease = self.open_trial(endpoint, **kwargs)
        try:
            yield lease
        finally:
            self.close_trial(lease)

    def _lease_for(self, request: Request, token: str | None) -> GatewayLease | None:
        if token is None:
            auth = request.headers.get("authorization", "")
            if auth.lower().startswith("bearer "):
                token = auth[7:].strip()
            else:
                token = request.headers.get("x-api-key") or request.headers.get("api-key")
        if not token:
            return None
        with self._lock:
            return self._leases.get(token)

    # -- the app ------------------------------------------------------------------------------
    def _build_app(self) -> FastAPI:
        @asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s, connect=30.0),
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            )
            try:
                yield
            finally:
                await self._client.aclose()
                self._client = None

        app = FastAPI(title="clawrig model gateway", lifespan=lifespan)

        @app.get("/healthz")
        async def healthz() -> PlainTextResponse:
            return PlainTextResponse("ok")

        async def models(request: Request, token: str | None = None) -> Response:
            lease = self._lease_for(request, token)
            if lease is None:
                return _error_body(401, "clawrig gateway: unknown or closed trial token", "auth")
            ids = [lease.endpoint.model_id] if lease.endpoint is not None else []
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "clawrig"} for m in ids]
            return JSONResponse({"object": "list", "data": data})

        async def chat(request: Request, token: str | None = None) -> Response:
            lease = self._lease_for(request, token)
            if lease is None:
                return _error_body(401, "clawrig gateway: unknown or closed trial token", "auth")
            try:
                body = await request.json()
            except ValueError:
                return _error_body(
                    400, "clawrig gateway: the request body is not JSON", "bad_request"
                )
            if not isinstance(body, dict):
                return _error_body(
                    400, "clawrig gateway: the body must be a JSON object", "bad_request"
                )
            return await self._chat(lease, body)

        app.add_api_route("/v1/models", models, methods=["GET"])
        app.add_api_route("/t/{token}/v1/models", models, methods=["GET"])
        app.add_api_route("/v1/chat/completions", chat, methods=["POST"])
        app.add_api_route("/t/{token}/v1/chat/completions", chat, methods=["POST"])
        return app

    def _refusal(self, lease: GatewayLease) -> tuple[str, str] | None:
        """(kind, message) when a cap forbids another request for ``lease``."""
        if self.budget_usd is not None and self.spent_usd >= self.budget_usd:
            return (
                "budget",
                f"clawrig gateway: the job's budget of ${self.budget_usd:g} is spent "
                f"(${self.spent_usd:.4f}); no more model requests (--budget-usd)",
            )
        u = lease.usage
        if lease.max_cost_usd is not None and u.cost_usd >= lease.max_cost_usd:
            return (
                "cost_budget",
                f"clawrig gateway: trial {lease.trial_id} reached its cost cap of "
                f"${lease.max_cost_usd:g} (${u.cost_usd:.4f} spent)",
            )
        if lease.max_tokens is not None and u.total_tokens >= lease.max_tokens:
            return (
                "token_budget",
                f"clawrig gateway: trial {lease.trial_id} reached its token cap of "
                f"{lease.max_tokens} ({u.total_tokens} used)",
            )
        if lease.max_requests is not None and lease.requests >= lease.max_requests:
            return (
                "max_requests",
                f"clawrig gateway: trial {lease.trial_id} reached its limit of "
                f"{lease.max_requests} model requests (--max-turns)",
            )
        return None

    async def _chat(self, lease: GatewayLease, body: dict[str, Any]) -> Response:
        stream = bool(body.get("stream"))
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        key = request_key(lease.cache_model, body)
        started = time.monotonic()
        with self._lock:
            self._seq += 1
            seq = self._seq
        refusal = self._refusal(lease)
        if refusal is not None:
            kind, msg = refusal
            lease._refuse(kind)
            self._record(lease, seq, key, body, status=402, error=msg, started=started)
            return _error_body(402, msg, "budget_exceeded" if "budget" in kind else kind)
        with lease._lock:
            lease._requests += 1
            n = lease._requests
        cache = lease.cache
        if cache is not None and lease.cache_mode != "off":
            hit = cache.take(key, lease.scope)
            if hit is not None:
                usage = usage_from_openai(hit.get("usage"), self._prices(lease))
                lease._count(usage)
                self._record(
                    lease,
                    seq,
                    key,
                    body,
                    status=200,
                    response=hit,
                    usage=usage,
                    cached=True,
                    started=started,
                )
                return self._answer(hit, stream, wants_usage)
            if lease.cache_mode == "only":
                lease._refuse("replay_miss")
                msg = (
                    f"clawrig gateway: replay: no recorded response for request #{n} of trial "
                    f"{lease.trial_id} (key {key[:12]}): the run diverged from the recorded job"
                )
                self._record(lease, seq, key, body, status=404, error=msg, started=started)
                return _error_body(404, msg, "replay_miss")
        if lease.endpoint is None:
            lease._refuse("no_upstream")
            msg = (
                f"clawrig gateway: no model configured for {lease.role} requests of trial "
                f"{lease.trial_id} and no recorded response (set --judge / JUDGE_MODEL)"
            )
            self._record(lease, seq, key, body, status=503, error=msg, started=started)
            return _error_body(503, msg, "no_upstream")
        return await self._forward(lease, seq, key, body, stream, wants_usage, started)

    @staticmethod
    def _prices(lease: GatewayLease) -> Any:
        from clawrig.llm.pricing import Prices

        return lease.endpoint.prices if lease.endpoint is not None else Prices()

    def _answer(self, completion: dict[str, Any], stream: bool, wants_usage: bool) -> Response:
        if not stream:
            return JSONResponse(completion)
        events = sse_from_completion(completion, include_usage=wants_usage)

        async def gen() -> AsyncIterator[bytes]:
            for e in events:
                yield e

        return StreamingResponse(gen(), media_type="text/event-stream")

    async def _forward(
        self,
        lease: GatewayLease,
        seq: int,
        key: str,
        body: dict[str, Any],
        stream: bool,
        wants_usage: bool,
        started: float,
    ) -> Response:
        ep = lease.endpoint
        assert ep is not None and self._client is not None
        out = dict(body)
        out["model"] = ep.model_id
        for k, v in ep.extra_body.items():
            out.setdefault(k, v)
        if stream:
            out["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        headers = {"content-type": "application/json", **ep.headers}
        if ep.api_key is not None:
            headers["authorization"] = f"Bearer {ep.api_key.get_secret_value()}"
        url = f"{ep.base_url.rstrip('/')}/chat/completions"
        client = self._client
        attempts = 0

        async def attempt() -> httpx.Response:
            nonlocal attempts
            attempts += 1
            req = client.build_request("POST", url, json=out, headers=headers)
            resp = await client.send(req, stream=True)
            if resp.status_code >= 500 or resp.status_code in RETRY_STATUSES:
                data = await resp.aread()
                await resp.aclose()
                raise _Retryable(resp.status_code, resp.headers, data)
            return resp

        policy = lease.retry or self.retry
        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.attempts),
            wait=RetryWait(policy, _retry_after),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        where = f"{ep.provider} ({ep.base_url})"
        try:
            resp = await retrying(attempt)
        except _Retryable as exc:
            msg = (
                f"{ep.name}: HTTP {exc.status} from {where} after {attempts} attempt"
                f"{'s' if attempts != 1 else ''}: {_upstream_message(exc.body)}"
            )
            with lease._lock:
                lease._upstream_errors.append(msg)
            lease._count(None, retries=attempts - 1)
            self._record(
                lease,
                seq,
                key,
                body,
                status=exc.status,
                error=msg,
                started=started,
                retries=attempts - 1,
            )
            return Response(
                exc.body,
                status_code=exc.status,
                media_type=exc.headers.get("content-type", "application/json"),
            )
        except httpx.TransportError as exc:
            msg = (
                f"{ep.name}: no reply from {where} after {attempts} attempt"
                f"{'s' if attempts != 1 else ''}: {type(exc).__name__}: {_one_line(str(exc))}"
            )
            with lease._lock:
                lease._upstream_errors.append(msg)
            lease._count(None, retries=attempts - 1)
            self._record(
                lease, seq, key, body, status=502, error=msg, started=started, retries=attempts - 1
            )
            return _error_body(502, f"clawrig gateway: {msg}", "upstream_unreachable")
        retries = attempts - 1
        ctype = resp.headers.get("content-type", "")
        if resp.status_code != 200:
            data = await resp.aread()
            await resp.aclose()
            msg = f"{ep.name}: HTTP {resp.status_code} from {where}: {_upstream_message(data)}"
            lease._count(None, retries=retries)
            self._record(
                lease,
                seq,
                key,
                body,
                status=resp.status_code,
                error=msg,
                started=started,
                retries=retries,
            )
            return Response(
                data, status_code=resp.status_code, media_type=ctype or "application/json"
            )
        if "text/event-stream" not in ctype:
            data = await resp.aread()
            await resp.aclose()
            try:
                completion = json.loads(data)
            except ValueError:
                msg = f"{ep.name}: unusable reply from {where}: not JSON"
                self._record(
                    lease, seq, key, body, status=502, error=msg, started=started, retries=retries
                )
                return _error_body(502, f"clawrig gateway: {msg}", "bad_upstream_reply")
            self._finish(lease, seq, key, body, completion, started, retries)
            return self._answer(completion, stream, wants_usage)
        return StreamingResponse(
            self._relay(lease, seq, key, body, resp, wants_usage, started, retries),
            media_type="text/event-stream",
        )

    async def _relay(
        self,
        lease: GatewayLease,
        seq: int,
        key: str,
        body: dict[str, Any],
        resp: httpx.Response,
        wants_usage: bool,
        started: float,
        retries: int,
    ) -> AsyncIterator[bytes]:
        """Pass an upstream SSE stream through line by line, keeping the parsed chunks."""
        chunks: list[dict[str, Any]] = []
        error: str | None = None
        done = False
        try:
            skip_blank = False
            async for line in resp.aiter_lines():
                if line.startswith("data:"):
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        done = True
                    else:
                        try:
                            obj = json.loads(payload)
                        except ValueError:
                            obj = None
                        if isinstance(obj, dict):
                            chunks.append(obj)
                            if not obj.get("choices") and obj.get("usage") and not wants_usage:
                                skip_blank = True
                                continue
                elif line == "" and skip_blank:
                    skip_blank = False
                    continue
                skip_blank = False
                yield (line + "\n").encode("utf-8")
        except httpx.TransportError as exc:
            error = f"upstream stream broke: {type(exc).__name__}: {_one_line(str(exc))}"
            with lease._lock:
                lease._upstream_errors.append(f"{lease.model_name}: {error}")
        finally:
            await resp.aclose()
            completion = completion_from_chunks(chunks)
            if error is None and not done and not chunks:
                error = "upstream stream ended without any chunk"
            self._finish(lease, seq, key, body, completion, started, retries, error=error)

    def _finish(
        self,
        lease: GatewayLease,
        seq: int,
        key: str,
        body: dict[str, Any],
        completion: dict[str, Any],
        started: float,
        retries: int,
        *,
        error: str | None = None,
    ) -> None:
        usage = usage_from_openai(completion.get("usage"), self._prices(lease))
        lease._count(usage, retries=retries)
        with self._lock:
            self._spent += usage.cost_usd
        if completion.get("error") and error is None:
            error = (
                f"{lease.model_name}: error in reply: {_one_line(json.dumps(completion['error']))}"
            )
        self._record(
            lease,
            seq,
            key,
            body,
            status=200,
            response=completion,
            usage=usage,
            error=error,
            started=started,
            retries=retries,
        )
        if error is None and lease.cache is not None and lease.cache_mode == "prefer":
            persist = self._judge_record(
                lease, key, body, completion, usage, False, None, time.monotonic() - started
            )
            lease.cache.add(key, completion, lease.scope, persist=persist)

    # -- records ------------------------------------------------------------------------------
    def _record(
        self,
        lease: GatewayLease,
        seq: int,
        key: str,
        body: dict[str, Any],
        *,
        status: int,
        response: dict[str, Any] | None = None,
        usage: Usage | None = None,
        cached: bool = False,
        error: str | None = None,
        started: float,
        retries: int = 0,
    ) -> None:
        """Append one line to the lease's record file.

        "calls" shape (:data:`RECORD_FILE`): {seq, ts (Unix s), trial_id, task_id, run_index,
        role, model (endpoint name), key, stream, request, base, status (HTTP), response (a
        chat.completion object; streams assembled) | null, usage (clawrig Usage) | null,
        cached, error | null, latency_s, retries}. ``key`` is :func:`request_key` of the full
        request. To keep the file linear in the conversation's length, ``request`` holds only
        what changed since the lease's previous recorded request when ``base`` is set:
        ``base = {"seq": s, "messages": k}`` means the full request is the one recorded at
        ``seq`` s, with the fields given here replacing its fields and ``messages`` = its first
        k messages + the messages given here (:func:`read_records` rebuilds full requests).
        "judge" shape (judge_chat.jsonl, always whole requests): see :meth:`_judge_record`.
        """
        path = lease.record_path
        if path is None:
            return
        latency = round(time.monotonic() - started, 6)
        with lease._lock:
            if lease.record_format == "judge":
                rec = self._judge_record(lease, key, body, response, usage, cached, error, latency)
            else:
                request, base = _delta(lease._last_body, lease._last_seq, body)
                lease._last_body, lease._last_seq = body, seq
                rec = {
                    "seq": seq,
                    "ts": time.time(),
                    "trial_id": lease.trial_id,
                    "task_id": lease.task_id,
                    "run_index": lease.run_index,
                    "role": lease.role,
                    "model": lease.model_name,
                    "key": key,
                    "stream": bool(body.get("stream")),
                    "request": request,
                    "base": base,
                    "status": status,
                    "response": response,
                    "usage": usage.model_dump() if usage is not None else None,
                    "cached": cached,
                    "error": error,
                    "latency_s": latency,
                    "retries": retries,
                }
            line = json.dumps(rec, ensure_ascii=False, default=str) + "\n"
            with path.open("a", encoding="utf-8") as fh:
                fh.write(line)

    @staticmethod
    def _judge_record(
        lease: GatewayLease,
        key: str,
        body: dict[str, Any],
        completion: dict[str, Any] | None,
        usage: Usage | None,
        cached: bool,
        error: str | None,
        latency: float,
    ) -> dict[str, Any]:
        """judge_chat.jsonl shape (that of :mod:`clawrig.grading.judge`, so either reader
        takes both): {ts, kind: "grader", model, key, request (the body without model and
        stream fields), response {content, reasoning, finish_reason, model, response_id,
        tool_calls, usage, latency_s, completion} | null, cached, valid, error}."""
        response = None
        if completion is not None:
            choice = (completion.get("choices") or [{}])[0]
            msg = choice.get("message") or {}
            response = {
                "content": msg.get("content"),
                "reasoning": msg.get("reasoning_content") or msg.get("reasoning"),
                "finish_reason": choice.get("finish_reason"),
                "model": completion.get("model"),
                "response_id": completion.get("id"),
                "tool_calls": msg.get("tool_calls"),
                "usage": usage.model_dump() if usage is not None else None,
                "latency_s": latency,
                "completion": completion,
            }
        return {
            "ts": time.time(),
            "kind": "grader",
            "model": lease.model_name,
            "key": key,
            "request": {k: v for k, v in body.items() if k not in KEY_EXCLUDED},
            "response": response,
            "cached": cached,
            "valid": response is not None and error is None,
            "error": error,
        }


_CURRENT: contextvars.ContextVar[Gateway | None] = contextvars.ContextVar(
    "clawrig_gateway", default=None
)


def current_gateway() -> Gateway | None:
    """The job's gateway set by :func:`use_gateway` in this context (asyncio tasks inherit
    it), or None."""
    return _CURRENT.get()


@contextlib.contextmanager
def use_gateway(gateway: Gateway | None) -> Any:
    """``with use_gateway(gw): asyncio.run(run_job(...))``: agents that need the gateway
    (``--agent openclaw``) use ``gw`` for the trials started inside."""
    token = _CURRENT.set(gateway)
    try:
        yield gateway
    finally:
        _CURRENT.reset(token)


def replay_gateway(job_dir: Path | str, **kwargs: Any) -> Gateway:
    """``--replay JOB_DIR``: an (unstarted) gateway that answers every request from the calls
    recorded in a finished job folder and refuses any other (HTTP 404, one line). ``kwargs``
    go to :class:`Gateway`. Raises UserError when the folder holds no recorded call."""
    return Gateway(cache=ResponseCache.from_job(job_dir), cache_mode="only", **kwargs)


def recorded_models(job_dir: Path | str) -> dict[str, str]:
    """The model names a finished job used, by role (``agent``, ``judge``), from its recorded
    calls (for ``--replay`` without ``--model`` / ``--judge``)."""
    out: dict[str, str] = {}
    root = Path(job_dir)
    for path in sorted(root.glob(f"**/{RECORD_FILE}")):
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text(encoding="utf-8").splitlines():
                rec = json.loads(line)
                if isinstance(rec, dict) and rec.get("model") and rec.get("role"):
                    out.setdefault(str(rec["role"]), str(rec["model"]))
        if {"agent", "judge"} <= out.keys():
            break
    return out


def replay_model(name: str, *, prices: Any = None) -> OpenAIChatModel:
    """A chat model for ``name`` that is only ever answered by a replay gateway (its endpoint
    is :func:`placeholder_endpoint`: no base URL or key needed)."""
    return OpenAIChatModel(placeholder_endpoint(name, prices=prices))


# ------------------------------------------------------------------------------ forwarder


@dataclass
class Forwarder:
    """A running in-sandbox forwarder: ``base_url`` is what programs inside use."""

    handle: ProcessHandle
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.handle.kill()


async def start_forwarder(
    sandbox: Sandbox,
    gateway: Gateway,
    *,
    port: int = FORWARDER_PORT,
    python: str = "/usr/bin/python3",
    ready_timeout_s: float = 15.0,
) -> Forwarder:
    """Start the forwarder inside ``sandbox`` (bound with ``gateway.sandbox_binds()``) on
    ``127.0.0.1:port`` and wait until it listens.

    On the ``local`` backend (no binds, host network) the host's socket path is used. Raises
    :class:`clawrig.errors.SandboxError` when it does not come up within ``ready_timeout_s``
    seconds (with its output).
    """
    if sandbox.backend == "local":
        script, sock = str(gateway.folder / FORWARDER_NAME), str(gateway.socket_path)
    else:
        script, sock = f"{SANDBOX_GATEWAY_DIR}/{FORWARDER_NAME}", gateway.sandbox_socket
    handle = await sandbox.spawn(
        [python, "-I", "-S", "-u", script, "--port", str(port), "--socket", sock]
    )
    deadline = time.monotonic() + ready_timeout_s
    text = ""
    while time.monotonic() < deadline:
        text, _ = await handle.read_log(0)
        if READY_PREFIX in text:
            return Forwarder(handle=handle, port=port)
        code = await handle.poll()
        if code is not None:
            break
        await asyncio.sleep(0.02)
    with contextlib.suppress(Exception):
        await handle.kill()
    raise SandboxError(
        "the model gateway forwarder did not start in the sandbox: "
        f"{_one_line(text) or 'no output'}"
    )
