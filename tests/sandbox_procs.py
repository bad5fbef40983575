"""What a test sees of a bwrap sandbox's processes from the host."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def processes_in_sandbox(bwrap: int) -> list[int]:
    """The host pids of every process in the PID namespace of ``bwrap``'s child (the
    sandbox's init; a supervisor the zygote forked is not bwrap's descendant)."""
    [init] = [int(k) for k in Path(f"/proc/{bwrap}/task/{bwrap}/children").read_text().split()]
    ns = os.readlink(f"/proc/{init}/ns/pid")
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "pid") == ns:
                    pids.append(int(entry.name))
    return pids
