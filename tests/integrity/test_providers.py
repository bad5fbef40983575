"""Issue 14, classes 3 and 4 on the path every job takes: the model gateway. A provider's reply
and a sandbox's request are bounded by the gateway itself (not only by the harness's direct
client), and a provider refusing a conversation the agent grew ends that trial, never the job.
Real HTTP servers on 127.0.0.1, a real gateway, real bwrap sandboxes and jobs."""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from integrity_helpers import HONEST, attack_job, job_results, tool_outputs, write_bench

from clawrig.cli.run import summary_lines
from clawrig.errors import ModelRequestError, ProviderError
from clawrig.llm.client import (
    MAX_REPLY_BYTES,
    PROBE,
    OpenAIChatModel,
    RetryPolicy,
    provider_stop,
)
from clawrig.llm.gateway import Gateway
from clawrig.llm.gateway.server import MAX_REQUEST_BYTES
from clawrig.llm.pricing import Prices
from clawrig.llm.providers import ModelEndpoint
from clawrig.runner.batch import run_job
from clawrig.runner.trial import TrialServices, run_trial
from clawrig.spec.job import TrialConfig
from clawrig.spec.task import Grader, GraderKind, SourceRef, Task
from clawrig.spec.trial import ErrorKind
from clawrig.tasks.registry import load_tasks
from clawrig.testing.scripted_server import call, error, reply
from http_replies import send_body, start_reply

Handler = Callable[[BaseHTTPRequestHandler], None]


def _endless(h: BaseHTTPRequestHandler, *, length: bool) -> None:
    """A 200 reply of 200 MiB of spaces (with or without Content-Length)."""
    start_reply(h, 200 * 2**20 if length else None)
    chunk = b" " * 2**20
    for _ in range(200):
        h.wfile.write(chunk)


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "unbounded"])
async def test_a_reply_over_the_cap_is_refused_by_the_gateway(provider, length) -> None:
    # the gateway read any reply whole (200 MiB: ~0.5 GB of harness memory) and then called it
    # "not JSON"; now it stops at the cap and says so: a provider fault, retried
    url = provider(lambda h: _endless(h, length=length))
    endpoint = ModelEndpoint(
        name="p/m", provider="p", model_id="m", base_url=url, prices=Prices(input=1.0)
    )
    with Gateway(retry=RetryPolicy(attempts=1)) as gw:
        model = gw.open_trial(endpoint, trial_id="t").chat_model()
        with pytest.raises(ProviderError) as info:
            await model.chat([{"role": "user", "content": "hi"}])
        await model.aclose()
    assert f"over {MAX_REPLY_BYTES // 2**20} MiB" in str(info.value)


def _respond_by_task(turns: dict[int, Callable[[int], object]]) -> Callable[[dict], object]:
    """A scripted-model responder: task k (TASKNUM=k in the prompt) answers
    ``turns[k](tool results so far)``; other tasks run the honest command, then say done."""

    def respond(request: dict) -> object:
        first = request["messages"][0]["content"]
        if request["messages"] == PROBE:  # the harness's plain request: answered
            return reply("OK")
        k = int(re.search(r"TASKNUM=(\d+)", json.dumps(first)).group(1))
        done = sum(1 for m in request["messages"] if m.get("role") == "tool")
        if k in turns:
            return turns[k](done)
        return reply(tool_calls=[call("exec", {"command": HONEST})]) if not done else reply("ok")

    return respond


MODERATED = "Your chosen model requires moderation and your input was flagged"


@pytest.mark.sandbox
@pytest.mark.parametrize(
    ("status", "overflow"),
    [
        (400, "This model's maximum context length is 131072 tokens; the messages hold 250000."),
        (403, MODERATED),
    ],
    ids=["400-context", "403-moderation"],
)
async def test_a_conversation_the_provider_refuses_ends_that_trial_not_the_job(
    scripted_server, tmp_path, status, overflow
):
    # t1's agent grows its conversation past the model's context (the provider's 400 on its
    # second request), or puts text a moderation filter refuses in it (403): a
    # ModelRequestError, a "user error" that stopped the whole job with no summary; the 403
    # then was an unscored infrastructure error that stopped the job (red-team 8, finding 3).
    # The provider answers the harness's plain request: the conversation is the agent's
    # doing, t1 stops there and is graded as it stands, the refusal recorded.

    def t1(done: int) -> object:
        return (
            reply(tool_calls=[call("exec", {"command": HONEST})])
            if not done
            else error(status, overflow)
        )

    tasks_dir = write_bench(tmp_path / "bench", 2)
    srv = scripted_server(responder=_respond_by_task({1: t1}))
    job = attack_job(tmp_path / "bench", tmp_path / "out")
    with Gateway() as gw:  # as `clawrig run` has one
        services = TrialServices(model=srv.chat_model(), gateway=gw)
        summary = await run_job(job, load_tasks(tasks_dir), services)
    got = job_results(tmp_path / "out")
    assert sorted(got) == ["t1", "t2"] and len(summary["tasks"]) == 2
    assert got["t1"]["stop_reason"] == "model_error" and got["t1"]["error"] is None
    assert got["t1"]["score"]["score"] == 1.0  # graded as it stands: it had written ok
    # the provider's own message (as OpenClaw's trial words it: one wording for both agents)
    assert got["t1"]["stop_detail"] == f"HTTP {status}: {overflow}"
    assert got["t2"]["score"]["score"] == 1.0 and summary["provider_stopped"] is None
    assert overflow in Path(got["t1"]["folder"], "agent.log").read_text()
    # the harness's plain request is in the trial's record of calls, as its usage counts it
    # (helper-153: usage.json said one request more than model_calls.jsonl held)
    folder = Path(got["t1"]["folder"])
    records = [json.loads(ln) for ln in (folder / "model_calls.jsonl").read_text().splitlines()]
    assert [r["role"] for r in records] == ["agent", "agent", "probe"]
    assert records[-1]["request"]["messages"] == PROBE and records[-1]["status"] == 200
    assert records[-1]["response"]["choices"][0]["message"]["content"] == "OK"
    usage = json.loads((folder / "usage.json").read_text())
    assert usage["request_count"] == sum(
        (r["usage"] or {}).get("request_count", 0) for r in records
    )
    assert usage["total_tokens"] == sum((r["usage"] or {}).get("total_tokens", 0) for r in records)
    # the summary's row and the console say so (a score alone did not tell the refusal)
    rows = {r["task_id"].rsplit("_", 1)[-1]: r for r in summary["tasks"]}
    assert rows["t1"]["stop_reason"] == "model_error"
    assert rows["t1"]["stop_detail"] == got["t1"]["stop_detail"]
    assert rows["t2"]["stop_reason"] == "final_answer" and rows["t2"]["stop_detail"] is None
    lines = summary_lines(summary)
    head = lines.index(
        "1 trial(s) stopped when the provider refused the agent's conversation "
        "(model_error: graded as it stood):"
    )
    t1, t2 = (got[t]["task_id"] for t in ("t1", "t2"))
    assert lines[head + 1].startswith(f"  {t1} run 0: HTTP {status}: ")
    assert not any(line.startswith(f"  {t2} ") for line in lines)


@pytest.mark.sandbox
@pytest.mark.parametrize("case", ["provoked", "outage", "passed"])
async def test_a_server_error_the_agents_conversation_provokes_is_graded_not_an_abstention(
    scripted_server, tmp_path, case
):
    # helper-156: t1's agent puts in its conversation what the provider answers with a 500
    # (its command's output here): after the retries the trial was an unscored
    # infrastructure error, run again by --resume, a free abstention for a losing run. Now the
    # harness asks its plain request and sends the failed request once more: the first
    # answered and the second failing again, the conversation is to blame (model_error,
    # graded as it stands); the plain request failing too (an outage), or the same request
    # answered now (an outage that has passed), an infrastructure error as before
    failed = {"n": 0}

    def respond(request: dict) -> object:
        if request["messages"] == PROBE:
            return error(500, "down", retry_after=0) if case == "outage" else reply("OK")
        if "BOOM42" in json.dumps(request["messages"]).replace("echo BOOM", ""):
            if case == "passed" and failed["n"] >= 6:  # the gateway's 6 attempts, then up
                return reply("done")
            failed["n"] += 1
            return error(500, "The model produced invalid content", retry_after=0)
        return reply(tool_calls=[call("exec", {"command": f"{HONEST}; echo BOOM''42"})])

    tasks_dir = write_bench(tmp_path / "bench", 1)
    srv = scripted_server(responder=respond)
    job = attack_job(tmp_path / "bench", tmp_path / "out")
    with Gateway() as gw:
        services = TrialServices(model=srv.chat_model(), gateway=gw)
        summary = await run_job(job, load_tasks(tasks_dir), services)
    probes = [q for q in srv.requests if q["messages"] == PROBE]
    got = job_results(tmp_path / "out")
    # the harness's requests are in the trial's record of calls, failed ones too (helper-157:
    # a plain request or resend failing with a 5xx after its retries was not)
    folder = Path(got["t1"]["folder"])
    records = [json.loads(ln) for ln in (folder / "model_calls.jsonl").read_text().splitlines()]
    harness = [(r["request"]["messages"] == PROBE, r["status"]) for r in records]
    harness = [h for h, r in zip(harness, records, strict=True) if r["role"] == "probe"]
    assert (
        harness
        == {
            "provoked": [(True, 200), (False, 500)],  # the plain request answered, the resend not
            "outage": [(True, 500)],
            "passed": [(True, 200), (False, 200)],
        }[case]
    ), records
    if case == "passed":  # the probe, then the same request answered: not the agent's
        assert len(probes) == 1 and failed["n"] == 6 and got["t1"]["score"] is None
        assert got["t1"]["error"]["kind"] == "infrastructure"
        assert got["t1"]["stop_reason"] == "provider_error"
    elif case == "provoked":
        assert len(probes) == 1 and got["t1"]["error"] is None
        assert got["t1"]["stop_reason"] == "model_error" and got["t1"]["turns"] == 1
        assert got["t1"]["score"]["score"] == 1.0  # graded as it stands: it had written ok
        # the server's own message (helper-157: the harness's line, "HTTP 500: scripted/demo:
        # HTTP 500 from ... after 6 attempts: ...", the status said twice)
        assert got["t1"]["stop_detail"] == "HTTP 500: The model produced invalid content"
        assert summary["error_count"] == 0
    else:  # an outage: the trial is not scored, the refusal it judged kept in its error
        assert probes and got["t1"]["score"] is None
        err = got["t1"]["error"]
        assert err["kind"] == "infrastructure" and "invalid content" in err["message"], err
        assert got["t1"]["stop_reason"] == "provider_error" and got["t1"]["turns"] == 1


# a program of the agent's asking the model through the gateway (the task's key) in a loop
PROGRAM_ASKS = (
    "setsid sh -c 'for i in $(seq 300); do curl -s -m 10 -H \"Authorization: Bearer "
    '$OPENAI_API_KEY" -H "Content-Type: application/json" -d '
    '"{\\"model\\":\\"x\\",\\"messages\\":[{\\"role\\":\\"user\\",'
    '\\"content\\":\\"hello\\"}]}" $OPENAI_BASE_URL/chat/completions; touch /tmp/asked; '
    "sleep 0.1; done' >/dev/null 2>&1 </dev/null & "
    # (then the command waits for its first answer, up to 60 s: under CI's load the trial
    # once ended before the program had asked at all, CI170)
    "i=0; until [ -e /tmp/asked ] || [ $i -ge 600 ]; do sleep 0.1; i=$((i+1)); done;"
)


@pytest.mark.sandbox
@pytest.mark.parametrize("status", [500, 503])
async def test_the_resent_request_is_the_failed_one_and_an_overload_is_no_agents_fault(
    scripted_server, tmp_path, status
):
    # helper-158: the request sent again was the lease's last, which a program of the agent's
    # asking the model set (answered: the 500 the agent provoked passed for an outage, a free
    # abstention for its losing run); and a 503 of a server shedding load for long requests
    # was scored as the agent's model_error. Now the request the server failed is sent again,
    # and only a 500 is judged (t1 never writes ok: a 0 when graded)
    def respond(request: dict) -> object:
        said = json.dumps(request["messages"])
        if request["messages"] == PROBE or "TASKNUM" not in said:  # the probe, the program
            return reply("OK")
        if "BOOM42" in said.replace("echo BOOM", ""):
            return error(status, "The model produced invalid content", retry_after=0)
        return reply(tool_calls=[call("exec", {"command": f"{PROGRAM_ASKS} echo BOOM''42"})])

    tasks_dir = write_bench(tmp_path / "bench", 1)
    task = next(tasks_dir.rglob("*.md"))
    task.write_text(task.read_text() + "\n## Env\n\n```\nOPENAI_API_KEY\n```\n")
    srv = scripted_server(responder=respond)
    job = attack_job(tmp_path / "bench", tmp_path / "out")
    with Gateway() as gw:
        services = TrialServices(model=srv.chat_model(), gateway=gw)
        await run_job(job, load_tasks(tasks_dir), services)
    got = job_results(tmp_path / "out")["t1"]
    if status == 500:
        programs = [q for q in srv.requests if "TASKNUM" not in json.dumps(q["messages"])]
        assert len(programs) > len([q for q in srv.requests if q["messages"] == PROBE])
        assert got["stop_reason"] == "model_error" and got["score"]["score"] == 0.0, got
    else:  # an overloaded server's: an outage, never the agent's 0
        assert got["score"] is None and got["error"]["kind"] == "infrastructure", got
        assert not [q for q in srv.requests if q["messages"] == PROBE]


@pytest.mark.sandbox
async def test_a_provider_refusing_even_a_plain_request_mid_trial_stops_the_job(
    scripted_server, tmp_path
):
    # the provider answers t1's first request, then refuses everything (a key revoked, the
    # account closed) with a 403, the harness's plain request too: no conversation of the
    # agent is to blame. t1 is an infrastructure error (not scored) and no new trial starts.
    broken = {"on": False}

    def respond(request: dict) -> object:
        if broken["on"]:
            return error(403, "account suspended")
        broken["on"] = True
        return reply(tool_calls=[call("exec", {"command": HONEST})])

    tasks_dir = write_bench(tmp_path / "bench", 2)
    srv = scripted_server(responder=respond)
    job = attack_job(tmp_path / "bench", tmp_path / "out", parallel=1)
    with Gateway() as gw:
        services = TrialServices(model=srv.chat_model(), gateway=gw)
        summary = await run_job(job, load_tasks(tasks_dir), services)
    got = job_results(tmp_path / "out")
    assert sorted(got) == ["t1"]  # t2 not started
    err = got["t1"]["error"]
    assert err["kind"] == "infrastructure" and got["t1"]["score"] is None
    assert "HTTP 403" in err["message"] and "a plain request is refused too" in err["message"]
    assert got["t1"]["stop_reason"] == "provider_error"  # (was null: helper-152)
    assert got["t1"]["stop_detail"] == "HTTP 403: account suspended"  # (null: helper-154)
    # the refused plain request is in the trial's record too, not counted (helper-155)
    folder = Path(got["t1"]["folder"])
    records = [json.loads(ln) for ln in (folder / "model_calls.jsonl").read_text().splitlines()]
    assert [(r["role"], r["status"]) for r in records] == [
        ("agent", 200),
        ("agent", 403),
        ("probe", 403),
    ]
    assert records[-1]["request"]["messages"] == PROBE and records[-1]["usage"] is None
    assert "account suspended" in records[-1]["error"]
    why = summary["provider_stopped"]
    assert "HTTP 403" in why and srv.base_url in why and summary["not_run"] == 1


@pytest.mark.sandbox
async def test_a_request_body_of_any_size_from_a_sandbox_is_cut_at_the_cap(
    scripted_server, tmp_path
):
    # a task whose skill scripts use the model (## Env OPENAI_API_KEY): its programs reach
    # the gateway with the trial's token. One streams 100 MiB of body: the gateway read it
    # all into the harness's memory (any size: the job OOM-killed); now a 413 at MAX_REQUEST_BYTES.
    tasks_dir = write_bench(tmp_path / "bench", 1)
    md = next(tasks_dir.rglob("*.md"))
    md.write_text(md.read_text() + "\n## Env\n\n```\nOPENAI_API_KEY\n```\n")
    flood = (
        "head -c 100M /dev/zero | curl -sS --max-time 60 -H 'Content-Type: application/json' "
        '-H "Authorization: Bearer $OPENAI_API_KEY" --data-binary @- '
        '"$OPENAI_BASE_URL/chat/completions"; echo; echo rc=$?'
    )
    srv = scripted_server(
        responder=_respond_by_task(
            {
                1: lambda done: (
                    reply(tool_calls=[call("exec", {"command": flood})])
                    if not done
                    else reply("ok")
                )
            }
        )
    )
    job = attack_job(tmp_path / "bench", tmp_path / "out")
    with Gateway() as gw:  # as `clawrig run` has one
        services = TrialServices(model=srv.chat_model(), gateway=gw)
        await run_job(job, load_tasks(tasks_dir), services)
    got = job_results(tmp_path / "out")
    [output] = tool_outputs(Path(got["t1"]["folder"]))
    assert MAX_REQUEST_BYTES == 32 * 2**20  # since 2d07fe1 (64 MiB before)
    assert "request body is over 32 MiB" in output, output
    assert got["t1"]["error"] is None


def _completion(message: object) -> dict:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }


MALFORMED = {
    "message null": _completion(None),
    "tool_calls a string": _completion({"role": "assistant", "content": None, "tool_calls": "x"}),
    "content an object": _completion({"role": "assistant", "content": {"text": "hi"}}),
    "choices a string": {"id": "c", "choices": "none", "model": "m"},
    "a list": [1, 2],
}


@pytest.mark.parametrize("shape", list(MALFORMED))
async def test_a_reply_of_the_wrong_shape_is_a_provider_fault(provider, shape) -> None:
    # through the gateway a malformed reply raised AttributeError or a ValidationError in the
    # harness, logged as a harness bug with its traceback; it is the provider's fault (retried
    # by the trial, then infrastructure), said in one line
    body = json.dumps(MALFORMED[shape]).encode()

    def answer(h: BaseHTTPRequestHandler) -> None:
        send_body(h, body)

    endpoint = ModelEndpoint(name="p/m", provider="p", model_id="m", base_url=provider(answer))
    with Gateway(retry=RetryPolicy(attempts=1)) as gw:
        model = gw.open_trial(endpoint, trial_id="t").chat_model()
        with pytest.raises(ProviderError, match="wrong shape|not a JSON object"):
            await model.chat([{"role": "user", "content": "hi"}])
        await model.aclose()


def _reply_bytes(message: str) -> bytes:
    """A chat.completion whose message is the JSON text ``message`` (written by hand: the
    JSON escapes in it reach the harness as sent)."""
    return (
        '{"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": '
        f'[{{"index": 0, "message": {message}, "finish_reason": "stop"}}], '
        '"usage": {"prompt_tokens": 1, "completion_tokens": 1}}'
    ).encode()


@pytest.mark.sandbox
@pytest.mark.parametrize("through_gateway", [False, True], ids=["direct", "gateway"])
async def test_lone_surrogates_in_the_models_reply_do_not_void_the_trial(
    provider, make_task, tmp_path, through_gateway
) -> None:
    # the model's command and final answer hold the JSON escape of a lone surrogate
    # ("\udcff"): no UTF-8 file can hold one, so the trial folder (or the gateway's record)
    # could not be written, an infrastructure error, retried and never counted
    replies = [
        _reply_bytes(
            '{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": '
            '"function", "function": {"name": "exec", "arguments": '
            '"{\\"command\\": \\"echo \\\\udcff > /tmp_workspace/x\\"}"}}]}'
        ),
        _reply_bytes('{"role": "assistant", "content": "done \\udcff"}'),
    ]

    def answer(h: BaseHTTPRequestHandler) -> None:
        send_body(h, replies.pop(0) if len(replies) > 1 else replies[0])

    endpoint = ModelEndpoint(name="p/m", provider="p", model_id="m", base_url=provider(answer))
    model = OpenAIChatModel(endpoint, retry=RetryPolicy(attempts=1))
    config = TrialConfig(agent="native", model="p/m")
    with Gateway() as gw:
        services = TrialServices(model=model, gateway=gw if through_gateway else None)
        result, folder = await run_trial(make_task(), config, tmp_path / "out", services=services)
    assert result.error is None and result.score.score == 0.0
    chat = (folder / "chat.jsonl").read_text(encoding="utf-8")
    assert "done \ufffd" in chat and "echo \ufffd" in chat


def _judged_task(tmp_path: Path, k: int) -> Task:
    """Task ``t<k>``: answer 42, graded by the answer judge."""
    source = tmp_path / f"t{k}.json"
    source.write_text("{}")
    return Task(
        id=f"t{k}",
        category="judged",
        prompt=f"What is six times seven? TASKNUM={k}",
        format="fourfolder",
        source=SourceRef(path=source),
        timeout_seconds=60,
        answer="42",
        grader=Grader(kind=GraderKind.JUDGE),
    )


@pytest.mark.sandbox
@pytest.mark.parametrize("status", [400, 403])
async def test_a_judge_refusing_the_agents_answer_is_its_zero_not_the_jobs_end(
    scripted_server, tmp_path, status
):
    # t2's answer trips the judge provider's content filter (a 400): a ModelRequestError, a
    # "bad judge setting" that stopped the whole job, though the judge had answered t1 in the
    # same job. With that evidence the refusal is about the agent's answer: its 0. A 403 (a
    # moderation filter) was an unscored infrastructure error: the judge answers the harness's
    # plain request, so it is the agent's 0 too (red-team 8, finding 2).
    answers = {1: "42", 2: "42, and FLAGGED words"}
    agent = scripted_server(
        responder=lambda req: reply(
            answers[int(re.search(r"TASKNUM=(\d+)", json.dumps(req["messages"])).group(1))]
        )
    )

    def judge(request: dict) -> object:
        if "FLAGGED" in json.dumps(request["messages"]):
            return error(status, "Invalid prompt: flagged as potentially violating the policy")
        return reply('{"scores": {"match": 1}, "total": 1.0, "notes": "right"}')

    judge_srv = scripted_server(responder=judge)
    job = attack_job(tmp_path, tmp_path / "out", parallel=1, grader="judge")
    services = TrialServices(model=agent.chat_model(), judge=judge_srv.chat_model())
    tasks = [_judged_task(tmp_path, 1), _judged_task(tmp_path, 2)]
    summary = await run_job(job, tasks, services)
    got = {
        r["task_id"]: r
        for r in map(json.loads, map(Path.read_text, (tmp_path / "out").glob("*/*/result.json")))
    }
    assert len(summary["tasks"]) == 2
    assert got["t1"]["error"] is None and got["t1"]["score"]["score"] == 1.0
    assert got["t2"]["error"]["kind"] == "agent" and got["t2"]["score"]["score"] == 0.0
    assert "refused the agent's answer" in got["t2"]["error"]["message"]


@pytest.mark.sandbox
@pytest.mark.parametrize("case", ["provoked", "spaced", "outage", "long", "overlap"])
async def test_an_answer_the_judges_provider_fails_on_is_the_agents_zero(
    scripted_server, tmp_path, case
):
    """helper-161 (high): t2's answer makes the answer judge's provider fail with a 500 (a
    content-triggered failure, as helper-156 showed for the agent's model): the trial ended
    an unscored infrastructure error, run again by --resume, a free abstention for a wrong
    answer. Now, as for the agent's model, the harness's plain request answered and the
    failed request failing again make it the agent's 0, if the request with the answer
    withheld is answered; the plain request failing too (an outage), or a provider failing
    every long request whatever the answer ("long", helper-162: the honest "42" was scored
    0), it stays the provider's failure. helper-163: an answer with a space around it was
    not found in the request (the judge is shown it stripped): a free abstention again
    ("spaced"); the answer "42" replaced in the task's own "REF-42X" too made a request the
    provider fails on for the task's text look answerable without the answer: an honest 0
    ("overlap"). The request is made anew with the answer withheld, not edited."""
    answers = {1: "42", 2: "41 BOOM42"}
    agent = scripted_server(
        responder=lambda req: reply(
            answers[int(re.search(r"TASKNUM=(\d+)", json.dumps(req["messages"])).group(1))]
        )
    )

    def judge(request: dict) -> object:
        said = json.dumps(request["messages"])
        if request["messages"] == PROBE:
            return error(500, "down", retry_after=0) if case == "outage" else reply("OK")
        fails = "BOOM42" in said or (case == "long" and "TASKNUM=2" in said)
        if fails or "REF-42X" in said:
            return error(500, "The model produced invalid content", retry_after=0)
        return reply('{"scores": {"match": 1}, "total": 1.0, "notes": "right"}')

    if case in ("long", "overlap"):  # t2's answer is right: its request fails anyway
        answers[2] = "42"
    elif case == "spaced":
        answers[2] = " 41 BOOM42 "
    judge_srv = scripted_server(responder=judge)
    job = attack_job(tmp_path, tmp_path / "out", parallel=1, grader="judge")
    second = _judged_task(tmp_path, 2)
    if case == "overlap":  # the task's own text is what the provider fails on
        second = second.model_copy(update={"prompt": f"{second.prompt} (ticket REF-42X)"})
    with Gateway(retry=RetryPolicy(attempts=2, initial_s=0.01, max_s=0.01)) as gw:
        services = TrialServices(model=agent.chat_model(), judge=judge_srv.chat_model(), gateway=gw)
        await run_job(job, [_judged_task(tmp_path, 1), second], services)
    got = job_results(tmp_path / "out")
    assert got["t1"]["error"] is None and got["t1"]["score"]["score"] == 1.0
    err = got["t2"]["error"]
    if case in ("provoked", "spaced"):
        assert err["kind"] == "agent" and got["t2"]["score"]["score"] == 0.0, err
        assert err["message"].startswith(
            "the judge's provider fails on the agent's answer (HTTP 500: The model produced "
            "invalid content)"
        ), err
    else:
        assert err["kind"] == "infrastructure" and got["t2"]["score"]["score"] is None, err


@pytest.mark.sandbox
@pytest.mark.parametrize("case", ["provoked", "outage"])
async def test_an_answer_the_proxied_judge_fails_on_stays_the_judges_failure(
    scripted_server, make_task, tmp_path, case
):
    """helper-161 asked the same through the judge proxy (a grader asking the judge with the
    agent's answer); helper-162 showed a judge failing every grader's request would then
    score every trial 0, and the harness cannot tell what of a grader's request is the
    agent's: a 500 there stays the judge's failure, infrastructure (a free abstention left
    open for a grader that sends the agent's text to a judge it can make fail)."""

    def judge(request: dict) -> object:
        if request["messages"] == PROBE:
            return error(500, "down", retry_after=0) if case == "outage" else reply("OK")
        if "BOOM42" in json.dumps(request["messages"]):
            return error(500, "The model produced invalid content", retry_after=0)
        return reply("1.0")

    honest, provoked = await _proxy_judged(
        scripted_server, make_task, tmp_path / "out", judge, ["42", "41 BOOM42"]
    )
    assert honest.error is None and honest.score.score == 1.0
    assert provoked.error is not None and provoked.error.kind == ErrorKind.INFRASTRUCTURE
    assert provoked.counted_score() is None, provoked.error


PROXY_JUDGE_GRADER = """
import json, os, urllib.request
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    answer = open(os.path.join(workspace_path, "results", "out.txt")).read()
    body = {"model": os.environ["JUDGE_MODEL"],
            "messages": [{"role": "user", "content": "Score this answer: " + answer}]}
    req = urllib.request.Request(
        os.environ["OPENROUTER_BASE_URL"] + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"authorization": "Bearer " + os.environ["OPENROUTER_API_KEY"],
                 "content-type": "application/json"},
    )
    reply = json.load(urllib.request.urlopen(req))  # an HTTP error: the grader crashes
    return {"overall_score": float(reply["choices"][0]["message"]["content"])}
"""


async def _proxy_judged(
    scripted_server,
    make_task,
    out: Path,
    judge: Callable[[dict], object],
    answers: list[str],
    judges: list | None = None,
    **task_kwargs: object,
) -> list:
    """One trial per answer the agent writes to results/out.txt, graded by a programmatic
    grader that asks the judge (``judge``: the scripted judge's responder) through the judge
    proxy, all in one gateway; returns their results."""
    name = f"scripted/judge-{uuid.uuid4().hex[:8]}"  # a model no earlier test saw answer
    judge_srv = scripted_server(responder=judge)
    if judges is not None:  # the caller's view of the judge model
        judges.append(judge_srv.chat_model(name))
    results = []
    with Gateway(retry=RetryPolicy(attempts=2, initial_s=0.01, max_s=0.01)) as gw:
        for k, answer in enumerate(answers):
            command = f"mkdir -p results && printf '{answer}' > results/out.txt"
            agent = scripted_server(
                [reply(tool_calls=[call("exec", {"command": command})]), reply("done")]
            )
            task = make_task(PROXY_JUDGE_GRADER, **task_kwargs).model_copy(update={"id": f"t{k}"})
            services = TrialServices(
                model=agent.chat_model(), judge=judge_srv.chat_model(name), gateway=gw
            )
            config = TrialConfig(agent="native", model="scripted/x")
            result, _ = await run_trial(task, config, out, services=services)
            results.append(result)
    return results


def _flagging_judge_with(status: int) -> Callable[[dict], object]:
    def judge(request: dict) -> object:
        if "FLAGGED" in json.dumps(request["messages"]):
            return error(status, MODERATED)
        return reply("1.0")

    return judge


@pytest.mark.sandbox
@pytest.mark.parametrize("status", [400, 403])
async def test_a_proxy_judge_refusing_the_agents_answer_after_answering_is_its_zero(
    scripted_server, make_task, tmp_path, status
):
    # the grader's judge call through the proxy: refused for the agent's words after the judge
    # answered another trial. The agent's 0, with the judge's refusal named. A 403 (a
    # moderation filter) was an unscored infrastructure error, retried (red-team 8, finding 2):
    # the judge answers the harness's plain request, so the grader decides.
    honest, flagged = await _proxy_judged(
        scripted_server,
        make_task,
        tmp_path / "out",
        _flagging_judge_with(status),
        ["42", "42 FLAGGED"],
    )
    assert honest.error is None and honest.score.score == 1.0
    assert flagged.error is not None and flagged.error.kind == ErrorKind.AGENT
    assert flagged.counted_score() == 0.0
    assert f"refused the agent's answer (HTTP {status})" in flagged.error.message


@pytest.mark.sandbox
async def test_a_proxy_judge_that_breaks_after_answering_is_infrastructure_and_stops(
    scripted_server, make_task, tmp_path
):
    # the judge answers the first trial's grader, then refuses every request (403), the
    # harness's plain one too: the judge is broken, not the agent's answer. Infrastructure,
    # and the judge's server is noted as refusing (the job starts no new trial).
    broken = {"on": False}

    def judge(request: dict) -> object:
        if broken["on"]:
            return error(403, "account suspended")
        broken["on"] = True
        return reply("1.0")

    judges: list = []
    honest, second = await _proxy_judged(
        scripted_server, make_task, tmp_path / "out", judge, ["42", "43"], judges=judges
    )
    assert honest.error is None and honest.score.score == 1.0
    assert second.error is not None and second.error.kind == ErrorKind.INFRASTRUCTURE
    assert second.counted_score() is None
    assert "HTTP 403" in second.error.message and "plain request" in second.error.message
    (judge_model,) = judges
    why = provider_stop(judge_model.endpoint)  # what stops the job starting trials
    assert why is not None and "HTTP 403" in why


@pytest.mark.sandbox
async def test_a_proxy_judge_that_never_answered_stops_the_job_not_zero_for_the_agent(
    scripted_server, make_task, tmp_path
):
    # a judge that refuses every request (a wrong model name, a bad setting): the grader
    # crashed on the 400 and each trial was the agent's 0, a whole job scored 0 by the judge's
    # settings. The judge never answered: the job stops with one line.
    with pytest.raises(ModelRequestError) as info:
        await _proxy_judged(
            scripted_server,
            make_task,
            tmp_path / "out",
            lambda req: error(400, "clawrig-judge is not a valid model ID"),
            ["42"],
        )
    assert "answers no plain request either" in str(info.value)
    assert "HTTP 400" in str(info.value)


@pytest.mark.sandbox
@pytest.mark.parametrize("status", [400, 403])
async def test_a_proxy_judge_refusing_the_first_answer_of_the_job_is_the_agents_zero(
    scripted_server, make_task, tmp_path, status
):
    # the job's first judge call carries the agent's flagged answer: with no earlier answer as
    # evidence the refusal stopped the whole job (one agent's words ended everyone's run). The
    # harness asks the judge a plain question of its own: answered, so the refusal was the
    # agent's content, its 0.
    # A 403 was not probed at all: the job stopped, exit 2 (red-team 8, finding 1).
    (flagged,) = await _proxy_judged(
        scripted_server, make_task, tmp_path / "out", _flagging_judge_with(status), ["42 FLAGGED"]
    )
    assert flagged.error is not None and flagged.error.kind == ErrorKind.AGENT
    assert flagged.counted_score() == 0.0
    assert f"refused the agent's answer (HTTP {status})" in flagged.error.message


@pytest.mark.sandbox
async def test_a_proxy_judge_that_hangs_is_infrastructure_not_the_agents_zero(
    scripted_server, make_task, tmp_path
):
    # the judge answers nothing for longer than the grader may run: the grader was killed at
    # its limit ("grader timed out"), the agent's 0. The gateway saw the request silent:
    # the judge's outage, retried.
    (hung,) = await _proxy_judged(
        scripted_server,
        make_task,
        tmp_path / "out",
        lambda req: reply("1.0", delay=30),
        ["42"],
        grader_timeout_s=4,
    )
    assert hung.error is not None and hung.error.kind == ErrorKind.INFRASTRUCTURE
    assert hung.error.retryable and hung.counted_score() is None
    assert "the judge's provider stalled" in hung.error.message


def _first_turn_then(later: Handler, *, stream: bool = False) -> Handler:
    """A provider whose first reply (streamed with ``stream``) runs one command and whose later
    replies are ``later``."""
    seen = []

    def handle(h: BaseHTTPRequestHandler) -> None:
        seen.append(1)
        if len(seen) > 1:
            return later(h)
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "exec", "arguments": '{"command": "echo hi"}'},
                }
            ],
        }
        body = json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        ).encode()
        if stream:
            delta = dict(message, tool_calls=[dict(message["tool_calls"][0], index=0)])
            chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
            chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": "tool_calls"}]
            body = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
        send_body(h, body, "text/event-stream" if stream else "application/json")

    return handle


def _dribble(h: BaseHTTPRequestHandler) -> None:
    """A 200 reply whose JSON body comes one byte every 0.5 s (no read ever waits long)."""
    body = b'{"id": "x", "choices": [' + b" " * 400 + b"]}"
    start_reply(h, len(body))
    for byte in body:
        h.wfile.write(bytes([byte]))
        h.wfile.flush()
        time.sleep(0.5)


def _steady_stream(h: BaseHTTPRequestHandler) -> None:
    """A streamed reply: a token every 0.2 s for a minute (a model writing a long answer)."""
    start_reply(h, None, "text/event-stream")
    for _ in range(300):
        chunk = {
            "id": "x",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": "word "}, "finish_reason": None}],
        }
        h.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        h.wfile.flush()
        time.sleep(0.2)


async def _timed_trial(make_task, out: Path, model: OpenAIChatModel):
    task = make_task(timeout_s=6)
    config = TrialConfig(agent="native", model="scripted/x")
    result, _ = await run_trial(task, config, out, services=TrialServices(model=model))
    return result


def _model_on(url: str, *, stream: bool = False) -> OpenAIChatModel:
    endpoint = ModelEndpoint(name="p/m", provider="p", model_id="m", base_url=url)
    return OpenAIChatModel(endpoint, retry=RetryPolicy(attempts=1), stream=stream, timeout_s=30)


@pytest.mark.sandbox
async def test_a_provider_that_hangs_past_the_agents_time_is_infrastructure(
    scripted_server, make_task, tmp_path
):
    # the second request is never answered within the agent's 6 s: the trial ended as the
    # model's time_limit, scored 0, an outage counted against the model
    # (the provider is down: the harness's own plain request gets no answer either)
    first = reply(tool_calls=[call("exec", {"command": "echo hi"})])
    srv = scripted_server(responder=lambda req: first if len(req["messages"]) == 2 else _HUNG)
    result = await _timed_trial(make_task, tmp_path / "out", srv.chat_model())
    assert result.error is not None and result.error.kind == ErrorKind.INFRASTRUCTURE
    assert result.error.retryable and result.counted_score() is None
    assert "the model's provider stalled" in result.error.message
    assert srv.requests[-1]["messages"] == PROBE  # the probe was asked and went unanswered


_HUNG = reply("late", delay=60)


def _probe_answered_else(other: Callable[[dict], object]) -> Callable[[dict], object]:
    """A responder that answers the harness's probe at once and ``other`` the rest."""
    return lambda req: reply("OK") if req["messages"] == PROBE else other(req)


@pytest.mark.sandbox
async def test_a_slow_request_of_a_provider_that_is_up_is_the_models_time_limit(
    scripted_server, make_task, tmp_path
):
    # the agent's second request takes a minute (a model thinking long on what it was asked,
    # or a request made slow on purpose) while the provider answers the harness's own plain
    # request at once: the provider is up, so the time is the model's: time_limit, counted 0
    first = reply(tool_calls=[call("exec", {"command": "echo hi"})])
    srv = scripted_server(
        responder=_probe_answered_else(lambda req: first if len(req["messages"]) == 2 else _HUNG)
    )
    result = await _timed_trial(make_task, tmp_path / "out", srv.chat_model())
    assert srv.requests[-1]["messages"] == PROBE
    assert result.error is None and result.stop_reason == "time_limit"
    assert result.counted_score() == 0.0


async def test_an_unread_stream_is_no_provider_stall(provider) -> None:
    # a program of the agent's asks the gateway for a long streamed answer and never reads it:
    # the gateway stops pulling chunks when the client's socket is full, which looked like a
    # silent provider (the trial voided as the provider's stall when the agent's time ran out)
    def long_stream(h: BaseHTTPRequestHandler) -> None:
        start_reply(h, None, "text/event-stream")
        chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        chunk["choices"] = [{"index": 0, "delta": {"content": "word " * 40}}]
        line = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        for _ in range(20_000):  # ~5 MB, sent as fast as the gateway takes it
            h.wfile.write(line)
        h.wfile.write(b"data: [DONE]\n\n")

    endpoint = ModelEndpoint(name="p/m", provider="p", model_id="m", base_url=provider(long_stream))
    with Gateway() as gw:
        lease = gw.open_trial(endpoint, trial_id="t")
        host, port = gw.host_url.split("//")[1].split(":")
        body = json.dumps({"model": "m", "stream": True, "messages": []}).encode()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json"
            + f"\r\nauthorization: Bearer {lease.token}\r\ncontent-length: {len(body)}".encode()
            + b"\r\n\r\n"
            + body
        )
        time.sleep(6)  # never read
        silent = lease.watch.silent_s()
        sock.close()
    # the six seconds were spent waiting on the client, not on the provider
    assert silent < 3.0, silent


@pytest.mark.sandbox
async def test_a_provider_that_dribbles_past_the_agents_time_is_infrastructure(
    provider, make_task, tmp_path
):
    # a byte every 0.5 s: no read times out and the request's total deadline (60 s) is past
    # the agent's 6 s, so the trial ended as the model's time_limit (0)
    url = provider(_first_turn_then(_dribble))
    result = await _timed_trial(make_task, tmp_path / "out", _model_on(url))
    assert result.error is not None and result.error.kind == ErrorKind.INFRASTRUCTURE
    assert result.counted_score() is None


@pytest.mark.sandbox
async def test_a_model_streaming_its_reply_until_the_time_limit_is_its_time_limit(
    provider, make_task, tmp_path
):
    # the other way round: tokens keep coming (the model writes a long answer), so the time
    # is the model's, not an outage: time_limit, counted
    url = provider(_first_turn_then(_steady_stream, stream=True))
    result = await _timed_trial(make_task, tmp_path / "out", _model_on(url, stream=True))
    assert result.error is None and result.stop_reason == "time_limit"
    assert result.counted_score() == 0.0


@pytest.mark.sandbox
async def test_the_answer_judge_refusing_the_jobs_first_answer_is_the_agents_zero(
    scripted_server, tmp_path
):
    # the same for the answer judge: its first request of the job carries a flagged answer;
    # the harness's own plain request is answered, so the refusal is the agent's 0 and the job
    # goes on (it stopped, one agent's words ending everyone's run)
    agent = scripted_server(responder=lambda req: reply("42, and FLAGGED words"))
    judge_srv = scripted_server(
        responder=lambda req: (
            error(400, "Invalid prompt: flagged")
            if "FLAGGED" in json.dumps(req["messages"])
            else reply('{"scores": {"match": 1}, "total": 1.0, "notes": "ok"}')
        )
    )
    job = attack_job(tmp_path, tmp_path / "out", parallel=1, grader="judge")
    name = f"scripted/judge-{uuid.uuid4().hex[:8]}"  # a model no earlier test saw answer
    services = TrialServices(model=agent.chat_model(), judge=judge_srv.chat_model(name))
    summary = await run_job(job, [_judged_task(tmp_path, 2)], services)
    (found,) = [json.loads(p.read_text()) for p in (tmp_path / "out").glob("*/*/result.json")]
    assert len(summary["tasks"]) == 1
    assert found["error"]["kind"] == "agent" and found["score"]["score"] == 0.0


@pytest.mark.sandbox
async def test_an_agent_programs_own_slow_request_is_no_provider_stall(
    scripted_server, make_task, tmp_path
):
    # the agent's program asks the model (through the gateway, with the trial's placeholder
    # key) for something slow, in the background, then the agent idles past its time: the
    # program's request was in flight and silent, read as the provider's stall, so the agent
    # could void any trial it was losing (an infrastructure error, retried, never counted)
    script = (
        "import json, os, urllib.request\n"
        "body = {'model': 'x', 'messages': [{'role': 'user', 'content': 'SLOW' + '-SCRIPT'}]}\n"
        "req = urllib.request.Request(os.environ['OPENROUTER_BASE_URL'] + '/chat/completions',"
        " data=json.dumps(body).encode(), headers={'content-type': 'application/json', "
        "'authorization': 'Bearer ' + os.environ['OPENROUTER_API_KEY']})\n"
        "urllib.request.urlopen(req)\n"
    )
    turns = [
        reply(tool_calls=[call("exec", {"command": f"cat > s.py <<'EOF'\n{script}EOF"})]),
        reply(tool_calls=[call("exec", {"command": "(python3 s.py > /dev/null 2>&1 &); sleep 1"})]),
        reply(tool_calls=[call("exec", {"command": "sleep 30"})]),
    ]

    def responder(request: dict) -> object:
        if "SLOW-SCRIPT" in json.dumps(request["messages"]):
            return reply("late", delay=60)
        done = sum(m.get("role") == "assistant" for m in request["messages"])
        return turns[done] if done < len(turns) else reply("done")

    srv = scripted_server(responder=responder)
    task = make_task(timeout_s=6).model_copy(update={"env": ["OPENROUTER_API_KEY"]})
    with Gateway() as gw:
        services = TrialServices(model=srv.chat_model(), gateway=gw)
        config = TrialConfig(agent="native", model="scripted/x")
        result, _ = await run_trial(task, config, tmp_path / "out", services=services)
    assert any("SLOW-SCRIPT" in json.dumps(r) for r in srv.requests)  # the program asked
    assert result.error is None and result.stop_reason == "time_limit"
    assert result.counted_score() == 0.0


_SLOW_JUDGE_GRADER = """
import json, os, subprocess, urllib.request
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    out = subprocess.run(["python3", os.path.join(workspace_path, "solution.py")],
                         capture_output=True, text=True).stdout
    body = {"model": os.environ["JUDGE_MODEL"],
            "messages": [{"role": "user", "content": "Score this output: " + out}]}
    req = urllib.request.Request(
        os.environ["OPENROUTER_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
        headers={"authorization": "Bearer " + os.environ["OPENROUTER_API_KEY"],
                 "content-type": "application/json"})
    reply = json.load(urllib.request.urlopen(req))
    return {"overall_score": float(reply["choices"][0]["message"]["content"])}
"""

_SLOW_JUDGE_SOLUTION = """
import json, os, time, urllib.request
if os.fork():
    os._exit(0)  # the child keeps the grader's stdout open: the grader waits for it
os.setsid()
body = {"model": os.environ["JUDGE_MODEL"], "max_tokens": 32000,
        "messages": [{"role": "user", "content": "LONG-" + "ESSAY please"}]}
req = urllib.request.Request(
    os.environ["OPENROUTER_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
    headers={"authorization": "Bearer " + os.environ["OPENROUTER_API_KEY"],
             "content-type": "application/json"})
try:
    urllib.request.urlopen(req)
except Exception:
    pass
time.sleep(3600)
"""


@pytest.mark.sandbox
@pytest.mark.parametrize("limit", [None, 1])
async def test_an_agent_programs_slow_judge_request_is_no_judge_stall(
    scripted_server, make_task, tmp_path, capfd, limit
):
    # a grader runs the agent's program (with the judge proxy's variables in its environment);
    # the program asks the judge for a long essay, non-streamed, and hangs the grader. The
    # grader's timeout is the agent's 0, but the judge's silent request read as the judge's
    # stall: infrastructure, retried, never counted. The judge answers the harness's probe
    # at once: it is up, so the outcome stands. With max_concurrency 1 (limit) the program's
    # request held the judge's only place, so the probe (which keeps the limit) waited for it
    # in vain and the trial was voided as the judge's stall again (red team): the grading is
    # over, so the lease's requests in flight are cut and the probe takes their place.
    def judge(req: dict) -> object:
        if "LONG-ESSAY" in json.dumps(req["messages"]):
            return reply("x" * 2000, delay=40)
        return reply("1.0")

    judge_srv = scripted_server(responder=judge)
    cmd = f"cat > solution.py <<'EOF'\n{_SLOW_JUDGE_SOLUTION}EOF"
    agent = scripted_server([reply(tool_calls=[call("exec", {"command": cmd})]), reply("done")])
    task = make_task(_SLOW_JUDGE_GRADER, grader_timeout_s=5)
    name = f"scripted/judge-{uuid.uuid4().hex[:8]}"
    with Gateway(retry=RetryPolicy(attempts=2, initial_s=0.01, max_s=0.01)) as gw:
        services = TrialServices(
            model=agent.chat_model(),
            judge=judge_srv.chat_model(name, max_concurrency=limit),
            gateway=gw,
        )
        result, _ = await run_trial(
            task, TrialConfig(agent="native", model="scripted/x"), tmp_path / "out",
            services=services,
        )  # fmt: skip
    assert any("LONG-ESSAY" in json.dumps(r["messages"]) for r in judge_srv.requests)
    assert judge_srv.requests[-1]["messages"] == PROBE
    assert result.error is not None and result.error.kind == ErrorKind.AGENT, result.error
    assert result.counted_score() == 0.0
    assert "Traceback" not in capfd.readouterr().err  # the cut request: no server error


@pytest.mark.sandbox
async def test_a_time_limit_too_short_for_any_reply_is_the_agents_not_a_stall(attack, make_task):
    """helper-173: a task of ``timeout_seconds: 1.0e-6`` made every honest trial "the model's
    provider stalled" (an infrastructure error, unscored and retried: the stall threshold was
    half the limit, and its probe got no time to answer). A silence under ``STALL_MIN_S`` is
    no stall: the agent's time ran out, scored as it stands."""
    from clawrig.llm.stalls import STALL_MIN_S, stall_limit_s

    assert stall_limit_s(1e-6) == STALL_MIN_S == 1.0 and stall_limit_s(8) == 4.0
    result, _ = await attack(make_task(timeout_s=1e-6), "echo hi")
    assert result.error is None, result.error
    assert result.stop_reason == "time_limit" and result.score is not None
