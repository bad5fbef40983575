"""Helpers for the integrity attacks (issue 14): a task built in code (its grader, its initial
files and gt/, optionally services) and one trial of it run end to end: a real bwrap sandbox,
the native agent driven by a scripted model that runs the attack's shell commands, real
grading."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clawrig.runner.trial import TrialServices, run_trial
from clawrig.services import parse_services
from clawrig.spec.job import TrialConfig
from clawrig.spec.task import FileContent, Grader, GraderKind, SourceRef, Task, Workspace
from clawrig.spec.trial import TrialResult
from clawrig.testing.scripted_server import call, reply

ANSWER_GRADER = """
import os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    want = open(os.path.join(workspace_path, "gt", "answer.txt")).read().strip()
    try:
        got = open(os.path.join(workspace_path, "results", "out.txt")).read().strip()
    except OSError:
        return {"overall_score": 0.0}
    return {"overall_score": 1.0 if got == want else 0.0}
"""
"""Full marks only for results/out.txt holding gt/answer.txt's text (SECRET-ANSWER-7)."""


def task_with(
    tmp_path: Path,
    grader: str = ANSWER_GRADER,
    *,
    files: dict[str, str] | None = None,
    services: list[dict[str, Any]] | None = None,
    timeout_s: float = 60.0,
    grader_timeout_s: float = 20.0,
) -> Task:
    """A task whose gt/answer.txt is ``SECRET-ANSWER-7`` and whose grader is ``grader``."""
    source = tmp_path / "task.json"
    source.write_text("{}")
    return Task(
        id="integrity",
        category="integrity",
        prompt="Write the answer to /tmp_workspace/results/out.txt.",
        format="fourfolder",
        source=SourceRef(path=source),
        timeout_seconds=timeout_s,
        workspace=Workspace(
            inline_files={k: FileContent(text=v) for k, v in (files or {"input.txt": "x"}).items()},
            gt_files={"answer.txt": FileContent(text="SECRET-ANSWER-7\n")},
        ),
        services=parse_services(services, source) if services else [],
        grader=Grader(
            kind=GraderKind.PROGRAMMATIC, source=grader, timeout_seconds=grader_timeout_s
        ),
    )


@pytest.fixture
def make_task(tmp_path: Path) -> Callable[..., Task]:
    """``make_task(grader=ANSWER_GRADER, *, files, services, timeout_s, grader_timeout_s)``:
    a task whose gt/answer.txt is ``SECRET-ANSWER-7``."""

    def make(*args: Any, **kwargs: Any) -> Task:
        return task_with(tmp_path, *args, **kwargs)

    return make


def execs(*commands: str) -> list:
    """A scripted model's replies: one exec tool call per command, then "done"."""
    return [reply(tool_calls=[call("exec", {"command": c})]) for c in commands] + [reply("done")]


@pytest.fixture
def attack(scripted_server, tmp_path: Path) -> Callable[..., Any]:
    """``await attack(task, *commands, **config)`` -> (TrialResult, trial folder)."""

    async def run(task: Task, *commands: str, **cfg: Any) -> tuple[TrialResult, Path]:
        srv = scripted_server(execs(*commands))
        config = TrialConfig(agent="native", model="scripted/x", **cfg)
        return await run_trial(
            task, config, tmp_path / "out", services=TrialServices(model=srv.chat_model())
        )

    return run
