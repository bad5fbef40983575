"""WildClawBench task Markdown reader, on task files written here per formats.md section 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrig.errors import TaskFormatError
from clawrig.spec.task import GraderKind, TaskFormat
from clawrig.tasks.text import IssueCollector
from clawrig.tasks.wildclaw import read_wildclaw_task


def _line_of(path: Path, needle: str) -> int:
    """1-based line of the first line of ``path`` equal to ``needle`` (computed by hand)."""
    return path.read_text(encoding="utf-8").split("\n").index(needle) + 1


def test_reads_every_field(wildclaw_task, bench_root, grade_source):
    path = wildclaw_task()
    task = read_wildclaw_task(path)

    assert task.id == "01_Productivity_Flow_task_1_meeting_notes"
    assert task.name == "Meeting Notes Action Items"
    assert task.category == "01_Productivity_Flow"
    assert task.timeout_seconds == 300
    assert task.modality == "pure-text"
    assert task.format is TaskFormat.WILDCLAW
    assert task.language == "en"
    assert task.prompt == (
        "Read /tmp_workspace/notes.txt and write the three action items as a Markdown list "
        "to /tmp_workspace/results/actions.md."
    )
    # a ### heading belongs to the section it is in
    assert task.expected_behavior.endswith("A `###` heading stays inside this section.")
    assert "### Notes for reviewers" in task.expected_behavior
    assert task.grading_criteria == [
        "actions.md exists (weight 0.2)",
        "the three action items are listed (weight 0.8)",
    ]
    # grade() source: fences stripped, the "## ..." comment inside the fence kept
    assert task.grader.kind is GraderKind.PROGRAMMATIC
    assert task.grader.source == grade_source
    assert task.grader.origin.path == path
    assert task.grader.origin.line == _line_of(path, "import os")
    assert task.grader.timeout_seconds == 120
    assert task.grader.stdlib_only is True
    # workspace resolved against the folder holding tasks/
    ws = bench_root / "workspace" / "01_Productivity_Flow" / "task_1_meeting_notes"
    assert task.workspace.root == ws
    assert task.workspace.exec_dir == ws / "exec"
    assert task.workspace.tmp_dir == ws / "tmp"
    assert task.workspace.gt_dir == ws / "gt"
    assert task.workspace.missing == []
    assert task.skills == ["pdf_reader"]
    assert task.skills_dirs == [bench_root / "skills"]  # the folder searched, as upstream
    assert task.web_allowed is True  # upstream's agents have the web: --web on reaches them
    assert task.env == ["OPENROUTER_API_KEY", "JUDGE_MODEL"]
    # comment and blank lines of the warmup block are dropped, the background `&` kept
    assert task.warmup == [
        "mkdir -p /tmp_workspace/results",
        "python3 /tmp_workspace/tmp/server.py &",
    ]


def test_defaults_timeout_120_and_detects_chinese(wildclaw_task, task_sections):
    task_sections["Prompt"] = "请阅读 /tmp_workspace/notes.txt 并写出三项待办事项。"
    front = "id: zh_task\nname: 中文任务\ncategory: 01_Productivity_Flow"
    task = read_wildclaw_task(wildclaw_task("zh.md", front=front, sections=task_sections))
    assert task.timeout_seconds == 120
    assert task.language == "zh"
    assert task.modality == "pure-text"


def test_missing_workspace_data_is_a_warning_not_a_crash(wildclaw_task, task_sections, bench_root):
    task_sections["Workspace Path"] = (
        "```\nworkspace/04_Search_Retrieval/task_9_not_downloaded\n```"
    )
    path = wildclaw_task(sections=task_sections)
    issues = IssueCollector(strict=False)
    task = read_wildclaw_task(path, issues=issues)
    expected = bench_root / "workspace" / "04_Search_Retrieval" / "task_9_not_downloaded"
    assert task.workspace.missing == [expected]
    assert task.workspace.is_present is False
    assert task.workspace.exec_dir is None
    assert issues.errors == []
    [warning] = issues.warnings
    assert warning.field == "Workspace Path"
    assert str(expected) in warning.message
    assert warning.line == _line_of(path, "workspace/04_Search_Retrieval/task_9_not_downloaded")
    # strict mode (the default) does not raise for a warning either
    assert read_wildclaw_task(path).workspace.missing == [expected]


def test_root_argument_overrides_the_default(wildclaw_task, tmp_path):
    other = tmp_path / "elsewhere"
    (other / "workspace" / "01_Productivity_Flow" / "task_1_meeting_notes" / "exec").mkdir(
        parents=True
    )
    task = read_wildclaw_task(wildclaw_task(), root=other)
    assert task.workspace.exec_dir == (
        other / "workspace" / "01_Productivity_Flow" / "task_1_meeting_notes" / "exec"
    )
    assert task.workspace.gt_dir is None


def test_missing_skill_folder_is_a_warning(wildclaw_task, task_sections):
    task_sections["Skills"] = "```\npdf_reader\nno_such_skill\n```"
    issues = IssueCollector(strict=False)
    task = read_wildclaw_task(wildclaw_task(sections=task_sections), issues=issues)
    assert task.skills == ["pdf_reader", "no_such_skill"]
    assert len(task.skills_dirs) == 1
    assert [w.field for w in issues.warnings] == ["Skills"]
    assert "no_such_skill" in issues.warnings[0].message


def test_utf8_bom_is_read(wildclaw_task):
    plain = wildclaw_task("plain.md").read_bytes()
    path = wildclaw_task("bom.md", raw=b"\xef\xbb\xbf" + plain)
    task = read_wildclaw_task(path)
    assert task.id == "01_Productivity_Flow_task_1_meeting_notes"
    assert task.grader.origin.line == _line_of(path, "import os")


def test_crlf_line_endings_are_read(wildclaw_task):
    plain = wildclaw_task("plain.md").read_bytes()
    path = wildclaw_task("crlf.md", raw=plain.replace(b"\n", b"\r\n"))
    task = read_wildclaw_task(path)
    assert task.prompt.startswith("Read /tmp_workspace/notes.txt")
    assert "\r" not in task.grader.source


# ---------------------------------------------------------------- bad input


def test_empty_file(wildclaw_task):
    path = wildclaw_task("empty.md", raw=b"")
    with pytest.raises(TaskFormatError) as err:
        read_wildclaw_task(path)
    assert err.value.path == path
    assert err.value.field == "file"
    assert err.value.line == 1
    assert str(err.value) == f"{path}:1: file: file is empty (0 bytes)"


def test_latin1_file_says_not_utf8_with_byte_offset(wildclaw_task):
    text = "---\nid: cafe\nname: Café menu\n---\n\n## Prompt\n\nList the menu.\n"
    data = text.encode("latin-1")
    offset = data.index(b"\xe9")  # the é of Café
    path = wildclaw_task("latin1.md", raw=data)
    with pytest.raises(TaskFormatError) as err:
        read_wildclaw_task(path)
    assert err.value.field == "encoding"
    assert err.value.line == 3
    message = str(err.value)
    assert message.startswith(f"{path}:3: encoding: file is not UTF-8")
    assert f"byte offset {offset}" in message
    assert "0xe9" in message
    assert "Caf" not in message  # no garbled text


def test_front_matter_that_is_not_yaml(wildclaw_task):
    front = "id: broken\nname: foo: bar\ncategory: 01_Productivity_Flow"
    path = wildclaw_task("badyaml.md", front=front)
    with pytest.raises(TaskFormatError) as err:
        read_wildclaw_task(path)
    assert err.value.field == "front matter"
    assert err.value.line == _line_of(path, "name: foo: bar")
    assert "not valid YAML" in str(err.value)
    assert str(path) in str(err.value)


def test_front_matter_that_is_not_a_mapping(wildclaw_task):
    path = wildclaw_task("words.md", front="just some words, no keys")
    with pytest.raises(TaskFormatError) as err:
        read_wildclaw_task(path)
    assert err.value.field == "front matter"
    assert err.value.line == 2
    assert "not a YAML mapping" in err.value.message


def test_no_front_matter(wildclaw_task):
    path = wildclaw_task("nofront.md", front=None)
    with pytest.raises(TaskFormatError) as err:
        read_wildclaw_task(path)
    assert (err.value.field, err.value.line) == ("front matter", 1)


def test_missing_prompt_section(wildclaw_task, task_sections):
    del task_sections["Prompt"]
    path = wildclaw_task("noprompt.md", sections=task_sections)
    with pytest.raises(TaskFormatError) as err:
        read_wildclaw_task(path)
    assert err.value.path == path
    assert err.value.field == "Prompt"
    lines = path.read_text(encoding="utf-8").split("\n")
    closing = lines.index("---", 1) + 1  # 1-based line of the closing `---`
    assert err.value.line == closing + 1  # where the body (and the Prompt) should start
    assert "missing `## Prompt` section" in str(err.value)
    assert str(err.value).startswith(f"{path}:{err.value.line}: Prompt: ")


def test_grade_syntax_error_reports_the_line_inside_the_task_file(
    wildclaw_task, task_sections, grade_source
):
    bad_line = '    return {"overall_score": }'
    broken = grade_source.replace(
        '    return {"file_exists": 1.0, "items": items, "overall_score": round(score, 4)}',
        bad_line,
    )
    assert broken != grade_source
    task_sections["Automated Checks"] = "```python\n" + broken + "```"
    path = wildclaw_task("syntax.md", sections=task_sections)
    expected_line = _line_of(path, bad_line)
    with pytest.raises(TaskFormatError) as err:
        read_wildclaw_task(path)
    assert err.value.field == "Automated Checks"
    assert err.value.line == expected_line
    assert str(err.value).startswith(f"{path}:{expected_line}: Automated Checks: grade() has a")


def test_block_without_grade_function(wildclaw_task, task_sections):
    task_sections["Automated Checks"] = "```python\ndef score():\n    return 1\n```"
    path = wildclaw_task("nograde.md", sections=task_sections)
    with pytest.raises(TaskFormatError) as err:
        read_wildclaw_task(path)
    assert err.value.field == "Automated Checks"
    assert err.value.line == _line_of(path, "def score():")


def test_missing_workspace_path_section(wildclaw_task, task_sections):
    del task_sections["Workspace Path"]
    path = wildclaw_task("nows.md", sections=task_sections)
    with pytest.raises(TaskFormatError) as err:
        read_wildclaw_task(path)
    assert err.value.field == "Workspace Path"


def test_bad_timeout_and_modality_name_their_lines(wildclaw_task):
    front = "id: t\ntimeout_seconds: soon\nmodality: smell"
    path = wildclaw_task("badfront.md", front=front)
    issues = IssueCollector(strict=False)
    read_wildclaw_task(path, issues=issues)
    found = {(e.field, e.line) for e in issues.errors}
    assert found == {("timeout_seconds", 3), ("modality", 4)}


def test_collecting_mode_reports_every_problem(wildclaw_task, task_sections, grade_source):
    del task_sections["Prompt"]
    task_sections["Automated Checks"] = "```python\ndef grade(:\n    pass\n```"
    task_sections["Env"] = "```\nNOT A NAME\n```"
    path = wildclaw_task("many.md", front="name: no id here", sections=task_sections)
    issues = IssueCollector(strict=False)
    read_wildclaw_task(path, issues=issues)
    fields = [e.field for e in issues.errors]
    assert fields == ["id", "Prompt", "Automated Checks", "Env"]
    assert issues.errors[2].line == _line_of(path, "def grade(:")
    assert issues.errors[3].line == _line_of(path, "NOT A NAME")
