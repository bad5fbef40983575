"""Writing a self-contained four-folder evaluator (``evaluators/evaluator_NNNNNN.py``).

Shape (shared/reference/fourfolder-spec.md; worked example
shared/examples/fourfolder/evaluators/evaluator_000015.py): a header comment, the task's
grader source verbatim (a four-folder evaluator loses its own GOLDEN_WORKSPACE,
EXPECTED_REWARD, GOLDEN_TRANSCRIPT and ``__main__`` block, with the comment lines right above
them), then the module constants ``GOLDEN_WORKSPACE`` (relative path -> text, binary files as
``{"base64": ...}``), ``GOLDEN_TRANSCRIPT`` (OpenClaw entries; only when the grader reads the
transcript), ``EXPECTED_REWARD``, and a ``__main__`` self-check that writes GOLDEN_WORKSPACE
into a temp dir, grades it there (cwd = that dir), prints one JSON line with the sub-scores,
``overall_score``, ``expected`` and ``self_check`` PASS or FAIL, and exits 0 on PASS.

The score is ``overall_score`` when present, else the mean of the numeric entries
(WildClawBench's rule, :func:`clawrig.grading.programmatic.score_from_result`).
"""

from __future__ import annotations

import ast
import base64
import json
import pprint
from collections.abc import Mapping
from typing import Any

from clawrig.pysource import parse as parse_source

GOLDEN_NAMES = ("GOLDEN_WORKSPACE", "EXPECTED_REWARD", "GOLDEN_TRANSCRIPT")

SELF_CHECK = """

if __name__ == "__main__":
    import base64 as _base64
    import json as _json
    import os as _os
    import sys as _sys
    import tempfile as _tempfile

    _cwd = _os.getcwd()
    with _tempfile.TemporaryDirectory() as _tmp:
        for _rel, _content in GOLDEN_WORKSPACE.items():
            _path = _os.path.join(_tmp, _rel)
            _os.makedirs(_os.path.dirname(_path), exist_ok=True)
            if isinstance(_content, dict):
                with open(_path, "wb") as _fh:
                    _fh.write(_base64.b64decode(_content["base64"]))
            else:
                with open(_path, "w", encoding="utf-8", newline="") as _fh:
                    _fh.write(_content)
        _os.chdir(_tmp)
        try:
            _result = grade({call})
        finally:
            _os.chdir(_cwd)
    _score = _result.get("overall_score")
    if isinstance(_score, bool):
        _score = float(_score)
    if not isinstance(_score, (int, float)):
        _nums = [float(v) for v in _result.values() if isinstance(v, (int, float))]
        _score = sum(_nums) / len(_nums) if _nums else None
    _ok = _score is not None and abs(_score - EXPECTED_REWARD) < 1e-6
    _result.setdefault("overall_score", _score)
    _result.update(expected=EXPECTED_REWARD, self_check="PASS" if _ok else "FAIL")
    print(_json.dumps(_result, ensure_ascii=False, default=str))
    _sys.exit(0 if _ok else 1)
"""


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    names = [node.test.left, *node.test.comparators]
    has_name = any(isinstance(n, ast.Name) and n.id == "__name__" for n in names)
    has_main = any(isinstance(n, ast.Constant) and n.value == "__main__" for n in names)
    return has_name and has_main


def _assigns_golden(node: ast.stmt) -> bool:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    return any(isinstance(t, ast.Name) and t.id in GOLDEN_NAMES for t in targets)


def grader_body(source: str) -> str:
    """The grader source without its golden data: top-level assignments of GOLDEN_WORKSPACE,
    EXPECTED_REWARD and GOLDEN_TRANSCRIPT and ``if __name__ == "__main__"`` blocks are removed
    (with the comment lines right above them); everything else is kept verbatim. Raises
    SyntaxError for unparsable source."""
    tree = parse_source(source)
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()
    for node in tree.body:
        if not (_assigns_golden(node) or _is_main_guard(node)):
            continue
        start, end = node.lineno - 1, (node.end_lineno or node.lineno)
        drop.update(range(start, end))
        k = start - 1
        while k >= 0 and lines[k].lstrip().startswith("#"):
            drop.add(k)
            k -= 1
    kept = "".join(line for i, line in enumerate(lines) if i not in drop)
    return kept.rstrip() + "\n"


def reads_transcript(source: str) -> bool:
    """True when a grader reads the transcript: it uses the name ``transcript`` (beyond the
    parameter), the string ``"transcript"`` (``kwargs.get("transcript")``), or names the
    session file (chat.jsonl, /claude_code/)."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return "transcript" in source or "chat.json" in source
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "transcript":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            v = node.value
            if v == "transcript" or "chat.json" in v or "/claude_code/" in v:
                return True
    return False


def reads_gt(source: str) -> bool:
    """True when a grader's source names a gt path (``"gt"``, ``"gt/..."``, ``.../gt/...``)."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return "gt" in source
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            v = node.value.strip("/")
            if v in ("gt", "./gt") or v.startswith(("gt/", "./gt/")) or "/gt/" in node.value:
                return True
            if node.value.endswith("/gt"):
                return True
    return False


def file_value(data: bytes) -> str | dict[str, str]:
    """A GOLDEN_WORKSPACE value: the UTF-8 text, else ``{"base64": ...}``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _literal(value: Any, json_style: bool) -> str:
    """Python literal source for ``value`` that ``ast.literal_eval`` reads back equal."""
    text = (
        json.dumps(value, ensure_ascii=False, indent=4)
        if json_style
        else pprint.pformat(value, width=100, sort_dicts=False)
    )
    try:
        same = ast.literal_eval(text) == value
    except (ValueError, SyntaxError):
        same = False
    if not same:
        text = json.dumps(value, ensure_ascii=True, indent=4) if json_style else repr(value)
    return text


def evaluator_source(
    *,
    sample_id: str,
    header: str,
    grader_source: str,
    golden_workspace: Mapping[str, str | dict[str, str]],
    expected_reward: float,
    golden_transcript: list[dict[str, Any]] | None = None,
) -> str:
    """The whole evaluator file text (see the module docstring). ``header`` is free text put
    in comment lines at the top; ``grader_source`` is used as given (see :func:`grader_body`)."""
    top = "".join(f"# {ln}".rstrip() + "\n" for ln in header.splitlines())
    parts = [
        top,
        grader_source.rstrip() + "\n",
        "\n\n",
        f"# ---- golden data of sample {sample_id}: exported by clawrig ----\n",
        f"GOLDEN_WORKSPACE = {_literal(dict(golden_workspace), json_style=True)}\n",
    ]
    if golden_transcript is not None:
        parts.append(f"GOLDEN_TRANSCRIPT = {_literal(golden_transcript, json_style=False)}\n")
    parts.append(f"EXPECTED_REWARD = {float(expected_reward)!r}\n")
    call = "workspace_path=_tmp"
    if golden_transcript is not None:
        call += ", transcript=GOLDEN_TRANSCRIPT"
    parts.append(SELF_CHECK.replace("{call}", call))
    return "".join(parts)
