"""RL benchmark (issue 15): episodes per second for groups of 8 on one task with the scripted
model (no delay, and 1 s per model call), sandbox start per episode, and the model gateway's
overhead per request with token capture on and off.

Goals on a 2-core machine: a group of 8 starts all its sandboxes in under 0.5 s in total (the
sum of the 8 episodes' sandbox_start phases), and token capture adds under 1 ms per request.

The task is demo 000015; the scripted policy (a real OpenAI-compatible HTTP server on loopback,
:mod:`clawrig.testing.scripted_server`, speaking vLLM's token extensions) writes the answer in
one tool call, then says done: two model calls per episode. Usage:
``python benchmarks/rl.py [--groups 3] [--requests 300] [--delay 1.0]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from clawrig.llm.client import RetryPolicy
from clawrig.llm.gateway import Gateway
from clawrig.rl import Rollouts
from clawrig.tasks.registry import load_tasks
from clawrig.testing.paths import REPO
from clawrig.testing.scripted_server import Reply, ScriptedServer, call, reply

DEMO = REPO / "suites" / "demo"
ANSWER = "# shortest\nVikram Shah – Berta Alonso – Saif Hamdan\n"
MESSAGES = [{"role": "user", "content": "Say hi."}]


def policy(delay: float):
    def answer(request: dict[str, Any]) -> Reply:
        if any(m.get("role") == "tool" for m in request["messages"]):
            return reply("done", delay=delay)
        path = "/tmp_workspace/results/results.md"
        return reply(tool_calls=[call("write", {"path": path, "content": ANSWER})], delay=delay)

    return answer


async def groups_of_8(groups: int, delay: float, out: Path) -> None:
    task = next(t for t in load_tasks(DEMO) if t.id == "000015")
    with ScriptedServer(responder=policy(delay)) as srv:
        async with Rollouts(out, retry=RetryPolicy(attempts=2, initial_s=0.01)) as env:
            # one warm-up episode (imports, first sandbox, grader's Python) not counted
            await env.run_episode(task, base_url=srv.base_url, model="policy", server="vllm")
            walls, starts, rewards = [], [], []
            for g in range(groups):
                t0 = time.perf_counter()
                group = await env.run_group(
                    task, 8, base_url=srv.base_url, model="policy", server="vllm", seed=g * 8
                )
                walls.append(time.perf_counter() - t0)
                starts.append([e.timings.get("sandbox_start", 0.0) for e in group.episodes])
                rewards += [e.reward for e in group.episodes]
    per_start = [s for g in starts for s in g]
    totals = [sum(g) for g in starts]
    label = f"model delay {delay:g} s/call"
    print(f"groups of 8, {label}:")
    print(
        f"  episodes/s            {8 * groups / sum(walls):7.2f}   (group wall median "
        f"{statistics.median(walls):.2f} s, n={groups})"
    )
    print(
        f"  sandbox start/episode median {statistics.median(per_start) * 1000:7.1f} ms   "
        f"max {max(per_start) * 1000:7.1f} ms"
    )
    print(
        f"  sandbox_start phases per group (sum of 8) median {statistics.median(totals):.3f} s"
        f"   max {max(totals):.3f} s"
    )
    assert all(r == 1.0 for r in rewards), rewards  # the scripted answer is right


async def eight_sandboxes_at_once(reps: int, out: Path) -> None:
    """Wall time to bring up a group's 8 sandboxes at once (the task's workspace copied in,
    bwrap started, supervisor answering), as a trial does in its sandbox_start phase."""
    from clawrig.sandbox import SandboxConfig, create_sandbox
    from clawrig.sandbox.workspace import materialise_workspace

    task = next(t for t in load_tasks(DEMO) if t.id == "000015")
    walls = []
    for r in range(reps + 1):
        boxes = []
        t0 = time.perf_counter()

        async def up(i: int, r: int = r) -> Any:
            ws = out / f"r{r}" / f"ws{i}"
            materialise_workspace(task, ws)
            sb = create_sandbox("bwrap", SandboxConfig(workspace_dir=ws))
            await sb.start()
            return sb

        boxes = await asyncio.gather(*(up(i) for i in range(8)))
        wall = time.perf_counter() - t0
        await asyncio.gather(*(b.stop() for b in boxes))
        if r:  # the first round warms the page cache
            walls.append(wall)
    print(
        f"8 sandboxes started at once: wall median {statistics.median(walls):.3f} s   "
        f"max {max(walls):.3f} s   (n={reps}; goal < 0.5 s)"
    )


async def gateway_overhead(n: int) -> None:
    with ScriptedServer(responder=lambda req: reply("hi")) as srv, Gateway() as gw:
        direct = srv.chat_model()
        off = gw.open_trial(srv.endpoint("vllm/q"), trial_id="off", token_capture=False)
        on = gw.open_trial(srv.endpoint("vllm/q"), trial_id="on")
        tmp = Path(tempfile.mkdtemp(prefix="clawrig-bench-rl-"))
        rec_off = gw.open_trial(
            srv.endpoint("vllm/q"), trial_id="roff", record_path=tmp / "off.jsonl",
            token_capture=False,
        )  # fmt: skip
        rec_on = gw.open_trial(srv.endpoint("vllm/q"), trial_id="ron", record_path=tmp / "on.jsonl")
        models = {
            "direct (no gateway)": direct,
            "gateway, capture off": off.chat_model(),
            "gateway, capture on": on.chat_model(),
            "gateway + record, capture off": rec_off.chat_model(),
            "gateway + record, capture on": rec_on.chat_model(),
        }
        times: dict[str, list[float]] = {k: [] for k in models}
        for m in models.values():  # warm connections
            await m.chat(MESSAGES)
        for _ in range(n):  # interleaved, so load changes hit every mode alike
            for name, m in models.items():
                t = time.perf_counter()
                await m.chat(MESSAGES)
                times[name].append((time.perf_counter() - t) * 1000)
        for m in models.values():
            await m.aclose()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"gateway per request (median of {n}, ms):")
    for name, value in med.items():
        print(f"  {name:<32} {value:7.3f}")
    base = med["direct (no gateway)"]
    print(f"  gateway overhead, capture off     {med['gateway, capture off'] - base:7.3f}")
    print(f"  gateway overhead, capture on      {med['gateway, capture on'] - base:7.3f}")
    added = med["gateway + record, capture on"] - med["gateway + record, capture off"]
    print(f"  token capture adds (recorded)     {added:7.3f}   (goal < 1 ms)")


async def main(groups: int, requests: int, delay: float) -> None:
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} cores (numbers scale with load)")
    await gateway_overhead(requests)
    out = Path(tempfile.mkdtemp(prefix="clawrig-bench-rl-"))
    await eight_sandboxes_at_once(5, out / "boxes")
    await groups_of_8(groups, 0.0, out / "nodelay")
    await groups_of_8(max(1, groups // 2), delay, out / "delay")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=3, help="groups of 8 per setting")
    parser.add_argument("--requests", type=int, default=300, help="requests per gateway mode")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds per model call")
    args = parser.parse_args()
    asyncio.run(main(args.groups, args.requests, args.delay))
