"""clawrig's sandbox launcher and init as one small C program (``sandbox_launch.c`` beside this
module), compiled on first use (statically with musl where ``musl-gcc`` is there: its start
is ~15x cheaper than a glibc program's, :func:`musl_compiler`; else by the host's C compiler)
and kept in clawrig's cache folder (``bin/`` below :func:`clawrig.sandbox.pyenv.cache_root`).

Why: a pooled sandbox's launcher (:mod:`clawrig.sandbox.mountns`) and the init of a sandbox
whose supervisor the zygote forks (:mod:`clawrig.sandbox.zygote`) were perl programs, and a
perl start is ~2 ms of CPU against ~0.4 ms for this program's: two sandboxes per trial, each
with a launcher and an init, ~6 ms of a trial's ~100 (``benchmarks/trial_cpu.py``). Where
there is no C compiler, or the program does not run (a kernel that will not execute a memory
file), perl does the same work, as before.

The harness runs it as root, so what it runs must be what it compiled: the cache's ``bin``
folder is opened without following a link and must be this user's with mode 0700 (made so),
the cached file is read from the descriptor it was checked by (a regular file of this user's
that no one else may write), and one that is missing, not private or does not run is compiled
again (in a private temporary folder) and replaced; nothing outside it is changed but the
folders made on the way to it.
The program then runs from a sealed memory file (memfd_create(2), ``F_SEAL_WRITE``), not from
its path: what runs is what was checked, and a sandbox's init shows
``/memfd:clawrig-sandbox-launch`` as its ``/proc/1/exe``, no host path. Its command is
``/proc/self/fd/N`` (:func:`program_argv`) with N among the process's inherited descriptors
(:func:`program_fd`: pass it on, ``pass_fds``); the launcher closes it before it execs bwrap
unless bwrap's command is the init, and the init closes it at once. ``CLAWRIG_LAUNCH_C=0``
makes clawrig use perl.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clawrig.sandbox.pyenv import cache_root

SOURCE_PATH = Path(__file__).with_name("sandbox_launch.c")
"""The program's source."""

USAGE_STATUS = 2
"""The program's exit status for a command line it does not take (its usage line on stderr)."""


MFD_EXEC = 0x0010
"""memfd_create(2)'s flag for an executable memory file (Linux 6.3+, where
``vm.memfd_noexec`` may make them not executable by default); older kernels refuse it."""

_lock = threading.Lock()
_made: list[int | None] = []


def _private(st: os.stat_result) -> bool:
    """True for a file or folder this user owns and no one else may write to (a folder: nor
    read, as made here): what is in it was put there by this user."""
    return st.st_uid == os.geteuid() and not st.st_mode & (
        0o077 if stat.S_ISDIR(st.st_mode) else 0o022
    )


def _bin_folder() -> int | None:
    """A descriptor of the cache's ``bin`` folder (made 0700 when missing), opened without
    following a link and checked by that descriptor (:func:`_private`), or None. Raises
    OSError (the cache cannot be made)."""
    folder = cache_root() / "bin"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    if not _private(os.fstat(fd)):
        os.close(fd)
        return None
    return fd


def _cached(folder: int, name: str, limit: int = 1 << 26) -> bytes | None:
    """The program ``name`` in the ``bin`` folder ``folder``, read from the descriptor it was
    checked by (a regular file, not a link, :func:`_private`), or None (also for a folder, a
    named pipe or a device there: opened without waiting, never read; and for a file of over
    ``limit`` bytes, which is none of clawrig's)."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder
        )
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and _private(st)) or st.st_size > limit:
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _store(folder: int, name: str, data: bytes, current: set[str]) -> None:
    """Keep ``data`` as ``name`` in the ``bin`` folder ``folder`` (a new file renamed onto it:
    parallel harnesses may store at once) and remove the programs there whose names are not in
    ``current`` (this source's builds of every kind: harnesses with and without musl-gcc on
    their PATH keep theirs). Raises OSError."""
    temp = f".{name}.{os.getpid()}.{threading.get_ident()}"
    fd = os.open(
        temp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o700,
        dir_fd=folder,
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
        for other in os.listdir(folder):  # an older source's (a running harness has its own
            # in memory already)
            if other.startswith("sandbox-launch-") and other not in current:
                with contextlib.suppress(OSError):
                    os.unlink(other, dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        raise


def c_compiler() -> str | None:
    """The host's C compiler (``cc``, else ``gcc``, on PATH), or None."""
    return shutil.which("cc") or shutil.which("gcc")


def musl_compiler() -> str | None:
    """musl's compiler wrapper (``musl-gcc``, Debian's musl-tools, on PATH), or None: the
    program built with it statically starts in ~0.04 ms of CPU instead of ~0.6 ms (glibc's
    start-up reads the CPU's cache sizes with dozens of ``cpuid`` instructions, each a trap
    to the hypervisor on a virtual machine; measured here). Four starts per trial."""
    return shutil.which("musl-gcc")


def _builds() -> list[tuple[str, list[str]]]:
    """The builds to try, best first, each (its kind, its compile command): ``musl``
    statically (:func:`musl_compiler`), then ``cc``, the host's C compiler."""
    builds = []
    if (musl := musl_compiler()) is not None:
        builds.append(("musl", [musl, "-static", "-O2", "-s"]))
    if (cc := c_compiler()) is not None:
        builds.append(("cc", [cc, "-O2"]))
    return builds


COMPILE_TIMEOUT_S = 60.0
"""A compile that takes longer is stopped (with every process it started) and taken as failed."""

COMPILE_TIMED_OUT = b"timed out"
""":func:`_compiled`'s answer for a compile stopped at :data:`COMPILE_TIMEOUT_S`."""


def _descendants(pid: int) -> list[int]:
    """``pid``'s children, theirs, and so on (``/proc/PID/task/TID/children``), deepest last;
    what cannot be read is left out."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{parent}/task"):
                with contextlib.suppress(OSError, ValueError):
                    with open(f"/proc/{parent}/task/{tid}/children") as fh:
                        kids = [int(x) for x in fh.read().split()]
                    found += kids
                    todo += kids
    return found


FREEZE_LIMIT_S = 2.0
"""Longest :func:`_kill_tree` waits for the processes it stopped to be stopped."""
KILL_ROUNDS = 100
"""Most rounds :func:`_kill_tree` lists and kills the tree's processes before its root."""


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and every process it started, then reap it. The tree is frozen first,
    round after round until a round finds no new process: each found is sent SIGSTOP and
    waited for until it is stopped (or gone; :data:`FREEZE_LIMIT_S` at most), so every child
    it made is listed by then and it makes no more. Killed while still growing, a process
    listed before its fork left that child running, orphaned (CI185: the fake compiler's
    ``sleep``, forked as the harness was interrupted). Found before they die: orphans go to
    init and are no one's descendants."""
    frozen: list[int] = []
    deadline = time.monotonic() + FREEZE_LIMIT_S
    while new := [p for p in [proc.pid, *_descendants(proc.pid)] if p not in frozen]:
        for pid in new:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        frozen += new
        while not all(map(_stopped_or_gone, new)) and time.monotonic() < deadline:
            time.sleep(0.001)
        if time.monotonic() >= deadline:
            break
    # the root last: its children first, found again round after round until none is new (a
    # loaded machine's freeze can run out of time with some not listed yet: CI203 left 43 of
    # a forking shell's children; once the root dies they are init's, no one's descendants)
    killed: set[int] = set()
    for _ in range(KILL_ROUNDS):
        left = [p for p in [*frozen, *_descendants(proc.pid)] if p != proc.pid and p not in killed]
        if not left:
            break
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed.update(left)
    with contextlib.suppress(OSError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def _stopped_or_gone(pid: int) -> bool:
    """True when process ``pid`` is stopped, a zombie, or gone (/proc's state)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return True
    return data[data.rindex(b")") + 2 :][:1] in (b"T", b"t", b"Z", b"X")


@contextlib.contextmanager
def _interrupts_after() -> Iterator[None]:
    """In the main thread, SIGINT and SIGTERM that arrive while the block runs reach their
    Python handlers (a Ctrl-C's KeyboardInterrupt, the harness's Terminated) only as it
    ends, at its last line; a handler that is no Python function (the default, ignored) and
    other threads (where no handler runs) are left alone. Source: signal(2) semantics of
    Python's ``signal`` module (handlers run in the main thread, between bytecodes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, Any]] = []
    theirs: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if callable(handler):
            theirs[signum] = handler
            signal.signal(signum, lambda n, frame: held.append((n, frame)))
    try:
        yield
    finally:
        for number, handler in theirs.items():
            signal.signal(number, handler)
        for number, frame in held:
            theirs[number](number, frame)


def _compiled(source: bytes, command: list[str]) -> bytes | None:
    """``source`` compiled by ``command`` in a private temporary folder, or None (it cannot
    run or fails), or :data:`COMPILE_TIMED_OUT` (it took over :data:`COMPILE_TIMEOUT_S`).
    The compiler stays in the harness's process group (a terminal's Ctrl-C reaches it, as it
    reaches the harness); stopped at the limit, or when the harness is interrupted meanwhile,
    it is killed with every process it started (:func:`_kill_tree`)."""
    with tempfile.TemporaryDirectory(prefix="clawrig-cc-") as temp:
        out = Path(temp) / "sandbox-launch"
        proc: subprocess.Popen[bytes] | None = None
        try:
            # an interrupt while Popen starts the compiler is taken once Popen has returned
            # it (CI185: raised inside Popen, it left the compiler running, no one's to kill)
            with _interrupts_after():
                proc = subprocess.Popen(
                    [*command, "-x", "c", "-", "-o", str(out)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            proc.communicate(source, timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            assert proc is not None
            _kill_tree(proc)
            return COMPILE_TIMED_OUT
        except (OSError, subprocess.SubprocessError):  # (it cannot run; writing its input)
            if proc is not None:
                _kill_tree(proc)
            return None
        except BaseException:  # an interrupt meanwhile: nothing of it is left running
            if proc is not None:
                _kill_tree(proc)
            raise
        if proc.returncode != 0:
            return None
        try:
            return out.read_bytes()
        except OSError:
            return None


def _sealed(data: bytes) -> int:
    """A sealed memory file (close-on-exec, executable, read-only) holding ``data``. Raises
    OSError."""
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    try:
        fd = os.memfd_create("clawrig-sandbox-launch", flags | MFD_EXEC)
    except OSError:
        fd = os.memfd_create("clawrig-sandbox-launch", flags)
    try:
        with open(fd, "wb", closefd=False) as fh:
            fh.write(data)
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        os.fchmod(fd, 0o500)
    except BaseException:
        os.close(fd)
        raise
    return fd


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


def _runnable(data: bytes) -> int | None:
    """:func:`_sealed` of ``data`` when it runs here (:func:`_works`), else None."""
    fd = _sealed(data)
    if _works(fd):
        return fd
    os.close(fd)
    return None


TIMED_OUT_KEPT_S = 24 * 3600.0
"""How long a compiler whose compile timed out is not tried again (:func:`_make`)."""


def _compiler_id(command: list[str]) -> str:
    """What names the compiler of ``command`` in a timed-out build's record: its real path,
    inode, size, modification and change times (another or a rewritten compiler differs)."""
    path = shutil.which(command[0]) or command[0]
    try:
        st = os.stat(path)
    except OSError:
        return path
    real = os.path.realpath(path)
    return f"{real} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


def _timed_out_before(record: bytes | None, compiler: str) -> bool:
    """True when ``record`` (a ``.failed`` file's bytes: the compiler's :func:`_compiler_id`,
    then the time of the timeout) says this same compiler timed out within
    :data:`TIMED_OUT_KEPT_S`."""
    if record is None:
        return False
    text = record.decode("utf-8", "replace")
    said, _, when = text.rpartition(" at ")
    try:
        age = time.time() - float(when)
    except ValueError:
        return False
    return said == compiler and -60 <= age < TIMED_OUT_KEPT_S  # (a clock set back a little)


def _make() -> int | None:
    """The program's memory file (module docs): for each build of :func:`_builds`, best first,
    the cached one when it is there, private and runs, else compiled now when it compiles and
    runs (and kept when the cache can take it). Each build is cached under a name of its own
    kind (what compiled it: musl installed later replaces a glibc build; a musl-gcc that fails
    or makes a program that does not run falls back to cc, and is tried again next time: what
    failed may be its surroundings, a missing gcc below musl's wrapper). A compiler whose
    compile timed out (:data:`COMPILE_TIMEOUT_S`) is recorded beside the builds
    (``<name>.failed``: :func:`_compiler_id` and the time) and not run again by later harnesses
    for :data:`TIMED_OUT_KEPT_S` while it is the same one (a hanging musl-gcc cost every start
    60 s). Raises OSError."""
    source = SOURCE_PATH.read_bytes()
    builds = _builds()
    names = {
        kind: "sandbox-launch-"
        + hashlib.sha256(source + os.uname().machine.encode() + kind.encode()).hexdigest()[:16]
        for kind in ("musl", "cc")
    }
    current = {*names.values(), *(f"{n}.failed" for n in names.values())}
    try:
        folder = _bin_folder()
    except OSError:
        folder = None  # no cache here: compiled for this process alone
    try:
        for kind, command in builds:
            if folder is not None and (data := _cached(folder, names[kind])) is not None:
                if (fd := _runnable(data)) is not None:
                    return fd
            failed, compiler = f"{names[kind]}.failed", _compiler_id(command)
            record = _cached(folder, failed, limit=4096) if folder is not None else None
            if _timed_out_before(record, compiler):
                continue
            data = _compiled(source, command)
            if data == COMPILE_TIMED_OUT:
                if folder is not None:
                    with contextlib.suppress(OSError):
                        record = f"{compiler} at {int(time.time())}".encode()
                        _store(folder, failed, record, current)
                continue
            if data is None or (fd := _runnable(data)) is None:
                continue
            if folder is not None:
                with contextlib.suppress(OSError):
                    _store(folder, names[kind], data, current)
                with contextlib.suppress(OSError):
                    os.unlink(failed, dir_fd=folder)
            return fd
        return None
    finally:
        if folder is not None:
            os.close(folder)


def program_fd() -> int | None:
    """A file descriptor (close-on-exec) of a sealed memory file holding the compiled program,
    made once per process (module docs; thread-safe); None where it cannot be had
    (``CLAWRIG_LAUNCH_C=0``, read at each call; no C compiler, a compile error, the program
    does not run here): callers use perl."""
    if os.environ.get("CLAWRIG_LAUNCH_C", "1") == "0":
        return None
    with _lock:
        if not _made:
            try:
                _made.append(_make())
            except (OSError, RuntimeError):  # RuntimeError: a cache path with no home
                _made.append(None)
        return _made[0]


def program_argv(mode: str, fd: int | None = None) -> list[str]:
    """The program's command for ``mode`` (``launch`` or ``init``: ``sandbox_launch.c``'s
    docs) run from ``fd`` (default :func:`program_fd`); the process that runs it must inherit
    that descriptor. Raises RuntimeError when there is no program (check :func:`program_fd`
    first)."""
    fd = program_fd() if fd is None else fd
    if fd is None:
        raise RuntimeError("clawrig's sandbox launcher is not available")
    return [f"/proc/self/fd/{fd}", mode]
