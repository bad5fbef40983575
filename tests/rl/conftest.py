"""Fixtures for RL tests: demo task 000015 and a scripted policy that answers it.

The 000015 grader's weights (its docstring): overall = 0.10 heading + 0.30 endpoints +
0.60 valid shortest chain. So the right chain scores 1.0, a chain with the right endpoints
through a wrong middle scores 0.40, and no results file scores 0.0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clawrig.tasks.registry import load_tasks
from clawrig.testing.paths import REPO
from clawrig.testing.scripted_server import Reply, call, reply

DEMO = REPO / "suites" / "demo"
RIGHT = "# shortest\nVikram Shah – Berta Alonso – Saif Hamdan\n"
WRONG = "# shortest\nVikram Shah – Nobody Here – Saif Hamdan\n"
REWARD = {RIGHT: 1.0, WRONG: 0.40}


@pytest.fixture(scope="session")
def task_15():
    return next(t for t in load_tasks(DEMO) if t.id == "000015")


def write_answer(text: str) -> Reply:
    return reply(
        tool_calls=[call("write", {"path": "/tmp_workspace/results/results.md", "content": text})]
    )


def by_seed(request: dict[str, Any]) -> Reply:
    """Responder: an even ``seed`` writes the right chain, an odd one a wrong chain, no seed
    answers at once without writing; after a tool result, it says done."""
    if any(m.get("role") == "tool" for m in request["messages"]):
        return reply("done")
    seed = request.get("seed")
    if seed is None:
        return reply("done")
    return write_answer(RIGHT if seed % 2 == 0 else WRONG)


def files_text(folder: Path) -> str:
    """Every regular file under ``folder``, concatenated (for secret scans)."""
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in folder.rglob("*") if p.is_file()
    )
