"""CPU seconds of a process and everything it starts, sandboxes included: a cgroup v1 ``cpuacct``
group (the benchmarks' one way to count it).

Why a cgroup: a sandbox's processes die with it (its PID namespace is torn down) and are never
reaped by the harness, so ``getrusage(RUSAGE_CHILDREN)`` misses them (2.77 s of CPU inside a
sandbox showed as 0.018 s, issue 19). Every process forked inside the group stays in it for
``cpuacct`` (clawrig's sandboxes join memory and pids cgroups only), and the kernel charges
their CPU as it is used, whether they are reaped or not (``cpuacct.usage``: nanoseconds; the
kernel's ``Documentation/admin-guide/cgroup-v1/cpuacct.rst``).

Needs root and the v1 ``cpuacct`` hierarchy at /sys/fs/cgroup/cpuacct; where there is none,
:attr:`CpuGroup.dir` is None and :meth:`CpuGroup.seconds` returns None (callers fall back to
what they can count, and say so).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class CpuGroup:
    """A fresh ``cpuacct`` group named ``clawrig-bench-<pid>-<name>``. Put a child in it with
    :meth:`enter` (as ``preexec_fn``: before it execs), or this process with :meth:`join`;
    read :meth:`seconds`; :meth:`close` removes it."""

    def __init__(self, name: str = "") -> None:
        self.dir: Path | None = CPUACCT / f"clawrig-bench-{os.getpid()}{'-' + name if name else ''}"
        self._joined = False
        try:
            self.dir.mkdir(exist_ok=True)
        except OSError:
            self.dir = None

    def enter(self) -> None:
        """Move the calling process into the group (``preexec_fn`` of a child: "0" is the
        writer itself)."""
        if self.dir is not None:
            (self.dir / "cgroup.procs").write_text("0")

    def join(self) -> None:
        """Move this process into the group (its later children are counted too)."""
        if self.dir is not None:
            try:
                self.enter()
                self._joined = True
            except OSError:
                self.dir = None

    def seconds(self) -> float | None:
        """CPU seconds (user + system) used in the group so far, or None without a group."""
        if self.dir is None:
            return None
        return int((self.dir / "cpuacct.usage").read_text()) / 1e9

    def close(self, wait_s: float = 2.0) -> None:
        """Leave the group (when joined) and remove it once its processes are gone (waits up to
        ``wait_s`` for dying ones; a group still busy then is left behind, empty later)."""
        if self.dir is None:
            return
        if self._joined:
            with contextlib.suppress(OSError):
                (CPUACCT / "cgroup.procs").write_text("0")
        end = time.monotonic() + wait_s
        while True:
            try:
                self.dir.rmdir()
                return
            except OSError:
                if time.monotonic() >= end:
                    return
                time.sleep(0.05)
