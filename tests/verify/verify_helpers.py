"""Helpers for the ``clawrig verify`` and export tests (imported by name; pytest puts this
folder on sys.path).

- ``run(*args)``: the installed ``clawrig`` console script in a subprocess.
- ``copy_sample(src_root, src_id, dst_root, dst_id)``: copy one four-folder sample (the four
  files and its workspace) under a new id, fixing the ``id`` keys; returns the new file paths.
- ``edit_json`` / ``replace_once``: plant a problem in a copied file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "suites" / "demo"


def copy_sample(src_root: Path, src_id: str, dst_root: Path, dst_id: str) -> dict[str, Path]:
    """Copy sample ``src_id`` of a four-folder set to ``dst_root`` as ``dst_id``."""
    names = {
        "intent": (f"intent/{src_id}.json", f"intent/{dst_id}.json"),
        "datapoints": (f"datapoints/{src_id}.json", f"datapoints/{dst_id}.json"),
        "evaluators": (
            f"evaluators/evaluator_{src_id}.py",
            f"evaluators/evaluator_{dst_id}.py",
        ),
        "reference_payloads": (
            f"reference_payloads/reference_payload_{src_id}.json",
            f"reference_payloads/reference_payload_{dst_id}.json",
        ),
    }
    out: dict[str, Path] = {}
    for folder, (src, dst) in names.items():
        target = dst_root / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        if dst.endswith(".json"):
            data = json.loads((src_root / src).read_text(encoding="utf-8"))
            data["id"] = dst_id
            target.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
        else:
            shutil.copyfile(src_root / src, target)
        out[folder] = target
    ws = src_root / "workspaces" / src_id
    if ws.is_dir():
        shutil.copytree(ws, dst_root / "workspaces" / dst_id)
    out["workspace"] = dst_root / "workspaces" / dst_id
    return out


def edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")


def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "clawrig"
    return subprocess.run(
        [str(exe), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={**os.environ, "COLUMNS": "220", "NO_COLOR": "1"},
    )
