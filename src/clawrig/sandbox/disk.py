"""A per-trial disk: a file system of fixed size that holds everything a trial's sandbox can
write on the host (the workspace, /root, /tmp, /run/clawrig, the writable system's upper
folder), so one trial filling it gets ENOSPC (or EDQUOT-like "no space") inside its sandbox
and never fills the host's disk.

Mechanism: a sparse image file (``disk.img``, host blocks used only as the sandbox writes)
formatted ext4 without a journal, with one inode per :data:`BYTES_PER_INODE` (so the number of
files and folders is bounded too), and loop-mounted ``nosuid,nodev`` at ``fs/`` beside it. It
needs root (mount) and mke2fs; without them :meth:`TrialDisk.mount` falls back to a plain
folder and :attr:`TrialDisk.enforced` is False (``Limits.max_file_bytes`` still caps each
file). Measured cost: ``benchmarks/sandbox.py`` (mkfs + mount + unmount, about 50 ms).

Removal is an unmount and an unlink: no walk over what the agent left (a 1,200-level tree or
150,000 empty files cost nothing to remove). A harness killed with its disks mounted leaves
them to :func:`clawrig.leftovers.sweep_dead`, which unmounts what is mounted below a dead
harness's folders.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from clawrig.leftovers import remove_tree

BYTES_PER_INODE = 32 * 1024
"""ext4 bytes-per-inode ratio of a trial disk: an 8 GiB disk holds at most 262,144 files and
folders."""
IMAGE_NAME = "disk.img"
MOUNT_NAME = "fs"
MNT_DETACH = 2


@functools.cache
def libc() -> Any:
    """The C library (ctypes, errno kept) for mount(2) and umount2(2)."""
    return ctypes.CDLL(None, use_errno=True)


def umount_lazy(target: Path) -> bool:
    """Lazy umount2(2) (``MNT_DETACH``, what ``umount -l`` does, without its process); True
    when something was unmounted there. A loop device ``mount -o loop`` set up (autoclear)
    is freed by the kernel with its last mount."""
    return bool(libc().umount2(os.fsencode(target), MNT_DETACH) == 0)


def can_make_disks() -> bool:
    """True when this process may make trial disks (root, mke2fs and mount present)."""
    return (
        os.geteuid() == 0
        and shutil.which("mke2fs") is not None
        and shutil.which("mount") is not None
    )


class TrialDisk:
    """A fixed-size file system at ``<folder>/fs`` (see the module docs).

    ``size_bytes``: the disk's size (None or 0: no disk, ``path`` is a plain folder).
    After :meth:`mount`, :attr:`path` is where the trial's files go and :attr:`enforced` says
    whether the size holds. :meth:`release` unmounts and removes it (idempotent, never raises).
    """

    def __init__(self, folder: Path, size_bytes: int | None) -> None:
        self.folder = Path(folder)
        self.size_bytes = size_bytes or 0
        self.path = self.folder / MOUNT_NAME
        self.image = self.folder / IMAGE_NAME
        self.enforced = False
        self.problem = ""
        """Why the limit is not enforced (empty when it is, or when none was asked)."""

    def mount(self) -> Path:
        """Make and mount the disk (or a plain folder when disks cannot be made); return
        :attr:`path`. Never raises for a missing capability; raises OSError when the host's
        own disk fails (no space for the folder). A mounted disk is left as it is (a pooled
        sandbox's, :mod:`clawrig.sandbox.pool`)."""
        if self.enforced:
            return self.path
        self.path.mkdir(parents=True, exist_ok=True)
        if not self.size_bytes:
            return self.path
        if not can_make_disks():
            self.problem = "needs root with mke2fs (the harness is not root)"
            return self.path
        try:
            with open(self.image, "wb") as fh:
                fh.truncate(self.size_bytes)
            _run(
                "mke2fs",
                "-q",
                "-F",
                "-t",
                "ext4",
                "-O",
                "^has_journal,^resize_inode",
                "-E",
                "lazy_itable_init=1,nodiscard",
                "-m",
                "0",
                "-i",
                str(BYTES_PER_INODE),
                str(self.image),
            )
            _run("mount", "-o", "loop,nosuid,nodev,noatime", str(self.image), str(self.path))
        except (OSError, subprocess.CalledProcessError) as exc:
            self.problem = _why(exc)
            with contextlib.suppress(OSError):
                self.image.unlink()
            return self.path
        os.chmod(self.path, 0o755)
        with contextlib.suppress(OSError):
            os.rmdir(self.path / "lost+found")
        self.enforced = True
        return self.path

    def usage(self) -> tuple[int, int]:
        """(bytes used, inodes used) on the disk (both 0 when it is a plain folder)."""
        if not self.enforced:
            return 0, 0
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree

    def release(self) -> None:
        """Unmount (lazily: a process still holding a file cannot keep it) and remove the
        image and folder. Idempotent; never raises."""
        if self.enforced:
            umount_lazy(self.path)
            self.enforced = False
        if os.path.ismount(self.path):  # the unmount failed: never walk into a live disk
            return
        with contextlib.suppress(OSError):
            self.image.unlink()
        remove_tree(self.path)


def _run(*argv: str) -> None:
    subprocess.run(list(argv), capture_output=True, check=True, timeout=60)


def _why(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        err = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        return f"{exc.cmd[0]} failed: {err[-1] if err else exc.returncode}"
    return str(exc)
