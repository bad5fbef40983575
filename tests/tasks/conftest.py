"""Fixtures for the task-reader tests.

- ``dataclaw_real`` / ``fourfolder_real``: the real read-only files in /work/shared.
- ``writable_copy(src, dst)``: copy a read-only tree and make it writable (to break it on purpose).
- ``wildclaw_task``: factory writing a WildClawBench task file (formats.md section 1) under a
  benchmark root ``tmp_path/bench``; returns its path.
- ``run_cli(*args)``: runs the installed ``clawrig`` console script in a subprocess.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from clawrig.testing.paths import SHARED

DATACLAW_REAL = SHARED / "data" / "dataclawbench"
FOURFOLDER_REAL = SHARED / "examples" / "fourfolder"

GRADE_SOURCE = """import os


def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    ## a level-2-looking comment: inside the fence, so not a section
    path = os.path.join(workspace_path, "results", "actions.md")
    if not os.path.exists(path):
        return {"file_exists": 0.0, "overall_score": 0.0}
    text = open(path, encoding="utf-8").read()
    items = sum(1 for line in text.splitlines() if line.startswith("- "))
    score = 0.2 + 0.8 * min(items, 3) / 3
    return {"file_exists": 1.0, "items": items, "overall_score": round(score, 4)}
"""

FRONT = """id: {id}
name: Meeting Notes Action Items
category: 01_Productivity_Flow
timeout_seconds: 300
modality: pure-text"""

SECTIONS = {
    "Prompt": "Read /tmp_workspace/notes.txt and write the three action items as a Markdown list "
    "to /tmp_workspace/results/actions.md.",
    "Expected Behavior": "The agent reads the notes and writes exactly three bullet items.\n\n"
    "### Notes for reviewers\n\nA `###` heading stays inside this section.",
    "Grading Criteria": "- [ ] actions.md exists (weight 0.2)\n"
    "- [ ] the three action items are listed (weight 0.8)",
    "Automated Checks": "```python\n" + GRADE_SOURCE + "```",
    "Workspace Path": "```\nworkspace/01_Productivity_Flow/task_1_meeting_notes\n```",
    "Skills": "```\npdf_reader\n```",
    "Env": "```\nOPENROUTER_API_KEY\nJUDGE_MODEL\n```",
    "Warmup": "```bash\n# load the fixtures\nmkdir -p /tmp_workspace/results\n\n"
    "python3 /tmp_workspace/tmp/server.py &\n```",
}


def render_task(front: str | None, sections: dict[str, str]) -> str:
    """WildClawBench task Markdown from front matter text and section bodies."""
    parts = [f"---\n{front}\n---\n"] if front is not None else []
    for name, body in sections.items():
        parts.append(f"## {name}\n\n{body}\n")
    return "\n".join(parts)


@pytest.fixture
def dataclaw_real() -> Path:
    return DATACLAW_REAL


@pytest.fixture
def fourfolder_real() -> Path:
    return FOURFOLDER_REAL


def _make_writable(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, os.stat(dirpath).st_mode | stat.S_IWUSR | stat.S_IXUSR)
        for name in files:
            p = os.path.join(dirpath, name)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)


@pytest.fixture
def writable_copy() -> Callable[[Path, Path], Path]:
    def copy(src: Path, dst: Path) -> Path:
        shutil.copytree(src, dst)
        _make_writable(dst)
        return dst

    return copy


@pytest.fixture
def bench_root(tmp_path: Path) -> Path:
    """A WildClawBench-style root: workspace data for task_1 and a skills/pdf_reader folder."""
    root = tmp_path / "bench"
    ws = root / "workspace" / "01_Productivity_Flow" / "task_1_meeting_notes"
    (ws / "exec").mkdir(parents=True)
    (ws / "exec" / "notes.txt").write_text("1. book room\n2. send minutes\n3. order pizza\n")
    (ws / "tmp").mkdir()
    (ws / "gt").mkdir()
    (ws / "gt" / "actions.json").write_text('["book room", "send minutes", "order pizza"]')
    (root / "skills" / "pdf_reader").mkdir(parents=True)
    (root / "tasks" / "01_Productivity_Flow").mkdir(parents=True)
    return root


@pytest.fixture
def wildclaw_task(bench_root: Path) -> Callable[..., Path]:
    """Factory: ``wildclaw_task(name="t1.md", id=..., front=..., sections=..., raw=bytes)``."""

    def make(
        name: str = "01_Productivity_Flow_task_1_meeting_notes.md",
        *,
        id: str = "01_Productivity_Flow_task_1_meeting_notes",
        front: str | None = "default",
        sections: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> Path:
        path = bench_root / "tasks" / "01_Productivity_Flow" / name
        if raw is None:
            text = render_task(
                FRONT.format(id=id) if front == "default" else front,
                SECTIONS if sections is None else sections,
            )
            raw = text.encode("utf-8")
        path.write_bytes(raw)
        return path

    return make


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the installed ``clawrig`` console script; returns the completed process."""
    exe = Path(sys.executable).parent / "clawrig"

    def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(exe), *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=120,
            env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
        )

    return run


@pytest.fixture
def task_sections() -> dict[str, str]:
    """A fresh copy of the default WildClawBench section bodies (edit it, pass it back)."""
    return dict(SECTIONS)


@pytest.fixture
def grade_source() -> str:
    """The grade() source the default task's Automated Checks block holds."""
    return GRADE_SOURCE
