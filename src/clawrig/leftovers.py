"""Folders a harness process owns are named with its pid, so the next harness can remove what
a killed one (``kill -9``, a lost machine) left behind: ``clawrig-sbx-<pid>-*`` (a sandbox's
root and scratch), ``clawrig-trial-<pid>-*`` (a trial's work folder). Cgroups and grading
environment stages follow the same rule in their own places (sandbox/bwrap.py, sandbox/pyenv.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

KINDS = ("sbx", "trial")
_swept: set[Path] = set()


def owned_tempdir(kind: str, directory: Path | str | None = None) -> Path:
    """A new folder ``clawrig-<kind>-<pid>-<random>`` under ``directory`` (default: the temp
    folder); the first call per folder sweeps what dead harnesses left there."""
    base = Path(directory) if directory is not None else Path(tempfile.gettempdir())
    if base not in _swept:
        _swept.add(base)
        sweep_dead(base)
    return Path(tempfile.mkdtemp(prefix=f"clawrig-{kind}-{os.getpid()}-", dir=base))


def pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists (ours or another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_dead(base: Path) -> list[Path]:
    """Remove ``clawrig-<kind>-<pid>-*`` folders in ``base`` whose pid no longer runs; return
    them. An overlay still mounted in one (a killed sandbox's writable system) is unmounted
    first, and a folder a sandbox made read-only inside is made writable."""
    removed: list[Path] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        parts = entry.name.split("-")
        if len(parts) < 4 or parts[0] != "clawrig" or parts[1] not in KINDS:
            continue
        if not parts[2].isdigit() or int(parts[2]) == os.getpid() or pid_alive(int(parts[2])):
            continue
        if entry.is_symlink() or not entry.is_dir():
            continue
        for merged in entry.glob("ovl*/merged"):  # a killed sandbox's writable system
            if os.path.ismount(merged):
                subprocess.run(["umount", "-l", str(merged)], capture_output=True, check=False)
        for dirpath, dirnames, _ in os.walk(entry):
            for d in dirnames:
                try:
                    os.chmod(os.path.join(dirpath, d), 0o700, follow_symlinks=False)
                except (OSError, NotImplementedError):
                    pass
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
    return removed
