"""`clawrig tasks`: list, show and validate task suites; rebuild DataClawBench task files.

- ``clawrig tasks list PATH [--root R] [--json]``: one row per task (id, category, level,
  language, timeout, grader kind, workspace data present).
- ``clawrig tasks show ID [PATH | --path P] [--json]``: one task in full (default suite:
  suites/demo).
- ``clawrig tasks validate PATH [--json]``: every problem with file, field and line; exit 1 on
  any error.
- ``clawrig tasks build-dataclaw --root R [--out DIR]``: qa_gold + tasks/*.md from qa_raw, as
  upstream DataClawBench's build_tasks.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from clawrig.cli.common import ROOT_HELP, console, echo_json, err_console, stdout_console
from clawrig.errors import UserError

if TYPE_CHECKING:  # the readers load on use, so `clawrig --help` starts fast
    from clawrig.spec.task import Task, ValidationIssue
    from clawrig.tasks.registry import Suite


def load_suite(path: Path, root: Path | None = None) -> Suite:
    from clawrig.tasks.registry import load_suite as _load_suite

    return _load_suite(path, root)


def find_task(tasks: list[Task], task_id: str) -> Task:
    from clawrig.tasks.registry import find_task as _find_task

    return _find_task(tasks, task_id)


def build_dataclaw(root: Path, **kwargs: Any) -> Any:
    from clawrig.tasks.dataclaw_build import build_dataclaw as _build

    return _build(root, **kwargs)


app = typer.Typer(
    add_completion=False,
    help="List, show and validate task suites (WildClawBench, four-folder, DataClawBench).",
    no_args_is_help=True,
)

DEMO_SUITE = Path("suites") / "demo"


def _exit(code: int) -> None:
    """Exit with ``code`` (SystemExit: the same in click's standalone and non-standalone
    modes, and when a test invokes the command directly)."""
    raise SystemExit(code)


def default_suite() -> Path:
    """``suites/demo`` under the current folder, else the one bundled with the source tree."""
    if DEMO_SUITE.exists():
        return DEMO_SUITE
    import clawrig

    return Path(clawrig.__file__).resolve().parents[2] / DEMO_SUITE


def workspace_present(task: Task) -> bool:
    """True when every workspace path the task names exists on this machine."""
    return task.workspace.is_present


def workspace_state(task: Task) -> str:
    """``no``: workspace data the task names is not here; ``empty``: the task names none (a
    four-folder sample without ``workspaces/NNNNNN``: it starts from an empty workspace);
    ``yes``: its initial files are here."""
    ws = task.workspace
    if ws.missing:
        return "no"
    if ws.exec_dir is None and not ws.files and not ws.inline_files:
        return "empty"
    return "yes"


def task_row(task: Task) -> dict[str, Any]:
    """The summary of one task as ``list --json`` prints it."""
    return {
        "id": task.id,
        "name": task.name,
        "category": task.category,
        "level": task.level,
        "language": task.language,
        "timeout_seconds": task.timeout_seconds,
        "grader": task.grader.kind.value,
        "workspace_present": workspace_present(task),
        "workspace": workspace_state(task),
        "format": str(task.format),
        "source": str(task.source),
    }


def _issue_dict(issue: ValidationIssue) -> dict[str, Any]:
    return {
        "severity": issue.severity,
        "path": str(issue.path),
        "field": issue.field,
        "line": issue.line,
        "message": issue.message,
    }


def _print_issues(issues: list[ValidationIssue], target: Console) -> None:
    for issue in issues:
        style = "bold red" if issue.severity == "error" else "yellow"
        line = Text()
        line.append(f"{issue.severity}: ", style=style)
        line.append(str(issue))
        target.print(line, soft_wrap=True, highlight=False)


def _first_paths(paths: list[Path], limit: int = 3) -> str | None:
    if not paths:
        return None
    shown = [str(p) for p in paths[:limit]]
    if len(paths) > limit:
        shown.append(f"... ({len(paths) - limit} more; `--json` lists all)")
    return "\n".join(shown)


def _timeout(seconds: float) -> str:
    return f"{seconds:g}s"


@app.command("list")
def list_tasks(
    path: Path = typer.Argument(
        ..., help="Task file, folder of task files, four-folder root or DataClawBench root."
    ),
    root: Path | None = typer.Option(
        None,
        "--root",
        help=ROOT_HELP,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
) -> None:
    """List the tasks of a suite. Exit 1 when some tasks could not be read."""
    suite = load_suite(path, root)
    if as_json:
        echo_json(json.dumps([task_row(t) for t in suite.tasks], indent=2, ensure_ascii=False))
    elif suite.tasks or not suite.errors:  # (none read: the errors alone, no empty table)
        table = Table(title=f"{len(suite.tasks)} tasks in {path}", title_justify="left")
        for col in ("id", "category", "level", "lang", "timeout", "grader", "workspace"):
            table.add_column(col, no_wrap=col == "id")
        for task in suite.tasks:
            state = workspace_state(task)
            table.add_row(
                Text(task.id),
                Text(task.category),
                Text(task.level or "-"),
                Text(task.language or "-"),
                _timeout(task.timeout_seconds),
                task.grader.kind.value,
                Text(state, style="green" if state == "yes" else "yellow"),
            )
        stdout_console().print(table)
    _summarise(suite)


def _summarise(suite: Suite) -> None:
    """Errors on stderr (exit 1); a one-line warning count."""
    if suite.errors:
        _print_issues(suite.errors, err_console)
    if suite.warnings:
        err_console.print(
            f"{len(suite.warnings)} warning(s); `clawrig tasks validate {suite.path}` shows them",
            highlight=False,
            soft_wrap=True,
        )
    if suite.errors:
        _exit(1)


def _is_folder(name: str) -> bool:
    """True when ``name`` names a folder (False for a name no path can have: too long)."""
    try:
        return Path(name).is_dir()
    except OSError:
        return False


@app.command("show")
def show_task(
    task_id: str = typer.Argument(
        ..., metavar="ID", help="Task id (or a unique prefix such as task_001)."
    ),
    path_arg: Path | None = typer.Argument(
        None, metavar="[PATH]", help="Suite path (default: suites/demo)."
    ),
    path_opt: Path | None = typer.Option(
        None, "--path", help="Suite path (instead of the PATH argument)."
    ),
    root: Path | None = typer.Option(None, "--root", help=ROOT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the Task as JSON."),
) -> None:
    """Show one task in full."""
    if path_opt is None and path_arg is not None and not path_arg.exists():
        if Path(task_id).exists():  # PATH ID, the order of `tasks list PATH`: taken as meant
            task_id, path_arg = str(path_arg), Path(task_id)
    path = path_opt or path_arg or default_suite()
    suite = load_suite(path, root)
    try:
        task = find_task(suite.tasks, task_id)
    except UserError as exc:
        if path_arg is None and path_opt is None and _is_folder(task_id):
            raise UserError(
                f"ID: {task_id} is a folder, not a task id: give a task id with the suite "
                f"(clawrig tasks show ID {task_id}; clawrig tasks list {task_id} lists the ids)"
            ) from None
        if suite.errors:
            raise UserError(
                f"{exc} ({len(suite.errors)} error(s) reading {path}; "
                f"`clawrig tasks validate {path}` lists them)"
            ) from None
        raise
    if as_json:
        echo_json(task.model_dump_json(indent=2))
        return
    out = stdout_console()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    ws = task.workspace
    fields: list[tuple[str, Any]] = [
        ("id", task.id),
        ("name", task.name),
        ("category", task.category),
        ("format", str(task.format)),
        ("source", str(task.source)),
        ("level", task.level),
        ("language", task.language),
        ("timeout", _timeout(task.timeout_seconds)),
        ("modality", task.modality),
        (
            "grader",
            task.grader.kind.value + (f" ({task.grader.origin})" if task.grader.origin else ""),
        ),
        ("workspace", str(ws.root) if ws.root else None),
        ("exec", str(ws.exec_dir) if ws.exec_dir else None),
        ("tmp", str(ws.tmp_dir) if ws.tmp_dir else None),
        ("gt", str(ws.gt_dir) if ws.gt_dir else ", ".join(ws.gt_files) or None),
        ("files", f"{len(ws.files)} file(s)" if ws.files else None),
        ("missing", _first_paths(ws.missing)),
        ("skills", ", ".join(task.skills) or None),
        ("env", ", ".join(task.env) or None),
        ("warmup", "\n".join(task.warmup) or None),
        ("web", "allowed" if task.web_allowed else None),
        ("expected reward", task.expected_reward),
        ("golden dialog", f"{len(task.golden_dialog)} messages" if task.golden_dialog else None),
        (
            "answer",
            json.dumps(task.answer, ensure_ascii=False) if task.answer is not None else None,
        ),
        ("steps", task.steps_num),
        ("milestones", len(task.milestones) or None),
    ]
    for name, value in fields:
        if value not in (None, ""):
            grid.add_row(name, Text(str(value)))
    out.print(grid)
    for title, body in (
        ("Prompt", task.prompt),
        ("Expected Behavior", task.expected_behavior),
        ("Grading Criteria", "\n".join(f"- {c}" for c in task.grading_criteria)),
        ("Judge Rubric", task.grader.judge_rubric or ""),
    ):
        if body:
            out.print(Text(f"\n## {title}", style="bold"))
            out.print(Text(body))


@app.command("validate")
def validate_suite(
    path: Path = typer.Argument(..., help="Task file or suite folder."),
    root: Path | None = typer.Option(None, "--root", help=ROOT_HELP),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print {tasks, errors, warnings, issues[], lint[], notes[], refused[]} as JSON "
        "(tasks: those without errors; lint: verify's checks of a trajectory's calls against "
        "its tool schema, an error fails validate too; notes: what clawrig run would note, "
        "e.g. a grader's missing imports; refused: tasks clawrig run refuses to grade, which "
        "fail validate).",
    ),
) -> None:
    """Report every problem (file, field, line). Exit 1 on any error or ungradable task.

    A task clawrig run refuses to grade (no checks, answer or rubric) fails it as an error
    does; warnings do not fail."""
    from clawrig.runner.trial import grader_problem
    from clawrig.verify.core import static_lint

    suite = load_suite(path, root)
    notes = _run_notes(suite.valid_tasks, path, root)
    lint = [(t.id, f) for t in suite.valid_tasks for f in static_lint(t)]
    # what clawrig run refuses (with its default --grader auto) fails validate too: a task
    # with no grader passed as "OK" with a warning saying run refuses it (helper-190)
    refused = [p for t in suite.valid_tasks if (p := grader_problem(t, "auto")) is not None]
    lint_errors = sum(1 for _, f in lint if f.severity == "error")
    if as_json:
        echo_json(
            json.dumps(
                {
                    "path": str(path),
                    "format": str(suite.format) if suite.format else None,
                    "tasks": len(suite.valid_tasks),
                    "errors": len(suite.errors),
                    "warnings": len(suite.warnings),
                    "issues": [_issue_dict(i) for i in suite.issues],
                    "lint": [{"task": tid, **f.model_dump(mode="json")} for tid, f in lint],
                    "notes": notes,
                    "refused": refused,
                },
                indent=2,
                ensure_ascii=False,
            )
        )
    else:
        out = stdout_console()
        _print_issues(suite.issues, out)
        from clawrig.cli.verify import finding_text

        for tid, f in lint:
            out.print(Text(f"{tid}: ").append_text(finding_text(f)), soft_wrap=True)
        for line in notes:
            out.print(Text(f"note: {line}"), highlight=False, soft_wrap=True)
        for line in refused:  # (not among the reader's errors counted below: helper-192)
            out.print(Text(f"refused: {line}: clawrig run refuses it"), soft_wrap=True)
        failed = suite.errors or lint_errors or refused
        verdict = Text("FAIL", style="bold red") if failed else Text("OK", style="green")
        summary = Text()
        summary.append(verdict)
        summary.append(f" {path}: {suite.counts()}")
        if lint:
            summary.append(f"; lint: {lint_errors} error(s), {len(lint) - lint_errors} warning(s)")
        if refused:
            summary.append(f"; {len(refused)} task(s) clawrig run refuses")
        out.print(summary, highlight=False)
    if suite.errors or lint_errors or refused:
        _exit(1)


def _run_notes(tasks: list[Any], path: Path, root: Path | None) -> list[str]:
    """The notes ``clawrig run`` would print for these tasks with its default sandbox and
    environment (:func:`clawrig.runner.fidelity_checks.note_grader_imports`: a grader
    importing a module where it runs lacks), each ending with that proviso. Nothing is built."""
    from clawrig.runner.fidelity_checks import grader_import_notes
    from clawrig.spec.job import JobConfig

    config = JobConfig(suite_path=path, root=root)
    try:
        lines = grader_import_notes(tasks, config)
    except OSError as exc:  # clawrig's cache folder (where environments are) is unusable
        return [f"graders' imports not checked: {exc}"]
    return [f"{line} (clawrig run with its default --sandbox and --env)" for line in lines]


@app.command("build-dataclaw")
def build_dataclaw_cmd(
    root: Path = typer.Option(..., "--root", help="DataClawBench root holding assets/qa_raw."),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Output root (default: --root): writes assets/qa_gold/ and tasks/ under it.",
    ),
    database: Path | None = typer.Option(
        None,
        "--database",
        help="Database folder listed in workspace_files (default: <root>/assets/database).",
    ),
) -> None:
    """Write qa_gold/<category>/<id>.json and tasks/task_NNN_*.md from qa_raw, as upstream."""
    result = build_dataclaw(root, out=out, database=database)
    target = out or root
    console.print(
        f"wrote {len(result.gold_files)} gold file(s) to {target / 'assets' / 'qa_gold'} and "
        f"{len(result.task_files)} task file(s) to {target / 'tasks'} "
        f"({len(result.database_files)} database file(s) listed)",
        highlight=False,
        soft_wrap=True,
    )
    from clawrig.tasks.dataclaw import UPSTREAM_DATABASE_FILES

    listed = {str(p) for p in result.database_files}
    absent = [rel for rel in UPSTREAM_DATABASE_FILES if not any(x.endswith(rel) for x in listed)]
    if absent:
        err_console.print(
            f"[bold yellow]warning:[/] {len(absent)} of the {len(UPSTREAM_DATABASE_FILES)} "
            f"upstream database files are not in the database folder (first: {absent[0]}), so "
            "workspace_files differ from upstream's task files; download the DataClawBench "
            "database (or pass --database) to reproduce them exactly",
            highlight=False,
            soft_wrap=True,
            markup=True,
        )
