"""The harness's own tmpfs (clawrig.leftovers.scratch_dir): its folders are made there, what
they hold that is bulky is on the host's disk (a trial disk's image, a plain folder bound in a
disk's place), and nothing of it is left once the process ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clawrig.leftovers import bulk_dir, in_scratch, owned_tempdir, scratch_dir
from clawrig.sandbox.disk import TrialDisk, can_make_disks

pytestmark = pytest.mark.skipif(not can_make_disks(), reason="the scratch needs root")


def _fstype(path: Path) -> str:
    """The file system type of the mount ``path`` is on (/proc/self/mountinfo)."""
    best, kind = "", ""
    real = os.path.realpath(path)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point, fstype = fields[4], fields[fields.index("-") + 1]
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fstype
    return kind


def test_the_scratch_is_a_tmpfs_and_a_disks_files_are_on_the_hosts_disk():
    scratch = scratch_dir()
    assert scratch is not None and _fstype(scratch) == "tmpfs"
    assert scratch_dir() == scratch  # one per process
    host = os.stat(scratch.parent).st_dev
    disk = TrialDisk(owned_tempdir("trial", scratch), 64 * 1024**2)
    plain = TrialDisk(owned_tempdir("trial", scratch), None)
    try:
        assert in_scratch(disk.folder) and not in_scratch(scratch.parent)
        assert disk.mount() == disk.folder / "fs" and disk.enforced
        assert _fstype(disk.path) == "ext4"
        image = disk.image
        assert image.parent == bulk_dir() and os.stat(image).st_dev == host
        # no disk asked: a plain folder, on the host's disk all the same
        plain.mount()
        (plain.path / "data").write_bytes(b"x" * 4096)
        assert os.stat(plain.path / "data").st_dev == host
        bound = plain._bound
        assert bound is not None and (bound / "data").read_bytes() == b"x" * 4096
    finally:
        disk.release()
        plain.release()
    assert not disk.path.exists()
    # the image removed, or emptied and kept for the next disk (tests/sandbox/test_disk.py)
    assert not image.exists() or os.stat(image).st_blocks == 0
    assert not bound.exists() and not plain.path.exists()


def test_a_harness_process_leaves_no_scratch_behind(tmp_path):
    """A process that made its scratch, a trial disk in it and the pool's /etc copy ends: its
    tmpfs is unmounted and every folder it made is gone; CLAWRIG_SCRATCH=0 makes none."""
    code = (
        "from clawrig.leftovers import scratch_dir, owned_tempdir\n"
        "from clawrig.sandbox.disk import TrialDisk\n"
        "s = scratch_dir()\n"
        "print(s)\n"
        "TrialDisk(owned_tempdir('trial', s), 64 * 1024**2).mount()\n"  # never released
    )
    env = dict(os.environ, TMPDIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    made = Path(out.stdout.strip())
    assert made.parent == tmp_path and made.name.startswith("clawrig-scratch-")
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
    assert list(tmp_path.iterdir()) == []
    off = subprocess.run(
        [sys.executable, "-c", code],
        env=env | {"CLAWRIG_SCRATCH": "0"},
        capture_output=True,
        text=True,
    )
    assert off.returncode == 0 and off.stdout.strip() == "None", off.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.sandbox
@pytest.mark.parametrize("scratch", ["1", "0"])
def test_a_temp_folder_below_dev_shm_runs_trials(tmp_path, scratch):
    """TMPDIR below /dev/shm (a tmpfs below /dev, which the pool's template namespace leaves
    out): the pool's folders were not there for bwrap, every trial an infrastructure error."""
    import shutil
    import tempfile

    clawrig = str(Path(sys.executable).with_name("clawrig"))
    demo = Path(__file__).resolve().parents[2] / "suites" / "demo"
    temp = Path(tempfile.mkdtemp(prefix="clawrig-test-", dir="/dev/shm"))
    try:
        out = subprocess.run(
            [clawrig, "run", demo, "-s", "000015", "--agent", "oracle", "-o", tmp_path / "out"],
            env=dict(os.environ, TMPDIR=str(temp), CLAWRIG_SCRATCH=scratch),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert "oracle: 1/1 samples reach their expected reward" in out.stdout, out.stdout
        assert [p.name for p in temp.iterdir() if p.name.startswith("clawrig-scratch")] == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_socket_folders_go_to_the_scratch():
    from clawrig.leftovers import socket_tempdir

    scratch = scratch_dir()
    folder = socket_tempdir("gwdoor", "gateway.sock")
    try:
        assert scratch is not None and folder.parent == scratch
    finally:
        folder.rmdir()
