"""The folder index (cached in the job folder, refreshed lazily), bad input, Inspect export."""

from __future__ import annotations

import html
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from view_helpers import CLAWRIG, COST, DEMO, clawrig, read_summary, responder, start_view

from clawrig.testing.scripted_server import ScriptedServer
from clawrig.view.index import INDEX_FILE, FolderIndex, open_jobs


def copy_job(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(INDEX_FILE, ".clawrig.lock"))
    return dst


def test_index_is_cached_and_follows_the_folder(jobs, tmp_path):
    job = copy_job(jobs["oracle"], tmp_path / "job")
    summary = read_summary(job)
    index = FolderIndex(job, min_interval=0)
    cached = json.loads((job / INDEX_FILE).read_text())
    assert {r["id"] for r in cached["rows"]} == {t["trial"] for t in summary["tasks"]}
    assert {r["id"]: r["score"] for r in cached["rows"]} == {
        t["trial"]: t["score"] for t in summary["tasks"]
    }
    # a second index of the folder reads the cache: rows are equal
    assert FolderIndex(job).rows == index.rows
    # a new trial folder appears (renamed in whole, as the runner does) -> one more row
    first = summary["tasks"][0]["trial"]
    copy = job / first.split("/")[0] / "copy_of_trial"
    shutil.copytree(job / first, copy)
    assert index.refresh() is True
    assert f"{first.split('/')[0]}/copy_of_trial" in index.rows
    assert index.refresh() is False  # nothing changed since
    # a removed trial folder -> its row goes; an unreadable result.json -> an "unreadable" row
    shutil.rmtree(copy)
    second = job / summary["tasks"][1]["trial"]
    (second / "result.json").write_text('{"task_id": 5}')
    fresh = FolderIndex(job)  # the first open checks every result.json's mtime
    assert f"{first.split('/')[0]}/copy_of_trial" not in fresh.rows
    row = fresh.rows[summary["tasks"][1]["trial"]]
    assert row["err"] == "unreadable" and row["msg"].startswith("result.json:")


def test_bad_input_is_one_line(jobs, tmp_path):
    proc = clawrig("view", tmp_path / "missing", "--port", "0")
    assert proc.returncode == 2 and "no such folder" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    # no folder given, outside the repository: the default named, and what to give instead
    proc = clawrig("view", "--port", "0", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "clawrig: error: JOB_DIR: no such folder: output/demo (the default: what `make demo` "
        "writes in the repository); give the job folders to show (clawrig run's --output), "
        "e.g. clawrig view path/to/output"
    ]
    # a file given for the folder: said as such (helper-164: "no such folder")
    (tmp_path / "afile").write_text("x")
    proc = clawrig("view", tmp_path / "afile", "--port", "0")
    assert proc.returncode == 2
    assert proc.stderr == f"clawrig: error: JOB_DIR: {tmp_path / 'afile'} is not a folder\n"
    (tmp_path / "empty").mkdir()
    proc = clawrig("view", "--bundle", tmp_path / "b", tmp_path / "empty")
    assert proc.returncode == 2 and proc.stderr == (
        f"clawrig: error: JOB_DIR: no job in {tmp_path / 'empty'} yet: nothing to write\n"
    )
    (tmp_path / "file").write_text("x")
    proc = clawrig("view", "--bundle", tmp_path / "file", jobs["oracle"])
    assert proc.returncode == 2 and "is a file" in proc.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = clawrig("view", jobs["oracle"], "--port", taken.getsockname()[1])
    assert proc.returncode == 2 and "--host/--port: cannot listen" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = clawrig("export", "inspect", tmp_path / "empty", tmp_path / "logs")
    assert proc.returncode == 2 and "not a job folder" in proc.stderr
    # several bad folders among good ones: each named in the one line (helper-200: the first
    # alone, so a user fixed them one run at a time)
    (tmp_path / "notjob").mkdir()
    (tmp_path / "notjob" / "x.txt").write_text("x")
    proc = clawrig("view", tmp_path / "missing", jobs["oracle"], tmp_path / "notjob", "--port", "0")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr == (
        f"clawrig: error: JOB_DIR: no such folder: {tmp_path / 'missing'}; "
        f"{tmp_path / 'notjob'}: not a job folder (no summary_<model>.json, no trials)\n"
    )


def test_bundle_into_a_place_that_cannot_be_written_is_one_line(jobs, tmp_path):
    """--bundle into /proc (nothing can be created there) or under a file is refused with one
    line naming the flag, exit 2, before anything is written (it was a FileNotFoundError
    traceback from the bundle's mkdir)."""
    proc = clawrig("view", jobs["oracle"], "--bundle", "/proc/x")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "--bundle: cannot write /proc/x: no file or folder can be created in /proc" in (
        proc.stderr
    )
    assert len(proc.stderr.strip().splitlines()) == 1
    (tmp_path / "file").write_text("x")
    proc = clawrig("view", jobs["oracle"], "--bundle", tmp_path / "file" / "site")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"--bundle: cannot create {tmp_path / 'file' / 'site'}: " in proc.stderr
    assert (tmp_path / "file").read_text() == "x"


def test_inspect_logs_load_with_the_same_scores(jobs, tmp_path):
    from inspect_ai.log import read_eval_log

    for name in ("oracle", "model"):
        summary = read_summary(jobs[name])
        proc = clawrig("export", "inspect", jobs[name], tmp_path / name)
        assert proc.returncode == 0, proc.stderr
        [path] = (tmp_path / name).glob("*.eval")
        log = read_eval_log(str(path))
        assert log.status == "success" and log.eval.model == summary["model"]
        got = {(s.id, s.epoch - 1): s.scores["clawrig"].value for s in log.samples}
        assert got == {(t["task_id"], t["run_index"]): t["score"] for t in summary["tasks"]}
        metrics = {k: m.value for k, m in log.results.scores[0].metrics.items()}
        # the demo suite is a four-folder set: neither WildClawBench's average nor
        # DataClawBench's Acc is its number (the viewer shows "-" for both; helper-140)
        assert summary["formats"] == ["fourfolder"]
        assert metrics == {"mean": summary["mean"]["mean"]}
        tokens = sum(u.total_tokens for s in log.samples for u in s.model_usage.values())
        assert tokens == summary["usage"]["total_tokens"]
    # the model job's transcript: the tool calls and their results, in Inspect's shapes
    log = read_eval_log(str(next((tmp_path / "model").glob("*.eval"))))
    solved = next(s for s in log.samples if s.id == "000015")
    calls = [
        c.function for m in solved.messages if m.role == "assistant" for c in m.tool_calls or []
    ]
    assert calls == ["read", "exec", "write"]
    assert [m.role for m in solved.messages].count("tool") == 3
    assert solved.scores["clawrig"].metadata["subscores"]["overall_score"] == 1.0


def _status_cells(site: Path) -> dict[str, str]:
    """The jobs list's status column of a --bundle site: job folder -> status."""
    html = (site / "index.html").read_text()
    rows = re.findall(r'<td class="muted">([^<]*)</td>\s*<td>([^<]*)</td>', html)
    return {folder: status for folder, status in rows}


def test_a_job_stopped_early_is_not_listed_as_finished(jobs, tmp_path):
    """The jobs list and the job page say how a job ended: a job stopped by its budget or by
    Ctrl-C is not "finished" (both said "finished"; only the job page had a second badge), nor
    one with a trial left unscored."""
    budget = tmp_path / "budget"
    with ScriptedServer(responder=responder(), models=["demo"]) as srv:
        proc = clawrig(
            "run", DEMO, "--suite", "000015,000003", "-m", "scripted/demo", "-p", "1",
            "--budget-usd", COST / 2, "--output", budget,
            env={"SCRIPTED_BASE_URL": srv.base_url},
        )  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert read_summary(budget)["budget_stopped"] is True
    # a job stopped by Ctrl-C: its summary says so (what the runner writes on SIGINT)
    interrupted = copy_job(jobs["oracle"], tmp_path / "interrupted")
    path = next(interrupted.glob("summary_*.json"))
    summary = json.loads(path.read_text())
    path.write_text(json.dumps(summary | {"interrupted": True, "interrupted_by": "SIGINT"}))
    # a job that ran every trial, one of them unscored (helper-157: "finished", as a job
    # with every trial graded): sample 000008's mail service exits at once (setup). (Its
    # services under 64 MiB were no sure setup error: in CI199 they fit, and the kernel
    # killed one later, while the agent ran: the agent's error, scored)
    suite = tmp_path / "suite"
    shutil.copytree(DEMO, suite)
    intent = suite / "intent" / "000008.json"
    spec = json.loads(intent.read_text())
    spec["services"][0] = {"name": "gmail", "command": "exit 3", "port": 9100}
    intent.write_text(json.dumps(spec))
    errored = tmp_path / "errored"
    proc = clawrig(
        "run", suite, "--suite", "000015,000008", "--agent", "oracle",
        "--max-attempts", "1", "--output", errored,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert read_summary(errored)["errors_by_kind"] == {"setup": 1}
    # a finished job whose summary file was cut: not "no summary ... written when the job
    # ends" (helper-164)
    cut = copy_job(jobs["nop"], tmp_path / "cut")
    next(cut.glob("summary_*.json")).write_text("{bad")
    site = tmp_path / "site"
    proc = clawrig("view", "--bundle", site, budget, interrupted, jobs["nop"], errored, cut)
    assert proc.returncode == 0, proc.stderr
    assert _status_cells(site) == {
        str(budget): "stopped by the budget",
        str(interrupted): "interrupted (SIGINT)",
        str(jobs["nop"]): "finished",
        str(errored): "finished, 1 not scored",
        str(cut): "summary unreadable",
    }
    pages = [(site / f"job{i}" / "index.html").read_text() for i in range(5)]
    badges = [re.search(r'id="job-status"[^>]*>([^<]*)<', page) for page in pages]
    assert [b.group(1) if b else None for b in badges] == [
        "stopped by the budget",
        "interrupted (SIGINT)",
        "finished",
        "finished, 1 not scored",
        "summary unreadable",
    ]
    assert "the job's summary file cannot be read" in pages[4]
    assert "the summary is written when the job ends" not in pages[4]
    # a warning's badge, not the green one of a job with every trial graded
    assert 'class="badge done" id="job-status"' in pages[2]
    assert 'class="badge warn" id="job-status"' in pages[3]
    # and the unscored trial's page says so, as the job page does (helper-159: "score —")
    (page,) = (site / "job3" / "trials" / "000008").glob("*.html")
    said = re.search(r'id="t-not-scored">(.*?)</span>', page.read_text())
    assert said and said.group(1) == "not scored (setup error: <code>--resume</code> runs it again)"
    (graded,) = (site / "job3" / "trials" / "000015").glob("*.html")
    assert 'id="t-not-scored"' not in graded.read_text()


def test_a_job_without_a_summary_is_titled_by_its_model(jobs, tmp_path):
    """A job with no summary yet (running, or killed) is titled by its model as recorded
    (new-user review: the title showed the file name's slug, ``scripted_demo``): from the
    progress file, else from its trials."""
    from clawrig.view.index import open_jobs

    job = copy_job(jobs["model"], tmp_path / "job")
    summary = next(job.glob("summary_*.json"))
    data = json.loads(summary.read_text())
    assert data["model"] == "scripted/demo" and summary.name == "summary_scripted_demo.json"
    summary.unlink()
    progress = job / "progress_scripted_demo.json"
    progress.write_text(json.dumps({"model": "scripted/demo", "job_id": data["job_id"]}))
    (view,) = open_jobs([job])
    assert view.title == "job · scripted/demo"
    progress.unlink()  # killed before its first progress write: the trials say
    (view,) = open_jobs([job])
    assert view.title == "job · scripted/demo"


def test_an_rl_folder_whose_episodes_were_all_set_aside_is_a_job(jobs, tmp_path):
    """An RL output folder (rollouts.json) whose every episode was set aside (a server killed
    mid-episode, the next one's sweep), copied without its hidden lock files: no trial, no
    summary. The viewer said "not a job folder"; `clawrig export` took it. It is one job, RL
    episodes, its id the rollouts file's, the set-aside spend its cost, and a folder holding it
    lists it as a job (not as a folder of jobs)."""
    from clawrig.view.index import folders_of_jobs, open_jobs
    from clawrig.view.pages import headline

    out = tmp_path / "jobs" / "rl"
    result = next(copy_job(jobs["model"], tmp_path / "src").glob("*/*/result.json"))
    kept = out / "_retried" / "000001__killed"
    kept.mkdir(parents=True)
    spent = json.loads(result.read_text())
    spent["job_id"], spent["usage"]["cost_usd"] = "rl-job", 0.25
    (kept / "result.json").write_text(json.dumps(spent))
    (out / "rollouts.json").write_text(
        json.dumps({"format": "clawrig rollouts", "job_id": "rl-job"})
    )
    (view,) = open_jobs([out])
    shown = headline(view, view.rows())
    assert (shown["status"], shown["job_id"], shown["trials"]) == ("RL episodes", "rl-job", 0)
    assert (shown["set_aside"], shown["cost"]) == (1, 0.25)
    assert folders_of_jobs([out.parent, out]) == [out.parent]
    assert [v.folder for v in open_jobs([out.parent])] == [out]


def test_a_folder_without_a_summary_counts_its_trials_model_requests(jobs, tmp_path):
    """helper-199: an RL output folder (no summary, ever) showed "— model requests" beside
    its tokens. The headline sums the trials' usage, as it does their tokens."""
    from clawrig.view.index import open_jobs
    from clawrig.view.pages import headline

    job = copy_job(jobs["model"], tmp_path / "job")
    for summary in job.glob("summary_*.json"):
        summary.unlink()
    results = [json.loads(p.read_text()) for p in job.glob("*/*/result.json")]
    (job / "rollouts.json").write_text(
        json.dumps({"format": "clawrig rollouts", "job_id": results[0]["job_id"]})
    )
    (view,) = open_jobs([job])
    shown = headline(view, view.rows())
    assert shown["trials"] == len(results) > 0
    assert shown["requests"] == sum(r["usage"]["request_count"] for r in results) > 0
    assert shown["tokens"] == sum(r["usage"]["total_tokens"] for r in results)


def test_a_benchmarks_own_numbers_head_only_a_suite_of_its_format(jobs, tmp_path):
    """The job page shows WildClawBench's average and DataClawBench's Acc for suites of those
    formats only, as the command's headline does (a four-folder job showed three cards of one
    number); a summary of an older clawrig, without formats, keeps them all."""
    from clawrig.view.index import open_jobs
    from clawrig.view.pages import headline

    job = copy_job(jobs["oracle"], tmp_path / "job")
    path = next(job.glob("summary_*.json"))
    summary = json.loads(path.read_text())
    wild, acc = summary["wildclaw"]["overall"], summary["overall_score"]
    assert wild is not None and acc is not None
    for formats, shown in (
        (["fourfolder"], (None, None)),
        (["wildclaw"], (wild, None)),
        (["dataclaw", "fourfolder"], (None, acc)),
        (None, (wild, acc)),
    ):
        edited = {k: v for k, v in summary.items() if k != "formats"}
        path.write_text(json.dumps(edited if formats is None else edited | {"formats": formats}))
        (view,) = open_jobs([job])
        head = headline(view, view.rows())
        assert (head["wildclaw"], head["acc"]) == shown, formats
        assert bool(head["wild_categories"]) == (shown[0] is not None), formats
        assert head["mean"]["mean"] == summary["mean"]["mean"]


def test_a_folder_of_jobs_shows_each_of_them(jobs, tmp_path):
    """``clawrig view output`` where ``output/`` holds job folders (``make demo``'s
    ``output/demo`` and another's beside it) and a job of its own: every job is shown (only
    the folder's own was, a new user's finding); a folder with neither stays an error."""
    from clawrig.view.index import open_jobs

    out = tmp_path / "output"
    copy_job(jobs["oracle"], out / "demo")
    copy_job(jobs["model"], out / "other")
    (out / "notes").mkdir()  # a folder that holds no job: left out
    views = open_jobs([out])
    assert [(v.index.folder, v.slug) for v in views] == [
        (out / "demo", "oracle"),
        (out / "other", "scripted_demo"),
    ]
    assert [v.key for v in views] == ["job0", "job1"]
    copy_job(jobs["model"], tmp_path / "own")  # a job folder that holds a job folder too
    shutil.copytree(out / "demo", tmp_path / "own" / "demo")
    views = open_jobs([tmp_path / "own", out / "demo"])
    assert [(v.index.folder, v.slug) for v in views] == [
        (tmp_path / "own", "scripted_demo"),
        (tmp_path / "own" / "demo", "oracle"),
        (out / "demo", "oracle"),
    ]
    assert [v.key for v in views] == ["job0", "job1", "job2"]


def test_a_second_bundle_into_the_same_folder_leaves_none_of_the_firsts_pages(jobs, tmp_path):
    # the first bundle of two jobs, then one of the oracle job alone: the model job's pages and
    # the compare page were left there, unlinked but published with the folder
    site = tmp_path / "site"
    assert clawrig("view", "--bundle", site, jobs["oracle"], jobs["model"]).returncode == 0
    first = {p.relative_to(site) for p in site.rglob("*.html")}
    assert Path("compare.html") in first
    (site / "notes.txt").write_text("the publisher's own file\n")
    assert clawrig("view", "--bundle", site, jobs["oracle"]).returncode == 0
    second = {p.relative_to(site) for p in site.rglob("*.html")}
    alone = tmp_path / "alone"
    assert clawrig("view", "--bundle", alone, jobs["oracle"]).returncode == 0
    assert second == {p.relative_to(alone) for p in alone.rglob("*.html")}  # a fresh bundle's
    assert second < first and Path("compare.html") not in second
    assert sorted(p.name for p in site.iterdir() if p.is_dir()) == sorted(
        p.name for p in alone.iterdir() if p.is_dir()
    )  # the model job's folder went with its pages
    assert (site / "notes.txt").read_text() == "the publisher's own file\n"


def test_a_renamed_summary_shows_its_trials_and_a_folder_given_twice_is_one_job(jobs, tmp_path):
    """helper-115 (a) and (e): a summary renamed by hand (``summary_oracle.bak.json``) showed
    its job with 0 trials beside its mean; ``view --bundle X J J`` made two identical jobs."""
    from clawrig.view.index import open_jobs

    job = copy_job(jobs["oracle"], tmp_path / "job")
    summary = read_summary(job)
    (job / "summary_oracle.json").rename(job / "summary_oracle.bak.json")
    (view,) = open_jobs([job])
    assert view.slug == "oracle.bak"
    assert sorted(r["id"] for r in view.rows()) == sorted(t["trial"] for t in summary["tasks"])
    assert len(open_jobs([job, job, tmp_path / "job" / "."])) == 1
    # a backup copy beside the summary is the same job, shown once (helper-118: twice, and a
    # compare page of the job with itself), by the file named for its model
    shutil.copy(job / "summary_oracle.bak.json", job / "summary_oracle.json")
    (view,) = open_jobs([job])
    assert (
        view.slug == "oracle" and view.key == "job0" and len(view.rows()) == len(summary["tasks"])
    )


def test_a_summary_with_values_of_the_wrong_type_still_makes_the_pages(jobs, tmp_path):
    """helper-118: a hand-edited summary whose ``pass``, ``errors_by_kind``, ``process`` or
    ``wildclaw`` held values of the wrong type failed ``view --bundle`` with a traceback; the
    bad keys are left out and the rest is shown."""
    job = copy_job(jobs["oracle"], tmp_path / "job")
    path = job / "summary_oracle.json"
    summary = json.loads(path.read_text())
    summary |= {
        "pass": {"1": 5},
        "errors_by_kind": {"a": "b"},
        "process": {"ee": {"mean": "x"}},
        "wildclaw": {"categories": {"a": {"score": "z"}}},
    }
    path.write_text(json.dumps(summary))
    out = tmp_path / "site"
    r = clawrig("view", "--bundle", out, job)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    page = (out / "index.html").read_text()
    assert "oracle" in page and f"{summary['mean']['mean']:.4f}" in page


def test_json_nested_past_the_recursion_limit_makes_no_traceback(jobs, tmp_path):
    """helper-121: a model's tool-call arguments 100,000 lists deep made its trial page a
    traceback (and ``view --bundle`` wrote nothing); a result.json or summary nested so made
    ``view`` and ``run`` tracebacks. Shown as they came; files read as unreadable."""
    from clawrig.runner.batch import unrecorded_job_ids
    from clawrig.view.index import open_jobs
    from clawrig.view.trial import pretty

    deep = "[" * 100_000 + "]" * 100_000
    assert pretty(deep) == deep
    job = copy_job(jobs["oracle"], tmp_path / "job")
    (trial,) = (job / "000015").iterdir()
    (trial / "result.json").write_text(deep)
    (view,) = open_jobs([job])
    [row] = [r for r in view.rows() if r["id"] == f"000015/{trial.name}"]
    assert row["err"] == "unreadable" and row["score"] is None  # (shown as such: helper-206)
    (job / "summary_oracle.json").write_text(deep)
    (view,) = open_jobs([job])
    assert view.summary() is None
    readable = len(list(job.glob("*/*/result.json"))) - 1  # all but the nested one
    assert sum(unrecorded_job_ids(job, "oracle").values()) == readable


def test_a_request_naming_another_host_is_refused(server):
    """DNS rebinding: a web page whose name was made to resolve to 127.0.0.1 reaches the viewer
    with its own name in the Host header; the viewer answers it 400, and the names of its own
    address (loopback: 127.0.0.1, localhost) as before."""
    port = httpx.URL(server).port
    page = httpx.get(server, headers={"host": f"rebound.example:{port}"}, timeout=10)
    assert page.status_code == 400 and page.text == (
        f"host: rebound.example:{port} is not a name of this server (it answers to 127.0.0.1, "
        "::1, localhost; listening with --host 0.0.0.0 it takes any)"
    )
    # the same name in other spellings, and no name at all
    for said in ("127.0.0.1@rebound.example", "rebound.example#@127.0.0.1", "", "[::1"):
        page = httpx.get(server, headers={"host": said}, timeout=10)
        assert page.status_code == 400 and "job0" not in page.text, said
    for name in ("127.0.0.1", "localhost", "LOCALHOST", "[::1]"):
        ok = httpx.get(server, headers={"host": f"{name}:{port}"}, timeout=10)
        assert ok.status_code == 200 and "job0" in ok.text, name


def test_a_request_with_two_host_headers_is_refused(server):
    """helper-152: a request with an allowed Host header first and another name second was
    answered (HTTP takes one Host header: RFC 9112 section 3.2) where uvicorn parses HTTP
    with httptools; with h11 (a plain install) the parser refuses it first."""
    import socket

    port = httpx.URL(server).port
    for second in (f"rebound.example:{port}", f"127.0.0.1:{port}"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: {second}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request", second
        guard = b"host: 2 Host headers in one request (HTTP takes one)"
        assert body in (guard, b"Invalid HTTP request received."), body


def test_listening_beyond_loopback_warns_that_anyone_reaching_it_reads_the_trials(jobs):
    """helper-152: with --host 0.0.0.0 the viewer served every trial to the network, and its
    Host check was off, without a word; on loopback it says nothing more than its address."""
    said = {}
    for host in ("0.0.0.0", "127.0.0.1"):
        proc, base = start_view(jobs["oracle"], "--host", host)
        assert httpx.get(base, timeout=10).status_code == 200
        proc.terminate()
        proc.wait(timeout=10)
        said[host] = proc.stderr.read().decode() if proc.stderr else ""
    assert said["0.0.0.0"].splitlines()[0] == (
        "warning: with --host 0.0.0.0 other machines reach clawrig view, which asks no "
        "password: anyone who reaches it can read every trial of these jobs; on every address "
        "the Host check against DNS rebinding is off too"
    )
    assert "warning" not in said["127.0.0.1"]


def test_the_viewer_started_with_ctrl_c_ignored_exits_130_on_it(jobs):
    """helper-155: started with SIGINT ignored (`&` in a script), a Ctrl-C stopped the viewer
    with exit 0 (clawrig run and serve exit 130)."""
    import signal
    import subprocess
    import time

    from view_helpers import CLAWRIG, free_port

    port = free_port()
    proc = subprocess.Popen(
        [str(CLAWRIG), "view", str(jobs["oracle"]), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130, proc.stderr.read() if proc.stderr else b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_pages_say_why_the_provider_stopped_a_trial_and_the_job(jobs, tmp_path):
    """helper-155: a trial stopped by the provider's refusal showed its stop reason only, and
    a job the model server stopped "stopped: model server" only: the refusal's status and
    message were in the files alone."""
    job = copy_job(jobs["oracle"], tmp_path / "refused")
    path = next(job.glob("summary_*.json"))
    why = "the model's server refuses its requests: HTTP 403 <account> suspended"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"provider_stopped": why}))
    rj = next(job.glob("000015/*/result.json"))
    detail = "HTTP 400: context <b>too</b> long"
    result = json.loads(rj.read_text()) | {"stop_reason": "model_error", "stop_detail": detail}
    rj.write_text(json.dumps(result))
    site = tmp_path / "site"
    proc = clawrig("view", "--bundle", site, job)
    assert proc.returncode == 0, proc.stderr
    page = (site / "job0" / "index.html").read_text()
    said = re.search(r'id="job-stopped-why">([^<]*)<', page)
    assert said and html.unescape(said.group(1)) == why and "<account>" not in page
    trial = (site / "job0" / "trials" / "000015" / f"{rj.parent.name}.html").read_text()
    line = re.search(r'id="t-stop-detail">([^\n]*)</p>', trial)
    assert line and html.unescape(line.group(1)) == f"stopped (model_error): {detail}"
    assert "<b>too" not in trial  # (escaped)


def test_a_job_folder_deleted_while_the_viewer_runs_says_so(jobs, tmp_path):
    """A job's folder deleted after ``clawrig view`` started was still listed with "no
    summary" and the trials the viewer's index last saw: the jobs list and the job page say
    the folder was deleted."""
    job = copy_job(jobs["oracle"], tmp_path / "job")
    proc, base = start_view(job)
    try:
        before = httpx.get(base, timeout=10)
        assert before.status_code == 200
        assert re.search(r'<td class="muted">[^<]*</td>\s*<td>finished</td>', before.text)
        shutil.rmtree(job)
        listing = httpx.get(base, timeout=10)
        page = httpx.get(base + "job0/", timeout=10)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    cells = re.findall(r'<td class="muted">([^<]*)</td>\s*<td>([^<]*)</td>', listing.text)
    assert cells == [(str(job), "folder deleted")]
    badge = re.search(r'id="job-status"[^>]*>([^<]*)<', page.text)
    assert page.status_code == 200 and badge and badge.group(1) == "folder deleted"
    assert "the job's folder was deleted after the viewer started" in page.text


def test_a_summary_with_half_an_interval_still_shows_its_job(jobs, tmp_path):
    """helper-169: a summary edited to ``"high": null`` beside a ``low`` made the job page a
    500 (the interval was formatted on ``low`` alone); the interval is shown when both bounds
    are numbers, at the summary's own confidence level."""
    job = copy_job(jobs["oracle"], tmp_path / "job")
    path = next(job.glob("summary_*.json"))
    summary = json.loads(path.read_text())
    mean = summary["mean"]
    assert mean["n"] >= 2 and mean["low"] is not None and mean["high"] is not None
    half = copy_job(job, tmp_path / "half")
    next(half.glob("summary_*.json")).write_text(
        json.dumps(summary | {"mean": mean | {"high": None}})
    )
    ninety = copy_job(job, tmp_path / "ninety")
    next(ninety.glob("summary_*.json")).write_text(
        json.dumps(summary | {"mean": mean | {"confidence": 0.9}})
    )
    proc, base = start_view(job, half, ninety)
    try:
        pages = [httpx.get(f"{base}job{i}/", timeout=10) for i in range(3)]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert [p.status_code for p in pages] == [200, 200, 200]
    interval = f"CI [{mean['low']:.3f}, {mean['high']:.3f}]"
    assert f"95% {interval}" in pages[0].text
    assert "% CI [" not in pages[1].text and f"n = {mean['n']} trials" in pages[1].text
    assert f"90% {interval}" in pages[2].text


def test_a_job_started_in_a_folder_of_jobs_after_the_viewer_appears(jobs, tmp_path):
    """helper-168: ``clawrig view output`` never showed a job started in ``output/`` after it
    opened the folder (its page 404). New job folders are found within a second or so, keyed
    after the others; the jobs it had keep their keys."""
    root = tmp_path / "output"
    first = copy_job(jobs["oracle"], root / "a")
    proc, base = start_view(root)
    try:
        assert _listed(httpx.get(base, timeout=10).text) == [str(first)]
        second = copy_job(jobs["nop"], root / "b")
        (root / "not-a-job").mkdir()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listed = _listed(httpx.get(base, timeout=10).text)
            if len(listed) > 1:
                break
            time.sleep(0.2)
        page = httpx.get(f"{base}job1/", timeout=10)
        third = copy_job(jobs["model"], root / "c")
        time.sleep(1.1)  # (the viewer looks again at most once a second)
        direct = httpx.get(f"{base}job2/", timeout=10)  # its page first: no listing before
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert listed == [str(first), str(second)]
    assert page.status_code == 200 and str(second) in page.text
    assert direct.status_code == 200 and str(third) in direct.text
    # an empty folder is a folder of jobs with none yet (helper-170: refused, "not a job
    # folder"): the viewer starts, says so, and lists a job once one starts there
    empty = tmp_path / "empty"
    empty.mkdir()
    proc, base = start_view(empty)
    try:
        before = httpx.get(base, timeout=10)
        copy_job(jobs["oracle"], empty / "first")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _listed(httpx.get(base, timeout=10).text):
            time.sleep(0.2)
        after = _listed(httpx.get(base, timeout=10).text)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert before.status_code == 200 and 'id="no-jobs"' in before.text
    assert after == [str(empty / "first")]
    # looked through again: a folder of jobs, not a job folder (its subfolders are its tasks')
    from clawrig.view.index import folders_of_jobs

    assert folders_of_jobs([root, first, tmp_path / "gone"]) == [root]


def _listed(index_html: str) -> list[str]:
    """The job folders the jobs list shows, in its order."""
    return re.findall(r'<td class="muted">([^<]*)</td>\s*<td>[^<]*</td>', index_html)


def _ipv6_starting_with_a_letter() -> str | None:
    """An IPv6 address of this machine's that starts with a letter (fd00::2), or None."""
    for line in Path("/proc/net/if_inet6").read_text().splitlines():
        raw = line.split()[0]
        address = str(ipaddress.ip_address(int(raw, 16)))
        if address[0].isalpha() and not address.startswith("fe80"):
            return address
    return None


def test_the_listening_line_names_an_ipv6_address_that_starts_with_a_letter(jobs):
    """helper-170: ``--host fd00::2`` printed ``clawrig view on http://:PORT/`` (the console
    took ``[fd00::2]`` for a markup tag)."""
    address = _ipv6_starting_with_a_letter()
    if address is None:
        pytest.skip("this machine has no IPv6 address that starts with a letter")
    proc = subprocess.Popen(
        [str(CLAWRIG), "view", str(jobs["oracle"]), "--host", address, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert re.fullmatch(
        rf"clawrig view on http://\[{re.escape(address)}\]:\d+/  \(Ctrl-C to stop\)\n", line
    ), line


def test_a_resumed_job_shows_its_numbers_so_far_and_a_deleted_one_its_last(jobs, tmp_path):
    """helper-171: a job resumed after an interrupt showed, while it ran, the interrupted
    run's summary beside the live trial count (35 trials, "38 not run" of 50, n = 3 tasks);
    and a job whose folder was deleted said its numbers were the trials last seen over 0
    trials. A running job's page is its trials so far; a deleted one keeps the last seen."""
    import fcntl

    from clawrig.view.index import LOCK_FILE

    running = copy_job(jobs["oracle"], tmp_path / "running")
    path = next(running.glob("summary_*.json"))
    summary = json.loads(path.read_text())
    n = len(summary["tasks"])
    # the earlier run's summary: interrupted after one trial
    path.write_text(json.dumps(summary | {"tasks": summary["tasks"][:1], "interrupted": True}))
    gone = copy_job(jobs["nop"], tmp_path / "gone")
    fd = os.open(running / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the resumed job runs (another process holds the lock)
    proc, base = start_view(running, gone)
    try:
        state = httpx.get(f"{base}api/job0/state.json", timeout=10).json()
        before = httpx.get(f"{base}job1/", timeout=10).text
        shutil.rmtree(gone)
        after = httpx.get(f"{base}job1/", timeout=10).text
    finally:
        os.close(fd)
        proc.terminate()
        proc.wait(timeout=10)
    assert state["running"] is True and state["source"] == "live", state
    assert re.search(rf'id="h-trials">{n}<', state["headline"]), state["headline"]
    trials = re.search(r'id="h-trials">(\d+)<', before)
    assert trials and int(trials.group(1)) == len(
        json.loads(next((jobs["nop"]).glob("summary_*.json")).read_text())["tasks"]
    )
    assert f'id="h-trials">{trials.group(1)}<' in after and "folder deleted" in after


def test_a_replayed_job_is_marked_as_a_replay(jobs, tmp_path):
    """A job that replayed another job's recorded model calls (``clawrig run --replay``) says
    so in the jobs list and on its page, naming the folder it replayed; the job it replayed
    does not (helper-202: the list showed the two as two runs of the model, side by side)."""
    replayed = tmp_path / "replayed"
    proc = clawrig(
        "run", DEMO, "--suite", "000015,000003", "--replay", jobs["model"],
        "--output", replayed,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert read_summary(replayed)["replayed_from"] == str(jobs["model"].resolve())
    site = tmp_path / "site"
    proc = clawrig("view", "--bundle", site, jobs["model"], replayed)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listing = (site / "index.html").read_text()
    marks = re.findall(r'<a href="(job\d)/index.html">[^<]*</a>( <span class="muted replay"'
                       r' title="([^"]*)">replay</span>)?</td>', listing)  # fmt: skip
    assert [(key, html.unescape(title)) for key, _, title in marks] == [
        ("job0", ""),
        ("job1", f"a replay of the model calls recorded in {jobs['model'].resolve()}"),
    ]
    page = (site / "job1" / "index.html").read_text()
    said = re.search(r'<span class="muted" id="job-replayed">([^<]*)</span>', page)
    assert said is not None and html.unescape(said.group(1)) == (
        f"a replay (clawrig run --replay) of the model calls recorded in {jobs['model'].resolve()}"
    )
    assert 'id="job-replayed"' not in (site / "job0" / "index.html").read_text()


def test_a_trial_whose_result_cannot_be_read_is_shown_as_such_not_dropped(jobs, tmp_path):
    """A trial folder whose result.json is cut (or holds no result) is a row of its job, error
    kind "unreadable" naming the file, in the jobs list's count, the job page and the compare
    page; it was dropped unsaid: "9 trials, 9 graded" beside the summary's n = 10, the compare
    page's task "not run" (helper-206)."""
    job = copy_job(jobs["oracle"], tmp_path / "job")
    summary = read_summary(job)
    first = summary["tasks"][0]
    result = job / first["trial"] / "result.json"
    result.write_text(result.read_text()[:50])  # cut: no JSON
    second = summary["tasks"][1]
    other = job / second["trial"] / "result.json"
    raw = json.loads(other.read_text())
    other.write_text(json.dumps({"job_id": raw["job_id"], "model": raw["model"], "score": "x"}))
    (view,) = open_jobs([job])
    rows = {r["id"]: r for r in view.rows()}
    assert len(rows) == len(summary["tasks"])
    for t in (first, second):
        assert rows[t["trial"]]["err"] == "unreadable" and rows[t["trial"]]["score"] is None
        assert rows[t["trial"]]["msg"].startswith("result.json: ")
    assert rows[second["trial"]]["job"] == raw["job_id"]
    # one that names the job and no model is the job's too (helper-208: in none)
    third = summary["tasks"][2]
    (job / third["trial"] / "result.json").write_text(json.dumps({"job_id": raw["job_id"]}))
    (view,) = open_jobs([job])
    assert {r["id"]: r["err"] for r in view.rows()}[third["trial"]] == "unreadable"
    site = tmp_path / "site"
    proc = clawrig("view", "--bundle", site, job, jobs["nop"])
    assert proc.returncode == 0, proc.stderr
    page = (site / "job0" / "index.html").read_text()
    assert f'id="h-trials">{len(summary["tasks"])}<' in page
    # the jobs list's errors column counts them (helper-208: 0 beside "3 not scored")
    listing = (site / "index.html").read_text()
    cells = re.findall(r'<td class="num">([^<]*)</td></tr>', listing)
    assert cells[0] == str(3 + sum((summary.get("errors_by_kind") or {}).values()))
    compare = (site / "compare.html").read_text()
    row = re.search(rf'<tr data-task="{first["task_id"]}"[^>]*>(.*?)</tr>', compare, re.S)
    assert row is not None and "not run" not in row.group(1).split("</td>")[2]
