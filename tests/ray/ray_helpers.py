"""Helpers of the Ray executor's tests: the tiny WildClawBench suite and the scripted model's
responder of the runner tests (tests/runner/conftest.py) and the job helpers of
tests/runner/job_helpers.py (loaded from those files so they live in one place), the node count
and the ids of a cluster's nodes."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

NODE_CPUS = 2
"""CPUs (and so trial slots) each node advertises."""


def _load(name: str, path: Path) -> Any:
    """The module at ``path`` (a file of tests/runner), imported as ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


runner_fixtures = _load(
    "clawrig_tests_runner_conftest", Path(__file__).parents[1] / "runner" / "conftest.py"
)
write_mini_bench = runner_fixtures.write_mini_bench
solve_even_tasks = runner_fixtures.solve_even_tasks
job_helpers = _load("job_helpers", Path(__file__).parents[1] / "runner" / "job_helpers.py")
COST = job_helpers.COST
job_config = job_helpers.job_config
comparable = job_helpers.comparable
trials_of = job_helpers.trials_of
model_servers = job_helpers.model_servers
assert_even_job = job_helpers.assert_even_job


def node_ids(cluster: Any) -> set[str]:
    """The ids of the cluster's alive nodes."""
    return {n.node_id for n in cluster.list_all_nodes()}


def env_for(srv: Any) -> dict[str, str]:
    """The environment of a ``clawrig run`` subprocess using the scripted server ``srv``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENROUTER", "OPENAI"))}
    env["SCRIPTED_BASE_URL"] = srv.base_url
    return env
