"""A bwrap sandbox's own inotify caps (clawrig.sandbox.userns): written in its user namespace by
the zygote's child that forks its supervisor (clawrig.sandbox.zygote), else by the harness's
helper process (one per harness process, a fork per sandbox), or by ``nsenter`` when the helper
cannot run; either way the sandbox reads its caps in /proc/sys/user, and a
namespace that cannot be entered is said, not ignored."""

from __future__ import annotations

import shutil
import sys

import pytest

from clawrig.sandbox import userns
from clawrig.sandbox.userns import SANDBOX_INOTIFY_INSTANCES, SANDBOX_INOTIFY_WATCHES

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

CAPS = "cat /proc/sys/user/max_inotify_instances /proc/sys/user/max_inotify_watches"


async def _caps(sb: object) -> list[int]:
    r = await sb.exec(CAPS)  # type: ignore[attr-defined]
    assert r.exit_code == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


async def test_the_zygote_writes_them_for_a_supervisor_it_forks(make_sandbox, monkeypatch):
    from clawrig.sandbox.zygote import zygote_usable

    if not zygote_usable("/usr/bin/python3"):
        pytest.skip("no zygote here (not root, no init program or no /usr/bin/python3)")
    monkeypatch.setattr(userns, "_writer", [None])
    sb = await make_sandbox("bwrap")
    assert sb.zygote is True
    assert userns._writer == [None]  # no helper: the zygote's child wrote them
    assert await _caps(sb) == [SANDBOX_INOTIFY_INSTANCES, SANDBOX_INOTIFY_WATCHES]


async def test_the_helper_writes_each_sandboxs_caps(make_sandbox, monkeypatch):
    monkeypatch.setenv("CLAWRIG_ZYGOTE", "0")  # a supervisor started in the sandbox
    monkeypatch.setattr(userns, "_writer", [None])
    monkeypatch.setattr(userns, "_writer_broken", [False])
    a = await make_sandbox("bwrap")
    helper = userns._writer[0]
    assert helper is not None and helper.poll() is None  # the helper did it, and lives on
    b = await make_sandbox("bwrap")
    assert userns._writer[0] is helper  # one helper for every sandbox of the process
    assert await _caps(a) == await _caps(b) == [SANDBOX_INOTIFY_INSTANCES, SANDBOX_INOTIFY_WATCHES]
    userns._stop_writer(helper)
    assert helper.returncode == 0  # it ends at its stdin's end


async def test_nsenter_writes_them_when_the_helper_cannot_run(make_sandbox, monkeypatch):
    monkeypatch.setenv("CLAWRIG_ZYGOTE", "0")
    monkeypatch.setattr(userns, "_writer", [None])
    monkeypatch.setattr(userns, "_writer_broken", [False])
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    sb = await make_sandbox("bwrap")
    assert userns._writer_broken == [True] and userns._writer == [None]
    assert await _caps(sb) == [SANDBOX_INOTIFY_INSTANCES, SANDBOX_INOTIFY_WATCHES]


def test_a_namespace_that_cannot_be_entered_is_said(monkeypatch):
    monkeypatch.setattr(userns, "_writer", [None])
    why = userns._write_caps(2**22 + 12345)  # above pid_max's default: no such process
    assert why is not None and "No such file or directory" in why
    helper = userns._writer[0]
    assert helper is not None and helper.poll() is None  # a failed request ends no helper
    userns._stop_writer(helper)
