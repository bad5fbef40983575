"""The lint helpers on hand-written inputs (values worked out by reading the inputs)."""

from __future__ import annotations

import json

from verify_helpers import DEMO

from clawrig.pysource import non_stdlib_imports
from clawrig.tasks import load_tasks
from clawrig.verify.lint import (
    grader_gt_paths,
    prompt_paths,
    schema_parameters,
    unified_diff,
)


def test_prompt_paths_of_the_seed_prompt() -> None:
    intent = json.loads((DEMO / "intent" / "000015.json").read_text(encoding="utf-8"))
    assert prompt_paths(intent["prompt"]) == [
        ("coauthorship.json", False),
        ("results/results.md", True),
    ]


def test_prompt_paths_inputs_outputs_and_placeholders() -> None:
    prompt = (
        "Use the template in /tmp_workspace/templates/notice.txt, fill it for every row of "
        "/tmp_workspace/data/customers.csv and save them as /tmp_workspace/out/<email>.txt. "
        "Then write a summary to /tmp_workspace/report.md. Fix the bug in "
        "/tmp_workspace/src/app.py and put the patch into /tmp_workspace/patch.diff. "
        "Inputs are under /tmp_workspace/ and /tmp_workspace/docs/."
    )
    assert prompt_paths(prompt) == [
        ("templates/notice.txt", False),
        ("data/customers.csv", False),
        ("report.md", True),
        ("src/app.py", False),
        ("patch.diff", True),
        ("docs/", False),
    ]


def test_grader_gt_paths_finds_literals_joins_paths_and_names() -> None:
    source = (
        "import os\n"  # 1
        "from pathlib import Path\n"  # 2
        'GT = os.path.join("/tmp_workspace", "gt")\n'  # 3
        "def grade(workspace_path='/tmp_workspace', **kw):\n"  # 4
        '    a = os.path.join(workspace_path, "gt", "expected.json")\n'  # 5
        '    b = open("/tmp_workspace/gt/answer.txt")\n'  # 6
        '    c = Path(workspace_path) / "gt" / "data" / "x.csv"\n'  # 7
        '    d = os.path.join(GT, "sub", "y.json")\n'  # 8
        '    e = f"/tmp_workspace/gt/file_{kw}.json"\n'  # 9: not a literal path
        '    f = os.path.join(GT, kw["name"])\n'  # 10: not fully known
        '    if os.path.basename(a) != "gt":\n'  # 11: the folder name alone
        '        g = "gt/z.md"\n'  # 12
        '    h = os.path.join(workspace_path, "gt", "*.json")\n'  # 13: a glob
    )
    assert grader_gt_paths(source) == [
        ("expected.json", 5),
        ("answer.txt", 6),
        ("data/x.csv", 7),
        ("sub/y.json", 8),
        ("z.md", 12),
    ]


def test_demo_graders_name_no_gt_file() -> None:
    # the demo graders keep their expected values as constants (suites/demo/README.md)
    for task in load_tasks(DEMO):
        assert grader_gt_paths(task.grader.source) == [], task.id


def test_non_stdlib_imports() -> None:
    source = (
        "import json, os.path\n"
        "import numpy as np\n"
        "from pandas import DataFrame\n"
        "from collections import deque\n"
        "from . import helper\n"
        "import importlib\n"
        "yaml = importlib.import_module('yaml')\n"
        "x = __import__('sqlite3')\n"
    )
    assert non_stdlib_imports(source) == [("numpy", 2), ("pandas", 3), (".", 5), ("yaml", 7)]


def test_schema_parameters_of_the_captured_schema() -> None:
    schema = json.loads((DEMO / "datapoints" / "000015.json").read_text())["tool_schema"]
    params = schema_parameters(schema)
    assert len(params) == 17
    assert params["read"] == {"path", "offset", "limit", "file_path", "filePath", "file"}
    assert params["write"] == {"content", "path", "file_path", "filePath", "file"}


def test_unified_diff_names_both_sides() -> None:
    diff = unified_diff("a\nb\nc\n", "a\nB\nc\n", "call_1 (read)")
    assert diff.splitlines() == [
        "--- recorded call_1 (read)",
        "+++ replay call_1 (read)",
        "@@ -1,3 +1,3 @@",
        " a",
        "-b",
        "+B",
        " c",
    ]
