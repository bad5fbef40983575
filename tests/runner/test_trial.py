"""One trial end to end: real bwrap sandbox, real tools, scripted model, real grading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawrig.runner.trial import TrialServices, run_trial
from clawrig.spec.job import TrialConfig
from clawrig.spec.trial import TrialResult
from clawrig.tasks.registry import load_tasks
from clawrig.testing.scripted_server import call, error, reply
from clawrig.transcript import read_openclaw_jsonl

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "suites" / "demo"


@pytest.mark.parametrize("task", load_tasks(DEMO), ids=lambda t: t.id)
def test_oracle_reaches_expected_reward_on_every_demo_sample(task, demo_oracle_job):
    # the session's oracle job on the demo suite (`clawrig run`: one trial per sample, each
    # through run_trial), read rather than run again: one trial folder per sample
    [folder] = [p.parent for p in (demo_oracle_job / task.id).glob("*/result.json")]
    result = TrialResult.model_validate_json((folder / "result.json").read_text())
    assert result.task_id == task.id and result.agent == "oracle"
    assert result.error is None, result.error
    assert result.score is not None and result.score.error is None
    assert abs(result.score.score - task.expected_reward) < 1e-6
    # the oracle's calls all succeeded
    tr = read_openclaw_jsonl(folder / "chat.jsonl")
    tool_results = [m for m in tr.messages if m.role == "toolResult"]
    assert tool_results and not any(m.is_error for m in tool_results)
    golden_calls = sum(len(m.get("tool_calls") or []) for m in task.golden_dialog)
    assert len(tool_results) == golden_calls == result.tool_calls
    # deletions are recorded beside end_state/ (000006 deletes the *.log files it was asked to)
    deleted = json.loads((folder / "end_state_deleted.json").read_text())
    initial = {
        str(p.relative_to(task.workspace.exec_dir))
        for p in Path(task.workspace.exec_dir).rglob("*")
        if p.is_file()
    }
    assert set(deleted) <= initial
    if task.id == "000006":
        assert deleted and all(d.endswith(".log") for d in deleted)


async def test_native_agent_solves_coauthorship_through_scripted_model(scripted_server, tmp_path):
    task = next(t for t in load_tasks(DEMO) if t.id == "000015")
    srv = scripted_server(
        [
            error(429, retry_after=0),
            error(429, retry_after=0),
            reply(tool_calls=[call("read", {"path": "/tmp_workspace/coauthorship.json"})]),
            reply(
                tool_calls=[
                    call("exec", {"command": "mkdir -p /tmp_workspace/results"}),
                    call("read", '{"path": '),
                ]
            ),
            reply(
                tool_calls=[
                    call(
                        "write",
                        {
                            "path": "/tmp_workspace/results/results.md",
                            "content": "# shortest\nVikram Shah – Berta Alonso – Saif Hamdan\n",
                        },
                    )
                ]
            ),
            reply("Done: Vikram Shah – Berta Alonso – Saif Hamdan"),
        ]
    )
    services = TrialServices(model=srv.chat_model())
    cfg = TrialConfig(agent="native", model="scripted/scripted")
    result, folder = await run_trial(task, cfg, tmp_path, services=services)
    assert result.error is None and result.score.score == 1.0
    assert result.usage.retries == 2  # the 429 burst was retried and counted
    assert result.usage.request_count == 4 and result.turns == 4
    assert result.tool_calls == 4
    # the grader-facing transcript: OpenClaw chat.jsonl with the tool calls and results
    tr = read_openclaw_jsonl(folder / "chat.jsonl")
    calls = [tc.name for m in tr.messages if m.role == "assistant" for tc in m.tool_calls]
    assert calls == ["read", "exec", "read", "write"]
    bad = [m for m in tr.messages if m.role == "toolResult" and m.is_error]
    assert len(bad) == 1 and bad[0].tool_name == "read"  # malformed arguments: error result
    assert tr.final_text().startswith("Done:")
    usage = json.loads((folder / "usage.json").read_text())
    assert usage["request_count"] == 4 and usage["input_tokens"] == 40
    assert (folder / "task_output" / "results.md").read_text().startswith("# shortest")
    assert (folder / "end_state" / "results" / "results.md").exists()
    for name in (
        "score.json",
        "process_score.json",
        "agent.log",
        "judge_chat.jsonl",
        "judge_process_chat.jsonl",
        "formatted_dialog.json",
        "result.json",
    ):
        assert (folder / name).exists(), name
    dialog = json.loads((folder / "formatted_dialog.json").read_text())
    assert len(dialog["tool_schema"]) == 17


async def test_unauthorised_model_stops_with_one_line(scripted_server, tmp_path):
    from clawrig.errors import ModelRequestError

    task = next(t for t in load_tasks(DEMO) if t.id == "000015")
    srv = scripted_server([error(401, "invalid api key")])
    with pytest.raises(ModelRequestError) as info:
        await run_trial(
            task,
            TrialConfig(agent="native", model="scripted/x"),
            tmp_path,
            services=TrialServices(model=srv.chat_model()),
        )
    assert "401" in str(info.value) and "\n" not in str(info.value)


async def test_a_401_stops_again_once_the_processs_records_are_forgotten(scripted_server, tmp_path):
    """Records of which model answered are per base URL: a server whose URL answered earlier
    in the process (an earlier server on a reused port) turns a 401 into the end of one trial
    (refused after answers), not the job's stop; forget_upstreams makes it a fresh process's
    401 again. The test session forgets before each test (tests/conftest.py)."""
    from clawrig.errors import ModelRequestError
    from clawrig.llm.client import forget_upstreams, mark_answered

    task = next(t for t in load_tasks(DEMO) if t.id == "000015")
    srv = scripted_server([error(401, "invalid api key")] * 3)
    mark_answered(srv.chat_model().endpoint)
    result, _ = await run_trial(
        task, TrialConfig(agent="native", model="scripted/x"), tmp_path / "a",
        services=TrialServices(model=srv.chat_model()),
    )  # fmt: skip
    assert result.error is not None and result.score is None
    forget_upstreams()
    with pytest.raises(ModelRequestError) as info:
        await run_trial(
            task, TrialConfig(agent="native", model="scripted/x"), tmp_path / "b",
            services=TrialServices(model=srv.chat_model()),
        )  # fmt: skip
    assert "401" in str(info.value)


async def test_provider_down_is_an_infrastructure_error(scripted_server, tmp_path):
    task = next(t for t in load_tasks(DEMO) if t.id == "000015")
    srv = scripted_server([error(500)] * 10)
    result, _ = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/x"),
        tmp_path,
        services=TrialServices(model=srv.chat_model()),
    )
    assert result.error is not None and result.error.kind == "infrastructure"
    assert result.error.retryable and result.score is None


async def test_nop_agent_fails_every_demo_grader(tmp_path):
    for task in load_tasks(DEMO):
        result, _ = await run_trial(task, TrialConfig(agent="nop", model="nop"), tmp_path)
        assert result.error is None, (task.id, result.error)
        assert result.score.score < 0.5, (task.id, result.score.score)


async def test_leftover_agent_process_cannot_rewrite_results_after_gt(scripted_server, tmp_path):
    """An agent leaves a background process that would rewrite its result once gt/ appears;
    it must be dead before gt is injected, so the grade reflects the agent's real work."""
    task = next(t for t in load_tasks(DEMO) if t.id == "000015")
    cheat = (
        "nohup sh -c 'while [ ! -d /tmp_workspace/gt ]; do sleep 0.01; done; mkdir -p "
        '/tmp_workspace/results; printf "# shortest\\nVikram Shah – Berta Alonso – Saif '
        "Hamdan\\n\" > /tmp_workspace/results/results.md' > /dev/null 2>&1 &"
    )
    srv = scripted_server([reply(tool_calls=[call("exec", {"command": cheat})]), reply("done")])
    result, _ = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/x"),
        tmp_path,
        services=TrialServices(model=srv.chat_model()),
    )
    assert result.error is None and result.score.score == 0.0


async def test_transcript_grader_reads_the_native_agents_chat_jsonl(scripted_server, tmp_path):
    """000005's grader decides from the OpenClaw transcript (the final assistant message and
    every tool call), so a native run's chat.jsonl must be what it reads."""
    task = next(t for t in load_tasks(DEMO) if t.id == "000005")
    golden_final = task.golden_dialog[-1]["content"]
    srv = scripted_server(
        [
            reply(tool_calls=[call("read", {"path": "/tmp_workspace/campaign_notes.md"})]),
            reply(golden_final),
        ]
    )
    result, folder = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/x"),
        tmp_path,
        services=TrialServices(model=srv.chat_model()),
    )
    assert result.error is None and result.score.score == 1.0
    assert result.score.subscores["refusal_in_final_message"] == 1.0
    # the same model answering "done" fails the same grader: it really read the transcript
    srv2 = scripted_server([reply("done")])
    result2, _ = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/x"),
        tmp_path,
        services=TrialServices(model=srv2.chat_model()),
    )
    assert result2.score.subscores["refusal_in_final_message"] == 0.0
    assert result2.score.score < 0.5


async def test_a_trial_whose_folder_name_was_taken_meanwhile_gets_its_own(tmp_path, monkeypatch):
    """Two trials of a task drew the same folder name (the same minute and 6 hex digits): the
    second was moved into the first's folder and lost from the job. Now it takes a new name,
    and its result.json says that name."""
    from clawrig.runner import trial as trial_mod

    real = trial_mod.trial_folder_name
    drawn = iter(["nop_20260101_0000_abcdef"] * 2)
    monkeypatch.setattr(
        trial_mod, "trial_folder_name", lambda model, when=None: next(drawn, None) or real(model)
    )
    task = next(t for t in load_tasks(DEMO) if t.id == "000015")
    first, first_folder = await run_trial(task, TrialConfig(agent="nop", model="nop"), tmp_path)
    second, second_folder = await run_trial(task, TrialConfig(agent="nop", model="nop"), tmp_path)
    assert first_folder.name == first.trial_id == "nop_20260101_0000_abcdef"
    assert second_folder != first_folder and second_folder.parent == first_folder.parent
    assert second.trial_id == second_folder.name
    on_disk = TrialResult.model_validate_json((second_folder / "result.json").read_text())
    assert on_disk.trial_id == second_folder.name
    assert sorted(p.name for p in first_folder.iterdir() if p.is_dir()) == ["end_state"]
    kept = TrialResult.model_validate_json((first_folder / "result.json").read_text())
    assert kept.trial_id == first.trial_id and kept.started_at == first.started_at
