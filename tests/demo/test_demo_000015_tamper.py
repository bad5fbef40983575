"""Demo sample 000015 (coauthorship chain): the grader must not trust the agent's copy of the graph.

A tester found that the seed grader (shared/examples/fourfolder/evaluators/evaluator_000015.py)
reads /tmp_workspace/coauthorship.json, which the agent may rewrite: add a direct edge
"Vikram Shah"-"Saif Hamdan", write that one-hop chain, and it scores 1.0. The demo's grader
SHA-256-gates the graph file, so the chain checks are made on the shipped graph only. Expected
scores come from the grader's documented formula, worked out by hand:
    overall = 0.10 * file_has_heading + 0.30 * endpoints_match + 0.60 * valid_shortest
with endpoints_match and valid_shortest forced to 0 when the graph file was changed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from clawrig.testing.paths import SHARED

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "suites" / "demo"
SEED = SHARED / "examples" / "fourfolder"
PLAIN_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
ONE_HOP = "# shortest\nVikram Shah – Saif Hamdan\n"
GOLDEN = "# shortest\nVikram Shah – Berta Alonso – Saif Hamdan\n"


def _import(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _grade(module: ModuleType, workspace: Path) -> dict[str, Any]:
    result: dict[str, Any] = module.grade(workspace_path=str(workspace), transcript=None)
    return result


@pytest.fixture
def demo() -> ModuleType:
    return _import(DEMO / "evaluators" / "evaluator_000015.py", "demo_evaluator_000015_tamper")


def _workspace(tmp_path: Path, chain: str) -> Path:
    """The shipped initial workspace plus results/results.md holding ``chain``."""
    workspace = tmp_path / "ws"
    shutil.copytree(DEMO / "workspaces" / "000015", workspace)
    (workspace / "results").mkdir()
    (workspace / "results" / "results.md").write_text(chain, encoding="utf-8")
    return workspace


def _tamper(workspace: Path) -> None:
    """Rewrite the graph as an agent would: the same file with a direct A-B edge added."""
    path = workspace / "coauthorship.json"
    graph = json.loads(path.read_text(encoding="utf-8"))
    assert ["Vikram Shah", "Saif Hamdan"] not in graph["edges"]
    graph["edges"].append(["Vikram Shah", "Saif Hamdan"])
    path.write_text(json.dumps(graph, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def test_rewritten_graph_with_one_hop_chain_scores_below_half(
    demo: ModuleType, tmp_path: Path
) -> None:
    workspace = _workspace(tmp_path, ONE_HOP)
    _tamper(workspace)
    result = _grade(demo, workspace)
    # Heading only: 0.10 * 1 + 0.30 * 0 + 0.60 * 0.
    assert result["graph_intact"] == 0.0
    assert result["endpoints_match"] == 0.0
    assert result["valid_shortest"] == 0.0
    assert result["overall_score"] == pytest.approx(0.10)
    assert result["overall_score"] < 0.5


def test_the_same_tampering_fooled_the_seed_grader(tmp_path: Path) -> None:
    """The exploit is real: the published seed grader gives the tampered rollout full marks."""
    seed_path = SEED / "evaluators" / "evaluator_000015.py"
    if not seed_path.exists():
        pytest.skip(f"seed example not present: {seed_path}")
    workspace = _workspace(tmp_path, ONE_HOP)
    _tamper(workspace)
    seed = _import(seed_path, "seed_evaluator_000015")
    assert _grade(seed, workspace)["overall_score"] == pytest.approx(1.0)


def test_one_hop_chain_on_the_intact_graph_is_not_a_path(demo: ModuleType, tmp_path: Path) -> None:
    # Vikram Shah and Saif Hamdan share no edge in the shipped graph: 0.10 + 0.30 = 0.40.
    result = _grade(demo, _workspace(tmp_path, ONE_HOP))
    assert result["graph_intact"] == 1.0
    assert result["endpoints_match"] == 1.0
    assert result["valid_shortest"] == 0.0
    assert result["overall_score"] == pytest.approx(0.40)


def test_golden_chain_after_tampering_still_loses_the_chain_checks(
    demo: ModuleType, tmp_path: Path
) -> None:
    # Any change to the input file voids the chain checks, even with the right answer: 0.10.
    workspace = _workspace(tmp_path, GOLDEN)
    _tamper(workspace)
    assert _grade(demo, workspace)["overall_score"] == pytest.approx(0.10)


def test_deleted_graph_voids_the_chain_checks(demo: ModuleType, tmp_path: Path) -> None:
    workspace = _workspace(tmp_path, GOLDEN)
    (workspace / "coauthorship.json").unlink()
    result = _grade(demo, workspace)
    assert result["graph_intact"] == 0.0
    assert result["overall_score"] == pytest.approx(0.10)


def test_graph_intact_is_said_without_a_results_file(demo: ModuleType, tmp_path: Path) -> None:
    """``graph_intact`` says whether the gate passed (suites/demo/README.md), also when there is
    no results file to score: it said 0.0 then, the graph untouched (helper-140)."""
    workspace = _workspace(tmp_path, GOLDEN)
    (workspace / "results" / "results.md").unlink()
    result = _grade(demo, workspace)
    assert result["graph_intact"] == 1.0 and result["overall_score"] == 0.0
    _tamper(workspace)
    assert _grade(demo, workspace)["graph_intact"] == 0.0


def test_gate_hash_is_the_shipped_graph_hash(demo: ModuleType) -> None:
    shipped = (DEMO / "workspaces" / "000015" / "coauthorship.json").read_bytes()
    assert demo.INITIAL_SHA256 == {"coauthorship.json": hashlib.sha256(shipped).hexdigest()}
    seed_graph = SEED / "workspaces" / "000015" / "coauthorship.json"
    if seed_graph.exists():
        assert seed_graph.read_bytes() == shipped


def test_golden_workspace_self_checks_with_plain_python3(demo: ModuleType, tmp_path: Path) -> None:
    proc = subprocess.run(
        [PLAIN_PYTHON, str(DEMO / "evaluators" / "evaluator_000015.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["self_check"] == "PASS"
    assert report["graph_intact"] == 1.0
    assert report["overall_score"] == pytest.approx(1.0)
    assert report["expected"] == 1.0
    # The golden end state keeps the shipped graph byte for byte.
    shipped = (DEMO / "workspaces" / "000015" / "coauthorship.json").read_text(encoding="utf-8")
    assert demo.GOLDEN_WORKSPACE["coauthorship.json"] == shipped
