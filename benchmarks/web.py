"""Web benchmark: the corpus index (build time, search and fetch latency) and a replayed
web_fetch / web_search against a live one on a loopback server (what ``--web replay`` costs).

Prints median and p95 per operation. Usage: python benchmarks/web.py [--docs 20000] [--n 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from clawrig.serving import ThreadedServer, tcp_listener
from clawrig.tools import ToolContext, Toolset, WebPolicy
from clawrig.web import WebService

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "web"))
from web_helpers import WebServer, build_app  # noqa: E402

WORDS = [f"w{i}" for i in range(5000)]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def show(name: str, ms: list[float]) -> None:
    med, p95 = statistics.median(ms), pct(ms, 0.95)
    print(f"{name:<34} median {med:8.3f} ms   p95 {p95:8.3f} ms   (n={len(ms)})")


async def timed(n: int, fn) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        await fn(i)
        out.append((time.perf_counter() - t) * 1000)
    return out


async def main(docs: int, n: int) -> None:
    rng = random.Random(7)
    tools = Toolset("full")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        with corpus.open("w") as fh:
            for i in range(docs):
                text = " ".join(rng.choices(WORDS, k=200))
                fh.write(
                    json.dumps(
                        {
                            "url": f"https://site{i % 50}.example/p{i}",
                            "title": f"doc {i}",
                            "text": text,
                        }
                    )
                    + "\n"
                )
        t = time.perf_counter()
        svc = WebService("corpus", source=corpus)
        print(f"corpus index: {docs} documents of 200 words in {time.perf_counter() - t:.2f} s")
        ctx = ToolContext(
            sandbox=None, web=WebPolicy(mode="corpus"), web_backend=svc.session("b", 0, None)
        )  # type: ignore[arg-type]

        async def search(i: int) -> None:
            q = " ".join(rng.choices(WORDS, k=3))
            await tools.call(ctx, "web_search", json.dumps({"query": q, "count": 10}))

        async def fetch(i: int) -> None:
            await tools.call(
                ctx, "web_fetch", json.dumps({"url": f"https://site{i % 50}.example/p{i}"})
            )

        show("corpus web_search (3 words)", await timed(n, search))
        show("corpus web_fetch", await timed(n, fetch))

        sock = tcp_listener()
        state = WebServer(url=f"http://127.0.0.1:{sock.getsockname()[1]}")
        server = ThreadedServer(build_app(state), [sock], name="bench-web", lifespan="off").start()
        try:
            rec = Path(tmp) / "rec"
            policy = WebPolicy(mode="record", allow_hosts=["127.0.0.1"])
            live = ToolContext(
                sandbox=None,
                web=policy,
                web_backend=WebService("record", output=rec).session("b", 0, rec / "b" / "t"),
            )  # type: ignore[arg-type]
            url = json.dumps({"url": f"{state.url}/tern.html"})
            show(
                "record web_fetch (loopback page)",
                await timed(n, lambda i: tools.call(live, "web_fetch", url)),
            )
            replay = ToolContext(
                sandbox=None,
                web=WebPolicy(mode="replay", allow_hosts=["127.0.0.1"]),
                web_backend=WebService("replay", source=rec).session("b", 0, None),
            )  # type: ignore[arg-type]
            show("replay web_fetch", await timed(n, lambda i: tools.call(replay, "web_fetch", url)))
        finally:
            server.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--n", type=int, default=200)
    a = ap.parse_args()
    asyncio.run(main(a.docs, a.n))
