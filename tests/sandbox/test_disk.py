"""Trial disks (clawrig.sandbox.disk) on real loop devices: each disk written from the size's
template holds its own size and inode count, is its own file system (nothing written on one
shows on another or on a disk made later), many can be attached at once, and a released one
leaves no mount, image or loop device behind; the process path (an older kernel) still makes
a disk that holds its size."""

from __future__ import annotations

import errno
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from clawrig.leftovers import bulk_dir, scratch_dir
from clawrig.sandbox import disk as disk_mod
from clawrig.sandbox.disk import BYTES_PER_INODE, TrialDisk, can_make_disks

pytestmark = pytest.mark.skipif(not can_make_disks(), reason="trial disks need root and mke2fs")

SIZE = 64 * 1024**2


def _loop_of(path: Path) -> Path:
    """/sys/dev/block/<major>:<minor> of the device mounted at ``path``."""
    dev = os.stat(path).st_dev
    return Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")


def _fill(path: Path) -> int:
    """Write 1 MiB chunks into one file until the disk is full; returns the bytes written."""
    written = 0
    chunk = b"\xa5" * 1024**2
    with open(path / "fill", "wb", buffering=0) as fh:
        try:
            while written < 4 * SIZE:
                written += fh.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return written


def _gone(disk: TrialDisk, loop: Path) -> None:
    """The disk is unmounted, its image removed, and ``loop`` no longer backed by that image
    (the kernel frees an autoclear device as its last mount goes; another process may attach
    a file of its own to the same device number meanwhile, which is no failure)."""
    assert not os.path.ismount(disk.path) and not disk.image.exists()
    backing = loop / "loop" / "backing_file"
    image = str(disk.image)
    for _ in range(200):
        try:
            now = backing.read_text().strip()
        except OSError:  # no backing file: the device is free
            return
        if not now.startswith(image):  # (the kernel adds " (deleted)" to a removed file)
            return
        time.sleep(0.01)
    raise AssertionError(f"{loop} still attached to {image}")


def test_disks_from_one_template_are_separate_and_hold_their_size(tmp_path):
    a, b = TrialDisk(tmp_path / "a", SIZE), TrialDisk(tmp_path / "b", SIZE)
    for d in (a, b):
        d.mount()
        assert d.enforced and d.problem == "" and os.path.ismount(d.path)
        assert sorted(os.listdir(d.path)) == []  # no lost+found
        st = os.statvfs(d.path)
        assert 0.9 * SIZE <= st.f_blocks * st.f_frsize <= SIZE
        assert SIZE // BYTES_PER_INODE <= st.f_files <= 1.1 * SIZE // BYTES_PER_INODE
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
        opts = [ln.split()[5] for ln in lines if ln.split()[4] == str(d.path)]
        assert opts and {"nosuid", "nodev", "noatime"} <= set(opts[0].split(","))
    assert os.stat(a.path).st_dev != os.stat(b.path).st_dev
    loop_a = _loop_of(a.path)
    assert Path((loop_a / "loop" / "backing_file").read_text().strip()) == a.image
    (a.path / "mine").write_text("a's file\n")
    assert not (b.path / "mine").exists()
    written = _fill(a.path)
    assert 0.8 * SIZE <= written <= SIZE
    assert os.stat(a.image).st_blocks * 512 <= SIZE + 1024**2  # on the host: the image's blocks
    free = os.statvfs(b.path)
    assert free.f_bavail * free.f_frsize >= 0.9 * SIZE  # a's full disk took nothing of b's
    a.release()
    _gone(a, loop_a)
    c = TrialDisk(tmp_path / "c", SIZE)
    c.mount()  # from the same template after a was filled: empty
    assert c.enforced and os.listdir(c.path) == []
    assert os.statvfs(c.path).f_bfree == os.statvfs(b.path).f_bfree
    for d in (b, c):
        loop = _loop_of(d.path)
        d.release()
        _gone(d, loop)
    d.release()  # idempotent


def test_many_disks_attach_at_once(tmp_path):
    disks = [TrialDisk(tmp_path / f"d{i}", SIZE) for i in range(16)]
    with ThreadPoolExecutor(16) as threads:
        list(threads.map(TrialDisk.mount, disks))
    try:
        assert all(d.enforced for d in disks), [d.problem for d in disks]
        assert len({os.stat(d.path).st_dev for d in disks}) == len(disks)
        for i, d in enumerate(disks):
            (d.path / "n").write_text(str(i))
        assert [(d.path / "n").read_text() for d in disks] == [str(i) for i in range(16)]
    finally:
        loops = [_loop_of(d.path) for d in disks if d.enforced]
        with ThreadPoolExecutor(16) as threads:
            list(threads.map(TrialDisk.release, disks))
    for d, loop in zip(disks, loops, strict=True):
        _gone(d, loop)


def test_without_the_loop_ioctls_the_processes_make_the_disk(tmp_path, monkeypatch):
    def old_kernel(image: Path) -> tuple[int, str]:
        raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")

    monkeypatch.setattr(disk_mod, "attach_loop", old_kernel)
    d = TrialDisk(tmp_path / "old", SIZE)
    d.mount()
    assert d.enforced and os.path.ismount(d.path) and os.listdir(d.path) == []
    assert 0.8 * SIZE <= _fill(d.path) <= SIZE
    loop = _loop_of(d.path)
    d.release()
    _gone(d, loop)


def _in_scratch(name: str) -> TrialDisk:
    """A disk whose folder is in the harness's scratch tmpfs (a trial's or a pool entry's):
    its image goes in the bulk folder."""
    scratch = scratch_dir()
    assert scratch is not None
    return TrialDisk(Path(tempfile.mkdtemp(prefix=f"{name}-", dir=scratch)), SIZE)


def _backing(loop: Path) -> str:
    try:
        return (loop / "loop" / "backing_file").read_text().strip()
    except OSError:
        return ""


def _filled_and_kept(name: str) -> tuple[TrialDisk, Path]:
    """A disk in the scratch, written full and released until its image is kept: (the disk,
    the kept image).
    A release finds the loop device still holding the image when another process made a
    mount namespace meanwhile (a copy of every mount, this disk's too, until that namespace
    drops it: a sandbox of another test worker starting): then the image is removed, as the
    held case below, and a new disk is tried."""
    for _ in range(20):
        a = _in_scratch(name)
        a.mount()
        image = a.image
        assert a.enforced and image.parent == bulk_dir()
        (a.path / "mine").write_text("a's file\n")
        _fill(a.path)
        loop = _loop_of(a.path)
        a.release()
        assert not os.path.ismount(a.path)
        if image.exists():
            st = os.stat(image)
            assert (st.st_size, st.st_blocks) == (0, 0)  # kept, holding nothing on the host
            assert not _backing(loop).startswith(str(image))  # no device reads or writes it
            return a, image
    raise AssertionError("no released image was kept in 20 tries")


def test_a_released_image_is_emptied_and_becomes_the_next_disk(tmp_path):
    """An image its loop device let go is truncated and kept, not unlinked (a new inode per
    disk made every file the harness created scan past the recently freed ones on an ext4
    without a journal); the next disk is written into it and is as empty as a new one."""
    _, image = _filled_and_kept("a")
    b = _in_scratch("b")
    b.mount()
    fresh = TrialDisk(tmp_path / "fresh", SIZE)  # written from the template as a new file
    fresh.mount()
    try:
        assert b.image == image and b.enforced and os.listdir(b.path) == []
        assert os.statvfs(b.path).f_bfree == os.statvfs(fresh.path).f_bfree
        assert os.statvfs(b.path).f_ffree == os.statvfs(fresh.path).f_ffree
        assert Path(_backing(_loop_of(b.path))) == image
    finally:
        for d in (b, fresh):
            d.release()


def test_an_image_its_device_still_holds_is_removed_not_kept():
    """A process holding a file on the disk keeps its file system (and loop device) alive
    past the lazy unmount: the image is unlinked as before, and no later disk gets it."""
    a = _in_scratch("busy")
    a.mount()
    image, loop = a.image, _loop_of(a.path)
    held = open(a.path / "held", "w")  # noqa: SIM115 - held across the release
    try:
        a.release()
        assert not os.path.ismount(a.path) and not image.exists()
        assert _backing(loop) == f"{image} (deleted)"
        b = _in_scratch("after")
        b.mount()
        assert b.image != image
        b.release()
    finally:
        held.write("still writable\n")
        held.close()


def test_a_disk_the_fallback_mounted_or_released_twice_gives_no_image_away(monkeypatch):
    """Red team (helper-95): a disk whose mount(2) failed and that ``mount -o loop`` made
    instead is on a device the harness does not know (its image is never kept: the device
    first attached may be free while the other still writes); and a second release of a disk
    whose image another disk took leaves that image alone."""
    real_mount = disk_mod.mount_ext4
    failures = iter([OSError(errno.EINVAL, "Invalid argument")])

    def fails_once(device: str, target: Path) -> None:
        for exc in failures:
            raise exc
        real_mount(device, target)

    while (spare := disk_mod.take_spare_image()) is not None:  # earlier tests' in this process
        spare.unlink()
    monkeypatch.setattr(disk_mod, "mount_ext4", fails_once)
    a = _in_scratch("fallback")
    a.mount()
    assert a.enforced and os.path.ismount(a.path)
    image = a.image
    a.release()
    assert not image.exists() and disk_mod.take_spare_image() is None
    monkeypatch.setattr(disk_mod, "mount_ext4", real_mount)
    b, kept = _filled_and_kept("first")
    c = _in_scratch("second")
    c.mount()
    try:
        assert c.image == kept  # b's
        b.release()  # again: c's image (b's before) stays
        assert os.path.exists(c.image) and os.path.ismount(c.path)
        assert Path(_backing(_loop_of(c.path))) == c.image
    finally:
        c.release()


def test_a_room_in_memory_holds_its_size_and_inodes_and_leaves_no_mount(tmp_path):
    """``in_memory`` (the clean room's own folders): a tmpfs of the size with one inode per
    BYTES_PER_INODE, ENOSPC past it, and nothing mounted or left after release."""
    disk = TrialDisk(tmp_path / "room", SIZE, in_memory=True)
    path = disk.mount()
    assert disk.enforced
    st = os.statvfs(path)
    assert st.f_blocks * st.f_frsize == SIZE
    assert st.f_files == max(1024, SIZE // BYTES_PER_INODE)
    kind = [line.split(" - ")[1].split()[0] for line in Path("/proc/self/mountinfo").open()
            if line.split()[4] == str(path)]  # fmt: skip
    assert kind == ["tmpfs"]
    assert SIZE - 1024**2 <= _fill(path) <= SIZE  # then ENOSPC (_fill checks)
    disk.release()
    assert not os.path.ismount(path) and not path.exists()


@pytest.mark.sandbox
def test_the_supervisor_killed_for_the_memory_limit_says_out_of_memory(tmp_path):
    """A sandbox whose room is memory, filled past its memory limit by a command: the kernel
    kills the biggest process, often the supervisor (tmpfs pages count toward no process), and
    the sandbox's death says out of memory (helper-122: "supervisor exited (no message)")."""
    import asyncio

    from clawrig.errors import SandboxDied
    from clawrig.sandbox import create_sandbox
    from clawrig.sandbox.base import Limits, SandboxConfig

    room = TrialDisk(tmp_path / "room", 8 * SIZE, in_memory=True)
    room.mount()
    (tmp_path / "ws").mkdir()
    limits = Limits(memory_bytes=SIZE, disk_bytes=8 * SIZE, scratch_in_memory=True)
    config = SandboxConfig(workspace_dir=tmp_path / "ws", scratch_dir=room.path, limits=limits)

    async def fill() -> str:
        box = create_sandbox("bwrap", config)
        await box.start()
        try:
            fill = f"head -c {4 * SIZE} /dev/zero > /tmp/fill"
            r = await box.exec(["sh", "-c", fill], timeout_s=60)
            kills = box.oom_kills()
            return f"exit {r.exit_code}, {kills} killed"
        except SandboxDied as exc:
            return str(exc)
        finally:
            await box.stop()

    try:
        said = asyncio.run(fill())
    finally:
        room.release()
    if said.startswith("exit"):  # the kernel took the command instead: counted all the same
        assert said.endswith(("1 killed", "2 killed")) and "exit -9" in said, said
    else:
        assert said.startswith("supervisor exited"), said
        assert "out of memory (the kernel killed" in said and "64 MiB" in said, said
