"""The web as a reproducible input: live providers, recorded and replayed traffic, a local
corpus (see :mod:`clawrig.web.service` for the modes)."""

from clawrig.web.service import (
    MISS_POLICIES,
    WEB_MODES,
    FetchOutcome,
    SearchOutcome,
    WebService,
    WebSession,
)

__all__ = [
    "MISS_POLICIES",
    "WEB_MODES",
    "FetchOutcome",
    "SearchOutcome",
    "WebService",
    "WebSession",
]
