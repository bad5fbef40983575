"""The held-out check (issue 13): the real WildClawBench task files, each with a placeholder
workspace, run with ``--agent nop``; how many trials get through setup (skills, warmup) to
grading?

Usage::

    python benchmarks/wildclaw_heldout.py TASKS_ROOT [-p 4] [--setup-network registries]
        [--keep DIR]

``TASKS_ROOT`` is a folder holding upstream's ``tasks/`` (a clone of the WildClawBench
repository, or the task files alone; nothing of them is committed here). The script copies the
task files into a temporary benchmark root, makes a placeholder workspace for each task's
``## Workspace Path`` (``exec/PLACEHOLDER.txt``, empty ``tmp/`` and ``gt/``), links upstream's
``skills/`` when the root has one, runs the suite with the nop agent through the job runner
(the egress proxy lets the setup phase reach the package registries), and prints one JSON
object: ``reached_grading`` of ``trials``, and the setup errors grouped by their first line.
A trial reaches grading when its ``result.json`` timings hold a ``grading`` phase.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from clawrig.llm.gateway import Gateway
from clawrig.runner.batch import run_job
from clawrig.runner.trial import TrialServices
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_suite


def placeholder_root(source: Path, dest: Path) -> Path:
    """Copy ``source/tasks`` to ``dest/tasks`` and make a placeholder workspace per task."""
    shutil.copytree(source / "tasks", dest / "tasks")
    if (source / "skills").is_dir():
        (dest / "skills").symlink_to((source / "skills").resolve())
    for task in load_suite(dest / "tasks").tasks:
        rel = task.metadata.get("workspace_path")
        if not rel:
            continue
        ws = dest / rel
        (ws / "exec").mkdir(parents=True, exist_ok=True)
        (ws / "exec" / "PLACEHOLDER.txt").write_text("placeholder workspace (held-out check)\n")
        (ws / "tmp").mkdir(exist_ok=True)
        (ws / "gt").mkdir(exist_ok=True)
    return dest


async def run(root: Path, out: Path, parallel: int, setup_network: str) -> dict:
    suite = load_suite(root / "tasks")
    tasks = suite.tasks
    job = JobConfig(
        suite_path=root / "tasks",
        output=out,
        parallel=parallel,
        max_attempts=1,
        trial=TrialConfig(agent="nop", setup_network=setup_network),
    )
    started = time.monotonic()
    with Gateway() as gateway:
        await run_job(job, tasks, TrialServices(gateway=gateway))
    reached, why = 0, collections.Counter()
    trials = 0
    for result in sorted(out.glob("*/*/result.json")):
        trials += 1
        data = json.loads(result.read_text())
        if "grading" in data.get("timings", {}):
            reached += 1
        else:
            err = data.get("error") or {}
            first = str(err.get("message", "")).splitlines()
            why[f"{err.get('kind')}: {first[0][:160] if first else ''}"] += 1
    return {
        "tasks": len(tasks),
        "trials": trials,
        "reached_grading": reached,
        "skipped_files": [str(i.path.name) for i in suite.warnings if "skipped" in i.message],
        "not_reached": dict(why.most_common()),
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a folder holding upstream's tasks/")
    parser.add_argument("-p", "--parallel", type=int, default=4)
    parser.add_argument("--setup-network", default="registries")
    parser.add_argument("--keep", type=Path, help="keep the benchmark root and output here")
    args = parser.parse_args(argv)
    if not (args.root / "tasks").is_dir():
        print(f"{args.root}: no tasks/ folder", file=sys.stderr)
        return 2
    base = args.keep or Path(tempfile.mkdtemp(prefix="clawrig-heldout-"))
    try:
        root = placeholder_root(args.root, base / "bench")
        report = asyncio.run(run(root, base / "output", args.parallel, args.setup_network))
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
