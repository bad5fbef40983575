"""The copy of the host's /etc that bwrap sandboxes on the host's system bind
(clawrig.sandbox.bwrap.host_etc, once per hostname and process): made off the event loop,
by a job's prefetch or by the first sandbox that launches."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from clawrig.sandbox import bwrap

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def test_the_first_sandbox_copies_etc_off_the_event_loop(make_sandbox, monkeypatch):
    copies: list[bool] = []  # per call that made the copy: was it on the event loop?
    real = bwrap.host_etc

    def watched(hostname: str) -> Path:
        if hostname not in bwrap._etc:
            copies.append(_on_event_loop())
        return real(hostname)

    monkeypatch.setattr(bwrap, "_etc", {})  # this process has made no copy yet
    monkeypatch.setattr(bwrap, "host_etc", watched)
    sb = await make_sandbox("bwrap", config={"hostname": "etc-test"})
    r = await sb.exec("cat /etc/hostname; test -e /etc/ld.so.cache && echo cache")
    assert r.exit_code == 0 and r.stdout.split() == ["etc-test", "cache"]
    assert copies == [False]


def test_prefetch_makes_the_copy_sandboxes_then_reuse(monkeypatch):
    monkeypatch.setattr(bwrap, "_etc", {})
    bwrap.prefetch_host_etc("prefetch-test").join(timeout=120)
    folder = bwrap._etc["prefetch-test"]
    assert (folder / "hostname").read_text() == "prefetch-test\n"
    assert (folder / "ld.so.cache").read_bytes() == Path("/etc/ld.so.cache").read_bytes()
    assert not (folder / "ssl" / "private").exists()  # the host's private keys stay out
    assert bwrap.host_etc("prefetch-test") == folder
