"""Ray executor benchmark (issue 16): trials/s on one node vs two when the model is the
bottleneck, and the scheduling overhead per trial vs the local executor.

Workload: benchmarks/throughput.py's task (5 ``exec`` calls, then an answer: 6 model calls
per trial, graded in the sandbox), its scripted model server in its own process. Every job's
summary must show 0 errors and every score 1.0, or its numbers are not used.

1. Scale-out: a ``ray.cluster_utils.Cluster`` whose nodes each advertise ``--slots`` CPUs
   (``--slots-per-node`` = slots), the model answering after ``--model-delay`` seconds (1 s):
   ``--trials`` trials on the head alone, then on head + one more node. trials/s counts the
   trials phase (first trial started to last trial ended, from the job's progress callback),
   not the workers' start-up. Goal: 2 nodes >= 1.8x one.
2. Overhead: the same tasks one at a time (one slot; model delay 0) with the local executor
   and with the Ray executor. Per trial: (wall the driver saw) - (the trial's own phases, from
   result.json), median over the trials; the difference between the executors is the cost of
   going through Ray (dispatch, leases, packing and unpacking the folder). The per-trial wall
   medians are printed too (the Ray side also pays the node gateway's hop on every model
   call). Goal: < 20 ms per trial.

On a 2-core machine the "nodes" share the same cores: the model-bound case still scales (the
trials wait on the model), CPU-bound work would not.

Usage: python benchmarks/ray.py [--trials 24] [--slots 4] [--model-delay 1.0]
       [--overhead-trials 12]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# this file is named ray.py: keep `import ray` from finding it instead of the Ray package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
_spec = importlib.util.spec_from_file_location("bench_throughput", HERE / "throughput.py")
assert _spec is not None and _spec.loader is not None
throughput = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(throughput)

from clawrig.runner.job import Job  # noqa: E402
from clawrig.spec.job import JobConfig, TrialConfig  # noqa: E402


def run_job(tasks: Path, out: Path, base_url: str, **kw: Any) -> dict[str, Any]:
    """One job in this process; returns wall times: ``phase_s`` (first trial start to last
    end), ``per_trial`` [(driver wall s, trial's own s)] when trials run one at a time."""
    os.environ["SCRIPTED_BASE_URL"] = base_url
    starts: list[float] = []
    ends: list[tuple[float, float]] = []

    def on_update(state: Any, result: Any) -> None:
        now = time.perf_counter()
        if result is None:
            starts.append(now)
        else:
            ends.append((now, float(result.usage.elapsed_time)))

    cfg = JobConfig(suite_path=tasks, output=out, trial=TrialConfig(model="scripted/bench"), **kw)
    summary = Job(cfg, on_update=on_update).run()
    scores = [r.get("score") for r in summary["tasks"]]
    if summary["error_count"] or not all(s == 1.0 for s in scores):
        raise RuntimeError(f"job in {out}: errors {summary['error_count']}, scores {scores}")
    per_trial = [(end - start, own) for start, (end, own) in zip(starts, ends, strict=False)]
    return {"phase_s": max(e for e, _ in ends) - min(starts), "per_trial": per_trial}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--model-delay", type=float, default=1.0)
    ap.add_argument("--overhead-trials", type=int, default=12)
    args = ap.parse_args()
    from ray.cluster_utils import Cluster

    base = Path(tempfile.mkdtemp(prefix="clawrig-bench-ray-"))
    tasks = throughput.make_bench(base / "bench", args.trials)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": args.slots, "include_dashboard": False},
    )
    try:
        ray_kw = {"executor": "ray", "ray_address": cluster.address}
        small = throughput.make_bench(base / "small", args.overhead_trials)
        with throughput.ModelServer(0.0) as srv:  # one node, one slot: one trial at a time
            local = run_job(small, base / "local", srv.base_url, parallel=1)
            on_ray = run_job(small, base / "ray", srv.base_url, slots_per_node=1, **ray_kw)
        with throughput.ModelServer(args.model_delay) as srv:
            one = run_job(tasks, base / "one", srv.base_url, slots_per_node=args.slots, **ray_kw)
            cluster.add_node(num_cpus=args.slots)
            cluster.wait_for_nodes()
            two = run_job(tasks, base / "two", srv.base_url, slots_per_node=args.slots, **ray_kw)
        r1, r2 = args.trials / one["phase_s"], args.trials / two["phase_s"]
        ideal = args.trials / args.slots * (throughput.CALLS + 1) * args.model_delay
        print(
            f"scale-out: {args.trials} trials, {args.slots} slots/node, model delay "
            f"{args.model_delay:g} s ({throughput.CALLS + 1} calls/trial)"
        )
        print(f"  1 node : {one['phase_s']:6.1f} s  {r1:5.2f} trials/s  (ideal {ideal:.1f} s)")
        print(f"  2 nodes: {two['phase_s']:6.1f} s  {r2:5.2f} trials/s  (ideal {ideal / 2:.1f} s)")
        print(f"  speed-up {r2 / r1:.2f}x (goal >= 1.8x)")
        print(f"overhead: {args.overhead_trials} trials one at a time, model delay 0")
        extras = []
        for name, res in (("local", local), ("ray", on_ray)):
            extra = statistics.median(wall - own for wall, own in res["per_trial"]) * 1000
            wall = statistics.median(w for w, _ in res["per_trial"]) * 1000
            extras.append(extra)
            print(
                f"  {name:5}: driver wall - trial phases {extra:7.1f} ms/trial "
                f"(median trial wall {wall:.0f} ms)"
            )
        print(f"  Ray's scheduling overhead: {extras[1] - extras[0]:.1f} ms/trial (goal < 20 ms)")
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
