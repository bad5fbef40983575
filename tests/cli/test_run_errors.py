"""`clawrig run` on bad input: one clear line naming the file or flag, a non-zero exit, no
traceback, and nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))
REPO = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith(("_API_KEY", "_BASE_URL")) and k != "DEFAULT_MODEL"
    }
    return subprocess.run(
        [CLAWRIG, *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "no/such/suite"], "no such file or folder: no/such/suite"),
        (["run", str(REPO / "suites/demo"), "--agent", "robot"], "--agent: unknown agent 'robot'"),
        (["run", str(REPO / "suites/demo"), "--sandbox", "vm"], "--sandbox: unknown sandbox"),
        (["run", str(REPO / "suites/demo"), "-m", "nonsense"], "nonsense"),
        (["run", str(REPO / "suites/demo"), "-m", "openrouter/x/y"], "OPENROUTER_API_KEY"),
        (
            ["run", str(REPO / "suites/demo"), "--suite", "999999", "--agent", "oracle"],
            "--suite: no task with id 999999",
        ),
        (["run", str(REPO / "suites/demo"), "--grader", "vibes"], "--grader"),
    ],
)
def test_bad_flags_give_one_line(args, needle, tmp_path):
    r = run(*args, "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len([ln for ln in r.stderr.strip().splitlines() if ln.strip()]) <= 2
    assert not (tmp_path / "out").exists()


def test_malformed_task_file_names_file_and_field(tmp_path):
    bad = tmp_path / "tasks" / "broken.md"
    bad.parent.mkdir()
    bad.write_text("---\nid: [unclosed\n---\n\n## Prompt\n\nhi\n")
    r = run("run", str(bad), "--agent", "nop", cwd=tmp_path)
    assert r.returncode == 2 and str(bad) in r.stderr and "Traceback" not in r.stderr
    assert "front matter" in r.stderr.lower()
