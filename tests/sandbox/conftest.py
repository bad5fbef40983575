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
    if kind in ("bwrap", "pooled", "bwrap-started") and shutil.which("bwrap") is None:
        return "bubblewrap is not installed"
    if kind == "pooled":
        from clawrig.sandbox.pool import pooling_possible

        if not pooling_possible():
            return "a warm pool needs root and mke2fs"
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


@pytest.fixture(params=["bwrap", "bwrap-started", "pooled", "docker"])
def isolated(request: pytest.FixtureRequest) -> str:
    """The isolating backends: the escape suite runs on each (``pooled``: a bwrap sandbox
    started by a warm pool, then taken by the test, :mod:`clawrig.sandbox.pool`;
    ``bwrap-started``: a bwrap sandbox whose supervisor starts in it, not forked by the
    zygote, :mod:`clawrig.sandbox.zygote`, as with an environment's root file system)."""
    return _backend(request)


@pytest.fixture
async def make_sandbox(
    tmp_path: Path,
) -> AsyncIterator[Callable[..., object]]:
    """``await make_sandbox(kind, **limits)`` -> a started sandbox, stopped after the test
    (``pooled``: started by a warm pool with empty slots, then taken: the workspace mounted,
    the environment and time limit set)."""
    made: list[SupervisedSandbox] = []
    counter = iter(range(1000))
    pool = None

    async def factory(
        kind: str = "bwrap",
        workspace: Path | None = None,
        config: dict[str, object] | None = None,
        **limits: object,
    ):
        ws = workspace or tmp_path / f"ws{next(counter)}"
        ws.mkdir(parents=True, exist_ok=True)
        cfg = SandboxConfig(workspace_dir=ws, limits=Limits(**limits), **(config or {}))
        if kind == "pooled":
            from clawrig.sandbox.pool import WarmPool

            nonlocal pool
            pool = pool or WarmPool(parallel=1, work_dir=tmp_path)
            entry = await pool.take("bwrap", cfg)
            assert entry is not None, "the warm pool cannot hold this config"
            pooled.append(entry)
            sb = await entry.claim(cfg)
            made.append(sb)
            return sb
        with pytest.MonkeyPatch.context() as patch:
            if kind == "bwrap-started":
                patch.setenv("CLAWRIG_ZYGOTE", "0")
                kind = "bwrap"
            sb = create_sandbox(kind, cfg)
            assert isinstance(sb, SupervisedSandbox)
            await sb.start()
        made.append(sb)
        return sb

    pooled: list = []
    yield factory
    for sb in made:
        with contextlib.suppress(Exception):
            await sb.stop()
    for entry in pooled:
        await entry.release()
    if pool is not None:
        await pool.close()
