"""Helpers of the Ray executor's tests: the tiny WildClawBench suite and the scripted model's
responder of the runner tests (tests/runner/conftest.py, loaded from that file so they live in
one place), the node count and the ids of a cluster's nodes."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

NODE_CPUS = 2
"""CPUs (and so trial slots) each node advertises."""

_spec = importlib.util.spec_from_file_location(
    "clawrig_tests_runner_conftest", Path(__file__).parents[1] / "runner" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
runner_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner_fixtures)
write_mini_bench = runner_fixtures.write_mini_bench
solve_even_tasks = runner_fixtures.solve_even_tasks


def node_ids(cluster: Any) -> set[str]:
    """The ids of the cluster's alive nodes."""
    return {n.node_id for n in cluster.list_all_nodes()}


def env_for(srv: Any) -> dict[str, str]:
    """The environment of a ``clawrig run`` subprocess using the scripted server ``srv``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENROUTER", "OPENAI"))}
    env["SCRIPTED_BASE_URL"] = srv.base_url
    return env
