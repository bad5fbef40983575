"""The harness's side of the supervisor zygote (:mod:`clawrig.sandbox.zygote_program`): a bwrap
sandbox's supervisor forked into the sandbox by one long-lived Python process, not started
afresh in every sandbox.

Why: a supervisor's interpreter start is ~10 ms of CPU (``python3 -I -S``), and every trial
starts two sandboxes (the agent's and the clean room); a fork of an interpreter that has loaded
the supervisor already costs ~1 ms. With the zygote, bwrap runs a small init as the sandbox's
pid 1 (:func:`init_argv`: it reaps orphans, as bwrap's own init does, and says when the sandbox
is set up); the zygote's child joins the sandbox's cgroups and namespaces, writes its inotify
caps (:mod:`clawrig.sandbox.userns`) and forks the supervisor there, which drops every
capability as bwrap's ``--cap-drop ALL`` does. The supervisor is pid 2 of the sandbox, as
before; the sandbox still ends with bwrap.

Used (:func:`zygote_usable`) when the harness is root (setns(2) into a sandbox's namespaces
needs the host's capabilities), the sandbox runs on the host's own system (its python3 is the
host's, the zygote's: a root file system of an environment has its own), pid file descriptors
and an init (clawrig's sandbox program or perl) are there, and ``CLAWRIG_ZYGOTE`` is not
``0``. Else, and for sandboxes whose limits need a launcher's rlimits or another uid, the
supervisor starts in the sandbox as before; so too, for that sandbox and every later one,
when the zygote cannot enter a sandbox (:func:`failed_to_enter`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import json
import logging
import os
import shutil
import socket
import subprocess
import threading
import weakref
from pathlib import Path
from typing import Any

from clawrig.errors import SandboxError
from clawrig.sandbox.launchbin import program_argv, program_fd
from clawrig.sandbox.zygote_program import CANNOT_ENTER

log = logging.getLogger(__name__)

PROGRAM_PATH = Path(__file__).with_name("zygote_program.py")
"""The zygote's program (run by the sandboxes' python3 on the host)."""

INIT_PERL = (
    "$SIG{CHLD} = sub {}; syswrite(STDOUT, 'r'); open(STDOUT, '>', '/dev/null'); "
    "open(STDERR, '>', '/dev/null'); "
    "for (;;) { sleep 5 if waitpid(-1, 0) < 0 && $! == 10 }"
)
"""The sandbox's init with the zygote where clawrig's sandbox program cannot be had
(:func:`init_argv`; ``perl -e INIT_PERL``, bwrap's ``--as-pid-1`` command): one byte on its
stdout once bwrap has set the sandbox up (the harness waits for it: :func:`init_up`), stdout
and stderr then /dev/null (the agent could write into bwrap's stderr pipe, the supervisor's
error text, by ``/proc/1/fd/2``), then it reaps every process that ends up its child (waitpid
on any child; with none, ECHILD, a pause that an orphan's SIGCHLD cuts short). As pid 1 of
its namespace it gets no signal from inside that it has not asked for: the agent cannot end
it, and the supervisor's ``kill_all`` (``kill(-1)``) spares it as it spared bwrap's init."""


PYTHON = "/usr/bin/python3"
"""The zygote's interpreter, and the only sandbox python3 it serves (the host's, bound at the
same path in a sandbox on the host's own system)."""


@functools.cache
def _perl() -> str | None:
    return shutil.which("perl")


def zygote_usable(python: str) -> bool:
    """True when a sandbox whose supervisor runs on ``python`` (its path inside, the host's
    system bound at the same path) can have it forked by the zygote (module docs)."""
    return (
        os.environ.get("CLAWRIG_ZYGOTE", "1") != "0"
        and os.geteuid() == 0
        and python == PYTHON
        and Path(python).is_file()
        and (program_fd() is not None or _perl() is not None)
        and _pidfds()
        and not _broken[0]
    )


def init_argv() -> list[str]:
    """bwrap's command in a sandbox whose supervisor the zygote forks: clawrig's sandbox
    program's ``init`` (:mod:`clawrig.sandbox.launchbin`; give bwrap :func:`init_fds`), else
    :data:`INIT_PERL`."""
    if (fd := program_fd()) is not None:
        return program_argv("init", fd)
    perl = _perl()
    assert perl is not None
    return [perl, "-e", INIT_PERL]


def init_fds() -> tuple[int, ...]:
    """The file descriptors bwrap must inherit for :func:`init_argv`'s command to run."""
    fd = program_fd()
    return () if fd is None else (fd,)


@functools.cache
def _pidfds() -> bool:
    from clawrig.sandbox.client import pidfds_work

    return pidfds_work()


_lock = threading.Lock()
_zygote: list[tuple[subprocess.Popen[bytes], socket.socket] | None] = [None]
_broken = [False]


def _start(
    python: str, source: Path, pyc: Path | None
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    program = (
        PROGRAM_PATH.read_text()
        + f"\nmain({str(source)!r}, {str(pyc or '')!r}, {theirs.fileno()})\n"
    )
    try:
        proc = subprocess.Popen(
            [python, "-I", "-S", "-"],  # the program on stdin: no host path in its command line
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # nothing of the harness's environment (keys) reaches it, nor the supervisors it
            # forks: the locale the sandboxes' supervisors were started with
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
            cwd="/",
            start_new_session=True,  # a terminal's Ctrl-C is the harness's, not its own
        )
        assert proc.stdin is not None
        proc.stdin.write(program.encode())
        proc.stdin.close()
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    ours.setblocking(False)
    atexit.register(_stop, proc, ours)
    return proc, ours


def _stop(proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
    """End the zygote at exit (its socket closed) and reap it."""
    sock.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def _drop_current() -> None:
    """Forget the current zygote (under :data:`_lock`): killed, its socket closed (the requests
    queued for it go with it)."""
    held, _zygote[0] = _zygote[0], None
    if held is not None:
        with contextlib.suppress(OSError):
            held[0].kill()
        held[1].close()


def _current(
    python: str, source: Path, pyc: Path | None
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    with _lock:
        held = _zygote[0]
        if held is None or held[0].poll() is not None:
            if held is not None:
                held[1].close()
            held = _zygote[0] = _start(python, source, pyc)
        return held


_send_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


async def _send(sock: socket.socket, data: bytes, fds: tuple[int, ...]) -> None:
    """One request on ``sock``, waiting for room while the zygote's queue is full; one sender
    at a time per event loop (each waiting sender would replace the others' wake-up)."""
    loop = asyncio.get_running_loop()
    lock = _send_locks.setdefault(loop, asyncio.Lock())
    async with lock:
        while True:
            try:
                socket.send_fds(sock, [data], list(fds))
                return
            except BlockingIOError:
                room: asyncio.Future[None] = loop.create_future()
                loop.add_writer(sock, room.set_result, None)
                try:
                    await room
                finally:
                    loop.remove_writer(sock)


SEND_TIMEOUT_S = 30.0
"""Longest a start waits to hand its request to the zygote (a zygote stopped or swamped)."""


async def fork_supervisor(
    python: str, source: Path, pyc: Path | None, request: dict[str, Any], fds: tuple[int, ...]
) -> subprocess.Popen[bytes]:
    """Ask the zygote (started on first use, again when it has died) for the supervisor of the
    sandbox ``request`` describes (:mod:`clawrig.sandbox.zygote_program`: ``outer``, ``procs``,
    ``fsize``, ``nice``, ``cwd``, ``env``, ``caps``, ``source``), once its init is up, with
    ``fds``: (the supervisor's requests' read end, answers' and stderr's write ends, bwrap's
    pid descriptor); the zygote's once sent (the caller closes its copies). ``python``,
    ``source``, ``pyc``: the zygote's interpreter and the supervisor's code (host paths).
    Returns the zygote's process (:func:`zygote_died` asks after it). Raises SandboxError when
    the zygote cannot be reached (twice: zygotes are not used again in this process then) or
    takes no request for :data:`SEND_TIMEOUT_S` seconds."""
    data = json.dumps(request).encode()
    why = ""
    for _ in range(2):
        try:
            proc, sock = _current(python, source, pyc)
            async with asyncio.timeout(SEND_TIMEOUT_S):
                await _send(sock, data, fds)
            return proc
        except TimeoutError:
            raise SandboxError(
                f"bwrap sandbox: the supervisor's zygote (pid {proc.pid}) took no request for "
                f"{SEND_TIMEOUT_S:g} s"
            ) from None
        except OSError as exc:
            why = str(exc)
            with _lock:
                _drop_current()
    _broken[0] = True
    raise SandboxError(f"bwrap sandbox: the supervisor's zygote cannot be reached: {why}")


def zygote_died(proc: subprocess.Popen[bytes] | None) -> bool:
    """True when the zygote ``proc`` (:func:`fork_supervisor`'s) has ended: a start it was
    serving failed for that (its sandbox is started again, by a new zygote)."""
    return proc is not None and proc.poll() is not None


def failed_to_enter(error: str) -> bool:
    """True when a sandbox's start failed (``error``: its SandboxError's text) in the zygote's
    own part (:data:`clawrig.sandbox.zygote_program.CANNOT_ENTER`: a kernel or a container
    that refuses its setns, say); the zygote is then not used again in this process (one
    warning says why) and the caller starts that sandbox's supervisor in it."""
    if CANNOT_ENTER not in error:
        return False
    give_up(error.strip())
    return True


def give_up(why: str) -> None:
    """Use no zygote again in this process (``why``: said once, as a warning): sandboxes start
    their own supervisor from now on. The zygote is killed, with the requests queued for it
    (a stuck one held their pipes); the supervisors it forked live on."""
    with _lock:
        if _broken[0]:
            return
        _broken[0] = True
        _drop_current()
    log.warning("%s; sandboxes start their own supervisor from now on", why)


async def init_up(ready_r: int, timeout_s: float) -> bool:
    """Wait for the sandbox's init to say it is up (:data:`INIT_PERL`'s byte on ``ready_r``,
    bwrap's stdout; closed here). False when bwrap ended first (it failed: its reason is on its
    stderr) or after ``timeout_s`` seconds."""
    loop = asyncio.get_running_loop()
    said: asyncio.Future[None] = loop.create_future()
    os.set_blocking(ready_r, False)

    def readable() -> None:
        if not said.done():
            said.set_result(None)

    loop.add_reader(ready_r, readable)
    try:
        async with asyncio.timeout(timeout_s):
            await said
        return os.read(ready_r, 1) == b"r"
    except (TimeoutError, OSError):
        return False
    finally:
        loop.remove_reader(ready_r)
        os.close(ready_r)
