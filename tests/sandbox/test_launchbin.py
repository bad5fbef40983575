"""clawrig's sandbox program (clawrig.sandbox.launchbin, sandbox_launch.c): compiled once into
clawrig's cache folder (this user's, no one else may write it), run from a sealed memory file,
replaced when what is cached is not trustworthy, absent (perl then) where there is no compiler;
its failures are one line naming what failed. Its work in a sandbox (launcher, init) is tested
by test_pool.py and test_zygote.py with it and with perl."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clawrig.sandbox import launchbin

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="no C compiler here (make test installs Debian's gcc when root)",
)

PROBE = """
import json, os, sys
from clawrig.sandbox import launchbin
fd = launchbin.program_fd()
print(json.dumps({"fd": fd, "exe": os.readlink(f"/proc/self/fd/{fd}") if fd else None}))
"""


def _probe(cache: Path, **env: str) -> dict[str, object]:
    """program_fd() in a fresh interpreter with ``cache`` as clawrig's cache folder."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, "CLAWRIG_CACHE_DIR": str(cache), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


def _binaries(cache: Path) -> list[Path]:
    return sorted((cache / "bin").glob("sandbox-launch-*"))


def test_it_is_compiled_once_into_a_private_cache_and_run_from_a_sealed_memory_file(tmp_path):
    first = _probe(tmp_path)
    assert first["fd"] is not None and str(first["exe"]).startswith("/memfd:clawrig-sandbox")
    [binary] = _binaries(tmp_path)
    assert binary.read_bytes()[:4] == b"\x7fELF"
    assert (binary.stat().st_mode & 0o777, binary.parent.stat().st_mode & 0o777) == (0o700,) * 2
    made = binary.stat().st_mtime_ns
    assert _probe(tmp_path)["fd"] is not None
    assert _binaries(tmp_path) == [binary] and binary.stat().st_mtime_ns == made  # reused
    # in this process: the memory file cannot be written nor resized
    fd = launchbin.program_fd()
    assert fd is not None
    seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_SEAL
    with pytest.raises(OSError) as caught:
        os.pwrite(fd, b"x", 0)
    assert caught.value.errno in (errno.EPERM, errno.EBADF)


def test_a_cached_program_others_may_write_is_compiled_again(tmp_path):
    _probe(tmp_path)
    [binary] = _binaries(tmp_path)
    planted = b"#!/bin/sh\necho planted\n"
    binary.write_bytes(planted)
    binary.chmod(0o777)  # anyone may write it: not run
    assert _probe(tmp_path)["fd"] is not None
    assert binary.read_bytes()[:4] == b"\x7fELF" and binary.stat().st_mode & 0o777 == 0o700
    binary.write_bytes(planted)  # this user's and private, but not the program: it fails its
    binary.chmod(0o700)  # check run (no usage line), so perl is used
    assert _probe(tmp_path)["fd"] is None


def test_without_a_compiler_or_when_turned_off_there_is_none(tmp_path, monkeypatch):
    empty = tmp_path / "path"
    empty.mkdir()
    assert _probe(tmp_path / "cache", PATH=str(empty))["fd"] is None  # perl does its work
    assert _binaries(tmp_path / "cache") == []
    assert _probe(tmp_path / "cache", CLAWRIG_LAUNCH_C="0")["fd"] is None
    assert _binaries(tmp_path / "cache") == []  # not even compiled
    monkeypatch.setenv("CLAWRIG_LAUNCH_C", "0")
    with pytest.raises(RuntimeError):
        launchbin.program_argv("init")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    fd = launchbin.program_fd()
    assert fd is not None
    return subprocess.run(
        [*launchbin.program_argv("launch")[:1], *args],
        pass_fds=(fd,),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_its_failures_are_one_line_naming_what_failed(tmp_path):
    gone = tmp_path / "no-such-cgroup" / "cgroup.procs"
    r = _run("launch", "1", str(gone), "0", "0", "3", str(tmp_path), "/bin/true")
    assert r.returncode == 1
    assert r.stderr == f"clawrig launch: join {gone}: No such file or directory\n"
    r = _run("launch", "0", "0", "0", "3", str(tmp_path / "gone"), "/bin/true")
    assert r.returncode == 1
    assert r.stderr == f"clawrig launch: clone {tmp_path / 'gone'}: No such file or directory\n"
    r = _run("launch", "2", "only-one")
    assert r.returncode == launchbin.USAGE_STATUS and r.stderr.startswith("clawrig launch: usage")
    r = _run("init", "extra")
    assert r.returncode == launchbin.USAGE_STATUS
