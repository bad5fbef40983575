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
- :func:`note_grader_imports` (a note): a grader importing a module the grading environment
  lacks (it would crash, or score 0 where it catches the ImportError).
"""

from __future__ import annotations

import re
import sys

from clawrig.pysource import third_party_modules
from clawrig.spec.job import JobConfig
from clawrig.spec.task import GraderKind, Task

MAX_LINES = 10
"""At most this many per-task lines per check; the rest are counted in one more line."""

IMPORT_NAMES = {
    "pillow": ["PIL"],
    "pymupdf": ["fitz", "pymupdf"],
    "beautifulsoup4": ["bs4"],
    "pyyaml": ["yaml"],
    "opencv-python": ["cv2"],
    "opencv-python-headless": ["cv2"],
    "python-docx": ["docx"],
    "python-pptx": ["pptx"],
    "scikit-learn": ["sklearn"],
    "scikit-image": ["skimage"],
    "python-dateutil": ["dateutil"],
    "pypdf2": ["PyPDF2"],
    "attrs": ["attr", "attrs"],
    "protobuf": ["google"],
}
"""Import names of distributions whose import name differs from the distribution's."""

DOWNLOAD_HINTS = {
    "wildclaw": "the WildClawBench workspace data (Hugging Face dataset internlm/WildClawBench)",
    "dataclaw": "the DataClawBench assets (Hugging Face dataset GTML-LAB/DataClaw)",
    "fourfolder": "the sample set's workspaces/ folder",
}


def _capped(lines: list[str], what: str) -> list[str]:
    if len(lines) <= MAX_LINES:
        return lines
    return [*lines[:MAX_LINES], f"... and {len(lines) - MAX_LINES} more {what}"]


def import_names(requirement: str) -> list[str]:
    """The module names a requirement line (``Pillow==13.0.0``, ``pymupdf>=1``) provides."""
    dist = re.split(r"[\s<>=!~;\[@]", requirement.strip(), maxsplit=1)[0]
    key = dist.lower().replace("_", "-")
    return IMPORT_NAMES.get(key, [dist.replace("-", "_")])


def check_workspace_data(tasks: list[Task], config: JobConfig) -> list[str]:
    """One line per set of missing workspace data (tasks missing the same files share it,
    e.g. every DataClawBench task misses the one database): what to download and where."""
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
        lines.append(f"{who}: workspace data missing: {where}: download {what}{at}")
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
    """One line per grader that imports modules its grading environment lacks (the declared
    requirements; the standard library only when it declares none)."""
    lines = []
    for task in tasks:
        if not task.grader.source or task.grader.kind not in (
            GraderKind.PROGRAMMATIC,
            GraderKind.BOTH,
        ):
            continue
        wanted = third_party_modules(task.grader.source)
        if not wanted:
            continue
        have = {n for r in task.grader.requirements for n in import_names(r)}
        lacking = [m for m in wanted if m not in have and m not in sys.stdlib_module_names]
        if lacking:
            env = ", ".join(task.grader.requirements) or "the standard library only"
            lines.append(
                f"task {task.id}: grader imports {', '.join(lacking)}, which its grading "
                f"environment lacks ({env}); add them to a requirements.txt beside the tasks"
            )
    return _capped(lines, "grader(s) with missing imports")


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
