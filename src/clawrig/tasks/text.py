"""Text helpers shared by the task readers: strict UTF-8 reading, front matter, sections, fences.

Every error is a :class:`clawrig.errors.TaskFormatError` naming the file, the field and, when
known, the 1-based line, so a bad task file never produces a traceback or garbled text.

Markdown conventions follow WildClawBench (shared/reference/formats.md section 1): YAML front
matter between ``---`` lines, level-2 sections split on lines matching ``^##\\s+(.+)$`` (a
``###`` stays inside its section; lines inside fenced blocks never split), fenced blocks
stripped with their first ```` ```lang ```` line and their last ```` ``` ```` line.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clawrig.errors import TaskFormatError
from clawrig.spec.llm import surrogate_free_json
from clawrig.spec.task import ValidationIssue

log = logging.getLogger("clawrig.tasks")

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader, libyaml-backed when available."""

UTF8_BOM = b"\xef\xbb\xbf"
_SECTION_RE = re.compile(r"^##\s+(.+)$")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")


# --------------------------------------------------------------------------- issues


class IssueCollector:
    """Receives the problems a reader finds.

    ``strict=True`` (the default of every reader): an error raises :class:`TaskFormatError` at
    once and a warning is logged on the ``clawrig.tasks`` logger. ``strict=False``: both are kept
    in :attr:`issues` (in the order found) so ``validate`` can report every problem; readers
    then keep going wherever the rest of the file can still be read.
    """

    def __init__(self, strict: bool = True) -> None:
        self.strict = strict
        self.issues: list[ValidationIssue] = []

    def error(self, path: Path | str, field: str, message: str, line: int | None = None) -> None:
        """Record (or, when strict, raise) an error about ``field`` of ``path``."""
        if self.strict:
            raise TaskFormatError(path, field, message, line)
        self.issues.append(
            ValidationIssue(path=Path(path), field=field, message=message, line=line)
        )

    def add(self, exc: TaskFormatError) -> None:
        """Record an error that was raised (a fatal one for that file)."""
        if self.strict:
            raise exc
        self.issues.append(
            ValidationIssue(path=exc.path, field=exc.field, message=exc.message, line=exc.line)
        )

    def warning(self, path: Path | str, field: str, message: str, line: int | None = None) -> None:
        """Record a warning (logged when strict): a problem that does not stop a task running."""
        issue = ValidationIssue(
            path=Path(path), field=field, message=message, line=line, severity="warning"
        )
        if self.strict:
            log.warning("%s", issue)
        else:
            self.issues.append(issue)

    @property
    def errors(self) -> list[ValidationIssue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[ValidationIssue]:
        return [i for i in self.issues if i.severity == "warning"]


# --------------------------------------------------------------------------- reading


def decode_utf8(data: bytes, path: Path | str) -> str:
    """Decode ``data`` as UTF-8, dropping one leading BOM; normalise CRLF/CR to LF.

    Raises TaskFormatError (field ``encoding``) naming the byte offset and line of the first
    byte that is not UTF-8 (e.g. a latin-1 file), instead of returning garbled text.
    """
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        bad = data[exc.start]
        raise TaskFormatError(
            path,
            "encoding",
            f"file is not UTF-8: byte 0x{bad:02x} at byte offset {exc.start} is not valid UTF-8 "
            "(latin-1 or another legacy encoding?); re-save the file as UTF-8",
            line,
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_text(path: Path, *, allow_empty: bool = False) -> str:
    """Read a task file as UTF-8 text (BOM accepted, CRLF normalised).

    Raises TaskFormatError for an unreadable file, a non-UTF-8 file, or (unless ``allow_empty``)
    a file that is empty or holds only whitespace.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TaskFormatError(path, "file", f"cannot read: {exc.strerror or exc}") from None
    text = decode_utf8(data, path)
    if not allow_empty and not text.strip():
        raise TaskFormatError(path, "file", f"file is empty ({len(data)} bytes)", 1)
    return text


def read_json(path: Path) -> Any:
    """Read a UTF-8 JSON file. Errors name the file, field ``json`` and the line."""
    text = read_text(path)
    if (clean := surrogate_free_json(text)) != text:
        # a lone surrogate's escape ("\\udcff") decodes to no text a UTF-8 file or a task's
        # digest can hold (helper-193: `clawrig run` a UnicodeEncodeError traceback)
        at = next(i for i, (a, b) in enumerate(zip(text, clean, strict=False)) if a != b)
        raise TaskFormatError(
            path,
            "json",
            "holds the escape of a lone surrogate (\\ud800-\\udfff), which is no character",
            text.count("\n", 0, at) + 1,
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # ("Unterminated string starting at" needs its column: helper-206)
        raise TaskFormatError(
            path, "json", f"not valid JSON: {exc.msg} (column {exc.colno})", exc.lineno
        ) from None
    except RecursionError:  # nested past Python's limit
        raise TaskFormatError(path, "json", "not valid JSON: nested too deeply") from None
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise TaskFormatError(path, "json", f"not valid JSON: {exc}") from None


def dumps_json_text(value: Any) -> str:
    """A JSON value as file text: ``json.dumps(indent=2, ensure_ascii=False)``; str stays as is."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


# --------------------------------------------------------------------------- small helpers


def slug(text: str) -> str:
    """DataClawBench slug: lower-case, every run of non-[a-z0-9] characters -> ``_``, trimmed."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def has_cjk(text: str) -> bool:
    """True when ``text`` holds at least one CJK (Han) character."""
    return bool(_CJK_RE.search(text))


def language_of(text: str) -> str:
    """``zh`` when ``text`` holds CJK characters, else ``en``."""
    return "zh" if has_cjk(text) else "en"


# --------------------------------------------------------------------------- markdown


@dataclass
class Section:
    """One ``## Name`` section: its heading line (1-based) and its text (lines after it)."""

    name: str
    line: int
    lines: list[str]

    @property
    def text(self) -> str:
        return "\n".join(self.lines).strip()

    @property
    def first_content_line(self) -> int:
        """1-based file line of the first non-blank line of the section (the heading if none)."""
        for offset, ln in enumerate(self.lines, start=1):
            if ln.strip():
                return self.line + offset
        return self.line


@dataclass
class FencedBlock:
    """The inside of a fenced block: code text, the file line of its first code line, lang."""

    code: str
    line: int
    lang: str = ""
    fenced: bool = True


@dataclass
class MarkdownDoc:
    """A task Markdown file split into front matter and level-2 sections."""

    path: Path
    front: dict[str, Any]
    front_lines: dict[str, int]
    sections: dict[str, Section] = field(default_factory=dict)
    body_line: int = 1
    has_front_matter: bool = True
    repeated: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Sections given twice (case-folded name -> the lines of its first and second heading):
    only the first is read."""

    def repeated_problems(self, names: Iterable[str]) -> list[TaskFormatError]:
        """An error for each of the sections ``names`` (those a reader reads) given twice:
        the second was silently ignored (two ``## Prompt`` sections ran the first:
        helper-205)."""
        out = []
        for name in names:
            if (lines := self.repeated.get(name.casefold())) is not None:
                out.append(
                    TaskFormatError(
                        self.path,
                        name,
                        f"section given twice (lines {lines[0]} and {lines[1]}): only one is read",
                        lines[1],
                    )
                )
        return out

    def section(self, *names: str) -> Section | None:
        """The first section whose name matches one of ``names`` (case-insensitive)."""
        for name in names:
            sec = self.sections.get(name.casefold())
            if sec is not None:
                return sec
        return None


def _front_matter_lines(node: yaml.Node, offset: int) -> dict[str, int]:
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, _value in node.value:
            if isinstance(key, yaml.ScalarNode):
                lines[str(key.value)] = key.start_mark.line + 1 + offset
    return lines


def parse_front_matter(
    text: str, path: Path, *, required: bool = True
) -> tuple[dict[str, Any], dict[str, int], int, bool]:
    """Split YAML front matter off ``text``.

    Returns ``(mapping, key -> 1-based line, 1-based line where the body starts, found)``.
    Raises TaskFormatError (field ``front matter``) when it is required but absent, unclosed,
    not YAML, or not a mapping.
    """
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        if required:
            raise TaskFormatError(path, "front matter", "file does not start with `---`", 1)
        return {}, {}, 1, False
    end = None
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            end = i
            break
    if end is None:
        raise TaskFormatError(path, "front matter", "no closing `---` line", 1)
    raw = "\n".join(lines[1:end])
    loader = _YAML_LOADER(raw)
    try:
        node = loader.get_single_node()
        if node is not None and (alias := _first_alias(node)) is not None:
            raise TaskFormatError(
                path,
                "front matter",
                "YAML aliases (`*name`) are not allowed: a few lines of them can stand for "
                "billions of values",
                alias.start_mark.line + 2,
            )
        if node is not None and (twice := _repeated_key(node)) is not None:
            key, first, again = twice
            # (YAML keeps the last silently: `id: d1` then `id: d2` ran as d2, helper-205)
            raise TaskFormatError(
                path, key, f"given twice (lines {first + 2} and {again + 2})", again + 2
            )
        try:
            data = loader.construct_document(node) if node is not None else None
        except ValueError as exc:  # an int past Python's 4,300 digits (helper-210)
            raise TaskFormatError(path, "front matter", f"not valid YAML: {exc}", 2) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 2 if mark is not None else 2
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TaskFormatError(path, "front matter", f"not valid YAML: {problem}", line) from None
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise TaskFormatError(
            path,
            "front matter",
            f"not a YAML mapping of keys to values (got {type(data).__name__})",
            2,
        )
    key_lines = _front_matter_lines(node, 1) if node is not None else {}
    return data, key_lines, end + 2, True


def _repeated_key(root: yaml.Node) -> tuple[str, int, int] | None:
    """(key, 0-based line of its first and second mention) of the first key the top-level
    mapping ``root`` gives twice, else None."""
    if not isinstance(root, yaml.MappingNode):
        return None
    seen: dict[str, int] = {}
    for key, _value in root.value:
        if isinstance(key, yaml.ScalarNode):
            if (first := seen.get(key.value)) is not None:
                return str(key.value), first, key.start_mark.line
            seen[key.value] = key.start_mark.line
    return None


def _first_alias(root: yaml.Node) -> yaml.Node | None:
    """The first node of a composed YAML document reached twice (an alias of an anchor), else
    None. Iterative, and linear in the document's size: aliases are never expanded."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return node
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack.extend(part for pair in node.value for part in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return None


def split_sections(lines: list[str], first_line: int) -> tuple[list[str], list[Section]]:
    """Split body lines on ``## Name`` headings, ignoring headings inside fenced blocks.

    ``first_line`` is the 1-based file line of ``lines[0]``. Returns the lines before the first
    heading and the sections in file order.
    """
    preamble: list[str] = []
    sections: list[Section] = []
    in_fence = False
    for i, ln in enumerate(lines):
        if _FENCE_RE.match(ln):
            in_fence = not in_fence
        m = None if in_fence else _SECTION_RE.match(ln)
        if m:
            sections.append(Section(name=m.group(1).strip(), line=first_line + i, lines=[]))
        elif sections:
            sections[-1].lines.append(ln)
        else:
            preamble.append(ln)
    return preamble, sections


def parse_markdown(path: Path, *, front_required: bool = True) -> MarkdownDoc:
    """Read a task Markdown file: strict UTF-8, front matter, level-2 sections.

    Raises TaskFormatError for an empty or non-UTF-8 file and for bad front matter.
    """
    text = read_text(path)
    front, front_lines, body_line, found = parse_front_matter(text, path, required=front_required)
    body = text.split("\n")[body_line - 1 :]
    _, sections = split_sections(body, body_line)
    doc = MarkdownDoc(
        path=path, front=front, front_lines=front_lines, body_line=body_line, has_front_matter=found
    )
    for sec in sections:
        first = doc.sections.setdefault(sec.name.casefold(), sec)
        if first is not sec:
            doc.repeated.setdefault(sec.name.casefold(), (first.line, sec.line))
    return doc


def strip_fence(section: Section) -> FencedBlock:
    """The code of a section's fenced block: text between the first ```` ```lang ```` line and
    the last ```` ``` ```` line, with the file line of its first code line.

    A section without a fence yields its stripped text (``fenced=False``).
    """
    lines = section.lines
    opens = [i for i, ln in enumerate(lines) if _FENCE_RE.match(ln)]
    if len(opens) >= 2:
        start, end = opens[0], opens[-1]
        lang = lines[start].strip().lstrip("`~").strip()
        code_lines = lines[start + 1 : end]
        return FencedBlock(
            code="\n".join(code_lines) + ("\n" if code_lines else ""),
            line=section.line + start + 2,
            lang=lang,
        )
    text_lines = list(lines)
    first = 0
    while first < len(text_lines) and not text_lines[first].strip():
        first += 1
    while text_lines and not text_lines[-1].strip():
        text_lines.pop()
    code = "\n".join(text_lines[first:])
    return FencedBlock(
        code=code + ("\n" if code else ""), line=section.line + first + 1, fenced=False
    )


def block_lines(block: FencedBlock) -> list[tuple[int, str]]:
    """Non-blank, non-comment (``#``) lines of a block with their 1-based file lines."""
    out = []
    for offset, ln in enumerate(block.code.split("\n")):
        s = ln.strip()
        if s and not s.startswith("#"):
            out.append((block.line + offset, s))
    return out


def checklist(text: str) -> list[str]:
    """Checklist items of a Grading Criteria text: ``- [ ] item`` / ``- item`` / ``1. item``.

    When no line is a list item, every non-blank line is an item.
    """
    items = []
    for ln in text.split("\n"):
        m = re.match(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s*)?(.*\S)\s*$", ln)
        if m:
            items.append(m.group(1))
    if not items:
        items = [ln.strip() for ln in text.split("\n") if ln.strip()]
    return items
