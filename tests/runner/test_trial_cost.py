"""Per-trial cost and time limits (issue 19). A trial does not pay for what it does not need:
no judge proxy (its in-sandbox forwarder) for a grader that cannot call a judge or when no
judge can answer. Time it waits on the harness (sandbox-start, model and grading slots, a busy
event loop) is recorded and not held against the agent. Real trials in real bwrap sandboxes, a
real gateway, scripted model servers on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Literal

import pytest

from clawrig import waits
from clawrig.cli.run import waits_line
from clawrig.errors import SandboxDied
from clawrig.grading.aggregate import job_summary
from clawrig.grading.judge_proxy import grader_may_call_judge
from clawrig.llm import client as llm_client
from clawrig.llm.gateway import FORWARDER_PORT, Gateway
from clawrig.runner import trial as trial_module
from clawrig.runner.trial import TrialServices, run_trial
from clawrig.sandbox import Limits, SandboxConfig, create_sandbox
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.spec.task import Grader, GraderKind, SourceRef, Task, TaskFormat, Workspace
from clawrig.spec.trial import HarnessWaits, TrialResult
from clawrig.testing.scripted_server import call, reply
from clawrig.waits import SharedSemaphore

pytestmark = pytest.mark.sandbox

# Whether something listens on the judge proxy's port inside the sandbox while grading: the
# probe itself reads no environment, so only the second line below makes a grader "able to
# call a judge"
PROBE = f"""
import socket

def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    try:
        socket.create_connection(("127.0.0.1", {FORWARDER_PORT}), timeout=2).close()
        listening = 1.0
    except OSError:
        listening = 0.0
    return {{"listening": listening, "overall_score": 1.0}}
"""
READS_JUDGE = PROBE + '\nimport os\nJUDGE = os.environ.get("JUDGE_MODEL")\n'


def task_with(source: str, *, task_id: str = "cost_task", workspace: Workspace | None = None):
    return Task(
        id=task_id,
        format=TaskFormat.WILDCLAW,
        prompt="p",
        source=SourceRef(path=Path(f"{task_id}.md")),
        grader=Grader(kind=GraderKind.PROGRAMMATIC, source=source),
        workspace=workspace or Workspace(),
    )


def test_which_graders_may_call_a_judge():
    assert not grader_may_call_judge(task_with(PROBE))
    assert grader_may_call_judge(task_with(READS_JUDGE))
    # a grader that starts another program passes its environment on
    assert grader_may_call_judge(task_with("import subprocess\ndef grade(**k): ..."))
    # "pty" as a word, not inside "empty"
    assert not grader_may_call_judge(task_with("def grade(**k):\n    return {'empty': 1}"))
    # the task's ## Env naming a model setting, or the reader having found a judge call
    assert grader_may_call_judge(task_with(PROBE).model_copy(update={"env": ["JUDGE_MODEL"]}))
    meta = {"grader_uses_judge": True}
    assert grader_may_call_judge(task_with(PROBE).model_copy(update={"metadata": meta}))


async def test_the_judge_proxy_runs_only_when_a_grader_can_call_a_judge(scripted_server, tmp_path):
    judge = scripted_server(responder=lambda req: reply('{"score": 1}'))
    config = TrialConfig(agent="nop", model="nop")
    listening = {}
    with Gateway() as gw:
        for name, source, judge_model in (
            ("probe", PROBE, judge.chat_model("scripted/judge")),
            ("reads_judge", READS_JUDGE, judge.chat_model("scripted/judge")),
            ("no_judge", READS_JUDGE, None),
        ):
            services = TrialServices(judge=judge_model, gateway=gw)
            result, _ = await run_trial(
                task_with(source, task_id=name), config, tmp_path / "out", services=services
            )
            assert result.error is None, result.error
            listening[name] = result.score.subscores["listening"]
    assert listening == {"probe": 0.0, "reads_judge": 1.0, "no_judge": 0.0}


class Gate(asyncio.Semaphore):
    """A real one-place semaphore the test holds: the first acquire that finds it taken gets
    it ``hold_s`` seconds later (so that waiter waits at least that long)."""

    def __init__(self, hold_s: float) -> None:
        super().__init__(1)
        self.hold_s = hold_s
        self.timer: asyncio.TimerHandle | None = None

    async def acquire(self) -> Literal[True]:
        if self.locked() and self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(self.hold_s, self.release)
        return await super().acquire()


class ProviderGate(SharedSemaphore):
    """:class:`Gate` as a provider's places (the kind :func:`provider_semaphore` makes)."""

    def __init__(self, hold_s: float) -> None:
        super().__init__(1)
        self.hold_s = hold_s
        self.timer: asyncio.TimerHandle | None = None

    async def acquire(self) -> bool:
        if self.locked() and self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(self.hold_s, self.release)
        return await super().acquire()


async def test_waits_on_the_harness_are_recorded_and_not_held_against_the_agent(
    scripted_server, tmp_path, monkeypatch
):
    """The agent's one model request waits 8 s for its provider's only slot, longer than its
    time limit of 5 s: the agent still finishes (its deadline moved by the wait), and the trial's
    waits for a sandbox start, the model and a grading slot are at least what they were held."""
    srv = scripted_server([reply("warm"), reply("done")])
    model = srv.chat_model("scripted/agent", max_concurrency=1)
    await model.chat([{"role": "user", "content": "hi"}])  # its client made before the clock runs
    gates = {"sandbox_start": Gate(0.5), "model": ProviderGate(8.0), "grading": Gate(0.5)}
    for gate in gates.values():
        await gate.acquire()  # held by the test until a trial waits for it
    # the provider's places (max_concurrency 1) are the held gate (clawrig.llm.client registry)
    monkeypatch.setitem(llm_client._LIMITS, ("scripted", 1), gates["model"])
    services = TrialServices(
        model=model, sandbox_starts=gates["sandbox_start"], grading_slots=gates["grading"]
    )
    task = task_with(PROBE).model_copy(update={"timeout_seconds": 5.0})
    result, folder = await run_trial(
        task, TrialConfig(agent="native", model="scripted/agent"), tmp_path, services=services
    )
    assert result.error is None, result.error
    assert result.stop_reason == "final_answer" and len(srv.requests) == 2, result.waits
    for kind, gate in gates.items():
        assert getattr(result.waits, kind) >= gate.hold_s, (kind, result.waits)
    written = json.loads((folder / "result.json").read_text())["waits"]
    assert written["model"] == round(result.waits.model, 6)


def test_the_summary_says_how_long_trials_waited():
    def trial(n: int, **waits: float) -> TrialResult:
        return TrialResult(
            task_id=f"t{n}",
            trial_id=f"x{n}",
            model="m",
            agent="a",
            sandbox="bwrap",
            waits=HarnessWaits(**waits),
        )

    results = [trial(0, sandbox_start=1.0), trial(1, grading=2.0), trial(2, model=4.0, grading=1)]
    summary = job_summary(JobConfig(suite_path=Path("s")), [], results, job_id="j")
    waits = summary.waits
    assert (waits.total.total_s, waits.total.median_s, waits.total.max_s) == (8.0, 2.0, 5.0)
    assert (waits.grading.total_s, waits.grading.median_s, waits.grading.max_s) == (3.0, 1.0, 2.0)
    assert (waits.model.median_s, waits.model.max_s) == (0.0, 4.0)
    line = waits_line(summary.to_json())
    assert line is not None and "median 2.00 s, max 5.00 s" in line
    assert "sandbox start 0.00/1.00" in line and "model 0.00/4.00" in line


async def test_a_sandbox_stop_postponed_by_a_harness_wait(tmp_path):
    """The whole-trial stop (``Limits.trial_timeout_s``) moves by what the trial waited on the
    harness (the runner postpones it by its grading-slot wait): past its 2 s the sandbox still
    answers; one not postponed is stopped."""
    boxes = []
    for postpone in (30.0, 0.0):
        ws = tmp_path / f"ws{len(boxes)}"
        ws.mkdir()
        box = create_sandbox(
            "bwrap", SandboxConfig(workspace_dir=ws, limits=Limits(trial_timeout_s=2))
        )
        await box.start()
        box.postpone_stop(postpone)
        boxes.append(box)
    try:
        await asyncio.sleep(4)
        alive, stopped = boxes
        assert (await alive.exec(["echo", "up"])).stdout == "up\n"
        with pytest.raises(SandboxDied, match="trial time limit of 2 s"):
            await stopped.exec(["echo", "up"])
    finally:
        for box in boxes:
            await box.stop()


class Stall(SharedSemaphore):
    """A free one-place semaphore (the provider's places) that, when the agent first asks for
    it, stalls the event loop ``chunks`` times for ``chunk_s`` seconds, 0.05 s apart (a harness
    too busy to serve the trial, as hundreds of other trials' work would make it)."""

    def __init__(self, chunks: int, chunk_s: float) -> None:
        super().__init__(1)
        self.chunks, self.chunk_s, self.started = chunks, chunk_s, False

    def try_acquire(self) -> bool:
        if not self.started:
            self.started = True
            loop = asyncio.get_running_loop()
            for n in range(self.chunks):
                loop.call_later(0.1 + n * (self.chunk_s + 0.05), time.sleep, self.chunk_s)
        return super().try_acquire()


async def test_a_busy_harness_loop_is_not_held_against_the_agent(
    scripted_server, tmp_path, monkeypatch
):
    """The agent (time limit 5 s) makes 4 exec calls and answers, its model taking 0.3 s a
    reply (1.5 s); meanwhile the harness's event loop is stalled 8 times for 0.75 s (6 s in
    all): the agent still finishes, and its phase less the trial's ``loop`` wait is within the
    limit."""
    turns = [reply(tool_calls=[call("exec", {"command": "echo hi"})], delay=0.3)] * 4
    srv = scripted_server([reply("warm"), *turns, reply("done", delay=0.3)])
    model = srv.chat_model("scripted/agent", max_concurrency=1)
    await model.chat([{"role": "user", "content": "hi"}])  # its client made before the clock runs
    stall = Stall(8, 0.75)
    monkeypatch.setitem(llm_client._LIMITS, ("scripted", 1), stall)
    task = task_with(PROBE).model_copy(update={"timeout_seconds": 5.0})
    result, folder = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/agent"),
        tmp_path,
        services=TrialServices(model=model),
    )
    assert result.error is None, result.error
    assert result.stop_reason == "final_answer", (result.waits, result.timings)
    assert result.tool_calls == 4
    # the time the agent had beyond its waits was within its limit
    assert result.waits.loop > 1.0, result.waits
    assert result.timings["agent"] - result.waits.loop <= 5.0 + waits.LAG_TICK_S


async def test_a_wait_while_the_agent_runs_moves_its_sandboxs_stop_too(
    scripted_server, tmp_path, monkeypatch
):
    """The agent's model request waits 12 s for its provider's only slot, past the whole
    trial's 9 s (5 s agent + 1 s grader + 3 s overhead), then runs a command: every deadline
    of the trial moves by that wait, and so does the sandbox's own stop at
    ``Limits.trial_timeout_s``. It did not (only a grading-slot wait moved it): the sandbox was
    stopped under the agent ('trial time limit of 9 s reached: sandbox stopped'), an agent
    error scored 0 for the harness's congestion."""
    monkeypatch.setattr(trial_module, "TRIAL_OVERHEAD_S", 3.0)
    wrote = call("exec", {"command": "echo hi > /tmp_workspace/out.txt"})
    srv = scripted_server([reply("warm"), reply(tool_calls=[wrote]), reply("done")])
    model = srv.chat_model("scripted/agent", max_concurrency=1)
    await model.chat([{"role": "user", "content": "hi"}])  # its client made before the clock runs
    gate = ProviderGate(12.0)
    await gate.acquire()  # held by the test until the agent's request waits for it
    monkeypatch.setitem(llm_client._LIMITS, ("scripted", 1), gate)
    task = task_with(PROBE).model_copy(update={"timeout_seconds": 5.0})
    task = task.model_copy(update={"grader": task.grader.model_copy(update={"timeout_seconds": 1})})
    result, folder = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/agent"),
        tmp_path,
        services=TrialServices(model=model),
    )
    assert result.waits.model >= 12.0, result.waits
    assert result.error is None, result.error
    assert result.stop_reason == "final_answer" and result.score.score == 1.0, result.score
    assert (folder / "end_state" / "out.txt").read_text() == "hi\n"


async def test_an_agent_waiting_on_its_own_model_requests_gets_no_more_time(
    scripted_server, tmp_path
):
    """The provider takes one request at a time (``max_concurrency`` 1). The agent spawns a
    sub-agent and both call the model back to back for 8 s, past the agent's 3 s: each of its
    requests waits for the other's, a queue the agent made itself, not the harness. Such waits
    moved the deadline like the harness's (one of them was always in progress: the deadline
    stood still) and the agent answered after 8 s with its time limit unspent (red team)."""
    started: list[float] = []

    def respond(request: dict[str, Any]) -> Any:
        now = time.monotonic()
        started.append(started[0] if started else now)
        first = request["messages"][0]["content"]
        if "SPIN" in first:  # the sub-agent: a command a turn, for 10 s
            if now - started[0] > 10:
                return reply("spun", delay=0.3)
            return reply(tool_calls=[call("exec", {"command": "true"})], delay=0.3)
        if not any(m.get("role") == "tool" for m in request["messages"]):
            return reply(tool_calls=[call("sessions_spawn", {"task": "SPIN"})], delay=0.3)
        if now - started[0] > 8:
            return reply("done", delay=0.3)
        return reply(tool_calls=[call("exec", {"command": "true"})], delay=0.3)

    srv = scripted_server(responder=respond)
    model = srv.chat_model("scripted/agent", max_concurrency=1)
    task = task_with(PROBE).model_copy(update={"timeout_seconds": 3.0})
    result, _ = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/agent"),
        tmp_path,
        services=TrialServices(model=model),
    )
    assert result.error is None, result.error
    assert result.stop_reason == "time_limit", (result.stop_reason, result.waits)


ASKS_JUDGE = r"""
import json, os, urllib.request

def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    body = {"model": os.environ["JUDGE_MODEL"], "messages": [{"role": "user", "content": "x"}]}
    req = urllib.request.Request(
        os.environ["OPENROUTER_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENROUTER_API_KEY"],
                 "Content-Type": "application/json"},
    )
    score = float(json.loads(urllib.request.urlopen(req, timeout=60).read())
                  ["choices"][0]["message"]["content"])
    return {"judge": score, "overall_score": score}
"""


ASKS_JUDGE_THEN_HANGS = ASKS_JUDGE.replace(
    "    return {",
    "    import sys, time\n    print('judged', score, flush=True)\n"
    "    print('now sleeping', file=sys.stderr, flush=True)\n    time.sleep(60)\n    return {",
)


async def behind_a_held_place(
    scripted_server: Any,
    tmp_path: Path,
    task: Task,
    delays: dict[str, float],
    answer: str = "1.0",
) -> tuple[TrialResult, Any, float]:
    """Run ``task`` (the nop agent) while another request (another trial's, "hold") holds the
    only place of the judge's provider (``max_concurrency: 1``). The judge answers ``answer``
    to every request, after ``delays[content]`` seconds for a request whose last message is
    ``content`` (none for others). Returns the result, the judge's server and the seconds the
    trial took."""

    def respond(body: dict[str, Any]) -> Any:
        return reply(answer, delay=delays.get(body["messages"][-1]["content"], 0.0))

    judge = scripted_server(responder=respond)
    holder = judge.chat_model("scripted/other", max_concurrency=1)
    with Gateway() as gw:
        services = TrialServices(
            judge=judge.chat_model("scripted/judge", max_concurrency=1), gateway=gw
        )
        holding = asyncio.ensure_future(holder.chat([{"role": "user", "content": "hold"}]))
        while not judge.requests:  # it holds the provider's place
            await asyncio.sleep(0.01)
        began = time.monotonic()
        result, _ = await run_trial(
            task, TrialConfig(agent="nop", model="nop"), tmp_path / "out", services=services
        )
        took = time.monotonic() - began
        await holding
    await holder.aclose()
    return result, judge, took


def graded_within_2_s(grader: str, task_id: str = "judged") -> Task:
    """A task whose ``grader`` has a 2 s limit."""
    task = task_with(grader, task_id=task_id)
    return task.model_copy(update={"grader": task.grader.model_copy(update={"timeout_seconds": 2})})


async def test_a_graders_wait_behind_the_providers_limit_is_not_its_time(scripted_server, tmp_path):
    """``max_concurrency: 1`` for the judge's provider, its place held 10 s by another trial's
    request while this trial's grader (2 s limit) asks the judge: the wait is the harness's, so
    it moves the grader's limit as it moves the agent's (the trial's clock runs in the grading
    phase too): the request gets the place, the judge answers and the grade stands. Before, the
    grader was cut at its 2 s ("grader timed out", an infrastructure error run again, and again
    at every attempt while the provider was busy). The wait is in result.json's and the
    summary's ``waits``."""
    task = graded_within_2_s(ASKS_JUDGE)
    result, judge, took = await behind_a_held_place(scripted_server, tmp_path, task, {"hold": 10})
    assert [r["messages"][-1]["content"] for r in judge.requests] == ["hold", "x"]
    assert judge.max_in_flight == 1
    assert result.error is None, result.error
    assert result.score is not None and result.score.score == 1.0, result.score
    assert result.waits.model > 3.0, result.waits  # longer than the grader's 2 s
    assert result.waits.model < took, (result.waits, took)
    summary = job_summary(JobConfig(suite_path=Path("s")), [], [result], job_id="j")
    assert summary.waits.model.max_s == pytest.approx(result.waits.model, abs=1e-3)


async def test_a_grader_hanging_after_its_wait_still_times_out(scripted_server, tmp_path):
    """The same wait (5 s), then the grader hangs on its own: its limit, moved by the wait,
    still ends it 2 s of its own time later (the harness kills it; the sandbox's own timeout is
    a day later): "grader timed out", the agent's 0, not the harness's; what it printed before
    it hung is in the score's details."""
    task = graded_within_2_s(ASKS_JUDGE_THEN_HANGS)
    result, judge, took = await behind_a_held_place(scripted_server, tmp_path, task, {"hold": 5})
    assert [r["messages"][-1]["content"] for r in judge.requests] == ["hold", "x"]
    assert result.error is not None and result.error.kind == "agent", result.error
    assert result.score is not None and result.score.score == 0.0
    assert "grader timed out after 2 s" in str(result.score.details.get("agent_error")), (
        result.score
    )
    assert result.waits.model > 2.0, result.waits
    assert result.waits.model + 2.0 <= took < 30.0, (result.waits, took)
    # what it wrote before it hung is kept for whoever reads why it timed out
    details = result.score.details
    assert "judged 1.0" in details["stdout"] and "now sleeping" in details["stderr"], details
    assert details["exit_code"] == 124, details


async def test_an_in_process_judges_wait_is_the_trials_harness_wait(scripted_server, tmp_path):
    """The answer judge (in process, through the gateway) asks while another request holds the
    only place of its provider (``max_concurrency: 1``) for 3 s: its wait is the trial's
    harness wait in the grading phase too (the clock is installed there as in the agent
    phase; it was not, and the wait went unrecorded and ate the grading phase's time)."""
    verdict = json.dumps({"scores": {"match": 1}, "total": 1.0, "notes": "ok"})
    task = Task(
        id="answered",
        format=TaskFormat.DATACLAW,
        prompt="p",
        source=SourceRef(path=Path("answered.md")),
        grader=Grader(kind=GraderKind.JUDGE),
        answer="Jiangsu",
    )
    result, judge, _ = await behind_a_held_place(
        scripted_server, tmp_path, task, {"hold": 3.0}, answer=verdict
    )
    assert len(judge.requests) == 2 and judge.max_in_flight == 1
    assert result.error is None, result.error
    assert result.score is not None and result.score.score == 1.0, result.score
    assert result.waits.model > 1.0, result.waits


ASKS_JUDGE_TWICE = r"""
import json, os, threading, urllib.request

def ask(content, out):
    body = {"model": os.environ["JUDGE_MODEL"], "messages": [{"role": "user", "content": content}]}
    req = urllib.request.Request(
        os.environ["OPENROUTER_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENROUTER_API_KEY"],
                 "Content-Type": "application/json"},
    )
    out.append(json.loads(urllib.request.urlopen(req, timeout=60).read()))

def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    out = []
    threads = [threading.Thread(target=ask, args=(c, out)) for c in ("slow", "x")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"overall_score": 1.0}
"""


async def test_a_graders_wait_behind_its_own_request_is_its_time(scripted_server, tmp_path):
    """Two judge requests of the grader wait behind another trial's request (limit 1, held
    5 s): a harness wait. Once one of them has the place, the other waits behind the trial's
    own request, which is the grader's time (as a wait that begins then is): an 8 s answer
    to it runs past the grader's 2 s limit, which ends it."""

    task = graded_within_2_s(ASKS_JUDGE_TWICE, task_id="judged2")
    result, _, _ = await behind_a_held_place(
        scripted_server, tmp_path, task, {"hold": 5.0, "slow": 8.0}
    )
    assert result.error is not None and result.error.kind == "agent", (result.error, result.waits)
    assert "grader timed out after 2 s" in str(result.score.details.get("agent_error"))


async def test_a_providers_back_off_is_not_the_agents_time(scripted_server, tmp_path):
    """The provider answers the agent's second request 429 twice, each asking for 2 s: its
    back-off (4 s) runs past the agent's 3 s. It was the agent's time: the trial ended
    ``time_limit`` and scored 0, where the README says a failing provider is infrastructure
    (helper-141). The back-off is a wait for the model's provider now, the deadline moved by
    it: the agent answers after the retries."""
    from clawrig.llm.client import RetryPolicy
    from clawrig.testing.scripted_server import error

    srv = scripted_server(
        [
            reply(tool_calls=[call("exec", {"command": "true"})]),
            error(429, retry_after=2),
            error(429, retry_after=2),
            reply("done"),
        ]
    )
    task = task_with(PROBE).model_copy(update={"timeout_seconds": 3.0})
    result, _ = await run_trial(
        task,
        TrialConfig(agent="native", model="scripted/agent"),
        tmp_path,
        # Retry-After as the provider says it (the test default caps it at 0.05 s)
        services=TrialServices(model=srv.chat_model("scripted/agent", retry=RetryPolicy())),
    )
    assert result.error is None, result.error
    assert result.stop_reason == "final_answer", (result.stop_reason, result.waits)
    assert result.waits.model >= 4.0, result.waits  # the two back-offs the provider asked for
    assert len(srv.requests) == 4


async def test_what_the_judges_spent_is_the_trials_usage(scripted_server, tmp_path):
    """A grader that asks the judge (through the judge proxy) and the answer judge: their
    calls' tokens and USD are in the trial's usage (usage.json, the summary, the budget on
    --resume); they were in none (helper-144). The nop agent calls no model itself."""
    from clawrig.testing.scripted_server import usage

    judge = scripted_server(responder=lambda req: reply("1.0", usage=usage(100, 20, cost=0.004)))
    with Gateway() as gw:
        services = TrialServices(judge=judge.chat_model("scripted/judge"), gateway=gw)
        result, folder = await run_trial(
            task_with(ASKS_JUDGE, task_id="asks"),
            TrialConfig(agent="nop", model="nop"),
            tmp_path / "out",
            services=services,
        )
    assert result.error is None, result.error
    calls = len(judge.requests)
    assert calls >= 1
    assert result.usage.request_count == calls
    assert result.usage.cost_usd == pytest.approx(0.004 * calls)
    assert result.usage.input_tokens == 100 * calls and result.usage.output_tokens == 20 * calls
    assert json.loads((folder / "usage.json").read_text())["cost_usd"] == pytest.approx(
        0.004 * calls
    )
