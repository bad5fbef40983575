"""What a job does when its model's server fails (README "Exit codes", docs/outputs.md): a
later trial's refused request ends that trial only (the job goes on and writes its summary)
when the server answers the harness's plain request, and stops the job starting trials when
it refuses that too; a server that cannot be reached stops the job (one line naming the model
and its base URL) instead of running every trial into it; the trials not run stay
resumable."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clawrig.llm.client import PROBE
from clawrig.runner.batch import run_job
from clawrig.runner.job import Job
from clawrig.runner.trial import TrialServices
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_tasks
from clawrig.testing.scripted_server import ScriptedServer, error, reply, usage

pytestmark = pytest.mark.sandbox

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))


def _task_number(request: dict) -> int:
    """The task a request is of; 0 for the harness's plain request (PROBE)."""
    first = request["messages"][0]["content"]
    text = first if isinstance(first, str) else json.dumps(first)
    found = re.search(r"TASKNUM=(\d+)", text)
    return int(found.group(1)) if found else 0


def _probes(srv: ScriptedServer) -> int:
    return sum(q["messages"] == PROBE for q in srv.requests)


def _trials(out: Path) -> list[Path]:
    return sorted(
        p.parent for p in out.glob("*/*/result.json") if not p.parent.name.startswith(".")
    )


def _stopped_job(
    bench: Path, srv: ScriptedServer, tmp_path: Path
) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """``clawrig run`` of ``bench``'s tasks at ``-p 1`` against ``srv``, which stops the job
    (exit 1, one line, no traceback): the run, its summary and its job folder."""
    out = tmp_path / "out"
    r = _clawrig(
        "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1", "-o", str(out), srv=srv
    )
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    return r, json.loads((out / "summary_scripted_test.json").read_text()), out


def _one_trial_refused(
    bench: Path, srv: ScriptedServer, tmp_path: Path, task: str
) -> tuple[list[str], subprocess.CompletedProcess, dict, dict[str, dict], dict]:
    """``clawrig run`` of ``bench``'s tasks at ``-p 1`` against ``srv``, which refuses the
    requests of ``task`` (its name after ``_task_``), that trial alone ending (exit 1, no
    traceback, not scored, an infrastructure error not retried): the run's arguments, the
    run, its summary, the summary's rows by task name and the refused task's error."""
    out = tmp_path / "out"
    args = ["run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1", "-o", str(out)]
    r = _clawrig(*args, srv=srv)
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])  # one trial errored
    assert "Traceback" not in r.stderr
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    rows = {row["task_id"].split("_task_")[1]: row for row in summary["tasks"]}
    err = rows[task]["error"]
    assert rows[task]["score"] is None  # not scored
    assert err["kind"] == "infrastructure" and not err["retryable"]
    return args, r, summary, rows, err


def _clawrig(*args: str, srv: ScriptedServer) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["SCRIPTED_BASE_URL"] = srv.base_url
    return subprocess.run([CLAWRIG, *args], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    "refusal",
    [
        error(500, "upstream broke", should_retry=False),  # a 5xx the server says not to retry
        error(400, "prompt too long"),  # this task's first request, others' passed
    ],
    ids=["500-no-retry", "400"],
)
def test_a_later_trials_refused_request_ends_that_trial_and_the_job_goes_on(
    refusal, mini_bench, scripted_server, even_responder, tmp_path
):
    bench = mini_bench(3)
    refuse = {"on": True}

    def responder(request: dict):
        if request["messages"] == PROBE:  # the server answers plain requests
            return reply("OK")
        if _task_number(request) == 2 and refuse["on"]:
            return refusal
        return even_responder(request)

    srv = scripted_server(responder=responder)
    args, _, summary, rows, err = _one_trial_refused(bench, srv, tmp_path, "2_echo")
    out = tmp_path / "out"
    # tasks 1 and 3 ran and were graded (odd: the file written, content wrong: 0.25)
    assert rows["1_echo"]["score"] == 0.25 and rows["3_echo"]["score"] == 0.25
    assert f"HTTP {refusal.error}" in err["message"] and refusal.error_message in err["message"]
    assert summary["error_count"] == 1 and summary["evaluated_count"] == 2
    # the refused request was not retried: task 2 sent exactly one request, and the harness
    # asked its plain request once (answered: the job went on)
    assert sum(_task_number(q) == 2 for q in srv.requests) == 1
    assert _probes(srv) == 1 and summary["provider_stopped"] is None
    assert (out / "progress_scripted_test.json").exists()  # unfinished: resumable
    if refusal.error != 500:
        return
    # --resume runs the errored trial again (its first attempt set aside in _retried/)
    refuse["on"] = False
    r = _clawrig(*args, "--resume", srv=srv)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    summary = json.loads((out / "summary_scripted_test.json").read_text())
    assert [row["score"] for row in summary["tasks"]] == [0.25, 1.0, 0.25]
    assert len(list((out / "_retried").iterdir())) == 1


TOO_LONG = "This model's maximum context length is 8192 tokens; the messages hold 9001."


def test_the_jobs_first_request_refused_for_its_content_ends_that_trial_only(
    mini_bench, scripted_server, even_responder, tmp_path
):
    # helper-148: a context-length 400 on the job's very first request stopped the whole job
    # as a settings error (exit 2), though nothing was wrong with the settings. The server
    # answers the same request with a plain conversation (its tools kept): task 1 alone is an
    # unscored infrastructure error, the job goes on
    bench = mini_bench(3)

    def responder(request: dict):
        if request["messages"] == PROBE:  # what it cost is the trial's (helper-149)
            return reply("OK", usage=usage(1000, 10, cost=0.01))
        if _task_number(request) == 1:
            return error(400, TOO_LONG)
        return even_responder(request)

    srv = scripted_server(responder=responder)
    _, r, summary, rows, err = _one_trial_refused(bench, srv, tmp_path, "1_echo")
    assert rows["2_echo"]["score"] == 1.0 and rows["3_echo"]["score"] == 0.25
    assert "HTTP 400" in err["message"] and TOO_LONG in err["message"]
    assert err["message"].endswith("this trial ends, not scored)")
    assert "1 trial(s) ended with an error (not scored; --resume runs them again):" in r.stdout
    assert summary["provider_stopped"] is None
    # the first request was the job's first (nothing answered before it), the probe came next
    # and asked it again with a plain conversation: the same tools, not streamed
    first, probe = srv.requests[0], srv.requests[1]
    assert _task_number(first) == 1 and probe["messages"] == PROBE
    assert probe["tools"] == first["tools"] and len(first["tools"]) == 17
    assert not probe.get("stream") and _probes(srv) == 1
    # the probe's usage is the refused trial's (its only answered request), and the job's
    costs = {
        p.parent.parent.name.split("_task_")[1]: json.loads(p.read_text())["usage"]
        for p in (tmp_path / "out").glob("*/*/result.json")
    }
    assert costs["1_echo"]["cost_usd"] == 0.01 and costs["1_echo"]["input_tokens"] == 1000
    assert costs["1_echo"]["request_count"] == 1
    total = summary["usage"]["cost_usd"]
    assert total == round(sum(u["cost_usd"] for u in costs.values()), 6) and total > 0.01


def test_the_jobs_first_request_refused_for_its_settings_stops_the_job(
    mini_bench, scripted_server, tmp_path
):
    # a server that refuses what the job's requests carry (here: tools) refuses the probe too,
    # which keeps them: the settings, the job stops with one line (exit 2), nothing run. A
    # plain probe without the tools would have been answered and every trial refused in turn
    bench = mini_bench(3)

    def responder(request: dict):
        if request.get("tools"):
            return error(400, "this model does not support tools")
        return reply("OK")

    srv = scripted_server(responder=responder)
    out = tmp_path / "out"
    r = _clawrig(
        "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1", "-o", str(out), srv=srv
    )
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert "does not support tools" in r.stderr and "Traceback" not in r.stderr
    # the probe's own refusal is named (helper-150: its status and message were dropped)
    assert "(and with a plain conversation, its tools and settings kept: " in r.stderr
    assert r.stderr.count("does not support tools") == 2 and ": the settings)" in r.stderr
    assert len(srv.requests) == 2 and _probes(srv) == 1  # the first request, the probe
    assert [p.name for p in out.iterdir() if p.is_dir()] == []
    assert (out / "progress_scripted_test.json").exists()  # --resume starts it again


def test_a_model_refusing_every_first_request_stops_the_job_after_three_trials(
    mini_bench, scripted_server, tmp_path
):
    # helper-150: it answers a plain conversation but refuses every trial's first request (a
    # context too small for any task with its tools): each trial ended unscored, one by one,
    # and the job never stopped. The probe is not the model answering: after three such trials
    # the job starts no new one
    bench = mini_bench(5)

    def responder(request: dict):
        return reply("OK") if request["messages"] == PROBE else error(400, TOO_LONG)

    srv = scripted_server(responder=responder)
    r, summary, out = _stopped_job(bench, srv, tmp_path)
    assert [row["score"] for row in summary["tasks"]] == [None] * 3 and summary["not_run"] == 2
    # each the provider's refusal, said as such (helper-154: provider_error with no detail)
    for row in summary["tasks"]:
        assert (row["stop_reason"], row["stop_detail"]) == (
            "provider_error",
            f"HTTP 400: {TOO_LONG}",
        )
    stopped = summary["provider_stopped"]
    assert stopped.startswith("the model's server refuses its requests: the first request of 3 ")
    assert f"(HTTP 400: {TOO_LONG}) and not one answered" in stopped
    # helper-149: it named the refusal twice more (the model, its URL) and told to check the
    # key and base URL, which work: what to do is a model with a larger context
    assert "a model of a larger context, as a new job (another -o)" in stopped
    assert "check -m" not in stopped and "above" not in stopped  # (it is in the JSON too)
    assert stopped.count(TOO_LONG) == 1 and "scripted/test" not in stopped
    # the same model refuses them on --resume too: the console does not say it continues
    # (helper-151)
    assert "2 trial(s) not run and 3 errored" in r.stdout and "--resume continues" not in r.stdout
    # nor that it runs the errored trials again (helper-153)
    assert "3 trial(s) ended with an error (not scored):" in r.stdout
    assert "--resume runs them again" not in r.stdout
    probes = [q for q in srv.requests if q["messages"] == PROBE]
    assert len(probes) == 3 and all(len(q["tools"]) == 17 for q in probes)
    assert len(srv.requests) == 6


def test_resume_runs_the_trials_never_tried_before_the_errored_ones(
    mini_bench, scripted_server, even_responder, tmp_path
):
    """helper-155's note: --resume ran the errored trials first, in task order; after a stop
    for prompts the model's context takes none of (the first three tasks'), the same three
    met it first again and stopped the job again, the other tasks never tried. Now those
    never tried go first, over every --resume (helper-160: a second one took the trials the
    first had set aside for never tried, and two groups of three took turns): here the
    first run stops on tasks 1-3, the first --resume on 4-6, and the second runs task 7,
    which fits, first."""
    bench = mini_bench(7)

    def responder(request: dict):
        if request["messages"] == PROBE or _task_number(request) == 7:
            return even_responder(request)
        return error(400, TOO_LONG)

    srv = scripted_server(responder=responder)
    _, summary, out = _stopped_job(bench, srv, tmp_path)
    assert summary["not_run"] == 4 and summary["provider_stopped"]
    firsts: list[list[int]] = []
    for _ in range(2):
        asked = len(srv.requests)
        r = _clawrig(
            "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1", "-o", str(out),
            "--resume", srv=srv,
        )  # fmt: skip
        assert "Traceback" not in r.stderr, r.stderr[-2000:]
        order = [_task_number(q) for q in srv.requests[asked:] if q["messages"] != PROBE]
        firsts.append([k for i, k in enumerate(order) if k not in order[:i]])
    assert firsts[0] == [4, 5, 6]  # the tasks never tried, first: refused, the job stops
    assert firsts[1][0] == 7, firsts  # the one never tried, before the six tried twice
    resumed = json.loads((out / "summary_scripted_test.json").read_text())
    scores = {
        row["task_id"].split("_task_")[1].split("_")[0]: row["score"] for row in resumed["tasks"]
    }
    assert scores["7"] is not None, scores  # graded
    # the six refused again, each its trial only now that the model has answered another
    assert [scores[k] for k in "123456"] == [None] * 6 and not resumed["provider_stopped"]


def test_a_probe_meeting_an_outage_is_an_infrastructure_error(
    mini_bench, scripted_server, tmp_path
):
    # helper-150: a probe answered 500 (retried) crashed the trial with "RuntimeError: Cannot
    # change state of finished Timeout" (the agent's finished deadline moved by the retry's
    # wait): now the provider's outage, named
    bench = mini_bench(1)

    def responder(request: dict):
        return error(500, "probe boom") if request["messages"] == PROBE else error(400, TOO_LONG)

    srv = scripted_server(responder=responder)
    out = tmp_path / "out"
    r = _clawrig("run", str(bench / "tasks"), "-m", "scripted/test", "-o", str(out),
                 "--max-attempts", "1", srv=srv)  # fmt: skip
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    (row,) = json.loads((out / "summary_scripted_test.json").read_text())["tasks"]
    err = row["error"]
    assert err["kind"] == "infrastructure" and "probe boom" in err["message"], err
    # the refusal it was to judge is kept in view (helper-152: it was gone)
    assert err["message"].startswith("scripted/test: HTTP 400 from ") and TOO_LONG in err["message"]
    assert "(and the plain request that judges it failed: " in err["message"]
    assert "RuntimeError" not in err["message"] and "Traceback" not in r.stderr
    assert _probes(srv) == 2  # the probe's two attempts


async def test_the_probe_sends_the_refused_requests_token_limit_not_the_endpoints_too(
    scripted_server,
):
    # helper-150: with an endpoint max_tokens (a providers file), the probe of OpenClaw's
    # request (max_completion_tokens) carried both fields, which OpenAI refuses: the job
    # stopped as "the settings". The gateway sent the request upstream without the endpoint's
    from clawrig.runner.trial import _answers_probe

    srv = scripted_server(responder=lambda request: reply("OK"))
    endpoint = srv.endpoint("scripted/test").model_copy(update={"max_tokens": 4096})
    tools = [{"type": "function", "function": {"name": "exec", "parameters": {}}}]
    like = {"model": "x", "messages": [{"role": "user", "content": "a long task"}]}
    like |= {"tools": tools, "stream": True, "max_completion_tokens": 300, "temperature": 0.5}
    like["stream_options"] = {"include_obfuscation": False}
    assert await _answers_probe("refused", endpoint, like=like)
    (probe,) = srv.requests
    assert probe["messages"] == PROBE and probe["tools"] == tools
    assert probe["max_completion_tokens"] == 300 and "max_tokens" not in probe
    assert probe["temperature"] == 0.5
    # streamed as the refused request went upstream (helper-150: a server refusing
    # stream_options answered the probe without them, so the settings passed for working)
    assert probe["stream"] is True
    assert probe["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    # a request without a token limit of its own: the plain probe's 8 (its reply stays short)
    assert await _answers_probe("refused", endpoint, like={"messages": [], "tools": tools})
    assert srv.requests[-1]["max_tokens"] == 8 and "max_completion_tokens" not in srv.requests[-1]


def test_a_server_refusing_even_the_plain_request_mid_job_starts_no_other_trial(
    mini_bench, scripted_server, even_responder, tmp_path
):
    # a new-user review's finding: after a later trial's first request was refused (400),
    # the harness never sent its plain request, and every later trial started and was
    # refused in turn (provider_stopped null), though the README says none starts
    bench = mini_bench(4)

    def responder(request: dict):
        if _task_number(request) == 1:
            return even_responder(request)
        return error(400, "no longer served")  # everything else, the plain request too

    srv = scripted_server(responder=responder)
    r, summary, out = _stopped_job(bench, srv, tmp_path)
    assert _probes(srv) == 1  # asked after task 2's refusal, refused too
    why = summary["provider_stopped"]
    assert "refuses its requests" in why and "plain request is refused too" in why, why
    assert "HTTP 400" in why and srv.base_url in why
    assert "stopped: the model's server refuses its requests" in r.stdout
    rows = summary["tasks"]
    assert [row["score"] for row in rows] == [0.25, None]  # tasks 3 and 4 not started
    assert rows[1]["error"]["kind"] == "infrastructure" and not rows[1]["error"]["retryable"]
    assert summary["not_run"] == 2
    assert sorted({_task_number(q) for q in srv.requests}) == [0, 1, 2]
    assert (out / "progress_scripted_test.json").exists()  # --resume continues


def test_a_key_refused_mid_job_ends_that_trial_and_starts_no_other(
    mini_bench, scripted_server, even_responder, tmp_path
):
    # the key stops working after the first trial (revoked, credit gone): every later request
    # would be refused too, so the job starts no new trial, writes its summary and says why
    bench = mini_bench(3)

    def responder(request: dict):
        if _task_number(request) == 2:
            return error(401, "key revoked")
        return even_responder(request)

    srv = scripted_server(responder=responder)
    r, summary, out = _stopped_job(bench, srv, tmp_path)
    why = summary["provider_stopped"]
    assert "refuses its requests" in why and "HTTP 401" in why and srv.base_url in why
    assert "stopped: the model's server refuses its requests" in r.stdout
    rows = summary["tasks"]
    assert [row["score"] for row in rows] == [0.25, None]  # task 3 not started
    assert rows[1]["error"]["kind"] == "infrastructure" and not rows[1]["error"]["retryable"]
    assert summary["not_run"] == 1
    # what --resume runs again: task 3, and task 2 (errored); it said "1 trial(s) not run"
    assert "1 trial(s) not run and 1 errored (--resume continues once it answers)" in r.stdout
    assert not any(_task_number(q) == 3 for q in srv.requests)
    assert (out / "progress_scripted_test.json").exists()  # --resume continues


def _stopped_server() -> ScriptedServer:
    """A server started and stopped: its port refuses connections."""
    srv = ScriptedServer().start()
    srv.stop()
    return srv


def test_a_model_server_that_cannot_be_reached_stops_the_job_at_its_first_trial(
    mini_bench, tmp_path
):
    bench = mini_bench(3)
    dead = _stopped_server()
    out = tmp_path / "out"
    config = JobConfig(
        suite_path=bench / "tasks",
        output=out,
        trial=TrialConfig(agent="native", model="scripted/test"),
    )
    # through the job's gateway (as `clawrig run`); no preflight (its probe of a loopback
    # server would say the same before any sandbox: this is the server dying after it). The
    # model as `-m scripted/test` with SCRIPTED_BASE_URL resolves it
    from clawrig.llm.client import OpenAIChatModel
    from clawrig.llm.providers import load_settings, resolve_model

    settings = load_settings(environ={"SCRIPTED_BASE_URL": dead.base_url})
    model = OpenAIChatModel(resolve_model("scripted/test", settings))
    job = Job(config, services=TrialServices(model=model), checks=[])
    summary = job.run()
    why = summary["provider_stopped"]
    assert why is not None and "scripted/test" in why and dead.base_url in why
    assert "ConnectError" in why
    # the variable to check is named (new-user review: it said "_BASE_URL")
    assert why.endswith("(check -m, its key and SCRIPTED_BASE_URL)"), why
    # it says it could not connect, not the status of the gateway's own 502 (no server sent one)
    assert f"scripted/test: could not connect to scripted ({dead.base_url})" in why
    # one trial ran into it (an infrastructure error, not retried: the job stopped), the
    # two others were not started and stay for --resume
    (only,) = _trials(out)
    result = json.loads((only / "result.json").read_text())
    assert result["error"]["kind"] == "infrastructure" and result["attempts"] == 1
    message = result["error"]["message"]
    assert message.startswith(f"scripted/test: could not connect to scripted ({dead.base_url})")
    assert "HTTP 502" not in message and "ConnectError" in message
    assert summary["not_run"] == 2 and len(summary["tasks"]) == 1
    assert (out / "progress_scripted_test.json").exists()


async def test_a_model_server_that_goes_away_mid_job_trips_the_breaker(
    mini_bench, scripted_server, even_responder, tmp_path
):
    from clawrig.llm.client import OUTAGE_REQUESTS

    bench = mini_bench(4)
    srv = scripted_server(responder=even_responder)
    out = tmp_path / "out"

    async def stop_after_first_trial() -> None:
        # on the job's own event loop, as soon as the first trial's folder is whole (a
        # thread polling for it, starved of the interpreter by the busy loop, let the second
        # trial finish first under CI's load: CI165)
        deadline = time.monotonic() + 300
        while not _trials(out) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        srv.stop()

    watcher = asyncio.ensure_future(stop_after_first_trial())
    job = JobConfig(
        suite_path=bench,
        output=out,
        max_attempts=5,
        trial=TrialConfig(agent="native", model="scripted/test"),
    )
    summary = await run_job(job, load_tasks(bench / "tasks"), TrialServices(model=srv.chat_model()))
    await watcher
    why = summary["provider_stopped"]
    assert why is not None and srv.base_url in why and f"{OUTAGE_REQUESTS} requests in a row" in why
    rows = summary["tasks"]
    # trial 1 was graded; trial 2 tried OUTAGE_REQUESTS times (of its 5) and stopped the job
    assert [row["score"] for row in rows] == [0.25, None]
    assert rows[1]["attempts"] == OUTAGE_REQUESTS and rows[1]["error"]["kind"] == "infrastructure"
    assert summary["not_run"] == 2


def test_a_key_refused_at_the_first_request_stops_the_job_and_leaves_no_trial_folder(
    mini_bench, scripted_server, tmp_path
):
    # a new user's finding: the first trial's folder went, its task's (empty) folder stayed
    bench = mini_bench(2)
    srv = scripted_server(responder=lambda request: error(401, "invalid api key"))
    out = tmp_path / "out"
    r = _clawrig(
        "run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1", "-o", str(out), srv=srv
    )
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert "HTTP 401" in r.stderr and "Traceback" not in r.stderr
    assert [p.name for p in out.iterdir() if p.is_dir()] == []
    assert (out / "progress_scripted_test.json").exists()  # --resume starts it again


def test_a_trial_refused_after_answers_keeps_its_turns_though_not_scored(
    mini_bench, scripted_server, even_responder, tmp_path
):
    # helper-149: a trial ended unscored by a refusal after its model had answered showed
    # turns 0 and tool_calls 0. Task 2's model answers once (a tool call), then the server
    # refuses everything, the harness's plain request too: unscored, one turn, one tool call
    bench = mini_bench(2)

    def responder(request: dict):
        if _task_number(request) == 1:
            return even_responder(request)
        if request["messages"] != PROBE and len(request["messages"]) <= 2:
            return reply(tool_calls=[{"name": "exec", "arguments": {"command": "true"}}])
        return error(400, "no longer served")

    srv = scripted_server(responder=responder)
    r, summary, out = _stopped_job(bench, srv, tmp_path)
    row = summary["tasks"][1]
    assert row["score"] is None and row["error"]["kind"] == "infrastructure"
    # the job's stop line names the refusal once, without the trial's role prefix, and not
    # "check -m, its key and ..." (the model had answered: those work; helper-151)
    stopped = summary["provider_stopped"]
    assert "the model: " not in stopped and "check -m" not in stopped
    assert stopped.endswith("(it had answered this job's requests: its message says why)")
    assert "--resume continues once it answers" in r.stdout
    (result,) = [json.loads(p.read_text()) for p in out.glob("*task_2*/*/result.json")]
    assert (result["turns"], result["tool_calls"]) == (1, 1)
    assert result["usage"]["request_count"] == 1


def test_a_probe_failed_by_the_server_is_not_called_the_settings(
    mini_bench, scripted_server, tmp_path
):
    # helper-150: the job's first request refused (400) and the harness's probe failed with a
    # 5xx the server says not to retry: the job stopped calling it "the settings"
    bench = mini_bench(2)

    def responder(request: dict):
        if request["messages"] == PROBE:
            return error(500, "probe broke", should_retry=False)
        return error(400, TOO_LONG)

    srv = scripted_server(responder=responder)
    r = _clawrig("run", str(bench / "tasks"), "-m", "scripted/test", "-p", "1",
                 "-o", str(tmp_path / "out"), srv=srv)  # fmt: skip
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    assert "probe broke" in r.stderr and ": the server fails it)" in r.stderr
    assert "the settings)" not in r.stderr and "Traceback" not in r.stderr


async def test_a_probe_reply_past_a_mebibyte_is_not_read(scripted_server):
    # helper-150: a server ignoring the probe's token limit could send a reply of any size
    # (the trial's own cap, 64 MiB): a probe reads at most PROBE_REPLY_BYTES
    from clawrig.errors import ProviderError
    from clawrig.llm.client import PROBE_REPLY_BYTES
    from clawrig.runner.trial import _answers_probe

    srv = scripted_server(responder=lambda request: reply("x" * (PROBE_REPLY_BYTES + 1000)))
    with pytest.raises(ProviderError, match="over the cap of 1 MiB"):
        await _answers_probe("refused", srv.endpoint("scripted/test"), like={"messages": []})
    assert _probes(srv) == 2  # its two attempts
    # keeping the refused request's own token limit, its reply has that request's cap: a
    # (streamed, reasoning) answer within the limit may pass 1 MiB (helper-152)
    like = {"messages": [], "max_completion_tokens": 8192}
    assert await _answers_probe("refused", srv.endpoint("scripted/test"), like=like)


@pytest.mark.parametrize(
    "event", [b"{not json", b"[1, 2]", b'{"id": "x", "choices": null}'], ids=str
)
async def test_a_malformed_streamed_probe_reply_is_an_outage(event):
    # helper-152: a streamed probe reply that was no JSON, no object, or had no list of
    # choices escaped as JSONDecodeError, AttributeError or TypeError (a harness bug to read).
    # Now a reply of the wrong shape, retried once as a plain one is, then an outage
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from clawrig.errors import ProviderError
    from clawrig.llm.providers import ModelEndpoint
    from clawrig.runner.trial import _answers_probe

    asked: list[dict] = []

    class Stream(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            asked.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"data: " + event + b"\n\ndata: [DONE]\n\n")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Stream)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    endpoint = ModelEndpoint(
        name="raw/m", provider="raw", model_id="m",
        base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1",
    )  # fmt: skip
    like = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    try:
        with pytest.raises(ProviderError) as failed:
            await _answers_probe("refused", endpoint, like=like)
    finally:
        httpd.shutdown()
        httpd.server_close()
    said = str(failed.value)
    assert "after 2 attempts: a streamed reply of the wrong shape: " in said, said
    # the refusal it was to judge stays in view (helper-154: after a refusal mid-trial only the
    # probe's failure was said, as if the agent's own request had timed out)
    assert said.startswith("refused (and the plain request that judges it failed: "), said
    for raw in ("JSONDecodeError", "AttributeError", "TypeError"):
        assert raw not in said
    assert len(asked) == 2 and all(q["messages"] == PROBE and q["stream"] for q in asked)
