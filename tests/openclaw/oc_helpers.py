"""Helpers shared by the OpenClaw tests (imported by name: tests are not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pydantic import SecretStr

from clawrig.agents.openclaw import DEFAULT_VERSION, find_openclaw
from clawrig.llm.client import RetryPolicy
from clawrig.llm.providers import ModelEndpoint
from clawrig.spec.task import Task
from clawrig.tasks.fourfolder import read_fourfolder_sample
from clawrig.testing.scripted_server import Reply, ScriptedServer, call, reply

DEMO = Path(__file__).resolve().parents[2] / "suites" / "demo"
REAL_KEY = "sk-real-3b1f0c9d8e7a6b5c4d3e2f1a0b9c8d7e"
FAST_RETRY = RetryPolicy(attempts=2, initial_s=0.001, max_s=0.01, retry_after_cap_s=0.05)

requires_openclaw = pytest.mark.skipif(
    find_openclaw(DEFAULT_VERSION) is None,
    reason=f"OpenClaw {DEFAULT_VERSION} is not in the cache: run scripts/install-openclaw.sh "
    "(make openclaw) where the npm registry is reachable",
)


def demo_task(sample_id: str) -> Task:
    task = read_fourfolder_sample(DEMO, sample_id)
    assert task is not None
    return task


def upstream(srv: ScriptedServer, name: str = "scripted/scripted") -> ModelEndpoint:
    """The scripted server as the upstream, with :data:`REAL_KEY` as its provider key."""
    return srv.endpoint(name).model_copy(update={"api_key": SecretStr(REAL_KEY)})


CHAIN = "Vikram Shah \u2013 Berta Alonso \u2013 Saif Hamdan"
SCRIPT_000015_CALLS = [
    ("read", {"path": "/tmp_workspace/coauthorship.json"}),
    ("exec", {"command": "mkdir -p /tmp_workspace/results"}),
    ("write", {"path": "/tmp_workspace/results/results.md", "content": f"# shortest\n{CHAIN}\n"}),
    ("read", {"path": "/tmp_workspace/results/results.md"}),
]
FINAL_000015 = (
    f"Done. The shortest chain is {CHAIN} (2 edges), written to /tmp_workspace/results/results.md."
)


def script_000015() -> list[Reply]:
    """The demo sample 000015's golden trajectory as model replies, with OpenClaw's tool and
    argument names (read/exec/write; path, command, content)."""
    return [reply(tool_calls=[call(name, args)]) for name, args in SCRIPT_000015_CALLS] + [
        reply(FINAL_000015)
    ]


def _gateway_helpers():
    path = Path(__file__).resolve().parents[1] / "gateway" / "gw_helpers.py"
    spec = importlib.util.spec_from_file_location("clawrig_test_gw_helpers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


key_search_argv = _gateway_helpers().key_search_argv
"""The argv of a python3 search for a key (in halves) in a sandbox (see tests/gateway)."""
