"""Four-folder sample sets (EigenData WildClawBench demo layout) -> Tasks.

Layout and keys: shared/reference/fourfolder-spec.md (summary in formats.md section 2). One
six-digit id ``NNNNNN`` joins ``intent/NNNNNN.json``, ``datapoints/NNNNNN.json``,
``evaluators/evaluator_NNNNNN.py`` and ``reference_payloads/reference_payload_NNNNNN.json``;
clawrig's optional fifth folder ``workspaces/NNNNNN/`` holds the initial workspace.

The evaluator is never executed here: ``GOLDEN_WORKSPACE`` and ``EXPECTED_REWARD`` are read with
:mod:`ast` (``literal_eval`` of the module-level assignments).
"""

from __future__ import annotations

import ast
import base64
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from clawrig.errors import TaskFormatError, first_invalid
from clawrig.pysource import non_stdlib_imports
from clawrig.pysource import parse as parse_source
from clawrig.services.declare import fixture_files, parse_services
from clawrig.spec.task import (
    CATEGORIES,
    FileContent,
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
    id_problem,
    is_inside,
    link_target,
    outside_message,
    path_clash,
    relative_path_problem,
)
from clawrig.tasks.text import IssueCollector, checklist, dumps_json_text, language_of, read_json
from clawrig.tasks.text import read_text as _read_text

FOLDERS = ("intent", "datapoints", "evaluators", "reference_payloads")
"""The four required folders, in spec order."""

DEFAULT_TIMEOUT_SECONDS = 600
TIERS = ("easy", "medium", "hard", "extreme")
TOOL_SCHEMA_SIZE = 17

INTENT_KEYS = {
    "id",
    "name",
    "category",
    "tier",
    "difficulty",
    "prompt",
    "expected_behavior",
    "expected_behaviour",
    "grading_criteria",
    "timeout_seconds",
    "services",
}
DATAPOINT_KEYS = {
    "id",
    "formatted_dialog",
    "messages",
    "conversation",
    "tool_schema",
    "metadata",
    "statistics",
}
PAYLOAD_KEYS = {"id", "category", "expected_reward", "gt", "golden_workspace_files"}


_WEB_TOOLS = {"web_search", "web_fetch"}


def _tool_names(schema: list | None) -> set[str]:
    """The function names of an OpenAI tool schema (entries without one are skipped; None,
    a datapoint without ``tool_schema``: none)."""
    names = set()
    for tool in schema or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


def file_names(sample_id: str) -> dict[str, str]:
    """Folder -> relative file path of one sample id."""
    return {
        "intent": f"intent/{sample_id}.json",
        "datapoints": f"datapoints/{sample_id}.json",
        "evaluators": f"evaluators/evaluator_{sample_id}.py",
        "reference_payloads": f"reference_payloads/reference_payload_{sample_id}.json",
    }


def is_fourfolder_root(path: Path) -> bool:
    """True when ``path`` holds any of the four sample-set folders or ``workspaces/`` (a set
    missing some folders is then reported file by file, not mistaken for another format)."""
    return path.is_dir() and any((path / f).is_dir() for f in (*FOLDERS, "workspaces"))


def sample_ids(root: Path) -> dict[str, set[str]]:
    """Folder -> the sample ids found in it (by file name)."""
    found: dict[str, set[str]] = {f: set() for f in FOLDERS}
    patterns = {
        "intent": ("*.json", ""),
        "datapoints": ("*.json", ""),
        "evaluators": ("evaluator_*.py", "evaluator_"),
        "reference_payloads": ("reference_payload_*.json", "reference_payload_"),
    }
    for folder, (pattern, prefix) in patterns.items():
        d = root / folder
        if d.is_dir():
            found[folder] = {p.stem[len(prefix) :] for p in d.glob(pattern) if p.is_file()}
    return found


def _key_line(path: Path, key: str) -> int | None:
    """1-based line of the first ``"key":`` in a JSON file (for messages), else None."""
    try:
        lines = path.read_bytes().decode("utf-8", "replace").split("\n")
    except OSError:
        return None
    needle = f'"{key}"'
    for i, ln in enumerate(lines, start=1):
        if needle in ln:
            return i
    return None


def _object(path: Path, issues: IssueCollector) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except TaskFormatError as exc:
        issues.add(exc)
        return None
    if not isinstance(data, dict):
        issues.error(path, "json", f"must be a JSON object, got {type(data).__name__}", 1)
        return None
    return data


def _check_id(path: Path, data: dict[str, Any], sample_id: str, issues: IssueCollector) -> None:
    if "id" not in data:
        issues.error(path, "id", "missing", 1)
    elif str(data["id"]) != sample_id:
        issues.error(
            path,
            "id",
            f"is {data['id']!r} but the file name says {sample_id!r}",
            _key_line(path, "id"),
        )


def _unknown_keys(
    path: Path, data: dict[str, Any], known: set[str], issues: IssueCollector
) -> None:
    for key in data:
        if key not in known:
            issues.warning(path, key, "unknown key (ignored)", _key_line(path, key))


def _read_intent(path: Path, sample_id: str, issues: IssueCollector) -> dict[str, Any] | None:
    data = _object(path, issues)
    if data is None:
        return None
    _check_id(path, data, sample_id, issues)
    _unknown_keys(path, data, INTENT_KEYS, issues)
    out: dict[str, Any] = {}
    prompt = data.get("prompt")
    if prompt is not None and not isinstance(prompt, str):  # (helper-175: 42 was "missing")
        said = f"must be a string (the task text), got {type(prompt).__name__}"
        issues.error(path, "prompt", said, _key_line(path, "prompt"))
        prompt = ""
    elif not isinstance(prompt, str) or not prompt.strip():
        issues.error(path, "prompt", "missing or empty (the task text)", _key_line(path, "prompt"))
        prompt = ""
    out["prompt"] = prompt
    for key in ("name", "category"):
        value = data.get(key, "")
        if not isinstance(value, str):
            issues.error(
                path, key, f"must be a string, got {type(value).__name__}", _key_line(path, key)
            )
            value = ""
        out[key] = value
    if out["category"] and out["category"] not in CATEGORIES:
        issues.warning(
            path,
            "category",
            f"{out['category']!r} is not one of the WildClawBench categories "
            f"({', '.join(CATEGORIES)})",
            _key_line(path, "category"),
        )
    tier_key = "tier" if "tier" in data else "difficulty"
    tier = data.get(tier_key)
    if tier is not None and tier not in TIERS:
        issues.warning(
            path, tier_key, f"{tier!r} is not one of {', '.join(TIERS)}", _key_line(path, tier_key)
        )
    out["level"] = str(tier) if tier is not None else None
    behavior_key = "expected_behavior" if "expected_behavior" in data else "expected_behaviour"
    behavior = data.get(behavior_key, "")
    if not isinstance(behavior, str):
        issues.error(path, behavior_key, "must be a string", _key_line(path, behavior_key))
        behavior = ""
    out["expected_behavior"] = behavior
    criteria = data.get("grading_criteria", [])
    if isinstance(criteria, str):
        criteria = checklist(criteria)
    elif not isinstance(criteria, list) or not all(isinstance(c, str) for c in criteria):
        issues.error(
            path,
            "grading_criteria",
            "must be a list of strings or one string",
            _key_line(path, "grading_criteria"),
        )
        criteria = []
    out["grading_criteria"] = criteria
    timeout = checked_timeout(
        data.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
        DEFAULT_TIMEOUT_SECONDS,
        issues,
        path,
        _key_line(path, "timeout_seconds"),
    )
    out["timeout_seconds"] = timeout
    out["services"] = []
    if "services" in data:
        try:
            out["services"] = parse_services(data["services"], path, _key_line(path, "services"))
        except TaskFormatError as exc:
            issues.add(exc)
    return out


def _read_datapoint(path: Path, sample_id: str, issues: IssueCollector) -> dict[str, Any] | None:
    data = _object(path, issues)
    if data is None:
        return None
    _check_id(path, data, sample_id, issues)
    _unknown_keys(path, data, DATAPOINT_KEYS, issues)
    dialog: Any = None
    dialog_key = "formatted_dialog"
    if "formatted_dialog" in data:
        dialog = data["formatted_dialog"]
    elif "messages" in data:
        dialog, dialog_key = data["messages"], "messages"
    elif isinstance(data.get("conversation"), dict) and "formatted_dialog" in data["conversation"]:
        dialog, dialog_key = data["conversation"]["formatted_dialog"], "conversation"
    if dialog is None:
        issues.error(
            path,
            "formatted_dialog",
            "missing (also looked for `messages` and `conversation.formatted_dialog`)",
            1,
        )
    elif not isinstance(dialog, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in dialog
    ):
        issues.error(
            path,
            dialog_key,
            "must be a list of chat messages with a `role`",
            _key_line(path, dialog_key),
        )
        dialog = None
    else:
        if dialog and dialog[0].get("role") != "user":
            issues.warning(
                path,
                dialog_key,
                "the first message is not the user turn",
                _key_line(path, dialog_key),
            )
        if (bad := _bad_tool_calls(dialog)) is not None:
            # (a string there was an AttributeError traceback in verify's lint, and an
            # oracle trial's infrastructure TypeError, run again at every --resume: helper-205)
            where, what = bad
            issues.error(path, f"{dialog_key}{where}", what, _key_line(path, dialog_key))
            dialog = None
    schema = data.get("tool_schema")
    if schema is not None and (
        not isinstance(schema, list) or not all(isinstance(t, dict) for t in schema)
    ):
        issues.error(
            path,
            "tool_schema",
            "must be a list of OpenAI function tools",
            _key_line(path, "tool_schema"),
        )
        schema = None
    elif schema is not None and len(schema) != TOOL_SCHEMA_SIZE:
        issues.warning(
            path,
            "tool_schema",
            f"has {len(schema)} tools; the native action space has {TOOL_SCHEMA_SIZE}",
            _key_line(path, "tool_schema"),
        )
    meta = data.get("metadata", {})
    stats = data.get("statistics", {})
    return {
        "dialog": dialog,
        "tool_schema": schema,
        "metadata": meta if isinstance(meta, dict) else {},
        "statistics": stats if isinstance(stats, dict) else {},
    }


def _bad_tool_calls(dialog: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(where, what) of the first assistant message whose ``tool_calls`` is not a list of
    OpenAI tool calls (``{"id", "type": "function", "function": {"name", "arguments"}}``:
    ``arguments`` a JSON string or an object), None when every one is (or has none)."""
    for i, msg in enumerate(dialog):
        calls = msg.get("tool_calls")
        if msg.get("role") != "assistant" or calls is None:
            continue
        if not isinstance(calls, list):
            return f"[{i}].tool_calls", f"must be a list of tool calls, not {type(calls).__name__}"
        for j, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                return (
                    f"[{i}].tool_calls[{j}]",
                    'must be a tool call {"id", "type": "function", "function": {"name", '
                    '"arguments"}} with the tool\'s name a string',
                )
            args = fn.get("arguments")
            if args is not None and not isinstance(args, str | dict):
                return (
                    f"[{i}].tool_calls[{j}].function.arguments",
                    f"must be a JSON string or an object, not {type(args).__name__}",
                )
    return None


def _shown(node: ast.AST, width: int = 80) -> str:
    """``node``'s source for a message, cut to ``width`` characters (an expression too deep
    for :func:`ast.unparse`: said so, not a RecursionError traceback)."""
    try:
        text = ast.unparse(node)
    except (RecursionError, MemoryError):
        return "an expression too deeply nested to show"
    return text if len(text) <= width else text[: width - 1] + "…"


def _literal_assignments(tree: ast.Module) -> dict[str, tuple[ast.expr, int]]:
    out: dict[str, tuple[ast.expr, int]] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for t in targets:
            if isinstance(t, ast.Name) and value is not None:
                out[t.id] = (value, node.lineno)
    return out


def read_evaluator(path: Path, issues: IssueCollector) -> dict[str, Any] | None:
    """Read an evaluator without running it.

    Returns ``{"source", "golden_workspace": {rel: FileContent}, "expected_reward": float|None,
    "imports": [non-stdlib modules]}`` or None when the file cannot be parsed (error recorded).
    """
    try:
        source = _read_text(path)
    except TaskFormatError as exc:
        issues.add(exc)
        return None
    try:
        tree = parse_source(source, str(path))
    except SyntaxError as exc:
        issues.error(path, "source", f"syntax error: {exc.msg}", exc.lineno)
        return None
    if not any(isinstance(n, ast.FunctionDef) and n.name == "grade" for n in tree.body):
        issues.error(path, "grade", "the evaluator defines no top-level `def grade(...)`", 1)
    found = non_stdlib_imports(source)
    for name, line in found:
        if name.startswith("."):
            issues.error(path, "imports", "relative import in a self-contained evaluator", line)
    foreign = [(name, line) for name, line in found if not name.startswith(".")]
    if foreign:
        names = ", ".join(sorted({name for name, _ in foreign}))
        issues.error(
            path,
            "imports",
            f"non-standard-library modules: {names} (evaluators must be stdlib only)",
            foreign[0][1],
        )
    assigns = _literal_assignments(tree)
    golden: dict[str, FileContent] | None = None
    if "GOLDEN_WORKSPACE" not in assigns:
        issues.error(path, "GOLDEN_WORKSPACE", "no module-level GOLDEN_WORKSPACE assignment")
    else:
        node, line = assigns["GOLDEN_WORKSPACE"]
        try:
            value = ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            issues.error(path, "GOLDEN_WORKSPACE", "must be a literal dict (not computed)", line)
            value = None
        if value is not None:
            golden = _golden_workspace(value, path, line, issues)
    reward: float | None = None
    if "EXPECTED_REWARD" not in assigns:
        issues.error(path, "EXPECTED_REWARD", "no module-level EXPECTED_REWARD assignment")
    else:
        node, line = assigns["EXPECTED_REWARD"]
        try:
            value = ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            value = None
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            issues.error(
                path,
                "EXPECTED_REWARD",
                f"must be a literal number in [0, 1], got {_shown(node)}",
                line,
            )
        else:
            reward = float(value)
    if '__name__ == "__main__"' not in source and "__name__ == '__main__'" not in source:
        issues.warning(path, "__main__", 'no `if __name__ == "__main__"` self-check block')
    return {
        "source": source,
        "golden_workspace": golden,
        "expected_reward": reward,
        "imports": sorted({name for name, _ in foreign}),
    }


def _golden_workspace(
    value: Any, path: Path, line: int, issues: IssueCollector
) -> dict[str, FileContent] | None:
    if not isinstance(value, dict):
        issues.error(path, "GOLDEN_WORKSPACE", "must map relative paths to file text", line)
        return None
    out: dict[str, FileContent] = {}
    for rel, content in value.items():
        problem = relative_path_problem(rel) if isinstance(rel, str) else f"{rel!r} is not text"
        if problem:
            issues.error(path, "GOLDEN_WORKSPACE", f"not a relative path: {problem}", line)
        elif isinstance(content, str):
            out[rel] = FileContent(text=content)
        elif isinstance(content, dict) and isinstance(content.get("base64"), str):
            try:  # (a bad one was an infrastructure error of every trial: helper-205)
                base64.b64decode(content["base64"], validate=True)
            except ValueError as exc:
                issues.error(path, "GOLDEN_WORKSPACE", f"{rel!r}: base64: {exc}", line)
                continue
            out[rel] = FileContent(base64=content["base64"])
        else:
            issues.error(
                path, "GOLDEN_WORKSPACE", f'{rel!r}: value must be text or {{"base64": ...}}', line
            )
    if (clash := path_clash(out)) is not None:
        # (written into the golden end state, it was a FileExistsError: helper-205)
        issues.error(path, "GOLDEN_WORKSPACE", clash, line)
        return None
    return out


def _read_payload(path: Path, sample_id: str, issues: IssueCollector) -> dict[str, Any] | None:
    data = _object(path, issues)
    if data is None:
        return None
    _check_id(path, data, sample_id, issues)
    _unknown_keys(path, data, PAYLOAD_KEYS, issues)
    reward = data.get("expected_reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not 0 <= reward <= 1:
        issues.error(
            path,
            "expected_reward",
            f"must be a number in [0, 1], got {reward!r}",
            _key_line(path, "expected_reward"),
        )
        reward = None
    gt = data.get("gt", {})
    gt_files: dict[str, FileContent] = {}
    if not isinstance(gt, dict):
        issues.error(
            path,
            "gt",
            "must map relative paths under gt/ to JSON values or text",
            _key_line(path, "gt"),
        )
    else:
        for rel, value in gt.items():
            problem = relative_path_problem(rel)
            if problem:
                issues.error(path, "gt", f"not a relative path: {problem}", _key_line(path, rel))
                continue
            gt_files[rel] = FileContent(text=dumps_json_text(value))
        if (clash := path_clash(gt_files)) is not None:
            # (injected for grading, it was every trial's infrastructure FileExistsError)
            issues.error(path, "gt", clash, _key_line(path, "gt"))
            gt_files = {}
    files = data.get("golden_workspace_files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        issues.error(
            path,
            "golden_workspace_files",
            "must be a list of relative paths",
            _key_line(path, "golden_workspace_files"),
        )
        files = []
    category = data.get("category", "")
    return {
        "expected_reward": reward,
        "gt_files": gt_files,
        "golden_workspace_files": files,
        "category": category if isinstance(category, str) else "",
    }


def read_fourfolder_sample(
    root: Path, sample_id: str, issues: IssueCollector | None = None
) -> Task | None:
    """Read one sample of a four-folder set. Returns None when a file could not be read
    (the errors are in ``issues``; strict collectors raise TaskFormatError instead)."""
    issues = issues if issues is not None else IssueCollector()
    names = file_names(sample_id)
    paths = {folder: root / rel for folder, rel in names.items()}
    problem = id_problem(sample_id)
    if problem:
        present = [paths[f] for f in FOLDERS if paths[f].is_file()]
        where = present[0] if present else paths["intent"]
        issues.error(
            where,
            "id",
            f"{problem} (the file name gives the sample id)",
            _key_line(where, "id") if is_inside(where, root) else None,
        )
        return None
    # a sample's file that leads outside the set (a link, or one below a linked folder) or is
    # no regular file (a link loop, a device, a pipe) is refused before it is read: the set
    # must hold what it is verified by (helper-175: a datapoint or reference payload so linked
    # was certified PASS, an evaluator linked to /etc/passwd was "a syntax error"; helper-177:
    # a link to /dev/zero or a loop was a "missing" file)
    refused = False
    for folder in FOLDERS:
        path = paths[folder]
        if (path.is_symlink() or path.exists()) and not is_inside(path, root):
            issues.error(path, "file", outside_message(path, root))
        elif path.exists() and not path.is_file():
            issues.error(path, "file", f"{path} is not a regular file")
        else:
            continue
        refused = True
    if refused:
        return None
    missing = [names[f] for f in FOLDERS if not paths[f].is_file()]
    if missing:
        found = [names[f] for f in FOLDERS if paths[f].is_file()]
        issues.error(
            root / (found[0] if found else names["intent"]),
            "id",
            f"sample {sample_id} is incomplete: missing {', '.join(missing)} "
            f"(present: {', '.join(found) or 'none'})",
        )
        return None
    intent = _read_intent(paths["intent"], sample_id, issues)
    datapoint = _read_datapoint(paths["datapoints"], sample_id, issues)
    evaluator = read_evaluator(paths["evaluators"], issues)
    payload = _read_payload(paths["reference_payloads"], sample_id, issues)
    if intent is None or datapoint is None or evaluator is None or payload is None:
        return None

    if payload["category"] and intent["category"] and payload["category"] != intent["category"]:
        issues.error(
            paths["reference_payloads"],
            "category",
            f"{payload['category']!r} differs from the intent's {intent['category']!r}",
            _key_line(paths["reference_payloads"], "category"),
        )
    ev_reward, pl_reward = evaluator["expected_reward"], payload["expected_reward"]
    if ev_reward is not None and pl_reward is not None and abs(ev_reward - pl_reward) > 1e-9:
        issues.error(
            paths["reference_payloads"],
            "expected_reward",
            f"{pl_reward} differs from the evaluator's EXPECTED_REWARD {ev_reward}",
            _key_line(paths["reference_payloads"], "expected_reward"),
        )
    golden = evaluator["golden_workspace"]
    if golden is not None and payload["golden_workspace_files"]:
        listed, have = set(payload["golden_workspace_files"]), set(golden)
        if listed != have:
            diff = sorted(listed ^ have)
            issues.error(
                paths["reference_payloads"],
                "golden_workspace_files",
                f"differs from the evaluator's GOLDEN_WORKSPACE keys: {', '.join(diff)}",
                _key_line(paths["reference_payloads"], "golden_workspace_files"),
            )

    workspace = Workspace(gt_files=payload["gt_files"])
    ws_dir = root / "workspaces" / sample_id
    if (ws_dir.is_symlink() or ws_dir.exists()) and not is_inside(ws_dir, root):
        issues.error(
            ws_dir,
            "workspaces",
            f"points outside the sample set {root.resolve()} (to {ws_dir.resolve()})",
        )
        return None
    escaping = escaping_symlinks(ws_dir, root) if ws_dir.is_dir() else []
    if escaping:
        issues.error(
            ws_dir,
            "workspaces",
            f"holds symlinks that point outside the sample set {root.resolve()}: "
            + ", ".join(f"{p} (to {link_target(p)})" for p in escaping),
        )
        return None
    if ws_dir.is_dir():
        workspace.root = ws_dir
        workspace.exec_dir = ws_dir
    elif not (root / "workspaces").is_dir():
        workspace.missing.append(ws_dir)
    else:  # optional (fourfolder-spec.md), but a grader that expects files there scores 0
        issues.warning(
            ws_dir,
            "workspaces",
            f"no folder: sample {sample_id} starts from an empty workspace (its evaluator "
            "scores 0 if it expects files there)",
        )
    # a warning, not an error: one sample's missing file stopped the whole set from loading
    # (the others ran before); with no workspaces/ at all, preflight names that instead
    for i, spec in enumerate(intent["services"] if not workspace.missing else []):
        for name in fixture_files(spec):
            if not (ws_dir / name).is_file():
                issues.warning(
                    paths["intent"],
                    f"services[{i}].fixtures",
                    f"names {name}, which is not a file in {ws_dir}: the service starts from it, "
                    f"so every trial of sample {sample_id} is a setup error",
                    _key_line(paths["intent"], "services"),
                )
    metadata: dict[str, Any] = {
        "sample_id": sample_id,
        "files": {f: str(p) for f, p in paths.items()},
        "golden_workspace_files": payload["golden_workspace_files"],
    }
    if datapoint["metadata"]:
        metadata["datapoint_metadata"] = datapoint["metadata"]
    if datapoint["statistics"]:
        metadata["statistics"] = datapoint["statistics"]
    try:
        return Task(
            id=sample_id,
            name=intent["name"],
            category=intent["category"] or payload["category"],
            prompt=intent["prompt"],
            expected_behavior=intent["expected_behavior"],
            grading_criteria=intent["grading_criteria"],
            timeout_seconds=intent["timeout_seconds"],
            level=intent["level"],
            language=language_of(intent["prompt"]),
            workspace=workspace,
            grader=Grader(
                kind=GraderKind.PROGRAMMATIC,
                source=evaluator["source"],
                origin=SourceRef(path=paths["evaluators"], line=1),
                stdlib_only=True,
            ),
            golden_dialog=datapoint["dialog"],
            golden_tool_schema=datapoint["tool_schema"],
            # the recorded agent had the web when its tools did (--web on then reaches it)
            web_allowed=bool(_WEB_TOOLS & _tool_names(datapoint["tool_schema"])),
            golden_workspace=golden,
            services=intent["services"],
            expected_reward=pl_reward if pl_reward is not None else ev_reward,
            format=TaskFormat.FOURFOLDER,
            source=SourceRef(path=paths["intent"]),
            metadata=metadata,
        )
    except ValidationError as exc:  # pragma: no cover - fields are checked above
        raise TaskFormatError(paths["intent"], *first_invalid(exc)) from None


def read_fourfolder(root: Path | str, issues: IssueCollector | None = None) -> list[Task]:
    """Read every sample of a four-folder set, sorted by id.

    An id present in only some of the four folders is an error naming the missing files; an id
    (file name) that is not a safe folder name (:func:`clawrig.tasks.safety.id_problem`) and a
    ``workspaces/NNNNNN`` that is, or holds, a symlink pointing outside the set are errors.
    A set without a ``workspaces/`` folder marks every task's workspace as missing (the
    published layout leaves the environment to the harness) with one warning; with the folder,
    an id without a subfolder starts from an empty workspace.
    """
    root = Path(root)
    issues = issues if issues is not None else IssueCollector()
    if not root.is_dir():
        raise TaskFormatError(root, "path", "not a folder")
    found = sample_ids(root)
    all_ids = sorted(set().union(*found.values()))
    if not all_ids:
        issues.error(root, "intent", "no samples found (expected intent/NNNNNN.json files)")
    tasks = []
    for sample_id in all_ids:
        try:
            task = read_fourfolder_sample(root, sample_id, issues)
        except TaskFormatError as exc:
            issues.add(exc)
            continue
        if task is not None:
            tasks.append(task)
    if tasks and not (root / "workspaces").is_dir():
        issues.warning(
            root,
            "workspaces",
            "no workspaces/ folder: the initial workspace of each sample is not shipped "
            "(the environment must come from elsewhere)",
        )
    return tasks
