"""A kernel overlayfs for one sandbox: an environment's root file system (plus warm snapshot
layers) read-only below, a per-trial upper folder above, so the sandbox's root may install
software (pip, npm -g, apt-get) and every write stays in that upper folder.

bubblewrap 0.8 has no ``--overlay``; the harness, as host root, mounts the overlay before bwrap
starts and binds its top-level folders into the sandbox (see :mod:`clawrig.sandbox.bwrap`).
Mounted ``nosuid,nodev``; the folders live under a 0700 parent so no other host user reaches a
file a sandbox wrote. Mounted and unmounted with mount(2) and umount2(2), no ``mount`` or
``umount`` process (two per sandbox: the agent's and the clean room), except for options longer
than the kernel takes from mount(2) (a page: dozens of snapshot layers), which ``mount`` (a
util-linux that passes them piecewise) may still take. Errors:
:class:`clawrig.errors.SandboxError`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from clawrig.errors import SandboxError
from clawrig.leftovers import mounting
from clawrig.sandbox.disk import MS_NODEV, MS_NOSUID, mount, umount_lazy

_BAD = (":", ",", "\\", "\n")


def can_mount() -> bool:
    """True when this process may mount an overlay (root, and the kernel knows overlayfs)."""
    if os.geteuid() != 0:
        return False
    with contextlib.suppress(OSError):
        return "overlay" in Path("/proc/filesystems").read_text()
    return False


class Overlay:
    """``lowers`` (top first, read-only) under ``upper`` (None: a read-only overlay), mounted
    at ``<base>/merged`` with ``<base>/upper`` and ``<base>/work`` unless given."""

    def __init__(
        self, base: Path, lowers: list[Path], upper: Path | None = None, writable: bool = True
    ):
        for p in [*lowers, base, *([upper] if upper else [])]:
            if any(c in str(p) for c in _BAD):
                raise SandboxError(f"overlay path has a character overlayfs cannot take: {p}")
        self.base = base
        self.lowers = lowers
        self.writable = writable
        self.upper = upper if upper is not None else base / "upper"
        # overlayfs wants the work folder on the upper folder's file system
        self.work = base / "work" if upper is None else upper.with_name(upper.name + ".work")
        self.merged = base / "merged"
        self.mounted = False

    def mount(self) -> Path:
        """Mount and return the merged folder. Raises SandboxError."""
        self.base.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o700)
        self.merged.mkdir(exist_ok=True)
        opts = "lowerdir=" + ":".join(str(p) for p in self.lowers)
        if self.writable:
            self.upper.mkdir(parents=True, exist_ok=True)
            self.work.mkdir(exist_ok=True)
            opts += f",upperdir={self.upper},workdir={self.work}"
        elif len(self.lowers) == 1:  # overlayfs needs two lowers without an upper
            opts += ":" + str(self.lowers[0])
        if len(os.fsencode(opts)) < os.sysconf("SC_PAGE_SIZE"):
            try:
                mount("overlay", self.merged, "overlay", MS_NOSUID | MS_NODEV, opts)
            except OSError as exc:
                why = os.strerror(exc.errno) if exc.errno else str(exc)
                raise SandboxError(f"cannot mount the overlay for the sandbox: {why}") from None
        else:
            try:
                with mounting(self.merged):
                    r = subprocess.run(
                        ["mount", "-t", "overlay", "overlay", "-o", opts + ",nosuid,nodev"]
                        + [str(self.merged)],
                        capture_output=True,
                        text=True,
                    )
            except OSError as exc:
                raise SandboxError(f"cannot mount the overlay for the sandbox: {exc}") from None
            if r.returncode != 0:
                raise SandboxError(f"cannot mount the overlay for the sandbox: {r.stderr.strip()}")
        self.mounted = True
        return self.merged

    def unmount(self) -> None:
        """Unmount (lazily, so a straggler cannot keep it busy). Idempotent."""
        if not self.mounted:
            return
        umount_lazy(self.merged)
        self.mounted = False
