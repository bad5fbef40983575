"""Viewer benchmark (issue 17): a generated 10,000-trial job in `clawrig view`.

Generates a job folder of N trials (default 10,000 = 2,000 tasks x 5 runs, six categories,
~8% errors of every kind, random costs and tokens, a short transcript and end state per trial;
the summary is written by the runner's own build_summary), then measures with a real
`clawrig view` server and Debian's headless chromium (Playwright):

- server start-up until it answers, without the index cache (first open) and with it;
- the job page: navigation start to the trial table rendered (median of 3), its HTML size;
- a trial page and the compare page: navigation to load;
- a live poll of the job's state API;
- the server's resident memory (VmRSS now, VmHWM peak) after all of it.

Targets (issue 17): job page < 2 s, server < 300 MB. Numbers are printed, never asserted.

Usage: python benchmarks/view.py [--trials 10000] [--runs 5] [--job DIR (reuse)] [--keep]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import httpx

from clawrig.runner.batch import JobState, build_summary
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.spec.trial import ErrorKind, Score, StopReason, TrialError, TrialResult, Usage
from clawrig.transcript.openclaw import dumps_openclaw_jsonl
from clawrig.view.index import INDEX_FILE

CATEGORIES = (
    "01_Productivity_Flow", "02_Code_Intelligence", "03_Social_Interaction",
    "04_Search_Retrieval", "05_Creative_Synthesis", "06_Safety_Alignment",
)  # fmt: skip
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
MODEL = "bench/model"
JOB_ID = "20260101_000000_bench0"


def _transcript(task: str, started_ms: int) -> Transcript:
    return Transcript(
        model=MODEL,
        provider="bench",
        started_ms=started_ms,
        messages=[
            TranscriptMessage(role="user", text=f"Solve task {task}.", timestamp_ms=started_ms),
            TranscriptMessage(
                role="assistant",
                reasoning="Look at the workspace first.",
                tool_calls=[{"id": "c1", "name": "exec", "arguments": '{"command": "ls"}'}],
                timestamp_ms=started_ms + 800,
            ),
            TranscriptMessage(
                role="toolResult",
                tool_call_id="c1",
                tool_name="exec",
                text="results\n",
                timestamp_ms=started_ms + 900,
            ),  # fmt: skip
            TranscriptMessage(role="assistant", text="Done.", timestamp_ms=started_ms + 1500),
        ],
    )


def generate(out: Path, trials: int, runs: int, seed: int = 7) -> None:
    """Write a job folder of ``trials`` trials (``trials // runs`` tasks x ``runs`` runs)."""
    rng = random.Random(seed)
    out.mkdir(parents=True)
    kinds = [k for k in ErrorKind]
    results = []
    tasks = []
    base_ms = 1_767_225_600_000
    for t in range(trials // runs):
        task_id, cat = f"{t + 1:06d}", CATEGORIES[t % len(CATEGORIES)]
        skill = rng.random()
        tasks.append(SimpleNamespace(id=task_id, category=cat, expected_reward=None))
        for run in range(runs):
            trial_id = f"bench_model_20260101_0000_{t:04x}{run:02x}"
            folder = out / task_id / trial_id
            (folder / "end_state" / "results").mkdir(parents=True)
            error = None
            score: Score | None = Score(
                score=round(min(1.0, max(0.0, rng.gauss(skill, 0.25))), 2),
                subscores={"check_a": 1.0, "check_b": 0.0},
                grader="programmatic",
            )
            if rng.random() < 0.08:
                kind = rng.choice(kinds)
                error = TrialError(kind=kind, message=f"bench {kind} error", phase="agent")
                score = Score(score=0.0, grader="programmatic") if kind == "agent" else None
            tokens = rng.randint(2_000, 60_000)
            usage = Usage(input_tokens=tokens * 9 // 10, output_tokens=tokens // 10,
                          total_tokens=tokens, cost_usd=tokens * 2e-6,
                          request_count=rng.randint(2, 30),
                          elapsed_time=rng.uniform(5, 300))  # fmt: skip
            started = base_ms + (t * runs + run) * 1000
            result = TrialResult(
                task_id=task_id, category=cat, run_index=run, trial_id=trial_id,
                job_id=JOB_ID, model=MODEL, agent="native", sandbox="bwrap",
                started_at=f"2026-01-01T00:00:{(t * runs + run) % 60:02d}+00:00",
                score=score, usage=usage, stop_reason=StopReason.FINAL_ANSWER,
                turns=rng.randint(2, 30), tool_calls=rng.randint(1, 40), error=error,
            )  # fmt: skip
            (folder / "result.json").write_text(result.model_dump_json(indent=2))
            (folder / "usage.json").write_text(usage.model_dump_json(indent=2))
            (folder / "chat.jsonl").write_text(dumps_openclaw_jsonl(_transcript(task_id, started)))
            (folder / "end_state" / "results" / "out.md").write_text(f"# {task_id}\n")
            results.append(result)
    job = JobConfig(suite_path=Path("suites/bench"), output=out, runs=runs,
                    trial=TrialConfig(agent="native", model=MODEL))  # fmt: skip
    summary = build_summary(job, tasks, results, JobState(total=len(results)), JOB_ID)
    (out / "summary_bench_model.json").write_text(json.dumps(summary, indent=1))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(job: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    """``clawrig view JOB`` on a free port; (process, base URL, seconds until it answered)."""
    port = free_port()
    exe = Path(sys.executable).parent / "clawrig"
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(exe), "view", str(job), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    base = f"http://127.0.0.1:{port}/"
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"clawrig view exited: {proc.stderr.read().decode()}")
        try:
            if httpx.get(base, timeout=30).status_code == 200:
                return proc, base, time.perf_counter() - t0
        except httpx.HTTPError:
            time.sleep(0.05)


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MB (from /proc/PID/status)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--job", type=Path, help="reuse (or create) the generated job here")
    ap.add_argument("--keep", action="store_true", help="keep the generated job")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="clawrig-view-bench-"))
    job = args.job or tmp / "job"
    if not (job / "summary_bench_model.json").exists():
        t0 = time.perf_counter()
        generate(job, args.trials, args.runs)
        print(f"generated {args.trials:,} trials in {time.perf_counter() - t0:.1f} s: {job}")
    (job / INDEX_FILE).unlink(missing_ok=True)
    n = sum(1 for _ in job.glob("*/*/result.json"))

    from playwright.sync_api import sync_playwright

    proc, base, cold = start(job)
    proc.terminate()
    proc.wait()
    proc, base, warm = start(job)
    try:
        html = httpx.get(base + "job0/index.html", timeout=60)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            loads = []
            for _ in range(3):
                page.goto(base + "job0/index.html", wait_until="commit")
                page.wait_for_selector("#trials tbody tr")
                loads.append(page.evaluate("performance.now()") / 1000)
            shown = page.locator("#trials tbody tr").count()
            filter_s = page.evaluate(
                """() => { const s = document.getElementById('f-err'), t = performance.now();
                s.value = 'some'; s.dispatchEvent(new Event('input'));
                return (performance.now() - t) / 1000; }"""
            )
            sort_s = page.evaluate(
                """() => { const t = performance.now();
                document.querySelector("#trials th[data-key='cost']").click();
                return (performance.now() - t) / 1000; }"""
            )
            first = page.get_attribute("#trials tbody tr a", "href")
            t0 = time.perf_counter()
            page.goto(base + "job0/" + first)
            trial_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            page.goto(base + "compare.html")
            compare_s = time.perf_counter() - t0
            browser.close()
        t0 = time.perf_counter()
        version = httpx.get(base + "api/job0/state.json", timeout=60).json()["version"]
        poll_full = time.perf_counter() - t0
        t0 = time.perf_counter()
        httpx.get(base + "api/job0/state.json", params={"since": version}, timeout=60)
        poll_same = time.perf_counter() - t0
        rss, hwm = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait()
    rows = [
        ("trials in the job", f"{n:,}", ""),
        ("server ready, first open (builds the index)", f"{cold:.2f} s", ""),
        ("server ready, index cached", f"{warm:.2f} s", ""),
        ("job page: navigation -> table rendered (median of 3)",
         f"{statistics.median(loads):.2f} s", "target < 2 s"),
        ("job page HTML", f"{len(html.content) / 1e6:.1f} MB", f"{shown} rows drawn"),
        ("filter by error kind / sort by cost (in the page)",
         f"{filter_s * 1000:.0f} ms / {sort_s * 1000:.0f} ms", ""),
        ("trial page load", f"{trial_s:.2f} s", ""),
        ("compare page load", f"{compare_s:.2f} s", ""),
        ("live poll: changed / unchanged", f"{poll_full:.2f} s / {poll_same:.3f} s", ""),
        ("server memory: RSS now / peak", f"{rss:.0f} MB / {hwm:.0f} MB", "target < 300 MB"),
    ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    print(f"\nclawrig view on a generated {n:,}-trial job")
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>16}  {note}")
    if not args.keep and args.job is None:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
