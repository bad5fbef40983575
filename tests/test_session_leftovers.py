"""The session's leftover check (tests/conftest.py, tests/session_leftovers.py) sees a running
sandbox and its cgroup, and nothing once it is stopped."""

from __future__ import annotations

import pytest

import session_leftovers as leftovers
from clawrig.sandbox import SandboxConfig, create_sandbox

pytestmark = pytest.mark.sandbox


async def test_the_check_sees_a_running_sandbox(tmp_path):
    sb = create_sandbox("bwrap", SandboxConfig(workspace_dir=tmp_path))
    await sb.start()
    try:
        assert leftovers.leftover_processes()
        assert leftovers.wait_for_no_leftovers(grace_s=0)
        if sb.cgroup is not None and sb.cgroup.dirs:
            assert leftovers.leftover_cgroups()
    finally:
        await sb.stop()
    assert leftovers.wait_for_no_leftovers() == []


async def test_the_check_sees_a_sandbox_overlay(tmp_path, base_rootfs):
    cfg = SandboxConfig(workspace_dir=tmp_path, rootfs=base_rootfs, writable_root=True)
    sb = create_sandbox("bwrap", cfg)
    await sb.start()
    try:
        assert leftovers.overlay_mounts() == [str(sb.overlay.merged)]  # type: ignore[attr-defined]
    finally:
        await sb.stop()
    assert leftovers.overlay_mounts() == []


def test_the_check_sees_a_mount_below_the_sessions_temp_folder(tmp_path):
    from clawrig.sandbox.disk import mount, umount_lazy

    point = tmp_path / "left" / "fs"
    point.mkdir(parents=True)
    mount("clawrig-test", point, "tmpfs", 0, "size=4k")
    try:
        assert leftovers.mounts_below(tmp_path) == [str(point)]
        assert f"mount {point}" in leftovers.wait_for_no_leftovers(grace_s=0, temp=tmp_path)
    finally:
        umount_lazy(point)
    assert leftovers.mounts_below(tmp_path) == []
