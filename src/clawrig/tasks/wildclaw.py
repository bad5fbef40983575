"""WildClawBench task Markdown -> :class:`clawrig.spec.task.Task`.

Upstream format (InternLM WildClawBench; shared/reference/formats.md section 1): one file per
task, ``tasks/<NN_Category>/<NN_Category>_task_<N>_<slug>.md``, YAML front matter (``id``,
``name``, ``category``, ``timeout_seconds`` default 120, ``modality``) and the sections Prompt,
Expected Behavior, Grading Criteria, Automated Checks (a fenced python block defining
``grade(**kwargs) -> dict``), Workspace Path (required), Skills, Env, Warmup.

The workspace folder is ``<root>/<Workspace Path>/{exec,tmp,gt}`` where ``root`` is the
benchmark root (default: the folder that holds ``tasks/``); it must stay inside that root
(an absolute path, a ``..`` escape or a symlink pointing outside is an error). Workspace data
that has not been downloaded is recorded in ``Workspace.missing`` with a warning, never an
error.
"""

from __future__ import annotations

import ast
import difflib
import functools
import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from clawrig.errors import TaskFormatError, first_invalid
from clawrig.pysource import parse as parse_source
from clawrig.pysource import third_party_modules
from clawrig.sandbox.pyenv import WILDCLAW_GRADER_REQUIREMENTS, suite_grader_requirements
from clawrig.spec.task import (
    Grader,
    GraderKind,
    SourceRef,
    Task,
    TaskFormat,
    Workspace,
)
from clawrig.tasks.safety import (
    checked_timeout,
    escaping_symlinks,
    fallback_id,
    has_control,
    id_problem,
    is_inside,
    name_problem,
    resolved,
)
from clawrig.tasks.text import (
    IssueCollector,
    MarkdownDoc,
    block_lines,
    checklist,
    language_of,
    parse_markdown,
    strip_fence,
)

DEFAULT_TIMEOUT_SECONDS = 120
"""Upstream default when the front matter has no ``timeout_seconds``."""

GRADER_TIMEOUT_SECONDS = 120.0
"""Upstream gives grade() 120 s."""

MODALITIES = ("pure-text", "multimodal")
KNOWN_FRONT_KEYS = {"id", "name", "category", "timeout_seconds", "modality"}
SECTION_TITLES = (
    "Prompt",
    "Expected Behavior",
    "Expected Behaviour",
    "Grading Criteria",
    "Automated Checks",
    "Workspace Path",
    "Skills",
    "Env",
    "Warmup",
)
"""The sections of a task file clawrig reads, as task files write them."""
KNOWN_SECTIONS = tuple(title.lower() for title in SECTION_TITLES)
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def default_root(task_file: Path) -> Path:
    """The benchmark root of a task file: the folder that holds its ``tasks/`` folder, where
    the formats keep their task files (WildClawBench ``tasks/<category>/<task>.md``,
    DataClawBench ``tasks/<task>.md``: docs of formats in DESIGN.md's references).

    Falls back to the task file's folder when neither its folder nor that folder's parent is
    named ``tasks``: a ``tasks`` folder further up is someone else's (a suite kept in
    ``~/tasks/downloads/bench`` took the home folder for its root, and a task's Workspace Path
    ``secretdata`` copied ``~/secretdata`` into its sandbox: helper-205). The file's own path
    is not resolved: a task file that is a link into another folder keeps its benchmark's
    root (and the pre-run check refuses the link: ``runner.preflight.task_path_problems``).
    """
    path = Path(os.path.abspath(task_file))
    for parent in path.parents[:2]:
        if parent.name == "tasks":
            return parent.parent
    return path.parent


def grade_source_problems(source: str, path: Path, first_line: int) -> list[TaskFormatError]:
    """Syntax-check grade() source that starts at ``first_line`` of ``path``.

    Returns the problems (empty when fine): a SyntaxError reported at its line inside the file,
    or a source that defines no top-level ``grade`` function.
    """
    problem = _grade_source_problem(source)
    if problem is None:
        return []
    line, message = problem
    return [TaskFormatError(path, "Automated Checks", message, first_line + line - 1)]


@functools.lru_cache(maxsize=256)
def _grade_source_problem(source: str) -> tuple[int, str] | None:
    """(line within ``source``, message) of its first problem (:func:`grade_source_problems`),
    or None; once per source (a suite's tasks often share their grader's code)."""
    try:
        tree = parse_source(source, "<grader>")
    except SyntaxError as exc:
        return exc.lineno or 1, f"grade() has a syntax error: {exc.msg}"
    defined = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    grade = defined.get("grade")
    if grade is None:
        return 1, "the block defines no top-level `def grade(...)`"
    if isinstance(grade, ast.AsyncFunctionDef):
        # (called as WildClawBench calls it, it returns a coroutine, not its scores: every
        # trial was "grade() returned a string" and scored 0, the agent blamed: helper-205)
        return grade.lineno, "`async def grade` returns a coroutine: grade() must be a plain def"
    return None


def _front_str(doc: MarkdownDoc, key: str, issues: IssueCollector) -> str:
    value = doc.front.get(key)
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        issues.error(
            doc.path,
            key,
            f"must be a string, got {type(value).__name__}",
            doc.front_lines.get(key),
        )
        return ""
    return str(value)


def _workspace(
    doc: MarkdownDoc, root: Path, issues: IssueCollector
) -> tuple[Workspace, str | None]:
    sec = doc.section("Workspace Path")
    if sec is None or not strip_fence(sec).code.strip():
        issues.error(
            doc.path,
            "Workspace Path",
            "missing `## Workspace Path` section "
            "(a path like workspace/<category>/task_<N>_<slug>)",
            sec.line if sec else doc.body_line,
        )
        return Workspace(), None
    block = strip_fence(sec)
    rel = block_lines(block)
    if len(rel) != 1:
        issues.error(
            doc.path, "Workspace Path", f"expected one path, found {len(rel)} lines", block.line
        )
        if not rel:
            return Workspace(), None
    line, rel_path = rel[0]
    if Path(rel_path).is_absolute() or rel_path.startswith(("/", "\\")):
        issues.error(
            doc.path,
            "Workspace Path",
            f"{rel_path!r} is an absolute path; give a path relative to the benchmark root {root}",
            line,
        )
        return Workspace(), None
    if has_control(rel_path) or not is_inside(root / rel_path, root):
        issues.error(
            doc.path,
            "Workspace Path",
            f"{rel_path!r} resolves outside the benchmark root {root}",
            line,
        )
        return Workspace(), None
    ws_root = resolved(root / rel_path)
    ws = Workspace(root=ws_root)
    if not ws_root.is_dir():
        ws.missing.append(ws_root)
        issues.warning(
            doc.path,
            "Workspace Path",
            f"workspace data not found: looked for {ws_root} (a task of your own: make that "
            "folder; a published benchmark's: download its dataset, or pass --root, the folder "
            "the path is relative to)",
            line,
        )
        return ws, rel_path
    escaping = escaping_symlinks(ws_root, root)
    if escaping:
        issues.error(
            doc.path,
            "Workspace Path",
            f"workspace holds symlinks that point outside the benchmark root {root}: "
            + ", ".join(str(p) for p in escaping),
            line,
        )
        return Workspace(), None
    for sub in ("exec", "tmp", "gt"):
        if (ws_root / sub).is_dir():
            setattr(ws, f"{sub}_dir", ws_root / sub)
    if ws.exec_dir is None:
        ws.missing.append(ws_root / "exec")
        issues.warning(
            doc.path,
            "Workspace Path",
            f"workspace data not found: looked for {ws_root / 'exec'}",
            line,
        )
    return ws, rel_path


def _near_miss(name: str, known: list[str]) -> str | None:
    """The one of ``known`` that ``name`` looks like a misspelling of (difflib's ratio 0.8 or
    more), else None. A name that holds a known one whole is another name built on it, not a
    slip (``subcategory``, ``category_id``, ``uid``, ``## Grading Criteria (LLM)``:
    helper-191)."""
    lowered = name.lower()
    if any(k in lowered for k in known):
        return None
    found = difflib.get_close_matches(lowered, known, 1, 0.8)
    return found[0] if found else None


def _near_misses(doc: MarkdownDoc, extra_front: dict[str, Any], issues: IssueCollector) -> None:
    """Warn of a front-matter key or a section heading clawrig does not know that is close to
    one it does (``timeout_secnds``, ``## Automated Check``): kept as the task's metadata as
    upstream's harness keeps any other, and so a misspelling lost the author's setting without
    a word (helper-190: the timeout fell back to its default)."""
    for key in extra_front:
        if match := _near_miss(str(key), sorted(KNOWN_FRONT_KEYS)):
            issues.warning(
                doc.path,
                str(key),
                f"not a front matter key clawrig reads (did you mean `{match}`?): ignored",
                doc.front_lines.get(key),
            )
    for name, sec in doc.sections.items():
        if name in KNOWN_SECTIONS:
            continue
        if match := _near_miss(name, list(KNOWN_SECTIONS)):
            known = SECTION_TITLES[KNOWN_SECTIONS.index(match)]
            issues.warning(
                doc.path,
                sec.name,
                f"not a section clawrig reads (did you mean `## {known}`?): ignored",
                sec.line,
            )


def _grader(doc: MarkdownDoc, issues: IssueCollector) -> Grader:
    sec = doc.section("Automated Checks")
    if sec is None or not sec.text:
        issues.warning(
            doc.path,
            "Automated Checks",
            "no `## Automated Checks` grade() block: the task cannot be graded "
            "(clawrig run refuses it)",
            sec.line if sec else None,
        )
        return Grader(kind=GraderKind.NONE, timeout_seconds=GRADER_TIMEOUT_SECONDS)
    block = strip_fence(sec)
    for problem in grade_source_problems(block.code, doc.path, block.line):
        issues.add(problem)
    imports = third_party_modules(block.code)
    return Grader(
        kind=GraderKind.PROGRAMMATIC,
        source=block.code,
        origin=SourceRef(path=doc.path, line=block.line),
        stdlib_only=not imports,
        timeout_seconds=GRADER_TIMEOUT_SECONDS,
    )


def _names(doc: MarkdownDoc, section: str, issues: IssueCollector, *, env: bool) -> list[str]:
    sec = doc.section(section)
    if sec is None:
        return []
    out = []
    for line, text in block_lines(strip_fence(sec)):
        name = text.split("=", 1)[0].strip() if env else text.rstrip("/")
        if env and not _ENV_NAME_RE.match(name):
            issues.error(doc.path, section, f"not an environment variable name: {text!r}", line)
            continue
        problem = None if env else name_problem(name)
        if problem:
            issues.error(doc.path, section, f"skill name {problem} (give a plain name)", line)
            continue
        out.append(name)
    return out


def read_wildclaw_task(
    path: Path | str,
    root: Path | str | None = None,
    issues: IssueCollector | None = None,
    doc: MarkdownDoc | None = None,
) -> Task:
    """Read one WildClawBench task Markdown file.

    ``root`` is the benchmark root the Workspace Path is resolved against (default
    :func:`default_root`). With the default ``issues`` (strict) the first error raises
    TaskFormatError naming file, field and line; with ``IssueCollector(strict=False)`` every
    problem is collected and a Task is still returned when the file can be read at all.

    Raises TaskFormatError: empty file, not UTF-8 (byte offset named), front matter that is not
    YAML, no ``id`` or an ``id`` that is not a safe folder name
    (:data:`clawrig.tasks.safety.SAFE_ID_PATTERN`), missing ``## Prompt``, grade() syntax error
    (line inside the file), missing ``## Workspace Path`` or one that is absolute, resolves
    outside ``root`` or holds symlinks pointing outside it, a ``## Skills`` entry that is not a
    plain name, ``timeout_seconds`` that is not a finite number > 0, bad ``modality``.
    """
    path = Path(path)
    issues = issues if issues is not None else IssueCollector()
    doc = doc if doc is not None else parse_markdown(path)
    root_dir = Path(root).resolve() if root is not None else default_root(path)
    for repeated in doc.repeated_problems(SECTION_TITLES):
        issues.add(repeated)

    task_id = _front_str(doc, "id", issues)
    if not task_id:
        if doc.front.get("id") in (None, ""):  # (else "must be a string" said it: helper-205)
            issues.error(path, "id", "front matter has no `id`", doc.front_lines.get("id", 2))
        task_id = fallback_id(path.stem)
    elif problem := id_problem(task_id):
        issues.error(path, "id", problem, doc.front_lines.get("id"))
        task_id = fallback_id(task_id)

    timeout = checked_timeout(
        doc.front.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
        DEFAULT_TIMEOUT_SECONDS,
        issues,
        path,
        doc.front_lines.get("timeout_seconds"),
    )

    modality = doc.front.get("modality", "pure-text")
    if modality not in MODALITIES:
        issues.error(
            path,
            "modality",
            f"must be one of {', '.join(MODALITIES)}, got {modality!r}",
            doc.front_lines.get("modality"),
        )
        modality = "pure-text"

    prompt_sec = doc.section("Prompt")
    prompt = prompt_sec.text if prompt_sec else ""
    if prompt_sec is None:
        found = ", ".join(s.name for s in doc.sections.values()) or "none"
        issues.error(
            path, "Prompt", f"missing `## Prompt` section (sections found: {found})", doc.body_line
        )
    elif not prompt:
        issues.error(path, "Prompt", "the `## Prompt` section is empty", prompt_sec.line)

    expected = doc.section("Expected Behavior", "Expected Behaviour")
    criteria = doc.section("Grading Criteria")
    grader = _grader(doc, issues)
    if grader.source and third_party_modules(grader.source):
        # a grader beyond the standard library gets the suite's grader environment:
        # requirements.txt beside the tasks, else the documented WildClawBench set
        try:
            grader.requirements = suite_grader_requirements(root_dir, WILDCLAW_GRADER_REQUIREMENTS)
        except TaskFormatError as exc:
            issues.add(exc)
    workspace, ws_rel = _workspace(doc, root_dir, issues)

    skills = _names(doc, "Skills", issues, env=False)
    # upstream copies each skill from <root>/skills/<name> to /root/skills/<name>; a missing
    # one only warns (the trial still runs, as upstream's)
    skills_base = root_dir / "skills"
    skills_dirs = [skills_base] if skills else []
    for name in skills:
        if not (skills_base / name).is_dir():
            sec = doc.section("Skills")
            issues.warning(
                path,
                "Skills",
                f"skill folder not found: looked for {skills_base / name} (the trial runs "
                "without it, as upstream)",
                sec.line if sec else None,
            )
    env = _names(doc, "Env", issues, env=True)
    warmup_sec = doc.section("Warmup")
    warmup = [text for _, text in block_lines(strip_fence(warmup_sec))] if warmup_sec else []

    extra_front = {k: v for k, v in doc.front.items() if k not in KNOWN_FRONT_KEYS}
    extra_sections = {
        s.name: s.text for key, s in doc.sections.items() if key not in KNOWN_SECTIONS
    }
    _near_misses(doc, extra_front, issues)
    metadata: dict[str, Any] = {"benchmark_root": str(root_dir)}
    if ws_rel:
        metadata["workspace_path"] = ws_rel
    if extra_front:
        metadata["front_matter"] = extra_front
    if extra_sections:
        metadata["sections"] = extra_sections
    if grader.source:
        imports = third_party_modules(grader.source)
        if imports:
            metadata["grader_imports"] = imports
        metadata["grader_uses_judge"] = "openai" in imports or any(
            name in env for name in ("OPENROUTER_API_KEY", "JUDGE_MODEL")
        )
    level = doc.front.get("level") or doc.front.get("tier") or doc.front.get("difficulty")

    try:
        return Task(
            id=task_id,
            name=_front_str(doc, "name", issues),
            category=_front_str(doc, "category", issues),
            prompt=prompt,
            expected_behavior=expected.text if expected else "",
            grading_criteria=checklist(criteria.text) if criteria else [],
            timeout_seconds=timeout,
            modality=modality,
            level=str(level) if level else None,
            language=language_of(prompt),
            workspace=workspace,
            skills=skills,
            skills_dirs=skills_dirs,
            env=env,
            warmup=warmup,
            grader=grader,
            web_allowed=True,  # upstream's agents always have the web; --web on enables it
            format=TaskFormat.WILDCLAW,
            source=SourceRef(path=path),
            metadata=metadata,
        )
    except ValidationError as exc:  # pragma: no cover - fields are checked above
        raise TaskFormatError(path, *first_invalid(exc)) from None
