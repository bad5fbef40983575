"""The throughput workload through Inspect AI (run by benchmarks/throughput.py when the `bench`
extra is installed): basic_agent with its bash tool, mockllm/model emitting 5 bash calls per
sample then an answer, local sandbox, --display none. Prints one JSON line."""

from __future__ import annotations

import json
import sys
import time

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import basic_agent
from inspect_ai.tool import bash

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def _with_usage(out: ModelOutput) -> ModelOutput:
    # mockllm would count tokens with tiktoken, which downloads its BPE file: offline, give
    # the usage (10 in / 5 out, as clawrig's scripted server reports) instead
    out.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    return out


def outputs():
    while True:
        for _ in range(5):
            yield _with_usage(
                ModelOutput.for_tool_call("mockllm/model", "bash", {"cmd": "echo hi"})
            )
        yield _with_usage(ModelOutput.from_content("mockllm/model", "hi"))


task = Task(
    dataset=[Sample(input=f"say hi {i}", target="hi") for i in range(N)],
    solver=basic_agent(tools=[bash()], max_attempts=1),
    scorer=includes(),
    sandbox="local",
)
t = time.perf_counter()
logs = eval(
    task,
    model=get_model("mockllm/model", custom_outputs=outputs()),
    display="none",
    max_samples=32,
    log_dir="/tmp/inspect-bench-logs",
)
wall = time.perf_counter() - t
print(json.dumps({"samples_per_s": N / wall, "wall_s": wall, "status": logs[0].status}))
