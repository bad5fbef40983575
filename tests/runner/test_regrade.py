"""`clawrig grade TRIAL_DIR`: re-grading a finished trial gives the same scores; recorded
judge calls are replayed without any model server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from clawrig.runner.regrade import regrade_trial
from clawrig.runner.trial import TrialServices, run_trial
from clawrig.spec.job import TrialConfig
from clawrig.tasks.registry import load_tasks
from clawrig.testing.paths import SHARED
from clawrig.testing.scripted_server import call, reply

REPO = Path(__file__).resolve().parents[2]
GOLD = SHARED / "data/dataclawbench/assets/qa_gold/hypothesis_verification/hard001.json"
DB_FILES = [
    "bilingual_translation_english_chinese.json",
    "internal_metrics.csv",
    *(
        f"enterprise/{n}.csv"
        for n in (
            "company_core",
            "company_operation_status",
            "company_operation_status_detail",
            "company_operation_yearly_status",
            "company_profile",
            "company_profile_as",
            "company_profile_eu",
            "company_profile_na",
            "company_profile_oc",
        )
    ),
    *(
        f"industry/{n}.csv"
        for n in (
            "national_industry_status",
            "national_industry_status_detail",
            "national_industry_yearly_status",
            "regional_industry_status",
            "regional_industry_status_detail",
            "regional_industry_yearly_status",
        )
    ),
    "policy/policy_release_status.csv",
    "policy/policy_resource.csv",
]


def _dataclaw_root(tmp: Path) -> Path:
    root = tmp / "dcb"
    gold = root / "assets" / "qa_gold" / "hypothesis_verification" / "hard001.json"
    gold.parent.mkdir(parents=True)
    shutil.copy(GOLD, gold)
    for rel in DB_FILES:
        p = root / "assets" / "database" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("id,value\n1,2\n")
    return root


async def test_judged_trial_regrades_to_the_same_score_from_the_cache(scripted_server, tmp_path):
    root = _dataclaw_root(tmp_path)
    (task,) = load_tasks(root)
    agent = scripted_server(
        [
            reply(tool_calls=[call("exec", {"command": "ls database | wc -l"})]),
            reply('["0.1142", "-0.2132", "0.33"]'),
        ]
    )
    judge = scripted_server(
        [
            reply(
                '```json\n{"scores": {"part_0": 1, "part_1": 1, "part_2": 1}, "total": 1.0, '
                '"notes": "all parts match"}\n```'
            ),
        ]
    )
    services = TrialServices(model=agent.chat_model(), judge=judge.chat_model("scripted/judge"))
    result, folder = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/agent"),
        tmp_path / "out",
        services=services,
    )
    assert result.error is None and result.score.score == 1.0
    assert result.process["efficiency"] == {"s_agent": 2, "s_gold": 7, "efficiency": 3.5}
    assert len(judge.requests) == 1
    judge.stop()  # no model server from here on
    report = await regrade_trial(folder)
    assert report["same"] and report["after"]["score"] == 1.0
    assert report["judge_cache"] == {"hits": 1, "misses": 0}


def test_cli_regrades_an_oracle_trial(tmp_path):
    import asyncio

    task = next(t for t in load_tasks(REPO / "suites" / "demo") if t.id == "000015")
    result, folder = asyncio.run(
        run_trial(task, TrialConfig(agent="oracle", model="oracle"), tmp_path)
    )
    clawrig = str(Path(sys.executable).with_name("clawrig"))
    r = subprocess.run(
        [clawrig, "grade", str(folder), "--json"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["same"] and report["after"]["score"] == result.score.score == 1.0
    bad = subprocess.run([clawrig, "grade", str(tmp_path / "nope")], capture_output=True, text=True)
    assert bad.returncode == 2 and "result.json" in bad.stderr and "Traceback" not in bad.stderr
