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
  and :data:`SANDBOX_INOTIFY_WATCHES`, written from inside that namespace by ``nsenter``
  (util-linux) as its owner, before any of the agent's code runs;
- when the harness is root, the host's per-user limits are raised once per process to
  :data:`HOST_INOTIFY_INSTANCES` and :data:`HOST_INOTIFY_WATCHES` (never lowered), with one
  line on stderr saying why, so that the sandboxes' capped shares leave the host's root room.

Source: user_namespaces(7) and sysctl user.max_inotify_instances (Documentation/admin-guide/
sysctl/user.rst): "per user per user namespace" limits, checked at each level.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
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


async def cap_sandbox(bwrap_pid: int) -> str | None:
    """Write the sandbox's own inotify caps in the user namespace of the process tree under
    ``bwrap_pid`` (the bwrap process's host pid). Returns None, or why it could not (the
    sandbox then has only the host's per-user limit)."""
    raise_host_limits()
    target = _innermost(bwrap_pid)
    if target == bwrap_pid:
        return "no sandboxed process found"
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
