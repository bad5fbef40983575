"""Per-request overhead of the model gateway, and what token capture adds to it.

The upstream is the scripted OpenAI-compatible server in its own process (so its work does not
compete with the harness for the interpreter lock), answering at once. The client is clawrig's
``OpenAIChatModel`` (the native agent's), sending an agent-sized request: a 17-tool list and a
conversation of ``--turns`` turns (about 20 kB of JSON, ~2,000 scripted prompt tokens). Modes,
each timed over ``--n`` sequential calls per round, rounds interleaved, medians of ``--rounds``:

- ``direct``: the client straight to the server (no gateway);
- ``direct+tokens``: the same, asking vLLM's token fields (``return_token_ids``, ``logprobs``)
  itself, so the server's reply is as large as with capture on;
- ``tcp``: through the gateway (a lease of a trial, recording model_calls.jsonl) over its TCP
  listener and server thread (two HTTP hops: how every host-side call went before), to a
  non-token upstream: capture off;
- ``tcp+capture``: the same to the same server declared as vLLM: the gateway asks for token ids
  and logprobs and records them;
- ``in-process`` / ``in-process+capture``: the lease's chat model as the native agent now uses
  it: the gateway's app in the caller's event loop (``httpx.ASGITransport``), one HTTP hop;
- ``--stream`` runs the same modes streamed.

Printed per mode: median milliseconds per request, and the gateway's overhead (mode - ``direct``
without capture, mode - ``direct+tokens`` with it); the capture's own cost is the difference of
the two overheads. Also the CPU of the capture code alone (extracting the tokens of one reply
and encoding them into the record line; ``time.process_time``, so other processes on the
machine do not count).

Usage: ``python benchmarks/gateway.py [--n 100] [--rounds 5] [--turns 10] [--stream]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import httpx

from clawrig.llm.client import OpenAIChatModel, RetryPolicy
from clawrig.llm.gateway import RECORD_FILE, Gateway
from clawrig.llm.gateway.tokens import tokens_from_completion
from clawrig.llm.providers import ModelEndpoint
from clawrig.testing.scripted_server import _completion_pieces, reply, scripted_token_id
from clawrig.tools.catalog import Toolset

REPLY = "I will list the folder first, then read the file it holds and answer. " * 3


def conversation(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a careful coding agent. " * 120}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Step {i}: look at file_{i}.txt. " * 20})
        msgs.append({"role": "assistant", "content": REPLY})
    msgs.append({"role": "user", "content": "Now answer."})
    return msgs


def start_server(calls: int) -> tuple[subprocess.Popen, str]:
    script = Path(tempfile.mkdtemp(prefix="clawrig-bench-gw-")) / "script.json"
    script.write_text(json.dumps([{"content": REPLY}] * calls))
    proc = subprocess.Popen(
        [sys.executable, "-m", "clawrig.testing.scripted_server", "--script", str(script)]
        + ["--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()  # "scripted OpenAI-compatible server: http://.../v1 (...)"
    base_url = line.split(": ", 1)[1].split()[0]
    for _ in range(100):
        try:
            httpx.get(f"{base_url}/models", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    return proc, base_url


async def timed(model, messages, tools, n: int, extra: dict | None) -> tuple[float, float]:
    """(median wall seconds per request, this process's CPU seconds per request) over ``n``
    sequential requests (the server is another process: the CPU is the client's and the
    gateway's)."""
    times = []
    cpu = time.process_time()
    for _ in range(n):
        t = time.perf_counter()
        await model.chat(messages, tools=tools, extra=extra)
        times.append(time.perf_counter() - t)
    return statistics.median(times), (time.process_time() - cpu) / n


async def main_async(args: argparse.Namespace) -> None:
    rounds, n = args.rounds, args.n
    proc, base_url = start_server(calls=6 * (n * rounds + 2) + 16)
    retry = RetryPolicy(attempts=1)
    plain = ModelEndpoint(
        name="scripted/scripted", provider="scripted", model_id="scripted", base_url=base_url
    )
    vllm = plain.model_copy(update={"name": "vllm/scripted", "server": "vllm"})
    messages = conversation(args.turns)
    tools = Toolset().schema()
    body_kb = len(json.dumps({"messages": messages, "tools": tools})) / 1000
    folder = Path(tempfile.mkdtemp(prefix="clawrig-bench-gw-rec-"))
    gw = Gateway().start()
    try:
        off = gw.open_trial(plain, trial_id="off", record_path=folder / "off" / RECORD_FILE)
        on = gw.open_trial(vllm, trial_id="on", record_path=folder / "on" / RECORD_FILE)
        st = args.stream
        models = {
            "direct": (OpenAIChatModel(plain, retry=retry, stream=st), None),
            "direct+tokens": (
                OpenAIChatModel(plain, retry=retry, stream=st),
                {"return_token_ids": True, "logprobs": True},
            ),
            "tcp": (off.chat_model(stream=st, in_process=False), None),
            "tcp+capture": (on.chat_model(stream=st, in_process=False), None),
            "in-process": (off.chat_model(stream=st), None),
            "in-process+capture": (on.chat_model(stream=st), None),
        }
        for model, extra in models.values():  # warm up connections and code paths
            await timed(model, messages, tools, 2, extra)
        results: dict[str, list[float]] = {k: [] for k in models}
        cpus: dict[str, list[float]] = {k: [] for k in models}
        for _ in range(rounds):
            for name, (model, extra) in models.items():
                wall, cpu = await timed(model, messages, tools, n, extra)
                results[name].append(wall)
                cpus[name].append(cpu)
        for model, _ in models.values():
            await model.aclose()
        recorded = [json.loads(x) for x in (folder / "on" / RECORD_FILE).read_text().splitlines()]
    finally:
        gw.stop()
        proc.terminate()
        proc.wait()

    med = {k: statistics.median(v) * 1000 for k, v in results.items()}
    cpu = {k: statistics.median(v) * 1000 for k, v in cpus.items()}
    spread = {k: (min(v) * 1000, max(v) * 1000) for k, v in results.items()}
    print(
        f"gateway per-request overhead ({'streamed' if args.stream else 'plain'}), request "
        f"{body_kb:.0f} kB, {n} calls x {rounds} rounds; per request: median wall ms (spread "
        "of the rounds), harness CPU ms (client + gateway; the server is another process):"
    )
    for k in models:
        lo, hi = spread[k]
        print(f"  {k:<20} wall {med[k]:7.2f} ms ({lo:.2f}-{hi:.2f})   CPU {cpu[k]:6.2f} ms")
    for path in ("tcp", "in-process"):
        for label, m in (("wall", med), ("CPU ", cpu)):
            off_ms = m[path] - m["direct"]
            on_ms = m[f"{path}+capture"] - m["direct+tokens"]
            print(
                f"  {path:<11} gateway overhead {label}: capture off {off_ms:6.2f} ms, "
                f"on {on_ms:6.2f} ms; capture adds {on_ms - off_ms:5.2f} ms per request"
            )

    # the capture code alone: extract one reply's tokens, encode them into a record line
    cap = recorded[-1]["token_capture"]
    prompt_ids = cap["prompt_token_ids"]
    pieces = _completion_pieces(reply(REPLY), [])
    completion = {
        "prompt_token_ids": prompt_ids,
        "choices": [
            {
                "message": {"role": "assistant", "content": REPLY},
                "token_ids": [scripted_token_id(p) for p in pieces],
                "logprobs": {
                    "content": [
                        {"token": p, "logprob": -0.5, "bytes": [], "top_logprobs": []}
                        for p in pieces
                    ]
                },
            }
        ],
    }
    reps = 2000
    timer = timeit.Timer(
        lambda: json.dumps({"token_capture": tokens_from_completion("vllm", completion)}),
        timer=time.process_time,
    )
    secs = min(timer.repeat(repeat=3, number=reps))
    print(
        f"  capture CPU alone: {secs / reps * 1e6:.0f} us per request "
        f"({len(prompt_ids)} prompt + {len(pieces)} completion tokens)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100, help="sequential requests per mode per round")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median of them)")
    p.add_argument("--turns", type=int, default=10, help="conversation turns in the request")
    p.add_argument("--stream", action="store_true", help="streamed requests")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
