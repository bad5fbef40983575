"""clawrig's sandbox launcher and init as one small C program (``sandbox_launch.c`` beside this
module), compiled on first use by the host's C compiler and kept in clawrig's cache folder.

Why: a pooled sandbox's launcher (:mod:`clawrig.sandbox.mountns`) and the init of a sandbox
whose supervisor the zygote forks (:mod:`clawrig.sandbox.zygote`) were perl programs, and a
perl start is ~2 ms of CPU against ~0.4 ms for this program's: two sandboxes per trial, each
with a launcher and an init, ~6 ms of a trial's ~90 (``benchmarks/trial_cpu.py``). Where there
is no C compiler (or the program cannot run: a cache folder on a ``noexec`` mount), perl does
the same work, as before.

The program is run from a sealed memory file (memfd_create(2), ``F_SEAL_WRITE``), not from its
path: what runs is what was checked, whatever later happens to the cache's file, and a
sandbox's init shows ``/memfd:clawrig-sandbox-launch`` as its ``/proc/1/exe``, no host path.
Its command is ``/proc/self/fd/N`` (:func:`program_argv`) with N among the process's inherited
descriptors (:func:`program_fd`: pass it on, ``pass_fds``); the init closes it at once.
``CLAWRIG_LAUNCH_C=0`` makes clawrig use perl.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

from clawrig.sandbox.pyenv import cache_root

SOURCE_PATH = Path(__file__).with_name("sandbox_launch.c")
"""The program's source."""

USAGE_STATUS = 2
"""The program's exit status for a command line it does not take (its usage line on stderr)."""


def _trusted(path: Path) -> bool:
    """True when ``path`` (a file or folder; its parent folder too) is this user's and no one
    else may write to it: a program this harness runs as root must not be another user's."""
    for p in (path, path.parent):
        try:
            st = os.lstat(p)
        except OSError:
            return False
        if st.st_uid != os.geteuid() or st.st_mode & 0o022 or stat.S_ISLNK(st.st_mode):
            return False
    return True


def _compile(source: bytes, target: Path) -> bool:
    """Compile ``source`` into ``target`` (a temporary file renamed onto it: parallel
    harnesses may compile at once). False when there is no compiler or it fails."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(target.parent, 0o700)
    temp = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        done = subprocess.run(
            [cc, "-O2", "-x", "c", "-", "-o", str(temp)],
            input=source,
            capture_output=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            return False
        os.chmod(temp, 0o700)
        os.replace(temp, target)
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        temp.unlink(missing_ok=True)


def _works(fd: int) -> bool:
    """True when the program in ``fd`` runs here and answers a bad command line with its
    usage status."""
    try:
        done = subprocess.run(
            [f"/proc/self/fd/{fd}"],
            pass_fds=(fd,),
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == USAGE_STATUS and done.stderr.startswith(b"clawrig launch: usage")


def program_fd() -> int | None:
    """A file descriptor (close-on-exec) of a sealed memory file holding the compiled program,
    made once per process (module docs); None where it cannot be had (``CLAWRIG_LAUNCH_C=0``,
    read at each call; no C compiler, a compile error, the program does not run here):
    callers use perl."""
    if os.environ.get("CLAWRIG_LAUNCH_C", "1") == "0":
        return None
    return _program_fd()


@functools.cache
def _program_fd() -> int | None:
    try:
        source = SOURCE_PATH.read_bytes()
    except OSError:
        return None
    digest = hashlib.sha256(source + os.uname().machine.encode()).hexdigest()[:16]
    binary = cache_root() / "bin" / f"sandbox-launch-{digest}"
    if not (binary.is_file() and _trusted(binary)) and not (
        _compile(source, binary) and _trusted(binary)
    ):
        return None
    try:
        data = binary.read_bytes()
        fd = os.memfd_create("clawrig-sandbox-launch", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError:
        return None
    try:
        if os.write(fd, data) != len(data):
            raise OSError("short write")
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        os.fchmod(fd, 0o500)
    except OSError:
        os.close(fd)
        return None
    if not _works(fd):
        os.close(fd)
        return None
    return fd


def program_argv(mode: str) -> list[str]:
    """The program's command for ``mode`` (``launch`` or ``init``: module docs of
    ``sandbox_launch.c``); the process that runs it must inherit :func:`program_fd`. Raises
    RuntimeError when there is no program (check :func:`program_fd` first)."""
    fd = program_fd()
    if fd is None:
        raise RuntimeError("clawrig's sandbox launcher is not available")
    return [f"/proc/self/fd/{fd}", mode]
