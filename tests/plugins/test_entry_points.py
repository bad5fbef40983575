"""Third-party plugins found through real entry points: an installed-looking distribution
(a ``*.dist-info`` with ``entry_points.txt``) on PYTHONPATH adds an agent, a task format and a
service kind, and ``clawrig`` (a real subprocess) runs them; unknown or broken names are one
line, exit 2."""

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


SERVICE = '''
from clawrig.services.mock.core import Body, FixtureError, MockService

class Add(Body):
    n: int

class Nothing(Body):
    pass

class CounterService(MockService):
    """POST /counter/add {n} adds n; POST /counter/total answers the total."""
    kind, default_port = "counter", 9300
    fixture_keys = frozenset({"now", "user", "start"})

    def _register(self):
        self.endpoints = {"/counter/add": (Add, self.add), "/counter/total": (Nothing, self.total)}

    def _load(self, fixtures):
        start = fixtures.get("start", 0)
        if not isinstance(start, int):
            raise FixtureError("start: must be an integer")
        self.value = start

    def add(self, req):
        self.value += req.n
        return {"total": self.value}

    def total(self, req):
        return {"total": self.value}
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plugins")
    pkg = root / "my_plugins"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "agents.py").write_text(AGENT)
    (pkg / "formats.py").write_text(FORMAT)
    # the package's __init__ imports what a sandbox lacks: only the kind's module goes in
    (pkg / "__init__.py").write_text("import typer  # noqa: F401\n")
    (pkg / "services.py").write_text(SERVICE)
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

            [clawrig.services]
            counter = my_plugins.services:CounterService
            gmail = my_plugins.services:CounterService

            [clawrig.sandboxes]
            agentbox = my_plugins.agents:EchoAgent
            nobox = my_plugins.nowhere:Box
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


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        (
            "agentbox",
            "--sandbox: 'agentbox' is registered as <class 'my_plugins.agents.EchoAgent'>, not "
            "a sandbox backend: a class taking a SandboxConfig (it has no ",
        ),
        ("nobox", "--sandbox: sandbox 'nobox' (my_plugins.nowhere:Box) cannot be loaded"),
    ],
)
def test_bad_sandbox_plugins_are_one_line_before_the_job(
    plugin_path: Path, tmp_path: Path, name: str, needle: str
) -> None:
    """A sandbox entry point that is no backend (an agent class) or cannot be imported is one
    line and exit 2 before the job starts (it started: each trial an infrastructure
    TypeError, retried and set aside, and --resume asked for: helper-204)."""
    proc = _clawrig(
        ["run", str(REPO / "suites/demo"), "--suite", "000001", "--agent", "oracle",
         "--sandbox", name, "-o", str(tmp_path / "o")],
        plugin_path, tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"clawrig: error: {needle}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_registry_lists_builtins_then_entry_points(plugin_path: Path) -> None:
    code = (
        "from clawrig.agents import AGENTS; from clawrig.sandbox.kinds import SANDBOXES;"
        "from clawrig.services import SERVICE_KINDS;"
        "print(','.join(AGENTS.names())); print(','.join(SANDBOXES.names()));"
        "print(','.join(SERVICE_KINDS.names()))"
    )
    env = dict(os.environ, PYTHONPATH=str(plugin_path))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0].split(",")[:4] == ["native", "oracle", "nop", "openclaw"]
    assert {"echo", "not-an-agent", "missing"} <= set(out[0].split(","))
    assert out[1] == "bwrap,docker,local,agentbox,nobox"
    # a built-in name wins over the plugin's "gmail"
    assert out[2] == "gmail,calendar,contacts,slack,counter"


SERVICE_RUN = r'''
import asyncio, json, sys
from pathlib import Path
from clawrig.errors import TaskFormatError
from clawrig.sandbox import SandboxConfig
from clawrig.sandbox.bwrap import BwrapSandbox
from clawrig.services import (
    parse_services, restart_services, save_audits, service_binds, start_services)
from clawrig.spec.task import SourceRef, Task, TaskFormat

CALL = """
import json, sys, urllib.request
for path, body in json.loads(sys.argv[1]):
    req = urllib.request.Request("http://127.0.0.1:9300" + path, data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    print(urllib.request.urlopen(req, timeout=10).read().decode().replace(" ", ""))
"""

async def main(ws):
    out = {}
    for bad in ({"start": "five"}, {"bogus": 1}):
        try:
            parse_services([{"kind": "counter", "fixtures": bad}], Path("intent.json"))
        except TaskFormatError as exc:
            out.setdefault("bad", []).append(str(exc))
    specs = parse_services([{"kind": "counter", "fixtures": {"start": 5}}], Path("intent.json"))
    out["port"] = specs[0].port
    task = Task(id="c", prompt="p", format=TaskFormat.FOURFOLDER,
                source=SourceRef(path=Path("intent.json")), services=specs)
    sb = BwrapSandbox(SandboxConfig(workspace_dir=Path(ws), binds=await service_binds(task)))
    await sb.start()
    try:
        handles = await start_services(sb, task)
        calls = [["/counter/add", {"n": 3}], ["/counter/add", {"n": 4}]]
        r = await sb.exec(["python3", "-c", CALL, json.dumps(calls)])
        out["live"] = [json.loads(x) for x in r.stdout.split()]
        out["saved"] = await save_audits(sb, task, handles)
        await sb.kill_all()
        out["modes"] = [h.mode for h in await restart_services(sb, task)]
        r = await sb.exec(["python3", "-c", CALL, json.dumps([["/counter/total", {}]])])
        out["restored"] = json.loads(r.stdout)
    finally:
        await sb.stop()
    audit = json.loads((Path(ws) / ".services" / "counter" / "audit.json").read_text())
    out["audit"] = [[c["endpoint"], c["request_body"]] for c in audit["calls"]]
    out["service"] = audit["service"]
    print(json.dumps(out))

asyncio.run(main(sys.argv[1]))
'''


@pytest.mark.sandbox
def test_entry_point_service_kind_runs_in_the_sandbox(plugin_path: Path, tmp_path: Path) -> None:
    """A service kind from an entry point: its fixtures are checked when the task is read, it
    serves the agent inside the sandbox (its module copied in, its package's __init__ not),
    its audit is saved, and it comes back from the audit for grading."""
    env = dict(os.environ, PYTHONPATH=str(plugin_path))
    proc = subprocess.run(
        [sys.executable, "-c", SERVICE_RUN, str(tmp_path / "ws")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["bad"] == [
        "intent.json: services[0].fixtures: start: must be an integer",
        "intent.json: services[0].fixtures.bogus: unknown fixture for counter "
        "(known: now, start, user)",
    ]
    assert out["port"] == 9300  # the kind's default_port
    assert out["live"] == [{"total": 8}, {"total": 12}]  # 5 + 3, + 4
    assert out["saved"] == {"counter": "saved"} and out["modes"] == ["restored"]
    assert out["restored"] == {"total": 12}  # rebuilt from the fixtures and the audit
    assert out["service"] == "counter"
    assert out["audit"] == [["/counter/add", {"n": 3}], ["/counter/add", {"n": 4}]]
