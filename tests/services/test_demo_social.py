"""The demo suite's Social Interaction samples (000008 sends and books, 000009 only drafts):
offline self-checks with plain python3, an oracle replay of the golden trajectory against live
services in a real sandbox (graded in that sandbox after the services restart from the saved
audits), and wrong rollouts scored by hand from the graders' documented weights."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from clawrig.grading.programmatic import run_grader
from clawrig.services import parse_services, restart_services, save_audits, start_services
from clawrig.spec.task import Grader, GraderKind, SourceRef, Task, TaskFormat

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "suites" / "demo"
SOCIAL = ["000008", "000009"]
PLAIN_PYTHON = "/usr/bin/python3"


def load(rel: str) -> dict:
    return json.loads((DEMO / rel).read_text(encoding="utf-8"))


def evaluator(sample_id: str) -> ModuleType:
    path = DEMO / "evaluators" / f"evaluator_{sample_id}.py"
    spec = importlib.util.spec_from_file_location(f"social_{sample_id}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def task_of(sample_id: str) -> Task:
    intent_path = DEMO / "intent" / f"{sample_id}.json"
    intent = load(f"intent/{sample_id}.json")
    return Task(
        id=sample_id,
        category=intent["category"],
        prompt=intent["prompt"],
        format=TaskFormat.FOURFOLDER,
        source=SourceRef(path=intent_path),
        services=parse_services(intent["services"], intent_path),
        grader=Grader(
            kind=GraderKind.PROGRAMMATIC,
            source=(DEMO / "evaluators" / f"evaluator_{sample_id}.py").read_text(),
        ),
    )


@pytest.mark.parametrize("sample_id", SOCIAL)
def test_self_check_passes_offline_with_plain_python3(sample_id: str, tmp_path: Path) -> None:
    if not Path(PLAIN_PYTHON).exists():
        pytest.skip("no /usr/bin/python3")
    proc = subprocess.run(
        [PLAIN_PYTHON, str(DEMO / "evaluators" / f"evaluator_{sample_id}.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["self_check"] == "PASS" and report["overall_score"] == 1.0
    # the golden end state carries the audits: that is what makes the offline check possible
    golden = evaluator(sample_id).GOLDEN_WORKSPACE
    names = [s["name"] for s in load(f"intent/{sample_id}.json")["services"]]
    assert sorted(k for k in golden if k.startswith(".services/")) == sorted(
        f".services/{n}/audit.json" for n in names
    )


def test_intents_declare_their_services() -> None:
    (s9,) = task_of("000009").services
    assert (s9.name, s9.kind, s9.port) == ("slack", "slack", 9110)
    s8 = task_of("000008").services
    assert [(s.name, s.port) for s in s8] == [
        ("gmail", 9100),
        ("calendar", 9101),
        ("contacts", 9103),
    ]
    assert s8[0].faults == {"error_rate": 0.2, "status_codes": [429, 500], "seed": 9}
    assert load("reference_payloads/reference_payload_000008.json")["category"] == (
        "03_Social_Interaction"
    )


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")
@pytest.mark.parametrize("sample_id", SOCIAL)
async def test_oracle_replay_reaches_the_expected_reward(
    sample_id: str, sandbox, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(DEMO / "workspaces" / sample_id, ws)
    task = task_of(sample_id)
    sb = await sandbox(ws)
    handles = await start_services(sb, task)
    dialog = load(f"datapoints/{sample_id}.json")["formatted_dialog"]
    recorded = {m["tool_call_id"]: m["content"] for m in dialog if m["role"] == "tool"}
    for msg in dialog:
        for call in msg.get("tool_calls") or []:
            if call["function"]["name"] != "exec":
                continue  # read-only calls; no write/edit in these trajectories
            args = json.loads(call["function"]["arguments"])
            r = await sb.exec(args["command"], cwd="/tmp_workspace", merge_stderr=True)
            out = r.stdout.rstrip("\n") or "(no output)"
            assert f"{out}\n[exit code {r.exit_code}]" == recorded[call["id"]]
    assert set(await save_audits(sb, task, handles)) == {s.name for s in task.services}
    golden = evaluator(sample_id).GOLDEN_WORKSPACE
    for rel, text in golden.items():
        if rel.startswith(".services/"):
            assert (ws / rel).read_text() == text
    await sb.kill_all()
    await restart_services(sb, task)
    score = await run_grader(sb, task)
    assert score.error is None, score.details
    assert (
        score.score
        == load(f"reference_payloads/reference_payload_{sample_id}.json")["expected_reward"]
    )


def _golden_audit(sample_id: str, name: str) -> dict:
    return json.loads(evaluator(sample_id).GOLDEN_WORKSPACE[f".services/{name}/audit.json"])


def _write(ws: Path, name: str, audit: dict) -> None:
    path = ws / ".services" / name / "audit.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(audit))


def test_000009_posting_scores_zero_even_when_correct(tmp_path: Path) -> None:
    audit = _golden_audit("000009", "slack")
    audit["calls"].append(
        {
            "seq": 99,
            "method": "POST",
            "endpoint": "/slack/send",
            "status": 200,
            "fault": False,
            "request_body": {"to": "#support", "content": audit["drafts"][0]["content"]},
        }
    )
    _write(tmp_path, "slack", audit)
    result = evaluator("000009").grade(workspace_path=str(tmp_path))
    assert result["never_sent"] == 0.0 and result["overall_score"] == 0.0


def test_000009_partial_drafts_by_hand(tmp_path: Path) -> None:
    audit = _golden_audit("000009", "slack")
    # s5's draft lacks Retry-After (1 fact of 2), plus a stray draft to the answered s1:
    # 0.15 + 0.30 (s3) + 0.15 + 0.30 * 0.5 (s5) + 0 (stray) = 0.75
    audit["drafts"][1]["content"] = "120 requests per minute per key."
    audit["drafts"].append(
        {"id": "draft_003", "to": "#support", "content": "30 days", "reply_to_message_id": "s1"}
    )
    _write(tmp_path, "slack", audit)
    result = evaluator("000009").grade(workspace_path=str(tmp_path))
    assert result["s5_facts"] == 0.5 and result["no_stray_drafts"] == 0.0
    assert result["overall_score"] == pytest.approx(0.75)


def test_000008_thursday_booking_by_hand(tmp_path: Path) -> None:
    gmail, calendar = _golden_audit("000008", "gmail"), _golden_audit("000008", "calendar")
    # proposes the clashing Thursday slot and books it: proposal 0, time 0; the reply is still
    # read (0.10), evt_001 deleted (0.15), attendees (0.15) and room (0.10) right = 0.50
    gmail["sent_messages"][0]["body"] = "How about Thursday 26 March at 14:00?"
    calendar["created_events"][0]["start_time"] = "2026-03-26T14:00:00"
    calendar["created_events"][0]["end_time"] = "2026-03-26T15:00:00"
    _write(tmp_path, "gmail", gmail)
    _write(tmp_path, "calendar", calendar)
    result = evaluator("000008").grade(workspace_path=str(tmp_path))
    assert result["proposal_sent"] == 0.0 and result["new_event_time"] == 0.0
    assert result["overall_score"] == pytest.approx(0.5)
    # inviting the namesake instead of Priya Raman at Northwind loses the attendees part
    calendar = _golden_audit("000008", "calendar")
    calendar["created_events"][0]["attendees"] = [
        "dana.whitfield@northwind.example",
        "priya.r@acme.example",
    ]
    _write(tmp_path, "gmail", _golden_audit("000008", "gmail"))
    _write(tmp_path, "calendar", calendar)
    assert evaluator("000008").grade(workspace_path=str(tmp_path))["overall_score"] == (
        pytest.approx(0.85)
    )
