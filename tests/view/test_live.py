"""A running job's page updates without a reload: a real job, a real server, real Chromium."""

from __future__ import annotations

import subprocess
import threading
import time

from view_helpers import CLAWRIG, DEMO, read_summary, start_view

from clawrig.testing.scripted_server import ScriptedServer, reply


def test_live_page_shows_trials_finishing(page, tmp_path):
    out = tmp_path / "live"
    # replies wait 20 s until the page has counted its rows, so it is open before any trial
    # finishes (a fixed 5 s was too short on a loaded machine: both had finished, CI at load 30)
    opened = threading.Event()
    with ScriptedServer(
        responder=lambda _: reply("I cannot help.", delay=0 if opened.is_set() else 20),
        models=["demo"],
    ) as srv:
        job = subprocess.Popen(
            [str(CLAWRIG), "run", str(DEMO), "--suite", "000003,000015", "-m", "scripted/demo",
             "--parallel", "1", "--output", str(out)],
            env={**__import__("os").environ, "SCRIPTED_BASE_URL": srv.base_url},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not (out / ".clawrig.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        view, base = start_view(out)
        try:
            page.goto(base + "job0/index.html")
            page.evaluate("window.__notReloaded = true")
            assert page.text_content("#job-status") == "running"
            before = page.locator("#trials tbody tr").count()
            opened.set()
            assert before < 2
            page.wait_for_function(
                "document.querySelectorAll('#trials tbody tr').length === 2", timeout=90_000
            )
            page.wait_for_function(
                "document.getElementById('job-status').textContent === 'finished'",
                timeout=90_000,
            )
            assert job.wait(timeout=60) == 0, job.stderr.read().decode()
            assert page.evaluate("window.__notReloaded") is True
            summary = read_summary(out)
            assert page.text_content("#h-trials") == str(len(summary["tasks"])) == "2"
            assert page.text_content("#h-mean") == f"{summary['mean']['mean']:.4f}"
            ids = {r.split("/")[0] for r in page.eval_on_selector_all(
                "#trials tbody tr", "e => e.map(x => x.dataset.id)")}  # fmt: skip
            assert ids == {"000003", "000015"}
        finally:
            view.terminate()
            view.wait(timeout=10)
            if job.poll() is None:
                job.kill()
