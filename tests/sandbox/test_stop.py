"""A bwrap sandbox's stop leaves nothing behind even when bwrap's ``--die-with-parent`` did not
take (bwrap killed before its init process asked for it, a race under load): every process of
the sandbox's cgroup is killed. Before, such an orphan held the sandbox's pipes, so the stop of
a sandbox that failed to start waited for it forever and a job sat idle at its end (issue 19)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clawrig.sandbox import Limits, SandboxConfig
from clawrig.sandbox.bwrap import BwrapSandbox, bwrap_path

pytestmark = pytest.mark.sandbox


async def test_stop_kills_what_is_left_in_the_sandboxs_cgroup(tmp_path: Path):
    if bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    sb = BwrapSandbox(
        SandboxConfig(workspace_dir=tmp_path / "ws", limits=Limits(memory_bytes=1 << 30))
    )
    await sb.start()
    assert sb.cgroup is not None and sb._proc is not None
    if not sb.cgroup.procs_files:
        await sb.stop()
        pytest.skip("no cgroup for the sandbox (the harness is not root)")
    dirs = list(sb.cgroup.dirs)
    # an orphan of the sandbox: in its cgroup, holding its stdout pipe (what bwrap's init and
    # the supervisor hold when --die-with-parent misses)
    with open(f"/proc/{sb._proc.pid}/fd/1", "wb") as pipe:
        orphan = subprocess.Popen(["sleep", "300"], stdout=pipe, start_new_session=True)
    try:
        for procs in sb.cgroup.procs_files:
            Path(procs).write_text(str(orphan.pid))
        await sb.stop()
        assert orphan.wait(timeout=30) == -9  # killed, not left running
        assert not any(d.exists() for d in dirs)  # and the cgroup removed
    finally:
        if orphan.poll() is None:
            os.kill(orphan.pid, 9)
            orphan.wait()


_CTRL_C = """
import asyncio, os, signal, sys
from pathlib import Path
from clawrig.sandbox import SandboxConfig
from clawrig.sandbox import userns
from clawrig.sandbox.bwrap import BwrapSandbox

async def main() -> None:
    interrupted = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, interrupted.set)
    sb = BwrapSandbox(SandboxConfig(workspace_dir=Path(sys.argv[1])))
    await sb.start()
    try:
        assert sb._proc is not None
        print("same group" if os.getpgid(sb._proc.pid) == os.getpgid(0) else "own group")
        os.killpg(0, signal.SIGINT)  # what a terminal's Ctrl-C does: its foreground group
        await interrupted.wait()
        r = await sb.exec("sleep 0.5; echo alive")
        print(r.stdout.strip())
        helper = userns._writer[0]  # the caps helper, when this host's sandboxes need one
        print("helper " + ("none" if helper is None else "dead" if helper.poll() else "alive"))
    except Exception as exc:
        print(type(exc).__name__)
    finally:
        await sb.stop()

asyncio.run(main())
"""


def test_a_ctrl_c_to_the_harness_group_leaves_its_sandboxes_to_the_harness(tmp_path: Path):
    """A terminal's Ctrl-C signals its whole foreground process group. A bwrap sandbox is not
    in the harness's group: the harness stops its sandboxes itself (cancelling its trials).
    Before, bwrap's outer process died of the SIGINT as well; when that came while bwrap was
    starting, its init process outlived it (--die-with-parent not asked for yet) holding the
    sandbox's pipes, and the interrupted job waited out its grace time and exited without
    its summary (clawrig run -p 60 --workers 2, Ctrl-C: 10 s, "trials did not stop").
    The helper that sets sandboxes' inotify caps (:mod:`clawrig.sandbox.userns`) died of it
    too."""
    if bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    out = subprocess.run(
        [sys.executable, "-c", _CTRL_C, str(tmp_path / "ws")],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,  # its own group to signal, not pytest's
    )
    words = out.stdout.split()
    assert words[:3] == ["own", "group", "alive"], out.stderr[-2000:]
    assert words[3:] in (["helper", "none"], ["helper", "alive"]), out.stderr[-2000:]


async def test_a_start_cancelled_as_bwrap_launches_ends_with_an_orphan_in_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A trial cancelled (Ctrl-C) while its sandbox's bwrap is being launched: asyncio kills
    the launched process alone and then waits for its stderr pipe to close, which bwrap's
    init holds for good when --die-with-parent did not take (the race under load above): the
    start never ended, nor did the interrupted job (it waited out its grace time and exited
    without its summary; ~1 Ctrl-C in 30 at -p 60). The start now lets the launch finish and
    kills the whole sandbox (its cgroup). Here the cancel comes right after bwrap is started,
    and a process of the sandbox's cgroup holds its stderr, as that init does."""
    import asyncio
    from asyncio import unix_events

    if bwrap_path() is None:
        pytest.skip("bubblewrap is not installed")
    sb = BwrapSandbox(
        SandboxConfig(workspace_dir=tmp_path / "ws", limits=Limits(memory_bytes=1 << 30))
    )
    orphans: list[subprocess.Popen[bytes]] = []
    real_start = unix_events._UnixSubprocessTransport._start

    def start_then_cancel(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        real_start(self, *args, **kwargs)  # bwrap is running now
        if sb.cgroup is None or not sb.cgroup.procs_files:
            return
        with open(f"/proc/{self._proc.pid}/fd/2", "wb") as pipe:
            orphans.append(subprocess.Popen(["sleep", "300"], stderr=pipe, start_new_session=True))
        for procs in sb.cgroup.procs_files:
            Path(procs).write_text(str(orphans[-1].pid))
        start.cancel()  # the trial's task: Ctrl-C now

    monkeypatch.setattr(unix_events._UnixSubprocessTransport, "_start", start_then_cancel)
    start = asyncio.ensure_future(sb.start())
    try:
        done, _ = await asyncio.wait([start], timeout=60)
        monkeypatch.undo()
        if not orphans:
            await sb.stop()
            pytest.skip("no cgroup for the sandbox (the harness is not root)")
        assert done == {start}, "the cancelled start did not end"
        assert start.cancelled()
        assert orphans[0].wait(timeout=30) == -9  # the sandbox's processes killed
    finally:
        for orphan in orphans:
            if orphan.poll() is None:
                os.kill(orphan.pid, 9)
                orphan.wait()
