"""DataClawBench (SYSU) -> Tasks, and the upstream gold/task file writers.

Upstream layout (shared/reference/formats.md section 3)::

    <root>/assets/qa_raw/<category>/<id>_result.json   raw items (with ``evidence``)
    <root>/assets/qa_gold/<category>/<id>.json         gold items (``dataclaw/build_tasks.py``)
    <root>/assets/database/**                          the 19 data files (17 sources + 2)
    <root>/tasks/task_NNN_<cat>_<level>_<id>.md        OpenClaw task files, LLM-judge graded

A Task is built from each gold item; when a ``tasks/*.md`` file names that gold file, the task
takes the upstream id (``task_NNN_...``), its prompt and its judge rubric, and the two are
cross-checked (a list answer whose rubric says a different N is an error). Gold items without a
task file get the id ``<category>-<level>-<id>``.

The writers (:func:`render_gold`, :func:`render_task_md`) reproduce upstream byte for byte; the
builder that drives them is :mod:`clawrig.tasks.dataclaw_build`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from clawrig.errors import TaskFormatError, first_invalid
from clawrig.spec.task import (
    Grader,
    GraderKind,
    SourceRef,
    Task,
    TaskFormat,
    Workspace,
    WorkspaceFile,
)
from clawrig.tasks.safety import (
    checked_timeout,
    escaping_symlinks,
    fallback_id,
    has_control,
    id_problem,
    is_inside,
    path_clash,
    relative_path_problem,
)
from clawrig.tasks.text import (
    IssueCollector,
    MarkdownDoc,
    checklist,
    language_of,
    parse_markdown,
    read_json,
    slug,
)

TIMEOUT_SECONDS = 1200
GRADING_TYPE = "llm_judge"
WEB_CATEGORY = "international_comparison"
"""The one category whose tasks may use web search."""

GOLD_KEYS = (
    "id",
    "question",
    "guidelines",
    "answer",
    "metadata",
    "steps",
    "steps_num",
    "milestone",
)
"""Key order of a qa_gold file (qa_raw minus ``evidence``)."""

DATA_SOURCE_LOCAL = "Only use files under `./database/`."
DATA_SOURCE_WEB = "You may use files under `./database/` and web search."
EXPECTED_BEHAVIOR = (
    "Agent should read the provided `database/` files, compute the result, and return the final "
    "answer. The final answer must follow the required output format."
)
GRADING_CRITERIA = (
    "Final answer semantically matches the gold `answer`.",
    "Output format follows `guidelines`.",
)

UPSTREAM_DATABASE_FILES: tuple[str, ...] = (
    "bilingual_translation_english_chinese.json",
    "enterprise/company_core.csv",
    "enterprise/company_operation_status.csv",
    "enterprise/company_operation_status_detail.csv",
    "enterprise/company_operation_yearly_status.csv",
    "enterprise/company_profile.csv",
    "enterprise/company_profile_as.csv",
    "enterprise/company_profile_eu.csv",
    "enterprise/company_profile_na.csv",
    "enterprise/company_profile_oc.csv",
    "industry/national_industry_status.csv",
    "industry/national_industry_status_detail.csv",
    "industry/national_industry_yearly_status.csv",
    "industry/regional_industry_status.csv",
    "industry/regional_industry_status_detail.csv",
    "industry/regional_industry_yearly_status.csv",
    "internal_metrics.csv",
    "policy/policy_release_status.csv",
    "policy/policy_resource.csv",
)
"""The 19 files of the upstream database (relative to assets/database/), as named by the
upstream task files' ``workspace_files``."""


# --------------------------------------------------------------------------- writers


def gold_from_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """A qa_gold item from a qa_raw item: :data:`GOLD_KEYS` in that order (drops ``evidence``).

    Raises KeyError naming the first missing key.
    """
    return {key: raw[key] for key in GOLD_KEYS}


def render_gold(gold: dict[str, Any]) -> str:
    """qa_gold file text: JSON, ``ensure_ascii=False, indent=2``, no trailing newline."""
    return json.dumps({key: gold[key] for key in GOLD_KEYS}, ensure_ascii=False, indent=2)


def build_prompt(question: str, guidelines: str, category: str) -> str:
    """The agent prompt upstream builds: question, guidelines, data-source sentence."""
    source = DATA_SOURCE_WEB if category == WEB_CATEGORY else DATA_SOURCE_LOCAL
    return f"{question}\n\nOutput guidelines:\n{guidelines}\n\n{source}"


def render_rubric(answer: Any) -> str:
    """The ``## LLM Judge Rubric`` body: single-answer (``match``) or, for a list answer of N
    parts, multi-answer (``part_0..part_{N-1}``, ``total = sum / N``)."""
    gold = json.dumps(answer, ensure_ascii=False)
    if isinstance(answer, list):
        n = len(answer)
        return "\n".join(
            [
                "### Criterion 1: Multi-answer Correctness (Weight: 100%)",
                "",
                "Gold answer JSON:",
                f"`{gold}`",
                "",
                "Scoring rules:",
                f"- The gold answer is a list with N={n} parts.",
                "- Judge each predicted part against the corresponding gold part by semantic "
                "equivalence.",
                f"- Return `scores` with `part_0 ... part_{n - 1}` each as 0 or 1.",
                f"- Return `total = (sum(part_i)) / {n}` exactly.",
                f"- If the model output is missing or cannot be parsed into {n} comparable parts, "
                "score all parts 0.",
            ]
        )
    return "\n".join(
        [
            "### Criterion 1: Single-answer Correctness (Weight: 100%)",
            "",
            "Gold answer JSON:",
            f"`{gold}`",
            "",
            "Scoring rules:",
            "- Judge semantic equivalence between the model final answer and the gold answer.",
            "- Return `scores` with one key `match` as 1 or 0.",
            "- Return `total` as 1.0 if equivalent, otherwise 0.0.",
        ]
    )


def task_name(gold: dict[str, Any]) -> str:
    """``<category>-<level>-<id>`` (upstream front-matter ``name``)."""
    meta = gold["metadata"]
    return f"{meta['category']}-{meta['level']}-{gold['id']}"


def task_id_for(number: int, gold: dict[str, Any]) -> str:
    """Upstream task id ``task_<NNN>_<slug(category)>_<slug(level)>_<slug(id)>``."""
    meta = gold["metadata"]
    return (
        f"task_{number:03d}_{slug(str(meta['category']))}_{slug(str(meta['level']))}"
        f"_{slug(str(gold['id']))}"
    )


def render_task_md(task_id: str, gold: dict[str, Any], workspace_files: list[str]) -> str:
    """An upstream ``tasks/<task_id>.md`` file.

    ``workspace_files`` are paths relative to assets/database/ (sorted by the caller); each
    becomes ``{"source": "database/<rel>", "dest": "database/<rel>"}``.
    """
    meta = gold["metadata"]
    category = meta["category"]
    files = [{"source": f"database/{rel}", "dest": f"database/{rel}"} for rel in workspace_files]
    front = "\n".join(
        [
            "---",
            f"id: {task_id}",
            f"name: {task_name(gold)}",
            f"category: {category}",
            f"grading_type: {GRADING_TYPE}",
            f"timeout_seconds: {TIMEOUT_SECONDS}",
            f"gold_file: qa_gold/{category}/{gold['id']}.json",
            f"workspace_files: {json.dumps(files, indent=2)}",
            "---",
        ]
    )
    criteria = "\n".join(f"- [ ] {c}" for c in GRADING_CRITERIA)
    prompt = build_prompt(gold["question"], gold["guidelines"], category)
    return (
        f"{front}\n\n## Prompt\n\n{prompt}\n\n## Expected Behavior\n\n{EXPECTED_BEHAVIOR}\n\n"
        f"## Grading Criteria\n\n{criteria}\n\n## LLM Judge Rubric\n\n"
        f"{render_rubric(gold['answer'])}\n\n"
    )


# --------------------------------------------------------------------------- reading


def is_dataclaw_root(path: Path) -> bool:
    """True when ``path`` holds ``assets/qa_gold`` or ``assets/qa_raw``."""
    return (path / "assets" / "qa_gold").is_dir() or (path / "assets" / "qa_raw").is_dir()


def is_dataclaw_doc(doc: MarkdownDoc) -> bool:
    """True for a DataClawBench task file (front matter names a gold file / llm_judge)."""
    return "gold_file" in doc.front or doc.front.get("grading_type") == GRADING_TYPE


def _json_line(path: Path, key: str) -> int | None:
    try:
        for i, ln in enumerate(path.read_text("utf-8", "replace").split("\n"), start=1):
            if f'"{key}"' in ln:
                return i
    except OSError:
        pass
    return None


def check_gold(
    gold: Any, path: Path, issues: IssueCollector, *, raw: bool = False
) -> dict[str, Any] | None:
    """Check a gold (or raw) item's keys and types; returns it, or None when unusable."""
    if not isinstance(gold, dict):
        issues.error(path, "json", f"must be a JSON object, got {type(gold).__name__}", 1)
        return None
    needed = GOLD_KEYS + (("evidence",) if raw else ())
    missing = [k for k in needed if k not in gold]
    if missing:
        issues.error(path, missing[0], f"missing key(s): {', '.join(missing)}", 1)
        if any(k in missing for k in ("id", "question", "answer", "metadata")):
            return None
    meta = gold.get("metadata")
    if not isinstance(meta, dict) or not all(
        isinstance(meta.get(k), str) and meta.get(k) for k in ("level", "category")
    ):
        issues.error(
            path,
            "metadata",
            "must hold string `level` and `category`",
            _json_line(path, "metadata"),
        )
        return None
    for key, kind in (("question", str), ("guidelines", str), ("steps", list), ("milestone", dict)):
        if key in gold and not isinstance(gold[key], kind):
            issues.error(path, key, f"must be a {kind.__name__}", _json_line(path, key))
    steps_num = gold.get("steps_num")
    if "steps_num" in gold and (isinstance(steps_num, bool) or not isinstance(steps_num, int)):
        issues.error(path, "steps_num", "must be an integer", _json_line(path, "steps_num"))
    elif isinstance(gold.get("steps"), list) and steps_num != len(gold["steps"]):
        issues.warning(
            path,
            "steps_num",
            f"is {steps_num} but `steps` has {len(gold['steps'])} entries "
            "(upstream data, kept as is)",
            _json_line(path, "steps_num"),
        )
    answer = gold["answer"]
    if isinstance(answer, list) and not answer:
        issues.error(path, "answer", "is an empty list", _json_line(path, "answer"))
    if isinstance(answer, dict):
        issues.error(
            path,
            "answer",
            "must be a scalar or a list of parts, got an object",
            _json_line(path, "answer"),
        )
    if path.parent.name != meta["category"]:
        issues.error(
            path,
            "metadata.category",
            f"{meta['category']!r} but the file is in folder {path.parent.name!r}",
            _json_line(path, "category"),
        )
    stem = path.stem.removesuffix("_result") if raw else path.stem
    if str(gold["id"]) != stem:
        issues.error(
            path, "id", f"is {gold['id']!r} but the file name says {stem!r}", _json_line(path, "id")
        )
    return gold


_RUBRIC_VARIANT_RE = re.compile(r"^###\s+Criterion\s+\d+:\s+(Single|Multi)-answer", re.M)
_RUBRIC_N_RE = re.compile(r"\bN=(\d+)\b")
_RUBRIC_PARTS_RE = re.compile(r"part_0 \.\.\. part_(\d+)")
_RUBRIC_DIV_RE = re.compile(r"sum\(part_i\)\)\s*/\s*(\d+)")
_RUBRIC_COMPARABLE_RE = re.compile(r"parsed into (\d+) comparable parts")


def rubric_answer(rubric: str) -> Any:
    """The gold answer a rubric quotes after ``Gold answer JSON:`` (raises ValueError)."""
    m = re.search(r"Gold answer JSON:\s*\n`(.*)`\s*$", rubric, re.M)
    if not m:
        raise ValueError("no `Gold answer JSON:` line")
    try:
        return json.loads(m.group(1))
    except RecursionError:
        raise ValueError("the gold answer JSON is nested too deeply") from None


def check_rubric(
    doc: MarkdownDoc, answer: Any, gold_path: Path | None, issues: IssueCollector
) -> None:
    """Cross-check a task file's ``## LLM Judge Rubric`` with the gold answer: the variant
    (single/multi), the quoted gold answer and, for a list answer, every count N."""
    sec = doc.section("LLM Judge Rubric")
    if sec is None:
        issues.error(
            doc.path, "LLM Judge Rubric", "missing `## LLM Judge Rubric` section", doc.body_line
        )
        return
    gold_name = f"gold file {gold_path}" if gold_path else "the gold answer"

    def line_of(pattern: re.Pattern[str]) -> int:
        for offset, ln in enumerate(sec.lines, start=1):
            if pattern.search(ln):
                return sec.line + offset
        return sec.line

    text = sec.text
    variant = _RUBRIC_VARIANT_RE.search(text)
    is_list = isinstance(answer, list)
    if variant is None:
        issues.error(
            doc.path,
            "LLM Judge Rubric",
            "no `### Criterion 1: Single-answer|Multi-answer ...` heading",
            sec.line,
        )
    elif (variant.group(1) == "Multi") != is_list:
        issues.error(
            doc.path,
            "LLM Judge Rubric",
            f"is the {variant.group(1).lower()}-answer variant but {gold_name} has "
            f"{'a list' if is_list else 'a single'} answer",
            line_of(_RUBRIC_VARIANT_RE),
        )
    try:
        quoted = rubric_answer(text)
    except (ValueError, json.JSONDecodeError):
        issues.error(
            doc.path, "LLM Judge Rubric", "cannot read the `Gold answer JSON:` value", sec.line
        )
    else:
        if quoted != answer:
            issues.error(
                doc.path,
                "LLM Judge Rubric",
                f"gold answer {json.dumps(quoted, ensure_ascii=False)} differs from "
                f"{gold_name}: {json.dumps(answer, ensure_ascii=False)}",
                line_of(re.compile(r"^`")),
            )
    if is_list:
        n = len(answer)
        for pattern, offset, what in (
            (_RUBRIC_N_RE, 0, "N"),
            (_RUBRIC_PARTS_RE, 1, "part count"),
            (_RUBRIC_DIV_RE, 0, "divisor"),
            (_RUBRIC_COMPARABLE_RE, 0, "part count"),
        ):
            for m in pattern.finditer(text):
                said = int(m.group(1)) + offset
                if said != n:
                    issues.error(
                        doc.path,
                        "LLM Judge Rubric",
                        f"rubric {what} says N={said} but the list answer in {gold_name} "
                        f"has {n} parts",
                        line_of(re.compile(re.escape(m.group(0)))),
                    )


def database_files(assets: Path) -> list[str]:
    """Every file under ``assets/database`` as a sorted list of POSIX paths relative to it.

    Files reached through a symlink that points outside ``assets`` are left out
    (:func:`read_dataclaw_root` reports them as errors).
    """
    db = assets / "database"
    if not db.is_dir():
        return []
    return sorted(
        p.relative_to(db).as_posix() for p in db.rglob("*") if p.is_file() and is_inside(p, assets)
    )


def _assets_of(root: Path) -> Path:
    return root / "assets" if (root / "assets").is_dir() else root


def task_from_gold(
    gold: dict[str, Any],
    gold_path: Path,
    root: Path,
    issues: IssueCollector,
    doc: MarkdownDoc | None = None,
    missing_database: list[Path] | None = None,
) -> Task:
    """A Task from a gold item (+ its upstream task file when there is one).

    ``root`` is the DataClawBench root (holding assets/). Without ``doc`` the workspace is
    every file under assets/database (``missing_database`` lists upstream files not present);
    with ``doc`` it is the task file's ``workspace_files``.
    """
    assets = _assets_of(root)
    meta = gold["metadata"]
    category = str(meta["category"])
    level = str(meta["level"])
    prompt = build_prompt(str(gold["question"]), str(gold.get("guidelines", "")), category)
    rubric = render_rubric(gold["answer"])
    task_id = f"{category}-{level}-{gold['id']}"
    if doc is None and (problem := id_problem(task_id)):
        issues.error(
            gold_path,
            "id",
            f"{problem}; it is built as <metadata.category>-<metadata.level>-<id>",
            _json_line(gold_path, "id"),
        )
        task_id = fallback_id(task_id)
    expected, criteria = EXPECTED_BEHAVIOR, list(GRADING_CRITERIA)
    workspace = Workspace(root=assets)
    metadata: dict[str, Any] = {
        "upstream_id": gold["id"],
        "gold_file": f"qa_gold/{category}/{gold['id']}.json",
        "gold_path": str(gold_path),
        "grading_type": GRADING_TYPE,
    }
    if "db" in meta:
        metadata["db"] = meta["db"]
    source = SourceRef(path=gold_path)
    timeout: Any = TIMEOUT_SECONDS
    if doc is None:
        for rel in database_files(assets):
            workspace.files.append(
                WorkspaceFile(source=assets / "database" / rel, dest=f"database/{rel}")
            )
        workspace.missing.extend(missing_database or [])
    else:
        task_id, prompt, timeout = _apply_task_doc(doc, gold, prompt, workspace, root, issues)
        check_rubric(doc, gold["answer"], gold_path, issues)
        rub = doc.section("LLM Judge Rubric")
        rubric = rub.text if rub else rubric
        eb = doc.section("Expected Behavior", "Expected Behaviour")
        expected = eb.text if eb else expected
        gc = doc.section("Grading Criteria")
        criteria = checklist(gc.text) if gc else criteria
        source = SourceRef(path=doc.path)
        metadata["task_file"] = str(doc.path)
        m = re.match(r"^task_(\d+)_", task_id)
        if m:
            metadata["task_number"] = int(m.group(1))
    try:
        return Task(
            id=task_id,
            name=task_name(gold),
            category=category,
            prompt=prompt,
            expected_behavior=expected,
            grading_criteria=criteria,
            timeout_seconds=float(timeout),
            level=level,
            language=language_of(str(gold["question"])),
            workspace=workspace,
            grader=Grader(kind=GraderKind.JUDGE, judge_rubric=rubric),
            web_allowed=category == WEB_CATEGORY,
            answer=gold["answer"],
            guidelines=gold.get("guidelines"),
            steps=[str(s) for s in gold.get("steps", []) or []],
            steps_num=gold.get("steps_num") if isinstance(gold.get("steps_num"), int) else None,
            milestones=milestone if isinstance(milestone := gold.get("milestone"), dict) else {},
            format=TaskFormat.DATACLAW,
            source=source,
            metadata=metadata,
        )
    except ValidationError as exc:
        raise TaskFormatError(gold_path, *first_invalid(exc)) from None


def _apply_task_doc(
    doc: MarkdownDoc,
    gold: dict[str, Any] | None,
    built_prompt: str | None,
    workspace: Workspace,
    root: Path,
    issues: IssueCollector,
) -> tuple[str, str, Any]:
    """Read id, prompt, timeout and workspace_files of a task file into ``workspace``."""
    assets = _assets_of(root)
    path = doc.path
    task_id = doc.front.get("id")
    if not isinstance(task_id, str) or not task_id:
        issues.error(path, "id", "front matter has no `id`", doc.front_lines.get("id", 2))
        task_id = fallback_id(path.stem)
    elif problem := id_problem(task_id):
        issues.error(path, "id", problem, doc.front_lines.get("id"))
        task_id = fallback_id(task_id)
    elif task_id != path.stem:
        issues.warning(
            path,
            "id",
            f"{task_id!r} differs from the file name {path.stem!r}",
            doc.front_lines.get("id"),
        )
    timeout = checked_timeout(
        doc.front.get("timeout_seconds", TIMEOUT_SECONDS),
        TIMEOUT_SECONDS,
        issues,
        path,
        doc.front_lines.get("timeout_seconds"),
    )
    prompt_sec = doc.section("Prompt")
    prompt = prompt_sec.text if prompt_sec else ""
    if prompt_sec is None:
        found = ", ".join(s.name for s in doc.sections.values()) or "none"
        issues.error(
            path, "Prompt", f"missing `## Prompt` section (sections found: {found})", doc.body_line
        )
        prompt = built_prompt or ""
    elif not prompt:
        issues.error(path, "Prompt", "the `## Prompt` section is empty", prompt_sec.line)
    elif built_prompt is not None and prompt != built_prompt:
        issues.warning(
            path,
            "Prompt",
            "differs from the prompt built from the gold question and guidelines",
            prompt_sec.line,
        )
    files = doc.front.get("workspace_files", [])
    line = doc.front_lines.get("workspace_files")
    if not isinstance(files, list):
        issues.error(path, "workspace_files", "must be a list of {source, dest}", line)
        files = []
    missing_count = 0
    for entry in files:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("source"), str)
            and isinstance(entry.get("dest"), str)
        ):
            issues.error(path, "workspace_files", f"entry {entry!r} is not {{source, dest}}", line)
            continue
        problem = _workspace_file_problem(entry["source"], entry["dest"], assets)
        if problem:
            key = "source" if problem.startswith("source") else "dest"
            where = _front_value_line(path, key, entry[key], line)
            issues.error(path, "workspace_files", problem, where)
            continue
        src = assets / entry["source"]
        workspace.files.append(WorkspaceFile(source=src, dest=entry["dest"]))
        if not src.is_file():
            workspace.missing.append(src)
            missing_count += 1
    if (clash := path_clash(f.dest for f in workspace.files)) is not None:
        # (copied in, it was every trial's infrastructure FileExistsError: helper-205)
        issues.error(path, "workspace_files", f"dest {clash}", line)
        workspace.files = []
    if missing_count:
        issues.warning(
            path,
            "workspace_files",
            f"{missing_count} of {len(files)} files not found under {assets} "
            f"(first: {workspace.missing[0]}); a task of your own: add them there; "
            "DataClawBench's: download its database",
            line,
        )
    if gold is not None:
        meta = gold["metadata"]
        for key, want in (("category", meta["category"]), ("name", task_name(gold))):
            if key in doc.front and doc.front[key] != want:
                issues.error(
                    path,
                    key,
                    f"{doc.front[key]!r} but the gold file says {want!r}",
                    doc.front_lines.get(key),
                )
    return task_id, prompt, timeout


def _workspace_file_problem(source: str, dest: str, assets: Path) -> str | None:
    """Why a ``workspace_files`` entry is unsafe: a ``source`` that is absolute or resolves
    outside ``assets``, a ``dest`` that is absolute or holds ``..``; None when fine."""
    if has_control(source):
        return f"source {source!r} contains a NUL or control character"
    if Path(source).is_absolute() or source.startswith("\\"):
        return f"source {source!r} is an absolute path (give a path relative to {assets})"
    if not is_inside(assets / source, assets):
        return f"source {source!r} resolves outside {assets}"
    if (assets / source).is_dir():  # (it was "not found": download the assets, helper-205)
        return f"source {source!r} is a folder under {assets} (give a file)"
    problem = relative_path_problem(dest)
    if problem:
        return f"dest {problem} (give a path relative to the workspace)"
    return None


def _front_value_line(path: Path, key: str, value: str, default: int | None) -> int | None:
    """1-based line, from line ``default`` on, that holds ``key`` and ``value`` (as is or
    JSON-escaped; else only ``value``); ``default`` when none does."""
    try:
        lines = path.read_text("utf-8", "replace").split("\n")
    except OSError:
        return default
    numbered = list(enumerate(lines, start=1))[(default or 1) - 1 :]
    quoted = json.dumps(value)
    needles = [n for n in (value, quoted[1:-1], quoted) if n]
    for want_key in (True, False):
        for i, ln in numbered:
            if any(n in ln for n in needles) and (key in ln or not want_key):
                return i
    return default


def _gold_path_of(doc: MarkdownDoc, root: Path) -> tuple[str | None, Path | None]:
    rel = doc.front.get("gold_file")
    if not isinstance(rel, str) or not rel:
        return None, None
    if relative_path_problem(rel):
        return rel, None
    assets = _assets_of(root)
    for base in (assets, root):
        candidate = base / rel
        if candidate.is_file():
            return (rel, candidate) if is_inside(candidate, root) else (rel, None)
    return rel, assets / rel


def read_gold(path: Path, issues: IssueCollector, *, raw: bool = False) -> dict[str, Any] | None:
    """Read and check one qa_gold (or, ``raw=True``, qa_raw) file; None when unusable."""
    try:
        data = read_json(path)
    except TaskFormatError as exc:
        issues.add(exc)
        return None
    return check_gold(data, path, issues, raw=raw)


def read_dataclaw_task_md(
    path: Path | str,
    root: Path | str | None = None,
    issues: IssueCollector | None = None,
    doc: MarkdownDoc | None = None,
) -> Task:
    """Read one upstream DataClawBench task file (``tasks/task_NNN_*.md``) with its gold file.

    ``root`` defaults to the folder holding ``tasks/``; the gold file is
    ``<root>/assets/<gold_file>``. When the gold file is absent the answer is taken from the
    rubric (a warning). Raises TaskFormatError as the other readers do, and for an ``id`` that
    is not a safe folder name, a ``timeout_seconds`` that is not a finite number > 0, a
    ``gold_file`` outside the root, and a ``workspace_files`` entry whose ``source`` is absolute
    or resolves outside ``<root>/assets`` or whose ``dest`` is absolute or holds ``..``.
    """
    from clawrig.tasks.wildclaw import default_root

    path = Path(path)
    issues = issues if issues is not None else IssueCollector()
    doc = doc if doc is not None else parse_markdown(path)
    root_dir = Path(root).resolve() if root is not None else default_root(path)
    for repeated in doc.repeated_problems(
        (
            "Prompt",
            "LLM Judge Rubric",
            "Expected Behavior",
            "Expected Behaviour",
            "Grading Criteria",
        )
    ):
        issues.add(repeated)
    rel, gold_path = _gold_path_of(doc, root_dir)
    if rel is None:
        issues.error(
            path,
            "gold_file",
            "front matter has no `gold_file`",
            doc.front_lines.get("gold_file", 2),
        )
    elif gold_path is None:
        issues.error(
            path,
            "gold_file",
            f"{rel!r} is not a relative path inside {_assets_of(root_dir)}",
            doc.front_lines.get("gold_file"),
        )
    elif gold_path is not None and gold_path.is_file():
        gold = read_gold(gold_path, issues)
        if gold is not None:
            return task_from_gold(gold, gold_path, root_dir, issues, doc=doc)
        raise TaskFormatError(gold_path, "gold_file", "gold file cannot be read")
    else:
        issues.warning(
            path,
            "gold_file",
            f"gold file not found: looked for {gold_path}; answer taken from the rubric",
            doc.front_lines.get("gold_file"),
        )
    return _task_from_doc_only(doc, root_dir, issues)


def _task_from_doc_only(doc: MarkdownDoc, root: Path, issues: IssueCollector) -> Task:
    workspace = Workspace(root=_assets_of(root))
    task_id, prompt, timeout = _apply_task_doc(doc, None, None, workspace, root, issues)
    rub = doc.section("LLM Judge Rubric")
    answer: Any = None
    if rub is None:
        issues.error(
            doc.path, "LLM Judge Rubric", "missing `## LLM Judge Rubric` section", doc.body_line
        )
    else:
        try:
            answer = rubric_answer(rub.text)
        except (ValueError, json.JSONDecodeError):
            issues.error(
                doc.path, "LLM Judge Rubric", "cannot read the `Gold answer JSON:` value", rub.line
            )
        else:
            check_rubric(doc, answer, None, issues)
    category = str(doc.front.get("category", ""))
    name_parts = str(doc.front.get("name", "")).split("-")  # <category>-<level>-<id>
    m = re.search(r"\n\nOutput guidelines:\n(.*)\n\n", prompt, re.S)
    eb = doc.section("Expected Behavior", "Expected Behaviour")
    gc = doc.section("Grading Criteria")
    return Task(
        id=task_id,
        name=str(doc.front.get("name", "")),
        category=category,
        prompt=prompt,
        expected_behavior=eb.text if eb else "",
        grading_criteria=checklist(gc.text) if gc else [],
        timeout_seconds=float(timeout),
        level=name_parts[1] if len(name_parts) == 3 else None,
        language=language_of(prompt.split("\n\nOutput guidelines:")[0]),
        workspace=workspace,
        grader=Grader(kind=GraderKind.JUDGE, judge_rubric=rub.text if rub else None),
        web_allowed=category == WEB_CATEGORY,
        answer=answer,
        guidelines=m.group(1) if m else None,
        format=TaskFormat.DATACLAW,
        source=SourceRef(path=doc.path),
        metadata={
            "gold_file": doc.front.get("gold_file"),
            "task_file": str(doc.path),
            "grading_type": doc.front.get("grading_type", GRADING_TYPE),
        },
    )


def missing_database_files(assets: Path) -> list[Path]:
    """Upstream database files (:data:`UPSTREAM_DATABASE_FILES`) absent under assets/database."""
    db = assets / "database"
    return [db / rel for rel in UPSTREAM_DATABASE_FILES if not (db / rel).is_file()]


def read_dataclaw_root(root: Path | str, issues: IssueCollector | None = None) -> list[Task]:
    """Read a DataClawBench root: one Task per qa_gold item (raw items without a gold file are
    reduced in memory), joined with the ``tasks/*.md`` file that names it; task files whose
    gold file is absent are read on their own. Sorted by upstream task number, then id.
    """
    root = Path(root).resolve()
    issues = issues if issues is not None else IssueCollector()
    assets = _assets_of(root)
    docs: dict[str, MarkdownDoc] = {}
    tasks_dir = root / "tasks"
    md_paths = sorted(tasks_dir.glob("*.md")) if tasks_dir.is_dir() else []
    for md in md_paths:
        try:
            doc = parse_markdown(md)
        except TaskFormatError as exc:
            issues.add(exc)
            continue
        rel = doc.front.get("gold_file")
        if not isinstance(rel, str):
            issues.error(
                md,
                "gold_file",
                "front matter has no `gold_file`",
                doc.front_lines.get("gold_file", 2),
            )
            continue
        if rel in docs:
            issues.error(
                md,
                "gold_file",
                f"{rel} is already used by {docs[rel].path.name}",
                doc.front_lines.get("gold_file"),
            )
            continue
        docs[rel] = doc

    golds: dict[str, tuple[dict[str, Any], Path]] = {}
    gold_dir = assets / "qa_gold"
    for path in sorted(gold_dir.glob("*/*.json")) if gold_dir.is_dir() else []:
        gold = read_gold(path, issues)
        if gold is not None:
            golds[f"qa_gold/{path.parent.name}/{path.stem}.json"] = (gold, path)
    raw_dir = assets / "qa_raw"
    for path in sorted(raw_dir.glob("*/*_result.json")) if raw_dir.is_dir() else []:
        rel = f"qa_gold/{path.parent.name}/{path.stem.removesuffix('_result')}.json"
        raw = read_gold(path, issues, raw=True)
        if raw is None:
            continue
        if rel in golds:
            if render_gold(golds[rel][0]) != render_gold(gold_from_raw(raw)):
                issues.warning(
                    golds[rel][1],
                    "gold",
                    f"differs from {path} (rebuild with `clawrig tasks build-dataclaw`)",
                )
        elif all(k in raw for k in ("id", "question", "answer", "metadata")):
            golds[rel] = ({k: raw.get(k) for k in raw if k != "evidence"}, path)

    db_dir = assets / "database"
    escaping = escaping_symlinks(db_dir, assets) if db_dir.is_dir() else []
    if escaping:
        issues.error(
            db_dir,
            "workspace_files",
            f"symlinks point outside {assets} (left out of every workspace): "
            + ", ".join(str(p) for p in escaping),
        )
    missing_db = missing_database_files(assets) if golds else []
    if (
        missing_db
        and len(missing_db) == len(UPSTREAM_DATABASE_FILES)
        and not (assets / "database").is_dir()
    ):
        issues.warning(root, "database", f"no database folder: looked for {assets / 'database'}")
    elif missing_db:
        issues.warning(
            root,
            "database",
            f"{len(missing_db)} of {len(UPSTREAM_DATABASE_FILES)} upstream database files not "
            f"found under {assets / 'database'} (e.g. {missing_db[0].name}); download the "
            "DataClawBench database",
        )

    tasks: list[Task] = []
    for rel, (gold, path) in golds.items():
        gold_doc = docs.pop(rel, None)
        try:
            tasks.append(
                task_from_gold(gold, path, root, issues, doc=gold_doc, missing_database=missing_db)
            )
        except TaskFormatError as exc:
            issues.add(exc)
    for doc in docs.values():
        issues.warning(
            doc.path,
            "gold_file",
            f"gold file not found: looked for "
            f"{assets / str(doc.front['gold_file'])}; answer taken from the rubric",
            doc.front_lines.get("gold_file"),
        )
        try:
            tasks.append(_task_from_doc_only(doc, root, issues))
        except TaskFormatError as exc:
            issues.add(exc)
    if not tasks and not issues.errors:
        issues.error(root, "qa_gold", f"no tasks found under {assets / 'qa_gold'}")

    def order(task: Task) -> tuple[str, str, str]:
        # upstream numbering order: sorted qa_raw paths = category folder, then item id
        return (task.category, str(task.metadata.get("upstream_id", "")), task.id)

    return sorted(tasks, key=order)
