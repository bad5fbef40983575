"""The first user message of a WildClawBench trial: upstream's preamble, --preamble none, or a
file's text (run through a real trial with the nop agent)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clawrig.agents.preamble import WILDCLAW_PREAMBLE
from clawrig.runner.trial import run_trial
from clawrig.spec.job import TrialConfig
from clawrig.tasks.registry import load_tasks
from clawrig.transcript import read_openclaw_jsonl

SUITE = Path(__file__).resolve().parents[2] / "examples" / "wildclaw-patterns" / "tasks"

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap"),
]


@pytest.mark.parametrize("preamble", [None, "", "Custom preamble ({timeout_seconds} s).\n"])
async def test_first_message(preamble, tmp_path):
    task = next(t for t in load_tasks(SUITE) if "judged_summary" in t.id)
    cfg = TrialConfig(agent="nop", preamble=preamble)
    _, folder = await run_trial(task, cfg, tmp_path)
    first = read_openclaw_jsonl(folder / "chat.jsonl").messages[0].text
    expected = {
        None: WILDCLAW_PREAMBLE.replace("{timeout_seconds}", "120"),
        "": "",
        "Custom preamble ({timeout_seconds} s).\n": "Custom preamble (120 s).\n",
    }[preamble]
    assert first == expected + task.prompt
    assert WILDCLAW_PREAMBLE.startswith("You are an expert agent working in a restricted")
