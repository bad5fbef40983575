"""The overlay root file system (clawrig.sandbox.overlay), mounted for real: mount(2) gives the
same mount ``mount -t overlay -o ...,nosuid,nodev`` gave (the kernel's own account of it in
/proc/self/mountinfo), writes land in the upper folder only, a read-only overlay refuses them,
a bad layer is one clear error, and the unmount leaves no mount behind."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from clawrig.errors import SandboxError
from clawrig.sandbox.overlay import Overlay, can_mount

pytestmark = pytest.mark.skipif(not can_mount(), reason="an overlay needs root and overlayfs")


def _mountinfo(point: Path) -> tuple[str, set[str], str, set[str]] | None:
    """(mount options, per-mount flags, file system type, super options) of the mount at
    ``point`` in /proc/self/mountinfo (proc(5)), None when nothing is mounted there."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(point):
            sep = fields.index("-")
            fstype, super_opts = fields[sep + 1], fields[sep + 3]
            return fields[5], set(fields[5].split(",")), fstype, set(super_opts.split(","))
    return None


def _layer(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def test_a_writable_overlay_is_mounted_nosuid_nodev_and_writes_go_up(tmp_path):
    low = _layer(tmp_path / "low", {"a": "from the environment\n", "b": "lower b\n"})
    top = _layer(tmp_path / "snap", {"b": "snapshot b\n"})
    ovl = Overlay(tmp_path / "ovl", [top, low])
    merged = ovl.mount()
    try:
        info = _mountinfo(merged)
        assert info is not None
        _, flags, fstype, super_opts = info
        assert fstype == "overlay"
        assert {"nosuid", "nodev", "rw"} <= flags
        assert f"lowerdir={top}:{low}" in super_opts
        assert f"upperdir={ovl.upper}" in super_opts and f"workdir={ovl.work}" in super_opts
        assert (merged / "a").read_text() == "from the environment\n"
        assert (merged / "b").read_text() == "snapshot b\n"  # the top layer wins
        (merged / "a").write_text("changed\n")
        (merged / "new").write_text("new\n")
        assert (low / "a").read_text() == "from the environment\n"
        assert (ovl.upper / "a").read_text() == "changed\n"
        assert (ovl.upper / "new").read_text() == "new\n"
    finally:
        ovl.unmount()
    assert _mountinfo(merged) is None and not ovl.mounted
    ovl.unmount()  # idempotent


def test_a_read_only_overlay_refuses_writes(tmp_path):
    low = _layer(tmp_path / "low", {"a": "x\n"})
    top = _layer(tmp_path / "snap", {"b": "z\n"})
    ovl = Overlay(tmp_path / "ovl", [top, low], writable=False)  # a snapshot over its system
    merged = ovl.mount()
    try:
        assert (merged / "a").read_text() == "x\n" and (merged / "b").read_text() == "z\n"
        with pytest.raises(OSError) as exc:
            (merged / "c").write_text("y\n")
        assert exc.value.errno == errno.EROFS
        assert not ovl.upper.exists()
    finally:
        ovl.unmount()
    assert _mountinfo(merged) is None


def test_a_missing_layer_is_one_clear_error(tmp_path):
    ovl = Overlay(tmp_path / "ovl", [tmp_path / "no-such-layer", tmp_path])
    with pytest.raises(SandboxError, match="cannot mount the overlay for the sandbox: No such"):
        ovl.mount()
    assert not ovl.mounted and _mountinfo(ovl.merged) is None
