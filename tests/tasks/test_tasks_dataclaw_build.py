"""`build_dataclaw` reproduces the two real upstream task files and the real gold files byte
for byte.

The temporary root mirrors upstream's 492 qa_raw files: per category, the README's level
distribution (seeds/dataclawbench-readme.zh-CN.txt); real ids keep their real content (the real
easy001_result.json, and gold + "evidence": [] for every other real gold file), the rest are
placeholders. The database folder holds the 19 paths named in the real task files, empty.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path

import pytest

from clawrig.errors import TaskFormatError, UserError
from clawrig.tasks.dataclaw_build import build_dataclaw
from clawrig.tasks.registry import load_suite
from clawrig.testing.paths import SHARED

# README "任务统计信息": category -> level -> count (total 492 = 131 easy / 286 medium / 75 hard)
README_COUNTS = {
    "enterprise_industry_analysis": {"easy": 115, "medium": 111},
    "enterprise_industry_policy_analysis": {"easy": 10, "medium": 66},
    "comprehensive_decision": {"easy": 6, "medium": 45, "hard": 19},
    "international_comparison": {"medium": 25, "hard": 14},
    "hypothesis_verification": {"medium": 14, "hard": 15},
    "industry_planning": {"medium": 14, "hard": 14},
    "risk_assessment": {"medium": 11, "hard": 13},
}
RAW_KEY_ORDER = (
    "id",
    "question",
    "guidelines",
    "steps",
    "steps_num",
    "evidence",
    "milestone",
    "answer",
    "metadata",
)
TASK_001 = "task_001_comprehensive_decision_easy_easy001.md"
TASK_373 = "task_373_hypothesis_verification_hard_hard001.md"


def _placeholder(category: str, level: str, item_id: str) -> dict:
    return {
        "id": item_id,
        "question": f"placeholder {category} {item_id}?",
        "guidelines": "Answer with a number.",
        "steps": ["look it up"],
        "steps_num": 1,
        "evidence": [],
        "milestone": {"value": 1},
        "answer": 1,
        "metadata": {"db": "bm_rag_qa", "level": level, "category": category},
    }


def _database_paths(real: Path) -> list[str]:
    """The database paths named in the real task files (both list the same 19)."""
    lists = []
    for name in (TASK_001, TASK_373):
        text = (real / "tasks" / name).read_text(encoding="utf-8")
        lists.append(re.findall(r'"source": "database/([^"]+)"', text))
    assert lists[0] == lists[1]
    return lists[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    real = SHARED / "data" / "dataclawbench"
    root = tmp_path_factory.mktemp("dcb") / "root"
    raw_dir = root / "assets" / "qa_raw"
    real_gold = {(p.parent.name, p.stem): p for p in (real / "assets" / "qa_gold").glob("*/*.json")}
    for category, levels in README_COUNTS.items():
        (raw_dir / category).mkdir(parents=True)
        for level, count in levels.items():
            ids = sorted(i for (c, i) in real_gold if c == category and i.startswith(level))
            n = 1
            while len(ids) < count:
                candidate = f"{level}{n:03d}"
                if candidate not in ids:
                    ids.append(candidate)
                n += 1
            for item_id in ids:
                if (category, item_id) in real_gold:
                    gold = json.loads(real_gold[category, item_id].read_text(encoding="utf-8"))
                    item = {k: ([] if k == "evidence" else gold[k]) for k in RAW_KEY_ORDER}
                else:
                    item = _placeholder(category, level, item_id)
                target = raw_dir / category / f"{item_id}_result.json"
                target.write_text(json.dumps(item, ensure_ascii=False, indent=2), "utf-8")
    # the one real raw file replaces its reconstruction
    shutil.copyfile(
        real / "assets/qa_raw/comprehensive_decision/easy001_result.json",
        raw_dir / "comprehensive_decision" / "easy001_result.json",
    )
    for rel in _database_paths(real):
        path = root / "assets" / "database" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    return root, real


def test_placeholder_layout_matches_the_readme(built):
    root, _ = built
    raws = list((root / "assets" / "qa_raw").glob("*/*_result.json"))
    assert len(raws) == 492
    # comprehensive_decision 70 + enterprise_industry_analysis 226 +
    # enterprise_industry_policy_analysis 76 files sort before hypothesis_verification/hard001
    ordered = sorted(p.relative_to(root).parts for p in raws)
    position = ordered.index(("assets", "qa_raw", "hypothesis_verification", "hard001_result.json"))
    assert position + 1 == 373


def test_rebuilds_both_real_task_files_byte_for_byte(built):
    root, real = built
    result = build_dataclaw(root)
    assert len(result.task_files) == 492
    assert len(result.database_files) == 19
    for name in (TASK_001, TASK_373):
        generated = root / "tasks" / name
        assert generated.is_file(), name
        assert generated.read_bytes() == (real / "tasks" / name).read_bytes(), name
    # the mode open() gives a new file, not mkstemp's 0600 (helper-135)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((root / "tasks" / TASK_001).stat().st_mode) == 0o666 & ~umask


def test_rebuilds_every_real_gold_file_byte_for_byte(built):
    root, real = built
    build_dataclaw(root)
    real_golds = sorted((real / "assets" / "qa_gold").glob("*/*.json"))
    assert len(real_golds) == 57
    for gold in real_golds:
        generated = root / "assets" / "qa_gold" / gold.parent.name / gold.name
        assert generated.read_bytes() == gold.read_bytes(), gold


def test_out_folder_and_reading_the_result(built, tmp_path):
    root, real = built
    out = tmp_path / "out"
    result = build_dataclaw(root, out=out, database=root / "assets" / "database")
    assert result.task_files[0] == out / "tasks" / TASK_001
    assert (out / "tasks" / TASK_373).read_bytes() == (real / "tasks" / TASK_373).read_bytes()
    # the built root reads back: 492 tasks, upstream ids, every rubric consistent (built here:
    # under xdist the module's fixture can be made afresh for this test alone)
    build_dataclaw(root)
    suite = load_suite(root)
    assert len(suite.tasks) == 492
    assert suite.errors == []
    assert all(t.id.startswith("task_") for t in suite.tasks)
    assert suite.tasks[372].id == TASK_373.removesuffix(".md")
    assert all(t.workspace.is_present for t in suite.tasks)


def test_bad_raw_file_stops_the_build_naming_file_and_field(tmp_path):
    raw = tmp_path / "assets" / "qa_raw" / "risk_assessment"
    raw.mkdir(parents=True)
    item = _placeholder("risk_assessment", "hard", "hard001")
    del item["answer"]
    (raw / "hard001_result.json").write_text(json.dumps(item, indent=2), "utf-8")
    with pytest.raises(TaskFormatError) as err:
        build_dataclaw(tmp_path)
    assert err.value.path == raw / "hard001_result.json"
    assert err.value.field == "answer"
    assert not (tmp_path / "tasks").exists()


def test_missing_qa_raw_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="qa_raw"):
        build_dataclaw(tmp_path)
