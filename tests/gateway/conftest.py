"""Fixtures for the model gateway tests: a started :class:`Gateway` factory, an upstream
endpoint on the scripted server carrying a distinctive "real" key, and real bwrap sandboxes
bound to a gateway."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gw_helpers import FAST_RETRY

from clawrig.llm.gateway import Gateway, GatewayDoor
from clawrig.sandbox import Limits, SandboxConfig, create_sandbox
from clawrig.sandbox.base import Bind


@pytest.fixture
def make_gateway() -> Iterator[Callable[..., Gateway]]:
    """``make_gateway(**kwargs)`` -> a started Gateway (test-sized retries), stopped after."""
    made: list[Gateway] = []

    def factory(**kwargs: Any) -> Gateway:
        kwargs.setdefault("retry", FAST_RETRY)
        gw = Gateway(**kwargs).start()
        made.append(gw)
        return gw

    yield factory
    for gw in made:
        gw.stop()


def bwrap_missing() -> str | None:
    return None if shutil.which("bwrap") else "bubblewrap is not installed"


@pytest.fixture
async def gw_sandbox() -> AsyncIterator[Callable[..., Any]]:
    """``await gw_sandbox(gateway, binds=[], uid_drop=False)`` -> a started bwrap sandbox with
    its own door to the gateway bound read-only; stopped (and the door closed) after the test."""
    if reason := bwrap_missing():
        pytest.skip(reason)
    made: list[Any] = []
    folders: list[Path] = []
    doors: list[GatewayDoor] = []
    counter = iter(range(1000))

    async def factory(gateway: Gateway, binds: list[Bind] | None = None, uid_drop: bool = False):
        # a folder every uid may enter, so a sandbox dropped to another host uid can bind it
        ws = Path(tempfile.mkdtemp(prefix=f"clawrig-test-ws{next(counter)}-"))
        os.chmod(ws, 0o755)
        folders.append(ws)
        door = await GatewayDoor(gateway).start()  # the sandbox's own capped socket
        doors.append(door)
        cfg = SandboxConfig(
            workspace_dir=ws,
            limits=Limits(),
            binds=[*door.sandbox_binds(), *(binds or [])],
        )
        sb = create_sandbox("bwrap", cfg)
        if uid_drop:
            sb.force_uid_drop = True  # type: ignore[attr-defined]
        await sb.start()
        made.append(sb)
        return sb

    yield factory
    for sb in made:
        with contextlib.suppress(Exception):
            await sb.stop()
    for door in doors:
        await door.stop()
    for ws in folders:
        shutil.rmtree(ws, ignore_errors=True)
