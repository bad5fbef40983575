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
import sys
from typing import Any

__version__ = "0.1.0"

# httpx's package imports its command-line client (httpx._main) when it is imported, and that
# imports click, pygments and rich's syntax highlighting: ~0.2 s of CPU at the start of every
# `clawrig run` (its gateway uses httpx), for a CLI clawrig never calls. A None entry makes
# that one import fail, which httpx expects (it then defines a ``main`` that says its CLI
# extras are missing); the rest of httpx is unchanged, and the `httpx` command, its own
# process, still works. Only when httpx is not imported yet (not to undo a real one).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

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
