"""Folders a harness process owns are named with its pid, so the next harness can remove what
a killed one (``kill -9``, a lost machine) left behind: ``clawrig-sbx-<pid>-*`` (a sandbox's
root and scratch), ``clawrig-trial-<pid>-*`` (a trial's work folder) and the others in
:data:`KINDS`. Cgroups and grading environment stages follow the same rule in their own places
(sandbox/bwrap.py, sandbox/pyenv.py).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from clawrig.errors import UserError

KINDS = (
    "sbx",  # a sandbox's root and scratch
    "trial",  # a trial's work folder (its disk is mounted below it)
    "trial-files",  # a trial's folder when no output folder is given
    "chan",  # a harness channel's socket folder
    "gw",  # the model gateway's socket folder
    "gwdoor",  # a sandbox's door to the gateway
    "egress",  # a trial's egress proxy socket
    "docker",  # a Docker sandbox's scratch
    "local",  # a local sandbox's scratch
    "warm-ws",  # the empty workspace a warm snapshot is made in
    "ray-trials",  # a Ray node's trial folders on their way to the driver
    "pool",  # a warm pool's root (sandbox/pool.py: its sandboxes' folders are below it)
    "etc",  # the /etc sandboxes on the host's system see (sandbox/bwrap.py: host_etc)
    "skel",  # the top layer of a sandbox's overlay root (sandbox/bwrap.py: skeleton)
    "dev",  # the device nodes sandboxes bind (sandbox/bwrap.py: device_nodes)
    "regrade",  # a re-grading's own logs (runner/regrade.py: removed when it ends)
    "verify",  # a verify run's trial folders (verify/core.py: their disks are mounted below)
    "spend",  # the USD a --workers job spent, shared by its processes (llm/gateway: SpendTally)
    "scratch",  # this process's tmpfs for its own folders (scratch_dir)
    "bulk",  # what scratch_dir's folders hold that belongs on a disk (bulk_dir: disk images)
)
"""Every ``<kind>`` :func:`owned_tempdir` makes and :func:`sweep_dead` removes."""
_swept: set[Path] = set()
_OWNING = threading.RLock()
"""Held while an owned folder is made (and filled: :func:`filled_tempdir`)."""
_folders_closed = False
"""Set by :func:`release_own_mounts` with ``every_folder``: no folder is made after it."""


def owned_tempdir(kind: str, directory: Path | str | None = None) -> Path:
    """A new folder ``clawrig-<kind>-<pid>-<random>`` under ``directory`` (default: the temp
    folder); the first call per folder sweeps what dead harnesses left there. Raises
    ValueError for a kind not in :data:`KINDS` (the sweep would never find it), OSError
    once the process is exiting (:func:`release_own_mounts` with ``every_folder``)."""
    if kind not in KINDS:
        raise ValueError(f"owned_tempdir: unknown kind {kind!r} (add it to KINDS)")
    base = Path(directory) if directory is not None else Path(tempfile.gettempdir())
    if base not in _swept:
        if not _swept:
            atexit.register(release_own_mounts)
        _swept.add(base)
        sweep_dead(base)
    with _OWNING:
        if _folders_closed:
            raise OSError(errno.ESHUTDOWN, "the harness is exiting", str(base))
        return Path(tempfile.mkdtemp(prefix=f"clawrig-{kind}-{os.getpid()}-", dir=base))


SCRATCH_BYTES = 256 * 1024**2
"""Size cap of :func:`scratch_dir`'s tmpfs: it holds folders, mount points, sockets and small
files only (trial disks are mounted on it, their images are in :func:`bulk_dir`)."""
_scratch: list[Path | None] = []
_bulk: list[Path] = []


def scratch_dir() -> Path | None:
    """This process's scratch: a tmpfs (``nosuid,nodev``, :data:`SCRATCH_BYTES`) mounted at a
    ``clawrig-scratch-<pid>-*`` folder in the temp folder, made on first use, where the
    harness makes its own short-lived folders (trial work folders, the warm pool's entries:
    their mount points, slots and sockets). None (the temp folder is used) when the harness
    cannot make trial disks (not root: :func:`clawrig.sandbox.disk.can_make_disks`), the mount
    fails, or ``CLAWRIG_SCRATCH=0``.

    Why: each trial makes and removes ~30 folders and files of its own on the host (two pool
    entries' and its work folder's, with their sockets), and on an ext4 without a journal
    (this project's CI machines) each new inode costs 0.3-0.4 ms of CPU once many were removed
    lately (the allocator's ``recently_deleted`` check visits every recently freed inode:
    ``fs/ext4/ialloc.c``); on a tmpfs ~10 us. Nothing bulky goes here: a trial disk's image is
    in :func:`bulk_dir`, and a disk that cannot be made is a folder there, bound in its place
    (:class:`clawrig.sandbox.disk.TrialDisk`). The mount is removed with the process's other
    owned folders (:func:`release_own_mounts`) or by the next harness's sweep."""
    with _OWNING:
        if _scratch:
            return _scratch[0]
        folder: Path | None = None
        from clawrig.sandbox.disk import MS_NODEV, MS_NOSUID, can_make_disks, mount

        if os.environ.get("CLAWRIG_SCRATCH", "1") != "0" and can_make_disks():
            folder = owned_tempdir("scratch")
            try:
                mount(
                    "tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, f"size={SCRATCH_BYTES},mode=755"
                )
            except OSError:
                remove_tree(folder)
                folder = None
        _scratch.append(folder)
        return folder


def bulk_dir() -> Path:
    """This process's ``clawrig-bulk-<pid>-*`` folder in the temp folder (on the host's disk),
    made on first use: what the folders in :func:`scratch_dir` would hold that is bulky (trial
    disks' images). Raises OSError."""
    with _OWNING:
        if not _bulk:
            _bulk.append(owned_tempdir("bulk"))
            atexit.register(remove_tree, _bulk[0])
        return _bulk[0]


def in_scratch(path: Path | str) -> bool:
    """True when ``path`` is in this process's :func:`scratch_dir` (made already)."""
    scratch = _scratch[0] if _scratch else None
    return scratch is not None and Path(path).is_relative_to(scratch)


@contextlib.contextmanager
def filled_tempdir(kind: str, directory: Path | str | None = None) -> Iterator[Path]:
    """:func:`owned_tempdir`, held while the body fills it: :func:`release_own_mounts` with
    ``every_folder`` (a second Ctrl-C's exit) waits for the filling to end, then removes the
    whole folder (one it removed while another thread copied into it stayed, in part).
    Raises as :func:`owned_tempdir`."""
    with _OWNING:
        yield owned_tempdir(kind, directory)


SUN_PATH_MAX = 107
"""Bytes a unix socket's path may have on Linux (``sun_path`` holds 108 with the NUL)."""
SHORT_TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
"""Where :func:`socket_tempdir` puts a socket's folder when the temp folder is too deep."""
_RANDOM_CHARS = 8  # tempfile.mkdtemp's random part


def socket_tempdir(kind: str, socket_name: str) -> Path:
    """:func:`owned_tempdir` ``(kind)`` whose ``<folder>/<socket_name>`` fits a unix socket's
    path (:data:`SUN_PATH_MAX` bytes): in the harness's tmpfs (:func:`scratch_dir`) or the
    temp folder when it fits there, else in the first of :data:`SHORT_TEMP_DIRS` where it fits
    and that this process may write in (swept and released like every owned folder). A
    ``TMPDIR`` deeper than ~60 characters made every socket's ``bind`` fail with "AF_UNIX path
    too long". Raises UserError (one line naming ``TMPDIR``) when no folder fits; ValueError
    for a kind not in :data:`KINDS`."""
    tmp = Path(tempfile.gettempdir())
    fixed = len(f"/clawrig-{kind}-{os.getpid()}-") + _RANDOM_CHARS + 1 + len(socket_name)
    scratch = scratch_dir()
    for base in dict.fromkeys([*([scratch] if scratch else []), tmp, *map(Path, SHORT_TEMP_DIRS)]):
        if len(os.fsencode(base)) + fixed > SUN_PATH_MAX:
            continue
        if not (base.is_dir() and os.access(base, os.W_OK | os.X_OK)):
            continue
        folder = owned_tempdir(kind, base)
        if len(os.fsencode(folder / socket_name)) <= SUN_PATH_MAX:
            return folder
        remove_tree(folder)  # mkdtemp's name came out longer than it makes them today
    most = SUN_PATH_MAX - fixed
    raise UserError(
        f"TMPDIR={tmp}: too deep for clawrig's unix sockets ({len(os.fsencode(tmp))} bytes; "
        f"at most {most} fit) and none of {', '.join(SHORT_TEMP_DIRS)} is writable: "
        "set TMPDIR to a shorter folder"
    )


def socket_bases() -> list[Path]:
    """Where :func:`socket_tempdir` may have put this machine's harnesses' socket folders: the
    temp folder, and :data:`SHORT_TEMP_DIRS` too when the temp folder is too deep for some
    (a socket name of up to 30 bytes in a folder of the longest kind's name)."""
    tmp = Path(tempfile.gettempdir())
    longest = max(len(f"/clawrig-{kind}-{10**PID_DIGITS}-") for kind in KINDS)
    if len(os.fsencode(tmp)) + longest + _RANDOM_CHARS + 1 + 30 <= SUN_PATH_MAX:
        return [tmp]
    return list(dict.fromkeys([tmp, *map(Path, SHORT_TEMP_DIRS)]))


def fits_socket(path: Path) -> bool:
    """True when ``path`` is short enough to be a unix socket's path (:data:`SUN_PATH_MAX`)."""
    return len(os.fsencode(path)) <= SUN_PATH_MAX


def pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists (ours or another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


PID_DIGITS = 10
"""Digits a pid in a name has at most (Linux's pid_max is at most 2^22: 7 digits)."""


def pid_in_name(text: str) -> int | None:
    """``text`` as a pid when it is one written in ASCII digits (at most :data:`PID_DIGITS`),
    else None (helper-227: a planted ``clawrig-trial-²-x`` passed ``isdigit`` and crashed
    every harness's sweep, a 20-digit one overflowed ``kill``)."""
    if text.isascii() and text.isdigit() and len(text) <= PID_DIGITS:
        return int(text)
    return None


def owner_pid(name: str) -> int | None:
    """The pid in ``clawrig-<kind>-<pid>-<random>`` for a kind in :data:`KINDS`, else None."""
    for kind in KINDS:
        prefix = f"clawrig-{kind}-"
        if name.startswith(prefix):
            pid, sep, rest = name[len(prefix) :].partition("-")
            if sep and rest and (found := pid_in_name(pid)) is not None:
                return found
    return None


def sweep_dead(base: Path) -> list[Path]:
    """Remove ``clawrig-<kind>-<pid>-*`` folders in ``base`` whose pid no longer runs; return
    them. An overlay still mounted in one (a killed sandbox's writable system) is unmounted
    first, and a folder a sandbox made read-only inside is made writable."""
    removed: list[Path] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        pid = owner_pid(entry.name)
        if pid is None or pid == os.getpid() or pid_alive(pid):
            continue
        if entry.is_symlink() or not entry.is_dir():
            continue
        unmount_below(entry)  # a killed sandbox's writable system, a trial's disk
        if mounts_below(entry):  # still mounted: removing would reach into those file systems
            continue
        remove_tree(entry)
        if not entry.exists():
            removed.append(entry)
    return removed


def sweep_dead_again() -> list[Path]:
    """:func:`sweep_dead` in every folder this process's :func:`owned_tempdir` swept; return
    what it removed. For a harness process that died while this one runs on (a ``--workers``
    worker killed): its sandboxes' mounts and folders would otherwise stay until the next
    harness starts."""
    removed: list[Path] = []
    for base in list(_swept):
        removed += sweep_dead(base)
    return removed


_MOUNTING = threading.Lock()
_mounts_closed = False
RELEASE_WAIT_S = 10.0
"""Seconds :func:`release_own_mounts` waits for a mount being made in another thread."""


@contextlib.contextmanager
def mounting(target: Path | str) -> Iterator[None]:
    """Hold while making a mount in the host's namespace (``with mounting(path): mount ...``):
    :func:`release_own_mounts` waits for the mount to be made, so it finds and releases it, and
    after it ran (the process is ending) none is made any more. Raises OSError (ESHUTDOWN)
    then."""
    with _MOUNTING:
        if _mounts_closed:
            raise OSError(errno.ESHUTDOWN, f"mount on {target}: this process is exiting")
        yield


def release_own_mounts(*, every_folder: bool = False) -> list[Path]:
    """Unmount what is still mounted below this process's own folders (``clawrig-<kind>-<pid>-*``
    in every folder :func:`owned_tempdir` made one in: a warm pool's root with its sandboxes'
    disks and slots, a trial's disk, an overlay) and remove those folders; returns them. Their
    owners unmount them as they end (a pool's close, a trial's close); what an owner never
    released (an exception past its close, a pool never closed, the job's ``os._exit`` on a
    second Ctrl-C) stayed in the host's mount table after the process ended, found only by the
    next harness sweeping that same folder (:func:`sweep_dead`). Runs at interpreter exit
    (``atexit``, registered with the first owned folder) and before the job's ``os._exit``; a
    forked child owns none of its parent's folders (their names hold the parent's pid). One read
    of the mount table, one lazy unmount per outermost mount point. Never raises.

    It runs only as the process ends: it first waits (at most :data:`RELEASE_WAIT_S` seconds)
    for a mount another thread is making (:func:`mounting`: a warm pool filling, a trial
    setting up its disk, when a second Ctrl-C came), and no mount is made after it.

    ``every_folder``: this process's folders without mounts are removed too (before an
    ``os._exit``, which runs none of their owners' ``atexit`` removals: the sandboxes' device
    nodes and /etc, the spend file stayed until a later harness swept the folder); no folder
    is made after it (a thread making one then, the job's /etc copy, would leave it)."""
    global _mounts_closed, _folders_closed
    got = _MOUNTING.acquire(timeout=RELEASE_WAIT_S)
    _mounts_closed = True
    if got:
        _MOUNTING.release()
    if every_folder:
        owning = _OWNING.acquire(timeout=RELEASE_WAIT_S)
        _folders_closed = True
        if owning:
            _OWNING.release()
    me = os.getpid()
    points = mount_points()
    released: list[Path] = []
    for base in list(_swept):
        try:
            entries = [e for e in base.iterdir() if owner_pid(e.name) == me]
        except OSError:
            continue
        for entry in entries:
            prefix = os.path.realpath(entry)
            if not any(p == prefix or p.startswith(prefix + "/") for p in points):
                if every_folder:
                    remove_tree(entry)
                    released.append(entry)
                continue
            if not os.path.lexists(entry):  # below another folder released just before
                continue
            unmount_below(entry)
            if not mounts_below(entry):
                remove_tree(entry)
                released.append(entry)
    return released


_OCTAL = re.compile(rb"\\([0-7]{3})")


def mount_points(table: str = "/proc/self/mountinfo") -> list[str]:
    """Every mount point in ``table`` (a mountinfo file: the process's namespace by default),
    in its order; [] when it cannot be read."""
    try:
        lines = Path(table).read_bytes().split(b"\n")
    except OSError:
        return []
    points = []
    for line in lines:
        fields = line.split(b" ")
        if len(fields) < 5:
            continue
        # the kernel writes space, tab, newline and backslash as octal escapes (\040 ...) and
        # every other byte as it is (a UTF-8 name's bytes too)
        points.append(os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m[1], 8)]), fields[4])))
    return points


def mounts_below(path: Path) -> list[str]:
    """Mount points at or below ``path`` (from /proc/self/mountinfo), deepest first."""
    prefix = os.path.realpath(path)
    found = [p for p in mount_points() if p == prefix or p.startswith(prefix + "/")]
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def outermost(points: list[str]) -> list[str]:
    """The mount points of ``points`` not below another of them (each once)."""
    tops: list[str] = []
    for point in sorted(set(points), key=lambda p: (p.count("/"), p)):
        if not any(point == top or point.startswith(top.rstrip("/") + "/") for top in tops):
            tops.append(point)
    return tops


UNMOUNT_ROUNDS = 8
"""Rounds of :func:`unmount_below` (each detaches the outermost mounts left; a second one is
needed only where mounts were stacked on one point)."""


def unmount_below(path: Path) -> None:
    """Lazily unmount every file system mounted at or below ``path``: one ``umount2(2)`` with
    ``MNT_DETACH`` per outermost mount point, which detaches the mounts below it with it (the
    kernel's ``umount2(2)``); again while some are left (mounts stacked on one point) and it
    still helps. A dead job's warm pool left ~3,200 mounts below its root: one detach of the
    root (a ``umount -l`` process per mount took 52 s)."""
    from clawrig.sandbox.disk import umount_lazy

    before: list[str] | None = None
    for _ in range(UNMOUNT_ROUNDS):
        points = mounts_below(path)
        if not points or points == before:
            return
        before = points
        for point in outermost(points):
            umount_lazy(Path(point))


def remove_tree(path: Path | str) -> None:
    """Remove a folder whatever a sandbox left in it: any depth (``shutil.rmtree`` recurses
    and dies of RecursionError past ~1,000 levels, even with ``ignore_errors``), paths longer
    than PATH_MAX, folders without permissions. Never follows links and never raises; what
    cannot be removed stays. Its first try (``shutil.rmtree``) does not stop at mount points:
    unmount what is below first (:func:`unmount_below`; :func:`sweep_dead` does)."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    if path.is_symlink():  # (the link itself: chmod -R follows one named on its command line)
        with contextlib.suppress(OSError):
            path.unlink()
        return
    try:
        shutil.rmtree(path)
        return
    except (RecursionError, OSError):
        pass
    # GNU chmod and rm walk with fts (file-descriptor relative, no recursion limit)
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], capture_output=True, check=False)
    subprocess.run(
        ["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True, check=False
    )
