"""A scripted agent, judge and package registries for examples/wildclaw-patterns, so the suite
runs end to end with no model API and no network: the test (tests/egress/test_example_patterns.py)
and benchmarks/example_patterns.py both use it.

- :func:`responder`: the scripted model's policy for every task (and the skill script's own
  question), for :class:`clawrig.testing.scripted_server.ScriptedServer`;
- :func:`judge`: the scripted judge of the judge-using grader;
- :func:`run_suite`: a job of the suite with those two as model and judge, through a gateway,
  with the job's web (``--web corpus`` on ``web/`` answers the web task offline);
- :func:`local_registries` (:func:`clawrig.testing.packages.probe_registries`): the pip index
  and npm registry the warmups install from (the probe packages, on 127.0.0.2: not the
  sandbox's own loopback, so they go through the egress proxy); the apt task installs jq from
  Debian's mirror.
"""

from __future__ import annotations

import json
import re
from typing import Any

from clawrig.llm.gateway import Gateway
from clawrig.runner.batch import run_job
from clawrig.runner.trial import TrialServices
from clawrig.spec.job import JobConfig
from clawrig.spec.task import Task
from clawrig.testing.packages import NPM_PROBE, PROBE_MODULE
from clawrig.testing.packages import probe_registries as local_registries  # noqa: F401
from clawrig.testing.scripted_server import Reply, ScriptedServer, call, reply
from clawrig.web import WebService

QUESTION = "Which of Lisbon, Oslo, Kyiv is the capital of Portugal? Answer with the city only."


def _researcher(messages: list[dict]) -> Reply:
    """The web task: search, fetch the first hit, write the date the page gives."""
    tools = [m for m in messages if m.get("role") == "tool"]
    if not tools:
        return reply(tool_calls=[call("web_search", {"query": "Tern 4.2 release notes"})])
    if len(tools) == 1:
        url = json.loads(tools[0]["content"])["results"][0]["url"]
        return reply(tool_calls=[call("web_fetch", {"url": url})])
    if len(tools) == 2:
        date = re.search(r"released on (\d{4}-\d{2}-\d{2})", tools[1]["content"]).group(1)
        command = f"echo {date} > /tmp_workspace/results/date.txt"
        return reply(tool_calls=[call("exec", {"command": command})])
    return reply("done")


def responder(request: dict) -> Reply:
    """One exec per task (the web task: search, fetch, exec), then "done"."""
    first = request["messages"][0]["content"]
    if first == QUESTION:  # the skill script's own call, through the gateway
        return reply("Lisbon")
    if "Tern build tool" in first:
        return _researcher(request["messages"])
    turns = sum(1 for m in request["messages"] if m.get("role") == "assistant")
    if "cities.txt" in first:
        command = (
            f"python3 /root/skills/ask_llm/ask.py '{QUESTION}' > /tmp_workspace/results/answer.txt"
            f" && python3 -c 'import {PROBE_MODULE}; print({PROBE_MODULE}.VALUE)'"
            " > /tmp_workspace/results/probe.txt"
        )
    elif "incident.txt" in first:
        command = (
            "echo 'A full cache broke the build; clearing it fixed it.'"
            " > /tmp_workspace/results/summary.txt"
        )
    elif "poem.txt" in first:
        command = "wc -w < /tmp_workspace/poem.txt > /tmp_workspace/results/words.txt"
    elif "scores.json" in first:
        command = (
            "jq '[.[].points] | add' /tmp_workspace/scores.json > /tmp_workspace/results/total.txt"
            " && jq --version > /tmp_workspace/results/jq_version.txt"
        )
    else:
        command = f"{NPM_PROBE} > /tmp_workspace/results/npm.txt"
    steps = [reply(tool_calls=[call("exec", {"command": command})]), reply("done")]
    return steps[min(turns, len(steps) - 1)]


def judge(request: dict) -> Reply:
    """Accepts the summary (the grader's question names the rubric's cause)."""
    assert "names the cause (cache)" in request["messages"][0]["content"]
    return reply("1.0")


async def run_suite(
    job: JobConfig, tasks: list[Task], model: ScriptedServer, judge_server: ScriptedServer
) -> dict[str, Any]:
    """Run ``job`` on ``tasks`` with ``model`` (serving :func:`responder`) and ``judge_server``
    (serving :func:`judge`) behind one model gateway; returns the job summary
    (:func:`clawrig.runner.batch.run_job`)."""
    with Gateway() as gateway:
        services = TrialServices(
            model=model.chat_model(),
            judge=judge_server.chat_model(),
            gateway=gateway,
            web=WebService.for_job(job),
        )
        return await run_job(job, tasks, services)
