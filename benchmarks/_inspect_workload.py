"""The throughput workload through Inspect AI (run by benchmarks/throughput.py when inspect-ai
is installed): basic_agent with Inspect's own bash tool, a model emitting 5 bash calls per
sample (with the tool's real argument name, read from its schema; each reply decided from the
sample's own conversation) then a submit, the local sandbox, --display none, at its fastest
settings found (``max_connections`` as many as the samples at once, ``log_realtime`` off).
Every sample of the log is checked (5 tool results saying "hi", one submit, score C). Prints
one JSON line: samples/s of ``eval()`` alone (Inspect's import and exit left out, as
throughput.py says).

MODEL: ``mockllm`` (default: Inspect's in-process mock model, no HTTP) or ``server``: Inspect's
OpenAI-compatible provider (``openai-api/scripted/bench``: ``SCRIPTED_BASE_URL`` and
``SCRIPTED_API_KEY``) against benchmarks/throughput.py's scripted server, the model stand-in
clawrig's runs call, which answers Inspect's tools the same way.

Usage: python _inspect_workload.py N MAX_SAMPLES LOG_DIR [MODEL]
"""

from __future__ import annotations

import datetime
import json
import sys
import time

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import basic_agent
from inspect_ai.tool import ToolDef, bash

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
MAX_SAMPLES = int(sys.argv[2]) if len(sys.argv) > 2 else 32
LOG_DIR = sys.argv[3] if len(sys.argv) > 3 else "/tmp/inspect-bench-logs"
MODEL = sys.argv[4] if len(sys.argv) > 4 else "mockllm"
CALLS = 5

# the bash tool's one parameter, as Inspect declares it (no guessing its name)
BASH_ARG = next(iter(ToolDef(bash()).parameters.properties))


def _with_usage(out: ModelOutput) -> ModelOutput:
    # mockllm would count tokens with tiktoken, which downloads its BPE file: offline, give
    # the usage (10 in / 5 out, as clawrig's scripted server reports) instead
    out.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    return out


def respond(messages, tools, tool_choice, config):  # type: ignore[no-untyped-def]
    """Like clawrig's scripted responder: answers from the conversation so far (concurrent
    samples never share a sequence), 5 bash calls then a submit."""
    done = sum(1 for m in messages if m.role == "tool")
    if done < CALLS:
        return _with_usage(
            ModelOutput.for_tool_call("mockllm/model", "bash", {BASH_ARG: "echo hi"})
        )
    return _with_usage(ModelOutput.for_tool_call("mockllm/model", "submit", {"answer": "hi"}))


def _epoch(when: object) -> float:
    """A sample's ``started_at`` (an ISO string or a datetime) as epoch seconds."""
    if isinstance(when, datetime.datetime):
        return when.timestamp()
    return datetime.datetime.fromisoformat(str(when)).timestamp()


def check(sample) -> bool:  # type: ignore[no-untyped-def]
    """5 bash results saying hi, one submit call, score C."""
    tool_results = [m for m in sample.messages if m.role == "tool"]
    bash_ok = [
        m for m in tool_results if m.function == "bash" and m.error is None and "hi" in m.text
    ]
    submits = [
        c
        for m in sample.messages
        if m.role == "assistant"
        for c in (m.tool_calls or [])
        if c.function == "submit"
    ]
    score = next(iter(sample.scores.values())).value if sample.scores else None
    return len(bash_ok) == CALLS and len(submits) == 1 and score == "C"


task = Task(
    dataset=[Sample(input=f"say hi {i}", target="hi") for i in range(N)],
    solver=basic_agent(tools=[bash()], max_attempts=1, message_limit=50),
    scorer=includes(),
    sandbox="local",
)
t = time.perf_counter()
logs = eval(
    task,
    model=(
        get_model("openai-api/scripted/bench")
        if MODEL == "server"
        else get_model("mockllm/model", custom_outputs=respond)
    ),
    display="none",
    max_samples=MAX_SAMPLES,
    # Inspect at its fastest settings found for this workload (helper-216): its model
    # connections as many as the samples at once (the default, adaptive from 20 to 100, held
    # a latency-bound run to 100 calls at a time: at -p 300, 2 s a call, 44.8 s vs 33.9 s),
    # and no realtime sample buffer for `inspect view` (10-20% less CPU per sample); its
    # subprocesses at the default (2: raising it did not help here)
    max_connections=MAX_SAMPLES,
    log_realtime=False,
    log_dir=LOG_DIR,
)
wall = time.perf_counter() - t
samples = logs[0].samples or []
print(
    json.dumps(
        {
            "samples_per_s": N / wall,
            "eval_wall_s": wall,
            "status": logs[0].status,
            "checked_ok": sum(1 for s in samples if check(s)),
            "bash_arg": BASH_ARG,
            # epoch seconds when the first sample started (benchmarks/startup.py)
            "first_sample_started": min(
                (_epoch(s.started_at) for s in samples if s.started_at), default=None
            ),
        }
    )
)
