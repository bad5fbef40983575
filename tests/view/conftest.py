"""Fixtures for the viewer: real jobs, a real `clawrig view` server, a real headless Chromium.

- ``jobs``: three real job folders run once per session on the demo suite: ``oracle`` and
  ``nop`` (the same four tasks, so they disagree) and ``model`` (a scripted model on
  127.0.0.1 solving 000015, failing 000003 and, on 000001, starting a sub-agent and a cron
  job, with token and cost usage recorded);
- ``server``: ``clawrig view`` on a free loopback port over the three (a subprocess);
- ``browser``: Debian's chromium driven by Playwright (skipped with the reason when absent).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from view_helpers import CHROMIUM, CHROMIUM_ARGS, DEMO, TASKS, clawrig, responder, start_view

from clawrig.testing.scripted_server import ScriptedServer


@pytest.fixture(scope="session")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("viewjobs")
    out: dict[str, Path] = {}
    for agent in ("oracle", "nop"):
        out[agent] = root / agent
        proc = clawrig("run", DEMO, "--suite", ",".join(TASKS), "--agent", agent,
                       "--parallel", "4", "--output", out[agent])  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
    out["model"] = root / "model"
    with ScriptedServer(responder=responder(), models=["demo"]) as srv:
        proc = clawrig(
            "run", DEMO, "--suite", "000015,000003,000001", "-m", "scripted/demo",
            "--output", out["model"], env={"SCRIPTED_BASE_URL": srv.base_url},
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="session")
def server(jobs: dict[str, Path]) -> Iterator[str]:
    """Base URL of `clawrig view` over the oracle (job0), nop (job1) and model (job2) jobs."""
    proc, base = start_view(jobs["oracle"], jobs["nop"], jobs["model"])
    yield base
    proc.terminate()
    proc.wait(timeout=10)


_PLAYWRIGHT: dict[str, Any] = {}
"""One Playwright and one browser for all the tests of this folder (started on first use)."""


def _stop_browser() -> None:
    if "manager" in _PLAYWRIGHT:
        _PLAYWRIGHT.pop("browser").close()
        _PLAYWRIGHT.pop("manager").__exit__(None, None, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Close the shared browser after the last test of this folder (once its fixtures are torn
    down): Playwright's sync API keeps an event loop marked running, which later asyncio tests
    could not start under."""
    result = yield
    if nextitem is None or Path(nextitem.path).parent != Path(__file__).parent:
        _stop_browser()
    return result


@pytest.fixture
def browser() -> Any:
    """The shared headless chromium (Debian's, driven by Playwright)."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (make test installs it when root)")
    sync_api = pytest.importorskip("playwright.sync_api")
    if "browser" not in _PLAYWRIGHT:
        manager = sync_api.sync_playwright()
        pw = manager.__enter__()
        _PLAYWRIGHT["manager"] = manager
        _PLAYWRIGHT["browser"] = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
        )
    return _PLAYWRIGHT["browser"]


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page that records every request URL in ``page.requests`` and fails the test on
    a script error."""
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    pg = context.new_page()
    pg.requests = []
    pg.errors = []
    pg.on("request", lambda r: pg.requests.append(r.url))
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    context.close()
    assert not pg.errors, pg.errors
