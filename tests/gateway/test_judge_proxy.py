"""The judge proxy for graders (issue 9 item 3), with real graders run by the real grader runner
in real bwrap sandboxes. The graders use only the standard library (the sandbox's python3 has no
``openai``): they POST to ``$OPENROUTER_BASE_URL/chat/completions`` with ``$OPENROUTER_API_KEY``
and ``$JUDGE_MODEL``, as upstream graders do through the openai client."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from gw_helpers import REAL_KEY, upstream

from clawrig.grading.judge_proxy import NO_JUDGE_MODEL, judge_proxy
from clawrig.grading.programmatic import run_grader
from clawrig.llm.gateway import ResponseCache, replay_gateway
from clawrig.spec.task import Grader, GraderKind, SourceRef, Task, TaskFormat
from clawrig.testing.scripted_server import reply, usage

JUDGE_GRADER = r"""
import json, os, urllib.request

def ask_judge(text):
    body = {
        "model": os.environ["JUDGE_MODEL"],
        "temperature": 0,
        "messages": [
            {"role": "system", "content": "Rate the answer from 0 to 1. Reply {\"score\": x}."},
            {"role": "user", "content": text},
        ],
    }
    req = urllib.request.Request(
        os.environ["OPENROUTER_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENROUTER_API_KEY"],
                 "Content-Type": "application/json"},
    )
    reply = json.loads(urllib.request.urlopen(req, timeout=60).read())
    return json.loads(reply["choices"][0]["message"]["content"])["score"]

def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    answer = open(os.path.join(workspace_path, "results", "answer.txt")).read()
    score = ask_judge(answer)
    return {"judge": score, "overall_score": score}
"""

KEY_HUNTER = r"""
import glob, json, os

def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    needle = os.environ["HALF_A"] + os.environ["HALF_B"]
    found = []
    for name, value in os.environ.items():
        if needle in value:
            found.append("env:" + name)
    for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if needle.encode() in open(path, "rb").read():
                found.append(path)
        except OSError:
            pass
    for top in ("/root", "/tmp", "/tmp_workspace", "/opt", "/run", "/etc", "/home", "/var"):
        for dirpath, _, files in os.walk(top):
            for f in files:
                p = os.path.join(dirpath, f)
                try:
                    if needle.encode() in open(p, "rb").read(4_000_000):
                        found.append(p)
                except OSError:
                    pass
    return {"leaks": len(found), "where": found[:5],
            "token_is_placeholder": os.environ["OPENROUTER_API_KEY"].startswith("clawrig-"),
            "overall_score": 1.0 if not found else 0.0}
"""


def task_with(source: str) -> Task:
    return Task(
        id="judge_task",
        format=TaskFormat.WILDCLAW,
        prompt="p",
        source=SourceRef(path=Path("judge_task.md")),
        grader=Grader(kind=GraderKind.PROGRAMMATIC, source=source),
    )


async def answer_sandbox(gw_sandbox, gw, answer: str):
    sb = await gw_sandbox(gw)
    await sb.write_file("/tmp_workspace/results/answer.txt", answer)
    return sb


async def test_a_graders_judge_call_goes_through_the_proxy(
    scripted_server, make_gateway, gw_sandbox, tmp_path
):
    srv = scripted_server([reply('{"score": 0.75}', usage=usage(40, 6))])
    gw = make_gateway()
    judge = upstream(srv, "scripted/judge-1")
    sb = await answer_sandbox(gw_sandbox, gw, "Paris")
    log = tmp_path / "judge_chat.jsonl"
    async with judge_proxy(sb, gw, endpoint=judge, trial_id="t", log_path=log) as proxy:
        score = await run_grader(sb, task_with(JUDGE_GRADER), env=proxy.env)
        assert proxy.env["JUDGE_MODEL"] == "judge-1"
        assert proxy.env["OPENROUTER_BASE_URL"] == "http://127.0.0.1:18199/v1"
    assert score.error is None, score.details
    assert score.score == 0.75 and score.subscores["judge"] == 0.75
    assert srv.headers[0]["authorization"] == f"Bearer {REAL_KEY}"
    sent = srv.requests[0]
    assert (sent["model"], sent["temperature"]) == ("judge-1", 0)
    assert sent["messages"][1] == {"role": "user", "content": "Paris"}
    (rec,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert rec["kind"] == "grader" and rec["valid"] is True and rec["cached"] is False
    assert rec["request"]["messages"] == sent["messages"]
    assert rec["response"]["content"] == '{"score": 0.75}'
    assert rec["response"]["usage"]["total_tokens"] == 46
    assert proxy.usage.total_tokens == 46


async def test_recorded_judge_replies_make_regrading_reproducible_and_free(
    scripted_server, make_gateway, gw_sandbox, tmp_path
):
    srv = scripted_server([reply('{"score": 0.5}')])
    cache_file = tmp_path / "judge_cache.jsonl"
    gw = make_gateway()
    sb = await answer_sandbox(gw_sandbox, gw, "forty-two")
    first_log = tmp_path / "first" / "judge_chat.jsonl"
    async with judge_proxy(
        sb, gw, endpoint=upstream(srv), trial_id="t", log_path=first_log, cache=cache_file
    ) as proxy:
        first = await run_grader(sb, task_with(JUDGE_GRADER), env=proxy.env)
    assert first.score == 0.5
    assert len(cache_file.read_text().splitlines()) == 1
    srv.stop()  # re-grading needs no judge at all now

    gw2 = make_gateway()
    cache = ResponseCache.from_file(cache_file)
    for n in range(2):
        sb2 = await answer_sandbox(gw_sandbox, gw2, "forty-two")
        log = tmp_path / f"again{n}" / "judge_chat.jsonl"
        async with judge_proxy(
            sb2, gw2, endpoint=None, trial_id="t", log_path=log, cache=cache
        ) as proxy:
            again = await run_grader(sb2, task_with(JUDGE_GRADER), env=proxy.env)
            assert proxy.env["JUDGE_MODEL"] == NO_JUDGE_MODEL
        assert (again.score, again.error) == (0.5, None)
        (rec,) = [json.loads(x) for x in log.read_text().splitlines()]
        assert rec["cached"] is True and rec["response"]["content"] == '{"score": 0.5}'
    assert len(srv.requests) == 1
    assert len(cache_file.read_text().splitlines()) == 1  # nothing new was asked

    # a request the cache does not hold, with no judge: a grading error, not a 0
    sb3 = await answer_sandbox(gw_sandbox, gw2, "a different answer")
    async with judge_proxy(
        sb3, gw2, endpoint=None, trial_id="t", log_path=tmp_path / "j3.jsonl", cache=cache
    ) as proxy:
        missing = await run_grader(sb3, task_with(JUDGE_GRADER), env=proxy.env)
    assert missing.score is None
    assert "grader crashed" in missing.error and "503" in missing.error
    (rec,) = [json.loads(x) for x in (tmp_path / "j3.jsonl").read_text().splitlines()]
    assert rec["valid"] is False and "no model configured for judge requests" in rec["error"]


async def test_judge_records_of_the_answer_judge_answer_graders_too(
    make_gateway, gw_sandbox, tmp_path
):
    # a record as clawrig.grading.judge writes it (request = messages + temperature)
    messages = [
        {"role": "system", "content": 'Rate the answer from 0 to 1. Reply {"score": x}.'},
        {"role": "user", "content": "blue"},
    ]
    old = tmp_path / "judge_chat.jsonl"
    old.write_text(
        json.dumps(
            {
                "ts": 1.0,
                "kind": "answer",
                "repeat": 0,
                "attempt": 1,
                "model": "openrouter/some/judge",
                "request": {"messages": messages, "temperature": 0},
                "response": {"content": '{"score": 1}', "finish_reason": "stop"},
                "valid": True,
                "error": None,
            }
        )
        + "\n"
    )
    gw = make_gateway()
    sb = await answer_sandbox(gw_sandbox, gw, "blue")
    async with judge_proxy(
        sb, gw, endpoint=None, trial_id="t", log_path=tmp_path / "new.jsonl", cache=old
    ) as proxy:
        score = await run_grader(sb, task_with(JUDGE_GRADER), env=proxy.env)
    assert (score.score, score.error) == (1.0, None)


async def test_the_grader_sees_a_placeholder_never_the_real_key(
    scripted_server, make_gateway, gw_sandbox, tmp_path
):
    srv = scripted_server([])
    gw = make_gateway()
    sb = await gw_sandbox(gw)
    half = len(REAL_KEY) // 2
    async with judge_proxy(
        sb, gw, endpoint=upstream(srv), trial_id="t", log_path=tmp_path / "j.jsonl"
    ) as proxy:
        env = proxy.env | {"HALF_A": REAL_KEY[:half], "HALF_B": REAL_KEY[half:]}
        score = await run_grader(sb, task_with(KEY_HUNTER), env=env, timeout_s=120)
        token = proxy.env["OPENROUTER_API_KEY"]
    assert score.error is None, score.details
    assert score.subscores["leaks"] == 0, score.subscores["where"]
    assert score.subscores["token_is_placeholder"] is True
    # the placeholder dies with the grading phase
    async with httpx.AsyncClient() as client:
        r = await client.post(
            f"{gw.host_url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {token}"},
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert r.status_code == 401


async def test_the_proxy_listens_only_during_grading(scripted_server, make_gateway, gw_sandbox):
    srv = scripted_server([])
    gw = make_gateway()
    sb = await gw_sandbox(gw)
    probe = "curl -sS -m 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:18199/healthz"
    before = await sb.exec(probe)
    async with judge_proxy(sb, gw, endpoint=upstream(srv), trial_id="t", log_path=None):
        during = await sb.exec(probe)
    after = await sb.exec(probe)
    assert (before.exit_code, during.stdout, after.exit_code) == (7, "200", 7)


async def test_a_replay_gateway_answers_graders_from_a_trial_folder(
    scripted_server, make_gateway, gw_sandbox, tmp_path
):
    # record: a grader's judge call through the proxy of a normal gateway
    srv = scripted_server([reply('{"score": 0.25}')])
    trial = tmp_path / "job" / "judge_task" / "trial-0"
    gw = make_gateway()
    sb = await answer_sandbox(gw_sandbox, gw, "seven")
    async with judge_proxy(
        sb, gw, endpoint=upstream(srv), trial_id="t", log_path=trial / "judge_chat.jsonl"
    ) as proxy:
        first = await run_grader(sb, task_with(JUDGE_GRADER), env=proxy.env)
    assert first.score == 0.25
    srv.stop()
    # re-grade: the replay gateway of the trial folder answers the proxy (no cache given)
    rgw = replay_gateway(trial, what="TRIAL_DIR").start()
    try:
        sb2 = await answer_sandbox(gw_sandbox, rgw, "seven")
        log = tmp_path / "again" / "judge_chat.jsonl"
        async with judge_proxy(
            sb2, rgw, endpoint=None, trial_id="t", log_path=log, cache=None
        ) as proxy:
            again = await run_grader(sb2, task_with(JUDGE_GRADER), env=proxy.env)
        assert (again.score, again.error) == (0.25, None)
        (rec,) = [json.loads(x) for x in log.read_text().splitlines()]
        assert rec["cached"] is True
    finally:
        rgw.stop()


PARALLEL_JUDGE_GRADER = r"""
import json, os, urllib.request
from concurrent.futures import ThreadPoolExecutor

def ask(i):
    body = {"model": os.environ["JUDGE_MODEL"], "temperature": 0,
            "messages": [{"role": "user", "content": "criterion %d" % i}]}
    req = urllib.request.Request(
        os.environ["OPENROUTER_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENROUTER_API_KEY"],
                 "Content-Type": "application/json"})
    try:
        reply = json.loads(urllib.request.urlopen(req, timeout=120).read())
    except urllib.error.HTTPError as exc:  # no retry: a refusal is this grader's failure
        return "HTTP %d" % exc.code
    return json.loads(reply["choices"][0]["message"]["content"])["score"]

def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(ask, range(8)))
    refused = [s for s in scores if isinstance(s, str)]
    return {"refused": len(refused), "statuses": refused,
            "overall_score": 0.0 if refused else sum(scores) / len(scores)}
"""


async def test_a_grader_sending_8_judge_calls_at_once_gets_every_answer(
    scripted_server, make_gateway, gw_sandbox, tmp_path
):
    """The gateway holds at most 4 requests of a lease open (MAX_IN_FLIGHT, a cap meant for
    agent programs); a grader's 8 simultaneous judge calls are not refused with 429 by it:
    the ones past the cap wait and are answered, 4 at most at the judge at once."""
    srv = scripted_server(responder=lambda body: reply('{"score": 0.5}', delay=0.4))
    gw = make_gateway()
    sb = await answer_sandbox(gw_sandbox, gw, "Paris")
    log = tmp_path / "judge_chat.jsonl"
    judge = upstream(srv, "scripted/judge-1")
    async with judge_proxy(sb, gw, endpoint=judge, trial_id="t", log_path=log) as proxy:
        score = await run_grader(sb, task_with(PARALLEL_JUDGE_GRADER), env=proxy.env)
        busy = proxy.lease.busy_refused
    assert score.error is None, score.details
    assert score.subscores["refused"] == 0, score.subscores["statuses"]
    assert score.score == 0.5 and busy == 0
    asked = sorted(r["messages"][0]["content"] for r in srv.requests)
    assert asked == sorted(f"criterion {i}" for i in range(8))
    assert 1 <= srv.max_in_flight <= 4
    assert len(log.read_text().splitlines()) == 8
