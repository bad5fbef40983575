"""Finding JSON inside free text (judge replies, grader output, agent answers)."""

from __future__ import annotations

import json
from typing import Any


def balanced_spans(text: str, open_ch: str = "{", close_ch: str = "}") -> list[tuple[int, int]]:
    """Outermost balanced ``open..close`` spans as (start, end) offsets, brackets inside
    double-quoted strings ignored (escapes honoured)."""
    spans: list[tuple[int, int]] = []
    depth, start, in_str, esc = 0, -1, False, False
    for i, ch in enumerate(text):
        if depth and in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and depth:
            in_str = True
        elif ch == open_ch:
            if depth == 0:
                start = i
            depth += 1
        elif ch == close_ch and depth:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
    return spans


def balanced_objects(text: str) -> list[str]:
    """Outermost balanced ``{...}`` substrings of ``text``, in order."""
    return [text[a:b] for a, b in balanced_spans(text)]


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every outermost ``{...}`` of ``text`` that parses as a JSON object, in order."""
    out = []
    for blob in balanced_objects(text):
        try:
            value = json.loads(blob)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out
