"""Fixtures for tool tests: a real bwrap sandbox per test, a ToolContext bound to it and a
``call`` helper that goes through ``Toolset.call`` exactly as the agent loop does.

    async def test_x(call, workspace):
        (workspace / "a.txt").write_text("hi")          # host side of /tmp_workspace
        r = await call("read", {"path": "a.txt"})        # dict -> JSON string -> Toolset.call
        r = await call("read", '{"path": ')              # a raw (malformed) string as is
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from clawrig.sandbox import SandboxConfig, create_sandbox
from clawrig.sandbox.base import Sandbox
from clawrig.tools import ToolContext, ToolResult, Toolset

Call = Callable[..., Awaitable[ToolResult]]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The host folder bound at /tmp_workspace."""
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
async def sandbox(workspace: Path) -> AsyncIterator[Sandbox]:
    """A started bwrap sandbox on ``workspace``, stopped after the test."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    sb = create_sandbox("bwrap", SandboxConfig(workspace_dir=workspace))
    await sb.start()
    try:
        yield sb
    finally:
        with contextlib.suppress(Exception):
            await sb.stop()


@pytest.fixture
async def ctx(sandbox: Sandbox) -> AsyncIterator[ToolContext]:
    """The main session's tool context; cleaned up like an agent loop does at the end."""
    c = ToolContext(sandbox=sandbox)
    yield c
    await Toolset("full").aclose(c)


@pytest.fixture
def toolset() -> Toolset:
    return Toolset("full")


@pytest.fixture
def call(ctx: ToolContext, toolset: Toolset) -> Call:
    """``await call(name, args, ctx=None)``: args as a dict (sent as JSON) or a raw string."""

    async def run(name: str, args: dict[str, Any] | str, c: ToolContext | None = None):
        raw = args if isinstance(args, str) else json.dumps(args)
        return await toolset.call(c or ctx, name, raw)

    return run
