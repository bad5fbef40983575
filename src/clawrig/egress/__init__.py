"""Egress: the network policy of a sandbox and the proxy on the host that enforces it.

:mod:`clawrig.egress.policy` parses ``--network`` / ``--setup-network`` and knows the package
registries; :mod:`clawrig.egress.proxy` runs the per-trial proxy that logs ``egress.jsonl``.
"""

from clawrig.egress.policy import HostRule, NetworkPolicy, registry_env, registry_hosts
from clawrig.egress.proxy import (
    EGRESS_PORT,
    LOG_FILE,
    EgressProxy,
    proxy_env,
    start_egress_forwarder,
)

__all__ = [
    "EGRESS_PORT",
    "LOG_FILE",
    "EgressProxy",
    "HostRule",
    "NetworkPolicy",
    "proxy_env",
    "registry_env",
    "registry_hosts",
    "start_egress_forwarder",
]
