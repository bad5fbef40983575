"""A WildClawBench suite whose graders call a judge gets upstream's default judge when the
job names none and an OpenRouter key is configured; JUDGE_MODEL (environment or .env) wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrig.runner.job import Job
from clawrig.spec.job import JobConfig, TrialConfig

pytestmark = pytest.mark.sandbox

SUITE = Path(__file__).resolve().parents[2] / "examples" / "wildclaw-patterns" / "tasks"


def _judge(tmp_path, monkeypatch, env: dict[str, str], env_file: str | None = None):
    for name in ("JUDGE_MODEL", "OPENROUTER_API_KEY", "DEFAULT_MODEL"):
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    path = None
    if env_file is not None:
        path = tmp_path / "job.env"
        path.write_text(env_file)
    cfg = JobConfig(
        suite_path=SUITE, output=tmp_path / "out", env_file=path, trial=TrialConfig(agent="nop")
    )
    job = Job(cfg)
    job.tasks = job._select(cfg)
    return job._resolve_models(cfg, False)["judge"]


def test_upstream_default_and_judge_model(tmp_path, monkeypatch):
    assert _judge(tmp_path, monkeypatch, {"OPENROUTER_API_KEY": "sk-x"}) == (
        "openrouter/openai/gpt-5.4"
    )
    assert _judge(tmp_path, monkeypatch, {}) is None  # no key: no judge (a note says so)
    env_file = "OPENROUTER_API_KEY=sk-x\nJUDGE_MODEL=openrouter/some/judge\n"
    assert _judge(tmp_path, monkeypatch, {}, env_file=env_file) == "openrouter/some/judge"
