"""Programmatic graders run inside the trial's sandbox (WildClawBench and four-folder).

Contract (shared/reference/formats.md section 1): after every agent process is killed and gt/
is injected, the task's ``grade()`` runs in the sandbox with cwd /tmp_workspace, called as
``grade(transcript=<OpenClaw transcript entries>, workspace_path="/tmp_workspace")``; the
transcript is also at /root/.openclaw/agents/main/sessions/chat.jsonl. The result is the last
JSON object printed on stdout. Score = ``overall_score`` when present, else the mean of the
numeric entries (upstream's rule). 120 s by default, scaled by the timeout multiplier.

A grader that crashes, times out, prints no JSON, or returns a score outside [0,1] is a
grading error (``Score.error``), never a silent 0.
"""

from __future__ import annotations

import json
import math
import secrets
from typing import Any

from clawrig.grading.textscan import json_objects
from clawrig.sandbox.base import Sandbox
from clawrig.sandbox.paths import PATHS
from clawrig.spec.task import Task
from clawrig.spec.trial import Score

GRADER_DIR = "/run/clawrig/grader"
_RUNNER = r"""
import json, sys, os, traceback
src_path, origin = sys.argv[1], sys.argv[2]
transcript_path = sys.argv[3]
entries = []
try:
    with open(transcript_path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    pass
except OSError:
    pass
ns = {"__name__": "clawrig_grader", "__file__": origin}
with open(src_path, encoding="utf-8") as fh:
    code = compile(fh.read(), origin, "exec")
exec(code, ns)
grade = ns.get("grade")
if not callable(grade):
    print("clawrig: the grader defines no grade() function", file=sys.stderr)
    sys.exit(3)
result = grade(transcript=entries, workspace_path="/tmp_workspace")
sys.stdout.flush()
print("\n" + json.dumps(result, default=str))
"""


def last_json_object(stdout: str) -> dict[str, Any] | None:
    """The last line of ``stdout`` that parses as a JSON object (upstream's rule), else the
    last balanced ``{...}`` anywhere in it."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    objects = json_objects(stdout)
    return objects[-1] if objects else None


def score_from_result(result: dict[str, Any]) -> float | None:
    """``overall_score`` when present, else the mean of the numeric entries (WildClawBench)."""
    value = result.get("overall_score")
    if isinstance(value, bool):
        value = float(value)
    if isinstance(value, int | float):
        return float(value)
    nums = [float(v) for v in result.values() if isinstance(v, int | float)]
    return sum(nums) / len(nums) if nums else None


async def run_grader(
    sandbox: Sandbox,
    task: Task,
    *,
    timeout_s: float = 120.0,
    env: dict[str, str] | None = None,
    python: str = "python3",
) -> Score:
    """Run the task's grade() in the sandbox. Returns a Score (``error`` set on failure)."""
    grader = task.grader
    if not grader.source:
        return Score(grader="programmatic", error="the task has no programmatic grader")
    # Tracebacks name the task file and its real line: the source is compiled under the
    # task file's name, shifted down to the line where it starts there.
    origin = str(grader.origin.path) if grader.origin else str(task.source.path)
    offset = (grader.origin.line or 1) - 1 if grader.origin else 0
    # A fresh folder with a random name: nothing the agent left can be in it. And -I: neither
    # the script's folder nor the cwd nor PYTHON* variables reach sys.path, so a module the
    # agent planted cannot shadow one the grader imports.
    folder = f"{GRADER_DIR}-{secrets.token_hex(8)}"
    await sandbox.write_file(f"{folder}/grader.py", "\n" * offset + grader.source)
    await sandbox.write_file(f"{folder}/runner.py", _RUNNER)
    r = await sandbox.exec(
        [
            python,
            "-I",
            "-B",
            f"{folder}/runner.py",
            f"{folder}/grader.py",
            origin,
            PATHS.transcript,
        ],
        cwd=PATHS.workspace,
        env=env,
        timeout_s=timeout_s,
    )
    details = {"exit_code": r.exit_code, "stderr": r.stderr[-4000:], "stdout": r.stdout[-4000:]}
    if r.timed_out:
        return Score(
            grader="programmatic", details=details, error=f"grader timed out after {timeout_s:g} s"
        )
    if r.exit_code != 0:
        last = _last_line(r.stderr) or f"exit code {r.exit_code}"
        missing = _missing_module(r.stderr)
        if missing:
            last = (
                f"grader needs the Python module {missing!r}: add it to the suite's grader "
                f"requirements (requirements.txt beside the tasks) ({last})"
            )
        return Score(grader="programmatic", details=details, error=f"grader crashed: {last}")
    result = last_json_object(r.stdout)
    if result is None:
        return Score(grader="programmatic", details=details, error="grader printed no JSON object")
    score = score_from_result(result)
    if score is None or math.isnan(score) or not 0.0 <= score <= 1.0:
        return Score(
            grader="programmatic",
            subscores=result,
            details=details,
            error=f"grader returned no score in [0,1] (overall_score={score})",
        )
    return Score(score=score, subscores=result, grader="programmatic", details=details)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _missing_module(stderr: str) -> str | None:
    marker = "No module named "
    for line in reversed(stderr.splitlines()):
        if marker in line:
            return line.split(marker, 1)[1].strip().strip("'\"").split(".")[0]
    return None
