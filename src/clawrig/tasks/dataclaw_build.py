"""Build DataClawBench qa_gold files and tasks/*.md from qa_raw, as upstream's
``dataclaw/build_tasks.py`` does (shared/reference/formats.md section 3).

For each ``assets/qa_raw/<category>/<id>_result.json`` at 1-based position NNN in the sorted
list of all of them:

- ``assets/qa_gold/<category>/<id>.json``: the raw item minus ``evidence``, keys in gold order,
  JSON ``ensure_ascii=False, indent=2``, no trailing newline;
- ``tasks/task_<NNN>_<slug(category)>_<slug(level)>_<slug(id)>.md``: front matter, Prompt,
  Expected Behavior, Grading Criteria and the LLM Judge Rubric, with ``workspace_files`` listing
  every file under the database folder (sorted).

The output reproduces the upstream files byte for byte (tested against the two real task files).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from clawrig.errors import TaskFormatError, UserError
from clawrig.spec.layout import umask_mode
from clawrig.tasks.dataclaw import (
    gold_from_raw,
    read_gold,
    render_gold,
    render_task_md,
    task_id_for,
)
from clawrig.tasks.text import IssueCollector


@dataclass
class BuildResult:
    """What :func:`build_dataclaw` wrote: gold and task file paths (in task order)."""

    gold_files: list[Path] = field(default_factory=list)
    task_files: list[Path] = field(default_factory=list)
    database_files: list[str] = field(default_factory=list)


def raw_files(root: Path) -> list[Path]:
    """All ``assets/qa_raw/**/*_result.json`` of a root, in upstream (sorted path) order."""
    raw_dir = root / "assets" / "qa_raw"
    if not raw_dir.is_dir():
        raise UserError(f"{raw_dir}: qa_raw: folder not found (is {root} a DataClawBench root?)")
    return sorted(
        (p for p in raw_dir.rglob("*_result.json") if p.is_file()),
        key=lambda p: p.relative_to(raw_dir).parts,
    )


def _write(path: Path, text: str) -> None:
    """Write UTF-8 text exactly (no newline translation), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, umask_mode(0o666))  # (mkstemp's 0600: helper-135)
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_dataclaw(
    root: Path | str, out: Path | str | None = None, database: Path | str | None = None
) -> BuildResult:
    """Build ``<out>/assets/qa_gold/**`` and ``<out>/tasks/*.md`` from ``<root>/assets/qa_raw``.

    ``out`` defaults to ``root``; ``database`` (the folder whose files are listed in
    ``workspace_files``) defaults to ``<root>/assets/database``. Every raw file is checked
    first; if any is bad nothing is written and TaskFormatError names the first problem
    (file, field, line) and how many more there are. Raises UserError when qa_raw is absent.
    """
    root = Path(root)
    out_dir = Path(out) if out is not None else root
    db_dir = Path(database) if database is not None else root / "assets" / "database"
    if database is not None and not db_dir.is_dir():
        raise UserError(f"{db_dir}: database: folder not found")
    issues = IssueCollector(strict=False)
    golds = []
    for number, path in enumerate(raw_files(root), start=1):
        raw = read_gold(path, issues, raw=True)
        if raw is not None and not issues.errors:
            golds.append((number, path, gold_from_raw(raw)))
    if issues.errors:
        first = issues.errors[0]
        more = len(issues.errors) - 1
        raise TaskFormatError(
            first.path,
            first.field,
            first.message
            + (f" (and {more} more problem(s); see `clawrig tasks validate`)" if more else ""),
            first.line,
        )
    files = _files_under(db_dir) if db_dir.is_dir() else []
    result = BuildResult(database_files=files)
    for number, path, gold in golds:
        category = path.parent.name
        gold_path = out_dir / "assets" / "qa_gold" / category / f"{gold['id']}.json"
        _write(gold_path, render_gold(gold))
        result.gold_files.append(gold_path)
        task_id = task_id_for(number, gold)
        task_path = out_dir / "tasks" / f"{task_id}.md"
        _write(task_path, render_task_md(task_id, gold, files))
        result.task_files.append(task_path)
    return result


def _files_under(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
