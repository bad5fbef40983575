"""Shared by the CLI tests: where the console script and the demo suite are, and an
environment without model settings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))
REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "suites" / "demo"


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without model settings (keys, base URLs, DEFAULT_MODEL, JUDGE_MODEL),
    a wide terminal for help text, plus ``extra``."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith(("_API_KEY", "_BASE_URL")) and k not in ("DEFAULT_MODEL", "JUDGE_MODEL")
    }
    return {**base, "COLUMNS": "200", **(extra or {})}
