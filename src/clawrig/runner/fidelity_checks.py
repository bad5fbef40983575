"""Pre-run checks that nothing falls back silently (issue 13 item 7), in the preflight shape:
``check(tasks, config) -> list[str]``, one line per problem.

- :func:`check_workspace_data`: a task whose workspace data is not there (one line naming what
  to download and where; one line for the tasks missing the same files), instead of a setup
  error per trial after sandboxes started;
- :func:`check_judge`: a task graded by an LLM judge while no judge is configured:
  ``--grader auto`` refuses (set ``--judge`` / ``JUDGE_MODEL``, or choose ``--grader exact``);
- :func:`note_judge` (a note, the job runs): graders that call a judge themselves while none is
  configured (their calls fail, so they error or use their own fallback), and judge-graded
  tasks graded by exact match only under ``--grader exact``;
- :func:`note_grader_imports` (a note): a grader importing a module its grading environment
  lacks, looked up where the grader will run (the environment's ``python3`` and the task's
  warm snapshot for WildClawBench on an environment; it would crash, or score 0 where it
  catches the ImportError);
- :func:`note_local_home` (a note): under ``--sandbox local``, a task whose grader, warmup or
  service commands spell out /root, or which installs skills: its commands see this machine's
  /root, not the trial's private home (a red-team finding: such a grader read nothing, or the
  user's own OpenClaw sessions, and scored 0 where bwrap gave 1).
"""

from __future__ import annotations

import re
import sys

from clawrig.env.pymodules import grading_modules, requirement_modules
from clawrig.env.system import SystemChoice, grader_on_system, resolve_environment
from clawrig.errors import UserError
from clawrig.pysource import relative_imports, third_party_modules
from clawrig.spec.job import JobConfig
from clawrig.spec.task import GraderKind, Task

MAX_LINES = 10
"""At most this many per-task lines per check; the rest are counted in one more line."""

DOWNLOAD_HINTS = {
    "wildclaw": "the WildClawBench workspace data (Hugging Face dataset internlm/WildClawBench)",
    "dataclaw": "the DataClawBench assets (Hugging Face dataset GTML-LAB/DataClaw)",
    "fourfolder": "the sample set's workspaces/ folder",
}


def _capped(lines: list[str], what: str) -> list[str]:
    if len(lines) <= MAX_LINES:
        return lines
    return [*lines[:MAX_LINES], f"... and {len(lines) - MAX_LINES} more {what}"]


def check_workspace_data(tasks: list[Task], config: JobConfig) -> list[str]:
    """One line per set of missing workspace data (tasks missing the same files share it,
    e.g. every DataClawBench task misses the one database): what to download and where (or, for
    a task of one's own, to make)."""
    groups: dict[tuple[str, ...], list[Task]] = {}
    for task in tasks:
        if task.workspace.missing:
            missing = tuple(str(p) for p in task.workspace.missing)
            groups.setdefault(missing, []).append(task)
    lines = []
    for missing, group in groups.items():
        task = group[0]
        where = ", ".join(missing[:3])
        if len(missing) > 3:
            where += f" (+{len(missing) - 3} more)"
        what = DOWNLOAD_HINTS.get(str(task.format), "the task's workspace data")
        root = task.metadata.get("benchmark_root")
        at = f" under {root} (or pass --root)" if root else ""
        who = f"task {task.id}"
        if len(group) > 1:
            who = f"{len(group)} tasks ({', '.join(t.id for t in group[:3])}"
            who += ", ...)" if len(group) > 3 else ")"
        lines.append(
            f"{who}: workspace data missing: {where}: download {what}{at}; a task of your "
            "own: make it"
        )
    return _capped(lines, "set(s) of missing workspace data")


def _judge_graded(task: Task) -> bool:
    return task.grader.kind in (GraderKind.JUDGE, GraderKind.BOTH) or (
        task.answer is not None and task.grader.kind is GraderKind.NONE
    )


def _calls_judge(task: Task) -> bool:
    return bool(task.metadata.get("grader_uses_judge"))


def check_judge(tasks: list[Task], config: JobConfig) -> list[str]:
    """``--grader auto`` (or judge/both) with judge-graded tasks and no judge: refused."""
    mode = config.trial.grader
    if config.trial.judge or mode not in ("auto", "judge", "both"):
        return []
    graded = [t.id for t in tasks if _judge_graded(t)]
    if not graded:
        return []
    example = ", ".join(graded[:3]) + (", ..." if len(graded) > 3 else "")
    return [
        f"--grader {mode}: {len(graded)} task(s) are graded by an LLM judge ({example}) and no "
        "judge is configured: set --judge or JUDGE_MODEL (and its key), or pass --grader exact "
        "to grade their answers by exact match only"
    ]


def note_judge(tasks: list[Task], config: JobConfig) -> list[str]:
    """Notes: judge-graded tasks under ``--grader exact``; graders that call a judge while no
    judge is configured."""
    notes = []
    if config.trial.grader == "exact":
        graded = [t.id for t in tasks if _judge_graded(t)]
        if graded:
            notes.append(
                f"--grader exact: {len(graded)} judge-graded task(s) are graded by exact match "
                "only (no LLM judge)"
            )
    if not config.trial.judge and config.trial.grader in ("auto", "programmatic"):
        calling = [t.id for t in tasks if _calls_judge(t)]
        if calling:
            example = ", ".join(calling[:3]) + (", ..." if len(calling) > 3 else "")
            notes.append(
                f"{len(calling)} grader(s) call an LLM judge themselves ({example}) and no judge "
                "is configured: their judge calls fail (HTTP 503), so they end in a grading error "
                "or their own fallback; set --judge or JUDGE_MODEL"
            )
    return notes


def note_grader_imports(tasks: list[Task], config: JobConfig) -> list[str]:
    """:func:`grader_import_notes`, at most :data:`MAX_LINES` of them and a count."""
    return _capped(grader_import_notes(tasks, config), "grader(s) with missing imports")


def grader_import_notes(tasks: list[Task], config: JobConfig) -> list[str]:
    """One line per grader that imports modules where it runs lacks, and per grader with a
    relative import (``from .helpers import x``: it runs as one file). Where it runs
    (:func:`clawrig.env.system.grader_on_system`): on the environment's ``python3`` with the
    task's warm snapshot (WildClawBench on an environment, every task on Docker; its modules
    read from files, :func:`clawrig.env.pymodules.grading_modules`: what a spec or warmup not
    built yet names counts as there), else its declared grader environment (the standard
    library only when it declares none). Nothing is built."""
    lines = []
    choices: dict[str, SystemChoice | None] = {}
    for task in tasks:
        if not task.grader.source or task.grader.kind not in (
            GraderKind.PROGRAMMATIC,
            GraderKind.BOTH,
        ):
            continue
        if relative := relative_imports(task.grader.source):
            lines.append(
                f"task {task.id}: grader imports {', '.join(relative)} relatively, but a "
                "grader runs as one file, not in a package: the import fails unless guarded"
            )
        wanted = [
            m for m in third_party_modules(task.grader.source) if m not in sys.stdlib_module_names
        ]
        if not wanted:
            continue
        fmt = str(task.format)
        if fmt not in choices:
            choices[fmt] = _planned_system(config, fmt)
        choice = choices[fmt]
        if choice is None:
            continue  # no system to run on: another check says why
        if grader_on_system(choice, config.trial.sandbox, fmt):
            line = _environment_line(task, wanted, choice, config)
        else:
            have = {n for r in task.grader.requirements for n in requirement_modules(r)}
            lacking = [m for m in wanted if m not in have]
            env = ", ".join(task.grader.requirements) or "the standard library only"
            line = (
                f"task {task.id}: grader imports {', '.join(lacking)}, which its grading "
                f"environment does not have (it has {env}); add them to a requirements.txt "
                "beside the tasks"
                if lacking
                else None
            )
        if line:
            lines.append(line)
    return lines


def _planned_system(config: JobConfig, task_format: str) -> SystemChoice | None:
    trial = config.trial
    try:
        return resolve_environment(
            trial.sandbox, trial.environment, trial.image, task_format, build=False
        )
    except (UserError, OSError):  # an unusable cache folder: the run's own check says so
        return None


def _environment_line(
    task: Task, wanted: list[str], choice: SystemChoice, config: JobConfig
) -> str | None:
    modules = grading_modules(
        choice, config.trial.sandbox, task.warmup, snapshots=config.trial.warm_snapshots
    )
    lacking = modules.lacks(wanted)
    if lacking is None:
        return (
            f"task {task.id}: grader imports {', '.join(wanted)}: cannot list what "
            f"{modules.where} holds (not an overlay2 image here), so not checked"
        )
    if not lacking:
        return None
    agent_only = [m for m in lacking if m in modules.agent_only]
    line = f"task {task.id}: grader imports {', '.join(lacking)}, which {modules.where} lacks"
    if agent_only:
        why = (
            "--no-warm: no warm snapshot"
            if not config.trial.warm_snapshots
            else "a line the warm snapshot cannot hold"
        )
        return (
            f"{line}: the warmup installs {', '.join(agent_only)} in the agent's sandbox only "
            f"({why}), and the grader runs in a fresh one"
        )
    return f"{line}; install them in the task's warmup (pip install ...) or the environment"


UPSTREAM_JUDGE = "openrouter/openai/gpt-5.4"
"""WildClawBench's default judge: ``JUDGE_MODEL`` unset means ``openai/gpt-5.4`` through
OpenRouter (shared/reference/upstream-harnesses.md)."""


def upstream_judge(tasks: list[Task], settings: dict[str, str]) -> str | None:
    """The judge upstream would use when the job names none: :data:`UPSTREAM_JUDGE` for a
    suite with WildClawBench graders that call a judge, when ``settings`` (the environment and
    .env) hold an ``OPENROUTER_API_KEY``; else None. ``JUDGE_MODEL`` in ``settings`` wins
    (returned as is)."""
    if settings.get("JUDGE_MODEL"):
        return settings["JUDGE_MODEL"]
    wild = any(str(t.format) == "wildclaw" and _calls_judge(t) for t in tasks)
    return UPSTREAM_JUDGE if wild and settings.get("OPENROUTER_API_KEY") else None


_ROOT_PATH = re.compile(r"(?<![\w.~-])/root(?![\w.-])")
"""/root as a path (``/root``, ``/root/x``), not a part of another one (``/x/root``)."""


def note_local_home(tasks: list[Task], config: JobConfig) -> list[str]:
    """Under ``--sandbox local``, one line per task whose grader source, warmup lines or
    service commands name /root, or which installs skills (into the trial's home, where
    the agent is told /root/skills): the local backend maps /root to a private folder for the
    harness's file operations only (:mod:`clawrig.sandbox.local`), so such commands read this
    machine's /root and the score may differ from bwrap's. [] for other backends."""
    if config.trial.sandbox != "local":
        return []
    lines = []
    for task in tasks:
        named = [
            what
            for what, texts in (
                ("grader", [task.grader.source or ""]),
                ("warmup", task.warmup),
                ("services", [s.command or "" for s in task.services]),
            )
            if any(_ROOT_PATH.search(t) for t in texts)
        ]
        if task.skills:
            named.append("skills (which go to /root/skills)")
        if named:
            lines.append(
                f"task {task.id}: --sandbox local: /root is named in its {', '.join(named)}; "
                "for commands here that is this machine's /root, not the trial's private home: "
                "its score may differ from bwrap's"
            )
    return _capped(lines, "tasks naming /root under --sandbox local")
