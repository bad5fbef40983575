"""Throughput benchmark (issue 5): jobs of N trials of a tiny task whose agent makes 5 exec
calls (`echo hi`) and then answers, graded by a trivial grade() in the sandbox, against the
scripted model server with no delay, at --parallel 1, 8, 32 and 128.

Prints trials/s, tool calls/s, harness overhead per trial and per tool call (ms, model time
excluded), the start-up time of the `clawrig` command, and peak RSS. When inspect-ai is
installed (`pip install -e '.[bench]'`), runs the same workload through Inspect (basic_agent
with its bash tool, mockllm/model emitting the 5 calls per sample, local sandbox) and prints
the ratios side by side.

Usage: python benchmarks/throughput.py [--trials 200] [--parallel 1,8,32,128]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from clawrig.runner.batch import run_job
from clawrig.runner.trial import TrialServices
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.spec.llm import ChatResponse
from clawrig.tasks.registry import load_tasks
from clawrig.testing.scripted_server import call, reply

CALLS = 5
TASK = """---
id: bench_task_{k}
name: Bench {k}
category: 01_Productivity_Flow
timeout_seconds: 120
---

## Prompt

Say hi five times with exec, then answer. BENCH={k}

## Automated Checks

```python
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    calls = sum(1 for e in transcript or [] if e.get("type") == "message"
                for b in e["message"].get("content", []) if b.get("type") == "toolCall")
    return {"calls": calls, "overall_score": 1.0 if calls == 5 else 0.0}
```

## Workspace Path

```
workspace/bench
```
"""


def responder(request: dict[str, Any]):
    done = sum(1 for m in request["messages"] if m.get("role") == "tool")
    if done < CALLS:
        return reply(tool_calls=[call("exec", {"command": "echo hi"})])
    return reply("all done")


class TimedModel:
    """Wraps a ChatModel and sums the seconds spent waiting for the model."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = inner.name
        self.model_s = 0.0

    async def chat(self, messages: list[dict[str, Any]], **kw: Any) -> ChatResponse:
        t = time.perf_counter()
        try:
            return await self.inner.chat(messages, **kw)
        finally:
            self.model_s += time.perf_counter() - t


def make_bench(root: Path, n: int) -> Path:
    tasks = root / "tasks"
    tasks.mkdir(parents=True)
    (root / "workspace" / "bench" / "exec").mkdir(parents=True)
    for k in range(n):
        (tasks / f"bench_task_{k}.md").write_text(TASK.replace("{k}", str(k)))
    return tasks


class ModelServer:
    """The scripted model server in its own process (it is the model, not the harness)."""

    def __enter__(self) -> ModelServer:
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "clawrig.testing.scripted_server",
                "--responder",
                "throughput:responder",
                "--port",
                "0",
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        self.base_url = line.split(": ", 1)[1].split()[0]
        return self

    def model(self) -> Any:
        from clawrig.llm.client import get_model
        from clawrig.llm.providers import load_settings

        settings = load_settings(environ={"SCRIPTED_BASE_URL": self.base_url})
        return get_model("scripted/bench", settings)

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait()


def run_clawrig(n: int, parallel: int, base: Path) -> dict[str, float]:
    tasks_dir = make_bench(base / f"bench-{parallel}", n)
    tasks = load_tasks(tasks_dir)
    with ModelServer() as srv:
        model = TimedModel(srv.model())
        job = JobConfig(
            suite_path=tasks_dir,
            parallel=parallel,
            output=base / f"out-{parallel}",
            trial=TrialConfig(
                agent="native", model="scripted/bench", max_processes=256, memory_mb=1024
            ),
        )
        t = time.perf_counter()
        summary = asyncio.run(run_job(job, tasks, TrialServices(model=model)))
        wall = time.perf_counter() - t
    assert summary["error_count"] == 0, summary["errors_by_kind"]
    assert summary["overall_score"] == 1.0, summary["overall_score"]
    calls = n * CALLS
    # harness overhead = wall time not spent waiting for the model; meaningful per trial and
    # per call only when trials run one at a time
    per_trial_ms = per_call_ms = float("nan")
    if parallel == 1:
        per_trial_ms = (wall - model.model_s) / n * 1000
        per_call_ms = (wall - model.model_s) / calls * 1000
    return {
        "trials_per_s": n / wall,
        "calls_per_s": calls / wall,
        "overhead_per_trial_ms": per_trial_ms,
        "overhead_per_call_ms": per_call_ms,
        "wall_s": wall,
    }


def startup_s() -> float:
    exe = shutil.which("clawrig") or str(Path(sys.executable).with_name("clawrig"))
    times = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([exe, "version"], check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def per_tool_call_overhead_ms() -> float:
    """Harness time of one exec tool call minus the command's own time (one sandbox)."""
    from clawrig.sandbox import SandboxConfig, create_sandbox
    from clawrig.tools.base import ToolContext
    from clawrig.tools.catalog import Toolset

    async def go() -> float:
        ws = Path(tempfile.mkdtemp(prefix="clawrig-bench-ws-"))
        sb = create_sandbox("bwrap", SandboxConfig(workspace_dir=ws))
        await sb.start()
        try:
            ts, ctx = Toolset("coding"), ToolContext(sandbox=sb)
            samples = []
            for _ in range(200):
                t = time.perf_counter()
                res = await ts.call(ctx, "exec", '{"command": "echo hi"}')
                total = time.perf_counter() - t
                own = (res.details or {}).get("durationMs", 0) / 1000
                samples.append((total - own) * 1000)
            return statistics.median(samples)
        finally:
            await sb.stop()
            shutil.rmtree(ws, ignore_errors=True)

    return asyncio.run(go())


def run_inspect(n: int) -> dict[str, float] | None:
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        return None
    script = Path(__file__).with_name("_inspect_workload.py")
    env = dict(os.environ, HOME=tempfile.mkdtemp(prefix="inspect-home-"))
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, str(script), str(n)], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - t
    if r.returncode != 0:
        print("inspect run failed:", r.stderr[-500:])
        return None
    data = json.loads(r.stdout.strip().splitlines()[-1])
    data["wall_s"] = wall
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--parallel", default="1,8,32,128")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="clawrig-throughput-"))
    try:
        print(f"clawrig start-up (clawrig version): {startup_s() * 1000:.0f} ms")
        print(f"exec tool call harness overhead: {per_tool_call_overhead_ms():.2f} ms median")
        rows = {}
        for p in [int(x) for x in args.parallel.split(",")]:
            rows[p] = run_clawrig(args.trials, p, base)
            r = rows[p]
            print(
                f"--parallel {p:>3}: {r['trials_per_s']:7.2f} trials/s  "
                f"{r['calls_per_s']:8.1f} tool calls/s  wall {r['wall_s']:6.1f} s  "
                f"harness per trial {r['overhead_per_trial_ms']:7.1f} ms",
                flush=True,
            )
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS (harness process): {rss:.0f} MB")
        insp = run_inspect(args.trials)
        if insp is None:
            print("inspect-ai not installed: pip install -e '.[bench]' to compare")
        else:
            best = max(r["trials_per_s"] for r in rows.values())
            print(
                f"inspect: {insp['samples_per_s']:.2f} samples/s; clawrig best "
                f"{best:.2f} trials/s = {best / insp['samples_per_s']:.1f}x"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
