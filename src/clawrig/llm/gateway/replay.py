"""Recorded model calls: the one request key, the record file's reader and the replay cache.

Every recorded model call, the agent's or a judge's, is keyed by :func:`request_key`; the
record files (a trial's :data:`RECORD_FILE`, a judge proxy's or :mod:`clawrig.grading.judge`'s
``judge_chat.jsonl``) are read by :func:`read_records` and loaded into a :class:`ResponseCache`
that answers replays (``--replay``, ``--judge-cache``, ``clawrig grade``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from clawrig.errors import UserError
from clawrig.jsonl import jsonl_lines, jsonl_objects
from clawrig.llm.gateway.wire import _completion
from clawrig.spec.layout import JobPaths, TrialPaths

JUDGE_KEY_MODEL = "judge"
"""The model name in the cache keys of judge calls (:func:`request_key`), whichever judge
endpoint answered them, so recorded judge replies match any judge configured later (or none)."""
RECORD_FILE = TrialPaths.MODEL_CALLS
"""The per-trial record of every model request through the gateway (in the trial folder)."""
JUDGE_LOGS = TrialPaths.JUDGE_LOGS
"""A trial's judge logs: the judge proxy's and :mod:`clawrig.grading.judge`'s records."""
KEY_EXCLUDED = frozenset({"model", "stream", "stream_options"})
"""Request fields left out of the cache key: the model is keyed by the endpoint's name, and a
recorded reply can be served streamed or not."""

CacheMode = Literal["off", "prefer", "only"]
"""off: always forward; prefer: answer from the cache when it has the request, else forward
and add the reply; only: answer from the cache, refuse a request it does not hold (replay)."""


# ------------------------------------------------------------------------------ cache keys


def canonical_json(value: Any) -> str:
    """``value`` as the canonical JSON of :func:`request_key` (sorted keys, ``", "`` and
    ``": "`` separators, non-ASCII kept)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def request_key(
    model: str,
    body: dict[str, Any],
    *,
    tools_json: str | None = None,
    messages_json: str | None = None,
) -> str:
    """The one key of every recorded model call, the agent's or a judge's: SHA-256 (hex) of
    ``model`` (the endpoint's name; :data:`JUDGE_KEY_MODEL` for judge calls) and the body's
    canonical JSON (:func:`canonical_json`, UTF-8) without :data:`KEY_EXCLUDED`. A judge
    request of :mod:`clawrig.grading.judge` is the body ``{"messages": [...], "temperature":
    0}``. ``tools_json`` / ``messages_json``: ``canonical_json(body["tools"])`` /
    ``canonical_json(body["messages"])`` made earlier (the same ~10 KB tool list comes with
    every request of a trial, and each request's messages are the last one's and a few more:
    :meth:`GatewayLease.messages_json`); the key is the same with or without them."""
    kept = {k: v for k, v in body.items() if k not in KEY_EXCLUDED}
    made = {
        k: text
        for k, text in (("tools", tools_json), ("messages", messages_json))
        if text is not None and k in kept
    }
    if not made or not all(isinstance(k, str) for k in kept):
        blob = canonical_json({"model": model, "body": kept})
    else:  # the same text, put together around the texts made earlier (json's dict layout)
        fields = ", ".join(
            f"{canonical_json(k)}: {made[k] if k in made else canonical_json(v)}"
            for k, v in sorted(kept.items())
        )
        blob = f'{{"body": {{{fields}}}, "model": {canonical_json(model)}}}'
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ReplayHit:
    """One recorded call a :class:`ResponseCache` serves: the ``completion`` (the provider's
    chat.completion object), the ``scope`` it was recorded in (``"<task_id>#<run_index>"``
    or None) and ``cost_usd``, the USD its record says it cost (None: the record says no cost;
    then the replaying job prices its tokens itself)."""

    completion: dict[str, Any]
    scope: str | None = None
    cost_usd: float | None = None


def recorded_cost(rec: dict[str, Any]) -> float | None:
    """The USD a record of the gateway (``usage.cost_usd``, clawrig's :class:`Usage`) or of a
    judge log (``response.usage.cost_usd``) says its call cost, or None when it says none (or
    no finite, non-negative number)."""
    usage = rec.get("usage")
    if not isinstance(usage, dict):
        response = rec.get("response")
        usage = response.get("usage") if isinstance(response, dict) else None
    cost = usage.get("cost_usd") if isinstance(usage, dict) else None
    if isinstance(cost, bool) or not isinstance(cost, int | float):
        return None
    return float(cost) if math.isfinite(cost) and cost >= 0 else None


class ResponseCache:
    """Recorded chat completions by request key, served in recorded order.

    ``add(key, completion, scope)`` stores one; ``take(key, scope)`` returns the first unserved
    completion recorded in the same ``scope`` (``"<task_id>#<run_index>"``), else the first
    unserved one of any scope, else (every one served) the last one again, so a repeated
    identical request (a re-grade) gets the same answer; :meth:`take_hit` also gives the USD
    the record says the call cost. ``append_to``: a JSONL file that new entries are appended
    to (the ``--judge-cache`` file). Thread-safe.
    """

    def __init__(self, append_to: Path | None = None) -> None:
        self._entries: dict[str, list[ReplayHit]] = {}
        self._served: dict[str, set[int]] = {}
        self._lock = threading.Lock()
        self.append_to = Path(append_to) if append_to is not None else None
        self.hits = 0
        self.misses = 0
        self.refused: dict[str, int] = {}
        """Keys of requests the records hold only as refused, with the HTTP status the provider
        gave (a 400 for a conversation past the context, say): no reply to replay."""

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
        cost_usd: float | None = None,
    ) -> None:
        """Store ``completion`` under ``key`` (``cost_usd``: what the recorded call cost, USD,
        when its record says); ``persist`` (a record) is appended to :attr:`append_to` when
        set."""
        with self._lock:
            self._entries.setdefault(key, []).append(ReplayHit(completion, scope, cost_usd))
            if persist is not None and self.append_to is not None:
                self.append_to.parent.mkdir(parents=True, exist_ok=True)
                with self.append_to.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(persist, ensure_ascii=False, default=str) + "\n")

    def take(self, key: str, scope: str | None = None) -> dict[str, Any] | None:
        """The completion to serve for ``key`` (rules in the class docs), or None."""
        hit = self.take_hit(key, scope)
        return hit.completion if hit is not None else None

    def take_hit(self, key: str, scope: str | None = None) -> ReplayHit | None:
        """The recorded call to serve for ``key`` (rules in the class docs), or None."""
        with self._lock:
            entries = self._entries.get(key)
            if not entries:
                self.misses += 1
                return None
            served = self._served.setdefault(key, set())
            pick = next(
                (i for i, e in enumerate(entries) if i not in served and e.scope == scope), None
            )
            if pick is None:
                pick = next((i for i in range(len(entries)) if i not in served), None)
            if pick is None:
                pick = len(entries) - 1
            served.add(pick)
            self.hits += 1
            return entries[pick]

    def load_records(self, path: Path | str, *, seen: set[tuple[str, str]] | None = None) -> int:
        """Add every answered request of a record file: the gateway's :data:`RECORD_FILE`, a
        judge proxy's or :mod:`clawrig.grading.judge`'s ``judge_chat.jsonl``. ``seen``: (key,
        completion id) pairs already added from the same trial (a judge call recorded both by
        the gateway and by the judge's own log is added once); updated. Returns how many
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
            status = rec.get("status")
            if entry is None and isinstance(status, int) and 400 <= status < 600:
                if isinstance(rec.get("request"), dict):
                    with self._lock:
                        self.refused.setdefault(record_key(rec), status)
            if entry is not None:
                key, completion, scope = entry
                cid = completion.get("id")
                if seen is not None and isinstance(cid, str):
                    if (key, cid) in seen:
                        continue
                    seen.add((key, cid))
                self.add(key, completion, scope, cost_usd=recorded_cost(rec))
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
    def from_job(
        cls,
        job_dir: Path | str,
        *,
        extra: Iterable[Path | str] = (),
        what: str = "--replay",
        allow_empty: bool = False,
    ) -> ResponseCache:
        """Every recorded model call of a finished job folder or of one trial folder (each
        trial's :data:`RECORD_FILE` and :data:`JUDGE_LOGS`, a call recorded in two of them
        counted once; ``_retried`` and ``.tmp-*`` trials are skipped), plus the record files
        ``extra`` (e.g. ``--judge-cache`` files). ``what`` names the option in errors. Raises
        UserError when the folder does not exist, or no recorded call is found and not
        ``allow_empty`` (a re-grade of a trial that called no model)."""
        root = Path(job_dir)
        if not root.is_dir():
            raise UserError(f"{what}: no such job or trial folder: {root}")
        cache = cls()
        files = JobPaths(root).trial_files(RECORD_FILE, *JUDGE_LOGS)
        seen: dict[Path, set[tuple[str, str]]] = {}
        for p in files:
            cache.load_records(p, seen=seen.setdefault(p.parent, set()))
        for extra_file in extra:
            if not Path(extra_file).is_file():
                raise UserError(f"--judge-cache: no such file: {extra_file}")
            cache.load_records(extra_file)
        if len(cache) == 0 and not allow_empty:
            raise UserError(
                f"{what}: {root}: no recorded model calls ({RECORD_FILE}, "
                f"{', '.join(JUDGE_LOGS)}) in its trial folders"
            )
        return cache


def _cache_entry(rec: dict[str, Any]) -> tuple[str, dict[str, Any], str | None] | None:
    """(key, completion, scope) of one record line, or None when it holds no usable reply
    (a harness probe's, ``role`` probe, is no reply a replay gives)."""
    if rec.get("role") == "probe":
        return None
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
    return record_key(rec), completion, scope


def record_key(rec: dict[str, Any]) -> str:
    """The :func:`request_key` of a record (its whole ``request``): judge calls (``role``
    judge, or a judge log's ``kind``) under :data:`JUDGE_KEY_MODEL`, others under the
    recorded ``model``. Worked out from the request, never read from the record, so records
    written before a key rule changed still match."""
    model = (
        JUDGE_KEY_MODEL
        if rec.get("role") == "judge" or "kind" in rec
        else str(rec.get("model") or "")
    )
    request = rec.get("request")
    return request_key(model, request if isinstance(request, dict) else {})


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
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{p}: recorded model calls: not UTF-8 (byte {exc.start})") from None
    for n, line in enumerate(jsonl_lines(text), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
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
    seq, kept = base.get("seq"), base.get("messages", 0)
    prev = full.get(seq) if isinstance(seq, int) else None
    if prev is None:
        raise UserError(f"{path}:{line}: base: request seq {seq!r} is not in the file")
    dropped, messages = request.get("__dropped__") or [], request.get("messages") or []
    if not isinstance(kept, int) or not isinstance(dropped, list) or not isinstance(messages, list):
        raise UserError(f"{path}:{line}: base: not a recorded request's delta")
    body = {k: v for k, v in prev.items() if k not in {str(d) for d in dropped}}
    body.update({k: v for k, v in request.items() if k not in ("messages", "__dropped__")})
    body["messages"] = list(prev.get("messages") or [])[:kept] + messages
    return body


def recorded_task_ids(job_dir: Path | str) -> set[str] | None:
    """The ids of the tasks whose agent's calls a job folder recorded (:data:`RECORD_FILE`;
    the judge logs name no task); None when a recorded call names no task (it may be any
    task's: an older job's records). From :func:`_recorded_index`."""
    ids = _recorded_index(job_dir)[1]
    return None if ids is None else set(ids)


def recorded_agent_models(job_dir: Path | str) -> set[str]:
    """Every model whose agent's calls a job folder recorded: one per model's job the folder
    holds (a folder may hold one job per model: ``--replay`` of it picks one with ``-m``).
    From :func:`_recorded_index`."""
    return set(_recorded_index(job_dir)[3])


def recorded_runs(job_dir: Path | str, task_ids: Iterable[str]) -> int:
    """The most runs of one of ``task_ids`` whose agent's calls a job folder recorded with a
    reply (distinct integer ``run_index`` values of the ``task_id`` among the answered
    records of :data:`RECORD_FILE`; 0 when none). From :func:`_recorded_index`."""
    runs = _recorded_index(job_dir)[2]
    return max((runs.get(task_id, 0) for task_id in task_ids), default=0)


def recorded_models(job_dir: Path | str) -> dict[str, str]:
    """The model names a finished job (or one trial folder) used, by role (``agent``,
    ``judge``), from its recorded calls (:data:`RECORD_FILE`, then the judge logs; for
    ``--replay`` and ``clawrig grade`` without ``--model`` / ``--judge``). From
    :func:`_recorded_index`."""
    return dict(_recorded_index(job_dir)[0])


def _recorded_index(
    job_dir: Path | str,
) -> tuple[dict[str, str], set[str] | None, dict[str, int], frozenset[str]]:
    """(models by role, task ids or None, answered runs by task id, every agent model) of a
    job or trial folder's
    recorded calls, read in one pass over its :data:`RECORD_FILE` and judge logs
    (:meth:`JobPaths.trial_files`, as :meth:`ResponseCache.from_job` reads them) and kept while
    those files are unchanged (a replayed job asks for both twice before it starts: model
    resolution, then its preflight). Lines that are not JSON objects are skipped (the
    :class:`ResponseCache` reading says what is wrong with them)."""
    files = JobPaths(Path(job_dir)).trial_files(RECORD_FILE, *JUDGE_LOGS)
    files.sort(key=lambda p: p.name != RECORD_FILE)  # the agent's records first (stable)
    stamps = []
    for path in files:
        with contextlib.suppress(OSError):
            st = path.stat()  # (the change time too: a copy may keep size and mtime)
            stamps.append((str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return _read_index(tuple(stamps))


@functools.lru_cache(maxsize=4)
def _read_index(
    stamps: tuple[tuple[str, int, int, int, int], ...],
) -> tuple[dict[str, str], set[str] | None, dict[str, int], frozenset[str]]:
    models: dict[str, str] = {}
    agents: set[str] = set()
    ids: set[str] | None = set()
    runs: dict[str, set[int]] = {}
    for name, *_ in stamps:
        path = Path(name)
        agent_record = path.name == RECORD_FILE
        if not agent_record and "judge" in models:
            continue  # (a judge log gives the judge's name only)
        for rec in jsonl_objects(path):
            if rec.get("role") == "probe":  # the harness's own request: no reply to replay
                continue
            if rec.get("model"):
                role = "judge" if "kind" in rec else rec.get("role")
                if role:
                    models.setdefault(str(role), str(rec["model"]))
                if role == "agent":
                    agents.add(str(rec["model"]))
            if agent_record and ids is not None and rec.get("request") is not None:
                if rec.get("task_id") is None:
                    ids = None
                else:
                    ids.add(str(rec["task_id"]))
            run = rec.get("run_index")
            if (
                agent_record
                and type(run) is int  # (not a bool)
                and isinstance(rec.get("task_id"), str)
                and rec.get("response") is not None  # a reply a replay can serve
            ):
                runs.setdefault(rec["task_id"], set()).add(run)
    return models, ids, {task: len(r) for task, r in runs.items()}, frozenset(agents)
