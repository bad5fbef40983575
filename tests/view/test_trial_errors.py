"""A failed trial as the viewer and ``clawrig grade`` show it: its error by its kind (no
browser: the bundle's HTML), and "no score" where a score is missing."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest
from view_helpers import DEMO, clawrig

from clawrig.testing.scripted_server import ScriptedServer, error, reply

pytestmark = pytest.mark.sandbox


def _refuse_000015(request: dict[str, Any]) -> Any:
    messages = request.get("messages") or []
    first = str(next((m.get("content") for m in messages if m.get("role") == "user"), ""))
    if "coauthor" in first:  # demo 000015's prompt
        return error(500, "boom", should_retry=False)
    return reply("I cannot help with that.")


@pytest.fixture(scope="module")
def failed_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """000003 runs first and is answered; 000015's request is refused (HTTP 500) while the
    server answers a plain one: an infrastructure error, not scored."""
    out = tmp_path_factory.mktemp("failed") / "out"
    with ScriptedServer(responder=_refuse_000015, models=["demo"]) as srv:
        proc = clawrig(
            "run", DEMO, "--suite", "000003,000015", "-m", "scripted/demo", "--output", out,
            env={"SCRIPTED_BASE_URL": srv.base_url},
        )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return out


def test_an_infrastructure_error_is_not_called_a_grading_error(failed_job, tmp_path):
    """Its page said "grading error" for it (helper-129)."""
    proc = clawrig("view", "--bundle", tmp_path / "site", failed_job)
    assert proc.returncode == 0, proc.stderr
    [page] = (tmp_path / "site").glob("job0/trials/000015/*.html")
    found = re.search(r'id="t-score-error">([^<]*)', page.read_text())
    assert found, "no score error on the page"
    text = html.unescape(found.group(1))
    assert text.startswith("infrastructure error: scripted/demo: HTTP 500 from scripted"), text


def test_grade_says_no_score_not_none(failed_job):
    proc = clawrig("grade", failed_job)
    [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith("000015 ")]
    assert ": recorded no score: not re-gradable: it ended with an infrastructure error" in line


def test_the_job_page_counts_the_unscored_trial(failed_job, tmp_path):
    """2 trials finished, 1 graded: the other is "not scored", not left out of the count
    (helper-129: "2 / 1 graded, 1 not run" read as if the error were the one not run)."""
    proc = clawrig("view", "--bundle", tmp_path / "site", failed_job)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "site" / "job0" / "index.html").read_text()
    found = re.search(r'id="h-trials-sub">([^<]*)', page)
    assert found and found.group(1) == "1 graded, 1 not scored (an error)", found
