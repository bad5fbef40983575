"""Format detection, suite loading, validation and duplicate ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrig.errors import TaskFormatError, UserError
from clawrig.spec.task import TaskFormat
from clawrig.tasks.registry import detect_format, find_task, load_suite, load_tasks, validate


def test_detects_every_shape(wildclaw_task, bench_root, dataclaw_real, fourfolder_real):
    md = wildclaw_task()
    assert detect_format(md) is TaskFormat.WILDCLAW
    assert detect_format(bench_root) is TaskFormat.WILDCLAW
    assert detect_format(bench_root / "tasks") is TaskFormat.WILDCLAW
    assert detect_format(fourfolder_real) is TaskFormat.FOURFOLDER
    assert detect_format(dataclaw_real) is TaskFormat.DATACLAW
    assert detect_format(dataclaw_real / "tasks") is TaskFormat.DATACLAW
    assert (
        detect_format(dataclaw_real / "tasks" / "task_001_comprehensive_decision_easy_easy001.md")
        is TaskFormat.DATACLAW
    )


def test_unknown_and_missing_paths(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(TaskFormatError) as err:
        detect_format(tmp_path)
    assert err.value.field == "format"
    with pytest.raises(TaskFormatError):
        detect_format(tmp_path / "notes.txt")
    with pytest.raises(UserError, match="no such file"):
        load_suite(tmp_path / "nope")


def test_folder_of_task_files_is_read_recursively(wildclaw_task, bench_root, task_sections):
    wildclaw_task()
    task_sections["Workspace Path"] = "```\nworkspace/02_Code_Intelligence/task_2_fix\n```"
    sub = bench_root / "tasks" / "02_Code_Intelligence"
    sub.mkdir()
    second = wildclaw_task(
        "second.md", id="02_Code_Intelligence_task_2_fix", sections=task_sections
    )
    second.rename(sub / "02_Code_Intelligence_task_2_fix.md")
    (bench_root / "tasks" / "README.md").write_text("# not a task\n")
    suite = load_suite(bench_root)
    assert [t.id for t in suite.tasks] == [
        "01_Productivity_Flow_task_1_meeting_notes",
        "02_Code_Intelligence_task_2_fix",
    ]
    assert suite.errors == []
    # the second task's workspace is not downloaded: a warning naming the path
    [warning] = suite.warnings
    assert "task_2_fix" in warning.message
    assert suite.tasks[1].workspace.is_present is False
    assert suite.tasks[0].workspace.is_present is True
    assert load_tasks(bench_root)[0].workspace.exec_dir is not None


def test_real_dataclaw_tasks_folder(dataclaw_real):
    tasks = load_tasks(dataclaw_real / "tasks")
    assert [t.id for t in tasks] == [
        "task_001_comprehensive_decision_easy_easy001",
        "task_373_hypothesis_verification_hard_hard001",
    ]


def test_duplicate_ids_are_an_error(wildclaw_task, bench_root):
    first = wildclaw_task("a.md", id="same_id")
    second = wildclaw_task("b.md", id="same_id")
    issues = validate(bench_root)
    dupes = [i for i in issues if i.field == "id"]
    assert len(dupes) == 1
    assert dupes[0].path == second
    assert dupes[0].severity == "error"
    assert "duplicate task id 'same_id'" in dupes[0].message
    assert str(first) in dupes[0].message
    with pytest.raises(TaskFormatError) as err:
        load_tasks(bench_root)
    assert err.value.field == "id"


def test_validate_collects_every_problem_across_files(wildclaw_task, bench_root, task_sections):
    wildclaw_task("empty.md", raw=b"")
    wildclaw_task("latin1.md", raw="---\nid: x\nname: Café\n---\n".encode("latin-1"))
    del task_sections["Prompt"]
    wildclaw_task("noprompt.md", id="noprompt", sections=task_sections)
    wildclaw_task("ok.md", id="fine")
    issues = validate(bench_root)
    errors = sorted((i.path.name, i.field, i.line) for i in issues if i.severity == "error")
    assert errors == [
        ("empty.md", "file", 1),
        ("latin1.md", "encoding", 3),
        ("noprompt.md", "Prompt", 8),
    ]
    with pytest.raises(TaskFormatError, match="and 2 more error"):
        load_tasks(bench_root)


def test_single_file_suite(wildclaw_task):
    path = wildclaw_task()
    [task] = load_tasks(path)
    assert task.source.path == path


def test_find_task_by_id_and_unique_prefix(dataclaw_real):
    tasks = load_tasks(dataclaw_real)
    assert find_task(tasks, "task_001").id == "task_001_comprehensive_decision_easy_easy001"
    assert find_task(tasks, "risk_assessment-hard-hard001").answer == 20.0
    with pytest.raises(UserError, match="ambiguous"):
        find_task(tasks, "risk_assessment")
    with pytest.raises(UserError, match="no task with id"):
        find_task(tasks, "task_999")


def test_fourfolder_root_missing_folders_is_not_mistaken(tmp_path: Path):
    (tmp_path / "workspaces" / "000001").mkdir(parents=True)
    (tmp_path / "workspaces" / "000001" / "notes.md").write_text("no front matter here\n")
    assert detect_format(tmp_path) is TaskFormat.FOURFOLDER
    [error] = validate(tmp_path)
    assert error.field == "intent"


def test_upstream_template_and_files_without_id_are_skipped_with_a_note(wildclaw_task, bench_root):
    wildclaw_task()
    # upstream ships tasks/task0_template.md (its id is a placeholder that is not a safe name)
    (bench_root / "tasks" / "task0_template.md").write_text(
        "---\nid: <category>_task_<N>_<slug>\nname: template\n---\n## Prompt\n\nx\n"
    )
    (bench_root / "tasks" / "notes.md").write_text("# design notes\n\nno front matter\n")
    suite = load_suite(bench_root)
    assert [t.id for t in suite.tasks] == ["01_Productivity_Flow_task_1_meeting_notes"]
    assert suite.errors == []
    notes = {(w.path.name, w.field) for w in suite.warnings}
    assert notes == {("task0_template.md", "file"), ("notes.md", "id")}
    assert all(w.message.startswith("skipped:") for w in suite.warnings)
    # named on its own, a file without an id is still an error
    with pytest.raises(TaskFormatError, match="does not start with `---`"):
        load_tasks(bench_root / "tasks" / "notes.md")
