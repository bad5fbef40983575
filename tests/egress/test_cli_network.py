"""`clawrig run` with a bad --network, --setup-network or --preamble: one line, exit 2,
nothing written, no sandbox started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))
SUITE = Path(__file__).resolve().parents[2] / "examples" / "wildclaw-patterns" / "tasks"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--network", "internet"], "--network: expected none, registries, allow:<hosts> or open"),
        (["--network", "allow:"], "--network: allow: needs at least one host"),
        (["--setup-network", "allow:pypi.org:0"], "--setup-network: port out of range"),
        (["--preamble", "no/such/preamble.txt"], "--preamble: no such file: no/such/preamble.txt"),
    ],
)
def test_bad_network_and_preamble_flags(args, needle, tmp_path):
    r = subprocess.run(
        [CLAWRIG, "run", str(SUITE), "--agent", "nop", "-o", str(tmp_path / "out"), *args],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()
