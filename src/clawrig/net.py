"""HTTP client pieces shared by the harness's clients that take a transport of their own (the
gateway's upstream client, the web tools' live fetch): httpx reads the environment's proxies
only for a client without one."""

from __future__ import annotations

from typing import Any

import httpx
from httpx._utils import get_environment_proxies


def env_proxy_mounts(**transport: Any) -> dict[str, httpx.AsyncBaseTransport | None]:
    """httpx ``mounts`` sending what the environment sends through a proxy (``HTTPS_PROXY``,
    ``ALL_PROXY``, ... but not ``NO_PROXY``: httpx's own reading of them) to that proxy over an
    ``httpx.AsyncHTTPTransport(**transport, proxy=...)``, and what ``NO_PROXY`` names to the
    client's own transport (None), as a client without a transport of its own would."""
    return {
        pattern: None if proxy is None else httpx.AsyncHTTPTransport(**transport, proxy=proxy)
        for pattern, proxy in get_environment_proxies().items()
    }
