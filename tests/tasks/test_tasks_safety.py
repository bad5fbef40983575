"""Security checks in every task reader: task ids are safe folder names, workspace sources stay
inside the benchmark, timeouts are finite numbers > 0.

Each case writes a broken copy (tmp_path) of a WildClawBench task, the real four-folder sample
or the real DataClawBench root and asserts the error names the file, the field and the line
(lines found by hand in the file the test wrote).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from clawrig.errors import TaskFormatError
from clawrig.tasks import load_suite
from clawrig.tasks.dataclaw import read_dataclaw_root, read_dataclaw_task_md
from clawrig.tasks.fourfolder import read_fourfolder
from clawrig.tasks.text import IssueCollector
from clawrig.tasks.wildclaw import read_wildclaw_task

FRONT = """id: {id}
name: Meeting Notes Action Items
category: 01_Productivity_Flow
timeout_seconds: 300
modality: pure-text"""
SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

UNSAFE_IDS = [
    "../escape",
    "a/b",
    "a\\b",
    "a..b",
    "..",
    ".hidden",
    "-rf",
    "a\x00b",
    "tab\there",
    "new\nline",
    "with space",
]
UPSTREAM_IDS = [
    "01_Productivity_Flow_task_1_x",
    "task_001_comprehensive_decision_easy_easy001",
    "risk_assessment-hard-hard011",
    "000015",
]
BAD_TIMEOUTS = {  # YAML text -> what it is
    ".nan": "NaN",
    ".inf": "infinity",
    "-.inf": "-infinity",
    "1.0e+999": "overflows to infinity",
    "1" + "0" * 400: "an int too large for a float",
    "0": "zero",
    "-5": "negative",
    '"600"': "a string",
}


def _line_of(path: Path, needle: str, start: int = 1) -> int:
    """1-based line of the first line (from ``start``) holding ``needle``, found by hand."""
    lines = path.read_text(encoding="utf-8").split("\n")
    for i, ln in enumerate(lines, start=1):
        if i >= start and needle in ln:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


def _raises(fn, *args, **kwargs) -> TaskFormatError:
    with pytest.raises(TaskFormatError) as info:
        fn(*args, **kwargs)
    return info.value


# --------------------------------------------------------------------------- WildClawBench


def _front(id_value: str, timeout: str = "300") -> str:
    # a JSON string is a valid YAML double-quoted scalar (\u0000, \t, \\ escapes included)
    return FRONT.format(id=json.dumps(id_value)).replace(
        "timeout_seconds: 300", f"timeout_seconds: {timeout}"
    )


@pytest.mark.parametrize("bad_id", UNSAFE_IDS)
def test_wildclaw_unsafe_id_is_an_error_naming_file_field_line(wildclaw_task, bad_id):
    path = wildclaw_task(front=_front(bad_id))
    err = _raises(read_wildclaw_task, path)
    assert (err.path, err.field, err.line) == (path, "id", 2)
    assert str(err).startswith(f"{path}:2: id: task id {bad_id!r} is not a safe folder name")


def test_wildclaw_empty_id_is_an_error(wildclaw_task):
    path = wildclaw_task(front=_front(""))
    err = _raises(read_wildclaw_task, path)
    assert (err.path, err.field, err.line) == (path, "id", 2)


@pytest.mark.parametrize("good_id", UPSTREAM_IDS)
def test_wildclaw_upstream_ids_still_read(wildclaw_task, good_id):
    path = wildclaw_task(front=_front(good_id))
    assert read_wildclaw_task(path).id == good_id


def test_wildclaw_lenient_read_reports_and_keeps_a_safe_id(wildclaw_task, bench_root):
    wildclaw_task(front=_front("../escape"))
    suite = load_suite(bench_root)
    assert [(e.field, e.line) for e in suite.errors] == [("id", 2)]
    # "../escape" -> "_" for each unsafe run, "_" for "..", leading "._-" dropped -> "escape"
    assert [t.id for t in suite.tasks] == ["escape"]


@pytest.mark.parametrize("text", list(BAD_TIMEOUTS))
def test_wildclaw_timeout_must_be_finite_and_positive(wildclaw_task, text):
    path = wildclaw_task(front=_front("t1", timeout=text))
    err = _raises(read_wildclaw_task, path)
    assert (err.path, err.field, err.line) == (path, "timeout_seconds", 5)
    assert "finite number of seconds > 0" in err.message
    assert len(err.message) < 120  # (a 400-digit number was printed whole: helper-205)
    if len(text) > 60:
        assert err.message.endswith(f"got {text[:40]}... ({len(text)} characters)")


@pytest.mark.parametrize(
    "ws_path",
    ["/etc", "/tmp/../etc", "../outside", "workspace/../../outside", "../../../../../../etc"],
)
def test_wildclaw_workspace_path_outside_root_is_an_error(
    wildclaw_task, task_sections, bench_root, ws_path
):
    (bench_root.parent / "outside").mkdir(exist_ok=True)
    task_sections["Workspace Path"] = f"```\n{ws_path}\n```"
    path = wildclaw_task(sections=task_sections)
    err = _raises(read_wildclaw_task, path)
    assert (err.path, err.field) == (path, "Workspace Path")
    assert err.line == _line_of(path, ws_path, start=_line_of(path, "## Workspace Path"))
    assert ("absolute path" if ws_path.startswith("/") else "resolves outside") in err.message


def test_wildclaw_workspace_path_with_dotdot_inside_root_is_fine(
    wildclaw_task, task_sections, bench_root
):
    rel = "workspace/01_Productivity_Flow/../01_Productivity_Flow/task_1_meeting_notes"
    task_sections["Workspace Path"] = f"```\n{rel}\n```"
    task = read_wildclaw_task(wildclaw_task(sections=task_sections))
    ws = bench_root / "workspace" / "01_Productivity_Flow" / "task_1_meeting_notes"
    assert task.workspace.exec_dir == ws.resolve() / "exec"


def test_wildclaw_workspace_symlinked_outside_is_an_error(
    wildclaw_task, task_sections, bench_root, tmp_path
):
    outside = tmp_path / "outside"
    (outside / "exec").mkdir(parents=True)
    (bench_root / "workspace" / "link").symlink_to(outside)
    task_sections["Workspace Path"] = "```\nworkspace/link\n```"
    path = wildclaw_task(sections=task_sections)
    err = _raises(read_wildclaw_task, path)
    assert (err.path, err.field) == (path, "Workspace Path")
    assert err.line == _line_of(path, "workspace/link")
    assert "resolves outside" in err.message


def test_wildclaw_workspace_holding_an_escaping_symlink_is_an_error(wildclaw_task, bench_root):
    exec_dir = bench_root / "workspace" / "01_Productivity_Flow" / "task_1_meeting_notes" / "exec"
    (exec_dir / "passwd").symlink_to("/etc/passwd")
    (exec_dir / "notes_link.txt").symlink_to("notes.txt")  # inside: fine on its own
    path = wildclaw_task()
    err = _raises(read_wildclaw_task, path)
    assert (err.path, err.field) == (path, "Workspace Path")
    assert err.line == _line_of(path, "workspace/01_Productivity_Flow/task_1_meeting_notes")
    assert str(exec_dir.resolve() / "passwd") in err.message
    assert "notes_link.txt" not in err.message


@pytest.mark.parametrize("skill", ["../../etc", "a/b", "..", ".ssh", "a\\b"])
def test_wildclaw_skill_must_be_a_plain_name(wildclaw_task, task_sections, skill):
    task_sections["Skills"] = f"```\n{skill}\n```"
    path = wildclaw_task(sections=task_sections)
    err = _raises(read_wildclaw_task, path)
    assert (err.path, err.field) == (path, "Skills")
    assert err.line == _line_of(path, skill, start=_line_of(path, "## Skills"))


# --------------------------------------------------------------------------- four-folder


@pytest.fixture
def sample(tmp_path, fourfolder_real, writable_copy) -> Path:
    return writable_copy(fourfolder_real, tmp_path / "set")


def _rename_sample(root: Path, new: str) -> None:
    moves = {
        "intent/000015.json": f"intent/{new}.json",
        "datapoints/000015.json": f"datapoints/{new}.json",
        "evaluators/evaluator_000015.py": f"evaluators/evaluator_{new}.py",
        "reference_payloads/reference_payload_000015.json": (
            f"reference_payloads/reference_payload_{new}.json"
        ),
    }
    for old, dst in moves.items():
        (root / old).rename(root / dst)


@pytest.mark.parametrize("stem", ["..", ".000015", "-000015", "a..b", "with space", "tab\tx"])
def test_fourfolder_unsafe_file_stem_is_an_error(sample, stem):
    _rename_sample(sample, stem)
    issues = IssueCollector(strict=False)
    tasks = read_fourfolder(sample, issues)
    assert tasks == []
    [err] = issues.errors
    intent = sample / "intent" / f"{stem}.json"
    assert (err.path, err.field, err.line) == (intent, "id", _line_of(intent, '"id"'))
    assert "not a safe folder name" in err.message
    with pytest.raises(TaskFormatError) as info:
        read_fourfolder(sample)
    assert str(info.value).startswith(f"{intent}:{err.line}: id: task id {stem!r}")


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (42, "must be a string (the task text), got int"),
        (["a"], "must be a string (the task text), got list"),
        ("  ", "missing or empty (the task text)"),
        (None, "missing or empty (the task text)"),
    ],
)
def test_fourfolder_prompt_of_another_type_is_said_so(sample, value, said):
    """helper-175: ``"prompt": 42`` was reported "missing or empty"."""
    intent = sample / "intent" / "000015.json"
    data = json.loads(intent.read_text(encoding="utf-8"))
    data["prompt"] = value
    intent.write_text(json.dumps(data, indent=2), encoding="utf-8")
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field, err.message) == (intent, "prompt", said)
    assert err.line == _line_of(intent, '"prompt"')


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 0, -1, "600"])
def test_fourfolder_timeout_must_be_finite_and_positive(sample, value):
    intent = sample / "intent" / "000015.json"
    data = json.loads(intent.read_text(encoding="utf-8"))
    data["timeout_seconds"] = value
    intent.write_text(json.dumps(data, indent=2), encoding="utf-8")  # NaN/Infinity as Python does
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field) == (intent, "timeout_seconds")
    assert err.line == _line_of(intent, '"timeout_seconds"')


def test_fourfolder_workspace_symlinked_outside_the_set_is_an_error(sample, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = sample / "workspaces" / "000015"
    for f in ws.iterdir():
        f.rename(outside / f.name)
    ws.rmdir()
    ws.symlink_to(outside)
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field) == (ws, "workspaces")
    assert str(outside.resolve()) in err.message


def test_fourfolder_workspace_holding_an_escaping_symlink_is_an_error(sample):
    ws = sample / "workspaces" / "000015"
    (ws / "shadow").symlink_to("/etc/shadow")
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field) == (ws, "workspaces")
    assert str(ws / "shadow") in err.message


@pytest.mark.parametrize(
    "rel",
    [
        "datapoints/000015.json",
        "reference_payloads/reference_payload_000015.json",
        "intent/000015.json",
        "evaluators/evaluator_000015.py",
    ],
)
def test_fourfolder_file_linked_outside_the_set_is_refused_before_it_is_read(sample, tmp_path, rel):
    """helper-175: a datapoint or reference payload linked to its own copy outside the set was
    read and the set verified PASS; an evaluator linked to /etc/passwd was "a syntax error"."""
    linked = sample / rel
    outside = tmp_path / "outside" / linked.name
    outside.parent.mkdir()
    outside.write_bytes(linked.read_bytes())  # the same content: only its place is wrong
    linked.unlink()
    linked.symlink_to(outside)
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field) == (linked, "file")
    assert err.message == (
        f"{linked} leads outside the benchmark root {sample} (to {outside.resolve()})"
    )
    linked.unlink()
    linked.symlink_to("/etc/passwd")  # not what the file should hold: its place is said first
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field) == (linked, "file") and err.message.endswith("(to /etc/passwd)")


@pytest.mark.parametrize("kind", ["loop", "device", "fifo"])
def test_fourfolder_file_that_is_a_loop_a_device_or_a_pipe_is_not_called_missing(sample, kind):
    """helper-177: a sample's file linked to /dev/zero, a named pipe, or a link loop was
    "missing" (the sample "incomplete")."""
    payload = sample / "reference_payloads" / "reference_payload_000015.json"
    payload.unlink()
    if kind == "loop":
        payload.symlink_to(payload.name)
        want = f"{payload} leads outside the benchmark root {sample} (to a link loop)"
    elif kind == "device":
        payload.symlink_to("/dev/zero")
        want = f"{payload} leads outside the benchmark root {sample} (to /dev/zero)"
    else:
        os.mkfifo(payload)
        want = f"{payload} is not a regular file"
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field, err.message) == (payload, "file", want)


def test_fourfolder_workspace_link_loop_is_called_one(sample):
    ws = sample / "workspaces" / "000015"
    (ws / "loop").symlink_to("loop")
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field) == (ws, "workspaces")
    assert f"{ws / 'loop'} (to a link loop)" in err.message


def test_fourfolder_workspace_symlinked_inside_the_set_is_fine(sample):
    ws = sample / "workspaces" / "000015"
    ws.rename(sample / "workspaces" / "shared")
    ws.symlink_to("shared")
    [task] = read_fourfolder(sample)
    assert task.workspace.exec_dir == ws
    assert sorted(p.name for p in task.workspace.exec_dir.iterdir()) == ["coauthorship.json"]


# --------------------------------------------------------------------------- DataClawBench

TASK_001 = "task_001_comprehensive_decision_easy_easy001.md"
FIRST_SOURCE = '"source": "database/bilingual_translation_english_chinese.json"'
FIRST_DEST = '"dest": "database/bilingual_translation_english_chinese.json"'


@pytest.fixture
def dc_root(tmp_path, dataclaw_real, writable_copy) -> Path:
    return writable_copy(dataclaw_real, tmp_path / "dc")


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


@pytest.mark.parametrize(
    "source",
    ["/etc/shadow", "../../../root/.bashrc", "database/../../tasks/" + TASK_001, "..", "a\\u0000b"],
)
def test_dataclaw_workspace_source_outside_assets_is_an_error(dc_root, source):
    md = dc_root / "tasks" / TASK_001
    _edit(md, FIRST_SOURCE, f'"source": "{source}"')
    err = _raises(read_dataclaw_task_md, md)
    assert (err.path, err.field) == (md, "workspace_files")
    assert err.line == _line_of(md, f'"source": "{source}"')
    # by hand: ---, id, name, category, grading_type, timeout_seconds, gold_file,
    # workspace_files: [, {, then the first "source" on line 10
    assert err.line == 10


def test_dataclaw_workspace_source_symlinked_outside_is_an_error(dc_root):
    link = dc_root / "assets" / "database" / "internal_metrics_link.csv"
    link.symlink_to("/etc/passwd")
    md = dc_root / "tasks" / TASK_001
    _edit(md, FIRST_SOURCE, '"source": "database/internal_metrics_link.csv"')
    err = _raises(read_dataclaw_task_md, md)
    assert (err.path, err.field, err.line) == (md, "workspace_files", 10)
    assert "resolves outside" in err.message
    # the root reader also reports the symlink once and never lists it in a workspace
    issues = IssueCollector(strict=False)
    tasks = read_dataclaw_root(dc_root, issues)
    db_errors = [e for e in issues.errors if e.path == dc_root / "assets" / "database"]
    assert len(db_errors) == 1 and str(link) in db_errors[0].message
    assert db_errors[0].field == "workspace_files"
    sources = {f.source for t in tasks for f in t.workspace.files}
    assert link not in sources and len(tasks) == 57


@pytest.mark.parametrize("dest", ["/tmp/x", "../x", "database/../../x", "", "a\\\\b"])
def test_dataclaw_workspace_dest_must_be_relative_without_dotdot(dc_root, dest):
    md = dc_root / "tasks" / TASK_001
    _edit(md, FIRST_DEST, f'"dest": "{dest}"')
    err = _raises(read_dataclaw_task_md, md)
    assert (err.path, err.field, err.line) == (md, "workspace_files", 11)
    assert err.message.startswith("dest ")


@pytest.mark.parametrize("bad_id", ['"../task_001"', '"a/b"', '".hidden"', '"-x"', '"a\\tb"'])
def test_dataclaw_task_file_unsafe_id_is_an_error(dc_root, bad_id):
    md = dc_root / "tasks" / TASK_001
    _edit(md, "id: task_001_comprehensive_decision_easy_easy001", f"id: {bad_id}")
    err = _raises(read_dataclaw_task_md, md)
    assert (err.path, err.field, err.line) == (md, "id", 2)
    assert "not a safe folder name" in err.message


def test_dataclaw_gold_derived_unsafe_id_is_an_error(dc_root):
    # a gold file no task file names: its id is <category>-<level>-<id>
    gold = dc_root / "assets" / "qa_gold" / "risk_assessment" / "hard011.json"
    data = json.loads(gold.read_text(encoding="utf-8"))
    data["metadata"]["level"] = "../../hard"
    gold.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
    issues = IssueCollector(strict=False)
    tasks = read_dataclaw_root(dc_root, issues)
    [err] = issues.errors
    assert (err.path, err.field, err.line) == (gold, "id", 2)
    assert "'risk_assessment-../../hard-hard011'" in err.message
    assert all(SAFE.match(t.id) and ".." not in t.id for t in tasks)


@pytest.mark.parametrize("text", list(BAD_TIMEOUTS))
def test_dataclaw_timeout_must_be_finite_and_positive(dc_root, text):
    md = dc_root / "tasks" / TASK_001
    _edit(md, "timeout_seconds: 1200", f"timeout_seconds: {text}")
    err = _raises(read_dataclaw_task_md, md)
    assert (err.path, err.field, err.line) == (md, "timeout_seconds", 6)


@pytest.mark.parametrize("gold_file", ["/etc/passwd", "../../outside.json"])
def test_dataclaw_gold_file_outside_root_is_an_error(dc_root, gold_file):
    (dc_root.parent / "outside.json").write_text("{}", encoding="utf-8")
    md = dc_root / "tasks" / TASK_001
    _edit(md, "gold_file: qa_gold/comprehensive_decision/easy001.json", f"gold_file: {gold_file}")
    err = _raises(read_dataclaw_task_md, md)
    assert (err.path, err.field, err.line) == (md, "gold_file", 7)


def test_dataclaw_real_root_has_no_safety_errors(dataclaw_real):
    issues = IssueCollector(strict=False)
    tasks = read_dataclaw_root(dataclaw_real, issues)
    assert issues.errors == []
    assert len(tasks) == 57
    assert all(SAFE.match(t.id) for t in tasks)


# --------------------------------------------------------------------------- CLI


def test_validate_cli_reports_each_reader_and_exits_1(
    run_cli, wildclaw_task, bench_root, sample, dc_root
):
    wild = wildclaw_task(front=_front("../escape", timeout=".nan"))
    proc = run_cli("tasks", "validate", bench_root)
    assert proc.returncode == 1
    assert f"error: {wild}:2: id: task id '../escape' is not a safe folder name" in proc.stdout
    assert f"error: {wild}:5: timeout_seconds: must be a finite number" in proc.stdout

    ws = sample / "workspaces" / "000015"
    os.symlink("/etc/shadow", ws / "shadow")
    proc = run_cli("tasks", "validate", sample)
    assert proc.returncode == 1
    assert f"error: {ws}: workspaces: holds symlinks" in proc.stdout

    md = dc_root / "tasks" / TASK_001
    _edit(md, FIRST_SOURCE, '"source": "/etc/shadow"')
    proc = run_cli("tasks", "validate", dc_root)
    assert proc.returncode == 1
    assert f"error: {md}:10: workspace_files: source '/etc/shadow' is an absolute path" in (
        proc.stdout
    )


@pytest.mark.parametrize(("text", "number"), [("1e3", "1000"), ("2.5E2", "250")])
def test_a_timeout_yaml_reads_as_text_says_how_to_write_it(wildclaw_task, text, number):
    # YAML 1.1 reads 1e3 (no dot, or no sign in the exponent) as text: the line said 1e3 was
    # not "a finite number of seconds > 0", which it is, and not what to write instead
    path = wildclaw_task(front=_front("t1", timeout=text))
    err = _raises(read_wildclaw_task, path)
    assert (err.path, err.field, err.line) == (path, "timeout_seconds", 5)
    assert f"YAML reads {text} as text" in err.message and f"write {number}" in err.message


def test_every_task_sharing_a_bad_workspace_or_grader_gets_its_own_error(
    wildclaw_task, bench_root, task_sections
):
    """A suite's reading resolves and walks each folder once and checks each grader source
    once (a suite's tasks share them): every task that names them still gets its error, at
    its own file and line."""
    exec_dir = bench_root / "workspace" / "01_Productivity_Flow" / "task_1_meeting_notes" / "exec"
    (exec_dir / "passwd").symlink_to("/etc/passwd")
    broken = dict(task_sections)
    broken["Automated Checks"] = "```python\ndef grade(:\n    pass\n```"
    paths = [wildclaw_task(f"t{k}.md", id=f"t{k}") for k in range(3)]
    paths += [wildclaw_task(f"g{k}.md", id=f"g{k}", sections=broken) for k in range(2)]
    suite = load_suite(bench_root / "tasks", bench_root)
    link = str(exec_dir.resolve() / "passwd")
    for path in paths:
        mine = [e for e in suite.errors if e.path == path]
        assert any(
            e.field == "Workspace Path"
            and link in e.message
            and e.line == _line_of(path, "workspace/01_Productivity_Flow/task_1_meeting_notes")
            for e in mine
        ), mine
    for path in paths[3:]:
        (err,) = [e for e in suite.errors if e.path == path and e.field == "Automated Checks"]
        assert "syntax error" in err.message
        assert err.line == _line_of(path, "def grade(:")


def test_wildclaw_tasks_folder_further_up_is_not_the_benchmark_root(
    wildclaw_task, task_sections, bench_root, tmp_path, caplog
):
    """The benchmark root is the folder holding the ``tasks/`` folder the formats keep their
    task files in (the file's folder or its parent), not any ``tasks`` further up: a suite kept
    in ``<home>/tasks/downloads/bench`` took ``<home>`` for its root, and a Workspace Path
    ``secretdata`` copied ``<home>/secretdata`` into the sandbox (helper-205)."""
    # the layouts the formats publish keep their root: tasks/<category>/x.md, tasks/x.md
    task = read_wildclaw_task(wildclaw_task())
    assert task.workspace.exec_dir.parent.parent.parent.parent == bench_root.resolve()
    flat = bench_root / "tasks" / "flat.md"
    flat.write_bytes(wildclaw_task().read_bytes())
    assert read_wildclaw_task(flat).workspace.exec_dir == task.workspace.exec_dir
    # a suite three folders below a `tasks` folder: its root is its own folder
    home = tmp_path / "home"
    (home / "secretdata" / "exec").mkdir(parents=True)
    (home / "secretdata" / "exec" / "key.txt").write_text("TOP SECRET\n")
    suite = home / "tasks" / "downloads" / "bench"
    suite.mkdir(parents=True)
    task_sections["Workspace Path"] = "```\nsecretdata\n```"
    evil = suite / "evil.md"
    evil.write_bytes(wildclaw_task(sections=task_sections).read_bytes())
    with caplog.at_level("WARNING", logger="clawrig.tasks"):
        read = read_wildclaw_task(evil)
    assert read.workspace.exec_dir is None or not read.workspace.exec_dir.is_relative_to(
        home / "secretdata"
    )
    assert f"workspace data not found: looked for {suite / 'secretdata'} " in caplog.text


def test_wildclaw_requirements_file_linked_outside_the_root_is_refused(
    wildclaw_task, task_sections, grade_source, bench_root, tmp_path
):
    """A suite's requirements.txt that is a link to a host file is refused, naming it (its
    lines were read as the graders' packages, to be asked of the package index: a token in
    a credentials file became a "package name" the validation note printed: helper-205); one
    linked within the root is read."""
    creds = tmp_path / "creds"
    creds.write_text("ghp_abcdef1234567890\n")
    req = bench_root / "requirements.txt"
    req.symlink_to(creds)
    # a grader beyond the standard library: the suite's requirements are read for it
    numpy_grader = grade_source.replace("import os\n", "import os\nimport numpy\n", 1)
    task_sections["Automated Checks"] = "```python\n" + numpy_grader + "```"
    path = wildclaw_task(sections=task_sections)
    err = _raises(read_wildclaw_task, path)
    assert (err.path, err.field) == (req, "requirements")
    assert f"leads outside the benchmark root {bench_root}" in err.message
    assert "ghp_" not in str(err)
    req.unlink()
    (bench_root / "reqs.txt").write_text("numpy==2.1.0\n")
    req.symlink_to("reqs.txt")
    assert read_wildclaw_task(path).grader.requirements == ["numpy==2.1.0"]


@pytest.mark.parametrize(
    ("tool_calls", "where", "said"),
    [
        ("x", "[1].tool_calls", "must be a list of tool calls, not str"),
        (5, "[1].tool_calls", "must be a list of tool calls, not int"),
        (["x"], "[1].tool_calls[0]", "must be a tool call"),
        ([{"id": "c", "function": {"name": 7}}], "[1].tool_calls[0]", "must be a tool call"),
        (
            [{"id": "c", "function": {"name": "read", "arguments": 5}}],
            "[1].tool_calls[0].function.arguments",
            "must be a JSON string or an object, not int",
        ),
    ],
)
def test_fourfolder_malformed_tool_calls_are_an_error_naming_the_message(
    sample, tool_calls, where, said
):
    """A golden dialog whose tool calls are not OpenAI tool calls is refused when the sample is
    read, naming the message (a string there was an AttributeError traceback in verify's
    lint, and an oracle trial's infrastructure TypeError, run again at every --resume:
    helper-205); calls with arguments as an object still read."""
    dp = sample / "datapoints" / "000015.json"
    data = json.loads(dp.read_text(encoding="utf-8"))
    assert data["formatted_dialog"][1]["role"] == "assistant"
    good = json.loads(json.dumps(data))
    data["formatted_dialog"][1]["tool_calls"] = tool_calls
    dp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field) == (dp, f"formatted_dialog{where}")
    assert err.message.startswith(said) and err.line == _line_of(dp, '"formatted_dialog"')
    call = good["formatted_dialog"][1]["tool_calls"][0]["function"]
    call["arguments"] = json.loads(call["arguments"])
    dp.write_text(json.dumps(good, indent=2), encoding="utf-8")
    [task] = read_fourfolder(sample)
    assert task.golden_dialog[1]["tool_calls"][0]["function"]["arguments"] == call["arguments"]


@pytest.mark.parametrize("source", [".", "database", "qa_gold"])
def test_dataclaw_workspace_source_that_is_a_folder_is_an_error(dc_root, source):
    """A source that is a folder (the whole assets folder, gold answers and all, for ".") is
    refused naming it, not warned "not found" with a hint to download the assets
    (helper-205)."""
    md = dc_root / "tasks" / TASK_001
    _edit(md, FIRST_SOURCE, f'"source": "{source}"')
    err = _raises(read_dataclaw_task_md, md)
    assert (err.path, err.field, err.line) == (md, "workspace_files", 10)
    assert err.message == f"source {source!r} is a folder under {dc_root / 'assets'} (give a file)"


@pytest.mark.parametrize(
    ("dest", "said"),
    [
        ("database", "dest 'database' is a file and a folder of 'database/enterprise/"),
        (
            "./database/enterprise/company_core.csv",
            "dest './database/enterprise/company_core.csv' and "
            "'database/enterprise/company_core.csv' are the same file",
        ),
    ],
)
def test_dataclaw_workspace_dests_that_clash_are_an_error(dc_root, dest, said):
    """Two dests where one is a folder of the other, or the same file twice, are refused when
    the task is read (copied in, the first was every trial's infrastructure FileExistsError,
    and the second kept one file unsaid: helper-205)."""
    md = dc_root / "tasks" / TASK_001
    _edit(md, FIRST_DEST, f'"dest": "{dest}"')
    err = _raises(read_dataclaw_task_md, md)
    assert (err.path, err.field) == (md, "workspace_files")
    assert err.message.startswith(said) and err.line == _line_of(md, "workspace_files:")


def test_fourfolder_gt_and_golden_workspace_paths_that_clash_are_an_error(sample):
    """gt/ keys or GOLDEN_WORKSPACE keys where one is a folder of another, and a
    GOLDEN_WORKSPACE file whose base64 does not decode, are refused when the sample is read
    (each was every trial's infrastructure error, FileExistsError or "Invalid base64", with
    no file named: helper-205)."""
    payload = sample / "reference_payloads" / "reference_payload_000015.json"
    data = json.loads(payload.read_text(encoding="utf-8"))
    good = json.dumps(data, indent=2)
    data["gt"] = {"a": 1, "a/b": 2}
    payload.write_text(json.dumps(data, indent=2), encoding="utf-8")
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field, err.message) == (
        payload,
        "gt",
        "'a' is a file and a folder of 'a/b'",
    )
    assert err.line == _line_of(payload, '"gt"')
    payload.write_text(good, encoding="utf-8")
    evaluator = sample / "evaluators" / "evaluator_000015.py"
    results = '    "results/results.md": '
    text = evaluator.read_text(encoding="utf-8")
    assert text.count(results) == 1
    evaluator.write_text(text.replace(results, '    "results": "x",\n' + results), encoding="utf-8")
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field) == (evaluator, "GOLDEN_WORKSPACE")
    assert err.message == "'results' is a file and a folder of 'results/results.md'"
    assert err.line == _line_of(evaluator, "GOLDEN_WORKSPACE = {")
    evaluator.write_text(
        text.replace(results, '    "logo.png": {"base64": "!!!notbase64"},\n' + results),
        encoding="utf-8",
    )
    err = _raises(read_fourfolder, sample)
    assert (err.path, err.field) == (evaluator, "GOLDEN_WORKSPACE")
    assert err.message.startswith("'logo.png': base64: ")
    evaluator.write_text(
        text.replace(results, '    "logo.png": {"base64": "iVBORw0K"},\n' + results),
        encoding="utf-8",
    )
    data = json.loads(good)
    data["golden_workspace_files"] = [*data["golden_workspace_files"], "logo.png"]
    payload.write_text(json.dumps(data, indent=2), encoding="utf-8")
    [task] = read_fourfolder(sample)
    assert task.golden_workspace["logo.png"].base64 == "iVBORw0K"


def test_wildclaw_async_grade_is_an_error_at_its_line(wildclaw_task, task_sections, grade_source):
    """``async def grade`` is refused when the task is read, at its line (called as
    WildClawBench calls grade(), it returned a coroutine: every trial scored 0 with "grade()
    returned a string", the agent blamed, while validate said OK: helper-205)."""
    source = grade_source.replace("def grade(", "async def grade(", 1)
    task_sections["Automated Checks"] = "```python\n" + source + "```"
    path = wildclaw_task(sections=task_sections)
    err = _raises(read_wildclaw_task, path)
    assert (err.path, err.field) == (path, "Automated Checks")
    assert err.message == "`async def grade` returns a coroutine: grade() must be a plain def"
    assert err.line == _line_of(path, "async def grade(")


def test_wildclaw_front_matter_key_or_section_given_twice_is_an_error(
    wildclaw_task, task_sections, bench_root
):
    """A front matter key given twice (YAML keeps the last: `id: d1` then `id: d2` ran as d2)
    and a section given twice (the second was ignored) are errors at the second one's line;
    a non-string id is said once, not also as "no id" (helper-205)."""
    path = wildclaw_task(front=FRONT.format(id="d1") + "\nid: d2")
    err = _raises(read_wildclaw_task, path)
    assert (err.path, err.field) == (path, "id")
    assert err.message == "given twice (lines 2 and 7)" and err.line == 7
    assert _line_of(path, "id: d2") == 7 and _line_of(path, "id: d1") == 2
    task_sections["Skills"] = "```\npdf_reader\n```\n\n## Prompt\n\nDo something else."
    path = wildclaw_task(sections=task_sections)
    err = _raises(read_wildclaw_task, path)
    first, second = (
        _line_of(path, "## Prompt"),
        _line_of(path, "## Prompt", start=2 + _line_of(path, "## Prompt")),
    )
    assert (err.path, err.field, err.line) == (path, "Prompt", second)
    assert err.message == f"section given twice (lines {first} and {second}): only one is read"
    issues = IssueCollector(strict=False)
    read_wildclaw_task(wildclaw_task(front=FRONT.replace("id: {id}", "id: yes")), issues=issues)
    assert [(e.field, e.message) for e in issues.errors] == [("id", "must be a string, got bool")]


def test_task_ids_differing_only_in_case_are_warned(wildclaw_task, bench_root):
    wildclaw_task(name="a.md", id="Task1")
    wildclaw_task(name="b.md", id="task1")
    suite = load_suite(bench_root / "tasks")
    assert not suite.errors
    [warning] = [w for w in suite.warnings if w.field == "id"]
    assert warning.message.startswith("task id 'task1' differs only in case from 'Task1' (in ")


@pytest.mark.parametrize(
    "declared",
    ["foo", "!!str foo", '"fo\\x6f"', ">-\n  foo", "'foo'  # the one"],
)
def test_a_broken_file_declaring_the_id_asked_for_stops_a_suite_run(
    wildclaw_task, bench_root, declared
):
    """``--suite foo`` when foo's own file does not read: the run stops, however the file
    spells its id (YAML tags, escapes, block scalars) and though foo_bar matches the prefix
    (helper-208: foo_bar ran, "a file of a task not chosen"); a file declaring another id does
    not stop it."""
    from clawrig.runner.batch import select_tasks
    from clawrig.tasks.registry import load_tasks

    wildclaw_task(name="a.md", id="foo_bar")
    wildclaw_task(name="z.md", id="zzz")
    broken = bench_root / "tasks" / "01_Productivity_Flow" / "b.md"
    broken.write_text(f"---\nid: {declared}\nname: [unclosed\n---\n\n## Prompt\n\nhi\n")
    with pytest.raises(TaskFormatError) as err:
        load_tasks(bench_root / "tasks", select=lambda t: select_tasks(t, "foo", []))
    assert err.value.path == broken
    with pytest.raises(TaskFormatError):  # (foo, a prefix of a chosen id, may be the one
        # meant: on the safe side, as the reader does not keep the words of --suite)
        load_tasks(bench_root / "tasks", select=lambda t: select_tasks(t, "foo_bar", []))
    [task] = load_tasks(bench_root / "tasks", select=lambda t: select_tasks(t, "zzz", []))
    assert task.id == "zzz"
