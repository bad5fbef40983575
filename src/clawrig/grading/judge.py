"""The DataClawBench LLM judge for answers ("Acc"), exactly the protocol of
shared/reference/metrics.md (upstream: dataclaw/utils/grading.py):

* The judge sees four sections: the task prompt, the expected behaviour, the agent's final
  answer (text of the LAST assistant message that has any text, ``Transcript.final_text()``)
  and the task's rubric (``Task.grader.judge_rubric``; when absent, the rubric DataClawBench's
  task builder writes for the gold answer, :func:`default_rubric`).
* It must reply with one JSON object ``{"scores": {...}, "total": x, "notes": "..."}``: a
  single answer has ``scores.match`` 0/1; a list answer with L parts has ``part_0 ..
  part_{L-1}`` each 0/1 and ``total = sum/L``. clawrig recomputes the total from the parts and
  records the judge's own total beside it (``details["judge_total"]``).
* Up to 5 attempts; after a malformed reply the next attempt adds a stricter instruction ("only
  one JSON object of exactly this shape"). Parse order: a fenced ```json block, else the last
  balanced ``{...}`` that has ``"scores"``, else the last balanced object.
* temperature 0. Every request and reply is appended to ``judge_chat.jsonl`` (one JSON object
  per line; shape in :func:`_log`).
* Optional repeated judgments (``repeats=n``): the score is the mean total of the valid
  judgments; ``details["repeats"]`` lists each, ``details["spread"]`` gives n, mean, min, max
  and the sample standard deviation (0 for one judgment).
* A reply still unparseable after every attempt is a grading error (``Score.error`` set,
  ``score`` None), never a 0. A transcript whose assistant message has stopReason "error" is an
  agent run error and the judge is not called (formats.md section 3).

The judge model is any :class:`clawrig.llm.base.ChatModel`; choosing it from ``--judge`` /
``JUDGE_MODEL`` / ``JUDGE_CUSTOM_*`` is the job of ``clawrig.llm``.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clawrig.errors import InfrastructureError
from clawrig.grading.answers import agent_run_error, answer_keys, run_error_score
from clawrig.grading.textscan import balanced_spans
from clawrig.llm.base import ChatModel
from clawrig.spec.llm import ChatResponse
from clawrig.spec.task import Task
from clawrig.spec.transcript import Transcript
from clawrig.spec.trial import Score
from clawrig.tasks.dataclaw import render_rubric

__all__ = [
    "MAX_ATTEMPTS",
    "STRICT_INSTRUCTION",
    "build_judge_messages",
    "default_rubric",
    "judge_answer",
    "judge_keys",
    "parse_judge_json",
    "run_judge_attempts",
    "validate_judgment",
]

MAX_ATTEMPTS = 5
"""Attempts per judgment (metrics.md)."""

STRICT_INSTRUCTION = (
    "IMPORTANT: your previous reply could not be parsed. Reply with only one JSON object of "
    "exactly this shape, with no other text before or after it:"
)
"""The stricter instruction added after a malformed reply (followed by the expected shape)."""

SYSTEM_PROMPT = (
    "You are a strict and impartial grader for DataClawBench, a benchmark of data-analysis "
    "agents. Compare the agent's final answer with the gold answer given in the rubric by "
    "semantic equivalence, following the rubric's scoring rules exactly. Reply with one JSON "
    'object {"scores": {...}, "total": <number>, "notes": "<short reason>"} and nothing else.'
)


# --------------------------------------------------------------------------------------------
# Prompt
# --------------------------------------------------------------------------------------------


def default_rubric(answer: Any) -> str:
    """The "LLM Judge Rubric" DataClawBench's task builder writes for a gold ``answer`` (the
    same text as the upstream task files; :func:`clawrig.tasks.dataclaw.render_rubric`)."""
    return render_rubric(answer)


_RUBRIC_GOLD_RE = re.compile(r"Gold answer JSON:\s*\n`(.*)`", re.M)
_RUBRIC_N_RE = re.compile(r"list with N=(\d+) parts")


def judge_keys(task: Task) -> list[str]:
    """The ``scores`` keys the judge must return: ``["match"]`` or ``part_0..part_{L-1}``.

    From ``task.answer``; when the task carries no gold answer, from the rubric's
    "Gold answer JSON" line or its "list with N=... parts" sentence.
    """
    if task.answer is not None:
        return answer_keys(task.answer)
    rubric = task.grader.judge_rubric or ""
    m = _RUBRIC_GOLD_RE.search(rubric)
    if m:
        try:
            return answer_keys(json.loads(m.group(1)))
        except ValueError:
            pass
    m = _RUBRIC_N_RE.search(rubric)
    if m:
        return [f"part_{i}" for i in range(int(m.group(1)))]
    return ["match"]


def _shape(keys: list[str]) -> str:
    scores = ", ".join(f'"{k}": 0 or 1' for k in keys)
    total = "<1.0 or 0.0>" if keys == ["match"] else f"<sum of the parts / {len(keys)}>"
    return f'{{"scores": {{{scores}}}, "total": {total}, "notes": "<one or two sentences>"}}'


def build_judge_messages(task: Task, final_answer: str, *, strict: bool) -> list[dict[str, str]]:
    """The chat messages of one judge request (system + one user message with four sections).

    ``strict`` appends :data:`STRICT_INSTRUCTION` and the exact expected shape.
    """
    keys = judge_keys(task)
    rubric = task.grader.judge_rubric or default_rubric(task.answer)
    answer = final_answer.strip() or "(empty: the agent gave no final answer)"
    user = (
        "## Task Prompt\n\n"
        f"{task.prompt.strip()}\n\n"
        "## Expected Behavior\n\n"
        f"{(task.expected_behavior or '(not given)').strip()}\n\n"
        "## Agent Final Answer\n\n"
        f"{answer}\n\n"
        "## Rubric\n\n"
        f"{rubric.strip()}\n\n"
        "## Output\n\n"
        f"Reply with one JSON object of this shape:\n{_shape(keys)}"
    )
    if strict:
        user += f"\n\n{STRICT_INSTRUCTION}\n{_shape(keys)}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------

_FENCED_JSON_RE = re.compile(r"^[ \t]*```json[ \t]*\n(.*?)^[ \t]*```", re.S | re.I | re.M)
"""A fenced ```json block whose fences start lines (a fence inside a line, an agent's answer
quoted by the judge ending in a bare ```json, no longer swallows the judge's own block)."""
QUOTE_MIN_CHARS = 8
"""Shortest agent answer :func:`parse_judge_json` cuts out of a judge's reply."""


def _load_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_judge_json(
    text: str | None, key: str = "scores", quoted: str | None = None
) -> dict[str, Any] | None:
    """Parse a judge reply: the JSON object that ends last in it (a fenced ```json block or a
    balanced ``{...}``), one that has ``key`` first, else the last that parses. None when
    nothing parses. ``quoted``: the agent's answer the judge was shown; every verbatim copy of
    it in the reply is cut out first.

    The last, fenced or not, and the agent's answer cut out: the judge's verdict follows what
    it read, and a judge quoting the answer quotes any block the agent planted in it (a ```json
    block with ``"match": 1`` after a wrong answer was taken for the judge's own, before its
    verdict, or before its verdict given bare, as the prompt asks: helper-142, helper-143).
    ``shared/reference/metrics.md`` says "fenced json block, else the last balanced {...}
    that has scores, else the last object" without saying which block."""
    if not text:
        return None
    if quoted and len(quoted.strip()) >= QUOTE_MIN_CHARS:
        text = text.replace(quoted.strip(), " ")
    found: list[tuple[int, dict[str, Any]]] = []  # (where it ends, the object)
    for m in _FENCED_JSON_RE.finditer(text):
        if (obj := _load_object(m.group(1).strip())) is not None:
            found.append((m.end(), obj))
    for a, b in balanced_spans(text):
        if (obj := _load_object(text[a:b])) is not None:
            found.append((b, obj))
    found.sort(key=lambda f: f[0])
    with_key = [o for _, o in found if key in o]
    if with_key:
        return with_key[-1]
    return found[-1][1] if found else None


def _binary(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) and value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip() in ("0", "1", "0.0", "1.0"):
        return int(float(value.strip()))
    return None


def validate_judgment(obj: dict[str, Any] | None, keys: list[str]) -> tuple[dict | None, str]:
    """Check a parsed reply against the protocol.

    Returns ``(judgment, "")`` with judgment = {scores: {key: 0|1}, total (recomputed sum/L),
    judge_total (as sent, or None), notes} or ``(None, reason)`` when malformed: no object, no
    ``scores`` object, a missing key, or a value other than 0/1.
    """
    if obj is None:
        return None, "no JSON object in the reply"
    scores = obj.get("scores")
    if not isinstance(scores, dict):
        return None, 'the object has no "scores" object'
    clean: dict[str, int] = {}
    for k in keys:
        if k not in scores:
            return None, f'"scores" lacks "{k}"'
        v = _binary(scores[k])
        if v is None:
            return None, f'"scores.{k}" is {scores[k]!r}, not 0 or 1'
        clean[k] = v
    judge_total = obj.get("total")
    if isinstance(judge_total, str):
        try:
            judge_total = float(judge_total)
        except ValueError:
            judge_total = None
    if not isinstance(judge_total, int | float) or isinstance(judge_total, bool):
        judge_total = None
    notes = obj.get("notes")
    return {
        "scores": clean,
        "total": sum(clean.values()) / len(keys),
        "judge_total": judge_total,
        "notes": notes if isinstance(notes, str) else ("" if notes is None else str(notes)),
    }, ""


# --------------------------------------------------------------------------------------------
# Calling
# --------------------------------------------------------------------------------------------


def _log(path: Path | None, record: dict[str, Any]) -> None:
    """Append one record to a judge chat log (JSONL, UTF-8, ensure_ascii False).

    Record: {ts (Unix s), kind, repeat, attempt, model, request {messages, temperature},
    response {content, reasoning, finish_reason, model, response_id, usage, latency_s} | null,
    parsed, valid, error}.
    """
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")


def _response_record(resp: ChatResponse) -> dict[str, Any]:
    return {
        "content": resp.content,
        "reasoning": resp.reasoning,
        "finish_reason": resp.finish_reason,
        "model": resp.model,
        "response_id": resp.response_id,
        "usage": resp.usage.model_dump(),
        "latency_s": resp.latency_s,
    }


async def run_judge_attempts(
    model: ChatModel,
    build: Callable[[bool], list[dict[str, Any]]],
    validate: Callable[[str | None], tuple[Any, str]],
    *,
    log_path: Path | None,
    kind: str,
    repeat: int = 0,
    max_attempts: int = MAX_ATTEMPTS,
) -> tuple[Any, int, list[str]]:
    """The shared attempt loop of the answer judge and the process judge.

    ``build(strict)`` gives the messages; ``validate(content)`` returns ``(value, "")`` or
    ``(None, reason)``. Returns ``(value | None, attempts made, reasons of the failed
    attempts)``. Temperature 0. Raises :class:`clawrig.errors.InfrastructureError` (e.g.
    ProviderError) when the provider fails after its own retries; ModelRequestError (bad
    judge configuration) propagates too.
    """
    reasons: list[str] = []
    strict = False
    for attempt in range(1, max_attempts + 1):
        messages = build(strict)
        record: dict[str, Any] = {
            "ts": time.time(),
            "kind": kind,
            "repeat": repeat,
            "attempt": attempt,
            "model": getattr(model, "name", ""),
            "request": {"messages": messages, "temperature": 0},
        }
        try:
            resp = await model.chat(messages, temperature=0)
        except InfrastructureError as exc:
            _log(log_path, {**record, "response": None, "valid": False, "error": str(exc)})
            raise
        value, reason = validate(resp.content)
        _log(
            log_path,
            {
                **record,
                "response": _response_record(resp),
                "valid": value is not None,
                "error": reason or None,
            },
        )
        if value is not None:
            return value, attempt, reasons
        reasons.append(reason)
        strict = True
    return None, max_attempts, reasons


async def judge_answer(
    task: Task,
    transcript: Transcript,
    model: ChatModel,
    *,
    log_path: Path | None,
    repeats: int = 1,
) -> Score:
    """Grade a DataClawBench answer with the LLM judge (metrics.md protocol).

    Returns a Score with grader ``"judge"``: ``score`` = total (mean over repeats) in [0,1],
    ``subscores`` = the parts (``match`` or ``part_i``; averaged over repeats), ``details`` =
    {judge_model, final_answer, judge_total, notes, attempts, repeats[], spread{n, mean, min,
    max, stdev}}.

    ``score`` is None and ``error`` set, with ``details["error_kind"]``, for: a reply still
    unparseable after :data:`MAX_ATTEMPTS` attempts in every repeat ("grading"); the provider
    failing after its retries ("infrastructure"); a task with neither gold answer nor rubric
    ("grading"); an agent run error, stopReason "error", where the judge is not called
    ("agent").

    ``log_path``: the judge_chat.jsonl to append to (None: no log). Raises ValueError when
    ``repeats < 1`` and :class:`clawrig.errors.ModelRequestError` when the judge provider
    refuses the request (bad judge configuration).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    err = agent_run_error(transcript)
    if err is not None:
        return run_error_score(err, "judge")
    if task.answer is None and not task.grader.judge_rubric:
        return Score(
            score=None,
            grader="judge",
            error=f"{task.source}: answer: the task has neither a gold answer nor a judge rubric",
            details={"error_kind": "grading"},
        )
    keys = judge_keys(task)
    final = transcript.final_text()
    judgments: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    for r in range(repeats):
        try:
            value, attempts, reasons = await run_judge_attempts(
                model,
                lambda strict: build_judge_messages(task, final, strict=strict),
                lambda content: validate_judgment(
                    parse_judge_json(content, "scores", quoted=final), keys
                ),
                log_path=log_path,
                kind="answer",
                repeat=r,
            )
        except InfrastructureError as exc:
            return Score(
                score=None,
                grader="judge",
                error=f"judge provider failed: {exc}",
                details={"error_kind": "infrastructure", "judge_model": model.name},
            )
        if value is None:
            failures.append({"repeat": r, "attempts": attempts, "reasons": reasons})
        else:
            judgments.append({**value, "repeat": r, "attempts": attempts, "reasons": reasons})
    details: dict[str, Any] = {"judge_model": model.name, "final_answer": final}
    if not judgments:
        last = failures[-1]["reasons"][-1] if failures and failures[-1]["reasons"] else "?"
        details.update(error_kind="grading", failures=failures)
        return Score(
            score=None,
            grader="judge",
            error=(
                f"judge reply unparseable after {MAX_ATTEMPTS} attempts"
                f" ({len(failures)} of {repeats} judgment(s)); last problem: {last}"
            ),
            details=details,
        )
    totals = [j["total"] for j in judgments]
    mean = statistics.fmean(totals)
    subscores: dict[str, float | int] = {}
    for k in keys:
        values = [j["scores"][k] for j in judgments]
        subscores[k] = values[0] if len(judgments) == 1 else statistics.fmean(values)
    details.update(
        judge_total=judgments[0]["judge_total"] if len(judgments) == 1 else None,
        notes=judgments[0]["notes"] if len(judgments) == 1 else None,
        attempts=sum(j["attempts"] for j in judgments),
        repeats=judgments,
        failures=failures,
        spread={
            "n": len(totals),
            "mean": mean,
            "min": min(totals),
            "max": max(totals),
            "stdev": statistics.stdev(totals) if len(totals) > 1 else 0.0,
        },
    )
    return Score(score=mean, grader="judge", subscores=subscores, details=details)
