"""One real Ray cluster for the Ray executor's tests (session-scoped: a Ray node costs seconds
and memory, and this machine has 2 cores): a head and a second node, each a real raylet with
its own resources (``ray.cluster_utils.Cluster``). Tests that need a node to kill add a third.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'clawrig[ray]')")

from ray_helpers import NODE_CPUS  # noqa: E402


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A two-node Ray cluster on this machine (``cluster.address`` for ``--ray-address``)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": NODE_CPUS, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=NODE_CPUS)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()
