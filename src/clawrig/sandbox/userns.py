"""Per-sandbox caps on what the kernel counts per user: inotify instances and watches.

The kernel counts inotify instances and watches per user (``fs.inotify.max_user_instances``,
``max_user_watches``), and a process in a user namespace is counted at every level up to the
host, against the user that owns the namespace. A bwrap sandbox started by root is counted
against the host's root: one sandbox opening 128 inotify instances (Debian's default) left the
host's root unable to open any (``inotify_init``: EMFILE), and every root service that watches
files broke with it.

Two measures (:func:`cap_sandbox`, :func:`raise_host_limits`):

- each sandbox's own user namespace gets caps of its own (``/proc/sys/user/max_inotify_*``
  are per user namespace; a new one starts at 2^31 - 1): :data:`SANDBOX_INOTIFY_INSTANCES`
  and :data:`SANDBOX_INOTIFY_WATCHES`, written from inside that namespace as its owner, before
  any of the agent's code runs. Only a process that enters the namespace (setns(2), which a
  multi-threaded process cannot do for a user namespace) may write them: a small helper
  process of the harness's (:data:`_WRITER`, one per harness process, started at the first
  sandbox) forks a child per sandbox that enters and writes (~0.5 ms of CPU), instead of an
  ``nsenter`` and a shell per sandbox (~2.5 ms); ``nsenter`` (util-linux) stays the way when
  the helper cannot run;
- when the harness is root, the host's per-user limits are raised once per process to
  :data:`HOST_INOTIFY_INSTANCES` and :data:`HOST_INOTIFY_WATCHES` (never lowered), with one
  line on stderr saying why, so that the sandboxes' capped shares leave the host's root room.

Source: user_namespaces(7) and sysctl user.max_inotify_instances (Documentation/admin-guide/
sysctl/user.rst): "per user per user namespace" limits, checked at each level.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import os
import subprocess
import sys
import threading
from pathlib import Path

__all__ = [
    "HOST_INOTIFY_INSTANCES",
    "HOST_INOTIFY_WATCHES",
    "SANDBOX_INOTIFY_INSTANCES",
    "SANDBOX_INOTIFY_WATCHES",
    "cap_sandbox",
    "raise_host_limits",
]

SANDBOX_INOTIFY_INSTANCES = 32
"""inotify instances one sandbox may hold (a file watcher needs one per process)."""
SANDBOX_INOTIFY_WATCHES = 16384
"""inotify watches one sandbox may hold (a watch per watched folder)."""
HOST_INOTIFY_INSTANCES = 65536
"""The host's per-user inotify instances when the harness (root) raises them: room for 2,000
sandboxes at their cap beside the host's own use."""
HOST_INOTIFY_WATCHES = 1048576
"""The host's per-user inotify watches when the harness (root) raises them."""

_SYSCTL = Path("/proc/sys/fs/inotify")


@functools.cache
def raise_host_limits() -> list[str]:
    """Raise the host's per-user inotify limits (only as root, only upward, once per process)
    and say so on stderr; returns the lines printed (none when nothing was raised or the
    harness may not)."""
    if os.geteuid() != 0:
        return []
    said = []
    for name, want in (
        ("max_user_instances", HOST_INOTIFY_INSTANCES),
        ("max_user_watches", HOST_INOTIFY_WATCHES),
    ):
        path = _SYSCTL / name
        try:
            have = int(path.read_text())
            if have >= want:
                continue
            path.write_text(f"{want}\n")
        except (OSError, ValueError):
            continue
        said.append(
            f"clawrig: raised fs.inotify.{name} from {have} to {want}: sandboxes started by "
            f"root count against root's share (each sandbox is capped at its own)"
        )
    for line in said:
        print(line, file=sys.stderr)
    return said


def _innermost(pid: int) -> int:
    """The deepest first descendant of ``pid`` (bwrap's sandboxed process tree)."""
    while True:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return pid
        if not children:
            return pid
        pid = int(children[0])


_WRITER = r"""
import ctypes, gc, os, sys
setns = ctypes.CDLL(None, use_errno=True).setns
gc.disable()  # no cycles here; a collection in a fork would copy each page of objects it visits
for line in sys.stdin:  # "PID NAME=VALUE ...": those /proc/sys/user files in PID's namespace
    pid, *pairs = line.split()
    r, w = os.pipe()
    child = os.fork()  # a user namespace is entered by a single-threaded process, for good
    if child == 0:
        try:  # plain system calls: no file objects made in the fork
            fd = os.open("/proc/%d/ns/user" % int(pid), os.O_RDONLY | os.O_CLOEXEC)
            if setns(fd, 0x10000000) != 0:  # CLONE_NEWUSER
                raise OSError(ctypes.get_errno(), "setns: " + os.strerror(ctypes.get_errno()))
            for pair in pairs:
                name, value = pair.split("=")
                out = os.open("/proc/sys/user/" + name, os.O_WRONLY | os.O_CLOEXEC)
                if os.write(out, (value + "\n").encode()) != len(value) + 1:
                    raise OSError("short write to /proc/sys/user/" + name)
            os._exit(0)
        except BaseException as exc:
            os.write(w, str(exc).encode("utf-8", "replace")[:500])
            os._exit(1)
    os.close(w)
    _, status = os.waitpid(child, 0)
    why = os.read(r, 600).decode("utf-8", "replace").replace("\n", " ").strip()
    os.close(r)
    sys.stdout.write("ok\n" if status == 0 else "error %s\n" % (why or "status %d" % status))
    sys.stdout.flush()
"""
"""The helper that writes a sandbox's caps (``python3 -I -S -c _WRITER``; see the module docs):
one request per line on stdin, "ok" or "error WHY" per line on stdout; it ends at its stdin's
end (its harness gone, ``kill -9`` too)."""

_writer_lock = threading.Lock()
_writer: list[subprocess.Popen[str] | None] = [None]
_writer_broken = [False]


def _write_caps(target: int) -> str | None:
    """Write the caps in ``target``'s user namespace through the helper (started on first use).
    Returns None, or why it could not. Raises OSError when the helper cannot run (then
    :func:`cap_sandbox` uses ``nsenter``, this process's sandboxes from then on too)."""
    request = f"{target} max_inotify_instances={SANDBOX_INOTIFY_INSTANCES} "
    request += f"max_inotify_watches={SANDBOX_INOTIFY_WATCHES}\n"
    with _writer_lock:
        proc = _writer[0]
        if proc is None or proc.poll() is not None:
            proc = _writer[0] = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WRITER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                close_fds=True,
                start_new_session=True,  # a terminal's Ctrl-C is the harness's, not its own
            )
            atexit.register(_stop_writer, proc)
        assert proc.stdin is not None and proc.stdout is not None
        why = "no answer"
        try:
            proc.stdin.write(request)
            proc.stdin.flush()
            answer = proc.stdout.readline()
        except (OSError, ValueError) as exc:
            answer, why = "", str(exc)
        if not answer:  # the helper died
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait()
            _writer[0] = None
            raise OSError(f"the caps' helper ended: {why}")
    return None if answer == "ok\n" else answer.removeprefix("error ").strip()


def _stop_writer(proc: subprocess.Popen[str]) -> None:
    """End the helper at exit (its stdin closed) and reap it."""
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


async def cap_sandbox(bwrap_pid: int) -> str | None:
    """Write the sandbox's own inotify caps in the user namespace of the process tree under
    ``bwrap_pid`` (the bwrap process's host pid). Returns None, or why it could not (the
    sandbox then has only the host's per-user limit)."""
    from clawrig.waits import in_thread

    raise_host_limits()
    target = _innermost(bwrap_pid)
    if target == bwrap_pid:
        return "no sandboxed process found"
    if not _writer_broken[0]:
        try:
            return await in_thread(_write_caps, target)
        except OSError:
            _writer_broken[0] = True
    return await _nsenter_caps(target)


async def _nsenter_caps(target: int) -> str | None:
    """:func:`cap_sandbox` with ``nsenter`` and a shell (when the helper cannot run)."""
    script = (
        f"echo {SANDBOX_INOTIFY_INSTANCES} > /proc/sys/user/max_inotify_instances && "
        f"echo {SANDBOX_INOTIFY_WATCHES} > /proc/sys/user/max_inotify_watches"
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            "nsenter",
            "--user",
            "--target",
            str(target),
            "/bin/sh",
            "-c",
            script,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        return f"nsenter: {exc}"
    _, err = await proc.communicate()
    if proc.returncode != 0:
        return err.decode(errors="replace").strip() or f"nsenter exit {proc.returncode}"
    return None
