"""cron: jobs fire inside the trial (commands in the bwrap sandbox, messages for the agent)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clawrig.tools import CronScheduler
from clawrig.tools.cron import cron_next, parse_cron

pytestmark = pytest.mark.sandbox


def body(r) -> dict:
    assert not r.is_error, r.text
    return json.loads(r.text)


async def _wait_for(pred, timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if pred():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")


async def test_command_job_fires_in_the_sandbox(call, ctx, workspace: Path) -> None:
    job = {
        "name": "stamp",
        "schedule": {"kind": "delay", "delayMs": 100},
        "payload": {"kind": "command", "command": "echo fired >> cron.log; echo done"},
    }
    added = body(await call("cron", {"action": "add", "job": job}))
    assert added["job"]["id"] == "job-1" and added["job"]["enabled"] is True
    log = workspace / "cron.log"
    await _wait_for(lambda: log.exists() and log.read_text() == "fired\n")
    await _wait_for(lambda: ctx.cron.jobs["job-1"].runs)
    runs = body(await call("cron", {"action": "runs", "jobId": "job-1"}))["runs"]
    assert [(r["status"], r["exitCode"], r["output"]) for r in runs] == [("ok", 0, "done")]
    # a one-shot job is disabled after it fired: listed only with includeDisabled
    assert body(await call("cron", {"action": "list"}))["jobs"] == []
    listed = body(await call("cron", {"action": "list", "includeDisabled": True}))["jobs"]
    assert [(j["id"], j["name"], j["enabled"], j["runCount"]) for j in listed] == [
        ("job-1", "stamp", False, 1)
    ]


async def test_every_job_repeats_until_removed(call, ctx, workspace: Path) -> None:
    job = {"schedule": {"kind": "every", "everyMs": 150}, "command": "echo tick >> ticks"}
    jid = body(await call("cron", {"action": "add", "job": job}))["job"]["id"]
    ticks = workspace / "ticks"
    await _wait_for(lambda: ticks.exists() and ticks.read_text().count("tick") >= 3)
    status = body(await call("cron", {"action": "status"}))
    assert status["running"] is True and status["enabledJobs"] == 1
    assert body(await call("cron", {"action": "remove", "jobId": jid})) == {
        "ok": True,
        "removed": jid,
    }
    await asyncio.sleep(0.1)  # a run already started may still append
    count = ticks.read_text().count("tick")
    await asyncio.sleep(0.5)
    assert ticks.read_text().count("tick") == count
    assert body(await call("cron", {"action": "list", "includeDisabled": True}))["jobs"] == []


async def test_message_jobs_are_queued_for_the_agent(call, ctx) -> None:
    at = (datetime.now(UTC) + timedelta(milliseconds=200)).isoformat()
    await call(
        "cron",
        {
            "action": "add",
            "job": {
                "schedule": {"kind": "at", "at": at},
                "payload": {"kind": "systemEvent", "text": "check the oven"},
            },
        },
    )
    await call(
        "cron",
        {"action": "add", "text": "stretch", "job": {"schedule": {"kind": "delay", "delayMs": 50}}},
    )
    sched: CronScheduler = ctx.cron
    await _wait_for(lambda: len(sched._messages) >= 2)
    msgs = sched.pending_messages()
    assert sorted((m.job_id, m.text) for m in msgs) == [
        ("job-1", "check the oven"),
        ("job-2", "stretch"),
    ]
    assert [m.as_user_text() for m in msgs if m.job_id == "job-2"] == ["[cron job-2] stretch"]
    assert sched.pending_messages() == []
    # wake: a message now
    r = body(await call("cron", {"action": "wake", "text": "wake up"}))
    assert r["queued"] == "wake up"
    assert await sched.wait_message(1.0) is True
    assert [m.text for m in sched.pending_messages()] == ["wake up"]


async def test_run_update_and_due(call, ctx) -> None:
    job = {"schedule": {"kind": "every", "everyMs": 3_600_000}, "command": "echo now; exit 4"}
    jid = body(await call("cron", {"action": "add", "job": job}))["job"]["id"]
    r = body(await call("cron", {"action": "run", "jobId": jid}))
    assert r["ran"] is True
    assert (r["run"]["status"], r["run"]["exitCode"], r["run"]["output"]) == ("error", 4, "now")
    r = body(await call("cron", {"action": "run", "jobId": jid, "runMode": "due"}))
    assert r == {"ok": True, "ran": False, "reason": "not due"}
    r = body(await call("cron", {"action": "update", "jobId": jid, "patch": {"enabled": False}}))
    assert r["job"]["enabled"] is False and r["job"]["nextRunAt"] is None
    r = body(await call("cron", {"action": "update", "id": jid, "patch": {"name": "hourly"}}))
    assert r["job"]["name"] == "hourly"


SPAN = 100 * 365 * 86400  # 100 years in seconds


async def test_cron_errors(call) -> None:
    cases = [
        ({"action": "add"}, "cron: add needs `job`"),
        ({"action": "add", "job": {"command": "true"}}, "cron: add: job.schedule is missing"),
        (
            {
                "action": "add",
                "job": {"schedule": {"kind": "at", "at": "tomorrow"}, "command": "x"},
            },
            "cron: add: schedule.at 'tomorrow' is not an ISO 8601 time",
        ),
        (
            {
                "action": "add",
                "job": {"schedule": {"kind": "every", "everyMs": 10}, "command": "x"},
            },
            "cron: add: schedule.everyMs must be >= 100",
        ),
        (
            {"action": "add", "job": {"schedule": {"kind": "delay", "delayMs": 10}}},
            "cron: add: job.payload is missing",
        ),
        # helper-198: a JSON integer past a float's range (float() raised OverflowError)
        (
            {
                "action": "add",
                "job": {"schedule": {"kind": "every", "everyMs": 10**400}, "command": "x"},
            },
            "cron: add: schedule.everyMs must be a finite number",
        ),
        (
            {
                "action": "add",
                "job": {"schedule": {"kind": "at", "atMs": -(10**400)}, "command": "x"},
            },
            "cron: add: schedule.atMs must be a finite number",
        ),
        (
            {
                "action": "add",
                "job": {
                    "everyMs": 500,
                    "payload": {"kind": "command", "command": "x", "timeout": 10**400},
                },
            },
            "cron: add: payload.timeout must be a finite number",
        ),
        # helper-197: an OverflowError traceback on the harness's console
        (
            {"action": "add", "job": {"schedule": {"kind": "at", "atMs": 1e30}, "text": "x"}},
            "cron: add: schedule.at is out of range (a time before the year 10000)",
        ),
        (
            {
                "action": "add",
                "job": {"schedule": {"kind": "every", "everyMs": 1e300}, "command": "x"},
            },
            f"cron: add: schedule.everyMs must be a finite number of at most {SPAN:g} s",
        ),
        (
            {
                "action": "add",
                "job": {"schedule": {"kind": "delay", "delayMs": 1e300}, "command": "x"},
            },
            f"cron: add: schedule.delayMs must be a finite number of at most {SPAN:g} s",
        ),
        (
            {
                "action": "add",
                "job": {"schedule": {"kind": "cron", "expr": "* * *"}, "command": "x"},
            },
            "cron: add: cron expression '* * *' must have 5 fields",
        ),
        (
            {"action": "add", "job": {"everyMs": 500, "payload": {"kind": "email", "to": "x"}}},
            "cron: add: payload.kind 'email' is unknown",
        ),
        ({"action": "remove", "jobId": "job-7"}, "cron: no cron job 'job-7' (known jobs: none)"),
        ({"action": "run"}, "cron: action 'run' needs `jobId`"),
        ({"action": "wake"}, "cron: wake needs `text`"),
        ({"action": "update", "jobId": "job-1"}, "cron: update needs `patch`"),
    ]
    for args, expected in cases:
        r = await call("cron", args)
        assert r.is_error, args
        assert r.text.startswith(expected), (args, r.text)


async def test_jobs_and_waiting_messages_are_capped(call, ctx) -> None:
    """At most MAX_JOBS jobs, and at most MAX_PENDING_MESSAGES fired messages wait for the
    agent's next turn (the oldest dropped, the delivery saying how many): 50 jobs firing
    10 KB every 0.1 s while the agent slept made a 52 MB transcript (helper-142)."""
    from clawrig.tools.cron import MAX_JOBS, MAX_PENDING_MESSAGES

    for i in range(MAX_PENDING_MESSAGES + 7):
        r = body(await call("cron", {"action": "wake", "text": f"m{i}"}))
        assert r["queued"] == f"m{i}"
    sched: CronScheduler = ctx.cron
    got = sched.pending_messages()
    assert [m.text for m in got[1:]] == [f"m{i}" for i in range(7, MAX_PENDING_MESSAGES + 7)]
    assert got[0].text == (
        f"7 earlier cron message(s) dropped: more than {MAX_PENDING_MESSAGES} waited for this turn"
    )
    assert sched.pending_messages() == []  # (the count starts again)
    for _ in range(MAX_JOBS):
        body(await call("cron", {"action": "add", "job": {"everyMs": 10**8, "command": "true"}}))
    r = await call("cron", {"action": "add", "job": {"everyMs": 10**8, "command": "true"}})
    assert r.is_error and f"at most {MAX_JOBS} cron jobs at once: remove one first" in r.text


async def test_a_runs_history_keeps_the_end_of_its_output(call, ctx) -> None:
    """A run's whole output is what ``run`` answers; the job's history keeps its last
    MAX_RUN_OUTPUT_KEPT characters (100 jobs of 50 runs of 200 KB held 1 GB: helper-143)."""
    from clawrig.tools.cron import MAX_RUN_OUTPUT_KEPT

    command = f'python3 -c \'print("a" * {MAX_RUN_OUTPUT_KEPT} + "END")\''
    job = body(await call("cron", {"action": "add", "job": {"everyMs": 10**8, "command": command}}))
    ran = body(await call("cron", {"action": "run", "jobId": job["job"]["id"]}))
    assert len(ran["run"]["output"]) == MAX_RUN_OUTPUT_KEPT + 3
    kept = ctx.cron.get(job["job"]["id"]).runs[-1].output
    assert len(kept) == MAX_RUN_OUTPUT_KEPT and kept.endswith("aEND")


async def test_stopped_scheduler_refuses_new_jobs(call, ctx, toolset) -> None:
    await call("cron", {"action": "add", "job": {"everyMs": 100000, "command": "true"}})
    await toolset.aclose(ctx)
    status = body(await call("cron", {"action": "status"}))
    assert status["running"] is False and status["nextRunAt"] is None
    r = await call("cron", {"action": "add", "job": {"everyMs": 1000, "command": "true"}})
    assert r.is_error and "the scheduler has stopped" in r.text


def test_cron_expressions() -> None:
    # every 15 minutes from 9 to 17 on weekdays; 2026-03-02 is a Monday, 03-06 a Friday
    expr = "*/15 9-17 * * 1-5"
    minutes, hours, days, months, dows = parse_cron(expr)
    assert minutes == {0, 15, 30, 45} and hours == set(range(9, 18)) and dows == {1, 2, 3, 4, 5}
    t = datetime(2026, 3, 2, 10, 7, tzinfo=UTC).timestamp()
    assert cron_next(expr, t) == datetime(2026, 3, 2, 10, 15, tzinfo=UTC).timestamp()
    t = datetime(2026, 3, 6, 17, 50, tzinfo=UTC).timestamp()
    assert cron_next(expr, t) == datetime(2026, 3, 9, 9, 0, tzinfo=UTC).timestamp()
    # Sundays at noon, 7 = 0 = Sunday; 2026-03-08 is the Sunday after Friday 03-06
    assert cron_next("0 12 * * 7", t) == datetime(2026, 3, 8, 12, 0, tzinfo=UTC).timestamp()
    with pytest.raises(ValueError, match="outside 0-23"):
        parse_cron("0 24 * * *")
