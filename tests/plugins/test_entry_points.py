"""Third-party plugins found through real entry points: an installed-looking distribution
(a ``*.dist-info`` with ``entry_points.txt``) on PYTHONPATH adds an agent and a task format,
and ``clawrig`` (a real subprocess) runs them; unknown or broken names are one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLAWRIG = [sys.executable, "-m", "clawrig"]

AGENT = """
from clawrig.agents import Agent, AgentOutcome
from clawrig.spec.trial import StopReason

class EchoAgent(Agent):
    name, needs_model = "echo", False

    async def run(self, ctx):
        out = await ctx.sandbox.exec(["ls", "/tmp_workspace"])
        await ctx.sandbox.write_file("/tmp_workspace/results/ls.txt", out.stdout)
        return AgentOutcome(stop_reason=StopReason.FINAL_ANSWER, turns=1)

class NotAnAgent:
    pass
"""

FORMAT = '''
import json
from pathlib import Path
from clawrig.spec.task import Task, SourceRef

class TinyFormat:
    """A suite is a folder with tiny.json: a list of {id, prompt, answer}."""
    name = "tiny"

    def detect(self, path):
        return path.is_dir() and (path / "tiny.json").is_file()

    def read(self, path, root, issues):
        rows = json.loads((path / "tiny.json").read_text())
        return [
            Task(id=r["id"], prompt=r["prompt"], answer=r["answer"], format="tiny",
                 timeout_seconds=60, source=SourceRef(path=path / "tiny.json"))
            for r in rows
        ]
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plugins")
    pkg = root / "my_plugins"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "agents.py").write_text(AGENT)
    (pkg / "formats.py").write_text(FORMAT)
    dist = root / "my_plugins-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugins\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [clawrig.agents]
            echo = my_plugins.agents:EchoAgent
            not-an-agent = my_plugins.agents:NotAnAgent
            missing = my_plugins.nowhere:Agent

            [clawrig.formats]
            tiny = my_plugins.formats:TinyFormat
            """
        )
    )
    return root


def _clawrig(args: list[str], plugin_path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(plugin_path), COLUMNS="200")
    return subprocess.run(
        CLAWRIG + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.sandbox
def test_entry_point_agent_runs_in_the_trial_sandbox(plugin_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _clawrig(
        ["run", str(REPO / "suites/demo"), "--suite", "000001", "--agent", "echo", "-o", str(out)],
        plugin_path,
        tmp_path,
    )
    assert proc.returncode in (0, 1), proc.stderr
    (trial,) = (out / "000001").iterdir()
    result = json.loads((trial / "result.json").read_text())
    assert result["agent"] == "echo"
    assert result["error"] is None
    # what the agent saw is the task's workspace, listed independently here
    listed = (trial / "end_state" / "results" / "ls.txt").read_text().split()
    expected = sorted(p.name for p in (REPO / "suites/demo/workspaces/000001").iterdir())
    assert sorted(listed) == expected


@pytest.mark.sandbox
def test_entry_point_format_is_read_and_run(plugin_path: Path, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    rows = [
        {"id": "t-yes", "prompt": "say done", "answer": "done"},
        {"id": "t-no", "prompt": "say done", "answer": "something else entirely"},
    ]
    (suite / "tiny.json").write_text(json.dumps(rows))
    listed = _clawrig(["tasks", "list", str(suite)], plugin_path, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "t-yes" in listed.stdout and "t-no" in listed.stdout
    out = tmp_path / "out"
    ran = _clawrig(
        ["run", str(suite), "--agent", "nop", "--grader", "exact", "-o", str(out)],
        plugin_path,
        tmp_path,
    )
    assert ran.returncode in (0, 1), ran.stderr
    scores = {}
    for task_id in ("t-yes", "t-no"):
        (trial,) = (out / task_id).iterdir()
        scores[task_id] = json.loads((trial / "score.json").read_text())["score"]
    # the nop agent answers "done": an exact match for one task, not for the other
    assert scores == {"t-yes": 1.0, "t-no": 0.0}


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("no-such-agent", "unknown agent 'no-such-agent'"),
        ("not-an-agent", "not an Agent subclass"),
        ("missing", "cannot be loaded"),
        ("native@1.0", "takes no @VERSION"),
    ],
)
def test_bad_agent_names_are_one_line(
    plugin_path: Path, tmp_path: Path, name: str, needle: str
) -> None:
    proc = _clawrig(
        ["run", str(REPO / "suites/demo"), "--agent", name, "-o", str(tmp_path / "o")],
        plugin_path,
        tmp_path,
    )
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").glob("*/*/result.json"))


def test_registry_lists_builtins_then_entry_points(plugin_path: Path) -> None:
    code = (
        "from clawrig.agents import AGENTS; from clawrig.sandbox.kinds import SANDBOXES;"
        "print(','.join(AGENTS.names())); print(','.join(SANDBOXES.names()))"
    )
    env = dict(os.environ, PYTHONPATH=str(plugin_path))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0].split(",")[:4] == ["native", "oracle", "nop", "openclaw"]
    assert {"echo", "not-an-agent", "missing"} <= set(out[0].split(","))
    assert out[1] == "bwrap,docker,local"
