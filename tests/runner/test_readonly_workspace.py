"""A sample set whose files are read-only on disk (shared/examples/fourfolder is laid out
without write bits) still gives the agent a workspace it can write to, as upstream's root in a
container has: the oracle reaches the sample's expected reward instead of a silent 0."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from clawrig.testing.paths import SHARED

SAMPLE = SHARED / "examples" / "fourfolder"

pytestmark = pytest.mark.skipif(not SAMPLE.is_dir(), reason="shared/examples/fourfolder missing")


def _read_only_copy(src: Path, dest: Path) -> Path:
    subprocess.run(["cp", "-r", str(src), str(dest)], check=True)
    for dirpath, _dirnames, filenames in os.walk(dest, topdown=False):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o444)
        os.chmod(dirpath, 0o555)
    return dest


@pytest.mark.sandbox
def test_a_read_only_sample_set_gets_a_writable_workspace(tmp_path: Path) -> None:
    suite = _read_only_copy(SAMPLE, tmp_path / "set")
    ws = next((suite / "workspaces").iterdir())
    assert not os.stat(ws).st_mode & stat.S_IWUSR  # read-only on disk, as shared/ is in CI
    out = tmp_path / "out"
    try:
        r = subprocess.run(
            [sys.executable, "-m", "clawrig", "run", str(suite), "--agent", "oracle"]
            + ["-o", str(out)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(suite)], check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "1/1 samples reach their expected reward" in r.stdout
