"""``clawrig export sft``: graded trials of a job -> supervised fine-tuning rows.

One row per graded trial (result.json with a score and no error) with score >= ``min_score``,
in (task id, run index, trial id) order. Two message formats:

- ``openai`` (OpenAI chat fine-tuning shape): ``messages`` = the trial's formatted_dialog as
  written (user, assistant with ``content``, optional ``reasoning`` and ``tool_calls`` whose
  ``arguments`` are JSON strings, tool messages with ``tool_call_id``, ``name``, ``content``;
  ``is_error: true`` on failed tool results), ``tools`` = the trial's OpenAI tool schema;
- ``sharegpt`` (LLaMA-Factory's ShareGPT tool format): ``conversations`` = [{"from": "human" |
  "gpt" | "function_call" | "observation", "value": str}], ``tools`` = the tool schema's
  functions as a JSON string. An assistant turn with tool calls becomes one ``function_call``
  whose value is the JSON of {"name", "arguments"} (a list of them for parallel calls); the
  results that follow become one ``observation`` (a JSON list of the texts when several).
  Reasoning is kept on text turns as ``<think>...</think>`` before the answer; on tool-call
  turns it has no place in this format and is dropped.

Every row also has ``id`` (``<task_id>/<trial_id>``), ``task_id``, ``trial_id``, ``job_id``,
``model``, ``category`` and ``score``.

Files: ``.jsonl`` (one JSON object per line, UTF-8, nested values as JSON) or ``.parquet``
(pyarrow). In Parquet the nested columns ``messages`` / ``conversations`` and ``tools`` are
JSON-encoded strings (``json.loads`` them), the other columns are plain strings and a float64
``score``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrig.choices import SFT_FORMATS, SftFormat
from clawrig.errors import UserError
from clawrig.export.fourfolder import DEFAULT_MIN_SCORE, nothing_to_export, select_trials
from clawrig.export.job import JobTrial, find_trials
from clawrig.transcript.dialog import content_text

FORMATS = SFT_FORMATS
NESTED = ("messages", "conversations", "tools")
"""Columns JSON-encoded in Parquet."""


@dataclass
class SftReport:
    """What an SFT export wrote: ``rows`` count, the output path, skipped trials -> why."""

    out: Path
    rows: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    min_score: float = DEFAULT_MIN_SCORE


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def to_sharegpt(dialog: list[dict[str, Any]]) -> list[dict[str, str]]:
    """A formatted_dialog as LLaMA-Factory ShareGPT ``conversations`` (see the module doc)."""
    out: list[dict[str, str]] = []
    pending: list[str] = []

    def flush() -> None:
        if pending:
            value = pending[0] if len(pending) == 1 else json.dumps(pending, ensure_ascii=False)
            out.append({"from": "observation", "value": value})
            pending.clear()

    for msg in dialog:
        role = msg.get("role")
        if role == "tool":
            pending.append(content_text(msg.get("content")))
            continue
        flush()
        if role in ("user", "system"):
            out.append({"from": "human" if role == "user" else "system",
                        "value": content_text(msg.get("content"))})  # fmt: skip
        elif role == "assistant":
            calls = [
                {
                    "name": (c.get("function") or {}).get("name", ""),
                    "arguments": _arguments((c.get("function") or {}).get("arguments")),
                }
                for c in msg.get("tool_calls") or []
            ]
            if calls:
                value = calls[0] if len(calls) == 1 else calls
                out.append({"from": "function_call",
                            "value": json.dumps(value, ensure_ascii=False)})  # fmt: skip
            else:
                text = content_text(msg.get("content"))
                reasoning = msg.get("reasoning") or msg.get("reasoning_content")
                if reasoning:
                    text = f"<think>\n{reasoning}\n</think>\n\n{text}"
                out.append({"from": "gpt", "value": text})
    flush()
    return out


def sft_row(trial: JobTrial, fmt: SftFormat) -> dict[str, Any]:
    """One row for ``trial`` in format ``fmt`` (see the module doc)."""
    data = trial.dialog()
    dialog = data["formatted_dialog"]
    tools = data.get("tool_schema") or []
    r = trial.result
    row: dict[str, Any] = {
        "id": f"{r.task_id}/{r.trial_id}",
        "task_id": r.task_id,
        "trial_id": r.trial_id,
        "job_id": r.job_id,
        "model": r.model,
        "category": r.category,
        "score": trial.score,
    }
    if fmt == "openai":
        row["messages"] = dialog
        row["tools"] = tools
    else:
        row["conversations"] = to_sharegpt(dialog)
        functions = [t.get("function", t) for t in tools if isinstance(t, Mapping)]
        row["tools"] = json.dumps(functions, ensure_ascii=False)
    return row


def _write_parquet(rows: list[dict[str, Any]], out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    encoded = [
        {
            k: (json.dumps(v, ensure_ascii=False) if k in NESTED and not isinstance(v, str) else v)
            for k, v in row.items()
        }
        for row in rows
    ]
    columns = list(rows[0]) if rows else ["id"]
    schema = pa.schema([(c, pa.float64() if c == "score" else pa.string()) for c in columns])
    table = pa.Table.from_pylist(encoded, schema=schema)
    pq.write_table(table, out)


def export_sft(
    job_dir: Path,
    out: Path,
    *,
    min_score: float = DEFAULT_MIN_SCORE,
    fmt: str = "openai",
    categories: Iterable[str] = (),
    best_per_task: bool = False,
    checked: Callable[[], None] | None = None,
) -> SftReport:
    """Write one row per qualifying trial of ``job_dir`` to ``out`` (.jsonl or .parquet);
    ``best_per_task``: one row per task, its best trial (best-of-n, as rejection sampling
    keeps: :func:`clawrig.export.fourfolder.select_trials`). ``checked``: called once the
    arguments are checked, before the job is read (the command's warnings about the job come
    after its refusals of bad arguments).

    Raises UserError for an unknown format or suffix, a min score outside [0, 1], or a job
    without qualifying trials. The file is written beside ``out`` and renamed into place.
    """
    out = Path(out)
    if fmt not in FORMATS:
        raise UserError(f"--format: unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    suffix = out.suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise UserError(f"OUT: {out}: the file name must end in .jsonl or .parquet")
    if not 0.0 <= min_score <= 1.0:
        raise UserError(f"--min-score: must be in [0, 1], got {min_score:g}")
    if checked is not None:
        checked()
    unreadable: dict[str, str] = {}
    chosen, skipped = select_trials(
        find_trials(job_dir, unreadable), min_score, categories, best_per_task=best_per_task
    )
    skipped |= unreadable
    if not chosen:
        raise nothing_to_export(job_dir, skipped, min_score)
    rows = [sft_row(t, fmt) for t in chosen]  # type: ignore[arg-type]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        if suffix == ".jsonl":
            with open(tmp, "w", encoding="utf-8") as fh:
                for row in rows:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        else:
            _write_parquet(rows, tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return SftReport(out=out, rows=len(rows), skipped=skipped, min_score=min_score)
