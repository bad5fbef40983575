"""Where a pooled sandbox's bwrap starts: a mount namespace of its own made from a small saved
one (the **template**), so bwrap never copies nor reads the host's mount table with every live
sandbox's mounts in it.

Why: every pooled sandbox adds a few mounts to the harness's table (its disk, its slots, the
trial's binds: :mod:`clawrig.sandbox.pool`), other jobs on the host add theirs, and bwrap reads
the whole table of the namespace it starts in for each of its ~20 binds; a plain ``unshare -m``
copies the whole table too. With 500 trials alive that was ~25 ms of CPU per trial
(``benchmarks/throughput.py --model-delay 2 --parallel 500``).

The template (:func:`template`): made once per harness process, in a thread of its own that
leaves the process's namespace (``unshare(CLONE_NEWNS)``, which gives the thread its own
``fs_struct``), makes every mount private and detaches every clawrig-owned mount (a
``clawrig-<kind>-<pid>-*`` folder on its path: this job's and other jobs' pools, trial disks,
overlays; :func:`clawrig.leftovers.owner_pid`) and the host's mounts no sandbox sees (/sys
and what is below it, the folders mounted below /dev: :func:`unseen`). The harness holds it by
a file descriptor of ``/proc/thread-self/ns/mnt``, so it dies with the harness and nothing of
it is left on the host. Mounts made on the host after it are not in it (they are not needed: a
pooled sandbox sees its entry's folder, below, and the host's system folders).

A start (:func:`launch_argv`): clawrig's sandbox program (``sandbox_launch.c``,
:mod:`clawrig.sandbox.launchbin`; where it cannot be had, perl, Debian's perl-base, runs
:data:`_LAUNCH_PERL`) clones the
entry's folder with every mount below it (``open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)``, in the
harness's namespace: its disk, its shared slots, an overlay root), enters the template
(``setns``), makes a copy of it (``unshare(CLONE_NEWNS)``: ~20 mounts), attaches the clone at
the entry's path (``move_mount``), makes it a slave of the host's mounts (what the harness
mounts on the slots at a claim still reaches the sandbox, nothing mounted there reaches the
host), lowers its priority (``setpriority``: :data:`clawrig.sandbox.bwrap.SANDBOX_NICE`) and
execs bwrap. Its cost does not grow with the mounts on the host. Sources: the
kernel's ``Documentation/filesystems/sharedsubtree.rst``, open_tree(2), move_mount(2),
setns(2), unshare(2) (Linux 5.2+).

Where that cannot run (neither that program nor perl, an older kernel, a machine whose system
call numbers are not in :data:`_SYSCALLS`), :data:`_ISOLATE` does the older isolation with
util-linux's programs: a copy of the host's whole table whose pool mounts are then detached.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from clawrig.leftovers import UNMOUNT_ROUNDS, mount_points, outermost, owner_pid, scratch_dir
from clawrig.sandbox.disk import MS_BIND, MS_PRIVATE, MS_REC, libc, mount, umount_lazy
from clawrig.sandbox.launchbin import program_argv, program_fd

CLONE_NEWNS = 0x20000
AT_FDCWD = -100
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_SYSCALLS = {
    "x86_64": {
        "setns": 308,
        "unshare": 272,
        "mount": 165,
        "open_tree": 428,
        "move_mount": 429,
        "prlimit64": 302,
    },
    "aarch64": {
        "setns": 268,
        "unshare": 97,
        "mount": 40,
        "open_tree": 428,
        "move_mount": 429,
        "prlimit64": 261,
    },
}
"""System call numbers per machine (Linux's ``unistd`` tables) for :data:`_LAUNCH_PERL`."""
_LAUNCH_PERL = (
    "my ($t, $e) = splice(@ARGV, 0, 2); my $z = ''; "
    # OPEN_TREE_CLONE | AT_RECURSIVE | OPEN_TREE_CLOEXEC
    "my $f = syscall(OPEN_TREE, -100, $e, 0x88001); "
    '$f >= 0 or die "clawrig launch: clone $e: $!\\n"; '
    'open(my $h, "<&=", $t) or die "clawrig launch: template $t: $!\\n"; '
    'syscall(SETNS, fileno($h), 0x20000) == 0 or die "clawrig launch: enter the template: $!\\n"; '
    "close($h); "
    'syscall(UNSHARE, 0x20000) == 0 or die "clawrig launch: unshare: $!\\n"; '
    # MOVE_MOUNT_F_EMPTY_PATH; then MS_REC | MS_SLAVE
    'syscall(MOVE_MOUNT, $f, $z, -100, $e, 4) == 0 or die "clawrig launch: attach $e: $!\\n"; '
    'syscall(MOUNT, 0, $e, 0, 0x84000, 0) == 0 or die "clawrig launch: slave $e: $!\\n"; '
    "setpriority(0, 0, getpriority(0, 0) + NICE); "
    'exec { $ARGV[0] } @ARGV or die "clawrig launch: exec $ARGV[0]: $!\\n"'
)
"""What perl runs after :data:`_JOIN_PERL` (module docs); the system call names are replaced
by this machine's numbers (:func:`_perl_argv`)."""
_JOIN_PERL = (
    "my $n = shift @ARGV; "
    "for my $p (splice(@ARGV, 0, $n)) { "
    'open(my $c, ">", $p) or die "clawrig launch: join $p: $!\\n"; '
    'print $c "$$"; close($c) or die "clawrig launch: join $p: $!\\n"; } '
    "my $fs = shift @ARGV; "
    # RLIMIT_CORE (4) 0, RLIMIT_FSIZE (1) $fs bytes unless 0: soft and hard
    'my ($no, $lim) = (pack("QQ", 0, 0), pack("QQ", $fs, $fs)); '
    'syscall(PRLIMIT64, 0, 4, $no, 0) == 0 or die "clawrig launch: core: $!\\n"; '
    "$fs == 0 or syscall(PRLIMIT64, 0, 1, $lim, 0) == 0 "
    'or die "clawrig launch: file size: $!\\n"; '
)
"""``perl -e _JOIN_PERL_LAUNCH_PERL N PROCS_FILE... FSIZE TEMPLATE_FD ENTRY BWRAP ARGS...``
(:func:`launch_argv` without clawrig's sandbox program): first what the sandbox's launcher
shell does (the bwrap backend's ``_LAUNCHER``): join the N cgroups, no core dumps,
RLIMIT_FSIZE of FSIZE bytes (0: none); then :data:`_LAUNCH_PERL`. One process fewer per pooled
start (~1.4 ms of CPU)."""
_ISOLATE = (
    'mount -n --rbind "$2" "$3" && umount -n -l "$1" && mount -n --move "$3" "$2" && shift 3 '
    '&& exec "$@"'
)
"""``unshare -m --propagation slave sh -c _ISOLATE sh ROOT ENTRY POINT BWRAP ARGS...``: the
fallback (module docs): in a copy of the host's namespace whose mounts are slaves of the host's,
the entry's mounts are bound aside at POINT, the whole pool ROOT (every other sandbox's disk
and slots) is detached, and the entry's mounts are moved back to where they were."""

_lock = threading.Lock()
_template: list[int | None] = []
_template_devices: list[bool] = []


def _make_template(scratch: Path | None = None) -> int:
    """The template namespace (module docs) as a file descriptor; ``scratch``: the harness's
    own tmpfs (:func:`clawrig.leftovers.scratch_dir`), kept. Runs in a thread of its own.
    Raises OSError."""
    if libc().unshare(CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    mount(None, Path("/"), flags=MS_REC | MS_PRIVATE)
    table = "/proc/thread-self/mountinfo"  # /proc/self is the process's (its first thread's)
    # the mounts the pool's folders are on stay: the harness's own tmpfs (its pool entries
    # are folders on it) or the temp folder's, and those above them (a TMPDIR below /dev/shm:
    # every start failed, "attach ...: No such file or directory"); what is mounted below them
    # goes like every other clawrig mount
    keep = os.path.realpath(scratch if scratch is not None else tempfile.gettempdir())
    for _ in range(UNMOUNT_ROUNDS):  # again for mounts that were stacked on one point
        points = mount_points(table)
        ours = [
            p
            for p in points
            if p != keep
            and not keep.startswith(p.rstrip("/") + "/")
            and (any(owner_pid(c) for c in p.split("/")) or unseen(p))
        ]
        if not ours or not sum(umount_lazy(Path(p)) for p in outermost(ours)):
            break  # (what is below a detached point goes with it)
    _template_devices.append(_bind_devices())
    return os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)


def _bind_devices() -> bool:
    """In the template (its thread): the harness's own device nodes
    (:func:`clawrig.sandbox.bwrap.device_nodes`) bound over /dev's, so the nodes bwrap's
    ``--dev`` binds into a sandbox are those already and it binds none over them: 6 binds, 6
    remounts and 6 reads of the whole mount table fewer per start (a sixth of bwrap's
    binds). True when every node is bound (else none is)."""
    from clawrig.sandbox.bwrap import DEV_NODES, device_nodes

    folder = device_nodes()
    if folder is None:
        return False
    done: list[Path] = []
    try:
        for name in DEV_NODES:
            target = Path("/dev") / name
            mount(str(folder / name), target, flags=MS_BIND)
            done.append(target)
    except OSError:
        for target in reversed(done):
            umount_lazy(target)
        return False
    return True


def template_devices() -> bool:
    """True when a start through the template (:func:`launch_argv`) finds the harness's own
    device nodes at /dev (:func:`_bind_devices`): bwrap's ``--dev`` binds them."""
    return template() is not None and bool(_template_devices) and _template_devices[0]


def unseen(point: str) -> bool:
    """True for a host mount point the template leaves out although no clawrig folder holds
    it: /sys and every mount below it, the folders mounted below /dev (pts, shm, mqueue,
    hugepages), not a device node mounted on its own. No sandbox sees them and bwrap formats
    and parses the whole mount table for each of its ~20 binds (``/proc/self/mountinfo``: 23
    mounts in this machine's template, 15 of them /sys, its cgroup hierarchies, and /dev/pts
    and /dev/shm twice). A sandbox has no /sys; bwrap makes its own /dev (a tmpfs with the
    host's device nodes bound from /dev itself, a devpts of its own, the harness's /dev/shm
    tmpfs), so /dev and a device node mounted on its own (a rootless container's /dev/null)
    stay; pooled sandboxes bind nothing else below them (their binds are their entry's slots).
    /proc's own submounts stay (a container runtime's masks over /proc entries). The launcher
    joins the cgroups before it enters the template."""
    if point == "/sys" or point.startswith("/sys/"):
        return True
    if not point.startswith("/dev/"):
        return False
    try:
        return stat.S_ISDIR(os.lstat(point).st_mode)
    except OSError:
        return False


def _opens_trees(numbers: dict[str, int]) -> bool:
    """True when this kernel has open_tree(2) (Linux 5.2+)."""
    fd = libc().syscall(numbers["open_tree"], AT_FDCWD, b"/", OPEN_TREE_CLOEXEC)
    if fd < 0:
        return ctypes.get_errno() != errno.ENOSYS
    os.close(fd)
    return True


def template() -> int | None:
    """This process's template namespace (a file descriptor, module docs), made on first use;
    None where it cannot be had (not root, no launcher, an older kernel, an unknown machine):
    :func:`launch_argv` then isolates the old way."""
    with _lock:
        if _template:
            return _template[0]
        fd: int | None = None
        numbers = _SYSCALLS.get(os.uname().machine)
        launcher = program_fd() is not None or shutil.which("perl")
        if os.geteuid() == 0 and numbers and launcher and _opens_trees(numbers):
            made: list[int] = []
            scratch = scratch_dir()  # mounted before the template copies the mount table

            def run() -> None:
                try:
                    made.append(_make_template(scratch))
                except OSError:
                    pass

            thread = threading.Thread(target=run, name="clawrig-mount-template")
            thread.start()
            thread.join()
            fd = made[0] if made else None
        _template.append(fd)
        return fd


@functools.cache
def _perl_argv(nice: int = 0) -> list[str]:
    numbers = _SYSCALLS[os.uname().machine]
    code = _JOIN_PERL + _LAUNCH_PERL
    for name in ("PRLIMIT64", "OPEN_TREE", "MOVE_MOUNT", "SETNS", "UNSHARE", "MOUNT"):
        code = code.replace(name, str(numbers[name.lower()]))
    code = code.replace("NICE", str(nice))
    perl = shutil.which("perl")
    assert perl is not None
    return [perl, "-e", code]


def joins() -> bool:
    """True when :func:`launch_argv` can take ``join`` (the template's launcher starts
    bwrap)."""
    return template() is not None


def can_isolate() -> bool:
    """True when pooled starts can leave the host's mounts behind: the template
    (:func:`template`), or util-linux's unshare, mount and umount."""
    return template() is not None or all(
        shutil.which(name) for name in ("unshare", "mount", "umount")
    )


def nice_argv(nice: int) -> list[str]:
    """The program (with its leading arguments) that runs its arguments ``nice`` steps nicer
    (coreutils' nice); [] for 0 or where there is none."""
    return ["nice", "-n", str(nice)] if nice and shutil.which("nice") else []


def launch_argv(
    root: Path,
    entry: Path,
    point: Path,
    join: tuple[list[str], int] | None = None,
    *,
    nice: int = 0,
) -> tuple[list[str], tuple[int, ...]]:
    """The program (with its leading arguments) that starts a pooled sandbox's bwrap (its
    arguments after it) in a mount namespace with the host's own mounts and the entry's, not
    the other sandboxes' (module docs), ``nice`` steps nicer than the caller, and the file
    descriptors it must be given. ``root``: the pool's root (its mounts are all below it),
    ``entry``: the entry's folder below it, ``point``: a folder the fallback binds the entry
    at meanwhile. ``join``: (cgroup.procs files, file size limit in bytes or 0), done first
    by the template's launcher (clawrig's sandbox program, :mod:`clawrig.sandbox.launchbin`,
    else :data:`_JOIN_PERL`), which also turns core dumps off; check :func:`joins` before
    asking, the fallback does not."""
    fd = template()
    if fd is not None:
        cgroups, fsize = join if join is not None else ([], 0)
        head = [str(len(cgroups)), *cgroups, str(fsize)]
        program = program_fd()
        if program is not None:
            argv = [*program_argv("launch", program), *head, str(nice), str(fd), str(entry)]
            return argv, (fd, program)
        return [*_perl_argv(nice), *head, str(fd), str(entry)], (fd,)
    argv = ["unshare", "-m", "--propagation", "slave", "/bin/sh", "-c", _ISOLATE, "sh"]
    return [*argv, str(root), str(entry), str(point), *nice_argv(nice)], ()
