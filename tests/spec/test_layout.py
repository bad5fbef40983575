"""spec/layout.py owns every file and folder name of a trial and a job; the files users read
have typed models (score.json, usage.json, formatted_dialog.json, result.json, the summary)."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from clawrig.spec.layout import JobPaths, TrialPaths, unfinished_trial_name
from clawrig.spec.summary import JobSummary
from clawrig.spec.trial import DialogFile, ScoreFile, TrialResult, Usage

SRC = Path(__file__).resolve().parents[2] / "src" / "clawrig"

# spelled as string literals anywhere in src: only spec/layout.py may do it
OWNED_NAMES = [
    "score.json",
    "result.json",
    "usage.json",
    "process_score.json",
    "agent.log",
    "formatted_dialog.json",
    "judge_process_chat.jsonl",
    "end_state",
    "end_state_deleted.json",
    "end_state_dropped.json",
    "task_output",
    ".clawrig.lock",
    "_retried",
    "model_calls.jsonl",
    "judge_chat.jsonl",
    "egress.jsonl",
    "web_calls.jsonl",
    "web_blobs",
    "openclaw_chat.jsonl",
]


def _spelled_in(name: str) -> set[str]:
    """Modules that spell ``name`` as a string literal (a name without a dot, like a folder,
    only where it is joined to a path: ``/ "end_state"``, so a dict key of that name is not
    counted), and the layout's own ``NAME = "name"``."""
    quoted = r"""["']""" + re.escape(name) + r"""["']"""
    quoted = re.compile(quoted if "." in name else r"(/\s*|= )" + quoted)
    return {
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if quoted.search(p.read_text(encoding="utf-8"))
    }


@pytest.mark.parametrize("name", OWNED_NAMES)
def test_trial_and_job_file_names_are_spelled_only_in_the_layout(name):
    assert _spelled_in(name) == {"spec/layout.py"}


DOCS = Path(__file__).resolve().parents[2] / "docs" / "outputs.md"


def _trial_file_names() -> list[str]:
    """Every file and folder name :class:`TrialPaths` defines (its upper-case str constants)."""
    return sorted(v for k, v in vars(TrialPaths).items() if k.isupper() and isinstance(v, str))


def test_every_trial_file_is_documented_in_the_trial_folder_table():
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## A trial folder", 1)[1].split("\n## ", 1)[0]
    # a name counts where it is a whole path component of a `quoted` path (subagents/<key>.jsonl)
    documented = {
        part for quoted in re.findall(r"`([^`]+)`", section) for part in quoted.split("/")
    }
    names = _trial_file_names()
    assert "egress.jsonl" in names and "end_state_dropped.json" in names
    assert [n for n in names if n not in documented] == []


def test_progress_and_summary_names_are_spelled_only_in_the_layout():
    pattern = re.compile(r"""f?["'](progress|summary)_""")
    spelled = {
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if pattern.search(p.read_text(encoding="utf-8"))
    }
    assert spelled == {"spec/layout.py"}


def test_a_trial_folder_being_written_names_its_trial():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        made = Path(tempfile.mkdtemp(prefix=".tmp-openai_gpt-5_2026-12-06T09-01-02-", dir=d))
        assert unfinished_trial_name(made.name) == "openai_gpt-5_2026-12-06T09-01-02"
    assert unfinished_trial_name("openai_gpt-5_2026-12-06T09-01-02") is None


def test_job_paths_name_the_files_of_a_job(tmp_path):
    paths = JobPaths(tmp_path)
    assert paths.summary("openrouter/a/b") == tmp_path / "summary_openrouter_a_b.json"
    assert paths.progress("m") == tmp_path / "progress_m.json"
    assert paths.retried_trial("t1", "x") == tmp_path / "_retried" / "t1__x"
    (tmp_path / "t1" / "run_a").mkdir(parents=True)
    (tmp_path / "t1" / "run_a" / "result.json").write_text("{}")
    (tmp_path / "t1" / ".tmp-run_b-1").mkdir()
    (tmp_path / "t1" / ".tmp-run_b-1" / "result.json").write_text("{}")
    (tmp_path / "_retried" / "t1__x").mkdir(parents=True)
    (tmp_path / "_retried" / "t1__x" / "result.json").write_text("{}")
    assert paths.trial_results() == [tmp_path / "t1" / "run_a" / "result.json"]


def test_a_demo_trial_folder_is_the_layout_and_its_files_parse(demo_oracle_job):
    """Every entry of every trial folder is a name of TrialPaths; the per-trial files users
    read parse with their models and agree with result.json; the summary parses."""
    names = {v for k, v in vars(TrialPaths).items() if k.isupper()}
    folders = [rj.parent for rj in JobPaths(demo_oracle_job).trial_results()]
    assert len(folders) == 10
    for folder in folders:
        assert {p.name for p in folder.iterdir()} <= names
        paths = TrialPaths(folder)
        result = TrialResult.model_validate_json(paths.result.read_text())
        score = ScoreFile.model_validate_json(paths.score.read_text())
        assert (score.task_id, score.score, score.subscores) == (
            result.task_id,
            result.score.score,
            result.score.subscores,
        )
        assert Usage.model_validate_json(paths.usage.read_text()) == result.usage
        dialog = DialogFile.model_validate_json(paths.dialog.read_text())
        assert dialog.formatted_dialog[0]["role"] == "user" and dialog.tool_schema
        assert result.config is not None and result.config.agent == "oracle"
    raw = json.loads(JobPaths(demo_oracle_job).summary("oracle").read_text())
    summary = JobSummary.model_validate(raw)
    assert summary.to_json()["pass"] == raw["pass"]
    assert [row.trial for row in summary.tasks] == sorted(
        f"{f.parent.name}/{f.name}" for f in folders
    )


@pytest.mark.parametrize(
    "rest",
    [
        {"formatted_dialog": [{"role": "user", "content": "héllo\nthere"}]},
        {"formatted_dialog": []},
        {"a": {}, "b": [1, 1.0, True, None]},
        {"formatted_dialog": [{"role": "tool", "content": "bad name \udcff"}]},  # not UTF-8
    ],
)
def test_a_trial_folders_json_reusing_its_tool_schemas_text_is_the_same_text(rest):
    from clawrig.spec.layout import json_text_reusing

    schema = [{"type": "function", "function": {"name": "exec", "description": "ünï\ttab"}}]
    flags = [
        {"type": "function", "function": {"name": "exec", "strict": flag}} for flag in (1, True)
    ]
    for tools in (schema, json.loads(json.dumps(schema)), *flags, schema):
        value = {**rest, "tool_schema": tools}
        try:  # what json.dumps writes (every non-ASCII escaped when a lone surrogate is in)
            expected = json.dumps(value, ensure_ascii=False, indent=2)
            expected.encode("utf-8")
        except UnicodeEncodeError:
            expected = json.dumps(value, indent=2)
        assert json_text_reusing(value, "tool_schema") == expected


def test_json_text_reusing_by_a_callers_key_gives_each_keys_own_text():
    from clawrig.spec.layout import json_text_reusing
    from clawrig.tools.catalog import tool_schema

    for profile in ("coding", "minimal", "coding", "full"):
        for dialog in ([], [{"role": "user", "content": "héllo"}]):
            value = {"formatted_dialog": dialog, "tool_schema": tool_schema(profile)}
            expected = json.dumps(value, ensure_ascii=False, indent=2)
            got = json_text_reusing(value, "tool_schema", key=f"tool_schema:{profile}")
            assert got == expected


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, 1.0, True, None, "é\u2028\x7f\x00\t"], "b": {"c": {}}, "d": []},
        [{"big": 2**70, "neg": -3, "f": 0.1 + 0.2, "t": (1, 2)}],
        {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")},
        {3: "int key", 1.5: "float key", True: "bool key", "path": Path("/tmp/x")},
        {"deep": [[[[{"x": [1]}]]]]},
        "just a string",
        7,
    ],
)
def test_indented_json_is_json_dumps_text(value):
    from clawrig.spec.layout import indented_json, json_text

    expected = json.dumps(value, ensure_ascii=False, indent=2, default=str)
    assert indented_json(value) == expected
    assert json_text(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        {"name": "bad \udcff"},  # a lone surrogate: UTF-8 cannot hold it
        {"b": b"\xff"},  # bytes: json's default=str spelling
        {None: 1, "x": "None"},  # json writes the key None as "null"
    ],
)
def test_json_text_of_what_the_fast_writer_cannot_spell_is_json_dumps(value):
    from clawrig.spec.layout import indented_json, json_text

    assert indented_json(value) is None
    try:
        expected = json.dumps(value, ensure_ascii=False, indent=2, default=str)
        expected.encode("utf-8")
    except UnicodeEncodeError:
        expected = json.dumps(value, indent=2, default=str)
    assert json_text(value) == expected


def test_a_models_json_text_is_its_json_dump_indented(tmp_path):
    from clawrig.spec.layout import model_json_text
    from clawrig.spec.trial import Score, TrialResult, Usage

    result = TrialResult(
        task_id="t",
        trial_id="m_1",
        model="m",
        agent="native",
        sandbox="bwrap",
        score=Score(score=0.5, details={"é": [1, 2.0], "tiny": 1e-300}),
        usage=Usage(input_tokens=3, output_tokens=4, cost_usd=0.25),
    )
    text = model_json_text(result)
    assert json.loads(text) == json.loads(json.dumps(result.model_dump(mode="json")))
    assert TrialResult.model_validate_json(text) == result
    assert text.startswith('{\n  "')


def test_numbers_of_edited_records_are_read_as_finite_floats_or_none():
    """helper-183: a 400-digit integer (a grader echoing the agent's number, an edited cost)
    made math.isfinite raise OverflowError: an episode's sub-scores, the viewer's pages and
    its jobs list were an error (HTTP 500)."""
    from clawrig.spec.trial import finite_float

    huge = 10**400
    assert [finite_float(v) for v in (3, 0.5, -2, huge, -huge, math.nan, math.inf)] == [
        3.0, 0.5, -2.0, None, None, None, None,
    ]  # fmt: skip
    assert finite_float(True) is None and finite_float(True, bools=True) == 1.0
    assert finite_float("1") is None and finite_float(None) is None


def test_a_task_folder_named_like_a_summary_is_no_job_record(tmp_path):
    """helper-183: a task `summary_notes.json` (a valid id) has a folder of that name in the
    job folder: it was taken for a summary (an RL folder then refused for good as a run
    job's; the viewer showed a job of no trials)."""
    (tmp_path / "summary_notes.json").mkdir()
    (tmp_path / "progress_x.json").mkdir()
    (tmp_path / "summary_m.json").write_text("{}")
    paths = JobPaths(tmp_path)
    assert paths.summaries() == [tmp_path / "summary_m.json"] and paths.progresses() == []


def test_removing_a_link_removes_the_link_only(tmp_path):
    """helper-183: remove_tree of a link went on, when rmtree refused it, to `chmod -R` (not
    root), which follows a link named on its command line: a folder outside had its modes
    changed."""
    from clawrig.leftovers import remove_tree

    target = tmp_path / "target"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "secret").write_text("s")
    os.chmod(target / "sub" / "secret", 0o600)
    link = tmp_path / "link"
    link.symlink_to(target)
    remove_tree(link)
    assert not os.path.lexists(link) and (target / "sub" / "secret").read_text() == "s"
    assert (target / "sub" / "secret").stat().st_mode & 0o777 == 0o600
