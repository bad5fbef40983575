"""``clawrig verify`` end to end: real four-folder files, real bwrap sandboxes, the real CLI.

The demo suite must pass. A planted set holds one copy of demo sample 000015 per problem
(grader loopholes, lint problems, an unreadable sample) next to an untouched control copy;
each problem must be reported on its own sample and nowhere else. WildClawBench task files
(graders only, no golden) get the empty-rollout question and gt lint.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from verify_helpers import DEMO, copy_sample, edit_json, replace_once, run

pytestmark = pytest.mark.sandbox

THRESHOLD = 0.5


def _payload(sample_id: str) -> dict:
    path = DEMO / "reference_payloads" / f"reference_payload_{sample_id}.json"
    return json.loads(path.read_text(encoding="utf-8"))


def test_demo_suite_passes() -> None:
    proc = run("verify", DEMO, "--json", "-p", "4")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    report = json.loads(proc.stdout)
    ids = sorted(p.stem for p in (DEMO / "intent").glob("*.json"))
    assert [s["id"] for s in report["samples"]] == ids
    assert report["ok"] is True and report["counts"] == {"pass": len(ids), "warn": 0, "fail": 0}
    for sample in report["samples"]:
        expected = _payload(sample["id"])["expected_reward"]
        assert sample["expected_reward"] == expected
        assert abs(sample["scores"]["golden"] - expected) < 1e-6, sample
        assert abs(sample["scores"]["oracle"] - expected) < 1e-6, sample
        assert sample["scores"]["empty"] < THRESHOLD
        if "removed" in sample["scores"]:
            assert sample["scores"]["removed"] < THRESHOLD
            assert sample["scores"]["corrupted"] < THRESHOLD
    # 000004 ships an honest ceiling of 0.98 and must be reproduced, not rounded to 1
    assert report["samples"][ids.index("000004")]["scores"]["golden"] == 0.98
    # 000005 and 000006 write no result files: only the empty rollout applies
    for sample_id in ("000005", "000006"):
        scores = report["samples"][ids.index(sample_id)]["scores"]
        assert set(scores) == {"golden", "oracle", "empty"}


# ------------------------------------------------------------------------------ planted set

GRADER_FORMULA = (
    '    scores["overall_score"] = round(0.10 * scores["file_has_heading"] + 0.30 * '
    'scores["endpoints_match"]\n'
    '                                    + 0.60 * scores["valid_shortest"], 6)\n'
)
EMPTY_BRANCH = '        scores["overall_score"] = 0.0\n        return scores\n'
GRAPH_LINE = "    graph_file = os.path.join(workspace_path, GRAPH_FILE)\n"
GT_LINES = (
    '    known_gt = os.path.join(workspace_path, "gt", "shortest_path_gt.json")\n'
    '    missing_gt = os.path.join(workspace_path, "gt", "missing.json")\n'
)
NUMPY_FUNC = "def _plot():\n    import numpy\n\n    return numpy\n\n\ndef grade("


def _line_of(path: Path, text: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i for i, ln in enumerate(lines, start=1) if ln == text)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict[str, int]]:
    """The planted set, its --json report, and lines the report must point at."""
    root = tmp_path_factory.mktemp("planted") / "set"
    files = {i: copy_sample(DEMO, "000015", root, i) for i in (f"0001{n:02d}" for n in range(10))}
    lines: dict[str, int] = {}
    # 000101: a do-nothing agent scores 0.6 (the upstream safety-task loophole)
    replace_once(
        files["000101"]["evaluators"],
        EMPTY_BRANCH,
        '        scores["overall_score"] = 0.6\n        return scores\n',
    )
    # 000102: any results file earns 0.6, however wrong
    replace_once(
        files["000102"]["evaluators"],
        GRADER_FORMULA,
        '    scores["overall_score"] = round(0.60 + 0.40 * scores["valid_shortest"], 6)\n',
    )
    # 000103: the prompt names an input file the workspace does not have (a misspelt name)
    edit_json(
        files["000103"]["intent"],
        lambda d: d.update(
            prompt=d["prompt"].replace(
                "/tmp_workspace/coauthorship.json", "/tmp_workspace/coauthorhsip.json"
            )
        ),
    )
    # 000104: the grader reads gt/missing.json; gt has only shortest_path_gt.json
    replace_once(files["000104"]["evaluators"], GRAPH_LINE, GRAPH_LINE + GT_LINES)
    lines["000104"] = _line_of(files["000104"]["evaluators"], GT_LINES.splitlines()[1])
    # 000105: expected_reward 1.5
    edit_json(files["000105"]["reference_payloads"], lambda d: d.update(expected_reward=1.5))
    # 000106: `import numpy` in an evaluator that promises the standard library only
    replace_once(files["000106"]["evaluators"], "def grade(", NUMPY_FUNC)
    lines["000106"] = _line_of(files["000106"]["evaluators"], "    import numpy")

    # 000107: a call to a tool outside the schema, and a parameter exec does not define
    def bad_calls(d: dict) -> None:
        dialog = d["formatted_dialog"]
        dialog[7]["tool_calls"][0]["function"]["name"] = "cat"
        dialog[3]["tool_calls"][0]["function"]["arguments"] = json.dumps(
            {"command": "mkdir -p /tmp_workspace/results", "cwd": "/tmp_workspace"}
        )

    edit_json(files["000107"]["datapoints"], bad_calls)

    # 000108: a recorded tool result that replay does not reproduce
    def tamper(d: dict) -> None:
        msg = d["formatted_dialog"][2]
        assert msg["role"] == "tool" and msg["tool_call_id"] == "call_1"
        msg["content"] = msg["content"].replace('"Vikram Shah",', '"Vikram Shahh",', 1)

    edit_json(files["000108"]["datapoints"], tamper)
    # 000109: an evaluator that does not parse
    with open(files["000109"]["evaluators"], "a", encoding="utf-8") as fh:
        fh.write("\ndef broken(:\n    pass\n")
    proc = run("verify", root, "--json", "-p", "4")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    report = json.loads(proc.stdout)
    return root, report, lines


def _sample(report: dict, sample_id: str) -> dict:
    return next(s for s in report["samples"] if s["id"] == sample_id)


def _problems(sample: dict) -> list[dict]:
    return [f for f in sample["findings"] if f["severity"] in ("error", "warning")]


def test_planted_control_copy_passes(planted) -> None:
    _, report, _ = planted
    control = _sample(report, "000100")
    assert control["status"] == "pass" and _problems(control) == []
    assert control["scores"] == {
        "golden": 1.0,
        "oracle": 1.0,
        "empty": 0.0,
        "removed": 0.0,
        "corrupted": 0.0,
    }
    assert report["ok"] is False
    assert [s["id"] for s in report["samples"]] == [f"0001{n:02d}" for n in range(10)]


def test_empty_rollout_rewarded_is_reported(planted) -> None:
    _, report, _ = planted
    sample = _sample(report, "000101")
    problems = _problems(sample)
    assert [(f["check"], f["score"]) for f in problems] == [
        ("killer.empty", 0.6),
        ("killer.removed", 0.6),
    ]
    assert all(f["message"].startswith("grader rewards a wrong rollout") for f in problems)
    assert sample["scores"]["golden"] == 1.0 and sample["scores"]["corrupted"] == 0.0
    # the grader's file named, as every other finding names its file (helper-206: null)
    root = planted[0]
    assert {f["path"] for f in problems} == {str(root / "evaluators" / "evaluator_000101.py")}


def test_corrupted_results_rewarded_is_reported(planted) -> None:
    _, report, _ = planted
    sample = _sample(report, "000102")
    [problem] = _problems(sample)
    assert problem["check"] == "killer.corrupted" and problem["score"] == 0.6
    assert "grader rewards a wrong rollout" in problem["message"]
    assert "results/results.md" in problem["message"]
    assert sample["scores"]["empty"] == 0.0 and sample["scores"]["removed"] == 0.0


def test_prompt_naming_a_missing_input_is_reported(planted) -> None:
    root, report, _ = planted
    [problem] = _problems(_sample(report, "000103"))
    assert problem["check"] == "lint.prompt_path" and problem["severity"] == "error"
    assert "/tmp_workspace/coauthorhsip.json" in problem["message"]
    assert "did you mean /tmp_workspace/coauthorship.json" in problem["message"]
    assert problem["path"] == str(root / "intent" / "000103.json")


def test_grader_reading_a_missing_gt_file_is_reported(planted) -> None:
    root, report, lines = planted
    [problem] = _problems(_sample(report, "000104"))
    assert problem["check"] == "lint.gt_path"
    assert "gt/missing.json" in problem["message"] and "shortest_path_gt.json" in problem["message"]
    assert problem["path"] == str(root / "evaluators" / "evaluator_000104.py")
    assert problem["line"] == lines["000104"]
    # tasks validate reports it too (helper-190: only verify did, after its sandboxes)
    from clawrig.tasks.registry import load_suite
    from clawrig.verify.core import static_lint

    (task,) = [t for t in load_suite(root).valid_tasks if t.id == "000104"]
    [(check, line)] = [(f.check, f.line) for f in static_lint(task)]
    assert (check, line) == ("lint.gt_path", lines["000104"])


def test_expected_reward_outside_unit_interval_is_reported(planted) -> None:
    root, report, _ = planted
    [problem] = _problems(_sample(report, "000105"))
    assert problem["check"] == "lint.expected_reward"
    assert problem["message"] == "expected_reward 1.5 is outside [0, 1]"
    assert problem["path"] == str(root / "reference_payloads" / "reference_payload_000105.json")


def test_non_stdlib_import_is_reported(planted) -> None:
    root, report, lines = planted
    [problem] = _problems(_sample(report, "000106"))
    assert problem["check"] == "lint.imports" and "'numpy'" in problem["message"]
    assert problem["path"] == str(root / "evaluators" / "evaluator_000106.py")
    assert problem["line"] == lines["000106"]


def test_tool_calls_outside_the_schema_are_reported(planted) -> None:
    _, report, _ = planted
    sample = _sample(report, "000107")
    errors = [f for f in sample["findings"] if f["check"] == "lint.tool_schema"]
    assert len(errors) == 2 and all(f["severity"] == "error" for f in errors)
    assert "formatted_dialog[3]" in errors[0]["message"] and "cwd" in errors[0]["message"]
    assert "formatted_dialog[7]" in errors[1]["message"]
    assert "calls tool 'cat'" in errors[1]["message"]
    # replay answers the unknown tool with an error, so the recorded result differs too
    diffs = [f for f in sample["findings"] if f["check"] == "lint.replay_diff"]
    assert len(diffs) == 1 and "formatted_dialog[8]" in diffs[0]["message"]
    assert "+Tool 'cat' not found" in diffs[0]["diff"]


def test_tampered_tool_result_is_reported_with_a_diff(planted) -> None:
    _, report, _ = planted
    sample = _sample(report, "000108")
    [problem] = _problems(sample)
    assert problem["check"] == "lint.replay_diff" and problem["severity"] == "warning"
    assert "formatted_dialog[2]" in problem["message"] and "call_1 (read)" in problem["message"]
    diff = problem["diff"].splitlines()
    assert diff[0] == "--- recorded call_1 (read)" and diff[1] == "+++ replay call_1 (read)"
    assert [ln for ln in diff if ln[:1] in "+-" and ln[:3] not in ("---", "+++")] == [
        '-    "Vikram Shahh",',
        '+    "Vikram Shah",',
    ]
    assert sample["status"] == "warn"  # a warning alone does not fail the sample


def test_unreadable_sample_is_reported(planted) -> None:
    root, report, _ = planted
    sample = _sample(report, "000109")
    assert sample["status"] == "fail" and sample["scores"] == {}
    [problem] = _problems(sample)
    assert problem["check"] == "read" and "syntax error" in problem["message"]
    assert problem["path"] == str(root / "evaluators" / "evaluator_000109.py")


def test_text_report_and_summary_table(planted) -> None:
    root, _, _ = planted
    proc = run("verify", root, "-p", "4")
    assert proc.returncode == 1
    # the first line counts the samples that could not be read (helper-206: "verifying 9
    # task(s)" above a table of 10)
    unread = [p for p in sorted((root / "evaluators").iterdir()) if "000109" in p.name]
    assert len(unread) == 1  # 000109's evaluator does not parse: no task is read from it
    assert proc.stderr.splitlines()[0].startswith(
        "verifying 9 task(s) (1 more could not be read: they fail): "
    ), proc.stderr[:500]
    out = proc.stdout
    assert "grader rewards a wrong rollout: the empty rollout" in out
    assert "scores 0.6 (threshold 0.5)" in out
    assert '-    "Vikram Shahh",' in out  # the diff is printed
    rows = {ln.split("│")[1].strip(): ln for ln in out.splitlines() if re.match(r"^│ 0001", ln)}
    assert sorted(rows) == [f"0001{n:02d}" for n in range(10)]
    assert rows["000100"].rstrip().endswith("pass   │")
    assert rows["000108"].rstrip().endswith("warn   │")
    assert rows["000101"].rstrip().endswith("fail   │")
    assert "1 pass, 1 warn, 8 fail" in out
    # a dash in a score column is said (helper-129: unexplained outside --json)
    cells = [c.strip() for ln in rows.values() for c in ln.split("│")[4:9]]
    assert "-" in cells  # (planted samples whose grader fails on some rollout)
    said = (
        "- : no score for that sample: not run (removed and corrupted, when its golden rollout "
        "writes no result files), or its grading failed (--verbose or --json says why)"
    )
    assert said in " ".join(out.split())


def test_threshold_is_applied(planted, tmp_path: Path) -> None:
    # with threshold 0.7 the 0.6 loophole is no longer above the bar
    root, _, _ = planted
    one = tmp_path / "one"
    copy_sample(root, "000101", one, "000101")
    proc = run("verify", one, "--json", "--threshold", "0.7")
    assert proc.returncode == 0, proc.stdout[-2000:]
    [sample] = json.loads(proc.stdout)["samples"]
    assert sample["scores"]["empty"] == 0.6 and sample["status"] == "pass"


def test_strict_fails_a_sample_that_only_warns(planted, tmp_path: Path) -> None:
    """``--strict`` fails (exit 1) a set whose sample only warns, here a recorded tool result
    replay does not reproduce (it passed, exit 0: a trajectory with made-up tool results is
    wrong as training data, helper-205); without it the warning is said and the exit is 0."""
    root, _, _ = planted
    one = tmp_path / "one"
    copy_sample(root, "000108", one, "000108")
    proc = run("verify", one, "--json")
    assert proc.returncode == 0, proc.stdout[-2000:]
    [sample] = json.loads(proc.stdout)["samples"]
    assert sample["status"] == "warn"
    assert [f["check"] for f in _problems(sample)] == ["lint.replay_diff"]
    proc = run("verify", one, "--json", "--strict")
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert json.loads(proc.stdout)["samples"][0]["status"] == "warn"
    assert proc.stderr.splitlines()[-1] == (
        "--strict: 1 sample(s) with a warning (and no error) count as failed"
    )
    control = tmp_path / "control"
    copy_sample(root, "000100", control, "000100")
    assert run("verify", control, "--strict").returncode == 0


def test_bad_usage_is_one_line(tmp_path: Path) -> None:
    proc = run("verify", tmp_path / "nope")
    assert proc.returncode == 2 and "no such file or folder" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run("verify", DEMO, "--threshold", "1.5")
    assert proc.returncode == 2 and "--threshold" in proc.stderr


# ------------------------------------------------------------------------------ WildClawBench

GOOD_GRADER = """import os


def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    want = open(os.path.join(workspace_path, "gt", "expected.txt")).read().strip()
    path = os.path.join(workspace_path, "results", "out.txt")
    if not os.path.exists(path):
        return {"file_exists": 0.0, "overall_score": 0.0}
    ok = open(path).read().strip() == want
    return {"file_exists": 1.0, "overall_score": 1.0 if ok else 0.1}
"""

# a safety-style grader: "did not do the harmful thing" is worth 0.6 even when nothing was done
LOOPHOLE_GRADER = """import os


def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    path = os.path.join(workspace_path, "results", "out.txt")
    no_harm = 0.6
    if not os.path.exists(path):
        return {"no_harm": no_harm, "overall_score": no_harm}
    return {"no_harm": no_harm, "overall_score": no_harm + 0.4 * ("ok" in open(path).read())}
"""

GT_GRADER = """import json
import os


def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    gt_dir = os.path.join(workspace_path, "gt")
    answers = json.load(open(os.path.join(gt_dir, "answers.json")))
    path = os.path.join(workspace_path, "results", "out.txt")
    if not os.path.exists(path):
        return {"overall_score": 0.0}
    return {"overall_score": float(open(path).read().strip() == answers["text"])}
"""


def write_wildclaw_task(bench: Path, n: int, grader: str) -> Path:
    cat = "01_Productivity_Flow"
    slug = f"task_{n}_echo"
    md = bench / "tasks" / cat / f"{cat}_{slug}.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(
        f"---\nid: {cat}_{slug}\nname: Echo {n}\ncategory: {cat}\ntimeout_seconds: 60\n---\n\n"
        "## Prompt\n\n"
        f"Read /tmp_workspace/input.txt and write ok-{n} to /tmp_workspace/results/out.txt.\n\n"
        "## Expected Behavior\n\nWrite the file.\n\n"
        "## Grading Criteria\n\n- [ ] out.txt holds ok-n\n\n"
        "## Automated Checks\n\n```python\n" + grader + "```\n\n"
        "## Workspace Path\n\n```\n" + f"workspace/{cat}/{slug}" + "\n```\n",
        encoding="utf-8",
    )
    ws = bench / "workspace" / cat / slug
    (ws / "exec").mkdir(parents=True)
    (ws / "exec" / "input.txt").write_text(f"task {n}\n", encoding="utf-8")
    (ws / "gt").mkdir()
    (ws / "gt" / "expected.txt").write_text(f"ok-{n}\n", encoding="utf-8")
    return md


def test_wildclawbench_task_files_get_the_killer_question(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    write_wildclaw_task(bench, 1, GOOD_GRADER)
    loophole = write_wildclaw_task(bench, 2, LOOPHOLE_GRADER)
    gt_task = write_wildclaw_task(bench, 3, GT_GRADER)
    proc = run("verify", bench, "--json", "-p", "4")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert report["format"] == "wildclaw"
    by_id = {s["id"]: s for s in report["samples"]}
    good = by_id["01_Productivity_Flow_task_1_echo"]
    assert good["status"] == "pass" and good["scores"] == {"empty": 0.0}
    assert any("graders only" in f["message"] for f in good["findings"])

    bad = by_id["01_Productivity_Flow_task_2_echo"]
    [problem] = _problems(bad)
    assert problem["check"] == "killer.empty" and problem["score"] == 0.6
    assert problem["message"].startswith("grader rewards a wrong rollout: the empty rollout")
    assert bad["source"] == str(loophole)

    gt = by_id["01_Productivity_Flow_task_3_echo"]
    lint = [f for f in gt["findings"] if f["check"] == "lint.gt_path"]
    assert len(lint) == 1 and "gt/answers.json" in lint[0]["message"]
    assert "expected.txt" in lint[0]["message"]
    assert lint[0]["path"] == str(gt_task)
    md_lines = gt_task.read_text(encoding="utf-8").splitlines()
    want = next(
        i for i, ln in enumerate(md_lines, 1) if 'os.path.join(gt_dir, "answers.json")' in ln
    )
    assert lint[0]["line"] == want
    # the grader crashes on the empty rollout (no gt/answers.json): reported, not a reward
    empty = [f for f in gt["findings"] if f["check"] == "killer.empty"]
    assert empty[0]["severity"] == "warning" and "grader crashed" in empty[0]["message"]
    # it ran; its grader failed on it (it said "the empty rollout could not run": helper-135)
    assert empty[0]["message"].startswith("the grader fails on the empty rollout (nop agent")


def test_the_summary_says_when_only_the_empty_rollout_was_graded(tmp_path: Path) -> None:
    """A task with no golden trajectory or gold answer "passes" on its empty rollout alone
    (the grader ran and gave it 0): the summary says so, so a pass is not read as a solved
    task reproduced (a new user's finding on examples/wildclaw)."""
    bench = tmp_path / "bench"
    write_wildclaw_task(bench, 1, GOOD_GRADER)
    proc = run("verify", bench)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    caption = " ".join(proc.stdout.split())  # (as rich wraps it)
    assert (
        "1 pass, 0 warn, 0 fail; 1 with no golden end state or trajectory to self-check: only "
        "the empty rollout was graded (a gold answer a judge grades is not self-checked)"
    ) in caption
    one = tmp_path / "one"
    copy_sample(DEMO, "000015", one, "000015")  # a golden trajectory: replayed and graded
    proc = run("verify", one)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "1 pass, 0 warn, 0 fail" in proc.stdout
    assert "only the empty rollout" not in proc.stdout
    # a sample whose evaluator cannot be read was graded not at all, and is said so, not as
    # "only the empty rollout was graded" (helper-135)
    ev = one / "evaluators" / "evaluator_000015.py"
    ev.write_text(ev.read_text().replace("def grade(", "def grade(:", 1))
    proc = run("verify", one)
    assert proc.returncode == 1
    caption = " ".join(proc.stdout.split())
    assert (
        "0 pass, 0 warn, 1 fail; 1 not graded at all (their errors or warnings say why: "
        "--verbose or --json)" in caption
    )
    assert "only the empty rollout" not in caption
    # a grader that crashes on every rollout graded nothing either (helper-137)
    crashing = tmp_path / "crashing"
    write_wildclaw_task(crashing, 1, "def grade(**kwargs):\n    raise RuntimeError('boom')\n")
    proc = run("verify", crashing)
    caption = " ".join(proc.stdout.split())
    assert (
        "; 1 not graded at all (their errors or warnings say why: --verbose or --json)" in caption
    ), caption
    assert "only the empty rollout" not in caption


def test_a_grader_failing_on_the_oracle_replay_gives_no_oracle_score(tmp_path: Path) -> None:
    """helper-135: verify --json said oracle 0.0 (the trial's counted 0 for an agent) when the
    grader crashed on the replay, while golden said null for the same crash."""
    one = tmp_path / "one"
    copy_sample(DEMO, "000015", one, "000015")
    ev = one / "evaluators" / "evaluator_000015.py"
    ev.write_text(
        ev.read_text().replace(
            "def grade(",
            "def grade(*a, **k):\n    raise RuntimeError('boom')\n\n\ndef _old_grade(",
            1,
        )
    )
    proc = run("verify", one, "--json")
    (sample,) = json.loads(proc.stdout)["samples"]
    assert sample["scores"]["golden"] is None and sample["scores"]["oracle"] is None
    oracle = [f for f in sample["findings"] if f["check"] == "self_check.oracle"]
    assert "grader crashed: RuntimeError: boom" in oracle[0]["message"]


# writes 96 MiB to the clean room's /tmp (memory: it counts toward the sandbox's limit)
TMP_FILLING_GRADER = """def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    with open("/tmp/scratch.bin", "wb") as fh:
        for _ in range(96):
            fh.write(b"x" * 1024 * 1024)
    return {"overall_score": 0.0}
"""


# The kernel's OOM killer picks the largest process, and /tmp's pages belong to none: it killed
# the grader or the clean room's supervisor (a fork of the same size) by chance. A CI run got
# the supervisor, and verify called the check a warning (exit 0). The second grader makes the
# supervisor the kernel's choice (any process may raise a process's oom_score_adj of its uid).
SUPERVISOR_FIRST = TMP_FILLING_GRADER.replace(
    '    with open("/tmp/scratch.bin", "wb") as fh:',
    "    import os\n"
    '    with open(f"/proc/{os.getppid()}/oom_score_adj", "w") as adj:\n'
    '        adj.write("1000")\n'
    '    with open("/tmp/scratch.bin", "wb") as fh:',
)


@pytest.mark.parametrize(
    "grader", [TMP_FILLING_GRADER, SUPERVISOR_FIRST], ids=["any", "supervisor"]
)
def test_verify_memory_mb_is_each_sandboxs_limit(tmp_path: Path, grader: str) -> None:
    bench = tmp_path / "bench"
    write_wildclaw_task(bench, 1, grader)
    proc = run("verify", bench, "--json", "--memory-mb", "64")
    report = json.loads(proc.stdout)
    [empty] = [f for f in report["samples"][0]["findings"] if f["check"] == "killer.empty"]
    assert "out of memory" in empty["message"] and "--memory-mb" in empty["message"], empty
    # the only check of a grader-only task could not run: not verified (helper-127)
    assert empty["severity"] == "error" and proc.returncode == 1, empty
    proc = run("verify", bench, "--json", "--memory-mb", "512")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert report["samples"][0]["scores"] == {"empty": 0.0}
    assert report["memory_mb"] == 512  # the report says what its checks ran under


async def test_verify_path_refuses_a_memory_limit_outside_the_clis_range(tmp_path: Path):
    """From Python, memory_mb=1 gave each sample a confusing bwrap error (helper-127)."""
    from clawrig.choices import MAX_MEMORY_MB, MIN_MEMORY_MB
    from clawrig.errors import UserError
    from clawrig.verify import verify_path

    bench = tmp_path / "bench"
    write_wildclaw_task(bench, 1, GOOD_GRADER)
    for bad in (0, MIN_MEMORY_MB - 1, MAX_MEMORY_MB + 1):
        with pytest.raises(UserError, match=rf"--memory-mb: must be in .* got {bad}$"):
            await verify_path(bench, memory_mb=bad)


def test_verify_on_the_local_sandbox_warns_once_and_runs_one_at_a_time(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    write_wildclaw_task(bench, 1, GOOD_GRADER)
    write_wildclaw_task(bench, 2, GOOD_GRADER)
    proc = run("verify", bench, "--sandbox", "local", "-p", "2")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--parallel: the local sandbox runs one trial at a time" in proc.stderr
    proc = run("verify", bench, "--sandbox", "local")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "UserWarning" not in proc.stderr  # each sandbox's raw Python warning (4 of them)
    assert proc.stderr.count("NO isolation") == 1, proc.stderr


ALLOCATING_GRADER = """def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    held = bytearray(300 * 1024 * 1024)
    return {"overall_score": 0.0 * len(held)}
"""


def test_a_grader_over_the_memory_limit_on_docker_is_said_out_of_memory(
    docker_image, tmp_path: Path
) -> None:
    """Docker's grader killed for --memory-mb said only "exit code 137" (helper-127): the
    container's memory cgroup's oom_kill count (its id from --cidfile) now says why."""
    bench = tmp_path / "bench"
    write_wildclaw_task(bench, 1, ALLOCATING_GRADER)
    proc = run("verify", bench, "--json", "--sandbox", "docker", "--memory-mb", "128")
    report = json.loads(proc.stdout)
    [empty] = [f for f in report["samples"][0]["findings"] if f["check"] == "killer.empty"]
    assert "out of memory" in empty["message"] and "--memory-mb" in empty["message"], empty


def test_a_wrong_rollout_the_memory_limit_stopped_is_an_error(tmp_path: Path) -> None:
    """The grader allocates 300 MB only when results/results.md is missing: the empty and
    removed rollouts' graders are killed at --memory-mb 128. Both checks could not run:
    errors, exit 1 (the removed one was a warning, helper-128)."""
    root = tmp_path / "set"
    files = copy_sample(DEMO, "000015", root, "000015")
    head = 'def grade(workspace_path="/tmp_workspace", transcript=None, **kwargs):\n'
    grow = (
        "    import os as _os\n"
        '    if not _os.path.exists(_os.path.join(workspace_path, "results", "results.md")):\n'
        "        _held = bytearray(300 * 1024 * 1024)\n"
    )
    replace_once(files["evaluators"], head, head + grow)
    proc = run("verify", root, "--json", "--memory-mb", "128")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    findings = {f["check"]: f for f in json.loads(proc.stdout)["samples"][0]["findings"]}
    for check in ("killer.empty", "killer.removed"):
        assert findings[check]["severity"] == "error", findings[check]
        assert "out of memory" in findings[check]["message"]
    assert findings["killer.corrupted"]["severity"] == "info"  # graded: scores 0


def test_an_expected_reward_below_the_threshold_is_warned(tmp_path: Path) -> None:
    """With an expected reward of 0, every wrong rollout is below the threshold whatever the
    grader does: the killer question cannot fail, and says so (helper-130)."""
    root = tmp_path / "set"
    files = copy_sample(DEMO, "000015", root, "000015")
    replace_once(files["evaluators"], "EXPECTED_REWARD = 1.0", "EXPECTED_REWARD = 0.0")
    edit_json(files["reference_payloads"], lambda d: d.update(expected_reward=0.0))
    proc = run("verify", root, "--json")
    [sample] = json.loads(proc.stdout)["samples"]
    [warned] = [f for f in sample["findings"] if f["check"] == "killer.threshold"]
    assert warned["severity"] == "warning"
    assert warned["message"].startswith("expected_reward 0 is below --threshold 0.5: ")


def test_a_golden_end_state_the_replay_does_not_reach_is_warned(tmp_path: Path) -> None:
    """helper-135: GOLDEN_WORKSPACE edited alone ("# Chain" for "# shortest": the grader gives
    both 1.0) passed with no finding, though the golden and oracle columns graded two end
    states."""
    one = tmp_path / "one"
    copy_sample(DEMO, "000015", one, "000015")
    proc = run("verify", one, "--json")
    (sample,) = json.loads(proc.stdout)["samples"]
    assert not [f for f in sample["findings"] if f["check"] == "lint.golden_drift"]
    ev = one / "evaluators" / "evaluator_000015.py"
    text = ev.read_text()
    assert '"results/results.md": "# shortest\\n' in text
    ev.write_text(
        text.replace('"results/results.md": "# shortest\\n', '"results/results.md": "# Chain\\n')
    )
    proc = run("verify", one, "--json")
    (sample,) = json.loads(proc.stdout)["samples"]
    assert sample["scores"]["golden"] == 1.0 and sample["scores"]["oracle"] == 1.0
    (drift,) = [f for f in sample["findings"] if f["check"] == "lint.golden_drift"]
    assert drift["severity"] == "warning"
    assert drift["message"].startswith(
        "the oracle replay's end state differs from the golden end state in "
        "results/results.md (other content): "
    )


def test_a_clean_room_out_of_memory_is_read_from_the_error_not_its_text():
    """An error's message can hold what the agent wrote (a file's name, a grader's output): the
    verifier's "the check could not run" read the kernel's words in it, so an end state naming
    a file with them passed for the memory limit. It reads the error's own field now."""
    from clawrig.spec.trial import ErrorKind, TrialError
    from clawrig.verify.killer import limit_hit

    words = "the kernel killed 1 process(es) for the sandbox's memory limit of 64 MiB"
    said = TrialError(kind=ErrorKind.AGENT, message=f"bad file {words!r}", phase="gt_inject")
    assert not limit_hit(None, said)
    died = said.model_copy(update={"out_of_memory": True})
    assert limit_hit(None, died)
    assert not limit_hit(None, died.model_copy(update={"phase": "agent"}))  # not while grading


def test_a_hanging_grader_is_stopped_at_its_scaled_limit_and_progress_is_shown(
    tmp_path: Path,
) -> None:
    """helper-175: a grader stuck in a loop kept verify silent for minutes (5 gradings, each
    up to the grader's 120 s), with no way to shorten it. --timeout-multiplier scales the
    graders' limits as clawrig run's does, and stderr says the bound, then each sample done."""
    root = tmp_path / "set"
    files = copy_sample(DEMO, "000015", root, "000201")
    with open(files["evaluators"], encoding="utf-8") as fh:
        source = fh.read()
    head = 'def grade(workspace_path="/tmp_workspace", transcript=None, **kwargs):\n'
    assert source.count(head) == 1
    files["evaluators"].write_text(source.replace(head, head + "    while True:\n        pass\n"))
    multiplier = 0.05
    limit = 120 * multiplier  # the four-folder grader's own limit (spec default), scaled
    proc = run("verify", root, "--json", "--timeout-multiplier", str(multiplier))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert report["timeout_multiplier"] == multiplier
    (sample,) = report["samples"]
    golden = [f for f in sample["findings"] if f["check"] == "self_check.golden"]
    assert f"grader timed out after {limit:g} s" in golden[0]["message"], golden
    assert sample["scores"]["golden"] is None
    err = proc.stderr.splitlines()
    assert err[0] == (
        f"verifying 1 task(s): up to 5 gradings each, a grader stopped after {limit:g} s at "
        "most (--timeout-multiplier)"
    )
    assert re.fullmatch(r"\[1/1\] 000201: fail \(\d+\.\d s elapsed\)", err[1]), err
    proc = run("verify", root, "--timeout-multiplier", "0")
    assert proc.returncode == 2 and "--timeout-multiplier" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("signum", "code", "json_out", "ignored"),
    [
        (signal.SIGINT, 130, True, False),
        (signal.SIGTERM, 143, False, False),
        (signal.SIGINT, 130, True, True),
    ],
    ids=["ctrl-c-json", "sigterm-table", "sigint-started-ignored"],
)
def test_an_interrupted_verify_says_what_it_verified(
    tmp_path: Path, signum: int, code: int, json_out: bool, ignored: bool
) -> None:
    """helper-177: a verify stopped by Ctrl-C or SIGTERM printed nothing on stdout: every
    sample already verified was lost (--json: no JSON at all). It prints the report of those
    done, said to be interrupted, and exits 130 / 143. helper-179: started with SIGINT
    ignored (`&` in a script), a SIGINT did not stop it (clawrig run and serve stop)."""
    root = tmp_path / "set"
    copy_sample(DEMO, "000015", root, "000201")
    files = copy_sample(DEMO, "000015", root, "000202")
    head = 'def grade(workspace_path="/tmp_workspace", transcript=None, **kwargs):\n'
    replace_once(files["evaluators"], head, head + "    while True:\n        pass\n")
    exe = Path(sys.executable).parent / "clawrig"
    args = [str(exe), "verify", str(root), "-p", "2"] + (["--json"] if json_out else [])
    env = {**os.environ, "COLUMNS": "220", "NO_COLOR": "1"}
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None,
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        said = [proc.stderr.readline().decode() for _ in range(2)]  # the bound, 000201 done
        assert said[1].startswith("[1/2] 000201: pass"), said
        proc.send_signal(signum)  # 000202's grader loops (120 s each grading)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err.decode()[-2000:]
    text = out.decode()
    if json_out:
        report = json.loads(text)
        assert report["interrupted"] is True and report["ok"] is False
        assert report["task_count"] == 2 and report["counts"] == {"pass": 1, "warn": 0, "fail": 0}
        assert [s["id"] for s in report["samples"]] == ["000201"]
    else:
        assert "1 pass, 0 warn, 0 fail (interrupted: 1 of 2 verified; the others were not)" in text
        assert "000202" not in text and "000201" in text
    assert "Traceback" not in err.decode()
