"""`clawrig tasks list|show|validate|build-dataclaw`, run as the installed console script."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_list_dataclawbench_lists_57_tasks(run_cli, dataclaw_real):
    proc = run_cli("tasks", "list", dataclaw_real)
    assert proc.returncode == 0, proc.stderr
    assert "57 tasks" in proc.stdout
    gold_ids = sorted(p.stem for p in (dataclaw_real / "assets" / "qa_gold").glob("*/*.json"))
    rows = [ln for ln in proc.stdout.splitlines() if re.match(r"^│ \S", ln)]
    assert len(rows) == 57
    assert "task_001_comprehensive_decision_easy_easy001" in proc.stdout
    assert "task_373_hypothesis_verification_hard_hard001" in proc.stdout
    assert len(gold_ids) == 57
    # the two real task files list 19 database files, 17 not shipped: workspace "no"
    row = next(r for r in rows if "task_001_" in r)
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells == [
        "task_001_comprehensive_decision_easy_easy001",
        "comprehensive_decision",
        "easy",
        "en",
        "1200s",
        "judge",
        "no",
    ]
    assert "warning(s)" in proc.stderr


def test_list_json(run_cli, fourfolder_real):
    proc = run_cli("tasks", "list", fourfolder_real, "--json")
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)
    assert row["id"] == "000015"
    assert row["category"] == "04_Search_Retrieval"
    assert row["level"] == "easy"
    assert row["language"] == "en"
    assert row["timeout_seconds"] == 600
    assert row["grader"] == "programmatic"
    assert row["workspace_present"] is True
    assert row["format"] == "fourfolder"


def test_show_by_prefix_and_path_option(run_cli, dataclaw_real, fourfolder_real):
    proc = run_cli("tasks", "show", "task_373", dataclaw_real)
    assert proc.returncode == 0, proc.stderr
    assert "task_373_hypothesis_verification_hard_hard001" in proc.stdout
    assert "[0.1142, -0.2132, 0.33]" in proc.stdout
    assert "Multi-answer Correctness" in proc.stdout

    proc = run_cli("tasks", "show", "000015", "--path", fourfolder_real, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["id"] == "000015"
    assert data["expected_reward"] == 1.0
    assert data["grader"]["kind"] == "programmatic"


def test_show_takes_path_then_id_as_list_does(run_cli, fourfolder_real):
    # new-user review: `tasks show PATH ID` (the order of `tasks list PATH`) said
    # "000015: path: no such file or folder"
    by_id = run_cli("tasks", "show", "000015", str(fourfolder_real), "--json")
    by_path = run_cli("tasks", "show", str(fourfolder_real), "000015", "--json")
    assert by_id.returncode == by_path.returncode == 0, (by_id.stderr, by_path.stderr)
    assert json.loads(by_path.stdout) == json.loads(by_id.stdout)
    assert json.loads(by_path.stdout)["id"] == "000015"


def test_show_given_a_suite_folder_alone_says_to_give_the_id_first(run_cli, fourfolder_real):
    # new-user review: `tasks show suites/demo` said "no task with id 'suites/demo'"
    proc = run_cli("tasks", "show", str(fourfolder_real))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"clawrig: error: ID: {fourfolder_real} is a folder, not a task id: give a task id with "
        f"the suite (clawrig tasks show ID {fourfolder_real}; clawrig tasks list "
        f"{fourfolder_real} lists the ids)"
    ]


def test_show_unknown_id_is_one_line_error(run_cli, fourfolder_real):
    proc = run_cli("tasks", "show", "999999", "--path", fourfolder_real)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "no task with id '999999'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_validate_clean_suite_exits_0(run_cli, fourfolder_real, dataclaw_real):
    proc = run_cli("tasks", "validate", fourfolder_real)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK" in proc.stdout and "1 task(s), 0 error(s)" in proc.stdout

    proc = run_cli("tasks", "validate", dataclaw_real, "--json")
    assert proc.returncode == 0
    report = json.loads(proc.stdout)
    assert report["tasks"] == 57
    assert report["errors"] == 0
    assert report["format"] == "dataclaw"
    steps = [i for i in report["issues"] if i["field"] == "steps_num"]
    assert {(i["path"].split("/")[-1], i["severity"]) for i in steps} == {
        ("hard011.json", "warning"),
        ("medium009.json", "warning"),
    }


def test_validate_checks_the_trajectorys_calls_against_its_tool_schema(
    run_cli, fourfolder_real, tmp_path
):
    """helper-135: a datapoint whose tool_schema lost the tools its trajectory calls (or whose
    call arguments are not JSON) passed validate, then failed verify's lint."""
    ff = tmp_path / "ff"
    shutil.copytree(fourfolder_real, ff)
    proc = run_cli("tasks", "validate", ff, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["lint"] == []
    (point,) = (ff / "datapoints").glob("*.json")
    data = json.loads(point.read_text())
    kept = [t for t in data["tool_schema"] if t["function"]["name"] in ("read", "write")]
    data["tool_schema"] = kept
    point.write_text(json.dumps(data, indent=2))
    called = {  # the tools the trajectory calls that are gone now
        c["function"]["name"]
        for m in data["formatted_dialog"]
        for c in m.get("tool_calls") or []
        if c["function"]["name"] not in ("read", "write")
    }
    assert called
    proc = run_cli("tasks", "validate", ff)
    assert proc.returncode == 1
    for name in called:
        assert f"calls tool '{name}', which is not in the datapoint's tool_schema (2 tools)" in (
            proc.stdout
        )
    assert "; lint: " in proc.stdout and proc.stdout.strip().splitlines()[-1].startswith("FAIL")
    report = json.loads(run_cli("tasks", "validate", ff, "--json").stdout)
    assert {f["check"] for f in report["lint"]} == {"lint.tool_schema"}
    # an empty schema names no tool: every call is outside it (it fell back to the built-in
    # tool profile and passed: helper-137)
    data["tool_schema"] = []
    point.write_text(json.dumps(data, indent=2))
    proc = run_cli("tasks", "validate", ff)
    assert proc.returncode == 1
    assert "which is not in the datapoint's tool_schema (0 tools)" in proc.stdout


def test_root_is_refused_where_it_would_be_ignored(
    run_cli, fourfolder_real, dataclaw_real, wildclaw_task, bench_root, tmp_path
):
    other = tmp_path / "elsewhere"
    other.mkdir()
    for suite, what in (
        (fourfolder_real, "four-folder set"),
        (dataclaw_real, "DataClawBench root"),
    ):
        for command in ("validate", "list"):
            proc = run_cli("tasks", command, suite, "--root", other)
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert proc.stderr.strip().splitlines() == [
                f"clawrig: error: --root: {suite} is a {what}, which reads its files from its own "
                "folders; --root (the benchmark root of WildClawBench or DataClawBench task "
                "files) does not apply to it: drop --root"
            ]
        # the suite's own folder as --root is what it reads anyway: accepted
        assert run_cli("tasks", "validate", suite, "--root", suite).returncode == 0
    # WildClawBench task files still read it
    wildclaw_task("a.md", id="a")
    assert run_cli("tasks", "validate", bench_root, "--root", bench_root).returncode == 0
    # a --root that is not a folder: one line naming it, before any task is read
    for missing in (tmp_path / "no-such-root", wildclaw_task("b.md", id="b")):
        proc = run_cli("tasks", "validate", bench_root, "--root", missing)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"clawrig: error: --root: {missing}: no such folder"
        ]


def test_validate_counts_the_tasks_without_errors_whatever_the_error(
    run_cli, wildclaw_task, bench_root, task_sections, writable_copy, tmp_path
):
    # WildClawBench: one clean task; a task file missing a section (its reader keeps the task),
    # an empty file (its reader drops it), a second file with the first one's id (kept)
    wildclaw_task("a.md", id="clean")
    wildclaw_task("b.md", id="no_prompt", sections={**task_sections, "Prompt": ""})
    wildclaw_task("c.md", raw=b"")
    wildclaw_task("d.md", id="clean")
    # four-folder: the demo's 10 samples, one with a datapoint that is not JSON (dropped) and
    # one whose payload's category differs from its intent's (kept)
    ff = writable_copy(REPO / "suites" / "demo", tmp_path / "ff")
    (ff / "datapoints" / "000001.json").write_text("{broken")
    payload = ff / "reference_payloads" / "reference_payload_000003.json"
    data = json.loads(payload.read_text())
    data["category"] = "99_Elsewhere"
    payload.write_text(json.dumps(data))
    for suite, clean, errors in ((bench_root, 1, 3), (ff, 8, 2)):
        text = run_cli("tasks", "validate", suite)
        assert text.returncode == 1, text.stdout + text.stderr
        assert (
            text.stdout.strip()
            .splitlines()[-1]
            .startswith(f"FAIL {suite}: {clean} task(s) without errors, {errors} error(s), ")
        )
        report = json.loads(run_cli("tasks", "validate", suite, "--json").stdout)
        assert (report["tasks"], report["errors"]) == (clean, errors)


def test_validate_reports_every_error_and_exits_1(run_cli, wildclaw_task, bench_root):
    wildclaw_task("empty.md", raw=b"")
    wildclaw_task("a.md", id="dup")
    dup = wildclaw_task("b.md", id="dup")
    proc = run_cli("tasks", "validate", bench_root, "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    errors = sorted(
        (i["path"], i["field"], i["line"]) for i in report["issues"] if i["severity"] == "error"
    )
    empty = str(bench_root / "tasks" / "01_Productivity_Flow" / "empty.md")
    assert errors == sorted([(empty, "file", 1), (str(dup), "id", None)])

    proc = run_cli("tasks", "validate", bench_root)
    assert proc.returncode == 1
    assert f"error: {empty}:1: file: file is empty (0 bytes)" in proc.stdout
    assert "FAIL" in proc.stdout


def test_an_authors_misspellings_are_said(run_cli, wildclaw_task, bench_root, task_sections):
    """helper-190, a task author's slips: `idd:` for `id:` skipped the file as "not a task file"
    (the task vanished from the job, exit 0); `timeout_secnds:` and `## Automated Check` were
    kept as metadata without a word (the default timeout, no grader); validate said OK of a task
    clawrig run refuses to grade. A file with a `## Prompt` and no id is an error naming its
    keys, a near miss of a known key or section a warning naming it, a task with no grader fails
    validate; a file with neither id nor Prompt (a README) is still skipped."""
    front = "idd: upper\ncategory: 01_Productivity_Flow\ntimeout_seconds: 300"
    wildclaw_task("typo.md", front=front)
    slips = wildclaw_task(
        "slips.md",
        front="id: slips\ncatgory: 01_Productivity_Flow\ntimeout_secnds: 600",
        sections={
            ("Automated Check" if k == "Automated Checks" else k): v
            for k, v in task_sections.items()
        },
    )
    readme = bench_root / "tasks" / "01_Productivity_Flow" / "notes.md"
    readme.write_text("---\ntitle: notes\n---\n\n# About these tasks\n")
    # a template's empty id: skipped, as upstream's task0_template.md (helper-191)
    wildclaw_task("my_template.md", front="id:\nname: \ncategory: 01_Productivity_Flow")
    # names built on known ones, or none like them: no "did you mean" (helper-191)
    extra = "subcategory: x\ncategory_id: 3\nuid: 9\nauthor: me\ndifficulty: hard\ntags: [a]"
    wildclaw_task(
        "plain.md",
        id="plain",
        front=f"id: plain\ncategory: 01_Productivity_Flow\n{extra}",
        sections={**task_sections, "Grading Criteria (LLM)": "- ok", "Notes": "n", "Rubric": "r"},
    )
    proc = run_cli("tasks", "validate", bench_root, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    said = {(Path(i["path"]).name, i["field"], i["severity"]): i for i in report["issues"]}
    assert said[("typo.md", "id", "error")]["message"] == (
        "front matter has no `id`, but the file has a `## Prompt` section: a task file "
        "(front matter keys: idd, category, timeout_seconds)"
    )
    assert said[("slips.md", "catgory", "warning")]["message"] == (
        "not a front matter key clawrig reads (did you mean `category`?): ignored"
    )
    assert said[("slips.md", "timeout_secnds", "warning")]["line"] == 4  # (line 1: ---)
    assert (
        "did you mean `timeout_seconds`?"
        in said[("slips.md", "timeout_secnds", "warning")]["message"]
    )
    assert (
        "did you mean `## Automated Checks`?"
        in (said[("slips.md", "Automated Check", "warning")]["message"])
    )
    assert said[("notes.md", "id", "warning")]["message"].startswith("skipped: no `id`")
    assert said[("my_template.md", "id", "warning")]["message"].startswith("skipped: no `id`")
    assert not [
        key for key in said if key[0] in ("plain.md", "my_template.md") and key[2] == "error"
    ]
    assert not [
        i for i in report["issues"] if "did you mean" in i["message"] and "plain" in i["path"]
    ]
    assert report["refused"] == [f"{slips}: the task has no grader (no checks, answer or rubric)"]
    text = run_cli("tasks", "validate", bench_root)
    assert text.returncode == 1
    assert text.stdout.strip().splitlines()[-1].startswith(f"FAIL {bench_root}: ")
    assert "1 task(s) clawrig run refuses" in text.stdout
    assert f"refused: {slips}: the task has no grader" in text.stdout


def test_a_grade_that_returns_nothing_is_warned(run_cli, wildclaw_task, bench_root, task_sections):
    """helper-192: a grade() that prints its verdict and forgets to return it passed validate;
    every trial then scored the agent's 0 ("grade() returned None"). validate and verify warn,
    naming the line of its def; a grade() returning from a branch, or only a nested function
    returning, are told apart."""

    def grader(body: str) -> dict[str, str]:
        src = "def grade(transcript=None, workspace_path='/tmp_workspace', **kwargs):\n" + body
        return {**task_sections, "Automated Checks": "```python\n" + src + "```"}

    printing = wildclaw_task(
        "printing.md", id="printing", sections=grader("    print({'overall_score': 1.0})\n")
    )
    wildclaw_task(
        "branch.md",
        id="branch",
        sections=grader("    if kwargs:\n        return {'overall_score': 1.0}\n    return None\n"),
    )
    nested = "    def inner():\n        return {'overall_score': 1.0}\n    inner()\n"
    wildclaw_task("nested.md", id="nested", sections=grader(nested))
    # a stub before the real one: Python keeps the last definition (helper-194)
    stub = "def grade(**kwargs):\n    pass\n\n\n"
    late = grader("    return {'overall_score': 1.0}\n")
    late["Automated Checks"] = late["Automated Checks"].replace("```python\n", "```python\n" + stub)
    wildclaw_task("late.md", id="late", sections=late)
    proc = run_cli("tasks", "validate", bench_root, "--json")
    report = json.loads(proc.stdout)
    found = {(f["task"], f["check"], f["severity"]) for f in report["lint"]}
    assert found == {
        ("printing", "lint.grade_return", "warning"),
        ("nested", "lint.grade_return", "warning"),
    }
    (first,) = [f for f in report["lint"] if f["task"] == "printing"]
    text = printing.read_text().splitlines()
    assert first["path"] == str(printing)
    assert text[first["line"] - 1].startswith("def grade(")


def test_a_lone_surrogate_escape_in_a_task_file_is_one_line(run_cli, writable_copy, tmp_path):
    """helper-193: a four-folder intent holding "\\udcff" read as a task; `clawrig run` was a
    UnicodeEncodeError traceback (the task's digest) and `tasks show --json` a serialisation
    one. It is the file's error, naming its line; an escaped pair (an emoji) is text."""
    ff = writable_copy(REPO / "suites" / "demo", tmp_path / "ff")
    intent = ff / "intent" / "000001.json"
    lines = intent.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith('"') and ":" in ln)
    lines.insert(at, '  "note": "ok \\ud83d\\ude00 bad \\udcff",')
    intent.write_text("\n".join(lines) + "\n")
    proc = run_cli("tasks", "validate", ff, "--json")
    assert proc.returncode == 1
    (issue,) = [i for i in json.loads(proc.stdout)["issues"] if i["severity"] == "error"]
    assert (issue["path"], issue["field"], issue["line"]) == (str(intent), "json", at + 1)
    assert "lone surrogate" in issue["message"]
    r = run_cli("run", ff, "--agent", "oracle", "-o", tmp_path / "out")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_list_with_errors_exits_1(run_cli, wildclaw_task, bench_root):
    wildclaw_task()
    wildclaw_task("latin1.md", raw="---\nid: x\nname: Café\n---\n".encode("latin-1"))
    proc = run_cli("tasks", "list", bench_root)
    assert proc.returncode == 1
    assert "01_Productivity_Flow_task_1_meeting_notes" in proc.stdout
    assert "encoding: file is not UTF-8" in proc.stderr


def test_list_of_a_file_that_is_no_task_says_why_without_an_empty_table(run_cli, tmp_path):
    """helper-168: ``tasks list README.md`` drew a table of 0 tasks above the error."""
    readme = tmp_path / "README.md"
    readme.write_text("# a readme\n")
    proc = run_cli("tasks", "list", readme)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    assert proc.stderr.strip() == f"error: {readme}:1: front matter: file does not start with `---`"


def test_missing_path_is_one_line_error(run_cli, tmp_path):
    proc = run_cli("tasks", "list", tmp_path / "nope")
    assert proc.returncode == 2
    assert "no such file or folder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_build_dataclaw_command(run_cli, tmp_path, dataclaw_real):
    root = tmp_path / "root"
    raw = root / "assets" / "qa_raw" / "comprehensive_decision"
    raw.mkdir(parents=True)
    shutil.copyfile(
        dataclaw_real / "assets/qa_raw/comprehensive_decision/easy001_result.json",
        raw / "easy001_result.json",
    )
    shutil.copytree(dataclaw_real / "assets" / "database", root / "assets" / "database")
    out = tmp_path / "out"
    proc = run_cli("tasks", "build-dataclaw", "--root", root, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "wrote 1 gold file(s)" in proc.stdout
    gold = out / "assets/qa_gold/comprehensive_decision/easy001.json"
    assert (
        gold.read_bytes()
        == (dataclaw_real / "assets/qa_gold/comprehensive_decision/easy001.json").read_bytes()
    )
    task_md = (out / "tasks" / "task_001_comprehensive_decision_easy_easy001.md").read_text()
    assert task_md.count('"source": ') == 2  # the two database files given

    proc = run_cli("tasks", "build-dataclaw", "--root", tmp_path / "empty")
    assert proc.returncode == 2
    assert "qa_raw" in proc.stderr


def test_a_sample_without_its_workspace_folder_is_listed_empty_and_warned(run_cli, tmp_path):
    # the workspace folder is optional (fourfolder-spec.md): the sample starts empty, so
    # list says "empty" (was "yes") and validate warns (was silent) naming the folder
    demo = Path(__file__).resolve().parents[2] / "suites" / "demo"
    root = tmp_path / "demo"
    shutil.copytree(demo, root)
    shutil.rmtree(root / "workspaces" / "000006")
    proc = run_cli("tasks", "list", root, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["id"]: r for r in json.loads(proc.stdout)}
    assert rows["000006"]["workspace"] == "empty" and rows["000005"]["workspace"] == "yes"
    table = run_cli("tasks", "list", root).stdout
    (line,) = [ln for ln in table.splitlines() if "000006" in ln]
    assert "empty" in line and "yes" not in line
    proc = run_cli("tasks", "validate", root)
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("warning:")]
    assert warned == [
        f"warning: {root / 'workspaces' / '000006'}: workspaces: no folder: sample 000006 "
        "starts from an empty workspace (its evaluator scores 0 if it expects files there)"
    ]


def test_show_with_an_id_too_long_for_a_path_is_one_line(run_cli):
    # red-team review: an id past the file name limit (ENAMETOOLONG when asked whether it is a
    # folder) was an OSError traceback
    long_id = "x" * 300
    proc = run_cli("tasks", "show", long_id)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"clawrig: error: no task with id {long_id!r}"), line


def test_a_folder_whose_files_are_no_tasks_is_an_error_not_an_empty_suite(tmp_path):
    """A folder one level too high (suites/, a job's output) was read as a suite of 0 tasks:
    validate said OK, verify passed and run ran nothing, all exit 0 (helper-131)."""
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.md").write_text("# just notes\n")
    (tmp_path / "notes" / "more.md").write_text("text\n")
    clawrig = str(Path(sys.executable).with_name("clawrig"))
    want = "no task in it: not a task file, a folder of task files"
    notes = str(tmp_path / "notes")
    skipped = "(2 file(s) skipped: clawrig tasks validate says why)"
    for argv, code in (
        (["tasks", "validate", notes], 1),
        (["verify", notes], 2),
        (["run", notes, "--agent", "nop", "-o", str(tmp_path / "out")], 2),
    ):
        r = subprocess.run([clawrig, *argv], capture_output=True, text=True, timeout=120)
        assert r.returncode == code, (argv, r.stdout[-1000:], r.stderr[-1000:])
        said = " ".join((r.stdout + r.stderr).split())
        assert want in said and skipped in said, argv
        if argv[0] != "tasks":  # (helper-223: verify printed a warning per file, a table)
            assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "out").exists()
