"""clawrig: run Claw-style agent benchmarks for real.

Task files (WildClawBench Markdown, four-folder sample sets, DataClawBench) -> an isolated
bubblewrap sandbox per trial -> an OpenClaw-compatible agent -> the task's own grader, an LLM
judge and process metrics -> parallel, resumable, budget-capped jobs.

The curated public API (imported lazily, so ``import clawrig`` stays cheap):

- tasks: :func:`load_tasks`, :class:`Task`
- one trial / a job: :func:`run_trial`, :class:`Job` (``Job(config).run()``: what
  ``clawrig run`` does, with the gateway, the budget, preflight and resume), :func:`run_job`
  (the same in one call), :class:`TrialConfig`, :class:`JobConfig`, :class:`TrialResult`,
  :class:`TrialServices`
- sandboxes: :func:`create_sandbox`, :class:`SandboxConfig`, :class:`Limits`
- models: :func:`get_model`
- verification and export: :func:`verify_path`, :func:`export_fourfolder`, :func:`export_sft`
- re-grading: :func:`regrade_trial`
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"


_EXPORTS = {
    "load_tasks": "clawrig.tasks.registry",
    "Task": "clawrig.spec.task",
    "TrialConfig": "clawrig.spec.job",
    "JobConfig": "clawrig.spec.job",
    "TrialResult": "clawrig.spec.trial",
    "run_trial": "clawrig.runner.trial",
    "TrialServices": "clawrig.runner.trial",
    "Job": "clawrig.runner.job",
    "run_job": "clawrig.runner.job",
    "create_sandbox": "clawrig.sandbox",
    "SandboxConfig": "clawrig.sandbox",
    "Limits": "clawrig.sandbox",
    "get_model": "clawrig.llm.client",
    "verify_path": "clawrig.verify",
    "export_fourfolder": "clawrig.export",
    "export_sft": "clawrig.export",
    "regrade_trial": "clawrig.runner.regrade",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'clawrig' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
