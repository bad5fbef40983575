"""LocalSandbox: NO isolation. Only with ``--sandbox local``, for machines with neither
bubblewrap nor Docker; it prints a loud warning.

The supervisor runs directly on the host. In-sandbox paths are translated for file operations
and working folders (/tmp_workspace -> the trial's workspace, /root -> a private home folder,
/run/clawrig -> a private run folder); the harness's own commands get their paths translated
(:meth:`LocalSandbox.path_seen_by_commands`: the grader's runner, the services' code), but a
task's commands and code that spell out /root see this machine's /root (the job's preflight
notes such tasks: :func:`clawrig.runner.fidelity_checks.note_local_home`). Shell commands
that spell out ``/tmp_workspace`` work when the harness may point the host path
/tmp_workspace at the trial's workspace (a symlink, taken under an exclusive lock of the
user's, so only one local sandbox of a user runs at a time per machine); otherwise such
commands see no /tmp_workspace.
Limits: per-command wall time and output size as in every backend; RLIMIT_FSIZE on the
supervisor; no memory or process limit, no network or filesystem isolation at all.
``kill_all`` kills only the processes this sandbox started.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import resource
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from clawrig.errors import SandboxError
from clawrig.leftovers import owned_tempdir, remove_tree
from clawrig.sandbox.base import SandboxConfig
from clawrig.sandbox.client import (
    SUPERVISOR_PATH,
    PidfdProcess,
    SupervisedSandbox,
    run_to_end,
    supervisor_argv,
    supervisor_pyc,
)
from clawrig.sandbox.paths import PATHS

LOCK_PATH = Path(tempfile.gettempdir()) / f"clawrig-local-sandbox-{os.getuid()}.lock"
"""One per user: another user's lock (a file only its owner may open) must not stop this
user's local sandboxes (a red-team finding: root's made every other user's trial fail)."""
LOCK_WAIT_S = 120.0
"""How long a local sandbox waits for another one on this machine to stop (seconds)."""


ONE_AT_A_TIME = "--parallel: the local sandbox runs one trial at a time"
"""The refusal of ``--parallel`` > 1 with ``--sandbox local`` (its lock runs one at a time)."""


def warn_once(note: Callable[[str], None]) -> None:
    """Say once, with ``note``, that local sandboxes have no isolation, and silence each
    sandbox's own Python warning of it (:data:`WARNING`: a raw warning with a source line,
    which a new user took for a traceback)."""
    import re

    note("WARNING: --sandbox local runs the agent's commands on this machine with NO isolation.")
    warnings.filterwarnings("ignore", message=re.escape(WARNING), category=UserWarning)


LOCK_POLL_S = 0.05
"""Seconds between a waiting local sandbox's tries of the lock."""
WARNING = (
    "LocalSandbox runs the agent's commands directly on this machine with NO isolation: "
    "it can read and change your files and reach the network. Use bwrap where you can."
)


def _other_users_running() -> bool:
    """Whether another user's local sandbox runs now (its lock, :data:`LOCK_PATH` of its uid in
    the same temp folder, is held)."""
    for path in LOCK_PATH.parent.glob("clawrig-local-sandbox-*.lock"):
        if path == LOCK_PATH:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            continue
        finally:
            os.close(fd)
    return False


class LocalSandbox(SupervisedSandbox):
    """Runs commands on the host (see the module docstring)."""

    backend_name = "local"
    network = "host"

    @property
    def limits_enforced(self) -> dict[str, str]:
        """How each limit is enforced (see the base class): hardly at all."""
        lim = self.config.limits
        return {
            "memory": "none",
            "processes": "none",
            "file_size": "RLIMIT_FSIZE" if lim.max_file_bytes else "none",
            "shm": "none (the host's /dev/shm)",
            "uid": "the harness's own (no isolation)",
        }

    def __init__(self, config: SandboxConfig, warn: bool = True):
        super().__init__(config)
        self.base_dir: Path | None = None
        self._lock_fd: int | None = None
        self._linked = False
        self._home: Path | None = None
        """The host folder the sandbox's /root is (set at launch)."""
        self._maps: list[tuple[str, Path]] = []
        """(in-sandbox folder, the host folder it is) for /root and /run/clawrig (at launch)."""
        if warn:
            warnings.warn(WARNING, stacklevel=2)

    def path_seen_by_commands(self, path: str) -> str:
        """``path`` below /root or /run/clawrig: in this sandbox's home or run folder (its
        supervisor's file operations map them there by its ``--root-map``; the commands it
        runs see the host's). /tmp_workspace stays: it is linked to the workspace while the
        sandbox runs."""
        for inside, host in self._maps:
            if path == inside or path.startswith(inside + "/"):
                return str(host) + path[len(inside) :]
        return path

    async def _link_workspace(self, ws: Path) -> None:
        """Take the machine's local-sandbox lock (trying every :data:`LOCK_POLL_S` for up to
        :data:`LOCK_WAIT_S` seconds, on the event loop: a waiting start holds no thread, so
        any number of them cannot starve the running sandbox of the threads it needs) and link
        the workspace's in-sandbox path to ``ws``. Cancelled, nothing is kept that
        :meth:`_cleanup` does not undo. Raises SandboxError when the lock stays held, or a
        :meth:`stop` was asked meanwhile (:attr:`stop_asked`)."""
        self._lock_fd = fd = os.open(
            LOCK_PATH, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
        )  # not through a link another user left in the shared temp folder
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if self.stop_asked:  # no reason left to wait (it waited up to LOCK_WAIT_S)
                    raise SandboxError("stopped while it waited for its turn to start") from None
                if time.monotonic() > deadline:
                    raise SandboxError(
                        f"another local sandbox has run on this machine for over {LOCK_WAIT_S:g}"
                        " s: local trials run one at a time"
                    ) from None
                await asyncio.sleep(LOCK_POLL_S)
        target = Path(PATHS.workspace)  # no await from here: a cancel finds both or neither
        try:
            # not while another user's local sandbox runs: its commands would see this trial
            # there (it started without the link, which only root may make: a red-team finding)
            if not _other_users_running():
                if target.is_symlink():
                    target.unlink()
                if not target.exists():
                    target.symlink_to(ws)
                    self._linked = True
        except OSError:
            self._linked = False
        if not self._linked and os.path.lexists(target):
            # root's running local sandbox linked it (a user may not replace root's link), or
            # the machine has a folder there: this sandbox's commands would take it for the
            # trial's workspace, and a grader would grade it (a red-team finding); root's too
            # (a folder a command made there while no link was: every later local trial of
            # root's graded it, 1.0 re-graded 0.0). (exists: False where this user may not
            # look.)
            what = f"a link to {os.readlink(target)}" if target.is_symlink() else "a folder"
            raise SandboxError(
                f"{PATHS.workspace} on this machine is {what} that this local sandbox cannot "
                "replace (another user's local sandbox, or the machine's own): its commands "
                "would take it for the trial's workspace; remove it if it is no one's, use "
                "--sandbox bwrap, or wait"
            )

    async def _launch(self) -> PidfdProcess:
        self.base_dir = owned_tempdir("local")
        home = Path(self.config.home_dir) if self.config.home_dir else self.base_dir / "home"
        self._home = home
        ws = Path(self.config.workspace_dir).resolve()
        try:
            (home / PATHS.sessions.removeprefix("/root/")).mkdir(parents=True, exist_ok=True)
            (home / "skills").mkdir(parents=True, exist_ok=True)
            (self.base_dir / "run").mkdir()
            (self.base_dir / "tmp").mkdir()
            ws.mkdir(parents=True, exist_ok=True)
            await self._link_workspace(ws)
        except BaseException:  # cancelled too: the folder, the lock and the link undone
            await run_to_end(self._cleanup())
            raise
        lim = self.config.limits
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "TMPDIR": str(self.base_dir / "tmp"),
            "CLAWRIG_LOG_DIR": str(self.base_dir / "run"),
            **self.config.env,
        }

        def preexec() -> None:
            if lim.max_file_bytes:
                resource.setrlimit(resource.RLIMIT_FSIZE, (lim.max_file_bytes,) * 2)

        pyc = supervisor_pyc(str(SUPERVISOR_PATH))
        argv = supervisor_argv(sys.executable, str(SUPERVISOR_PATH), str(pyc) if pyc else None)
        argv.append("--local")
        self._maps = [(PATHS.home, home), (PATHS.run, self.base_dir / "run")]
        for src, dst in ((PATHS.workspace, ws), *self._maps):
            argv += ["--root-map", f"{src}={dst}"]
        req_r, ans_w, err_w = await self._open_pipes()
        return await self._spawn(
            argv,
            (req_r, ans_w, err_w),
            stdin=req_r,
            stdout=ans_w,
            stderr=err_w,
            env=env,
            cwd=str(ws),
            preexec_fn=preexec,
            start_new_session=True,
        )

    async def _stop(self) -> None:
        # no PID namespace ends the sandbox's processes: the supervisor kills them first
        if self._proc is not None and self._died is None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.kill_all(), 10)
        await super()._stop()

    async def _cleanup(self) -> None:
        if self._linked:
            target = Path(PATHS.workspace)
            with contextlib.suppress(OSError):
                if target.is_dir() and not target.is_symlink():
                    # this sandbox's commands replaced its link with a folder (under its lock:
                    # no one else's): theirs to lose, not every later local trial's to be
                    # refused for (helper-202: an agent's `rm /tmp_workspace; mkdir` made
                    # its trial an unscored infrastructure error and blocked the machine)
                    await asyncio.to_thread(remove_tree, target)
                else:
                    target.unlink()
            self._linked = False
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self.base_dir is not None:
            base, self.base_dir = self.base_dir, None
            await asyncio.to_thread(remove_tree, base)
