"""Fixtures for runner tests: a tiny WildClawBench benchmark root written on disk, and a
scripted-model responder that solves even-numbered tasks and botches odd ones."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from clawrig.testing.scripted_server import Reply, call, reply, usage

GRADE = """
import json, os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    want = open(os.path.join(workspace_path, "gt", "expected.txt")).read().strip()
    path = os.path.join(workspace_path, "results", "out.txt")
    if not os.path.exists(path):
        return {"file_exists": 0.0, "correct": 0.0, "overall_score": 0.0}
    got = open(path).read().strip()
    ok = 1.0 if got == want else 0.0
    return {"file_exists": 1.0, "correct": ok, "overall_score": 0.25 + 0.75 * ok}
"""


def write_mini_bench(root: Path, n: int) -> Path:
    """``n`` WildClawBench tasks: task k asks to write ``ok-k`` to results/out.txt."""
    cat = "01_Productivity_Flow"
    for k in range(1, n + 1):
        slug = f"task_{k}_echo"
        md = root / "tasks" / cat / f"{cat}_{slug}.md"
        md.parent.mkdir(parents=True, exist_ok=True)
        md.write_text(
            "---\n"
            f"id: {cat}_{slug}\n"
            f"name: Echo {k}\n"
            f"category: {cat}\n"
            "timeout_seconds: 60\n"
            "---\n\n"
            "## Prompt\n\n"
            f"Write the text ok-{k} to /tmp_workspace/results/out.txt. TASKNUM={k}\n\n"
            "## Expected Behavior\n\nWrite the file.\n\n"
            "## Grading Criteria\n\n- [ ] file has ok-k\n\n"
            "## Automated Checks\n\n```python\n" + GRADE.strip() + "\n```\n\n"
            "## Workspace Path\n\n```\n" + f"workspace/{cat}/{slug}" + "\n```\n",
            encoding="utf-8",
        )
        ws = root / "workspace" / cat / slug
        (ws / "exec").mkdir(parents=True, exist_ok=True)
        (ws / "exec" / "input.txt").write_text(f"task {k}\n")
        (ws / "gt").mkdir(parents=True, exist_ok=True)
        (ws / "gt" / "expected.txt").write_text(f"ok-{k}\n")
    return root


def solve_even_tasks(request: dict[str, Any], cost: float = 0.01) -> Reply:
    """Responder: first turn writes ok-k (even k) or WRONG (odd k); then answers done. A
    request of no task (the harness's plain probe after a refusal) is answered "OK"."""
    messages = request["messages"]
    first = messages[0]["content"]
    task = re.search(r"TASKNUM=(\d+)", first if isinstance(first, str) else json.dumps(first))
    if task is None:
        return reply("OK", usage=usage(10, 1, cost=cost))
    k = int(task.group(1))
    if not any(m.get("role") == "tool" for m in messages):
        text = f"ok-{k}" if k % 2 == 0 else "WRONG"
        cmd = f"mkdir -p /tmp_workspace/results && echo {text} > /tmp_workspace/results/out.txt"
        return reply(tool_calls=[call("exec", {"command": cmd})], usage=usage(100, 20, cost=cost))
    return reply("done", usage=usage(120, 5, cost=cost))


@pytest.fixture
def mini_bench(tmp_path: Path):
    def make(n: int = 10) -> Path:
        return write_mini_bench(tmp_path / "bench", n)

    return make


@pytest.fixture
def even_responder():
    """The :func:`solve_even_tasks` responder (for tests that cannot import conftest)."""
    return solve_even_tasks
