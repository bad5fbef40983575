"""An output folder that holds two jobs exports only the job its summary describes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clawrig.export.job import find_trials
from clawrig.runner.batch import run_job
from clawrig.runner.trial import TrialServices
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.tasks.registry import load_tasks

pytestmark = pytest.mark.sandbox

DEMO = Path(__file__).resolve().parents[2] / "suites" / "demo"


async def test_only_the_summarised_job_is_exported(tmp_path):
    tasks = [t for t in load_tasks(DEMO) if t.id in ("000015", "000003")]
    out = tmp_path / "out"
    job = JobConfig(suite_path=DEMO, output=out, trial=TrialConfig(agent="oracle", model="oracle"))
    first = await run_job(job, tasks, TrialServices())
    # a job refuses a folder holding a finished one; a folder an older clawrig wrote twice
    # into is built by hand: the second job's trials and summary moved over the first's
    other = tmp_path / "other"
    second = await run_job(job.model_copy(update={"output": other}), tasks, TrialServices())
    for trial in other.glob("*/*/result.json"):
        shutil.move(str(trial.parent), str(out / trial.parent.relative_to(other)))
    shutil.copy(other / "summary_oracle.json", out / "summary_oracle.json")
    assert first["job_id"] != second["job_id"]
    assert len(list(out.glob("*/*/result.json"))) == 4  # both jobs' folders are there
    trials = find_trials(out)
    assert len(trials) == 2 and {t.result.job_id for t in trials} == {second["job_id"]}
    summary = json.loads((out / "summary_oracle.json").read_text())
    assert summary["job_id"] == second["job_id"]
