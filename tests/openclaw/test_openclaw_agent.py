"""The real OpenClaw 2026.3.24 in a real bwrap sandbox, driven by the scripted model server
through the model gateway: the demo task to its expected reward, the same script through the
native agent, usage, the key never inside, max turns, and replay without any model server.

Needs the OpenClaw install in the cache (skipped with the reason otherwise: `make openclaw`).
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from oc_helpers import (
    CHAIN,
    FAST_RETRY,
    FINAL_000015,
    REAL_KEY,
    SCRIPT_000015_CALLS,
    demo_task,
    key_search_argv,
    requires_openclaw,
    script_000015,
    upstream,
)

from clawrig.agents.base import AgentContext
from clawrig.agents.openclaw import RAW_TRANSCRIPT_FILE, OpenClawAgent, find_openclaw
from clawrig.agents.preamble import first_user_message
from clawrig.errors import ProviderError
from clawrig.llm.client import PROBE, OpenAIChatModel, ProviderRetriesExhausted
from clawrig.llm.gateway import (
    RECORD_FILE,
    Gateway,
    ResponseCache,
    placeholder_endpoint,
    read_records,
    use_gateway,
)
from clawrig.runner.trial import TrialServices, run_trial
from clawrig.spec.job import TrialConfig
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.spec.trial import StopReason, TrialResult
from clawrig.testing.paths import SHARED
from clawrig.testing.scripted_server import ScriptedServer, call, error, reply
from clawrig.transcript import openclaw_entries_from_jsonl, read_openclaw_jsonl

pytestmark = [pytest.mark.sandbox, requires_openclaw]

REFERENCE = SHARED / "reference" / "openclaw-2026.3.24"
DOC = Path(__file__).resolve().parents[2] / "docs" / "openclaw-vs-native.md"
BOOTSTRAP_FILES = {
    "AGENTS.md",
    "BOOTSTRAP.md",
    "HEARTBEAT.md",
    "IDENTITY.md",
    "SOUL.md",
    "TOOLS.md",
    "USER.md",
}


async def run_demo(agent: str, srv, out: Path, gateway=None, **cfg):
    task = demo_task("000015")
    # without a server (replay) the model is a placeholder that is never called
    endpoint = upstream(srv) if srv is not None else placeholder_endpoint("scripted/scripted")
    model = OpenAIChatModel(endpoint)
    config = TrialConfig(model="scripted/scripted", agent=agent, **cfg)
    with use_gateway(gateway):
        return await run_trial(task, config, out, services=TrialServices(model=model))


def tool_calls(tr: Transcript) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for m in tr.steps for c in m.tool_calls]


def end_state(folder: Path) -> dict[str, bytes]:
    root = folder / "end_state"
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@dataclass(frozen=True)
class Solved:
    """One OpenClaw trial of demo 000015 on its golden script (``srv``: the scripted server it
    ran on, stopped, its ``requests`` and ``headers`` kept; ``job``: the trial's job folder)."""

    srv: ScriptedServer
    result: TrialResult
    folder: Path
    job: Path


@pytest.fixture(scope="module")
def solved_000015(tmp_path_factory: pytest.TempPathFactory) -> Solved:
    """OpenClaw solves demo 000015 on its golden script through a fresh gateway: run once (a
    real OpenClaw trial is the costly part of these tests) and read by the three tests about
    that run: what it sent, scored and wrote; that the native agent agrees with it; that it
    replays without a model server. Read it, do not change it."""
    job = tmp_path_factory.mktemp("openclaw-000015") / "job"
    srv = ScriptedServer(script_000015()).start()
    gw = Gateway(retry=FAST_RETRY).start()
    try:
        result, folder = asyncio.run(run_demo("openclaw", srv, job, gw))
    finally:
        gw.stop()
        srv.stop()  # no model server from here on (the replay test counts on it)
    return Solved(srv=srv, result=result, folder=folder, job=job)


async def test_openclaw_solves_the_demo_task_through_the_gateway(solved_000015: Solved):
    srv, result, folder = solved_000015.srv, solved_000015.result, solved_000015.folder
    assert result.error is None, (folder / "agent.log").read_text()
    # the same grader as for every agent, on OpenClaw's end state and transcript
    assert result.score.score == 1.0
    assert result.score.subscores == {
        "file_has_heading": 1.0,
        "endpoints_match": 1.0,
        "valid_shortest": 1.0,
        "graph_intact": 1.0,
        "overall_score": 1.0,
    }
    assert result.stop_reason == StopReason.FINAL_ANSWER
    assert (result.turns, result.tool_calls) == (5, 4)
    # the result names what ran the agent: the installed OpenClaw's package and its node
    inst = find_openclaw()
    assert inst is not None
    package = json.loads((inst.root / "node_modules/openclaw/package.json").read_text())
    node = subprocess.run([str(inst.node), "--version"], capture_output=True, text=True)
    assert result.versions["openclaw"] == package["version"]
    assert "v" + result.versions["node"] == node.stdout.strip()
    # what OpenClaw sent: 5 streamed requests with usage asked, its 17 tools in the reference
    # order, its own system prompt, then the preamble + prompt as the user message
    assert len(srv.requests) == 5
    first = srv.requests[0]
    schema = REFERENCE / "tool_schema.json"
    reference = [t["function"]["name"] for t in json.loads(schema.read_text())]
    assert [t["function"]["name"] for t in first["tools"]] == reference
    assert first["messages"][0]["role"] == "system"
    system = first["messages"][0]["content"]
    assert system.startswith("You are a personal assistant running inside OpenClaw.")
    user = first["messages"][1]["content"]
    text = user if isinstance(user, str) else "".join(p["text"] for p in user)
    task = demo_task("000015")
    assert text == first_user_message(task.prompt, task.timeout_seconds)
    assert [(r["stream"], r["stream_options"]) for r in srv.requests] == [
        (True, {"include_usage": True})
    ] * 5
    assert all(r["model"] == "scripted" for r in srv.requests)
    assert [h["authorization"] for h in srv.headers] == [f"Bearer {REAL_KEY}"] * 5
    # usage from the gateway = what the scripted server served: 5 x (10 prompt + 5 completion)
    u = result.usage
    assert (u.request_count, u.input_tokens, u.output_tokens) == (5, 50, 25)
    records = read_records(folder / RECORD_FILE)
    assert [r["status"] for r in records] == [200] * 5
    assert sum(r["usage"]["total_tokens"] for r in records) == result.usage.total_tokens == 75
    assert records[0]["request"]["messages"] == first["messages"]
    # OpenClaw's own transcript, read by the same reader the graders' transcripts go through
    raw = (folder / RAW_TRANSCRIPT_FILE).read_text()
    entries = openclaw_entries_from_jsonl(raw)
    head = {k: entries[0][k] for k in ("type", "version", "id", "cwd")}
    assert head == {"type": "session", "version": 3, "id": "chat", "cwd": "/tmp_workspace"}
    tr = read_openclaw_jsonl(raw)
    assert tool_calls(tr) == [(n, a) for n, a in SCRIPT_000015_CALLS]
    assert tr.final_text() == FINAL_000015
    assert tr.provider == "custom-127-0-0-1-18199" and tr.model == "scripted"
    assert read_openclaw_jsonl(folder / "chat.jsonl").final_text() == FINAL_000015
    assert end_state(folder)["results/results.md"] == f"# shortest\n{CHAIN}\n".encode()


async def test_native_and_openclaw_agree_on_the_same_script(
    solved_000015: Solved, scripted_server, tmp_path
):
    oc_res, oc_dir = solved_000015.result, solved_000015.folder
    na_res, na_dir = await run_demo("native", scripted_server(script_000015()), tmp_path / "na")
    # same tool calls, same end state of the task's files, same score
    oc_tr = read_openclaw_jsonl(oc_dir / RAW_TRANSCRIPT_FILE)
    na_tr = read_openclaw_jsonl(na_dir / "chat.jsonl")
    assert tool_calls(oc_tr) == tool_calls(na_tr) == [(n, a) for n, a in SCRIPT_000015_CALLS]
    assert [c.id for m in oc_tr.steps for c in m.tool_calls] == [
        c.id for m in na_tr.steps for c in m.tool_calls
    ]
    assert oc_res.score.score == na_res.score.score == 1.0
    assert oc_res.score.subscores == na_res.score.subscores
    assert oc_res.usage.total_tokens == na_res.usage.total_tokens == 75
    oc_end, na_end = end_state(oc_dir), end_state(na_dir)
    assert na_end == {"results/results.md": f"# shortest\n{CHAIN}\n".encode()}
    assert oc_end["results/results.md"] == na_end["results/results.md"]
    extra = set(oc_end) - set(na_end)
    assert {p for p in extra if "/" not in p} <= BOOTSTRAP_FILES
    assert all(p in BOOTSTRAP_FILES or p.startswith((".git/", ".openclaw/")) for p in extra)
    # every difference between the two transcripts is listed in the doc page
    diffs = transcript_differences(
        openclaw_entries_from_jsonl((oc_dir / RAW_TRANSCRIPT_FILE).read_text()),
        openclaw_entries_from_jsonl((na_dir / "chat.jsonl").read_text()),
    )
    documented = set(re.findall(r"`([a-zA-Z_.]+)`", DOC.read_text()))
    assert diffs, "the two transcripts are expected to differ in a few documented places"
    assert diffs <= documented, f"document these in {DOC.name}: {sorted(diffs - documented)}"


def transcript_differences(oc: list[dict], na: list[dict]) -> set[str]:
    """Where OpenClaw's and the native agent's chat.jsonl differ, as ``entry.field`` names.

    Must-match parts are asserted: entry types and order, message roles, user text, assistant
    content blocks, stop reasons, token usage, tool result names, ids and error flags."""
    assert [e["type"] for e in oc] == [e["type"] for e in na]
    out: set[str] = set()
    for a, b in zip(oc, na, strict=True):
        if a["type"] == "model_change":
            out |= {f"model_change.{k}" for k in ("provider", "modelId") if a[k] != b[k]}
        if a["type"] != "message":
            continue
        x, y = a["message"], b["message"]
        assert x["role"] == y["role"]
        if x["role"] == "user":
            assert x["content"] == y["content"]
        elif x["role"] == "assistant":
            assert x["content"] == y["content"] and x["stopReason"] == y["stopReason"]
            tokens = ("input", "output", "cacheRead", "cacheWrite", "totalTokens")
            assert [x["usage"][k] for k in tokens] == [y["usage"][k] for k in tokens]
            out |= {f"assistant.{k}" for k in ("api", "provider", "model") if x.get(k) != y.get(k)}
        else:
            same = ("toolName", "toolCallId", "isError")
            assert [x[k] for k in same] == [y[k] for k in same]
            if x["content"] != y["content"]:
                out.add(f"toolResult.{x['toolName']}.text")
            dx = {k: v for k, v in (x.get("details") or {}).items() if k != "durationMs"}
            dy = {k: v for k, v in (y.get("details") or {}).items() if k != "durationMs"}
            if dx != dy:
                out.add(f"toolResult.{x['toolName']}.details")
    return out


@pytest.fixture(scope="module")
def probed_000015(tmp_path_factory: pytest.TempPathFactory) -> Solved:
    """One OpenClaw trial of demo 000015 whose model has it look for the provider's key in the
    sandbox (its first tool call), then make three tools fail (an exec exiting 3, a read of a
    missing file, an edit whose old text is not there), then say done: read by the two tests
    about those (one real OpenClaw run instead of two: the costly part; ``srv`` stopped, its
    ``headers`` kept). Read it, do not change it."""
    job = tmp_path_factory.mktemp("openclaw-probed") / "job"
    srv = ScriptedServer([]).start()
    search = key_search_argv(REAL_KEY, "/root", "/tmp", "/tmp_workspace", "/opt/clawrig-gateway")
    look = (
        f"{shlex.join(search)}; "
        'echo key:$(grep -o \'"apiKey": "clawrig-\' /root/.openclaw/openclaw.json | wc -l); '
        f"curl -s -m 5 -o /dev/null {srv.base_url}/models 2>/dev/null; echo host:$?"
    )
    edit = {"path": "/tmp_workspace/coauthorship.json", "oldText": "zzz", "newText": "y"}
    srv.add(
        reply(tool_calls=[call("exec", {"command": look})]),
        reply(tool_calls=[call("exec", {"command": "echo out; exit 3"})]),
        reply(tool_calls=[call("read", {"path": "/nope.txt"})]),
        reply(tool_calls=[call("edit", edit)]),
        reply("done"),
    )
    gw = Gateway(retry=FAST_RETRY).start()
    try:
        result, folder = asyncio.run(run_demo("openclaw", srv, job, gw))
    finally:
        gw.stop()
        srv.stop()
    return Solved(srv=srv, result=result, folder=folder, job=job)


def _tool_results(run: Solved) -> list[TranscriptMessage]:
    tr = read_openclaw_jsonl(run.folder / RAW_TRANSCRIPT_FILE)
    return [m for m in tr.messages if m.role == "toolResult"]


async def test_the_key_never_enters_the_sandbox_openclaw_runs_in(probed_000015: Solved):
    out = _tool_results(probed_000015)[0].text
    # no process, file or config inside holds the key; the config holds the gateway token;
    # the scripted server on the host's loopback cannot be reached (curl: couldn't connect)
    assert out.split() == ["procs:0", "files:0", "key:1", "host:7"], out
    assert probed_000015.srv.headers[0]["authorization"] == f"Bearer {REAL_KEY}"
    assert probed_000015.result.error is None


async def test_max_turns_caps_openclaws_model_requests(scripted_server, make_gateway, tmp_path):
    srv = scripted_server([reply(tool_calls=[call("exec", {"command": "echo"})]) for _ in range(6)])
    result, folder = await run_demo("openclaw", srv, tmp_path / "job", make_gateway(), max_turns=2)
    assert result.stop_reason == StopReason.MAX_TURNS and result.error is None
    assert len(srv.requests) == 2
    tr = read_openclaw_jsonl(folder / RAW_TRANSCRIPT_FILE)
    assert tr.steps[-1].stop_reason == "error"
    assert "limit of 2 model requests" in (tr.steps[-1].error_message or "")


async def test_replay_gives_the_same_transcripts_and_scores_without_a_model_server(
    solved_000015: Solved, scripted_server, make_gateway, tmp_path
):
    job, rec_res, rec_dir = solved_000015.job, solved_000015.result, solved_000015.folder
    # the native agent on the same script, its calls recorded through a gateway lease
    nsrv = scripted_server(script_000015())
    task = demo_task("000015")
    native = TrialConfig(model="scripted/scripted", agent="native")
    record = tmp_path / "njob" / task.id / "rec" / RECORD_FILE
    nlease = make_gateway().open_trial(
        upstream(nsrv), trial_id="native", task_id=task.id, record_path=record
    )
    services = TrialServices(model=nlease.chat_model())
    n_res, n_dir = await run_trial(task, native, tmp_path / "njob", services=services)
    nsrv.stop()  # no model server from here on (the recorded OpenClaw run's is stopped)

    gw = make_gateway(cache=ResponseCache.from_job(job), cache_mode="only")
    again, again_dir = await run_demo("openclaw", None, tmp_path / "replay", gw)
    assert again.error is None and again.score.score == rec_res.score.score == 1.0
    replayed = read_openclaw_jsonl(again_dir / RAW_TRANSCRIPT_FILE)
    assert messages(replayed) == messages(read_openclaw_jsonl(rec_dir / RAW_TRANSCRIPT_FILE))
    assert again.usage.total_tokens == rec_res.usage.total_tokens

    ngw = make_gateway(cache=ResponseCache.from_job(tmp_path / "njob"), cache_mode="only")
    lease = ngw.open_trial(placeholder_endpoint("scripted/scripted"), trial_id="r", task_id=task.id)
    services = TrialServices(model=lease.chat_model())
    n_again, n_again_dir = await run_trial(task, native, tmp_path / "nreplay", services=services)
    assert n_again.error is None and n_again.score.score == n_res.score.score == 1.0
    replayed = read_openclaw_jsonl(n_again_dir / "chat.jsonl")
    assert messages(replayed) == messages(read_openclaw_jsonl(n_dir / "chat.jsonl"))


def messages(tr: Transcript) -> list[dict]:
    """The transcript without times and durations (which a replay does not reproduce)."""

    def clean(m: TranscriptMessage) -> dict:
        d = m.model_dump(exclude={"timestamp_ms"})
        if d.get("details"):
            d["details"] = {k: v for k, v in d["details"].items() if k != "durationMs"}
        return d

    return [clean(m) for m in tr.messages]


async def test_a_first_request_refused_for_its_content_ends_that_trial_only(
    scripted_server, make_gateway, tmp_path
):
    # helper-148: OpenClaw's request refused before its model answered any of the trial's was
    # graded as the agent's model_error (a 0), where the native agent's is an unscored
    # infrastructure error. Now judged as the native agent's: the harness asks the same request
    # (OpenClaw's tools, streamed as it went upstream) with a plain conversation; answered:
    # this trial only
    too_long = "This model's maximum context length is 8192 tokens; the messages hold 9001."

    def responder(request: dict):
        return reply("OK") if request["messages"] == PROBE else error(400, too_long)

    srv = scripted_server(responder=responder)
    task = demo_task("000015")
    services = TrialServices(model=OpenAIChatModel(upstream(srv)), gateway=make_gateway())
    config = TrialConfig(model="scripted/scripted", agent="openclaw")
    result, _ = await run_trial(task, config, tmp_path / "job", services=services)
    assert result.error is not None and result.score is None
    assert result.error.kind == "infrastructure" and not result.error.retryable
    assert too_long in result.error.message and "this trial ends" in result.error.message
    # not also listed as a graded model_error (helper-150): the provider's, as the native's
    assert result.stop_reason == StopReason.PROVIDER_ERROR
    assert result.stop_detail == f"HTTP 400: {too_long}"  # the refusal (null: helper-154)
    refused = [q for q in srv.requests if q["messages"] != PROBE]
    (probe,) = [q for q in srv.requests if q["messages"] == PROBE]
    assert refused and refused[-1]["stream"] is True and probe["stream"] is True
    assert probe["stream_options"] == refused[-1]["stream_options"]
    assert probe["tools"] == refused[-1]["tools"] and len(probe["tools"]) >= 10
    assert srv.requests[-1] is probe  # asked once, after OpenClaw gave up


async def test_rewriting_its_transcript_does_not_make_a_refusal_unscored(
    scripted_server, make_gateway, tmp_path
):
    # helper-150's reward hack: OpenClaw's session file is in its sandbox; an agent that
    # deleted its answered turns from it made a refusal of its grown conversation look like
    # one before any answer (not scored, --resume runs it again). The gateway's count decides
    session = "/root/.openclaw/agents/main/sessions/chat.jsonl"
    hack = f"sed -i '/role.:.assistant/d' {session}; echo H150DONE"
    too_long = "This model's maximum context length is 8192 tokens"

    def responder(request: dict):
        if request["messages"] == PROBE:
            return reply("OK")
        if "H150DONE" in json.dumps(request["messages"]):
            return error(400, too_long)
        return reply(tool_calls=[call("exec", {"command": hack})])

    srv = scripted_server(responder=responder)
    services = TrialServices(model=OpenAIChatModel(upstream(srv)), gateway=make_gateway())
    config = TrialConfig(model="scripted/scripted", agent="openclaw")
    result, _ = await run_trial(demo_task("000015"), config, tmp_path / "job", services=services)
    assert result.error is None and result.score is not None  # graded as it stands
    assert result.stop_reason == StopReason.MODEL_ERROR
    # the provider's own message, as the native agent's trial words it (it said "HTTP 400:
    # 400 ...", OpenClaw's text of the error)
    assert result.stop_detail == f"HTTP 400: {too_long}"


async def test_an_upstream_failure_ends_as_an_infrastructure_error(scripted_server, make_gateway):
    srv = scripted_server([error(500, "down"), error(500, "down")])
    gw = make_gateway()
    lease = gw.open_trial(upstream(srv), trial_id="t")
    async with httpx.AsyncClient() as client:
        r = await client.post(
            f"{lease.host_base_url}/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
        )
    assert r.status_code == 500
    # OpenClaw then records its failed turn like this
    failed = TranscriptMessage(role="assistant", stop_reason="error", error_message="500 down")
    ctx = AgentContext(
        task=demo_task("000015"),
        sandbox=None,  # type: ignore[arg-type]
        tool_ctx=None,  # type: ignore[arg-type]
        toolset=None,
        transcript=Transcript(messages=[failed]),
    )
    with pytest.raises(
        ProviderError, match=r"HTTP 500 from scripted .* after 2 attempts: down"
    ) as e:
        OpenClawAgent._outcome(ctx, lease, 1)
    # with the server's status: the trial judges a 5xx after answers with its plain request, as
    # the native agent's (helper-156: a provoked 500 was a free abstention)
    assert isinstance(e.value, ProviderRetriesExhausted) and e.value.status == 500
    assert e.value.detail == "down"  # the server's own message, for the trial's stop_detail


async def test_failed_tool_calls_as_openclaw_reports_them(probed_000015: Solved):
    """What real OpenClaw 2026.3.24 returns for failing tools (docs/openclaw-vs-native.md):
    no isError flag, a JSON error object as text; exec's exit code in the text and details."""
    result = probed_000015.result
    _, exe, read, edit = _tool_results(probed_000015)
    assert (exe.is_error, exe.text) == (False, "out\n\n(Command exited with code 3)")
    assert (exe.details["status"], exe.details["exitCode"]) == ("completed", 3)
    assert read.is_error is False
    assert json.loads(read.text) == {
        "status": "error",
        "tool": "read",
        "error": "ENOENT: no such file or directory, access '/nope.txt'",
    }
    assert read.details == json.loads(read.text)
    assert edit.is_error is False
    err = json.loads(edit.text)
    assert (err["status"], err["tool"]) == ("error", "edit")
    target = "/tmp_workspace/coauthorship.json"
    assert err["error"].startswith(f"Could not find the exact text in {target}")
    assert "Current file contents:" in err["error"]
    assert result.stop_reason == StopReason.FINAL_ANSWER


async def test_the_time_limit_stops_openclaw_and_keeps_its_transcript(
    scripted_server, make_gateway, tmp_path
):
    srv = scripted_server(
        [reply(tool_calls=[call("exec", {"command": "echo step-one"})]), reply("late", delay=60)]
    )
    # demo tasks allow 600 s: x 1/30 = a 20 s limit for the agent phase
    result, folder = await run_demo(
        "openclaw", srv, tmp_path / "job", make_gateway(), timeout_multiplier=1 / 30
    )
    assert result.stop_reason == StopReason.TIME_LIMIT and result.error is None
    assert "agent stopped: time limit of 20 s" in (folder / "agent.log").read_text()
    if len(srv.requests) == 2:  # OpenClaw got to its second request before the cut
        tr = read_openclaw_jsonl(folder / RAW_TRANSCRIPT_FILE, strict=False)
        (out,) = [m.text for m in tr.messages if m.role == "toolResult"]
        assert out == "step-one"
        assert read_openclaw_jsonl(folder / "chat.jsonl", strict=False).messages


async def test_waiting_for_the_providers_limit_is_not_openclaws_time(
    scripted_server, make_gateway, tmp_path
):
    """``max_concurrency: 1`` held by another trial's request until OpenClaw's first request
    has waited at the gateway for the place (a harness wait) 52 s, longer than this trial's
    whole 50 s agent phase: the trial ends with OpenClaw's answer, not its time limit: the
    harness's deadline moves by the wait, and OpenClaw's own --timeout must not cut it first.
    (A 25 s phase was cut by OpenClaw's own start and end, 19-25 s of its time on a busy
    2-core machine: CI86; a 40 s phase once under a load of 14, four test workers and two
    other test runs.)"""
    from clawrig.llm.client import provider_semaphore

    srv = scripted_server([reply("all done")])
    endpoint = upstream(srv).model_copy(update={"max_concurrency": 1})
    held = provider_semaphore(endpoint.provider, 1)
    assert held is not None
    await held.acquire()  # another trial's request in flight

    async def release_after_52_s_of_waiting() -> None:
        # (a wall-clock hold of 50 s from the trial's start, as before, was the suite's
        # longest test: OpenClaw's own start, its time, takes 5-20 s by the machine's load)
        while not held.waiting:
            await asyncio.sleep(0.05)
        await asyncio.sleep(52)
        held.release()

    releaser = asyncio.create_task(release_after_52_s_of_waiting())
    config = TrialConfig(model="scripted/scripted", agent="openclaw", timeout_multiplier=1 / 12)
    try:
        with use_gateway(make_gateway()):
            result, folder = await run_trial(
                demo_task("000015"),
                config,
                tmp_path / "job",
                services=TrialServices(model=OpenAIChatModel(endpoint)),
            )
    finally:
        if not releaser.done():
            releaser.cancel()
            held.release()
    assert result.error is None, result.error
    assert result.stop_reason == StopReason.FINAL_ANSWER
    assert len(srv.requests) == 1
    # OpenClaw's request waited longer than the whole 50 s agent phase
    assert result.waits.model > 50
    assert "all done" in (folder / "chat.jsonl").read_text()
