"""DataClawBench reader on the real files (/work/shared/data/dataclawbench) and broken copies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawrig.errors import TaskFormatError
from clawrig.spec.task import GraderKind, TaskFormat
from clawrig.tasks.dataclaw import read_dataclaw_root, read_dataclaw_task_md
from clawrig.tasks.text import IssueCollector
from clawrig.testing.paths import SHARED

TASK_001 = "task_001_comprehensive_decision_easy_easy001"
TASK_373 = "task_373_hypothesis_verification_hard_hard001"


def _section(md: Path, name: str, nxt: str) -> str:
    """The text between ``## name`` and ``## nxt`` of a real task file (by hand)."""
    text = md.read_text(encoding="utf-8")
    return text.split(f"## {name}\n\n", 1)[1].split(f"\n\n## {nxt}", 1)[0]


@pytest.fixture(scope="module")
def real_tasks():
    issues = IssueCollector(strict=False)
    tasks = read_dataclaw_root(SHARED / "data" / "dataclawbench", issues)
    return {t.id: t for t in tasks}, issues


def test_all_57_gold_items_become_tasks(real_tasks, dataclaw_real):
    tasks, issues = real_tasks
    assert len(tasks) == 57
    assert issues.errors == []
    # the two items with an upstream task file take its id; the others category-level-id
    assert TASK_001 in tasks and TASK_373 in tasks
    assert "risk_assessment-hard-hard001" in tasks
    assert "international_comparison-hard-hard001" in tasks
    assert "comprehensive_decision-easy-easy001" not in tasks
    gold_count = len(list((dataclaw_real / "assets" / "qa_gold").glob("*/*.json")))
    assert gold_count == 57
    for task in tasks.values():
        assert task.format is TaskFormat.DATACLAW
        assert task.timeout_seconds == 1200
        assert task.grader.kind is GraderKind.JUDGE
        assert task.grader.judge_rubric


def test_task_001_english_single_answer(real_tasks, dataclaw_real):
    task = real_tasks[0][TASK_001]
    md = dataclaw_real / "tasks" / f"{TASK_001}.md"
    assert task.source.path == md
    assert task.name == "comprehensive_decision-easy-easy001"
    assert task.category == "comprehensive_decision"
    assert task.level == "easy"
    assert task.language == "en"
    assert task.answer == "Jiangsu Province"
    assert task.prompt == _section(md, "Prompt", "Expected Behavior")
    assert task.prompt.endswith("\n\nOnly use files under `./database/`.")
    assert task.guidelines.startswith('The answer must be "yes" or "no".')
    assert task.steps_num == 3 and len(task.steps) == 3
    assert list(task.milestones) == [
        "Enterprise with highest R&D investment ratio",
        "R&D investment ratio (%)",
        "Province of location",
    ]
    assert task.milestones["R&D investment ratio (%)"] == 934642.8
    assert task.grading_criteria == [
        "Final answer semantically matches the gold `answer`.",
        "Output format follows `guidelines`.",
    ]
    assert task.grader.judge_rubric.startswith("### Criterion 1: Single-answer Correctness")
    assert task.web_allowed is False
    # workspace_files: 19 database files, only 2 shipped here
    assert len(task.workspace.files) == 19
    assert task.workspace.files[0].dest == "database/bilingual_translation_english_chinese.json"
    assert len(task.workspace.missing) == 17
    assert dataclaw_real / "assets" / "database" / "internal_metrics.csv" not in (
        task.workspace.missing
    )
    assert task.metadata["task_number"] == 1


def test_task_373_chinese_list_answer(real_tasks, dataclaw_real):
    task = real_tasks[0][TASK_373]
    gold = json.loads(
        (dataclaw_real / "assets/qa_gold/hypothesis_verification/hard001.json").read_text("utf-8")
    )
    assert task.language == "zh"
    assert task.level == "hard"
    assert task.answer == [0.1142, -0.2132, 0.33]
    assert task.steps_num == 7
    assert list(task.milestones) == list(gold["milestone"])  # order kept
    assert list(task.milestones)[0] == "医药相关政策总数（条）"
    assert "N=3" in task.grader.judge_rubric
    assert task.metadata["task_number"] == 373


def test_items_without_task_file(real_tasks, dataclaw_real):
    tasks = real_tasks[0]
    task = tasks["enterprise_industry_policy_analysis-easy-easy067"]
    assert task.answer == "否"
    assert task.language == "zh"
    assert task.source.path == (
        dataclaw_real / "assets/qa_gold/enterprise_industry_policy_analysis/easy067.json"
    )
    # prompt built as upstream: question, guidelines, data-source sentence
    gold = json.loads(task.source.path.read_text("utf-8"))
    assert task.prompt == (
        f"{gold['question']}\n\nOutput guidelines:\n{gold['guidelines']}\n\n"
        "Only use files under `./database/`."
    )
    # workspace = every file under assets/database
    assert sorted(f.dest for f in task.workspace.files) == [
        "database/bilingual_translation_english_chinese.json",
        "database/internal_metrics.csv",
    ]
    assert task.workspace.is_present is False  # 17 upstream files are not downloaded

    web = tasks["international_comparison-hard-hard001"]
    assert web.web_allowed is True
    assert web.prompt.endswith("\n\nYou may use files under `./database/` and web search.")
    assert isinstance(web.answer, list) and len(web.answer) == 4
    assert "N=4" in web.grader.judge_rubric
    assert "total = (sum(part_i)) / 4" in web.grader.judge_rubric


def test_known_upstream_quirks_are_warnings(real_tasks):
    issues = real_tasks[1]
    steps = [w for w in issues.warnings if w.field == "steps_num"]
    assert sorted(w.path.name for w in steps) == ["hard011.json", "medium009.json"]
    assert all(w.path.parent.name == "risk_assessment" for w in steps)


def test_single_task_file(dataclaw_real):
    task = read_dataclaw_task_md(dataclaw_real / "tasks" / f"{TASK_373}.md")
    assert task.id == TASK_373
    assert task.answer == [0.1142, -0.2132, 0.33]


# ---------------------------------------------------------------- broken copies


@pytest.fixture
def dcb_copy(tmp_path, dataclaw_real, writable_copy) -> Path:
    return writable_copy(dataclaw_real, tmp_path / "dcb")


def test_rubric_n_differs_from_list_answer(dcb_copy):
    md = dcb_copy / "tasks" / f"{TASK_373}.md"
    text = md.read_text(encoding="utf-8")
    bad = "- The gold answer is a list with N=4 parts."
    text = text.replace("- The gold answer is a list with N=3 parts.", bad)
    md.write_text(text, encoding="utf-8")
    expected_line = text.split("\n").index(bad) + 1
    with pytest.raises(TaskFormatError) as err:
        read_dataclaw_task_md(md)
    assert err.value.path == md
    assert err.value.field == "LLM Judge Rubric"
    assert err.value.line == expected_line
    assert "N=4" in err.value.message and "3 parts" in err.value.message
    assert str(err.value).startswith(f"{md}:{expected_line}: LLM Judge Rubric: ")


def test_gold_list_answer_longer_than_rubric_n(dcb_copy):
    gold_path = dcb_copy / "assets/qa_gold/hypothesis_verification/hard001.json"
    gold = json.loads(gold_path.read_text("utf-8"))
    gold["answer"].append(0.5)
    gold_path.write_text(json.dumps(gold, ensure_ascii=False, indent=2), encoding="utf-8")
    issues = IssueCollector(strict=False)
    read_dataclaw_root(dcb_copy, issues)
    rubric_errors = [e for e in issues.errors if e.field == "LLM Judge Rubric"]
    md = dcb_copy / "tasks" / f"{TASK_373}.md"
    assert rubric_errors and all(e.path == md for e in rubric_errors)
    messages = " | ".join(e.message for e in rubric_errors)
    assert "N=3" in messages and "has 4 parts" in messages
    assert "gold answer [0.1142, -0.2132, 0.33] differs" in messages


def test_bad_gold_json_names_its_line(dcb_copy):
    gold_path = dcb_copy / "assets/qa_gold/risk_assessment/hard002.json"
    gold_path.write_text('{\n  "id": "hard002",\n  "question": \n}', encoding="utf-8")
    issues = IssueCollector(strict=False)
    tasks = read_dataclaw_root(dcb_copy, issues)
    assert len(tasks) == 56
    [error] = issues.errors
    assert (error.path, error.field, error.line) == (gold_path, "json", 4)


def test_task_file_without_gold_takes_answer_from_rubric(dcb_copy):
    (dcb_copy / "assets/qa_gold/hypothesis_verification/hard001.json").unlink()
    issues = IssueCollector(strict=False)
    tasks = {t.id: t for t in read_dataclaw_root(dcb_copy, issues)}
    assert len(tasks) == 57
    task = tasks[TASK_373]
    assert task.answer == [0.1142, -0.2132, 0.33]
    assert task.language == "zh"
    assert task.level == "hard"
    assert task.guidelines.startswith("依次回答出台政策省份的相关系数")
    assert issues.errors == []
    assert any(w.field == "gold_file" for w in issues.warnings)


def test_a_run_of_some_tasks_is_warned_of_theirs_only(dataclaw_real, caplog):
    """helper-174: a run of task_001 alone was warned of task_373's missing workspace files and
    of two other items' steps_num. Only the chosen tasks' files' warnings are logged, and the
    suite's own (its shared database), whose file is no task's."""
    import logging

    from clawrig.tasks.registry import load_suite, load_tasks

    suite = load_suite(dataclaw_real)
    every = [str(w) for w in suite.warnings]
    assert any(TASK_373 in w for w in every) and any("hard011.json" in w for w in every)
    with caplog.at_level(logging.WARNING, logger="clawrig.tasks"):
        chosen = load_tasks(
            dataclaw_real, select=lambda tasks: [t for t in tasks if t.id.startswith("task_001_")]
        )
    assert [t.id for t in chosen] == [TASK_001]
    logged = [r.getMessage() for r in caplog.records]
    # the chosen task's own (its task file) and the suite's (the database folder, no task's)
    want = [w for w in every if f"{TASK_001}.md" in w or w.startswith(f"{dataclaw_real}: ")]
    assert len(want) == 2 and logged == want
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="clawrig.tasks"):  # no choice: all of them
        load_tasks(dataclaw_real)
    assert [r.getMessage() for r in caplog.records] == every
