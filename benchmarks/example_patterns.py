"""examples/wildclaw-patterns run twice on an environment: the second run of each task starts
from the warm snapshot the first made (issue 13, "Done when").

Usage::

    python benchmarks/example_patterns.py [--sandbox bwrap|docker] [--env base|wildclaw|FILE]

Two jobs, one after the other, with the example's scripted agent and judge
(``examples/wildclaw-patterns/scripted.py``), its probe packages served on 127.0.0.2, the web
task answered from ``web/`` and a warm-snapshot cache of its own (emptied first, so run 1 makes
every snapshot). Prints per task: the ``warm`` phase (environment + snapshot: made in run 1,
reused in run 2), the setup phase (skills and the warmup lines a snapshot cannot hold) and the
whole trial, in seconds, and the score. The npm task needs node (``--env wildclaw``); on
``base`` it is left out. The environment is built first when missing (minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clawrig.env.spec import load_env_spec
from clawrig.env.store import env_cache_root
from clawrig.errors import UserError
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_tasks
from clawrig.testing.scripted_server import ScriptedServer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "wildclaw-patterns"


def _scripted():
    spec = importlib.util.spec_from_file_location("wildclaw_patterns", EXAMPLE / "scripted.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


async def one_run(out: Path, sandbox: str, environment: str, tasks, scripted) -> dict[str, dict]:
    model = ScriptedServer(responder=scripted.responder).start()
    judge = ScriptedServer(responder=scripted.judge).start()
    job = JobConfig(
        suite_path=EXAMPLE / "tasks",
        output=out,
        web_dir=EXAMPLE / "web",
        parallel=2,
        trial=TrialConfig(
            agent="native",
            model="scripted/x",
            sandbox=sandbox,
            environment=environment,
            web="corpus",
        ),
    )
    try:
        await scripted.run_suite(job, tasks, model, judge)
    finally:
        model.stop()
        judge.stop()
    rows = {}
    for path in out.glob("*/*/result.json"):
        r = json.loads(path.read_text())
        t = r["timings"]
        rows[r["task_id"]] = {
            "warm": t.get("warm", 0.0),
            "setup": t.get("setup", 0.0),
            "total": sum(t.values()),
            "score": (r.get("score") or {}).get("score"),
            "snapshot": r["versions"].get("warm_snapshot"),
            "error": (r.get("error") or {}).get("message", "")[:80],
        }
    return rows


async def main_async(sandbox: str, environment: str) -> None:
    scripted = _scripted()
    spec = load_env_spec(environment)
    tasks = load_tasks(EXAMPLE / "tasks")
    if "nodejs" not in spec.debian:
        tasks = [t for t in tasks if "npm_tool" not in t.id]
    base = Path(tempfile.mkdtemp(prefix="clawrig-bench-example-"))
    cache = base / "env-cache"  # built environments shared, warm snapshots private
    cache.mkdir()
    shared = env_cache_root() / "environments"
    shared.mkdir(parents=True, exist_ok=True)  # a cache folder not made yet (a new user's)
    (cache / "environments").symlink_to(shared)
    os.environ["CLAWRIG_ENV_CACHE_DIR"] = str(cache)
    runs = []
    try:
        with scripted.local_registries() as settings:
            os.environ.update(settings)
            for i in (1, 2):
                started = time.perf_counter()
                rows = await one_run(base / f"run{i}", sandbox, environment, tasks, scripted)
                runs.append((rows, time.perf_counter() - started))
    finally:
        if sandbox == "docker":
            keys = {r["snapshot"] for rows, _ in runs for r in rows.values() if r["snapshot"]}
            for key in keys:
                subprocess.run(["docker", "rmi", "-f", f"clawrig-warm:{key}"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    (first, t1), (second, t2) = runs
    print(f"examples/wildclaw-patterns on {environment} ({sandbox}), -p 2; seconds")
    print(f"{'task':<44} {'warm 1':>7} {'warm 2':>7} {'setup 1':>8} {'setup 2':>8}", end="")
    print(f" {'trial 1':>8} {'trial 2':>8}  score 1/2  snapshot")
    for task_id in sorted(first):
        a, b = first[task_id], second.get(task_id, {})
        same = "same" if a["snapshot"] and a["snapshot"] == b.get("snapshot") else "-"
        print(
            f"{task_id[:44]:<44} {a['warm']:7.2f} {b.get('warm', 0):7.2f} {a['setup']:8.2f}"
            f" {b.get('setup', 0):8.2f} {a['total']:8.2f} {b.get('total', 0):8.2f}"
            f"  {a['score']}/{b.get('score')}  {same} {a['error'] or b.get('error', '')}"
        )
    print(f"{'whole job':<44} {'':>7} {'':>7} {'':>8} {'':>8} {t1:8.2f} {t2:8.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", default="bwrap", choices=["bwrap", "docker"])
    parser.add_argument("--env", default="base", help="base | wildclaw | a spec file")
    args = parser.parse_args(argv)
    try:
        asyncio.run(main_async(args.sandbox, args.env))
    except UserError as exc:  # e.g. no mmdebstrap to build the environment: one line
        print(f"example_patterns.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
