"""The shipped wildclaw and dataclaw environments hold what their benchmarks' tasks name
(upstream's image: playwright's browsers, /root/miniconda3/envs/eval; DataClawBench's: the
Python data stack), checked in a real bwrap sandbox with no network. Building them takes 6-12
minutes, so the tests do not: each runs where the environment is built (``clawrig env build
wildclaw|dataclaw``, in the tests' or the user's cache) and skips with the reason elsewhere."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clawrig.env.build import rootfs_path
from clawrig.env.spec import load_env_spec
from clawrig.sandbox import SandboxConfig, create_sandbox
from clawrig.sandbox.pyenv import cache_root

pytestmark = pytest.mark.sandbox

CHROMIUM = """
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    browser = p.chromium.launch()
    page = browser.new_page()
    page.set_content("<p id=x>rendered by chromium</p>")
    print(page.inner_text("#x"))
    browser.close()
"""

CHECKS = {
    "wildclaw": [
        # upstream's warmup lines, offline: playwright finds its browser installed
        ("python3 -m playwright install chromium && playwright install chromium", ""),
        (
            "~/miniconda3/envs/eval/bin/pip --version | cut -d' ' -f4 | cut -d/ -f1-5",
            "/root/miniconda3/envs/eval\n",
        ),
        (
            "~/miniconda3/envs/eval/bin/python -c 'import sys, playwright; print(sys.prefix)'",
            "/root/miniconda3/envs/eval\n",
        ),
        (f"python3 -c '{CHROMIUM}'", "rendered by chromium\n"),
        (
            "ffmpeg -version | head -c 14; echo; pdftotext -v 2>&1 | head -c 9",
            "ffmpeg version\npdftotext",
        ),
        # what upstream's graders import beyond their warmups, on the system's python3
        (
            "python3 -I -c 'import numpy, openai, PIL, yaml, requests; print(PIL.__version__)'",
            "13.0.0\n",
        ),
    ],
    "dataclaw": [
        (
            "python3 -c 'import numpy, pandas, scipy, openpyxl, sqlite3; print(pandas.__name__)'",
            "pandas\n",
        ),
    ],
}


def _built(name: str) -> Path:
    spec = load_env_spec(name)
    for cache in (None, cache_root()):  # the tests' cache, then the user's
        rootfs = rootfs_path(spec, cache)
        if rootfs is not None:
            return rootfs
    pytest.skip(f"environment {name} is not built here (clawrig env build {name})")


@pytest.mark.parametrize("name", sorted(CHECKS))
async def test_a_shipped_environment_has_what_its_tasks_name(name, tmp_path):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    rootfs = _built(name)
    box = create_sandbox(
        "bwrap", SandboxConfig(workspace_dir=tmp_path / "ws", rootfs=rootfs, writable_root=True)
    )
    await box.start()
    try:
        for command, expected in CHECKS[name]:
            r = await box.exec(command, timeout_s=120)
            assert r.exit_code == 0, (command, r.stdout, r.stderr)
            assert r.stdout == expected, (command, r.stdout, r.stderr)
    finally:
        await box.stop()
