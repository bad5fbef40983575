"""One request key for every recorded call, model or judge: a judge call recorded by the gateway
(model_calls.jsonl) and by the judge's own log (judge_chat.jsonl) is replayed through a replay
gateway of the trial folder, whichever judge is configured at re-grade time; a request the
records lack is refused (or asked of a live judge)."""

from __future__ import annotations

import json

import pytest
from gw_helpers import FAST_RETRY, upstream

from clawrig.errors import ModelRequestError, UserError
from clawrig.grading.judge import run_judge_attempts
from clawrig.llm.gateway import (
    JUDGE_KEY_MODEL,
    RECORD_FILE,
    read_records,
    recorded_models,
    replay_gateway,
    replay_model,
    request_key,
)
from clawrig.testing.scripted_server import reply

MESSAGES = [
    {"role": "system", "content": 'Grade the answer. Reply {"score": x}.'},
    {"role": "user", "content": "The answer is 4."},
]


def accept(content):
    return (content, "") if content else (None, "empty")


async def judge_once(model, log_path, messages=MESSAGES):
    value, attempts, _ = await run_judge_attempts(
        model, lambda strict: messages, accept, log_path=log_path, kind="answer"
    )
    return value, attempts


@pytest.fixture
async def recorded_trial(scripted_server, make_gateway, tmp_path):
    """A trial folder whose answer judge ("scripted/judge-a") was called once through the
    gateway: the call is in both model_calls.jsonl and judge_chat.jsonl."""
    srv = scripted_server([reply('{"score": 1}')])
    trial = tmp_path / "job" / "task_a" / "trial-0"
    gw = make_gateway()
    lease = gw.open_trial(
        upstream(srv, "scripted/judge-a"),
        trial_id="trial-0",
        role="judge",
        task_id="task_a",
        record_path=trial / RECORD_FILE,
    )
    value, _ = await judge_once(lease.chat_model(), trial / "judge_chat.jsonl")
    assert value == '{"score": 1}'
    gw.close_trial(lease)
    srv.stop()
    return trial


async def test_a_recorded_judge_call_has_one_key_in_both_records(recorded_trial):
    (call,) = read_records(recorded_trial / RECORD_FILE)
    (log,) = [json.loads(x) for x in (recorded_trial / "judge_chat.jsonl").read_text().splitlines()]
    # worked out here: the judge's body is {messages, temperature: 0}, keyed under "judge"
    want = request_key(JUDGE_KEY_MODEL, {"messages": MESSAGES, "temperature": 0})
    assert call["key"] == want
    assert request_key(JUDGE_KEY_MODEL, log["request"]) == want
    assert recorded_models(recorded_trial) == {"judge": "scripted/judge-a"}


async def test_regrading_replays_the_judge_through_the_gateway(recorded_trial, tmp_path):
    rgw = replay_gateway(recorded_trial, what="TRIAL_DIR", retry=FAST_RETRY).start()
    try:
        assert len(rgw.cache) == 1  # recorded twice, one reply
        # another judge name at re-grade time: same key, answered from the records
        lease = rgw.open_trial(
            replay_model("other/judge-b").endpoint,
            trial_id="again",
            role="judge",
            record_path=tmp_path / "again" / RECORD_FILE,
        )
        model = lease.chat_model()
        for _ in range(2):  # a repeat gets the same reply again
            assert await judge_once(model, tmp_path / "again" / "judge_chat.jsonl") == (
                '{"score": 1}',
                1,
            )
        recs = read_records(tmp_path / "again" / RECORD_FILE)
        assert [r["cached"] for r in recs] == [True, True]
        # a request the records lack: refused with a replay miss, no model asked
        other = [*MESSAGES[:1], {"role": "user", "content": "The answer is 5."}]
        with pytest.raises(ModelRequestError, match="replay: no recorded response"):
            await judge_once(model, None, other)
        assert lease.refusals == ["replay_miss"]
    finally:
        rgw.stop()


async def test_a_live_judge_answers_what_the_records_lack(
    recorded_trial, scripted_server, tmp_path
):
    live = scripted_server([reply('{"score": 0}')])
    rgw = replay_gateway(recorded_trial, live=True, retry=FAST_RETRY).start()
    try:
        lease = rgw.open_trial(upstream(live, "scripted/live"), trial_id="x", role="judge")
        model = lease.chat_model()
        assert (await judge_once(model, None))[0] == '{"score": 1}'  # recorded
        other = [*MESSAGES[:1], {"role": "user", "content": "The answer is 5."}]
        assert (await judge_once(model, None, other))[0] == '{"score": 0}'  # live
        assert [r["messages"] for r in live.requests] == [other]
    finally:
        rgw.stop()


async def test_replay_of_a_folder_without_records_is_one_clear_error(tmp_path):
    from clawrig.errors import UserError

    (tmp_path / "trial").mkdir()
    with pytest.raises(UserError, match=r"TRIAL_DIR: .*trial: no recorded model calls"):
        replay_gateway(tmp_path / "trial", what="TRIAL_DIR")
    with pytest.raises(UserError, match="--replay: no such job or trial folder"):
        replay_gateway(tmp_path / "nope")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b'{"seq": 2, "request": {"messages": []}, "base": {"seq": [1], "messages": 0}}',
         ":2: base: request seq [1] is not in the file"),
        (b'{"seq": 2, "request": {"__dropped__": 5}, "base": {"seq": 1, "messages": 0}}',
         ":2: base: not a recorded request's delta"),
        (b'{"seq": 2, "request": {"messages": 5}, "base": {"seq": 1, "messages": 0}}',
         ":2: base: not a recorded request's delta"),
        (b'{"seq": 2, "request": {}, "base": {"seq": 1, "messages": "x"}}',
         ":2: base: not a recorded request's delta"),
        (b"\xff", ": recorded model calls: not UTF-8"),
        (b"[" * 50_000 + b"]" * 50_000, ":2: recorded model calls: not a JSON line"),
    ],
)  # fmt: skip
def test_garbled_records_are_one_line_naming_the_file(tmp_path, line, said):
    """A red team's edits of a recorded job's model_calls.jsonl each crashed ``--replay``
    with a traceback (TypeError, ValueError, unhashable type, UnicodeDecodeError)."""
    from clawrig.llm.gateway.replay import read_records

    first = b'{"seq": 1, "request": {"messages": [{"role": "user", "content": "hi"}]}}\n'
    path = tmp_path / "model_calls.jsonl"
    path.write_bytes(first + line + b"\n")
    with pytest.raises(UserError) as caught:
        read_records(path)
    assert str(caught.value).startswith(f"{path}{said}"), str(caught.value)


def test_records_naming_no_task_let_any_task_be_replayed(tmp_path):
    """A replayed folder where some calls name their task and some do not (an older job's
    records beside a newer one's): the preflight refused the tasks of the nameless ones,
    which replay (a red-team finding); only when every call names a task are others
    refused."""
    from clawrig.llm.gateway.replay import recorded_task_ids

    a, b = tmp_path / "000001" / "x", tmp_path / "000002" / "y"
    for folder, rec in ((a, {"task_id": "000001"}), (b, {})):
        folder.mkdir(parents=True)
        (folder / "model_calls.jsonl").write_text(json.dumps({"seq": 1, "request": {}, **rec}))
    assert recorded_task_ids(tmp_path) is None
    (b / "model_calls.jsonl").write_text(json.dumps({"request": {}, "task_id": "000002"}))
    (tmp_path / "000003").mkdir()
    (tmp_path / "000003" / "notes.jsonl").write_text("not a record")
    # a judge's log names no task (the built-in judge's records): no matter; nor a deep line
    (b / "judge_chat.jsonl").write_text(json.dumps({"kind": "grader", "request": {}}))
    (b / "model_calls.jsonl").write_text(
        json.dumps({"request": {}, "task_id": "000002"}) + "\n" + "[" * 50_000 + "]" * 50_000
    )
    assert recorded_task_ids(tmp_path) == {"000001", "000002"}


def test_recorded_runs_count_answered_calls_of_the_selected_tasks_by_integer_run_index(tmp_path):
    """The ``--replay`` runs note's count: distinct integer run indices of the selected tasks'
    answered agent records; a record with no reply, a bool or text run index, another task's
    records and a judge log's do not count."""
    from clawrig.llm.gateway.replay import recorded_runs

    def records(folder, *recs):
        folder.mkdir(parents=True)
        lines = [json.dumps({"request": {}, "role": "agent", **r}) for r in recs]
        (folder / "model_calls.jsonl").write_text("\n".join(lines) + "\n")

    answered = {"response": {"choices": []}}
    records(
        tmp_path / "A" / "t0",
        {"task_id": "A", "run_index": 0, **answered},
        {"task_id": "A", "run_index": 0, **answered},  # (a second call of run 0)
        {"task_id": "A", "run_index": 1, **answered},
        {"task_id": "A", "run_index": 2, "response": None},  # never answered
        {"task_id": "A", "run_index": True, **answered},
        {"task_id": "A", "run_index": "3", **answered},
        # the harness's plain request, answered: no reply of the agent's (helper-156)
        {"task_id": "A", "run_index": 4, "role": "probe", **answered},
    )
    five = ({"task_id": "B", "run_index": n, **answered} for n in range(5))
    records(tmp_path / "B" / "t0", *five)
    (tmp_path / "A" / "t0" / "judge_chat.jsonl").write_text(
        json.dumps({"kind": "grader", "request": {}, "run_index": 7, "task_id": "A", **answered})
    )
    assert recorded_runs(tmp_path, ["A"]) == 2
    assert recorded_runs(tmp_path, ["A", "B"]) == 5
    assert recorded_runs(tmp_path, ["C"]) == 0


def test_a_trial_folders_records_are_its_own_not_what_its_agent_left_below_it(tmp_path):
    """``--replay`` or ``clawrig grade`` of one trial folder: its ``end_state/`` and
    ``task_output/`` are its agent's files, and were walked as task folders (a record forged
    there was served before the trial's own; a junk one made the trial impossible to
    re-grade: a red-team finding). Only the trial's own top-level records are read."""
    from clawrig.spec.layout import JobPaths

    trial = tmp_path / "task" / "trial"
    (trial / "end_state" / "x").mkdir(parents=True)
    (trial / "task_output" / "y").mkdir(parents=True)
    (trial / "result.json").write_text("{}")
    (trial / RECORD_FILE).write_text(json.dumps({"request": {}, "role": "agent", "model": "a"}))
    (trial / "end_state" / "x" / RECORD_FILE).write_text(
        json.dumps({"request": {}, "role": "agent", "model": "forged"})
    )
    (trial / "task_output" / "y" / "judge_chat.jsonl").write_text("FORGED\n")
    assert JobPaths(trial).trial_files(RECORD_FILE, "judge_chat.jsonl") == [trial / RECORD_FILE]
    assert recorded_models(trial) == {"agent": "a"}
    (trial / "result.json").unlink()  # an unfinished one: its own records mark it a trial
    assert JobPaths(trial).trial_files(RECORD_FILE, "judge_chat.jsonl") == [trial / RECORD_FILE]
    # the job folder above it reads the trial's records, not its agent's
    assert JobPaths(tmp_path).trial_files(RECORD_FILE, "judge_chat.jsonl") == [trial / RECORD_FILE]
