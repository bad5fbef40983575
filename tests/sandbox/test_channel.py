"""The harness channel (clawrig.sandbox.channel) over a real unix socket."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest

from clawrig.sandbox.channel import HarnessChannel


async def test_a_cancelled_wait_for_the_connections_leaves_no_unretrieved_exception(
    tmp_path: Path,
) -> None:
    # wait_ended was wait_for(gather(...)): cancelled (a trial stopped while its grader's
    # verdict connection was open), the gather ended with a CancelledError nobody retrieved,
    # reported as a traceback when collected: on a harness worker's stderr (it has no handler
    # that quiets them) at a Ctrl-C of a --workers job, once in ~15
    reports: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reports.append(ctx))
    channel = await HarnessChannel(tmp_path / "chan", "/chan").open()
    try:
        _, writer = await asyncio.open_unix_connection(str(channel.host_path))
        for _ in range(200):
            if channel.connections:
                break
            await asyncio.sleep(0.01)
        assert len(channel.connections) == 1
        assert await channel.wait_ended(0.2) is False  # held open: the time is up
        waiting = asyncio.create_task(channel.wait_ended(30.0))
        await asyncio.sleep(0.1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        writer.close()
        assert await channel.wait_ended(5.0) is True
    finally:
        await channel.close()
    del waiting
    gc.collect()
    await asyncio.sleep(0)
    assert [ctx["message"] for ctx in reports] == []
