"""The local backend (no isolation) for a user other than root."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox

_STARTED = r"""

async def started(ws):
    # (another test's root local sandbox may hold the machine's /tmp_workspace a moment)
    from clawrig.errors import SandboxError
    for _ in range(600):
        box = LocalSandbox(SandboxConfig(workspace_dir=ws))
        try:
            await box.start()
            return box
        except SandboxError as exc:
            if "/tmp_workspace on this machine is" not in str(exc):
                raise
            await asyncio.sleep(0.1)
    raise SystemExit("/tmp_workspace stayed taken")
"""
"""A user's local sandbox started, again while root's holds the machine's /tmp_workspace."""

_AS_USER = (
    r"""
import asyncio, sys, warnings
warnings.simplefilter("ignore")
from clawrig.sandbox.base import SandboxConfig
from clawrig.sandbox.local import LocalSandbox
from clawrig.sandbox.paths import PATHS

"""
    + _STARTED
    + r"""

async def main():
    box = await started(sys.argv[1])
    try:
        inside = f"{PATHS.run}/grader-test/grader.py"
        await box.write_file(inside, "print('graded')\n")
        r = await box.exec(["python3", box.path_seen_by_commands(inside)], timeout_s=30)
        print(r.stdout.strip(), r.exit_code, r.stderr.strip()[-300:])
    finally:
        await box.stop()

asyncio.run(asyncio.wait_for(main(), 60))
"""
)


_AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3"]


def _nobody_env(**extra: str) -> dict[str, str]:
    """The system's python3 (the harness's may sit in root's home) with this checkout's
    source and the harness's site-packages (the same Python version: checked)."""
    import site

    path = [str(Path(__file__).resolve().parents[2] / "src"), *site.getsitepackages()]
    return {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(path), **extra}


def _nobody_cannot_run() -> str | None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return "needs root and setpriv"
    probe = subprocess.run(
        [*_AS_NOBODY, "-c", "import sys, pydantic, clawrig; print(sys.version_info[:2])"],
        env=_nobody_env(),
        capture_output=True,
        text=True,
    )
    if probe.stdout.strip() != str(sys.version_info[:2]):
        return f"another user cannot run clawrig from here: {probe.stderr.strip()[-200:]}"
    return None


@pytest.mark.skipif(bool(why := _nobody_cannot_run()), reason=why or "")
def test_a_user_runs_local_sandboxes_while_root_holds_its_own() -> None:
    """A user's local sandbox starts and runs a grader's file while root's local sandbox
    holds its lock in the same temp folder: before, one machine-wide lock file (root's,
    0600) and the grader's folder in the machine's /run/clawrig made every trial of any
    other user fail with PermissionError (a red-team finding)."""
    base = Path(tempfile.mkdtemp(prefix="clawrig-test-user-"))  # (pytest's tmp is root's only)
    base.chmod(0o755)
    shared = base / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    held = []
    for name in ("clawrig-local-sandbox.lock", "clawrig-local-sandbox-0.lock"):
        fd = os.open(shared / name, os.O_CREAT | os.O_RDWR, 0o600)  # root's, as root's run
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    ws = base / "ws"
    ws.mkdir()
    os.chown(ws, 65534, 65534)
    try:
        r = subprocess.run(
            [*_AS_NOBODY, "-c", _AS_USER, str(ws)],
            env=_nobody_env(TMPDIR=str(shared)),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        for fd in held:
            os.close(fd)
        shutil.rmtree(base, ignore_errors=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["graded", "0"], r.stdout
    assert not (Path("/run/clawrig") / "grader-test").exists()


_AS_USER_START = r"""
import asyncio, sys, warnings
warnings.simplefilter("ignore")
from clawrig.errors import SandboxError
from clawrig.sandbox.base import SandboxConfig
from clawrig.sandbox.local import LocalSandbox

async def main():
    try:
        async with LocalSandbox(SandboxConfig(workspace_dir=sys.argv[1])) as box:
            print("started", (await box.exec("cat /tmp_workspace/mine.txt")).stdout.strip())
    except SandboxError as exc:
        print("refused:", exc)

asyncio.run(asyncio.wait_for(main(), 60))
"""


@pytest.mark.skipif(bool(why := _nobody_cannot_run()), reason=why or "")
async def test_a_user_s_local_sandbox_never_takes_root_s_running_workspace() -> None:
    """Root's running local sandbox links the machine's /tmp_workspace to its trial's
    workspace, which another user may not replace: that user's local sandbox then saw root's
    trial there (its grader would grade it; a red-team finding). It is refused, naming it."""
    from clawrig.sandbox.base import SandboxConfig
    from clawrig.sandbox.local import LocalSandbox

    base = Path(tempfile.mkdtemp(prefix="clawrig-test-user-"))
    base.chmod(0o755)
    (base / "tmp").mkdir()
    (base / "tmp").chmod(0o1777)
    ws = base / "ws"
    ws.mkdir()
    os.chown(ws, 65534, 65534)
    try:
        async with LocalSandbox(SandboxConfig(workspace_dir=base / "root-ws"), warn=False) as box:
            await box.write_file("/tmp_workspace/mine.txt", "root's trial")
            if not box._linked:
                pytest.skip("this machine's /tmp_workspace cannot be linked (not root's)")
            r = subprocess.run(
                [*_AS_NOBODY, "-c", _AS_USER_START, str(ws)],
                env=_nobody_env(TMPDIR=str(base / "tmp")),
                capture_output=True,
                text=True,
                timeout=120,
            )
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.startswith(
            f"refused: /tmp_workspace on this machine is a link to {(base / 'root-ws').resolve()}"
        ), r.stdout
        assert "root's trial" not in r.stdout
    finally:
        shutil.rmtree(base, ignore_errors=True)


_AS_USER_HOLD = (
    r"""
import asyncio, sys, warnings
warnings.simplefilter("ignore")
from clawrig.sandbox.base import SandboxConfig
from clawrig.sandbox.local import LocalSandbox

"""
    + _STARTED
    + r"""

async def main():
    box = await started(sys.argv[1])
    try:
        print("up", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        print("saw", (await box.exec("cat /tmp_workspace/mine.txt")).stdout.strip() or "nothing")
    finally:
        await box.stop()

asyncio.run(asyncio.wait_for(main(), 60))
"""
)


@pytest.mark.skipif(bool(why := _nobody_cannot_run()), reason=why or "")
async def test_root_s_local_sandbox_does_not_link_while_a_user_s_runs(monkeypatch) -> None:
    """A user's local sandbox started first runs without /tmp_workspace (only root may link
    it); root's, started next, linked it, and the user's commands then read root's trial (a
    red-team finding). Root's now leaves it unlinked while another user's runs."""
    from clawrig.sandbox.base import SandboxConfig
    from clawrig.sandbox.local import LocalSandbox

    base = Path(tempfile.mkdtemp(prefix="clawrig-test-user-"))
    base.chmod(0o755)
    locks = base / "tmp"  # (both users' locks: not the machine's, which other tests use)
    locks.mkdir()
    locks.chmod(0o1777)
    monkeypatch.setattr("clawrig.sandbox.local.LOCK_PATH", locks / "clawrig-local-sandbox-0.lock")
    ws = base / "ws"
    ws.mkdir()
    os.chown(ws, 65534, 65534)
    user = subprocess.Popen(
        [*_AS_NOBODY, "-c", _AS_USER_HOLD, str(ws)],
        env=_nobody_env(TMPDIR=str(locks)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert user.stdout is not None and user.stdin is not None
        assert user.stdout.readline().strip() == "up"
        async with LocalSandbox(SandboxConfig(workspace_dir=base / "root-ws"), warn=False) as box:
            await box.write_file("/tmp_workspace/mine.txt", "root's trial")
            assert box._linked is False
            out, _ = user.communicate("go\n", timeout=60)
        assert out.split("\n")[0] == "saw nothing", out
    finally:
        user.kill()
        shutil.rmtree(base, ignore_errors=True)


async def test_root_s_local_sandbox_refuses_a_folder_at_tmp_workspace(monkeypatch) -> None:
    """A folder at the machine's /tmp_workspace (made by a command of a root sandbox that ran
    unlinked while another user's ran): root's local sandbox started beside it, unlinked, and
    its commands and grader took that folder for the trial's workspace (every later local
    trial re-graded 1.0 as 0.0). It is refused, naming it, as a user's sandbox was."""
    from clawrig.errors import SandboxError
    from clawrig.sandbox import local
    from clawrig.sandbox.base import SandboxConfig

    if os.geteuid() != 0:
        pytest.skip("root's case")
    target = Path("/tmp_workspace")
    # the machine's lock held meanwhile: no other local sandbox links /tmp_workspace now
    machine = os.open(local.LOCK_PATH, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(machine, fcntl.LOCK_EX)
    base = Path(tempfile.mkdtemp(prefix="clawrig-test-ws-"))
    monkeypatch.setattr(local, "LOCK_PATH", base / "lock")
    try:
        if os.path.lexists(target):
            pytest.skip("this machine has a /tmp_workspace of its own")
        target.mkdir()
        box = local.LocalSandbox(SandboxConfig(workspace_dir=base / "ws"), warn=False)
        with pytest.raises(SandboxError) as refused:
            await box.start()
        assert str(refused.value).startswith(
            "/tmp_workspace on this machine is a folder that this local sandbox cannot replace"
        ), refused.value
        assert target.is_dir() and not target.is_symlink() and not list(target.iterdir())
    finally:
        with contextlib.suppress(OSError):
            target.rmdir()
        os.close(machine)
        shutil.rmtree(base, ignore_errors=True)


async def test_a_folder_a_trial_put_in_place_of_its_link_goes_with_it() -> None:
    """helper-202: an agent's `rm /tmp_workspace && mkdir /tmp_workspace` (no isolation: its
    commands may) left a folder there once its sandbox stopped: the clean room, its retries
    and every later local trial on the machine were refused, the trial unscored. The folder
    goes with the sandbox that linked the path, and the next one links it again."""
    from clawrig.sandbox.base import SandboxConfig
    from clawrig.sandbox.local import LocalSandbox

    if os.geteuid() != 0:
        pytest.skip("root's case (only root links the machine's /tmp_workspace)")
    base = Path(tempfile.mkdtemp(prefix="clawrig-test-ws-"))
    try:
        async with LocalSandbox(SandboxConfig(workspace_dir=base / "a"), warn=False) as box:
            if not box._linked:
                pytest.skip("this machine's /tmp_workspace cannot be linked")
            r = await box.exec("rm /tmp_workspace && mkdir -p /tmp_workspace/results")
            assert r.exit_code == 0, r.stderr
            assert Path("/tmp_workspace").is_dir() and not Path("/tmp_workspace").is_symlink()
        assert not os.path.lexists("/tmp_workspace")
        async with LocalSandbox(SandboxConfig(workspace_dir=base / "b"), warn=False) as again:
            assert again._linked
            await again.write_file("/tmp_workspace/mine.txt", "b")
            assert (base / "b" / "mine.txt").read_text() == "b"
    finally:
        shutil.rmtree(base, ignore_errors=True)
