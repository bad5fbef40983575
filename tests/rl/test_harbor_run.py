"""Harbor itself (PyPI ``harbor``, installed by ``make test`` through scripts/install-harbor.sh)
runs an exported demo task with its oracle agent in its docker environment, on the local
Docker engine, and reads the reward clawrig's test.sh wrote.

Needs: Harbor's venv (Python >= 3.12) and Docker Compose v2 from that script, a Docker engine,
and a local base image with python3 and bash (clawrig's base environment, built with
``clawrig.env``; no image registry is reachable). The task is exported with
``allow_internet = true``: Harbor's docker environment enforces a no-network task with an egress
sidecar whose images it pulls from Docker Hub, which cannot be reached here.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from clawrig.export.harbor import export_harbor

from .conftest import DEMO

CACHE = Path(os.environ.get("CLAWRIG_CACHE_DIR") or Path.home() / ".cache" / "clawrig") / "harbor"
HARBOR = CACHE / "venv" / "bin" / "harbor"


def _docker_up() -> bool:
    try:
        r = subprocess.run(["docker", "version"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _base_image() -> str:
    """``$CLAWRIG_HARBOR_IMAGE`` when set, else clawrig's base environment image."""
    if os.environ.get("CLAWRIG_HARBOR_IMAGE"):
        return os.environ["CLAWRIG_HARBOR_IMAGE"]
    try:
        from clawrig.env.build import ensure_image
        from clawrig.env.spec import load_env_spec
    except ImportError:
        pytest.skip("needs clawrig.env to build a local base image (no registry here)")
    return ensure_image(load_env_spec("base"))


@pytest.mark.timeout(900)
def test_harbor_runs_an_exported_task_with_its_oracle(tmp_path):
    if not (CACHE / "venv" / ".complete").exists():
        pytest.skip("Harbor is not installed (scripts/install-harbor.sh, run by make test)")
    if not _docker_up():
        pytest.skip("no Docker engine answers")
    image = _base_image()
    report = export_harbor(DEMO, tmp_path / "tasks", image=image, suite="000015",
                           allow_internet=True)  # fmt: skip
    [task] = report.exported
    env = {
        **os.environ,
        "DOCKER_CONFIG": str(CACHE / "docker"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    proc = subprocess.run(
        [str(HARBOR), "run", "-p", str(task.folder), "-a", "oracle", "-e", "docker",
         "-o", str(tmp_path / "jobs")],
        capture_output=True, text=True, timeout=840, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    [trial] = [p for p in (tmp_path / "jobs").glob("*/000015__*/result.json")]
    result = json.loads(trial.read_text())
    assert result.get("exception_info") is None, result["exception_info"]
    rewards = result["verifier_result"]["rewards"]
    # the demo sample's expected reward, and its grader's sub-scores (reward.json)
    assert rewards["reward"] == 1.0
    assert rewards["valid_shortest"] == 1.0 and rewards["graph_intact"] == 1.0
