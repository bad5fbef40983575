"""clawrig's sandbox program (clawrig.sandbox.launchbin, sandbox_launch.c): compiled once into
clawrig's cache folder (this user's, no one else may write it), run from a sealed memory file,
replaced when what is cached is not trustworthy, absent (perl then) where there is no compiler;
its failures are one line naming what failed. Its work in a sandbox (launcher, init) is tested
by test_pool.py and test_zygote.py with it and with perl."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clawrig.sandbox import launchbin
from sandbox_procs import processes_in_sandbox

pytestmark = pytest.mark.skipif(
    launchbin.c_compiler() is None,
    reason="no C compiler here (make test installs Debian's gcc when root)",
)

PROBE = """
import faulthandler, json, os, signal, sys
faulthandler.register(signal.SIGUSR1)  # (a probe that hangs: its stacks, for the assertion)
from clawrig.sandbox import launchbin
launchbin.COMPILE_TIMEOUT_S = float(os.environ.get("PROBE_COMPILE_TIMEOUT_S", "60"))
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
    return sorted(p for p in (cache / "bin").glob("sandbox-launch-*") if p.suffix != ".failed")


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


def _program_interpreter(elf: bytes) -> bytes | None:
    """The PT_INTERP path of a 64-bit little-endian ELF file (its dynamic loader), or None
    (a static program). Source: the System V ABI's ELF program header table."""
    assert elf[:4] == b"\x7fELF" and elf[4] == 2 and elf[5] == 1  # ELFCLASS64, ELFDATA2LSB
    phoff = int.from_bytes(elf[0x20:0x28], "little")
    phentsize = int.from_bytes(elf[0x36:0x38], "little")
    phnum = int.from_bytes(elf[0x38:0x3A], "little")
    for k in range(phnum):
        header = elf[phoff + k * phentsize : phoff + (k + 1) * phentsize]
        if int.from_bytes(header[0:4], "little") == 3:  # PT_INTERP
            offset = int.from_bytes(header[8:16], "little")
            size = int.from_bytes(header[32:40], "little")
            return elf[offset : offset + size].rstrip(b"\0")
    return None


@pytest.mark.skipif(launchbin.musl_compiler() is None, reason="no musl-gcc (Debian: musl-tools)")
def test_with_musl_the_program_is_static_and_with_glibc_alone_dynamic(tmp_path):
    # musl's static program needs no dynamic loader (glibc's start-up: ~0.6 ms of CPU per start
    # on a VM, musl's ~0.04); without musl-gcc on PATH the host's cc builds it (dynamic)
    _probe(tmp_path / "musl")
    [musl] = _binaries(tmp_path / "musl")
    assert _program_interpreter(musl.read_bytes()) is None
    only_cc = tmp_path / "path"  # the compiler and the tools it runs, no musl-gcc
    only_cc.mkdir()
    for tool in ("cc", "as", "ld"):
        found = shutil.which(tool)
        assert found is not None, tool
        (only_cc / tool).symlink_to(found)
    assert _probe(tmp_path / "glibc", PATH=str(only_cc))["fd"] is not None
    [glibc] = _binaries(tmp_path / "glibc")
    assert glibc.name != musl.name  # the build's kind is in its name
    assert b"ld-linux" in (_program_interpreter(glibc.read_bytes()) or b"")


def _fake_musl(folder: Path, body: str, log: Path) -> str:
    """A ``musl-gcc`` in ``folder`` that logs each run to ``log`` then runs ``body``; returns
    a PATH with it first."""
    folder.mkdir()
    (folder / "musl-gcc").write_text(f"#!/bin/sh\necho run >> {log}\n{body}\n")
    (folder / "musl-gcc").chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


@pytest.mark.skipif(launchbin.musl_compiler() is None, reason="no musl-gcc (Debian: musl-tools)")
def test_a_musl_gcc_that_fails_or_makes_no_program_falls_back_to_cc_under_cc_s_name(tmp_path):
    # a musl-gcc that fails, and one that exits 0 leaving garbage: the host's cc builds the
    # program (dynamic), cached under the cc build's name; the failure is not recorded (it may
    # be the surroundings': a gcc missing below musl's wrapper), so the next start tries it
    # again; the real musl-gcc later makes and caches its own static build beside it (the cc
    # build is this source's too: kept)
    for broken, body in (
        ("fails", "exit 1"),
        ("garbage", 'for a; do out=$a; done\necho x > "$out"'),
    ):
        log = tmp_path / f"{broken}.log"
        with_fake = _fake_musl(tmp_path / broken, body, log)
        cache = tmp_path / f"cache-{broken}"
        assert _probe(cache, PATH=with_fake)["fd"] is not None
        [cc_build] = _binaries(cache)
        assert b"ld-linux" in (_program_interpreter(cc_build.read_bytes()) or b""), broken
        assert not list((cache / "bin").glob("*.failed")), broken
        assert _probe(cache, PATH=with_fake)["fd"] is not None
        assert log.read_text() == "run\nrun\n", broken
        assert _probe(cache)["fd"] is not None  # the real musl-gcc
        builds = _binaries(cache)
        assert len(builds) == 2 and cc_build in builds, broken
        [musl_build] = [b for b in builds if b != cc_build]
        assert _program_interpreter(musl_build.read_bytes()) is None, broken


@pytest.mark.skipif(launchbin.musl_compiler() is None, reason="no musl-gcc (Debian: musl-tools)")
def test_a_musl_gcc_that_hangs_is_stopped_with_what_it_started_and_not_run_again(tmp_path):
    # a compile past its time limit (1 s here, 60 s as shipped) is killed with every process it
    # started, and recorded: the next harness does not run that compiler again (a hanging one
    # cost each start 60 s) until it changes; the real musl-gcc then builds, and the record goes
    marker = f"{987_000 + os.getpid() % 1000}"
    log = tmp_path / "hang.log"
    with_fake = _fake_musl(tmp_path / "hang", f"sleep {marker} & wait", log)
    cache = tmp_path / "cache"
    fast = {"PATH": with_fake, "PROBE_COMPILE_TIMEOUT_S": "1"}
    assert _probe(cache, **fast)["fd"] is not None
    assert [b for b in _binaries(cache) if _program_interpreter(b.read_bytes())]  # cc's
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout  # the compiler's own child was killed with it
    [failed] = (cache / "bin").glob("sandbox-launch-*.failed")
    assert failed.read_text().startswith(str(tmp_path / "hang" / "musl-gcc") + " ")
    assert _probe(cache, **fast)["fd"] is not None
    assert log.read_text() == "run\n"  # not run again
    os.utime(tmp_path / "hang" / "musl-gcc", ns=(1, 1))  # rewritten: another compiler now
    assert _probe(cache, **fast)["fd"] is not None
    assert log.read_text() == "run\nrun\n"
    assert _probe(cache)["fd"] is not None  # the real musl-gcc
    assert [b for b in _binaries(cache) if _program_interpreter(b.read_bytes()) is None]
    assert not failed.exists()


def test_a_record_or_program_in_the_cache_that_is_no_regular_file_is_passed_over(tmp_path):
    # a folder or a named pipe where a build or a failure record would be: not read (a pipe's
    # open waited forever; a folder's read raised out of the build: perl was used)
    _probe(tmp_path / "seen")
    [name] = [b.name for b in _binaries(tmp_path / "seen")]
    for odd in ("folder", "fifo"):
        folder = tmp_path / odd / "bin"
        folder.mkdir(parents=True, mode=0o700)
        for entry in (name, f"{name}.failed"):
            if odd == "folder":
                (folder / entry).mkdir(mode=0o700)
            else:
                os.mkfifo(folder / entry, 0o600)
        assert _probe(tmp_path / odd)["fd"] is not None, odd


def test_a_cached_program_that_is_not_private_or_not_the_program_is_compiled_again(tmp_path):
    _probe(tmp_path)
    [binary] = _binaries(tmp_path)
    planted = b"#!/bin/sh\necho planted\n"
    binary.write_bytes(planted)
    binary.chmod(0o777)  # anyone may write it: not run
    assert _probe(tmp_path)["fd"] is not None
    assert binary.read_bytes()[:4] == b"\x7fELF" and binary.stat().st_mode & 0o777 == 0o700
    binary.write_bytes(planted)  # this user's and private, but not the program: it fails its
    binary.chmod(0o700)  # check run (no usage line), so it is compiled again
    assert _probe(tmp_path)["fd"] is not None
    assert binary.read_bytes()[:4] == b"\x7fELF"
    (tmp_path / "bin" / "sandbox-launch-0123456789abcdef").write_bytes(b"an older source's")
    binary.unlink()
    assert _probe(tmp_path)["fd"] is not None
    assert _binaries(tmp_path) == [binary]  # the older one was removed with the new one kept


def test_a_cache_that_is_not_this_users_own_is_not_used_nor_changed(tmp_path):
    # a bin folder that is a link (to another folder: it is not followed, not chmodded, not
    # written into), a file, or a folder others may read: the program is compiled for this
    # process alone, never read from there, and no traceback
    victim = tmp_path / "victim"
    victim.mkdir()
    victim.chmod(0o755)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "bin").symlink_to(victim)
    assert _probe(linked)["fd"] is not None
    assert victim.stat().st_mode & 0o777 == 0o755 and list(victim.iterdir()) == []
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "bin").write_text("a file\n")
    assert _probe(plain)["fd"] is not None
    shared = tmp_path / "shared"
    (shared / "bin").mkdir(parents=True)
    (shared / "bin").chmod(0o777)
    first = _probe(shared)
    assert first["fd"] is not None and _binaries(shared) == []
    os.chown(shared / "bin", 65534, 65534)  # another user's, private to them
    (shared / "bin").chmod(0o700)
    assert _probe(shared)["fd"] is not None and _binaries(shared) == []


THREADS = """
import json, threading
from clawrig.sandbox import launchbin
got, gate = [], threading.Barrier(4)
def one():
    gate.wait()
    got.append(launchbin.program_fd())
threads = [threading.Thread(target=one) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(got))
"""


def test_threads_asking_at_once_get_the_same_program(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", THREADS],
        env={**os.environ, "CLAWRIG_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = json.loads(done.stdout)
    assert len(got) == 4 and got[0] is not None and len(set(got)) == 1
    assert len(_binaries(tmp_path)) == 1


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


def _run(*args: str, keep: str | None = None) -> subprocess.CompletedProcess[str]:
    fd = launchbin.program_fd()
    assert fd is not None
    return subprocess.run(
        [*launchbin.program_argv("launch")[:1], *args],
        env={"PATH": os.environ["PATH"], **({"CLAWRIG_LAUNCH_KEEP_FDS": keep} if keep else {})},
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
    # a list of descriptors to keep that is not one: the usage line, nothing done (no join)
    for keep in ("3,x", "2", "4,,5", ",".join(["9"] * 65)):
        r = _run("launch", "1", str(gone), "0", "0", "3", str(tmp_path), "/bin/true", keep=keep)
        assert r.returncode == launchbin.USAGE_STATUS, keep
        assert r.stderr.startswith("clawrig launch: usage"), keep


async def test_a_launched_bwrap_gets_its_descriptors_alone_and_default_signals(
    make_sandbox, monkeypatch
):
    # the harness starts the launcher with posix_spawn (client.spawn_launcher), which closes
    # none of the harness's descriptors: an inheritable one (a C library's, say) must not reach
    # bwrap or the sandbox (the launcher keeps CLAWRIG_LAUNCH_KEEP_FDS's alone)
    from clawrig.sandbox.pool import pooling_possible

    if not pooling_possible():
        pytest.skip("a warm pool needs root and mke2fs")
    stray_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"stray-{os.getpid()}-{id(make_sandbox)}"
    stray = os.open(stray_file, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.set_inheritable(stray, True)
        for zygote in ("0", "1"):
            monkeypatch.setenv("CLAWRIG_ZYGOTE", zygote)
            sb = await make_sandbox("pooled")
            await sb.spawn("sleep 300")
            pids = [sb._proc.pid, *processes_in_sandbox(sb._proc.pid)]
            held = {pid: _links(pid) for pid in pids}
            assert len(held) >= 3 and all(held.values()), held  # bwrap, init, supervisor, sleep
            assert not any(str(stray_file) in links for links in held.values()), held
            env = Path(f"/proc/{sb._proc.pid}/environ").read_bytes().split(b"\0")
            assert not any(e.startswith(b"CLAWRIG_LAUNCH_KEEP_FDS=") for e in env), env
            # signals Python ignores are at their defaults again (Popen's restore_signals):
            # `yes | head -1` ends by SIGPIPE, not by a write error
            for pid in pids[:1]:  # bwrap, as the launcher started it
                assert not _ignored(pid) & (1 << (signal.SIGPIPE - 1)), _ignored(pid)
            r = await sb.exec("grep SigIgn /proc/self/status; yes | head -1")
            ignored = int(r.stdout.split()[1], 16)
            assert not ignored & (1 << (signal.SIGPIPE - 1)), r.stdout
            assert r.stdout.split()[2:] == ["y"] and r.stderr == "", (r.stdout, r.stderr)
    finally:
        os.close(stray)
        stray_file.unlink()


@pytest.mark.parametrize(
    ("libc", "keeps"),
    [
        ("glibc 2.36", True),
        ("glibc 2.29", True),
        ("glibc 2.28", False),
        ("glibc 3.0", True),
        ("musl 1.2.4", False),
        ("glibc", False),
        (None, False),
    ],
)
def test_posix_spawn_is_used_where_a_dup2_onto_itself_keeps_the_descriptor(
    libc, keeps, monkeypatch
):
    from clawrig.sandbox.client import posix_spawn_keeps_fds

    real = os.confstr
    monkeypatch.setattr(
        os, "confstr", lambda name: libc if name == "CS_GNU_LIBC_VERSION" else real(name)
    )
    posix_spawn_keeps_fds.cache_clear()
    try:
        assert posix_spawn_keeps_fds() is keeps
    finally:
        posix_spawn_keeps_fds.cache_clear()


async def test_on_an_older_glibc_a_pooled_sandbox_starts_by_popen(make_sandbox, monkeypatch):
    # glibc < 2.29 does not clear close-on-exec for a dup2 onto itself: the launcher lost its
    # template's descriptor and every start failed ("enter the template: Bad file
    # descriptor", a red team's finding with a preload that made it a no-op). There the
    # launcher is started as before, and the sandbox works.
    from clawrig.sandbox import client
    from clawrig.sandbox.pool import pooling_possible

    if not pooling_possible():
        pytest.skip("a warm pool needs root and mke2fs")
    monkeypatch.setattr(client, "posix_spawn_keeps_fds", lambda: False)
    import clawrig.sandbox.bwrap as bwrap_module

    monkeypatch.setattr(bwrap_module, "posix_spawn_keeps_fds", lambda: False)
    sb = await make_sandbox("pooled")
    assert (await sb.exec("echo up")).stdout == "up\n"


def _ignored(pid: int) -> int:
    """The mask of signals ``pid`` ignores (``SigIgn`` of /proc/PID/status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigIgn")), 16)


def _links(pid: int) -> list[str]:
    """What ``pid``'s descriptors point at (from the host)."""
    links = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            links.append(os.readlink(fd))
    return links


async def test_no_sandbox_process_but_the_zygotes_init_holds_the_program(make_sandbox, monkeypatch):
    # a pooled sandbox whose supervisor bwrap starts (no zygote): the launcher closed its own
    # descriptor before it became bwrap; with the zygote, bwrap runs the init from it and the
    # init closes it
    from clawrig.sandbox.pool import pooling_possible

    if not pooling_possible():
        pytest.skip("a warm pool needs root and mke2fs")
    for zygote in ("0", "1"):
        monkeypatch.setenv("CLAWRIG_ZYGOTE", zygote)
        sb = await make_sandbox("pooled")
        assert sb.zygote is (zygote == "1")
        await sb.spawn("sleep 300")
        seen = {pid: _memfds(pid) for pid in [sb._proc.pid, *processes_in_sandbox(sb._proc.pid)]}
        assert len(seen) >= 4 and not any(seen.values()), seen  # bwrap, init, supervisor, sleep


def _memfds(pid: int) -> list[str]:
    """The memory files ``pid`` holds open (from the host)."""
    return [link for link in _links(pid) if link.startswith("/memfd:")]


def test_a_timed_out_record_holds_for_its_compiler_a_day_from_when_it_was_written():
    # the record's time was rounded to the nearest second: written in a second's later half,
    # it lay in the future and did not hold (CI ran the hanging compiler again)
    import time

    cid = "/usr/bin/musl-gcc 1 2 3 4"
    now = int(time.time())
    for when, holds in ((now + 1, True), (now, True), (now - 3600, True), (now - 90_000, False)):
        assert launchbin._timed_out_before(f"{cid} at {when}".encode(), cid) is holds, when
    assert not launchbin._timed_out_before(f"{cid} at {now}".encode(), cid + "5")
    assert not launchbin._timed_out_before(b"nonsense", cid)
    assert not launchbin._timed_out_before(None, cid)


@pytest.mark.skipif(launchbin.musl_compiler() is None, reason="no musl-gcc (Debian: musl-tools)")
def test_an_interrupt_during_a_hanging_compile_stops_it_and_what_it_started(tmp_path):
    # the compiler in a session of its own missed a terminal's Ctrl-C: the harness waited for
    # the compile's time limit, and a SIGTERM left the compiler and its child running
    marker = f"{986_000 + os.getpid() % 1000}"
    with_fake = _fake_musl(tmp_path / "hang", f"sleep {marker} & wait", tmp_path / "log")
    env = {
        **os.environ,
        "CLAWRIG_CACHE_DIR": str(tmp_path / "cache"),
        "PATH": with_fake,
        "PROBE_COMPILE_TIMEOUT_S": "600",
    }
    probe = subprocess.Popen(
        [sys.executable, "-c", PROBE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "log").exists()
    probe.send_signal(signal.SIGINT)
    try:
        _, err = probe.communicate(timeout=60)  # well before the compile's own limit
    except subprocess.TimeoutExpired:  # (once, on a loaded machine: where it was)
        probe.send_signal(signal.SIGUSR1)
        time.sleep(1)
        probe.kill()
        raise AssertionError(
            f"no exit 60 s after SIGINT: {probe.communicate()[1].decode()}"
        ) from None
    assert probe.returncode != 0 and b"KeyboardInterrupt" in err
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout


@pytest.mark.parametrize("freeze_s", [launchbin.FREEZE_LIMIT_S, 0.0], ids=["freeze", "no-time"])
def test_a_tree_still_growing_is_killed_whole(monkeypatch, freeze_s):
    """CI185: a compile interrupted as its compiler forked left the child running (the tree was
    listed, then killed: a child forked in between was missed). A shell forking children as
    fast as it can is killed with every one of them, also when the freeze runs out of time
    (CI203, a loaded machine: 43 children were left)."""
    monkeypatch.setattr(launchbin, "FREEZE_LIMIT_S", freeze_s)
    marker = f"{987_000 + os.getpid() % 1000}"
    proc = subprocess.Popen(
        ["sh", "-c", f"while :; do sleep {marker} & done"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not launchbin._descendants(proc.pid):
            time.sleep(0.01)
        time.sleep(0.05)  # forking meanwhile
        launchbin._kill_tree(proc)
        assert proc.returncode == -signal.SIGKILL
        left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
        assert left.stdout == "", f"{len(left.stdout.split())} left"
    finally:
        proc.kill()
        subprocess.run(["pkill", "-9", "-f", f"sleep {marker}"], check=False)


@pytest.mark.skipif(launchbin.musl_compiler() is None, reason="no musl-gcc (Debian: musl-tools)")
def test_an_interrupt_as_the_compiler_starts_stops_it(tmp_path):
    """CI185: a Ctrl-C that reached the harness while subprocess.Popen was still returning the
    compiler (its child running already) left the compiler and its child running: the
    interrupt was raised inside Popen, before the harness held the process. Here a real
    SIGINT is sent from inside Popen, just as it has started the child."""
    marker = f"{988_000 + os.getpid() % 1000}"
    with_fake = _fake_musl(tmp_path / "hang", f"sleep {marker} & wait", tmp_path / "log")
    env = {**os.environ, "CLAWRIG_CACHE_DIR": str(tmp_path / "cache"), "PATH": with_fake}
    inside_popen = (
        "import os, signal, subprocess, time\n"
        "started = subprocess.Popen.__init__\n"
        "def init(self, *args, **kwargs):\n"
        "    started(self, *args, **kwargs)\n"
        "    os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C as Popen returns the child\n"
        "    time.sleep(0.2)  # (taken here, inside Popen, by a handler that raises at once)\n"
        "subprocess.Popen.__init__ = init\n"
    )
    probe = subprocess.run(
        [sys.executable, "-c", inside_popen + PROBE],
        env=env,
        capture_output=True,
        timeout=120,
    )
    try:
        assert probe.returncode != 0 and b"KeyboardInterrupt" in probe.stderr, probe.stderr
        assert (tmp_path / "log").exists()  # the compiler ran
        time.sleep(0.2)
        left = subprocess.run(
            ["pgrep", "-f", f"sleep {marker}|{tmp_path}/hang"], capture_output=True, text=True
        )
        assert left.stdout == "", left.stdout
    finally:
        subprocess.run(["pkill", "-9", "-f", f"sleep {marker}|{tmp_path}/hang"], check=False)
