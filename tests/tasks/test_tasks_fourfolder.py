"""Four-folder reader, on the real worked sample (/work/shared/examples/fourfolder) and on
copies of it broken or varied on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawrig.errors import TaskFormatError
from clawrig.spec.task import GraderKind, TaskFormat
from clawrig.tasks.fourfolder import read_fourfolder
from clawrig.tasks.text import IssueCollector


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _dump(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")


@pytest.fixture
def sample(tmp_path, fourfolder_real, writable_copy) -> Path:
    return writable_copy(fourfolder_real, tmp_path / "set")


def test_reads_the_real_sample(fourfolder_real):
    [task] = read_fourfolder(fourfolder_real)
    intent = _load(fourfolder_real / "intent" / "000015.json")
    datapoint = _load(fourfolder_real / "datapoints" / "000015.json")
    evaluator = fourfolder_real / "evaluators" / "evaluator_000015.py"

    assert task.id == "000015"
    assert task.format is TaskFormat.FOURFOLDER
    assert task.name == "Scholar Coauthorship Chain"
    assert task.category == "04_Search_Retrieval"
    assert task.level == "easy"
    assert task.language == "en"
    assert task.timeout_seconds == 600
    assert task.prompt == intent["prompt"]
    assert task.expected_behavior.startswith("Load the graph, run BFS from Vikram Shah")
    assert task.grading_criteria == [
        "Results file exists with a heading (0.10)",
        "Chain endpoints match (A, B) (0.30)",
        "Chain is a valid path and its length equals the BFS shortest (0.60)",
    ]
    assert task.grader.kind is GraderKind.PROGRAMMATIC
    assert task.grader.source == evaluator.read_text(encoding="utf-8")
    assert task.grader.origin.path == evaluator
    assert task.grader.origin.line == 1
    assert task.grader.stdlib_only is True
    assert task.expected_reward == 1.0
    # its recorded tools include the web's, so --web on reaches it
    names = {t["function"]["name"] for t in datapoint["tool_schema"]}
    assert {"web_search", "web_fetch"} <= names and task.web_allowed is True
    # the golden workspace, read with ast from the evaluator (not executed)
    assert sorted(task.golden_workspace) == ["coauthorship.json", "results/results.md"]
    assert task.golden_workspace["results/results.md"].text == (
        "# shortest\nVikram Shah – Berta Alonso – Saif Hamdan\n"
    )
    graph = json.loads(task.golden_workspace["coauthorship.json"].text)
    assert len(graph["authors"]) == 10 and len(graph["edges"]) == 11
    # gt from the reference payload, JSON value serialised with indent=2, non-ASCII kept
    gt_text = task.workspace.gt_files["shortest_path_gt.json"].text
    assert gt_text.startswith('{\n  "a": "Vikram Shah",\n  "b": "Saif Hamdan",\n')
    assert '"shortest_length": 2' in gt_text
    assert list(task.workspace.gt_files) == ["shortest_path_gt.json"]
    # the optional fifth folder is the initial workspace
    assert task.workspace.exec_dir == fourfolder_real / "workspaces" / "000015"
    assert task.workspace.is_present
    # golden dialog: 10 messages, 4 tool calls (datapoint statistics), 17 tools
    assert len(task.golden_dialog) == 10
    assert sum(len(m.get("tool_calls") or []) for m in task.golden_dialog) == 4
    assert task.golden_dialog == datapoint["formatted_dialog"]
    assert len(task.golden_tool_schema) == 17
    assert task.metadata["golden_workspace_files"] == ["coauthorship.json", "results/results.md"]


def test_intent_and_dialog_variants(sample):
    intent_path = sample / "intent" / "000015.json"
    intent = _load(intent_path)
    intent["difficulty"] = intent.pop("tier")
    intent["expected_behaviour"] = intent.pop("expected_behavior")
    intent["grading_criteria"] = "- first check\n- second check"
    del intent["timeout_seconds"]
    _dump(intent_path, intent)
    dp_path = sample / "datapoints" / "000015.json"
    datapoint = _load(dp_path)
    dialog = datapoint.pop("formatted_dialog")
    datapoint["messages"] = dialog
    _dump(dp_path, datapoint)

    [task] = read_fourfolder(sample)
    assert task.level == "easy"
    assert task.expected_behavior.startswith("Load the graph")
    assert task.grading_criteria == ["first check", "second check"]
    assert task.timeout_seconds == 600
    assert task.golden_dialog == dialog

    del datapoint["messages"]
    datapoint["conversation"] = {"formatted_dialog": dialog}
    _dump(dp_path, datapoint)
    [task] = read_fourfolder(sample)
    assert task.golden_dialog == dialog


def test_evaluator_is_not_executed(sample, tmp_path):
    sentinel = tmp_path / "executed"
    evaluator = sample / "evaluators" / "evaluator_000015.py"
    source = evaluator.read_text(encoding="utf-8")
    evaluator.write_text(f"open({str(sentinel)!r}, 'w').write('ran')\n" + source, encoding="utf-8")
    [task] = read_fourfolder(sample)
    assert task.expected_reward == 1.0
    assert not sentinel.exists()


def test_below_one_expected_reward(sample):
    payload_path = sample / "reference_payloads" / "reference_payload_000015.json"
    payload = _load(payload_path)
    payload["expected_reward"] = 0.96
    _dump(payload_path, payload)
    evaluator = sample / "evaluators" / "evaluator_000015.py"
    source = evaluator.read_text(encoding="utf-8")
    evaluator.write_text(
        source.replace("EXPECTED_REWARD = 1.0", "EXPECTED_REWARD = 0.96"), encoding="utf-8"
    )
    [task] = read_fourfolder(sample)
    assert task.expected_reward == 0.96


def test_expected_reward_mismatch_is_an_error(sample):
    payload_path = sample / "reference_payloads" / "reference_payload_000015.json"
    payload = _load(payload_path)
    payload["expected_reward"] = 0.5
    _dump(payload_path, payload)
    with pytest.raises(TaskFormatError) as err:
        read_fourfolder(sample)
    assert err.value.path == payload_path
    assert err.value.field == "expected_reward"
    expected_line = payload_path.read_text().split("\n").index('  "expected_reward": 0.5,') + 1
    assert err.value.line == expected_line
    assert "EXPECTED_REWARD 1.0" in err.value.message


def test_id_in_three_of_four_folders_names_the_missing_file(sample):
    (sample / "evaluators" / "evaluator_000015.py").unlink()
    with pytest.raises(TaskFormatError) as err:
        read_fourfolder(sample)
    assert err.value.field == "id"
    assert "missing evaluators/evaluator_000015.py" in err.value.message
    assert str(sample) in str(err.value)
    # collecting mode: the same error, no task
    issues = IssueCollector(strict=False)
    assert read_fourfolder(sample, issues) == []
    [error] = issues.errors
    assert "evaluators/evaluator_000015.py" in error.message


def test_file_id_must_match_its_name(sample):
    intent_path = sample / "intent" / "000015.json"
    intent = _load(intent_path)
    intent["id"] = "000016"
    _dump(intent_path, intent)
    with pytest.raises(TaskFormatError) as err:
        read_fourfolder(sample)
    assert (err.value.path, err.value.field, err.value.line) == (intent_path, "id", 2)


def test_evaluator_problems_are_collected(sample):
    evaluator = sample / "evaluators" / "evaluator_000015.py"
    source = evaluator.read_text(encoding="utf-8")
    source = source.replace("import json\n", "import json\nimport requests\n")
    source = source.replace("EXPECTED_REWARD = 1.0", "EXPECTED_REWARD = compute()")
    evaluator.write_text(source, encoding="utf-8")
    issues = IssueCollector(strict=False)
    read_fourfolder(sample, issues)
    by_field = {e.field: e for e in issues.errors}
    assert set(by_field) == {"imports", "EXPECTED_REWARD"}
    imports = by_field["imports"]
    assert imports.message == (
        "non-standard-library modules: requests (evaluators must be stdlib only)"
    )
    assert imports.line == source.split("\n").index("import requests") + 1
    assert by_field["EXPECTED_REWARD"].line == (
        source.split("\n").index("EXPECTED_REWARD = compute()") + 1
    )


def test_evaluator_syntax_error_names_its_line(sample):
    evaluator = sample / "evaluators" / "evaluator_000015.py"
    lines = evaluator.read_text(encoding="utf-8").split("\n")
    at = lines.index('def grade(workspace_path="/tmp_workspace", transcript=None, **kwargs):')
    lines[at] = "def grade(workspace_path=:"
    evaluator.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(TaskFormatError) as err:
        read_fourfolder(sample)
    assert (err.value.path, err.value.field, err.value.line) == (evaluator, "source", at + 1)


def test_no_workspaces_folder_marks_workspace_missing(sample):
    import shutil

    shutil.rmtree(sample / "workspaces")
    issues = IssueCollector(strict=False)
    [task] = read_fourfolder(sample, issues)
    assert task.workspace.missing == [sample / "workspaces" / "000015"]
    assert [w.field for w in issues.warnings] == ["workspaces"]
    assert issues.errors == []


def test_json_with_bom_is_read_and_latin1_is_refused(sample):
    intent_path = sample / "intent" / "000015.json"
    raw = intent_path.read_bytes()
    intent_path.write_bytes(b"\xef\xbb\xbf" + raw)
    [task] = read_fourfolder(sample)
    assert task.name == "Scholar Coauthorship Chain"

    text = raw.decode("utf-8").replace("Scholar Coauthorship Chain", "Scholar Coauthorship Café")
    data = text.encode("latin-1", errors="replace")
    intent_path.write_bytes(data)
    with pytest.raises(TaskFormatError) as err:
        read_fourfolder(sample)
    assert err.value.path == intent_path
    assert err.value.field == "encoding"
    offset = data.index(b"\xe9")  # the é of Café
    assert f"byte offset {offset}" in err.value.message


def test_a_sample_whose_tools_lack_the_web_does_not_get_it(sample):
    path = sample / "datapoints" / "000015.json"
    data = _load(path)
    data["tool_schema"] = [
        t for t in data["tool_schema"] if t["function"]["name"] not in ("web_search", "web_fetch")
    ]
    _dump(path, data)
    [task] = read_fourfolder(sample)
    assert task.web_allowed is False


def test_a_datapoint_without_a_tool_schema_loads_without_the_web(sample):
    """``tool_schema`` is optional: a datapoint without it is read (no recorded tools, so no
    web), not a crash (it was a TypeError traceback from ``clawrig tasks list``)."""
    path = sample / "datapoints" / "000015.json"
    data = _load(path)
    del data["tool_schema"]
    _dump(path, data)
    [task] = read_fourfolder(sample)
    assert task.golden_tool_schema is None and task.web_allowed is False


def test_a_service_fixture_file_missing_from_the_workspace_is_a_warning(sample):
    """A service whose fixtures name a workspace file the sample does not ship: a warning
    naming the intent's field (``tasks validate`` said nothing; every trial is a setup
    error), not an error (it stopped the whole set from loading: helper-119)."""
    intent_path = sample / "intent" / "000015.json"
    intent = _load(intent_path)
    intent["services"] = [{"kind": "gmail", "fixtures": "fixtures/inbox.json"}]
    _dump(intent_path, intent)
    issues = IssueCollector(strict=False)
    [task] = read_fourfolder(sample, issues)
    [warning] = [w for w in issues.warnings if w.field == "services[0].fixtures"]
    assert warning.path == intent_path
    assert "names fixtures/inbox.json, which is not a file in" in warning.message
    inbox = sample / "workspaces" / "000015" / "fixtures" / "inbox.json"
    inbox.parent.mkdir()
    inbox.write_text('{"messages": []}')
    issues = IssueCollector(strict=False)
    [task] = read_fourfolder(sample, issues)
    assert not [w for w in issues.warnings if w.field == "services[0].fixtures"]
    assert task.services[0].fixtures == {"$file": "fixtures/inbox.json"}


def test_a_deeply_nested_expected_reward_is_one_error(sample):
    """500 chained terms parse, but ast.unparse of them raised RecursionError (helper-128)."""
    evaluator = sample / "evaluators" / "evaluator_000015.py"
    source = evaluator.read_text(encoding="utf-8")
    deep = "EXPECTED_REWARD = " + "+".join(["0"] * 500)
    evaluator.write_text(source.replace("EXPECTED_REWARD = 1.0", deep), encoding="utf-8")
    issues = IssueCollector(strict=False)
    read_fourfolder(sample, issues)
    [error] = [e for e in issues.errors if e.field == "EXPECTED_REWARD"]
    assert error.message.startswith("must be a literal number in [0, 1], got ")
    shown = error.message.removeprefix("must be a literal number in [0, 1], got ")
    assert shown in ("an expression too deeply nested to show", ("0 + " * 20)[:79] + "…")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100000 + "]" * 100000, "not valid JSON: nested too deeply"),
        ('{"timeout_seconds": ' + "9" * 5000 + "}", "not valid JSON: Exceeds the limit"),
        # (its column said: "Unterminated string starting at" ended there, helper-206)
        (
            '{\n  "id": "000015",\n  "prompt": "cut',
            "not valid JSON: Unterminated string starting at (column 13)",
        ),
    ],
)
def test_an_intent_file_python_cannot_hold_is_one_error(sample, text, message):
    """A red-team finding (helper-130): JSON nested past Python's limit, or an integer past its
    4,300-digit conversion limit, was a traceback in every command reading the set."""
    intent = sample / "intent" / "000015.json"
    intent.write_text(text, encoding="utf-8")
    issues = IssueCollector(strict=False)
    read_fourfolder(sample, issues)
    [err] = [e for e in issues.errors if e.path == intent]
    assert err.field == "json" and err.message.startswith(message), err.message
