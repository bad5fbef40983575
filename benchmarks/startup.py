"""Start-up benchmark (issue 19): what ``clawrig run`` costs before and around its trials,
side by side with ``inspect eval`` where it makes sense.

Workload: benchmarks/throughput.py's (a task whose agent makes 5 ``exec`` calls and answers,
graded in the sandbox; the scripted model in its own process), run as users run it
(``clawrig run ... -p 1``, model gateway on). Per repetition, interleaved: a run of 1 trial
and a run of ``--trials`` N trials of clawrig (and of ``--baseline-src``'s clawrig, and of
Inspect's workload, benchmarks/_inspect_workload.py, when inspect-ai is installed).

Printed, medians [min-max] over ``--reps``:

- ``version``: wall seconds of ``clawrig version`` (``inspect --version`` beside it);
- ``import``: CPU seconds of importing the run path alone
  (``python -c "import clawrig.runner.batch, clawrig.cli.run"``);
- ``first trial``: seconds from the command's launch to the first trial's start (clawrig:
  ``started_at`` of its result.json; Inspect: the first sample's ``started_at``);
- ``first sandbox``: seconds from the launch until the first trial's sandbox is ready
  (clawrig: ``started_at`` + its ``setup`` + ``sandbox_start`` timings; Inspect's local
  sandbox has no start of its own: "-");
- ``cpu 1``: CPU seconds of a whole 1-trial run (every process it starts: a cgroup v1
  ``cpuacct`` group, benchmarks/_cpuacct.py; without one, the reaped children only);
- ``slope``: CPU seconds per added trial, (cpu N - cpu 1) / (N - 1), per repetition;
- ``fixed``: cpu 1 - slope: what a run costs before and around its trials.

Every run is checked (clawrig: its summary shows every trial scored 1.0 without error;
Inspect: every sample's log passes the workload's check) or reported and left out. Each
run's line ends with the 1-minute load average before and after it.

Bytecode: as in throughput.py, the runs use a bytecode cache in a temporary folder
(``PYTHONPYCACHEPREFIX``, filled by one unreported warm-up run) when the environment sets
``PYTHONDONTWRITEBYTECODE``.

Measured (issue 19; ``--reps 3 --trials 5 --baseline-src`` main at 652e47d, load 15-47 on
the 2-core machine shared with other jobs): 1-trial run CPU 2.46 -> 2.12 s, fixed CPU
2.22 -> 1.77 s, first sandbox ready 18.5 -> 7.8 s after launch (medians; wall times swing
with the load); Inspect beside it: CPU 11.2 s, first sample 64 s.

Usage: python benchmarks/startup.py [--reps 5] [--trials 5] [--no-inspect]
       [--baseline-src OLD/src]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cpuacct import CpuGroup  # noqa: E402
from throughput import HERE, ModelServer, _children_cpu_s, clawrig_env, make_bench  # noqa: E402


def _epoch(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()


def _counted(argv: list[str], env: dict[str, str], name: str) -> tuple[Any, float, float]:
    """Runs ``argv``; returns (the completed process, wall s, CPU s of it and everything it
    started), the launch's epoch time being ``proc.launched``."""
    group = CpuGroup(f"{name}-{time.monotonic_ns()}")
    cpu0 = _children_cpu_s()
    launched = time.time()
    t = time.perf_counter()
    proc = subprocess.run(
        argv, env=env, capture_output=True, text=True, preexec_fn=group.enter, check=False
    )
    wall = time.perf_counter() - t
    counted = group.seconds()
    group.close()
    proc.launched = launched  # type: ignore[attr-defined]
    return proc, wall, counted if counted is not None else _children_cpu_s() - cpu0


def run_clawrig(n: int, base: Path, src: Path | None = None) -> dict[str, Any]:
    """One ``clawrig run`` of ``n`` trials at -p 1 (``src``: another checkout's package, see
    throughput.clawrig_env)."""
    root = Path(tempfile.mkdtemp(prefix=f"n{n}-", dir=base))
    tasks_dir = make_bench(root, n)
    out = root / "out"
    exe = shutil.which("clawrig") or str(Path(sys.executable).with_name("clawrig"))
    with ModelServer(0.0) as srv:
        env = clawrig_env(src, base)
        env["SCRIPTED_BASE_URL"] = srv.base_url
        argv = [exe, "run", str(tasks_dir), "-m", "scripted/bench", "-p", "1", "-o", str(out)]
        proc, wall, cpu = _counted(argv, env, f"n{n}")
    try:
        summary = json.loads(next(out.glob("summary_*.json")).read_text())
        results = [json.loads(p.read_text()) for p in out.glob("*/*/result.json")]
    except StopIteration:
        return {"ok": False, "why": f"no summary, exit {proc.returncode}: {proc.stderr[-300:]}"}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = summary.get("tasks", [])
    ok = summary.get("error_count", 0) == 0 and len(rows) == n
    ok = ok and all(r.get("score") == 1.0 for r in rows) and len(results) == n
    if not ok:
        return {"ok": False, "why": f"errors {summary.get('error_count')}, {len(rows)} rows"}
    first = min(results, key=lambda r: _epoch(r["started_at"]))
    started = _epoch(first["started_at"]) - proc.launched
    timings = first.get("timings") or {}
    ready = started + timings.get("setup", 0.0) + timings.get("sandbox_start", 0.0)
    return {"ok": True, "wall": wall, "cpu": cpu, "first_trial": started, "first_sandbox": ready}


def run_inspect(n: int, base: Path) -> dict[str, Any]:
    """One Inspect eval of ``n`` samples at max_samples 1 (benchmarks/_inspect_workload.py,
    every sample checked), with an empty HOME."""
    home = Path(tempfile.mkdtemp(prefix="inspect-home-", dir=base))
    logs = base / f"inspect-logs-{time.monotonic_ns()}"
    argv = [sys.executable, str(HERE / "_inspect_workload.py"), str(n), "1", str(logs)]
    proc, wall, cpu = _counted(argv, dict(os.environ, HOME=str(home)), f"inspect{n}")
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(logs, ignore_errors=True)
    if proc.returncode != 0:
        return {"ok": False, "why": proc.stderr.strip()[-300:]}
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if data["checked_ok"] != n:
        return {"ok": False, "why": f"{n - data['checked_ok']} samples failed the log check"}
    started = data["first_sample_started"] - proc.launched
    return {"ok": True, "wall": wall, "cpu": cpu, "first_trial": started, "first_sandbox": None}


def command_wall(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - t


def import_cpu(env: dict[str, str]) -> float:
    """CPU seconds of importing the run path (and starting the interpreter) in a child."""
    code = "import clawrig.runner.batch, clawrig.cli.run"
    _, _, cpu = _counted([sys.executable, "-c", code], env, "import")
    return cpu


def _stat(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):6.3f} [{min(values):.3f}-{max(values):.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0].replace("\n", " "),
        epilog="See the module docstring for what each column is.",
    )
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions")
    ap.add_argument("--trials", type=int, default=5, help="N of the N-trial runs (slope)")
    ap.add_argument("--no-inspect", action="store_true", help="clawrig only")
    ap.add_argument(
        "--baseline-src",
        type=Path,
        help="also run the clawrig package in this folder (an older checkout's src) as "
        "clawrig-base, interleaved",
    )
    args = ap.parse_args()
    if args.trials < 2:
        ap.error("--trials: at least 2 (the slope needs two sizes)")
    if args.baseline_src is not None:
        args.baseline_src = args.baseline_src.resolve()
        if not (args.baseline_src / "clawrig" / "__init__.py").is_file():
            ap.error(f"--baseline-src {args.baseline_src}: no clawrig/__init__.py in it")
    inspect_exe = shutil.which("inspect") or str(Path(sys.executable).with_name("inspect"))
    have_inspect = not args.no_inspect and Path(inspect_exe).exists()
    if have_inspect:
        try:
            import inspect_ai  # noqa: F401
        except ImportError:
            have_inspect = False
    base = Path(tempfile.mkdtemp(prefix="clawrig-startup-"))
    exe = shutil.which("clawrig") or str(Path(sys.executable).with_name("clawrig"))
    names = (["clawrig-base"] if args.baseline_src else []) + ["clawrig"]
    names += ["inspect"] if have_inspect else []
    rows: dict[str, dict[str, list[float]]] = {n: {} for n in names}

    def add(name: str, key: str, value: float | None) -> None:
        if value is not None:
            rows[name].setdefault(key, []).append(value)

    try:
        if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
            os.environ["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
            for src in [None, args.baseline_src] if args.baseline_src else [None]:
                run_clawrig(1, base, src)
            if have_inspect:  # (its first timed run compiled Inspect: helper-216)
                run_inspect(1, base)
            print("warm-up runs, each harness (fill the bytecode cache): not counted", flush=True)
        envs = {"clawrig": clawrig_env(None, base)}
        if args.baseline_src is not None:
            envs["clawrig-base"] = clawrig_env(args.baseline_src, base)
        for rep in range(args.reps):
            for name in names:
                if name == "inspect":
                    add(name, "version", command_wall([inspect_exe, "--version"], dict(os.environ)))
                else:
                    add(name, "version", command_wall([exe, "version"], envs[name]))
                    add(name, "import", import_cpu(envs[name]))
                one_n = {}
                for n in (1, args.trials):
                    load0 = os.getloadavg()[0]
                    if name == "inspect":
                        r = run_inspect(n, base)
                    else:
                        src = args.baseline_src if name == "clawrig-base" else None
                        r = run_clawrig(n, base, src)
                    load = f"load {load0:.1f}->{os.getloadavg()[0]:.1f}"
                    if not r["ok"]:
                        print(f"rep {rep + 1} {name:12} n {n}: REJECTED ({r['why']}) {load}")
                        continue
                    one_n[n] = r
                    first_sb = r["first_sandbox"]
                    print(
                        f"rep {rep + 1} {name:12} n {n:<3} wall {r['wall']:6.2f} s cpu "
                        f"{r['cpu']:6.2f} s first trial {r['first_trial']:5.2f} s first sandbox "
                        f"{'-' if first_sb is None else f'{first_sb:5.2f} s'} {load}",
                        flush=True,
                    )
                if 1 in one_n:
                    add(name, "first trial", one_n[1]["first_trial"])
                    add(name, "first sandbox", one_n[1]["first_sandbox"])
                    add(name, "cpu 1", one_n[1]["cpu"])
                if len(one_n) == 2:
                    slope = (one_n[args.trials]["cpu"] - one_n[1]["cpu"]) / (args.trials - 1)
                    add(name, "slope", slope)
                    add(name, "fixed", one_n[1]["cpu"] - slope)
        print()
        print(
            f"medians [min-max] over {args.reps} interleaved reps, s; -p 1; slope from 1 vs "
            f"{args.trials} trials; load {os.getloadavg()[0]:.1f} at the end"
        )
        keys = ["version", "import", "first trial", "first sandbox", "cpu 1", "slope", "fixed"]
        print(f"{'':14}" + "".join(f"{n:>26}" for n in names))
        for key in keys:
            print(f"{key:14}" + "".join(f"{_stat(rows[n].get(key, [])):>26}" for n in names))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
