"""Fixtures for the service tests: the services environment (built once per session, in the
normal cache, so later runs reuse it), real bwrap sandboxes with it bound, and task builders."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from clawrig.sandbox import SandboxConfig
from clawrig.sandbox.bwrap import BwrapSandbox
from clawrig.sandbox.pyenv import env_bind
from clawrig.services import parse_services, services_env
from clawrig.spec.task import Grader, GraderKind, SourceRef, Task, TaskFormat


@pytest.fixture(scope="session")
def services_env_path() -> Path:
    """The FastAPI + uvicorn environment (pip from PyPI the first time, then cached)."""
    return services_env()


def _make_task(services: list[dict[str, Any]], grader: str | None = None, tid: str = "svc") -> Task:
    """A task with the given ``services`` entries (intent-file shape) and optional grader."""
    return Task(
        id=tid,
        prompt="p",
        format=TaskFormat.FOURFOLDER,
        source=SourceRef(path=Path(f"{tid}.json")),
        services=parse_services(services, Path(f"{tid}.json")),
        grader=Grader(kind=GraderKind.PROGRAMMATIC, source=grader) if grader else Grader(),
    )


@pytest.fixture
def make_task() -> Callable[..., Task]:
    """``make_task(services, grader=None)`` -> a Task with those intent-shaped services."""
    return _make_task


@pytest.fixture
async def sandbox(services_env_path: Path, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await sandbox()`` -> a started bwrap sandbox with the services environment bound."""
    made: list[BwrapSandbox] = []

    async def make(workspace: Path | None = None) -> BwrapSandbox:
        ws = workspace or tmp_path / f"ws{len(made)}"
        sb = BwrapSandbox(SandboxConfig(workspace_dir=ws, binds=[env_bind(services_env_path)[0]]))
        await sb.start()
        made.append(sb)
        return sb

    yield make
    for sb in made:
        await sb.stop()
