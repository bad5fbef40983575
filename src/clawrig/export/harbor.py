"""Export tasks in Harbor's task layout (``clawrig export harbor JOB_OR_SUITE OUT``).

Harbor (harborframework.com, "Task Structure"; PyPI ``harbor``) runs a task folder as::

    <task>/task.toml          version, [metadata], [verifier] / [agent] timeout_sec,
                              [environment] cpus, memory_mb, allow_internet
    <task>/instruction.md     what the agent is told
    <task>/environment/       the Dockerfile (and its build context): the agent's container
    <task>/tests/test.sh      run after the agent, with tests/ at /tests; writes the reward to
                              /logs/verifier/reward.txt (a number) or reward.json
    <task>/solution/solve.sh  what Harbor's oracle agent runs instead of an agent

clawrig writes, per task: the prompt as instruction.md; a Dockerfile ``FROM <image>`` (an
image with python3 and bash; ``--image``) that copies the task's initial workspace to
/tmp_workspace (the working directory, as in clawrig's sandboxes); tests/ with the task's
grader, its gt/ files, clawrig's grader runner (the same script clawrig runs in its sandboxes)
and test.sh, which injects gt/ into /tmp_workspace/gt, runs ``grade(transcript=[],
workspace_path="/tmp_workspace")`` and writes reward.txt (the score by clawrig's rule:
``overall_score``, else the mean of the numeric entries) and reward.json (the score and the
numeric sub-scores); a grader that crashes or gives no score in [0, 1] fails the verifier
(exit 1, no reward file) instead of scoring 0; solution/ with the golden trajectory's
state-changing tool calls (write, edit, exec; reads are skipped) replayed in order by a
stdlib script.

Exported: tasks with a programmatic grader and no mock services. Skipped, with the reason in
the report: judge-graded tasks (Harbor's verifier has no judge here), tasks that need mock
services or grader requirements, and tasks without a readable workspace. Graders that read the
transcript see an empty one under Harbor (its agents write no OpenClaw transcript); the report
lists them. A task without a golden trajectory (or with one that uses another tool) gets no
solution/.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from clawrig.errors import UserError
from clawrig.grading.programmatic import _RUNNER, _float, score_from_result
from clawrig.sandbox.workspace import materialise_workspace, write_files
from clawrig.spec.layout import JobPaths, read_record
from clawrig.spec.task import GraderKind, Task

DEFAULT_IMAGE = "python:3.11-slim"
"""The default base image of the exported Dockerfiles (needs python3 and bash)."""
REPLAYED_TOOLS = ("write", "edit", "exec")
READ_ONLY_TOOLS = ("read", "web_search", "web_fetch", "memory_search", "memory_get", "image")


class HarborTaskReport(BaseModel):
    """One task: where it was written (None when skipped), why it was skipped, notes."""

    task_id: str
    folder: Path | None = None
    skipped: str | None = None
    has_solution: bool = False
    notes: list[str] = Field(default_factory=list)


class HarborReport(BaseModel):
    """What :func:`export_harbor` did, per task."""

    out: Path
    tasks: list[HarborTaskReport] = Field(default_factory=list)

    @property
    def exported(self) -> list[HarborTaskReport]:
        return [t for t in self.tasks if t.folder is not None]


_REWARD = '''"""Write Harbor's reward from the grader's result (clawrig's score rule)."""
from __future__ import annotations

import json
import math
import sys

{score_rule}

with open(sys.argv[1], encoding="utf-8") as fh:
    lines = [ln for ln in fh.read().splitlines() if ln.strip()]
result = json.loads(lines[-1]) if lines else {{}}
score = score_from_result(result) if isinstance(result, dict) else None
if score is None or math.isnan(score) or not 0.0 <= score <= 1.0:
    sys.exit(f"clawrig: the grader returned no score in [0,1]: {{result!r:.300}}")
subscores = {{k: float(v) for k, v in result.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)}}
with open("/logs/verifier/reward.txt", "w") as fh:
    fh.write(f"{{score}}\\n")
with open("/logs/verifier/reward.json", "w") as fh:
    json.dump({{"reward": score, **subscores}}, fh)
print(f"reward {{score}}")
'''

_TEST_SH = """#!/bin/bash
# clawrig's grader for task {task_id}: gt/ in, grade() on /tmp_workspace, reward out.
set -u
mkdir -p /logs/verifier
rm -rf /tmp_workspace/gt && mkdir -p /tmp_workspace/gt
cp -a /tests/gt/. /tmp_workspace/gt/
cd /tmp_workspace
python3 -I -B /tests/runner.py /tests/grader.py {origin} /tests/no-transcript.jsonl \\
  > /logs/verifier/grader_stdout.txt 2> /logs/verifier/grader_stderr.txt
status=$?
if [ "$status" -ne 0 ]; then
  # a grader that crashed is a grading error, not a 0: no reward file, a failed verifier
  echo "clawrig: the grader failed (exit $status):" >&2
  tail -n 5 /logs/verifier/grader_stderr.txt >&2
  exit 1
fi
python3 /tests/reward.py /logs/verifier/grader_stdout.txt
"""

_REPLAY = '''"""Replay the golden trajectory's state-changing tool calls (clawrig export harbor)."""
import json
import os
import subprocess
import sys

STEPS = json.loads({steps!r})
for step in STEPS:
    tool, args = step["tool"], step["arguments"]
    if tool == "write":
        path = args["path"]
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(args.get("content", ""))
    elif tool == "edit":
        path = args["path"]
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for edit in args.get("edits") or [args]:
            old, new = edit.get("oldText", ""), edit.get("newText", "")
            if old not in text:
                sys.exit(f"edit: {{old[:60]!r}} not found in {{path}}")
            text = text.replace(old, new, 1)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    elif tool == "exec":
        cwd = os.path.join("/tmp_workspace", args.get("workdir") or "")
        subprocess.run(["/bin/sh", "-c", args["command"]], cwd=cwd, check=False)
'''

_SOLVE_SH = """#!/bin/bash
# The golden trajectory of task {task_id}, replayed (clawrig export harbor).
set -eu
cd /tmp_workspace
python3 "$(dirname "$0")/replay.py"
"""


def _toml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def _task_toml(task: Task, allow_internet: bool | None = None) -> str:
    internet = task.web_allowed if allow_internet is None else allow_internet
    return "\n".join(
        [
            'version = "1.0"',
            "",
            "[metadata]",
            f"author_name = {_toml_str('clawrig export')}",
            f"category = {_toml_str(task.category or 'uncategorized')}",
            f"tags = [{_toml_str('clawrig')}, {_toml_str(task.format)}]",
            f"clawrig_task_id = {_toml_str(task.id)}",
            f"clawrig_source = {_toml_str(str(task.source.path))}",
            *(
                [f"expected_reward = {task.expected_reward}"]
                if task.expected_reward is not None
                else []
            ),
            "",
            "[verifier]",
            f"timeout_sec = {float(task.grader.timeout_seconds)}",
            "",
            "[agent]",
            f"timeout_sec = {float(task.timeout_seconds)}",
            "",
            "[environment]",
            "build_timeout_sec = 600.0",
            "cpus = 1",
            "memory_mb = 4096",
            f"allow_internet = {'true' if internet else 'false'}",
            "",
        ]
    )


def _replay_steps(task: Task) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The golden trajectory's replayable steps, or (None, why not)."""
    if not task.golden_dialog:
        return None, "no golden trajectory"
    steps: list[dict[str, Any]] = []
    for msg in task.golden_dialog:
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            name = fn.get("name")
            if name in READ_ONLY_TOOLS:
                continue
            if name not in REPLAYED_TOOLS:
                return None, f"the golden trajectory calls {name!r}, which solve.sh cannot replay"
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                return None, f"a golden {name} call has arguments that are not JSON"
            steps.append({"tool": name, "arguments": args})
    return steps, None


def _reads_transcript(source: str) -> bool:
    """True when the grader mentions the transcript outside its ``def grade`` line."""
    return any(
        "transcript" in line.lower() and not line.lstrip().startswith(("def grade", "#"))
        for line in source.splitlines()
    )


def _skip_reason(task: Task) -> str | None:
    if task.grader.kind == GraderKind.JUDGE or not task.grader.source:
        return "graded by a judge (no programmatic grader)"
    if task.services:
        return "needs mock services (" + ", ".join(s.name for s in task.services) + ")"
    if task.grader.requirements:
        return "the grader needs Python packages: " + ", ".join(task.grader.requirements)
    if task.workspace.missing:
        return "workspace data not found"
    return None


def export_task(
    task: Task, dest: Path, *, image: str = DEFAULT_IMAGE, allow_internet: bool | None = None
) -> HarborTaskReport:
    """Write one task as a Harbor task folder at ``dest`` (an earlier export's there is
    replaced). Returns its report (``skipped`` set, nothing written, for a task that cannot
    run under Harbor, or a ``dest`` that is something else: a link, a file, a folder without
    ``task.toml``).
    ``allow_internet``: task.toml's setting (None: the task's own, off unless it allows web
    access)."""
    report = HarborTaskReport(task_id=task.id)
    reason = _skip_reason(task)
    if reason is None and os.path.lexists(dest) and not _harbor_task_folder(dest):
        # only an earlier export's task folder is replaced (helper-198: OUT the job folder
        # replaced its trial folders with Harbor tasks)
        reason = f"{dest} is there and is no Harbor task folder (no task.toml): not replaced"
    if reason is not None:
        report.skipped = reason
        return report
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        (tmp / "instruction.md").write_text(task.prompt.rstrip() + "\n", encoding="utf-8")
        (tmp / "task.toml").write_text(_task_toml(task, allow_internet), encoding="utf-8")
        env = tmp / "environment"
        materialise_workspace(task, env / "workspace")
        shutil.rmtree(env / "workspace" / "gt", ignore_errors=True)
        (env / "Dockerfile").write_text(
            f"FROM {image}\nCOPY workspace/ /tmp_workspace/\nWORKDIR /tmp_workspace\n",
            encoding="utf-8",
        )
        tests = tmp / "tests"
        (tests / "gt").mkdir(parents=True)
        if task.workspace.gt_dir is not None and Path(task.workspace.gt_dir).is_dir():
            shutil.copytree(task.workspace.gt_dir, tests / "gt", dirs_exist_ok=True)
        write_files(tests / "gt", task.workspace.gt_files)
        offset = (task.grader.origin.line or 1) - 1 if task.grader.origin else 0
        (tests / "grader.py").write_text("\n" * offset + (task.grader.source or ""))
        (tests / "runner.py").write_text(_RUNNER.lstrip(), encoding="utf-8")
        (tests / "reward.py").write_text(
            _REWARD.format(
                score_rule="\n\n".join(inspect.getsource(f) for f in (_float, score_from_result))
            ),
            encoding="utf-8",
        )
        (tests / "test.sh").write_text(
            _TEST_SH.format(task_id=task.id, origin=f"grader_{task.id}.py"), encoding="utf-8"
        )
        (tests / "test.sh").chmod(0o755)
        if _reads_transcript(task.grader.source or ""):
            report.notes.append("the grader may read the transcript: Harbor gives it none")
        steps, why = _replay_steps(task)
        if steps is not None:
            sol = tmp / "solution"
            sol.mkdir()
            (sol / "replay.py").write_text(_REPLAY.format(steps=json.dumps(steps)))
            (sol / "solve.sh").write_text(_SOLVE_SH.format(task_id=task.id))
            (sol / "solve.sh").chmod(0o755)
            report.has_solution = True
        else:
            report.notes.append(f"no solution/: {why}")
        if dest.exists():
            report.notes.append(f"replaced the {dest.name}/ that was in the output folder")
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.folder = dest
    return report


def _harbor_task_folder(path: Path) -> bool:
    """True for a folder (not a link) holding a regular ``task.toml``: an export's."""
    toml = path / "task.toml"
    return path.is_dir() and not path.is_symlink() and toml.is_file() and not toml.is_symlink()


def tasks_of(source: Path) -> list[Task]:
    """The tasks of a suite path, or of the suite a job folder ran (its summary's
    ``suite_path`` and ``suite``). Raises UserError naming the path."""
    from clawrig.export.job import suite_location
    from clawrig.runner.batch import select_tasks
    from clawrig.tasks.registry import load_tasks

    source = Path(source)
    if not source.exists():
        raise UserError(f"JOB_OR_SUITE: no such file or folder: {source}")
    summaries = JobPaths(source).summaries() if source.is_dir() else []
    if not summaries:
        return load_tasks(source)
    try:
        summary = json.loads(read_record(summaries[-1]))
        recorded = summary["suite_path"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{summaries[-1]}: suite_path: not a clawrig job summary") from None
    # where the job ran it from (relative to there: the export's rule), and only the tasks
    # the job ran: a broken sample it never ran stops no export of it (helper-217)
    suite_path = suite_location(source, recorded) or Path(str(recorded))
    ids = sorted({row["task_id"] for row in summary.get("tasks") or [] if "task_id" in row})
    if not ids:
        return load_tasks(suite_path)
    return load_tasks(suite_path, select=lambda tasks: select_tasks(tasks, ",".join(ids), []))


def export_harbor(
    source: Path | str,
    out: Path | str,
    *,
    image: str = DEFAULT_IMAGE,
    suite: str = "all",
    allow_internet: bool | None = None,
) -> HarborReport:
    """Write every task of ``source`` (a suite path, or a job folder: the tasks it ran) as a
    Harbor task folder ``out/<task_id>/``. ``suite``: all or comma-separated task ids;
    ``allow_internet``: see :func:`export_task`. Raises UserError for an unreadable source,
    an unknown id, or an ``out`` that cannot be written or is ``source`` or inside it."""
    from clawrig.runner.batch import select_tasks
    from clawrig.runner.preflight import writable_problem

    out = Path(out)
    if problem := writable_problem(out, "OUT", folder=True):  # (tracebacks: helper-198)
        raise UserError(problem)
    src = Path(source).resolve()
    if out.resolve() == src or out.resolve().is_relative_to(src):
        raise UserError(f"OUT: {out} is {source} or inside it: give a folder outside it")
    tasks = select_tasks(tasks_of(Path(source)), suite, [])
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    report = HarborReport(out=out)
    for task in tasks:
        report.tasks.append(
            export_task(task, out / task.id, image=image, allow_internet=allow_internet)
        )
    if made and not report.exported:  # nothing written: no empty folder left behind
        out.rmdir()
    return report
