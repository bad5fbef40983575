"""``--executor ray``'s bad input: one line, exit 2, before any trial (no cluster needed)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ray_helpers import write_mini_bench

from clawrig.errors import UserError
from clawrig.runner.executors import ray as ray_executor
from clawrig.spec.job import JobConfig
from clawrig.tasks.registry import load_tasks

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--executor", "slurm"], "'--executor': 'slurm' is not one of 'local', 'ray'"),
        (["--executor", "ray", "--ray-address", "nohost"], "--ray-address: 'nohost' is not"),
        (["--executor", "ray", "--ray-address", "127.0.0.1:{port}"], "no Ray cluster answers"),
        (["--executor", "ray", "--web", "live"], "--web live: not supported with --executor ray"),
        (["--ray-address", "10.0.0.1:6379"], "--ray-address: only with --executor ray"),
        (["--slots-per-node", "2"], "--slots-per-node: only with --executor ray"),
    ],
)
def test_bad_ray_options_are_one_line_and_exit_2(tmp_path, extra, expected):
    bench = write_mini_bench(tmp_path / "bench", 1)
    port = _closed_port()
    args = [a.replace("{port}", str(port)) for a in extra]
    r = subprocess.run(
        [CLAWRIG, "run", str(bench / "tasks"), "--agent", "nop", "-o", str(tmp_path / "o")] + args,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert expected.replace("{port}", str(port)) in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "o").exists()


def test_a_suite_over_the_size_limit_is_refused_naming_the_folder(tmp_path, monkeypatch):
    bench = write_mini_bench(tmp_path / "bench", 2)
    (bench / "workspace" / "big.bin").write_bytes(b"x" * 4096)
    monkeypatch.setattr(ray_executor, "SUITE_MAX_BYTES", 4096)
    job = JobConfig(suite_path=bench / "tasks")
    with pytest.raises(UserError) as err:
        ray_executor.pack_suite(job, load_tasks(bench / "tasks"))
    assert str(err.value).startswith(f"--executor ray: the suite's folder {bench.resolve()} ")
    assert "\n" not in str(err.value)


def test_the_suite_pack_holds_every_task_path_and_unpacks_once(tmp_path):
    bench = write_mini_bench(tmp_path / "bench", 3)
    tasks = load_tasks(bench / "tasks")
    pack = ray_executor.pack_suite(JobConfig(suite_path=bench / "tasks"), tasks)
    assert pack.base == bench.resolve() and pack.suite_rel == "tasks"  # workspace/ is included
    cache = tmp_path / "cache"
    first = ray_executor.unpack_suite(pack.data, pack.digest, cache)
    (first / "marker").write_text("kept")  # a second unpack would have removed it
    assert ray_executor.unpack_suite(pack.data, pack.digest, cache) == first
    assert (first / "marker").read_text() == "kept"
    again = load_tasks(first / "tasks")
    assert sorted(t.id for t in again) == sorted(t.id for t in tasks)
    for t in again:  # the unpacked tasks read their data from the cache, not the driver's copy
        assert Path(t.workspace.exec_dir).resolve().is_relative_to(first.resolve())
        assert (Path(t.workspace.gt_dir) / "expected.txt").is_file()


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"executor": "slurm"}, "executor: unknown executor 'slurm' (choose from local, ray)"),
        ({"ray_address": "10.0.0.1:6379"}, "ray_address / slots_per_node: only with"),
        ({"executor": "ray", "slots_per_node": 0}, "slots_per_node: at least 1 (got 0)"),
        ({"executor": "ray", "ray_address": "127.0.0.1:{port}"}, "ray_address: no Ray cluster"),
    ],
)
def test_bad_rollouts_executor_options_are_one_line_user_errors(tmp_path, kw, expected):
    from clawrig.rl import Rollouts

    port = str(_closed_port())
    kw = {k: v.replace("{port}", port) if isinstance(v, str) else v for k, v in kw.items()}
    with pytest.raises(UserError) as err:
        Rollouts(tmp_path / "out", **kw)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_the_local_executor_imports_no_ray(tmp_path):
    code = (
        "import sys\n"
        "from clawrig.rl import Rollouts\n"
        "from clawrig.runner.executors import create_executor\n"
        "from clawrig.runner.job import Job\n"
        "from clawrig.runner.trial import TrialServices\n"
        "from clawrig.spec.job import JobConfig\n"
        f"Rollouts({str(tmp_path / 'rl')!r}).close()\n"
        f"create_executor(JobConfig(suite_path={str(tmp_path)!r}), [], TrialServices())\n"
        "print('ray' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--executor", "slurm"], "'--executor': 'slurm' is not one of 'local', 'ray'"),
        (["--ray-address", "10.0.0.1:6379"], "--ray-address / --slots-per-node: only with"),
        (["--executor", "ray", "--ray-address", "127.0.0.1:{port}"], "--ray-address: no Ray"),
    ],
)
def test_bad_serve_executor_options_are_one_line_and_exit_2(tmp_path, extra, expected):
    port = str(_closed_port())
    r = subprocess.run(
        [CLAWRIG, "serve", str(tmp_path), "--port", "0", "-o", str(tmp_path / "o")]
        + [a.replace("{port}", port) for a in extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert expected in r.stderr and "Traceback" not in r.stderr
