"""Fixtures for sandbox tests: a factory that builds and starts a real sandbox per test."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from clawrig.sandbox import Limits, SandboxConfig, create_sandbox
from clawrig.sandbox.client import SupervisedSandbox

BACKENDS = ["bwrap", "local", "docker"]


def backend_available(kind: str) -> str | None:
    """None when the backend can run here, else the reason to skip."""
    if kind == "bwrap" and shutil.which("bwrap") is None:
        return "bubblewrap is not installed"
    return None


def _backend(request: pytest.FixtureRequest) -> str:
    reason = backend_available(request.param)
    if reason:
        pytest.skip(reason)
    if request.param == "docker":
        request.getfixturevalue("docker_image")  # built once per session, or skip with why
    return request.param


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Every backend: the conformance suite runs on each."""
    return _backend(request)


@pytest.fixture(params=["bwrap", "docker"])
def isolated(request: pytest.FixtureRequest) -> str:
    """The isolating backends: the escape suite runs on each."""
    return _backend(request)


@pytest.fixture
async def make_sandbox(
    tmp_path: Path,
) -> AsyncIterator[Callable[..., object]]:
    """``await make_sandbox(kind, **limits)`` -> a started sandbox, stopped after the test."""
    made: list[SupervisedSandbox] = []
    counter = iter(range(1000))

    async def factory(
        kind: str = "bwrap",
        workspace: Path | None = None,
        config: dict[str, object] | None = None,
        **limits: object,
    ):
        ws = workspace or tmp_path / f"ws{next(counter)}"
        ws.mkdir(parents=True, exist_ok=True)
        cfg = SandboxConfig(workspace_dir=ws, limits=Limits(**limits), **(config or {}))
        sb = create_sandbox(kind, cfg)
        assert isinstance(sb, SupervisedSandbox)
        await sb.start()
        made.append(sb)
        return sb

    yield factory
    for sb in made:
        with contextlib.suppress(Exception):
            await sb.stop()
