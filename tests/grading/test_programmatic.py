"""Programmatic graders run in a real bwrap sandbox: crashes, timeouts, no output and non-JSON
output are grading errors (never a 0); a grader cannot read the real key; the score rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawrig.grading.programmatic import last_json_object, run_grader, score_from_result
from clawrig.runner.trial import grader_env
from clawrig.sandbox import SandboxConfig, create_sandbox
from clawrig.spec.task import Grader, GraderKind, SourceRef, Task, TaskFormat

pytestmark = pytest.mark.sandbox


def _task(source: str, env: list[str] | None = None) -> Task:
    return Task(
        id="g",
        prompt="p",
        format=TaskFormat.WILDCLAW,
        env=env or [],
        source=SourceRef(path=Path("/suite/tasks/g.md"), line=12),
        grader=Grader(
            kind=GraderKind.PROGRAMMATIC,
            source=source,
            origin=SourceRef(path=Path("/suite/tasks/g.md"), line=30),
        ),
    )


@pytest.fixture
async def sandbox(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "out.txt").write_text("42\n")
    sb = create_sandbox("bwrap", SandboxConfig(workspace_dir=tmp_path / "ws"))
    await sb.start()
    yield sb
    await sb.stop()


async def test_a_good_grader_scores_from_overall_score(sandbox):
    src = (
        "import os\ndef grade(transcript=None, workspace_path='/tmp_workspace', **kw):\n"
        "    print('noise'); print({'not': 'json'})\n"
        "    v = open(os.path.join(workspace_path, 'out.txt')).read().strip()\n"
        "    return {'value_ok': float(v == '42'), 'n_entries': len(transcript),"
        " 'overall_score': 0.75}\n"
    )
    score = await run_grader(sandbox, _task(src))
    assert score.error is None and score.score == 0.75
    assert score.subscores == {"value_ok": 1.0, "n_entries": 0, "overall_score": 0.75}


async def test_an_overall_score_that_is_no_number_is_said_to_be_ignored(sandbox):
    """helper-178: a grader's ``overall_score: "high"`` fell back to the mean of its numeric
    entries (the rule, as WildClawBench's) with nothing saying the given one was not used."""
    src = "def grade(**kw):\n    return {'a': 1.0, 'b': 0.5, 'overall_score': 'high'}\n"
    score = await run_grader(sandbox, _task(src))
    assert score.error is None and score.score == (1.0 + 0.5) / 2
    assert score.details["overall_score_ignored"] == (
        "overall_score='high' is no number: the score is the mean of the grader's numeric entries"
    )
    numeric = await run_grader(
        sandbox, _task("def grade(**kw):\n    return {'overall_score': 1}\n")
    )
    assert numeric.score == 1.0 and "overall_score_ignored" not in numeric.details


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def grade(**kw):\n    raise ValueError('boom')\n", "grader crashed: ValueError: boom"),
        ("import time\ndef grade(**kw):\n    time.sleep(30)\n", "grader timed out after 1 s"),
        (
            "import sys, os\ndef grade(**kw):\n    sys.stdout.flush(); os._exit(0)\n",
            "grader printed no JSON object",
        ),
        ("def grade(**kw):\n    return 'great job'\n", "grader printed no JSON object"),
        ("def grade(**kw):\n    return {'overall_score': 1.7}\n", "no score in [0,1]"),
        ("def grade(**kw):\n    return {'note': 'no numbers'}\n", "no score in [0,1]"),
        # what it returned, as it returned it: it read "(overall_score=None)" (helper-135)
        (
            "def grade(**kw):\n    return {'overall_score': '1.0'}\n",
            "grader returned no score in [0,1] (overall_score='1.0')",
        ),
        ("import numpy\ndef grade(**kw):\n    return {}\n", "needs the Python module 'numpy'"),
        ("def nothing():\n    pass\n", "defines no grade()"),
    ],
)
async def test_broken_graders_are_grading_errors_not_zero(sandbox, source, message):
    score = await run_grader(sandbox, _task(source), timeout_s=1)
    assert score.score is None and score.error is not None
    assert message in score.error


async def test_grader_crash_names_the_task_file_line(sandbox):
    score = await run_grader(sandbox, _task("def grade(**kw):\n    return 1/0\n"))
    assert "ZeroDivisionError" in score.error
    # the block starts at line 30 of the task file; `return 1/0` is its second line
    assert 'File "/suite/tasks/g.md", line 31, in grade' in score.details["stderr"]


async def test_grader_sees_a_placeholder_not_the_real_key(sandbox, monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-real-secret-999")
    src = (
        "import os, json\ndef grade(**kw):\n"
        "    leaked = 'sk-real-secret-999' in json.dumps(dict(os.environ))\n"
        "    return {'key': os.environ['OPENROUTER_API_KEY'], 'leaked': float(leaked),"
        " 'overall_score': 1.0}\n"
    )
    score = await run_grader(
        sandbox,
        _task(src, env=["OPENROUTER_API_KEY", "JUDGE_MODEL"]),
        env=grader_env(_task(src, env=["OPENROUTER_API_KEY"])),
    )
    assert score.subscores["key"] == "clawrig-placeholder-key"
    assert score.subscores["leaked"] == 0.0


def test_score_rules_follow_upstream():
    assert score_from_result({"a": 1.0, "overall_score": 0.2}) == 0.2
    assert score_from_result({"a": 1.0, "b": 0.5, "label": "x"}) == 0.75  # mean of numbers
    assert score_from_result({"label": "x"}) is None
    assert last_json_object('x\n{"a": 1}\n{"b": 2}\ntrailing') == {"b": 2}
    assert last_json_object('result: {"a": {"b": 1}} done') == {"a": {"b": 1}}
    assert last_json_object("nothing here") is None


async def test_a_forked_and_a_fresh_runner_read_and_report_alike(sandbox):
    """The grader's runner as a fork of the supervisor (json's C codec handed over, the json
    package never imported) and on a fresh interpreter (json) read the transcript and write
    the result alike: non-ASCII text, a tiny float, nested values, a line that is no JSON,
    and a value json cannot write (written as its ``str``, ``default=str``)."""
    from clawrig.sandbox.paths import PATHS

    lines = [
        '{"type": "message", "text": "Zo\\u00eb \\u2713 \\ud83d\\ude00", "n": 1.5e-07}',
        "not json {",
        "",
        '{"type": "note", "text": null, "n": [1, 2]}',
    ]
    await sandbox.write_file(PATHS.transcript, "\n".join(lines) + "\n")
    src = (
        "import sys, datetime\n"
        "def grade(transcript=None, **kw):\n"
        "    return {'overall_score': 0.25, 'texts': [e['text'] for e in transcript],\n"
        "            'n': [e['n'] for e in transcript], 'when': datetime.date(2024, 1, 2),\n"
        "            'nested': {'a': [1, None, True, 2.5]},\n"
        # a fork has the supervisor's command line (-I -S), a fresh runner its own (-I -B)
        "            'forked': open('/proc/self/cmdline').read().split(chr(0))[1:3] != "
        "['-I', '-B'],\n"
        "            'json_imported': 'json' in sys.modules}\n"
    )
    exe = (await sandbox.exec(["sh", "-c", "command -v python3"])).stdout.strip()
    await sandbox.exec(["ln", "-s", exe, "/tmp_workspace/py3"])  # another path: a fresh start
    forked = await run_grader(sandbox, _task(src))
    fresh = await run_grader(sandbox, _task(src), python="/tmp_workspace/py3")
    expected = {
        "overall_score": 0.25,
        "texts": ["Zo\u00eb \u2713 \U0001f600", None],
        "n": [1.5e-07, [1, 2]],
        "when": "2024-01-02",
        "nested": {"a": [1, None, True, 2.5]},
    }
    assert forked.error is None and fresh.error is None, (forked.error, fresh.error)
    assert forked.subscores == expected | {"forked": True, "json_imported": False}
    assert fresh.subscores == expected | {"forked": False, "json_imported": True}
    # the text as json.dumps writes it (ASCII escapes, its separators and float spelling)
    for score, flags in ((forked, (True, False)), (fresh, (False, True))):
        said = expected | dict(zip(("forked", "json_imported"), flags, strict=True))
        assert score.details["stdout"].splitlines()[-1] == json.dumps(said)
