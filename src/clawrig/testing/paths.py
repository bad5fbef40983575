"""Where the project's shared reference files are, for tests and benchmarks.

``shared/`` (DataClawBench files, the four-folder example, reference formats) lies beside the
repository checkout (CI lays a copy there); ``CLAWRIG_SHARED`` overrides it.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def shared_dir() -> Path:
    """``$CLAWRIG_SHARED``, else ``<repo>/../shared``, else ``/work/shared``."""
    env = os.environ.get("CLAWRIG_SHARED")
    if env:
        return Path(env)
    beside = REPO.parent / "shared"
    return beside if beside.is_dir() else Path("/work/shared")


SHARED = shared_dir()
