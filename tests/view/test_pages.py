"""The job, compare and trial pages of real jobs in a real headless Chromium.

Every number is checked against the job's own files (summary_<model>.json, score.json,
model_calls.jsonl, end_state/), read here independently of the viewer."""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
from typing import Any

from view_helpers import COST, CRON_TEXT, read_summary, start_view


def f4(x: float) -> str:
    return f"{x:.4f}"


def table(page: Any, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        f"{selector} tbody tr",
        "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent.trim()))",
    )


def test_job_page_shows_the_summary_numbers(page, server, jobs):
    summary = read_summary(jobs["oracle"])
    page.goto(server + "job0/index.html")
    assert summary["formats"] == ["fourfolder"]
    assert page.text_content("#h-mean") == f4(summary["mean"]["mean"])
    assert page.text_content("#h-trials") == str(len(summary["tasks"]))
    assert page.text_content("#h-errors") == str(sum(summary["errors_by_kind"].values()))
    # a four-folder set's headline is its mean: no WildClawBench or DataClawBench numbers
    # (a new user saw three cards of one number)
    for other in ("#h-wildclaw", "#h-acc", "#wild-categories"):
        assert page.locator(other).count() == 0, other
    cats = {t["category"] for t in summary["tasks"]}
    rows = table(page, "#trials")
    assert {(r[0], r[3]) for r in rows} == {
        (t["task_id"], f4(t["score"])) for t in summary["tasks"]
    }
    # the plots are there, with one bar per category
    assert page.locator("svg[aria-label='Score by category'] rect").count() == len(cats)


def test_sorting_and_filtering(page, server, jobs):
    summary = read_summary(jobs["oracle"])
    page.goto(server + "job0/index.html")
    page.click("#trials th[data-key='score']")
    by_score = sorted(summary["tasks"], key=lambda t: (t["score"], t["task_id"]))
    assert [r[0] for r in table(page, "#trials")] == [t["task_id"] for t in by_score]
    page.click("#trials th[data-key='score']")  # again: descending
    assert [r[3] for r in table(page, "#trials")] == sorted(
        (f4(t["score"]) for t in summary["tasks"]), reverse=True
    )
    cat = summary["tasks"][0]["category"]
    page.select_option("#f-cat", cat)
    assert sorted(r[0] for r in table(page, "#trials")) == sorted(
        t["task_id"] for t in summary["tasks"] if t["category"] == cat
    )
    page.select_option("#f-cat", "")
    page.fill("#f-max", "0.99")
    assert [r[0] for r in table(page, "#trials")] == [
        t["task_id"] for t in summary["tasks"] if t["score"] <= 0.99
    ]
    page.fill("#f-max", "")
    page.select_option("#f-err", "some")
    assert table(page, "#trials") == []
    assert page.text_content("#t-count") == f"0 of {len(summary['tasks'])} trials"


def test_compare_page_puts_disagreements_first(page, server, jobs):
    oracle, nop, model = (read_summary(jobs[k]) for k in ("oracle", "nop", "model"))
    page.goto(server + "compare.html")
    head = table(page, "#compare-head")
    # each job's mean with its interval, as its summary has them (the cell had the mean alone)
    assert [r[4] for r in head] == [
        f4(s["mean"]["mean"])
        + (f" [{s['mean']['low']:.3f}, {s['mean']['high']:.3f}]" if s["mean"]["low"] is not None
           else "")
        for s in (oracle, nop, model)
    ]  # fmt: skip
    # four-folder jobs: no WildClawBench average, no Acc
    assert [(r[2], r[3]) for r in head] == [("—", "—")] * 3
    scores = [{t["task_id"]: t["score"] for t in s["tasks"]} for s in (oracle, nop, model)]
    rows = table(page, "#compare")
    expected = []
    for task in sorted(set().union(*scores)):
        have = [s.get(task) for s in scores]
        graded = [x for x in have if x is not None]
        spread = max(graded) - min(graded) if len(graded) >= 2 else 0.0
        # disagreements first, then a job that did not run or grade it, then agreements
        expected.append((0 if spread > 0 else 1 if None in have else 2, -spread, task))
    assert [r[0] for r in rows] == [task for *_, task in sorted(expected)]
    for r in rows:  # the spread column: over the jobs that graded the task
        graded = [s[r[0]] for s in scores if s.get(r[0]) is not None]
        want = f"{max(graded) - min(graded):.3f}" if len(graded) >= 2 else "—"
        assert r[-1] == want
    for r in rows:
        for i, s in enumerate(scores):
            cell = r[2 + i]
            assert cell.startswith(f4(s[r[0]])) if r[0] in s else cell == "not run"
    # paired by task against the first job: the mean difference over the tasks both graded
    # and its 95% t interval (t quantiles of 0.975 from a table, not from the code under test)
    t975 = {1: 12.706204736174698, 2: 4.302652729911275, 3: 3.182446305284263}
    paired = table(page, "#paired")
    assert [r[0] for r in paired] == [r[0] for r in head[1:]]
    for row, other in zip(paired, scores[1:], strict=True):
        both = [t for t in scores[0] if scores[0][t] is not None and other.get(t) is not None]
        diffs = [other[t] - scores[0][t] for t in both]
        mean = sum(diffs) / len(diffs)
        half = t975[len(diffs) - 1] * statistics.stdev(diffs) / math.sqrt(len(diffs))
        # a difference of scores in [0, 1] lies in [-1, 1]: its interval clipped there, as
        # the means' are to [0, 1] (helper-215 saw [-1.003, -0.993])
        low, high = max(-1.0, mean - half), min(1.0, mean + half)
        assert row[1:] == [
            str(len(diffs)), f"{mean:+.3f}", f"[{low:+.3f}, {high:+.3f}]",
            str(sum(d > 0 for d in diffs)), str(sum(d < 0 for d in diffs)),
            str(sum(d == 0 for d in diffs)),
        ]  # fmt: skip


def test_compare_page_chooses_its_jobs_and_says_when_they_ran_different_tasks(page, server, jobs):
    """helper-219: the compare page compared every job, against the first in folder order,
    with no way to choose but an undocumented ``?jobs=``; and a job that ran 3 of the 10
    tasks stood beside the others' means with no word that they were over other tasks."""
    ran = [{t["task_id"] for t in read_summary(jobs[k])["tasks"]} for k in ("oracle", "model")]
    page.goto(server + "compare.html")
    missing = sorted(ran[0] - ran[1])  # the model job ran a subset of the oracle job's tasks
    assert missing and ran[1] < ran[0]
    assert page.text_content("#tasks-differ") == (
        f"{len(missing)} of {len(ran[0])} tasks were not run by every job ({', '.join(missing)}"
        "): each job's mean is over the tasks it ran; the paired table is over the tasks both "
        "graded."
    )
    # the form: nop and the model job, against the model job
    page.uncheck("#choose-jobs input[value=job0]")
    page.select_option("#choose-jobs select[name=base]", "job2")
    page.click("#choose-jobs button")
    page.wait_for_load_state()
    assert "jobs=job1&jobs=job2&base=job2" in page.url
    titles = [r[0] for r in table(page, "#compare-head")]
    assert titles == ["model · scripted/demo", "nop · nop"], titles
    assert [r[0] for r in table(page, "#paired")] == ["nop · nop"]
    # the baseline unticked: it is not compared (helper-221: it came back, still the baseline)
    page.uncheck("#choose-jobs input[value=job2]")
    page.check("#choose-jobs input[value=job0]")
    page.click("#choose-jobs button")
    page.wait_for_load_state()
    assert [r[0] for r in table(page, "#compare-head")] == ["oracle · oracle", "nop · nop"]
    # a baseline with no job ticked: every job, against it (helper-221: it alone)
    page.goto(server + "compare.html?base=job1")
    assert [r[0] for r in table(page, "#compare-head")] == [
        "nop · nop", "oracle · oracle", "model · scripted/demo"
    ]  # fmt: skip
    # oracle and nop ran the same tasks: no note (the comma-separated form, as before)
    page.goto(server + "compare.html?jobs=job0,job1")
    assert page.locator("#tasks-differ").count() == 0
    assert [r[0] for r in table(page, "#compare-head")] == ["oracle · oracle", "nop · nop"]


def test_compare_page_says_which_tasks_changed_between_the_runs(page, server, jobs, tmp_path):
    """A task edited between two runs of one suite (its file, grader or fixtures: its trials'
    ``task_digest`` differ) was compared as one task with no word: the suite's path is the
    same, so the different-suites note said nothing either."""
    page.goto(server + "compare.html")
    assert page.locator("#tasks-edited").count() == 0  # (the jobs ran one suites/demo)
    copy = tmp_path / "nop-after-an-edit"
    shutil.copytree(jobs["nop"], copy)
    results = sorted(copy.glob("*/*/result.json"))
    edited = sorted({p.parent.parent.name for p in results[:2]})
    for p in results:
        if p.parent.parent.name in edited:
            result = json.loads(p.read_text())
            assert result["task_digest"]  # (a real digest, recorded when the trial ran)
            p.write_text(json.dumps({**result, "task_digest": "0" * 64}))
    proc, base = start_view(jobs["oracle"], copy)
    try:
        page.goto(base + "compare.html")
        said = page.text_content("#tasks-edited")
        marked = table(page, "#compare")
        assert page.locator("#suites-differ").count() == 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert said == (
        f"{len(edited)} tasks changed between these runs (what the task asks or how it is "
        "graded; its workspace files' contents are not compared): "
        f"{', '.join(edited)}. Their scores are not of one task."
    )
    # and in the per-task table, each of them marked
    assert sorted(r[0].removesuffix(" changed") for r in marked if r[0].endswith(" changed")) == (
        edited
    )


def test_compare_page_says_when_the_jobs_ran_different_suites(page, server, jobs, tmp_path):
    """helper-215: a job of an edited copy of the suite was paired task by task with one of
    the suite itself, with no word that the tasks may differ."""
    page.goto(server + "compare.html")
    assert page.locator("#suites-differ").count() == 0  # (the three jobs ran suites/demo)
    copy = tmp_path / "nop-of-a-copy"
    shutil.copytree(jobs["nop"], copy)
    [path] = copy.glob("summary_*.json")
    summary = json.loads(path.read_text())
    summary["suite_path"] = str(tmp_path / "demo-copy")
    path.write_text(json.dumps(summary))
    proc, base = start_view(jobs["oracle"], copy)
    try:
        page.goto(base + "compare.html")
        said = page.text_content("#suites-differ")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    oracle = read_summary(jobs["oracle"])["suite_path"]
    # the same suite named relative to where the job ran (its folder's parent): one suite
    same = tmp_path / "nop-same-suite"
    shutil.copytree(jobs["nop"], same)
    [path] = same.glob("summary_*.json")
    path.write_text(json.dumps({**summary, "suite_path": os.path.relpath(oracle, tmp_path)}))
    proc2, base2 = start_view(jobs["oracle"], same)
    try:
        page.goto(base2 + "compare.html")
        assert page.locator("#suites-differ").count() == 0
    finally:
        proc2.terminate()
        proc2.wait(timeout=10)
    assert said == (
        f"These jobs ran different suites (oracle · oracle: {oracle}; nop-of-a-copy · nop: "
        f"{tmp_path / 'demo-copy'}): "
        "their tasks are compared by id, which may not name the same task in each."
    )


def test_trial_page_shows_the_trial_files(page, server, jobs):
    [folder] = [p.parent for p in (jobs["model"] / "000015").glob("*/result.json")]
    score = json.loads((folder / "score.json").read_text())
    result = json.loads((folder / "result.json").read_text())
    calls = [json.loads(x) for x in (folder / "model_calls.jsonl").read_text().splitlines()]
    page.goto(server + f"job2/trials/000015/{folder.name}.html")
    assert page.text_content("#t-score") == f4(score["score"])
    subs = {r[0]: r[1] for r in table(page, "#subscores")}
    assert subs == {k: f4(v) for k, v in score["subscores"].items()}
    mc = table(page, "#model-calls")
    assert [r[0] for r in mc] == [str(c["seq"]) for c in calls]
    assert [r[7] for r in mc] == [f"${c['usage']['cost_usd']:,.4f}" for c in calls]
    assert all(c["usage"]["cost_usd"] == COST for c in calls)
    # the timeline: one tool event per tool call, with the tool names in order
    names = page.eval_on_selector_all(".ev-tool .tool-name", "e => e.map(x => x.textContent)")
    assert len(names) == result["tool_calls"]
    assert names == ["read", "exec", "write"]
    # the end state: the file the agent wrote, as created, with its content
    files = sorted(p.relative_to(folder / "end_state").as_posix()
                   for p in (folder / "end_state").rglob("*") if p.is_file())  # fmt: skip
    shown = page.eval_on_selector_all("#end-state summary code", "e => e.map(x => x.textContent)")
    assert shown == files == ["results/results.md"]
    assert page.locator("#end-state .badge.st-created").count() == 1


def test_sub_agent_session_nests_and_cron_messages_show(page, server, jobs):
    [folder] = [p.parent for p in (jobs["model"] / "000001").glob("*/result.json")]
    [sub] = list((folder / "subagents").glob("*.jsonl"))
    sub_lines = [json.loads(x) for x in sub.read_text().splitlines()]
    sub_user = next(x["message"] for x in sub_lines if x.get("message", {}).get("role") == "user")
    page.goto(server + f"job2/trials/000001/{folder.name}.html")
    nested = page.locator(".ev-tool .subagent")
    assert nested.count() == 1
    key = nested.locator(".ev-head code").first.text_content()  # the session key, as spawned
    assert "".join(c if c.isalnum() or c in "-_." else "_" for c in key) == sub.stem
    assert nested.locator(".ev-user pre").first.text_content() == sub_user["content"][0]["text"]
    assert nested.locator(".ev-tool .tool-name").all_text_contents() == ["exec"]
    # the spawning call is the main session's first tool call; the cron message came later
    main_tools = page.locator("main > ol.timeline > li.ev-tool > .ev-head .tool-name")
    assert main_tools.all_text_contents()[:3] == ["sessions_spawn", "sessions_yield", "cron"]
    cron = page.locator(".ev-cron pre").all_text_contents()
    assert len(cron) == 1 and cron[0].startswith("[cron") and CRON_TEXT in cron[0]


def test_trial_page_of_a_failed_trial(page, server, jobs):
    [folder] = [p.parent for p in (jobs["model"] / "000003").glob("*/result.json")]
    score = json.loads((folder / "score.json").read_text())
    page.goto(server + f"job2/trials/000003/{folder.name}.html")
    assert page.text_content("#t-score") == f4(score["score"])
    assert "I cannot help with that." in page.text_content(".ev-assistant")


def test_pages_request_nothing_but_the_local_server(page, server, jobs):
    [folder] = [p.parent for p in (jobs["oracle"] / "000015").glob("*/result.json")]
    for path in ("", "job0/index.html", "compare.html", f"job0/trials/000015/{folder.name}.html"):
        page.goto(server + path)
        page.wait_for_timeout(1200)  # let the job page poll once
    assert page.requests and all(u.startswith(server) for u in page.requests), page.requests
    assert any("/api/job0/state.json" in u for u in page.requests)


def test_bundle_opens_from_file(page, jobs, tmp_path):
    from view_helpers import clawrig

    out = tmp_path / "site"
    proc = clawrig("view", "--bundle", out, jobs["oracle"], jobs["model"])
    assert proc.returncode == 0, proc.stderr
    summary = read_summary(jobs["model"])
    page.goto((out / "index.html").as_uri())
    page.click("text=model · scripted/demo")
    assert page.text_content("#h-mean") == f4(summary["mean"]["mean"])
    page.click("#trials a >> text=000015")
    assert page.text_content("#t-score") == f4(1.0)
    page.goto((out / "compare.html").as_uri())
    assert len(table(page, "#compare")) == len(
        {t["task_id"] for t in read_summary(jobs["oracle"])["tasks"]} | {"000003", "000015"}
    )
    assert all(u.startswith("file://") for u in page.requests), page.requests
    assert not any("state.json" in u for u in page.requests)


def test_unknown_pages_are_404(server):
    import httpx

    for path in ("job9/index.html", "job0/trials/000015/nope.html",
                 "job0/trials/..%2F..%2Fetc/passwd.html", "api/job9/state.json"):  # fmt: skip
        assert httpx.get(server + path).status_code == 404, path
    # a page is a page saying why, with the way back (helper-168: a line of JSON); the state
    # API answers JSON
    page = httpx.get(server + "job0/trials/000015/<nope>.html")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "404: no trial 000015/&lt;nope&gt; in job job0" in page.text
    assert '<a href="/">the jobs</a>' in page.text and "<nope>" not in page.text
    api = httpx.get(server + "api/job9/state.json")
    assert api.json()["detail"].startswith("no job 'job9'")


def test_egress_and_web_logs_show_as_tables(page, jobs, tmp_path):
    """A trial folder with the egress proxy's and the web recorder's logs (their documented
    line shapes) shows one table row per line, refused connections marked."""
    job = tmp_path / "job"
    shutil.copytree(jobs["model"], job, ignore=shutil.ignore_patterns(".clawrig*"))
    [folder] = [p.parent for p in (job / "000015").glob("*/result.json")]
    egress = [
        {"time": "2026-01-01T00:00:01Z", "phase": "agent", "method": "CONNECT",
         "host": "pypi.org", "port": 443, "verdict": "allowed", "bytes_up": 512,
         "bytes_down": 20480, "seconds": 0.25},
        {"time": "2026-01-01T00:00:02Z", "phase": "agent", "method": "CONNECT",
         "host": "evil.example", "port": 443, "verdict": "refused", "bytes_up": 0,
         "bytes_down": 0, "seconds": 0.0, "reason": "host not in the allow list"},
    ]  # fmt: skip
    web = [
        {"kind": "search", "key": "a" * 64, "request": {"query": "coauthor graph", "count": 5},
         "response": {"provider": "brave", "status": 200, "body_sha256": "b" * 64,
                      "error": None}, "task_id": "000015", "run_index": 0},
        {"kind": "fetch", "key": "c" * 64, "request": {"url": "https://example.org/"},
         "response": {"status": None, "error": "host not allowed"}, "task_id": "000015",
         "run_index": 0},
    ]  # fmt: skip
    (folder / "egress.jsonl").write_text("".join(json.dumps(e) + "\n" for e in egress))
    (folder / "web_calls.jsonl").write_text("".join(json.dumps(w) + "\n" for w in web))
    view, base = start_view(job)
    try:
        page.goto(base + f"job0/trials/000015/{folder.name}.html")
        rows = table(page, "#egress")
        assert [(r[3], r[5], r[9]) for r in rows] == [
            (e["host"], e["verdict"], e.get("reason", "")) for e in egress
        ]
        assert page.locator("#egress tr.bad").count() == 1
        assert [(r[0], r[1], r[4]) for r in table(page, "#web")] == [
            ("search", "coauthor graph", ""),
            ("fetch", "https://example.org/", "host not allowed"),
        ]
    finally:
        view.terminate()
        view.wait(timeout=10)


def test_a_trial_page_whose_folder_was_deleted_is_a_404(jobs, tmp_path):
    """helper-195: a trial folder deleted while the viewer ran showed a page of 200 with a
    validation error of nothing, "transcript: no chat.jsonl" and "no model calls recorded",
    read as facts about the trial."""
    import shutil

    import httpx
    from view_helpers import start_view

    job = tmp_path / "job"
    shutil.copytree(jobs["oracle"], job)
    trial = next(p.parent for p in sorted(job.glob("*/*/result.json")))
    rel = trial.relative_to(job)
    view, base = start_view(job)
    try:
        url = f"{base}job0/trials/{rel}.html"
        assert httpx.get(url, timeout=30).status_code == 200  # (listed, then the page read)
        shutil.rmtree(trial)
        gone = httpx.get(url, timeout=30)
        assert gone.status_code == 404
        assert f"404: no trial {rel} in job job0 (or its folder is gone)" in gone.text
    finally:
        view.terminate()
        view.wait(timeout=10)


def test_a_trial_page_says_why_its_files_status_is_unknown(page, jobs, tmp_path):
    """helper-215: a trial page showed files as "unknown" with no reason when the job's suite
    could not be read."""
    moved = tmp_path / "oracle-elsewhere"
    shutil.copytree(jobs["oracle"], moved)
    [path] = moved.glob("summary_*.json")
    path.write_text(json.dumps({**json.loads(path.read_text()), "suite_path": "/no/such/suite"}))
    for rj in moved.glob("*/*/result.json"):  # (a trial's own task_source would find it)
        rj.write_text(json.dumps({**json.loads(rj.read_text()), "task_source": "/no/such"}))
    [folder] = [p.parent for p in (moved / "000015").glob("*/result.json")]
    files = [p for p in (folder / "end_state").rglob("*") if p.is_file()]
    assert files  # (the oracle wrote its results there)
    proc, base = start_view(moved)
    try:
        page.goto(base + f"job0/trials/000015/{folder.name}.html")
        badges = page.locator("#end-state .badge").all_text_contents()
        said = page.text_content("#state-unknown")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert badges == ["unknown"] * len(files)
    assert said is not None and said.startswith(
        "unknown: the task's initial workspace could not be read here (its suite is not on "
        "this machine, or its files there did not read)"
    )
