"""JSON Lines (https://jsonlines.org): one JSON value per line, lines ended by ``\\n``."""

from __future__ import annotations


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
