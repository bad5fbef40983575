"""The files users read are typed: process_score.json (:class:`ProcessScore`) inside
result.json, and the summary's ``data`` entry (:class:`DataCheck`); a file of the wrong shape is
refused naming the field, one of the right shape round-trips unchanged."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from clawrig.spec.process import ProcessScore
from clawrig.spec.summary import DataCheck, JobSummary
from clawrig.spec.trial import TrialResult

RESULT = {"task_id": "t", "trial_id": "x", "model": "m", "agent": "native", "sandbox": "bwrap"}


def test_result_json_process_is_the_process_score_shape():
    eff = {"efficiency": {"s_agent": 4, "s_gold": 6, "efficiency": 1.5}}
    r = TrialResult.model_validate(RESULT | {"process": eff})
    assert r.process.metrics()["ee"] == 1.5
    # written back exactly as upstream writes it: only the block that applies
    assert r.model_dump(mode="json")["process"] == eff
    assert TrialResult.model_validate(RESULT).model_dump(mode="json")["process"] == {}
    with pytest.raises(ValidationError, match=r"process\.gpr\.milestones_total"):
        TrialResult.model_validate(RESULT | {"process": {"gpr": {"gpr": 0.5}}})
    with pytest.raises(ValidationError, match=r"process\.efficiency\.efficiency"):
        TrialResult.model_validate(
            RESULT | {"process": {"efficiency": {"s_agent": 1, "s_gold": 1, "efficiency": "x"}}}
        )


def test_a_process_error_and_a_skip_keep_their_keys():
    for raw in (
        {"error": "milestone 2 is achieved without a step", "error_kind": "grading"},
        {"skipped": "the run has no outcome score (agent or grading error)"},
    ):
        p = ProcessScore.model_validate(raw)
        assert p.model_dump(mode="json") == raw
        assert p.metrics() == {"ee": None, "gpr": None, "tpe": None, "tgpr": None}


def test_the_summary_data_entry_is_typed():
    base = {"model": "m", "agent": "a", "benchmark_version": "v", "timestamp": "now"}
    data = {
        "manifest": "/d/.clawrig-manifest.json",
        "source": "hf://datasets/o/n@main",
        "repo_id": "o/n",
        "revision": "main",
        "commit": "a" * 40,
        "files": 3,
        "files_sha256": "b" * 64,
        "matches": False,
        "changed": ["x.csv"],
        "changed_count": 1,
        "missing": [],
        "missing_count": 0,
        "added": [],
        "added_count": 0,
    }
    s = JobSummary.model_validate(base | {"data": data})
    assert isinstance(s.data, DataCheck) and s.data.changed == ["x.csv"]
    assert s.to_json()["data"] == data
    with pytest.raises(ValidationError, match=r"data\.changed_count"):
        JobSummary.model_validate(base | {"data": data | {"changed_count": "many"}})
