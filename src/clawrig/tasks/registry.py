"""Format detection and suite loading: one entry point for every published task format.

A path can be:

- one task file: WildClawBench Markdown, or a DataClawBench ``tasks/task_NNN_*.md`` (told apart
  by its front matter: ``gold_file`` / ``grading_type: llm_judge``);
- a folder of task files (``tasks/**/*.md`` under it when it has a ``tasks/`` folder, else
  ``**/*.md``; README files are skipped);
- a four-folder root (intent/, datapoints/, evaluators/, reference_payloads/ [+ workspaces/]);
- a DataClawBench root (``assets/qa_gold`` and/or ``assets/qa_raw``, optional ``tasks/``).

:func:`load_suite` collects every problem (:class:`ValidationIssue` with file, field and line)
instead of stopping at the first; :func:`load_tasks` raises the first error; :func:`validate`
returns the problems. Two tasks with the same id in one suite are an error.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml

from clawrig.errors import TaskFormatError, UserError
from clawrig.plugins import Registry
from clawrig.spec.task import Task, TaskFormat, ValidationIssue
from clawrig.tasks.dataclaw import (
    is_dataclaw_doc,
    is_dataclaw_root,
    read_dataclaw_root,
    read_dataclaw_task_md,
)
from clawrig.tasks.fourfolder import is_fourfolder_root, read_fourfolder
from clawrig.tasks.safety import reading_once, task_path_problems
from clawrig.tasks.text import IssueCollector, parse_markdown
from clawrig.tasks.wildclaw import read_wildclaw_task

log = logging.getLogger("clawrig.tasks")

_NOT_A_SUITE = "not a task file, a folder of task files, a four-folder root or a DataClawBench root"
NO_TASK = "no task in it"
"""How :func:`load_suite`'s error for a path of files none of which is a task begins."""


@dataclass
class Suite:
    """Tasks read from one path, with every problem found (errors and warnings)."""

    path: Path
    format: TaskFormat | str | None
    tasks: list[Task] = field(default_factory=list)
    issues: list[ValidationIssue] = field(default_factory=list)

    @property
    def errors(self) -> list[ValidationIssue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[ValidationIssue]:
        return [i for i in self.issues if i.severity == "warning"]

    def warnings_for(self, tasks: list[Task]) -> list[ValidationIssue]:
        """The warnings that concern ``tasks`` (some of :attr:`tasks`): those of their own
        files, and those of no task's file (the suite's own, as its shared database)."""
        mine = set().union(*map(_task_files, tasks))
        any_task = set().union(*map(_task_files, self.tasks))
        return [
            w
            for w in self.warnings
            if (where := os.path.abspath(w.path)) in mine or where not in any_task
        ]

    def chosen(
        self, select: Callable[[list[Task]], list[Task]] | None = None, *, quiet: bool = False
    ) -> list[Task]:
        """The tasks ``select`` picks from :attr:`tasks` (None: all of them), as a run of them
        reads the suite: an error of theirs (:meth:`errors_for`; every error for all tasks) is
        raised as TaskFormatError, an error in a file of a task left out is logged, not raised,
        and so are the warnings of the chosen tasks and of no task's file
        (:meth:`warnings_for`); ``quiet``: nothing logged. Raises whatever ``select`` raises,
        as UserError noting the suite's first error when it has one (the task asked for may
        be one that did not read)."""
        if select is None:
            tasks = self.tasks
            if not quiet:  # (said before an error is raised)
                for warning in self.warnings:
                    log.warning("%s", warning)
            raise_first(self.errors)
            return tasks
        try:
            tasks = select(self.tasks)
        except UserError as exc:
            if self.errors:  # (the task asked for may be one that did not read: both are said)
                count = len(self.errors) - 1
                and_more = f" and {count} more" if count else ""
                raise UserError(
                    f"{exc}; a file of the suite did not read: {self.errors[0]}{and_more}"
                ) from None
            raise
        raise_first(self.errors_for(tasks))
        if quiet:
            return tasks
        for warning in self.warnings_for(tasks):
            log.warning("%s", warning)
        if others := self.errors:
            more = f" (and {len(others) - 1} more)" if len(others) > 1 else ""
            log.warning("a file of a task not chosen: %s%s", others[0], more)
        return tasks

    def errors_for(self, tasks: list[Task]) -> list[ValidationIssue]:
        """The errors that stop a run of ``tasks`` (some of :attr:`tasks`): all of them when
        ``tasks`` is every task read; for fewer (``--suite``), those of their own files and
        those of no file (a folder: the suite's shared data). An error in another file, a
        task file that could not be read or one of a task not chosen, is no concern of the
        run (helper-205: one bad file stopped every ``--suite`` run of the others, where
        verify graded them)."""
        if len(tasks) >= len(self.tasks):
            return self.errors
        mine = set().union(*map(_task_files, tasks))
        chosen = {t.id.casefold() for t in tasks}
        others = set().union(*map(_task_files, [t for t in self.tasks if t not in tasks]))
        out = []
        for e in self.errors:
            where = os.path.abspath(e.path)
            if where in mine:
                out.append(e)
            elif where in others:
                continue  # a file of a task read and not chosen
            elif (said := declared_id(Path(where))) is None or _may_be_chosen(said, chosen):
                # a file that is no task's (the suite's: requirements.txt, a folder of its
                # data), or one that did not read and says it is a chosen task (a second
                # file of its id, broken: helper-207), or one --suite's prefix would have
                # meant (`--suite foo` took foo_bar while foo's own file did not read:
                # helper-208)
                out.append(e)
        return out

    @property
    def valid_tasks(self) -> list[Task]:
        """The tasks with no error in any of their own files (the task file; a four-folder
        sample's four files). A reader drops a task for some errors (a file that cannot be
        parsed, an incomplete sample) and keeps it for others (a missing section, a
        mismatched field, a duplicate id): this is the one count that means the same either
        way, the number ``tasks validate`` reports."""
        bad = {os.path.abspath(i.path) for i in self.errors}
        return [t for t in self.tasks if not (_task_files(t) & bad)]

    def counts(self) -> str:
        """``N task(s)[ without errors], E error(s), W warning(s)``: the counts line of
        ``tasks validate`` and ``pull`` (N: :attr:`valid_tasks`)."""
        without = " without errors" if self.errors else ""
        return (
            f"{len(self.valid_tasks)} task(s){without}, {len(self.errors)} error(s), "
            f"{len(self.warnings)} warning(s)"
        )


_ID_KEY_RE = re.compile(r"""^(?:id|"id"|'id')[ \t]*:""")
_SAMPLE_FILE_RE = re.compile(
    r"(?:^|/)(?:intent/(.+)\.json|datapoints/(.+)\.json|evaluators/evaluator_(.+)\.py"
    r"|reference_payloads/reference_payload_(.+)\.json)$"
)


def _may_be_chosen(said: str, chosen: set[str]) -> bool:
    """Whether a task of id ``said`` could be one of the ``chosen`` ids (case-folded) or the
    one a --suite prefix of theirs meant (:func:`find_task`: ``task_001`` for
    ``task_001_...``)."""
    said = said.casefold()
    return any(c == said or c.startswith((said + "_", said + "-")) for c in chosen)


def declared_id(path: Path) -> str | None:
    """The task id a task file declares even when it does not read (:meth:`Suite.errors_for`):
    a four-folder sample file's by its name (``intent/<id>.json``, ``evaluators/evaluator_<id>
    .py`` ...), a Markdown task file's ``id:`` line of its front matter (the first 64 KiB);
    None for any other file, or one that names none."""
    if (m := _SAMPLE_FILE_RE.search(path.as_posix())) is not None:
        return next(g for g in m.groups() if g is not None)
    if path.suffix.lower() != ".md":
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(64 * 1024).decode("utf-8", "replace")
    except OSError:
        return None
    lines = head.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if not lines or lines[0].strip() != "---":
        return None
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), len(lines))
    front = lines[1:end]
    # the `id:` entry alone (its line and the indented ones after it) read as YAML reads it
    # (tags, quotes, escapes, block scalars: helper-208): the rest of the file may not parse
    at = next((i for i, ln in enumerate(front) if _ID_KEY_RE.match(ln)), None)
    if at is None:
        return None
    stop = next(
        (i for i in range(at + 1, len(front)) if front[i][:1] not in (" ", "\t", "")),
        len(front),
    )
    try:
        value = yaml.safe_load("\n".join(front[at:stop]))
    except yaml.YAMLError:  # (an id that does not parse: its text, quotes and brackets off)
        raw = front[at].split(":", 1)[1].split(" #", 1)[0]
        return raw.strip().strip("\"'[]{}").strip() or None
    said = value.get("id") if isinstance(value, dict) else None
    return said.strip() or None if isinstance(said, str) else None


def _task_files(task: Task) -> set[str]:
    """Absolute paths of the files a task was read from (see :attr:`Suite.valid_tasks`): its
    source, a four-folder sample's four files, a DataClawBench task's qa_gold file."""
    files = {os.path.abspath(task.source.path)}
    named = task.metadata.get("files")
    if isinstance(named, dict):
        files |= {os.path.abspath(str(p)) for p in named.values()}
    if isinstance(gold := task.metadata.get("gold_path"), str):
        files.add(os.path.abspath(gold))
    return files


def _is_readme(path: Path) -> bool:
    return path.stem.casefold() == "readme"


def task_files(folder: Path) -> list[Path]:
    """The task Markdown files of a folder: ``tasks/**/*.md`` when it has ``tasks/``, else
    ``**/*.md``; README files skipped; sorted."""
    base = folder / "tasks" if (folder / "tasks").is_dir() else folder
    return sorted(p for p in _markdown_under(base) if not _is_readme(p))


def _markdown_under(base: Path) -> list[Path]:
    """Every regular ``*.md`` file under ``base`` (symlinked folders not followed), walked with
    an explicit stack: a folder tree of any depth (``/tmp`` can hold one) cannot overflow
    Python's recursion limit, as ``Path.rglob`` does on 3.11. Unreadable folders are skipped."""
    found: list[Path] = []
    stack = [str(base)]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.name.endswith(".md") and entry.is_file():
                            found.append(Path(entry.path))
                    except OSError:
                        continue
        except OSError:
            continue
    return found


def _md_format(path: Path) -> TaskFormat:
    doc = parse_markdown(path)
    return TaskFormat.DATACLAW if is_dataclaw_doc(doc) else TaskFormat.WILDCLAW


class FormatReader(Protocol):
    """A task format: ``name`` (its ``Task.format``), ``detect(path)`` (True when the path is
    a suite of this format), ``read(path, root, issues)`` (its tasks; problems go to
    ``issues``, never raised). Third-party formats register an instance (or a class with no
    arguments) in the ``clawrig.formats`` entry-point group; they are tried before the
    built-in ones. A reader may set ``reads_root = False`` (the built-in four-folder and
    DataClawBench-root readers do): a ``root`` given for its suites is then refused
    (:func:`root_applies`) instead of being silently ignored; without it, ``root`` is passed."""

    name: str

    def detect(self, path: Path) -> bool: ...

    def read(self, path: Path, root: Path | None, issues: IssueCollector) -> list[Task]: ...


class FourFolderFormat:
    """EigenData-style four-folder sets (intent/, datapoints/, evaluators/, ...)."""

    name = TaskFormat.FOURFOLDER.value
    reads_root = False  # workspaces come from the set's own workspaces/ folder

    def detect(self, path: Path) -> bool:
        return path.is_dir() and is_fourfolder_root(path)

    def read(self, path: Path, root: Path | None, issues: IssueCollector) -> list[Task]:
        try:
            return read_fourfolder(path, issues)
        except TaskFormatError as exc:
            issues.add(exc)
            return []


class DataClawFormat:
    """A DataClawBench root (assets/qa_gold and/or assets/qa_raw, optional tasks/)."""

    name = TaskFormat.DATACLAW.value
    reads_root = False  # the path is the root

    def detect(self, path: Path) -> bool:
        return path.is_dir() and is_dataclaw_root(path)

    def read(self, path: Path, root: Path | None, issues: IssueCollector) -> list[Task]:
        return read_dataclaw_root(path, issues)


class MarkdownFormat:
    """Task Markdown files, one or a folder of them: WildClawBench tasks, or DataClawBench
    ``tasks/*.md`` (told apart per file by the front matter)."""

    name = TaskFormat.WILDCLAW.value

    def detect(self, path: Path) -> bool:
        if path.is_file():
            return path.suffix.lower() == ".md"
        return bool(task_files(path))

    def read(self, path: Path, root: Path | None, issues: IssueCollector) -> list[Task]:
        if path.is_file():
            task = _read_md(path, root, issues)
            return [task] if task else []
        wild_root = root if root is not None else (path if (path / "tasks").is_dir() else None)
        tasks = []
        for md in task_files(path):
            task = _read_md(md, wild_root, issues, in_folder=True)
            if task is not None:
                tasks.append(task)
        return tasks


FORMATS: Registry[FormatReader] = Registry(
    "formats",
    {
        "fourfolder": "clawrig.tasks.registry:FOURFOLDER",
        "dataclaw": "clawrig.tasks.registry:DATACLAW",
        "markdown": "clawrig.tasks.registry:MARKDOWN",
    },
    flag="format",
)
FOURFOLDER, DATACLAW, MARKDOWN = FourFolderFormat(), DataClawFormat(), MarkdownFormat()
_BUILTIN_FORMATS = ("fourfolder", "dataclaw", "markdown")


def _readers() -> list[FormatReader]:
    """Third-party formats first (in registration order), then the built-in ones."""
    out: list[FormatReader] = []
    for name in [n for n in FORMATS.names() if n not in _BUILTIN_FORMATS] + list(_BUILTIN_FORMATS):
        reader: object = FORMATS.get(name)
        if isinstance(reader, type):
            reader = reader()
        out.append(reader)  # type: ignore[arg-type]
    return out


def _reader_for(path: Path) -> FormatReader | None:
    for reader in _readers():
        if reader.detect(path):
            return reader
    return None


def detect_format(path: Path | str) -> TaskFormat | str:
    """The format of a task path (see module doc); a third-party format's name for a path it
    claims.

    For a folder of task files, the format of its first readable file (WildClawBench when none
    can be read; each file's own problems are reported when it is read). Raises UserError
    when the path does not exist and TaskFormatError (field ``format``) when it is none of the
    known shapes.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"PATH: no such file or folder: {path}")
    reader = _reader_for(path)
    if path.is_file() and not isinstance(reader, MarkdownFormat):
        if reader is not None:
            return reader.name
        raise TaskFormatError(path, "format", f"{_NOT_A_SUITE} (expected a .md task file)")
    if reader is None:
        raise TaskFormatError(path, "format", _NOT_A_SUITE)
    if not isinstance(reader, MarkdownFormat):
        return TaskFormat(reader.name) if reader.name in _TASK_FORMATS else reader.name
    if path.is_file():
        return _md_format(path)
    for md in task_files(path):
        try:
            return _md_format(md)
        except TaskFormatError:
            continue  # reported when the file itself is read
    return TaskFormat.WILDCLAW


_TASK_FORMATS = {f.value for f in TaskFormat}


TEMPLATE_NAMES = frozenset({"task0_template.md"})
"""Files a folder of WildClawBench tasks may hold that upstream's harness never runs."""


def _read_md(
    path: Path, root: Path | None, issues: IssueCollector, *, in_folder: bool = False
) -> Task | None:
    """Read one task file. ``in_folder``: it was found in a folder, so upstream's template and
    a Markdown file without front-matter ``id`` are skipped with a note (as upstream's harness
    never runs them) instead of being errors."""
    if in_folder and path.name in TEMPLATE_NAMES:
        issues.warning(path, "file", "skipped: upstream's task template, never run")
        return None
    try:
        doc = parse_markdown(path)
        if is_dataclaw_doc(doc):
            return read_dataclaw_task_md(path, root=root, issues=issues, doc=doc)
        if in_folder and not doc.front.get("id"):
            # an `id:` left empty is a template's (skipped); none at all beside a Prompt is a
            # task file's slip
            if "id" not in doc.front and (prompt := doc.section("Prompt")) is not None:
                # a task file whose id was left out or misspelled (`idd:`): skipped, the task
                # vanished from the job and its headline numbers (helper-190)
                issues.error(
                    path,
                    "id",
                    "front matter has no `id`, but the file has a `## Prompt` section: a task "
                    f"file (front matter keys: {', '.join(map(str, doc.front)) or 'none'})",
                    doc.front_lines.get("id", prompt.line),
                )
                return None
            issues.warning(path, "id", "skipped: no `id` in the front matter (not a task file)")
            return None
        return read_wildclaw_task(path, root=root, issues=issues, doc=doc)
    except TaskFormatError as exc:
        if in_folder and exc.field == "front matter" and "does not start" in str(exc):
            issues.warning(path, "id", "skipped: no front matter with an `id` (not a task file)")
        else:
            issues.add(exc)
        return None


def _check_duplicates(tasks: list[Task], issues: IssueCollector) -> None:
    """An error for a task id given twice; a warning for ids that differ only in case (their
    trial folders are one folder on a case-insensitive file system: helper-205)."""
    seen: dict[str, Task] = {}
    folded: dict[str, Task] = {}
    for task in tasks:
        first = seen.get(task.id)
        if first is None:
            seen[task.id] = task
            other = folded.setdefault(task.id.casefold(), task)
            if other is not task:
                issues.warning(
                    task.source.path,
                    "id",
                    f"task id {task.id!r} differs only in case from {other.id!r} (in "
                    f"{other.source.path}): their trial folders collide on a file system "
                    "that ignores case (macOS, Windows)",
                    task.source.line,
                )
            continue
        issues.error(
            task.source.path,
            "id",
            f"duplicate task id {task.id!r} (also in {first.source.path})",
            task.source.line,
        )


def _check_paths(tasks: list[Task], root: Path, issues: IssueCollector) -> None:
    """An error for every file or folder a task names outside its benchmark root
    (:func:`clawrig.tasks.safety.task_path_problems`): the WildClawBench root its reader used,
    a DataClawBench task's folder holding ``assets/``, else ``root`` (the suite's folder; a
    single task file's folder)."""
    default = root if root.is_dir() else root.parent
    for task in tasks:
        base = task.metadata.get("benchmark_root") or default
        if task.format == "dataclaw":  # its root holds assets/ beside tasks/
            source = Path(os.path.abspath(task.source.path))
            base = next((p for p in source.parents if (p / "assets").is_dir()), base)
        for file, what, message in task_path_problems(task, Path(base)):
            issues.error(file, what, message)


def root_applies(path: Path | str) -> bool:
    """Whether a benchmark root (``--root``) means anything for the suite at ``path``: True for
    task files and folders of them (WildClawBench Workspace Paths and DataClawBench task files
    are resolved against it) and for third-party formats; False for a four-folder set (its
    workspaces are its own ``workspaces/`` folder) and a DataClawBench root (it is the root)."""
    reader = _reader_for(Path(path))
    return reader is None or bool(getattr(reader, "reads_root", True))


def load_suite(path: Path | str, root: Path | str | None = None) -> Suite:
    """Read every task under ``path`` and collect every problem (never stops at the first).

    ``root`` is the benchmark root for WildClawBench Workspace Paths and DataClawBench task
    files (default: the folder that holds ``tasks/``). Raises UserError when ``path`` does not
    exist, and (one line starting ``--root:``) when ``root`` is not a folder or is given for a
    suite whose format does not read one (:func:`root_applies`: a four-folder set, a
    DataClawBench root) and is not ``path`` itself.
    """
    path = Path(path)
    root_dir = Path(root) if root is not None else None
    if not path.exists():
        raise UserError(f"PATH: no such file or folder: {path}")
    if root_dir is not None and not root_dir.is_dir():
        raise UserError(f"--root: {root_dir}: no such folder")
    if (
        root_dir is not None
        and not root_applies(path)
        and os.path.realpath(root_dir) != os.path.realpath(path)
    ):
        what = "four-folder set" if is_fourfolder_root(path) else "DataClawBench root"
        raise UserError(
            f"--root: {path} is a {what}, which reads its files from its own folders; "
            "--root (the benchmark root of WildClawBench or DataClawBench task files) does "
            "not apply to it: drop --root"
        )
    issues = IssueCollector(strict=False)
    fmt: TaskFormat | str | None = None
    tasks: list[Task] = []
    try:
        fmt = detect_format(path)
    except TaskFormatError as exc:
        issues.add(exc)
    reader = _reader_for(path) if fmt is not None else None
    with reading_once():  # the tasks name the same folders: each resolved and walked once
        if reader is not None:
            tasks = reader.read(path, root_dir, issues)
        _check_duplicates(tasks, issues)
        _check_paths(tasks, root_dir if root_dir is not None else path, issues)
    if reader is not None and not tasks and not any(i.severity == "error" for i in issues.issues):
        # files were read and none is a task (a folder one level too high, a job's output):
        # an error, not an empty suite that validates, verifies and runs "successfully"
        skipped = len(issues.issues)
        issues.add(
            TaskFormatError(
                path,
                "path",
                f"{NO_TASK}: {_NOT_A_SUITE}"
                + (
                    f" ({skipped} file(s) skipped: clawrig tasks validate says why)"
                    if skipped
                    else ""
                ),
            )
        )
    return Suite(path=path, format=fmt, tasks=tasks, issues=issues.issues)


def load_tasks(
    path: Path | str,
    root: Path | str | None = None,
    select: Callable[[list[Task]], list[Task]] | None = None,
) -> list[Task]:
    """Read the tasks under ``path`` (see :func:`load_suite`); ``select``: the ones to return,
    from all read (an error in a file of a task it leaves out is logged, not raised:
    :meth:`Suite.errors_for`).

    Warnings (e.g. workspace data not downloaded) are logged on ``clawrig.tasks``: with
    ``select``, those of the tasks chosen and of no task (:meth:`Suite.warnings_for`; a
    missing file of a task not run is no concern of the run). Raises TaskFormatError for the
    first error (file, field, line), noting how many more there are; UserError when the path
    does not exist, and whatever ``select`` raises.
    """
    return load_suite(path, root).chosen(select)


def raise_first(errors: list[ValidationIssue]) -> None:
    """Raise TaskFormatError for the first of ``errors`` (file, field, line), noting how many
    more there are; nothing when there is none."""
    if errors:
        first = errors[0]
        more = len(errors) - 1
        suffix = f" (and {more} more error(s); run `clawrig tasks validate`)" if more else ""
        raise TaskFormatError(first.path, first.field, first.message + suffix, first.line)


def validate(path: Path | str, root: Path | str | None = None) -> list[ValidationIssue]:
    """Every problem found reading ``path``: errors and warnings, each with file, field and
    (when known) line. An empty list means the suite is clean."""
    return load_suite(path, root).issues


def find_task(tasks: list[Task], task_id: str) -> Task:
    """The task whose id is ``task_id``, else the one whose id starts with ``task_id`` followed
    by ``_`` or ``-`` (upstream DataClawBench selects ``task_001``). Raises UserError when none
    or several match."""
    for task in tasks:
        if task.id == task_id:
            return task
    matches = [t for t in tasks if t.id.startswith(task_id) and t.id[len(task_id) :][:1] in "_-"]
    if not matches:  # any other unique prefix (e.g. "00001" for 000015)
        matches = [t for t in tasks if task_id and t.id.startswith(task_id)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        names = ", ".join(t.id for t in matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise UserError(f"task id {task_id!r} is ambiguous ({len(matches)} tasks): {names}")
    raise UserError(f"no task with id {task_id!r} ({len(tasks)} tasks in the suite)")
