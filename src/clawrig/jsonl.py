"""JSON Lines (https://jsonlines.org): one JSON value per line, lines ended by ``\\n``; and
:func:`loads_strict`, JSON as RFC 8259 defines it (what other languages' parsers read back)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _finite(text: str) -> float:
    """A JSON number as a float; ValueError for one past a float's range (``1e999``: inf)."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:20]} is out of a float's range")
    return value


def _not_json(name: str) -> float:
    """``json.loads``'s ``parse_constant``: NaN, Infinity and -Infinity are not JSON."""
    raise ValueError(f"{name} is not JSON")


def loads_strict(text: str | bytes) -> Any:
    """``json.loads`` of RFC 8259 JSON only: ``NaN``, ``Infinity`` and numbers past a float's
    range (``1e999``), which Python reads but writes back as bare tokens no strict parser
    (JavaScript's ``JSON.parse``) reads, are refused. Raises ValueError (JSONDecodeError is
    one) or RecursionError (nested past Python's limit)."""
    return json.loads(text, parse_constant=_not_json, parse_float=_finite)


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSON Lines text, split on ``\\n`` alone (a ``\\r`` before it stays and is
    whitespace to a JSON parser). Not ``str.splitlines``: it also splits on U+2028, U+2029,
    U+0085 and other characters that a JSON string written with ``ensure_ascii=False`` holds
    raw, cutting one record in two (an agent could hide a tool call from every reader that way).
    A final ``\\n`` adds no empty last line."""
    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


JSONL_LIMIT = 256 * 1024**2
"""The most bytes of a JSON Lines record file :func:`jsonl_objects` reads (a 20 GB file in a
killed trial's folder ran a resume out of memory: helper-185)."""


def jsonl_objects(path: Path, limit: int = JSONL_LIMIT) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON Lines file, each whole line that is one (a line cut by a
    killed writer, not JSON, nested past the parser's depth, or another value is skipped;
    bytes that are not UTF-8 are replaced). Nothing when the file cannot be read, or is no
    regular file: a link is not followed, a FIFO not read (one in a killed writer's folder held
    every RL writer's start for good: helper-183; :func:`clawrig.spec.layout.read_regular`).
    At most ``limit`` bytes are read (a line cut there is skipped)."""
    from clawrig.spec.layout import read_regular

    data = read_regular(path, limit)
    if data is None:
        return
    for line in jsonl_lines(data.decode("utf-8", errors="replace")):
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict):
            yield rec
