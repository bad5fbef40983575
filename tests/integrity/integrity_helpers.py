"""A small WildClawBench benchmark for attack tests: task k's agent runs the shell commands a
scripted model gives it (``ATTACKS[k]``), and its grader scores 1.0 when results/out.txt says
``ok``; an honest task writes ``ok``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.testing.scripted_server import Reply, call, reply, usage

CATEGORY = "01_Productivity_Flow"
HONEST = "mkdir -p /tmp_workspace/results && echo ok > /tmp_workspace/results/out.txt"
GRADE = """
import os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    path = os.path.join(workspace_path, "results", "out.txt")
    ok = os.path.exists(path) and open(path).read().strip() == "ok"
    return {"overall_score": 1.0 if ok else 0.0}
"""


def write_bench(root: Path, n: int, *, warmup: dict[int, str] | None = None) -> Path:
    """``n`` tasks ``t1``..``tn`` under ``root`` (``warmup``: task number -> a warmup line).
    Returns the ``tasks`` folder."""
    for k in range(1, n + 1):
        md = root / "tasks" / CATEGORY / f"{CATEGORY}_t{k}.md"
        md.parent.mkdir(parents=True, exist_ok=True)
        extra = ""
        if warmup and k in warmup:
            extra = "## Warmup\n\n```bash\n" + warmup[k] + "\n```\n\n"
        md.write_text(
            f"---\nid: {CATEGORY}_t{k}\nname: T{k}\ncategory: {CATEGORY}\n"
            "timeout_seconds: 120\n---\n\n"
            f"## Prompt\n\nWrite ok to /tmp_workspace/results/out.txt. TASKNUM={k}\n\n"
            "## Automated Checks\n\n```python\n" + GRADE.strip() + "\n```\n\n" + extra + ""
            "## Workspace Path\n\n```\n" + f"workspace/t{k}" + "\n```\n",
            encoding="utf-8",
        )
        (root / "workspace" / f"t{k}" / "exec").mkdir(parents=True, exist_ok=True)
        (root / "workspace" / f"t{k}" / "exec" / "input.txt").write_text(f"task {k}\n")
    return root / "tasks"


def responder(attacks: dict[int, list[str]]):
    """A scripted-model responder: task k runs ``attacks[k]`` (default: the honest command),
    one exec per turn, then answers done."""

    def respond(request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        first = messages[0]["content"]
        text = first if isinstance(first, str) else json.dumps(first)
        k = int(re.search(r"TASKNUM=(\d+)", text).group(1))
        commands = attacks.get(k, [HONEST])
        done = sum(1 for m in messages if m.get("role") == "tool")
        if done < len(commands):
            return reply(tool_calls=[call("exec", {"command": commands[done]})], usage=usage(10, 5))
        return reply("done", usage=usage(10, 1))

    return respond


def tool_outputs(folder: Path) -> list[str]:
    """The text of every tool result in a trial folder's chat.jsonl, in order."""
    from clawrig.transcript import read_openclaw_jsonl

    return [
        m.text
        for m in read_openclaw_jsonl(folder / "chat.jsonl").messages
        if m.role == "toolResult"
    ]


def attack_job(bench: Path, out: Path, *, parallel: int | None = None, **trial: Any) -> JobConfig:
    """A job of the benchmark at ``bench`` into ``out``: one attempt per trial (an attack's
    outcome is not retried away), the native agent on ``scripted/x``, ``trial`` overrides."""
    more: dict[str, Any] = {"parallel": parallel} if parallel is not None else {}
    return JobConfig(
        suite_path=bench,
        output=out,
        max_attempts=1,
        trial=TrialConfig(agent="native", model="scripted/x", **trial),
        **more,
    )


def job_results(out: Path) -> dict[str, dict]:
    """Each trial's result.json under the job folder ``out`` by task number ("t1" of
    ``..._t1``), with its ``folder``."""
    found = {}
    for rj in out.glob("*/*/result.json"):
        res = json.loads(rj.read_text())
        found[res["task_id"].rsplit("_", 1)[-1]] = res | {"folder": str(rj.parent)}
    return found
