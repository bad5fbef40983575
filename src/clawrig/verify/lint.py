"""Static lint of a task or sample (``clawrig verify`` part c).

Each ``lint_*`` function takes a :class:`clawrig.spec.task.Task` (plus what it needs) and
returns :class:`clawrig.verify.report.Finding` objects:

- :func:`lint_prompt_paths`: ``/tmp_workspace/...`` paths the prompt names as inputs that are
  missing from the initial workspace (outputs are ignored: paths under ``results/`` and paths
  the prompt says to write, judged by the nearest verb before the path);
- :func:`lint_gt_paths`: ``gt/`` paths the grader reads (string literals like ``"gt/x.json"``
  or ``"/tmp_workspace/gt/x"``, ``os.path.join(..., "gt", "x")``, ``Path(...) / "gt" / "x"``,
  one level of variables bound to the gt folder) that do not exist in the task's gt;
- :func:`lint_expected_reward`: ``expected_reward`` / ``EXPECTED_REWARD`` outside [0, 1];
- :func:`lint_imports`: imports outside the standard library (``sys.stdlib_module_names``) in
  a grader that promises stdlib only (four-folder evaluators);
- :func:`lint_tool_schema`: trajectory tool calls whose name, or a parameter name, is not in
  the tool schema, and arguments that are not a JSON object;
- :func:`replay_diff`: recorded tool results of a trajectory that differ from what replay
  produced (warnings, each with a unified diff).
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from clawrig.pysource import non_stdlib_imports
from clawrig.pysource import parse as parse_source
from clawrig.sandbox.paths import PATHS
from clawrig.spec.task import Task
from clawrig.spec.transcript import Transcript
from clawrig.transcript.dialog import content_text
from clawrig.verify.report import Finding

# --------------------------------------------------------------------------- prompt paths

_PROMPT_PATH = re.compile(r"/tmp_workspace(?:/[^\s`'\"()\[\],;:!?]*)?")
_PLACEHOLDER = re.compile(r"[<>{}*$%]|\.\.\.|…")
_OUTPUT_WORDS = {
    "write", "writes", "writing", "written", "save", "saves", "saved", "saving", "create",
    "creates", "creating", "output", "outputs", "produce", "produces", "generate", "generates",
    "store", "stores", "export", "emit", "put", "place", "into", "to", "as", "append", "record",
    "dump", "deliver", "return",
}  # fmt: skip
_INPUT_WORDS = {
    "read", "reads", "reading", "load", "loads", "open", "opens", "use", "uses", "using", "take",
    "takes", "parse", "from", "in", "at", "of", "on", "analyse", "analyze", "inspect", "check",
    "review", "process", "given", "provided", "under", "see", "found", "contains", "compare",
    "fix", "edit", "modify", "update", "debug", "run", "copy", "move", "delete", "remove",
    "clean", "keep", "with",
}  # fmt: skip
_WORD = re.compile(r"[A-Za-z]+")
_SENTENCE_END = re.compile(r"[.!?;]\s|\n")


def prompt_paths(prompt: str) -> list[tuple[str, bool]]:
    """The ``/tmp_workspace`` paths a prompt names, as (path relative to the workspace with a
    trailing ``/`` for folders, is_output). Placeholders (``<email>.txt``, ``{id}``, ``*``) and
    the workspace root itself are left out. ``is_output``: under ``results/``, or the nearest
    verb/preposition before the path in the same sentence says write/save/into/to/as."""
    out: list[tuple[str, bool]] = []
    seen: set[str] = set()
    for m in _PROMPT_PATH.finditer(prompt):
        raw = m.group(0).rstrip(".")
        rel = raw[len(PATHS.workspace) :].lstrip("/")
        if not rel or _PLACEHOLDER.search(rel) or rel in seen:
            continue
        seen.add(rel)
        window = prompt[max(0, m.start() - 160) : m.start()]
        ends = list(_SENTENCE_END.finditer(window))
        if ends:
            window = window[ends[-1].end() :]
        words = [w.lower() for w in _WORD.findall(window)]
        nearest = next((w for w in reversed(words) if w in _OUTPUT_WORDS | _INPUT_WORDS), None)
        is_output = (rel + "/").startswith("results/") or nearest in _OUTPUT_WORDS
        out.append((rel, is_output))
    return out


def workspace_listing(root: Path) -> set[str]:
    """Relative paths of every file and folder under ``root`` (folders end in ``/``)."""
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        for d in dirnames:
            found.add(f"{prefix}{d}/")
        for f in filenames:
            found.add(f"{prefix}{f}")
    return found


def _exists(rel: str, listing: set[str]) -> bool:
    rel = rel.rstrip("/")
    return rel in listing or rel + "/" in listing


def lint_prompt_paths(
    task: Task, initial: set[str] | None, golden: Iterable[str] | None = None
) -> list[Finding]:
    """Input paths the prompt names that the initial workspace lacks (errors).

    ``initial`` is :func:`workspace_listing` of the materialised initial workspace, None when
    it is not known; then the golden end state (``golden``, relative file paths) is used and
    the findings are warnings (an input the golden rollout deleted would look missing). Paths
    that a warmup line mentions are skipped (the warmup may create them).
    """
    where = str(task.source.path)
    if initial is None and golden is None:
        return [
            Finding(
                check="lint.prompt_path",
                severity="info",
                message="initial workspace not known: prompt paths not checked",
                path=where,
            )
        ]
    listing = initial
    severity = "error"
    if listing is None:
        listing = set()
        for rel in golden or ():
            parts = rel.split("/")
            listing.update("/".join(parts[:i]) + "/" for i in range(1, len(parts)))
            listing.add(rel)
        severity = "warning"
    warmup = "\n".join(task.warmup)
    out = []
    for rel, is_output in prompt_paths(task.prompt):
        if is_output or _exists(rel, listing) or rel.rstrip("/") in warmup:
            continue
        close = difflib.get_close_matches(rel.rstrip("/"), [p.rstrip("/") for p in listing], 1)
        hint = f" (did you mean {PATHS.workspace}/{close[0]}?)" if close else ""
        what = "the initial workspace" if initial is not None else "the golden end state"
        out.append(
            Finding(
                check="lint.prompt_path",
                severity=severity,  # type: ignore[arg-type]
                message=f"the prompt names {PATHS.workspace}/{rel} but {what} has no such "
                f"file or folder{hint}",
                path=where,
            )
        )
    return out


# --------------------------------------------------------------------------- gt paths

_GT_PREFIXES = (f"{PATHS.gt}/", "./gt/", "gt/")
_GT_DIRS = {"gt", "gt/", "./gt", "./gt/", PATHS.gt, PATHS.gt + "/"}
_GLOB = re.compile(r"[*?\[{%]")


def _const_str(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _path_parts(node: ast.AST) -> list[ast.AST]:
    """The operands of a path expression: ``os.path.join(a, b)`` args, ``a / b / c`` operands,
    ``Path(a, b)`` args; else the node itself."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _path_parts(node.left) + _path_parts(node.right)
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in ("join", "Path", "PurePath", "PosixPath") and not node.keywords:
            parts: list[ast.AST] = []
            for arg in node.args:
                parts.extend(_path_parts(arg))
            return parts
    return [node]


def _gt_rel(parts: Sequence[ast.AST], gt_names: Mapping[str, str]) -> str | None:
    """The path under gt/ that a sequence of path operands names, when it is fully known."""
    for i, part in enumerate(parts):
        base: str | None = None
        text = _const_str(part)
        if text is not None and text in _GT_DIRS:
            base = ""
        elif text is not None and text.startswith(_GT_PREFIXES):
            base = text.split("gt/", 1)[1]
        elif isinstance(part, ast.Name) and part.id in gt_names:
            base = gt_names[part.id]
        if base is None:
            continue
        rest = [_const_str(p) for p in parts[i + 1 :]]
        if any(r is None for r in rest):
            return None
        pieces = [base.strip("/")] if base.strip("/") else []
        pieces += [r.strip("/") for r in rest if r and r.strip("/")]  # type: ignore[union-attr]
        return "/".join(pieces)
    return None


def grader_gt_paths(source: str) -> list[tuple[str, int]]:
    """(path under gt/, 1-based line) for every gt file a grader's source names literally.

    An empty path means the gt folder itself. Paths with glob or format characters, and
    pieces of f-strings, are left out. Raises SyntaxError for unparsable source.
    """
    tree = parse_source(source)
    in_fstring = {
        id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values
    }
    gt_names: dict[str, str] = {}
    for _ in range(2):  # names bound to names bound to gt/
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    rel = _gt_rel(_path_parts(node.value), gt_names)
                    if rel is not None:
                        gt_names[target.id] = rel
    found: dict[str, int] = {}
    consumed: set[int] = set()
    for node in ast.walk(tree):
        if id(node) in consumed:
            continue
        parts = _path_parts(node)
        if len(parts) > 1 or isinstance(node, ast.Constant):
            if any(id(p) in in_fstring for p in parts):
                continue
            rel = _gt_rel(parts, gt_names)
            if len(parts) > 1:
                consumed.update(id(p) for p in parts)
                consumed.update(id(n) for n in ast.walk(node))
            if rel is None or _GLOB.search(rel):
                continue
            found.setdefault(rel, getattr(node, "lineno", 0))
    return sorted(((rel, line) for rel, line in found.items() if rel), key=lambda x: x[1])


def gt_listing(task: Task) -> set[str] | None:
    """Relative paths (files, and folders ending in ``/``) of the task's gt, None when the gt
    folder is named but not present on this machine."""
    ws = task.workspace
    listing: set[str] = set()
    if ws.gt_dir is not None:
        if not Path(ws.gt_dir).is_dir():
            return None
        listing |= workspace_listing(Path(ws.gt_dir))
    for rel in ws.gt_files:
        parts = rel.split("/")
        listing.update("/".join(parts[:i]) + "/" for i in range(1, len(parts)))
        listing.add(rel)
    return listing


def _grader_location(task: Task, line: int | None) -> tuple[str, int | None]:
    origin = task.grader.origin
    if origin is None:
        return str(task.source.path), None
    start = origin.line or 1
    return str(origin.path), (start + line - 1) if line else None


def lint_grade_returns(task: Task) -> list[Finding]:
    """A top-level ``grade()`` with no ``return`` of a value (a warning): its verdict is what
    it returns, so it gives None on every end state and each trial is scored the agent's 0
    (helper-192: such a task passed validate, and only verify's empty rollout showed it)."""
    source = task.grader.source
    if not source:
        return []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # the reader reports syntax errors
    grade = next(  # the last definition is the one Python keeps (helper-194)
        (
            node
            for node in reversed(tree.body)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "grade"
        ),
        None,
    )
    if grade is None or grade.decorator_list:
        return []  # none: the reader says so; decorated: its wrapper may return the verdict
    todo: list[ast.AST] = list(grade.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue  # (a return of a nested function is not grade()'s)
        if isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                return []
        todo.extend(ast.iter_child_nodes(node))
    path, line = _grader_location(task, grade.lineno)
    return [
        Finding(
            check="lint.grade_return",
            severity="warning",
            message="grade() returns no value: its verdict is what it returns (a dict with "
            "overall_score), so every trial would be scored 0 as the agent's",
            path=path,
            line=line,
        )
    ]


def lint_gt_paths(task: Task) -> list[Finding]:
    """gt paths the grader names that the task's gt does not have (errors)."""
    source = task.grader.source
    if not source:
        return []
    try:
        named = grader_gt_paths(source)
    except SyntaxError:
        return []  # the reader reports syntax errors
    if not named:
        return []
    listing = gt_listing(task)
    if listing is None:
        path, _ = _grader_location(task, None)
        return [
            Finding(
                check="lint.gt_path",
                severity="info",
                message="gt folder not present on this machine: gt paths not checked",
                path=path,
            )
        ]
    out = []
    for rel, line in named:
        if _exists(rel, listing):
            continue
        path, file_line = _grader_location(task, line)
        have = ", ".join(sorted(p for p in listing if not p.endswith("/"))) or "nothing"
        out.append(
            Finding(
                check="lint.gt_path",
                severity="error",
                message=f"the grader reads gt/{rel} but the task's gt has no such file "
                f"(gt has: {have})",
                path=path,
                line=file_line,
            )
        )
    return out


# --------------------------------------------------------------------------- expected reward


def literal_assignment(source: str, name: str) -> tuple[Any, int] | None:
    """The literal value and line of a module-level ``NAME = <literal>``, else None."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            try:
                return ast.literal_eval(value), node.lineno
            except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
                return None
    return None


def _in_unit(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and 0.0 <= value <= 1.0


def lint_expected_reward(task: Task) -> list[Finding]:
    """``expected_reward`` (reference payload) and ``EXPECTED_REWARD`` (evaluator) outside
    [0, 1], or not a number (errors)."""
    out: list[Finding] = []
    files = task.metadata.get("files") or {}
    payload = files.get("reference_payloads")
    if payload and Path(payload).is_file():
        try:
            data = json.loads(Path(payload).read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict) and "expected_reward" in data:
            value = data["expected_reward"]
            if not _in_unit(value):
                out.append(
                    Finding(
                        check="lint.expected_reward",
                        severity="error",
                        message=f"expected_reward {value!r} is outside [0, 1]"
                        if isinstance(value, int | float) and not isinstance(value, bool)
                        else f"expected_reward {value!r} is not a number in [0, 1]",
                        path=str(payload),
                    )
                )
    if task.grader.source and "EXPECTED_REWARD" in task.grader.source:
        found = literal_assignment(task.grader.source, "EXPECTED_REWARD")
        if found is not None and not _in_unit(found[0]):
            path, line = _grader_location(task, found[1])
            out.append(
                Finding(
                    check="lint.expected_reward",
                    severity="error",
                    message=f"EXPECTED_REWARD {found[0]!r} is outside [0, 1]",
                    path=path,
                    line=line,
                )
            )
    if not out and task.expected_reward is not None and not _in_unit(task.expected_reward):
        out.append(
            Finding(
                check="lint.expected_reward",
                severity="error",
                message=f"expected_reward {task.expected_reward!r} is outside [0, 1]",
                path=str(task.source.path),
            )
        )
    return out


# --------------------------------------------------------------------------- imports


def lint_imports(task: Task) -> list[Finding]:
    """Non-stdlib imports in a grader whose task promises stdlib only (errors)."""
    if not task.grader.source or not task.grader.stdlib_only:
        return []
    try:
        found = non_stdlib_imports(task.grader.source)
    except SyntaxError:
        return []
    out = []
    for module, line in found:
        path, file_line = _grader_location(task, line)
        out.append(
            Finding(
                check="lint.imports",
                severity="error",
                message=f"the evaluator promises the standard library only but imports {module!r}",
                path=path,
                line=file_line,
            )
        )
    return out


# --------------------------------------------------------------------------- tool schema


def schema_parameters(schema: Sequence[Mapping[str, Any]]) -> dict[str, set[str] | None]:
    """Tool name -> its parameter names (None when the tool accepts any: no ``properties``
    or ``additionalProperties: true``), from OpenAI function tools."""
    out: dict[str, set[str] | None] = {}
    for tool in schema:
        raw_fn = tool.get("function")
        fn: Mapping[str, Any] = raw_fn if isinstance(raw_fn, Mapping) else tool
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str):
            continue
        params = fn.get("parameters") or {}
        props = params.get("properties") if isinstance(params, Mapping) else None
        if not isinstance(props, Mapping) or params.get("additionalProperties") is True:
            out[name] = None
        else:
            out[name] = set(props)
    return out


def _dialog_calls(dialog: Sequence[Mapping[str, Any]]) -> Iterable[tuple[int, str, str, Any]]:
    """(message index, call id, tool name, raw arguments) for each tool call of a dialog."""
    for i, msg in enumerate(dialog):
        if msg.get("role") != "assistant":
            continue
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, Mapping) else None
            fn = fn if isinstance(fn, Mapping) else {}
            yield i, str(call.get("id") or ""), str(fn.get("name") or ""), fn.get("arguments")
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, Mapping) and block.get("type") in ("tool_use", "toolCall"):
                    args = block.get("input", block.get("arguments"))
                    yield i, str(block.get("id") or ""), str(block.get("name") or ""), args


def lint_tool_schema(
    task: Task, schema: Sequence[Mapping[str, Any]] | None, schema_origin: str = "tool_schema"
) -> list[Finding]:
    """Trajectory tool calls outside ``schema`` (unknown tool or parameter name) and
    arguments that are not a JSON object (errors)."""
    dialog = task.golden_dialog
    if not dialog:
        return []
    where = str((task.metadata.get("files") or {}).get("datapoints") or task.source.path)
    if schema is None:  # (an empty schema is checked: every call is outside it)
        return [
            Finding(
                check="lint.tool_schema",
                severity="warning",
                message="the trajectory has no tool schema to check its calls against",
                path=where,
            )
        ]
    params = schema_parameters(schema)
    out = []
    for index, call_id, name, raw in _dialog_calls(dialog):
        label = f"formatted_dialog[{index}] call {call_id or '?'}"
        if name not in params:
            out.append(
                Finding(
                    check="lint.tool_schema",
                    severity="error",
                    message=f"{label} calls tool {name!r}, which is not in the {schema_origin} "
                    f"({len(params)} tools)",
                    path=where,
                )
            )
            continue
        args: Any = raw
        if isinstance(raw, str):
            try:
                args = json.loads(raw) if raw.strip() else {}
            except ValueError:
                args = None
        if not isinstance(args, Mapping):
            out.append(
                Finding(
                    check="lint.tool_schema",
                    severity="error",
                    message=f"{label} ({name}): arguments are not a JSON object: {str(raw)[:80]}",
                    path=where,
                )
            )
            continue
        allowed = params[name]
        unknown = sorted(k for k in args if allowed is not None and k not in allowed)
        known = ", ".join(sorted(allowed or ()))
        if unknown:
            out.append(
                Finding(
                    check="lint.tool_schema",
                    severity="error",
                    message=f"{label} ({name}) passes parameter(s) {', '.join(unknown)} that "
                    f"the {schema_origin} does not define (known: {known})",
                    path=where,
                )
            )
    return out


# --------------------------------------------------------------------------- replay diff

MAX_DIFF_LINES = 80


def unified_diff(recorded: str, replayed: str, label: str) -> str:
    """A unified diff (recorded -> replay) of two texts, cut to MAX_DIFF_LINES lines."""
    lines = list(
        difflib.unified_diff(
            recorded.splitlines(keepends=True),
            replayed.splitlines(keepends=True),
            fromfile=f"recorded {label}",
            tofile=f"replay {label}",
        )
    )
    lines = [ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines]
    if len(lines) > MAX_DIFF_LINES:
        cut = len(lines) - MAX_DIFF_LINES
        lines = lines[:MAX_DIFF_LINES] + [f"... ({cut} more diff lines)\n"]
    return "".join(lines)


def replay_diff(task: Task, replayed: Transcript, max_findings: int = 10) -> list[Finding]:
    """Warnings for each recorded tool result of the golden trajectory that differs from the
    result replay produced (paired in order), each with a unified diff."""
    dialog = task.golden_dialog or []
    where = str((task.metadata.get("files") or {}).get("datapoints") or task.source.path)
    recorded = [
        (
            i,
            str(m.get("tool_call_id") or ""),
            str(m.get("name") or ""),
            content_text(m.get("content")),
        )
        for i, m in enumerate(dialog)
        if m.get("role") == "tool"
    ]
    got = [m for m in replayed.messages if m.role == "toolResult"]
    out: list[Finding] = []
    if not recorded:
        return out
    if len(recorded) != len(got):
        out.append(
            Finding(
                check="lint.replay_diff",
                severity="warning",
                message=f"the trajectory records {len(recorded)} tool result(s) but replay "
                f"produced {len(got)}",
                path=where,
            )
        )
    differ = [
        (rec, new) for rec, new in zip(recorded, got, strict=False) if rec[3] != (new.text or "")
    ]
    for (index, call_id, name, text), new in differ[:max_findings]:
        label = f"{call_id or '?'} ({name or new.tool_name})"
        out.append(
            Finding(
                check="lint.replay_diff",
                severity="warning",
                message=f"formatted_dialog[{index}]: the recorded result of {label} differs "
                "from what replay produced",
                path=where,
                diff=unified_diff(text, new.text or "", label),
            )
        )
    if len(differ) > max_findings:
        out.append(
            Finding(
                check="lint.replay_diff",
                severity="warning",
                message=f"{len(differ) - max_findings} more recorded tool result(s) differ",
                path=where,
            )
        )
    return out
