"""The demo suite's golden trajectories replayed through Toolset.call in bwrap: every tool call
gives back exactly the tool result recorded in the datapoint (suites/demo/datapoints), and none
is an error. Samples that need mock services (Social) are left to the runner's oracle tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clawrig.sandbox import SandboxConfig, create_sandbox
from clawrig.tools import ToolContext, Toolset

pytestmark = pytest.mark.sandbox

DEMO = Path(__file__).resolve().parents[2] / "suites" / "demo"
SAMPLES = sorted(
    p.stem
    for p in (DEMO / "datapoints").glob("*.json")
    if not json.loads((DEMO / "intent" / p.name).read_text()).get("services")
)


@pytest.mark.parametrize("sample", SAMPLES)
async def test_golden_tool_results_are_reproduced(sample: str, tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    ws = tmp_path / "ws"
    src = DEMO / "workspaces" / sample
    if src.is_dir():
        shutil.copytree(src, ws)
    else:
        ws.mkdir()
    dialog = json.loads((DEMO / "datapoints" / f"{sample}.json").read_text())["formatted_dialog"]
    sandbox = create_sandbox("bwrap", SandboxConfig(workspace_dir=ws))
    await sandbox.start()
    toolset = Toolset()
    ctx = ToolContext(sandbox=sandbox)
    try:
        calls = {}
        replayed = 0
        for msg in dialog:
            for tc in msg.get("tool_calls") or []:
                calls[tc["id"]] = tc["function"]
            if msg["role"] != "tool":
                continue
            fn = calls[msg["tool_call_id"]]
            r = await toolset.call(ctx, fn["name"], fn["arguments"])
            assert not r.is_error, (fn, r.text)
            assert r.text == msg["content"], fn
            replayed += 1
        assert replayed > 0
    finally:
        await toolset.aclose(ctx)
        await sandbox.stop()
