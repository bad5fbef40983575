"""CLI tests: the installed ``clawrig`` console script in a subprocess, as a user runs it.

``clawrig(*args, cwd=..., env=...)`` runs it without model settings from the environment
(:func:`cli_helpers.clean_env`) and returns the completed process.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import CLAWRIG, clean_env


@pytest.fixture
def clawrig() -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(
        *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CLAWRIG, *map(str, args)],
            cwd=cwd,
            env=clean_env(env),
            capture_output=True,
            text=True,
            timeout=300,
        )

    return run
