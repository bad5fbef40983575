"""BwrapSandbox: one long-lived bubblewrap sandbox per trial, the default backend on Linux.

What is inside (and how each limit is enforced):

- the host's /usr read-only (with /bin, /lib, ... as on the host) and the /etc pieces programs
  need (alternatives, ld.so cache, certificates, timezone, python config), or a root file
  system folder (``SandboxConfig.rootfs``, an environment); a generated /etc/hosts and
  /etc/hostname, and /etc/passwd and /etc/group unless the system is writable. On the host's
  system /etc is one read-only bind of a copy of those pieces and the generated files, made
  once per hostname and process (:func:`host_etc`);
- an environment's root, where the harness may mount (root, no uid drop), is a kernel overlay
  (:mod:`clawrig.sandbox.overlay`) mounted before bwrap starts and bound whole at / (writable
  with ``writable_root``, else read-only): the environment and its warm snapshot ``layers``
  read-only, a small read-only layer of the harness's over them (:func:`skeleton`: the
  generated /etc files and an empty folder or file at every mount point, so bwrap writes
  nothing into the root), and with ``writable_root`` a per-sandbox upper folder on top, so
  pip, npm -g and apt-get work as root inside and every write is dropped at stop (or kept in
  ``upper_dir``). Without the overlay (a harness that may not mount) its top-level folders
  are bound one by one (read-only). Why one bind: bwrap reads the whole mount table
  (``/proc/self/mountinfo``) after every bind it makes, and each bind of an overlay adds a
  long line to it (the layers' paths): 34 binds per start cost ~60% of bwrap's CPU;
- /tmp_workspace: a writable bind of the trial's workspace; /root (HOME): on a writable
  system its own /root (the skeleton adds /root/.openclaw/agents/main/sessions/ and
  /root/skills/), else (and while a warm snapshot is made, and for a given ``home_dir``) a
  private writable folder holding those two, with an environment's own /root entries (e.g.
  /root/miniconda3) bound in; a private /tmp;
- own user, PID, IPC, UTS, cgroup and network namespaces (loopback only, so a service started
  inside is reachable from inside only and nothing outside is reachable); a clean environment
  (only ``SandboxConfig.env`` plus PATH/HOME/LANG); ``--die-with-parent``; ``--new-session``.

Limits. When the harness runs as root it drops the sandbox to a fresh unprivileged host uid
(mapped to root inside by the user namespace), so capabilities inside are namespace-local and
resource limits hold for the "root" inside: hard rlimits cannot be raised from a child user
namespace. Then:
- memory and number of processes: a cgroup per sandbox (v2, or v1 memory+pids controllers)
  when the harness may create one (root); otherwise RLIMIT_AS and RLIMIT_NPROC (the latter
  counts every process of the sandbox's host uid, unique per sandbox when root);
- file size: RLIMIT_FSIZE; core dumps off;
- output size: the supervisor keeps head and tail within ``Limits.output_bytes`` and says so;
- wall time: per command (the supervisor kills the process group, the session, descendants and
  daemonised grandchildren carrying the command's marker) and per trial (a watchdog stops the
  sandbox);
- on stop, bwrap is killed; the PID namespace's init dies with it and the kernel kills every
  process inside: no orphans, also for daemonised grandchildren.

The supervisor: on the host's own system with the harness as root it is forked into the
sandbox by the harness's zygote (:mod:`clawrig.sandbox.zygote`: a fork of a Python that has
loaded it, ~10 ms of CPU less per sandbox than an interpreter's start), bwrap then running a
small init as pid 1 (``--as-pid-1``) that reaps orphans; else bwrap runs it (``python3 -I -S``)
under its own init.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import os
import random
import resource
import select
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from clawrig.errors import SandboxError
from clawrig.leftovers import filled_tempdir, owned_tempdir, pid_in_name, remove_tree, scratch_dir
from clawrig.sandbox.base import SandboxConfig, oom_kill_count
from clawrig.sandbox.client import (
    READY_TIMEOUT_S,
    SUPERVISOR_PATH,
    PidfdProcess,
    SupervisedSandbox,
    pidfds_work,
    posix_spawn_keeps_fds,
    run_to_end,
    supervisor_argv,
    supervisor_pyc,
)
from clawrig.sandbox.launchbin import program_argv, program_fd
from clawrig.sandbox.mountns import joins, launch_argv, nice_argv, template_devices
from clawrig.sandbox.overlay import Overlay, can_mount
from clawrig.sandbox.paths import PATHS
from clawrig.sandbox.userns import (
    SANDBOX_INOTIFY_INSTANCES,
    SANDBOX_INOTIFY_WATCHES,
    cap_sandbox,
    raise_host_limits,
)
from clawrig.sandbox.zygote import PYTHON as ZYGOTE_PYTHON
from clawrig.sandbox.zygote import (
    failed_to_enter,
    fork_supervisor,
    give_up,
    init_argv,
    init_fds,
    init_up,
    zygote_died,
    zygote_usable,
)

SUPERVISOR_SOURCE = f"{PATHS.clawrig}/supervisor.py"
"""The supervisor's path inside a sandbox (its precompiled code beside it, with a ``c``)."""

ETC_PIECES = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "mime.types",
    "python3",
    "python3.11",
    "python3.12",
    "protocols",
    "services",
    "magic",
    "magic.mime",
    "gai.conf",
    "host.conf",
    "networks",
    "inputrc",
    "profile",
    "bash.bashrc",
    "environment",
    "locale.alias",
)
TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_ENV = {
    "PATH": DEFAULT_PATH,
    "HOME": PATHS.home,
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "USER": "root",
    "LOGNAME": "root",
    "SHELL": "/bin/sh",
    "TERM": "dumb",
    "TMPDIR": "/tmp",
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""The environment every sandbox's processes start from (``SandboxConfig.env`` over it)."""
ETC_SKIP = ("ssl/private",)
"""Parts of :data:`ETC_PIECES` left out of a sandbox's /etc (the host's private keys)."""
SANDBOX_NICE = 10
"""How much nicer (lower priority: setpriority(2)) a sandbox's processes run than the harness:
the harness's event loop serves every trial at once, so with hundreds of sandboxes' processes
wanting the CPU it goes first instead of getting one share among them. 500 trials at -p 500
(``benchmarks/throughput.py --model-delay 2``, two interleaved pairs on a machine saturated by
other work): CPU per trial 208 -> 180 and 195 -> 166 ms. Nothing inside can take it back
(raising a priority needs CAP_SYS_NICE in the host's user namespace)."""
CPU_GROUPS = Path("/sys/fs/cgroup/cpu/clawrig")
"""The cgroup v1 cpu hierarchy's folder of clawrig's cpu cgroups (:func:`sandbox_cpu_group`):
every sandbox of every harness on the host is below it, and it weighs a quarter of what one
session does (:data:`SANDBOXES_CPU_SHARES` against a session's autogroup's 1024): when both
want the CPU, the harness's event loop, which serves every trial at once, gets four times the
sandboxes' share together, and they cannot weigh more by starting sessions (an agent's
``setsid``). Each sandbox has its own cgroup below its
harness's (``clawrig-<pid>-sandboxes``), so a trial's busy processes share its cgroup's part,
not the other trials'. Why: with the kernel's autogroups (``/proc/sys/kernel/
sched_autogroup_enabled``, on by default in Debian's and Ubuntu's kernels) the nice value
(:data:`SANDBOX_NICE`) only ranks processes within one session, and each sandbox, each
command in it (the supervisor starts it in a session of its own) was a session with the
harness's whole weight: with 32 trials busy the event loop that serves them all had a
thirty-third of a CPU. cgroup v2 hosts: not done (the sandboxes' cgroups do not enable
``cpu``)."""
SANDBOXES_CPU_SHARES = 256
"""cpu.shares of :data:`CPU_GROUPS` (the kernel's default, and a session's autogroup's weight,
is 1024). CPU shares only divide a busy CPU: a harness with nothing to do leaves the
sandboxes all of it. Why a quarter: at -p 32 the harness's event loop is the job's serial part
(runnable ~80% of the time, ~20% of it waiting for a CPU the sandboxes held). Measured with
``benchmarks/throughput.py`` (200 trials, 3 interleaved reps on 2 CPUs): -p 32 20.35-20.54
trials/s with 1024 vs 21.71-22.28 with 256 (128: 21.68-22.06); -p 1 and -p 8 unchanged within
noise; 500 trials at -p 500 with 2 s per model call 29.2 vs 28.8 s."""
UID_BASE = 200_000
UID_SPAN = 60_000


def etc_files(hostname: str) -> dict[str, str]:
    """The /etc files every sandbox gets generated (name -> text): root and nobody as the only
    users, ``hostname`` on loopback."""
    return {
        "passwd": "root:x:0:0:root:/root:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        "group": "root:x:0:\nnogroup:x:65534:\n",
        "hosts": f"127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost ip6-localhost\n",
        "hostname": hostname + "\n",
    }


_etc_lock = threading.Lock()
_etc: dict[str, Path] = {}


def host_etc(hostname: str) -> Path:
    """A folder to bind read-only as /etc in sandboxes on the host's system: a copy of the
    host's :data:`ETC_PIECES` (a piece that is a link is copied as what it points to, links
    inside a copied folder stay links, as binding them showed them; :data:`ETC_SKIP` left out)
    and :func:`etc_files`. Made once per ``hostname`` and process (``clawrig-etc-<pid>-*`` in
    the temp folder, removed at exit, swept after ``kill -9``). Raises OSError."""
    with _etc_lock:
        if (done := _etc.get(hostname)) is not None and done.is_dir():
            return done
        # in the harness's tmpfs when it has one (scratch_dir: ~1,600 links and 700 files,
        # 0.5 s of CPU on this project's CI disks), and a second Ctrl-C's exit removes it whole
        with filled_tempdir("etc", scratch_dir()) as folder:
            atexit.register(remove_tree, folder)
            os.chmod(folder, 0o755)  # reachable by a sandbox's own host uid
            for piece in ETC_PIECES:
                src = Path("/etc") / piece
                if not src.exists():
                    continue
                if src.is_dir():
                    skip = [Path(s).name for s in ETC_SKIP if s.startswith(piece + "/")]
                    shutil.copytree(
                        src.resolve(),
                        folder / piece,
                        symlinks=True,
                        ignore=shutil.ignore_patterns(*skip),
                    )
                else:
                    shutil.copy2(src.resolve(), folder / piece)
            for name, text in etc_files(hostname).items():
                (folder / name).write_text(text)
        _etc[hostname] = folder
        return folder


DEV_NODES: dict[str, tuple[int, int]] = {
    "null": (1, 3),
    "zero": (1, 5),
    "full": (1, 7),
    "random": (1, 8),
    "urandom": (1, 9),
    "tty": (5, 0),
}
"""The character devices bwrap's ``--dev`` gives a sandbox: name -> (major, minor)
(Documentation/admin-guide/devices.txt)."""
DEV_OWNER = UID_BASE - 1
"""The host uid that owns :func:`device_nodes`: one no sandbox maps."""


@functools.cache
def device_nodes() -> Path | None:
    """A folder holding :data:`DEV_NODES` for sandboxes to bind over bwrap's own, made once
    per process (``clawrig-dev-<pid>-*`` in the first of :func:`device_node_bases` not
    mounted ``nodev``, removed at exit), or None.

    bwrap's ``--dev`` binds the host's own device nodes. When the harness runs as root, a
    sandbox's root is the host's uid 0, which owns them: ``chmod 000 /dev/null`` in a trial
    changed the host's /dev/null, for every later trial and every program on the host (a
    red-team finding; a read-only bind would stop writes to the device too). These nodes
    are the same devices, mode 0666, owned by :data:`DEV_OWNER`: a sandbox reads and writes
    them but cannot change their mode or owner, and they are not the host's. None when not
    root (the sandbox's root is then no host uid 0: bwrap's binds stay) or when no base can
    hold nodes that open (every one ``nodev``, as a tmpfs /tmp and /dev/shm often are, or
    mknod refused)."""
    if os.geteuid() != 0:
        return None
    for base in device_node_bases():
        try:
            base.mkdir(parents=True, exist_ok=True)
            folder = owned_tempdir("dev", base)
        except OSError:
            continue
        atexit.register(remove_tree, folder)
        try:
            if os.statvfs(folder).f_flag & os.ST_NODEV:
                raise OSError("nodev")
            os.chmod(folder, 0o755)
            for name, (major, minor) in DEV_NODES.items():
                node = folder / name
                os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(major, minor))
                os.chmod(node, 0o666)  # past the umask
                os.chown(node, DEV_OWNER, DEV_OWNER)
        except OSError:
            remove_tree(folder)
            continue
        return folder
    return None


def device_node_bases() -> list[Path]:
    """Where :func:`device_nodes` tries to make its folder, in order: the temp folder, then
    clawrig's cache folder (:func:`clawrig.sandbox.pyenv.cache_root`, ``dev/``: usually on
    the root file system, which allows devices, where a tmpfs /tmp is ``nodev``)."""
    import tempfile

    from clawrig.sandbox.pyenv import cache_root

    return [Path(tempfile.gettempdir()), cache_root() / "dev"]


def prefetch_host_etc(hostname: str | None = None) -> threading.Thread:
    """Start making :func:`host_etc` (``hostname``: :class:`SandboxConfig`'s default when
    None) in a daemon thread, beside the rest of a job's start-up: the job's first sandbox
    then finds it made, or waits for it off the event loop (:meth:`BwrapSandbox._launch`).
    An OSError here is dropped: the sandbox's own call raises it again. Returns the
    thread."""
    name = hostname or SandboxConfig.model_fields["hostname"].default

    def make() -> None:
        with contextlib.suppress(OSError):
            host_etc(name)

    thread = threading.Thread(target=make, name="clawrig-host-etc", daemon=True)
    thread.start()
    return thread


_skel_lock = threading.Lock()
_skel: dict[tuple[object, ...], Path] = {}


def skeleton(
    hostname: str, users: bool, points: tuple[tuple[str, bool], ...], below: tuple[Path, ...]
) -> Path:
    """The top read-only layer of a sandbox's overlay root (module docs): the generated /etc
    files (:func:`etc_files`: hosts and hostname, with ``users`` passwd and group too) and an
    empty folder (``True``) or file (``False``) at each mount point of ``points`` (in-sandbox
    paths), so bwrap finds every mount point it needs and writes nothing into the overlay (a
    read-only root has no room for them; a writable one would carry them into a kept upper
    folder, a warm snapshot). A point is left out when a part of its path is a link, or a
    parent is not a folder, in the layers ``below`` (top first, as the overlay stacks them):
    bwrap follows such a link as before instead of the skeleton hiding it. Made once per
    argument set and process (``clawrig-skel-<pid>-*`` in the temp folder, removed at exit,
    swept after ``kill -9``); never changed once made (it is a mounted overlay's layer).
    Raises OSError."""
    key = (hostname, users, points, below)
    with _skel_lock:
        if (done := _skel.get(key)) is not None and done.is_dir():
            return done
        folder = owned_tempdir("skel")
        atexit.register(remove_tree, folder)
        times: list[tuple[Path, Path]] = []
        _like(folder, below, "", times)
        for name, text in etc_files(hostname).items():
            if users or name not in ("passwd", "group"):
                _like(folder, below, "etc", times)
                (folder / "etc" / name).write_text(text)
        for dest, is_dir in points:
            parts = [p for p in dest.split("/") if p]
            if not parts or not _plain_path(below, parts):
                continue
            for i in range(1, len(parts)):
                _like(folder, below, "/".join(parts[:i]), times)
            if is_dir:
                _like(folder, below, "/".join(parts), times)
            elif not (path := folder.joinpath(*parts)).exists():
                path.touch()
        for path, like in reversed(times):  # the deepest first: making a child sets mtime
            st = like.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        _skel[key] = folder
        return folder


def _found(layers: tuple[Path, ...], rel: str) -> Path | None:
    """``rel`` in the topmost of ``layers`` that has it (a link not followed), or None."""
    for layer in layers:
        if os.path.lexists(path := layer / rel):
            return path
    return None


def _plain_path(layers: tuple[Path, ...], parts: list[str]) -> bool:
    """True when no part of the in-sandbox path ``parts`` is a link, and no parent of it is
    other than a folder, in the topmost of ``layers`` that has that part."""
    for i in range(1, len(parts) + 1):
        path = _found(layers, "/".join(parts[:i]))
        if path is not None and (path.is_symlink() or (i < len(parts) and not path.is_dir())):
            return False
    return True


def _like(folder: Path, layers: tuple[Path, ...], rel: str, times: list[tuple[Path, Path]]) -> None:
    """Make folder ``rel`` in ``folder`` (once) with the mode and owner of the folder the
    ``layers`` below show there (an overlay shows a folder's attributes from its topmost layer:
    /root stays 0700), or 0755 when they have none; (it, that folder) joins ``times``, whose
    times the caller copies once everything is made."""
    path = folder / rel if rel else folder
    if rel:
        if path.is_dir():
            return
        path.mkdir()
    below = _found(layers, rel) if rel else layers[0] if layers else None
    if below is None or below.is_symlink() or not below.is_dir():
        os.chmod(path, 0o755)
        return
    st = below.stat()
    os.chown(path, st.st_uid, st.st_gid)
    os.chmod(path, stat.S_IMODE(st.st_mode))
    times.append((path, below))


NO_BWRAP = "bubblewrap (bwrap) is not installed: apt-get install bubblewrap, or use --sandbox local"
"""What a bwrap sandbox says where :func:`bwrap_path` finds none (a job's preflight too)."""


def bwrap_path() -> str | None:
    """Path of the bwrap binary, or None when bubblewrap is not installed (looked up once per
    value of ``PATH``: a search costs ~0.3 ms of CPU, at every sandbox start)."""
    path = os.environ.get("PATH")
    found = _bwrap_found.get(path)
    if found is None:
        found = shutil.which("bwrap", path=path)
        if found is not None:  # not found is not kept: bwrap may be installed meanwhile
            _bwrap_found[path] = found
    return found


_bwrap_found: dict[str | None, str] = {}


def _find_python(root: Path) -> str:
    for cand in ("usr/bin/python3", "usr/local/bin/python3", "bin/python3"):
        if (root / cand).exists():
            return "/" + cand
    raise SandboxError(f"no python3 under {root}: the supervisor needs one inside the sandbox")


def sweep_stale_cgroups() -> int:
    """Remove empty cgroups left by a harness that was killed (``clawrig-<pid>-...`` whose pid
    is gone). Returns how many were removed."""
    removed = 0
    for parent in (
        Path("/sys/fs/cgroup/clawrig"),
        Path("/sys/fs/cgroup/memory/clawrig"),
        Path("/sys/fs/cgroup/pids/clawrig"),
        CPU_GROUPS,
    ):
        try:
            entries = list(parent.iterdir())
        except OSError:
            continue
        for d in entries:
            parts = d.name.split("-")
            pid = pid_in_name(parts[1]) if len(parts) == 3 else None
            if pid is None or not d.is_dir() or d.is_symlink():
                continue
            if Path(f"/proc/{pid}").exists():
                continue
            # its harness is gone: kill what is left in it (a bwrap caught mid-start when its
            # harness was killed waits forever), then remove it (and its sandboxes' cpu
            # cgroups below it)
            _remove_cgroup_tree(d)
            removed += not d.exists()
    return removed


_swept = False
_cpu_groups: dict[int, Path | None] = {}
_cpu_lock = threading.Lock()


def sandbox_cpu_group() -> Path | None:
    """This harness's cpu cgroup folder, the parent of its sandboxes' own
    (``clawrig-<pid>-sandboxes`` in :data:`CPU_GROUPS`, whose weight it sets to
    :data:`SANDBOXES_CPU_SHARES`), made on first use in each process and
    removed at its exit with what is left in it (else by the next harness's
    :func:`sweep_stale_cgroups`); None where it cannot be had (not root, cgroup v2, no cpu
    controller)."""
    pid = os.getpid()
    with _cpu_lock:
        if pid in _cpu_groups:
            return _cpu_groups[pid]
        group: Path | None = CPU_GROUPS / f"clawrig-{pid}-sandboxes"
        assert group is not None
        if os.geteuid() != 0 or Path("/sys/fs/cgroup/cgroup.controllers").exists():
            group = None
        else:
            try:
                group.mkdir(parents=True, exist_ok=True)
                atexit.register(_remove_cgroup_tree, group)  # at exit only this harness's
                # sandboxes are in it (one still starting when the program ended): killed
            except OSError:
                group = None
            else:
                with contextlib.suppress(OSError):  # the weight is a preference, not a limit
                    (CPU_GROUPS / "cpu.shares").write_text(str(SANDBOXES_CPU_SHARES))
        _cpu_groups[pid] = group
        return group


class Cgroup:
    """A per-sandbox cgroup (v2, or v1 memory and pids controllers) when we may create one."""

    def __init__(self, name: str, memory_bytes: int | None, max_pids: int | None):
        global _swept
        if not _swept:
            _swept = True
            sweep_stale_cgroups()
        self.dirs: list[Path] = []
        self.procs_files: list[str] = []
        self.enforces_memory = False
        self.enforces_pids = False
        root = Path("/sys/fs/cgroup")
        try:
            if (root / "cgroup.controllers").exists():
                self._v2(root, name, memory_bytes, max_pids)
            else:
                self._v1(root, name, memory_bytes, max_pids)
        except OSError:
            self.remove()
            self.enforces_memory = self.enforces_pids = False

    def _v2(self, root: Path, name: str, memory_bytes: int | None, max_pids: int | None) -> None:
        parent = root / "clawrig"
        parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").write_text("+memory +pids")
        d = parent / name
        d.mkdir()
        self.dirs.append(d)
        if memory_bytes:
            (d / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (d / "memory.swap.max").write_text("0")
            self.enforces_memory = True
        if max_pids:
            (d / "pids.max").write_text(str(max_pids))
            self.enforces_pids = True
        self.procs_files.append(str(d / "cgroup.procs"))

    def _v1(self, root: Path, name: str, memory_bytes: int | None, max_pids: int | None) -> None:
        if memory_bytes and (root / "memory").is_dir():
            d = root / "memory" / "clawrig" / name
            d.mkdir(parents=True)
            self.dirs.append(d)
            (d / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (d / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            self.procs_files.append(str(d / "cgroup.procs"))
            self.enforces_memory = True
        if max_pids and (root / "pids").is_dir():
            d = root / "pids" / "clawrig" / name
            d.mkdir(parents=True)
            self.dirs.append(d)
            (d / "pids.max").write_text(str(max_pids))
            self.procs_files.append(str(d / "cgroup.procs"))
            self.enforces_pids = True
        if (cpu := sandbox_cpu_group()) is not None:  # its share of the CPU (CPU_GROUPS)
            d = cpu / name
            d.mkdir()
            self.dirs.append(d)
            self.procs_files.append(str(d / "cgroup.procs"))

    def oom_kills(self) -> int | None:
        """Processes the kernel has killed for the cgroup's memory limit so far (``oom_kill``
        of cgroup v2's ``memory.events``, or of v1's ``memory.oom_control``, Linux 4.13+); None
        without a memory cgroup or that count. Source: the kernel's cgroup-v2.rst and
        cgroup-v1/memory.rst."""
        if not self.enforces_memory:
            return None
        return oom_kill_count(
            d / name for d in self.dirs for name in ("memory.events", "memory.oom_control")
        )

    def kill(self) -> int:
        """SIGKILL every process in the cgroup (the sandbox's, every one of them: its launcher
        joined it before it became bwrap); returns how many were signalled. What bwrap's
        ``--die-with-parent`` misses (bwrap killed before its init process asked for it, a race
        under load) dies here, so no sandbox outlives its stop."""
        pids: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in Path(procs).read_text().split())
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def try_remove(self) -> bool:
        """Remove the cgroup if it is empty already (one rmdir each, no wait); True when it is
        gone."""
        left = []
        for d in self.dirs:
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                left.append(d)
        self.dirs = left
        return not left

    def remove(self) -> None:
        """Remove the cgroup, killing what is still in it: a sandbox's processes die just after
        bwrap (its PID namespace is torn down), so a busy cgroup's processes are killed and
        waited for on their pid file descriptors (up to 1 s per try, 50 tries), not polled."""
        for d in self.dirs:
            _remove_cgroup(d)
        self.dirs = []


def _remove_cgroup_tree(d: Path) -> None:
    """:func:`_remove_cgroup` of every cgroup folder below ``d`` (deepest first), then of
    ``d``."""
    with contextlib.suppress(OSError):
        for child in [c for c in d.iterdir() if c.is_dir()]:
            _remove_cgroup_tree(child)
    _remove_cgroup(d)


def _remove_cgroup(d: Path) -> None:
    """Remove the cgroup folder ``d``, killing what is still in it and waiting for it on pid
    file descriptors (up to 1 s per try, 50 tries)."""
    for _ in range(50):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            _kill_and_wait(d / "cgroup.procs", 1.0)


def _kill_and_wait(procs_file: Path, limit_s: float) -> None:
    """SIGKILL every process listed in ``procs_file`` and wait until each has exited (at most
    ``limit_s`` seconds); a 1 ms pause when none is listed (the cgroup is being emptied)."""
    if not pidfds_work():  # a kernel before 5.3: by pid, then look again every 5 ms
        end = time.monotonic() + limit_s
        while True:
            try:
                listed = [int(p) for p in procs_file.read_text().split()]
            except (OSError, ValueError):  # the cgroup is gone
                return
            for each in listed:
                with contextlib.suppress(OSError):
                    os.kill(each, signal.SIGKILL)
            if not listed or time.monotonic() > end:
                return
            time.sleep(0.005)
    fds: list[int] = []
    try:
        with contextlib.suppress(OSError, ValueError):
            for pid in procs_file.read_text().split():
                with contextlib.suppress(OSError):
                    fds.append(os.pidfd_open(int(pid)))
        for fd in fds:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        if not fds:
            time.sleep(0.001)
            return
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        left, end = len(fds), time.monotonic() + limit_s
        while left and (wait_ms := (end - time.monotonic()) * 1000) > 0:
            for fd, _ in poller.poll(wait_ms):
                poller.unregister(fd)
                left -= 1
    finally:
        for fd in fds:
            os.close(fd)


class BwrapSandbox(SupervisedSandbox):
    """A bubblewrap sandbox with the supervisor inside. See the module docstring."""

    backend_name = "bwrap"
    supports_snapshots = True
    """With an environment (``rootfs``) and the harness as root: warm snapshot layers."""

    def __init__(self, config: SandboxConfig):
        super().__init__(config)
        self.base_dir: Path | None = None
        self.host_uid: int | None = None
        self.cgroup: Cgroup | None = None
        self.drop_uid = False
        self.force_uid_drop = False
        """Tests and paranoid users: drop to an unprivileged host uid even with cgroups."""
        self.zygote = False
        """True when the supervisor was forked by the zygote (:mod:`clawrig.sandbox.zygote`)."""
        self._zygote_proc: subprocess.Popen[bytes] | None = None
        self._supervisor_pid: int | None = None
        """The supervisor's host pid, once :meth:`_supervisor_stopped` has looked for it."""
        self.overlay: Overlay | None = None
        self.launch_ns: tuple[Path, Path, Path] | None = None
        """(pool root, entry folder below it, launch point): bwrap starts in a mount namespace
        of its own with the host's system mounts and the entry's, not the pool's others
        (:func:`clawrig.sandbox.mountns.launch_argv`; set by :mod:`clawrig.sandbox.pool`)."""
        self._template_devices = False
        """This start is through the mount template, whose /dev nodes are the harness's
        (:func:`clawrig.sandbox.mountns.template_devices`): no ``--dev-bind`` of them."""

    def _bind(self, source: Path | str, dest: str, read_only: bool) -> list[str]:
        """Bind arguments for a host path (which the sandbox's host uid must be able to reach)."""
        if self.host_uid is not None and not _traversable(Path(source)):
            raise SandboxError(
                f"sandbox uid {self.host_uid} cannot reach {source}: put it under a folder "
                "every user may enter (e.g. /tmp), or give the harness cgroup access"
            )
        return ["--ro-bind" if read_only else "--bind", str(source), dest]

    @property
    def home_dir(self) -> Path:
        assert self.base_dir is not None
        return Path(self.config.home_dir) if self.config.home_dir else self.base_dir / "home"

    async def _start(self, arm: bool) -> None:
        try:
            await super()._start(arm)
        except SandboxError as exc:
            if not self.zygote or self._stop_task is not None:
                raise  # (a start that failed after the greeting was stopped: not again)
            if failed_to_enter(str(exc)):
                pass  # the zygote cannot enter sandboxes: this one starts its supervisor
            elif zygote_died(self._zygote_proc):
                pass  # during this start: again, with a new zygote
            elif not self._stderr_text():  # no greeting, no word: the zygote forked nothing
                give_up(f"the supervisor's zygote forked no supervisor ({exc})")
            else:
                raise  # bwrap's own failure, said on its stderr
            await super()._start(arm)

    def _supervisor_stopped(self) -> bool:
        """True when the sandbox's supervisor (found once, as the process that is pid 2 in the
        sandbox's pid namespace among bwrap's descendants: :func:`_sandbox_pid_2`) is in a
        stopped or traced state (``T``/``t`` in /proc)."""
        if self._proc is None:
            return False
        if self._supervisor_pid is None:
            procs = self.cgroup.procs_files if self.cgroup is not None else []
            self._supervisor_pid = _sandbox_pid_2(self._proc.pid, procs[0] if procs else None)
        if self._supervisor_pid is None:
            return False
        try:
            stat = Path(f"/proc/{self._supervisor_pid}/stat").read_text()
        except OSError:  # gone: the request's reader says so
            return False
        return stat[stat.rindex(")") + 2 :][:1] in ("T", "t")

    def _supervisor_gone(self) -> None:
        """With the zygote's supervisor the sandbox's init outlives it: bwrap is
        killed, and with it every process of the sandbox (the agent's must not run on)."""
        if self.zygote:
            self._kill()

    async def _after_start(self) -> None:
        """The sandbox's own inotify caps (:mod:`clawrig.sandbox.userns`; the zygote's child
        wrote them already for a supervisor it forked)."""
        assert self._proc is not None
        if self.zygote:  # the caps are written; the environment comes now, not by the zygote
            if self.config.env:
                env = self.environment() | {"PWD": PATHS.workspace}  # as bwrap's --chdir sets
                await self._call("adopt", env=env, cwd=PATHS.workspace)
            return
        why = await cap_sandbox(self._proc.pid)
        if why is not None:
            raise SandboxError(f"bwrap sandbox: its inotify caps could not be set: {why}")

    def _prepare_dirs(self) -> None:
        self.base_dir = owned_tempdir("sbx", self.config.scratch_dir)
        os.chmod(self.base_dir, 0o755)
        for sub in ("tmp", "run"):
            (self.base_dir / sub).mkdir()
        home = self.home_dir
        if self._binds_home():
            (home / PATHS.sessions.removeprefix("/root/")).mkdir(parents=True, exist_ok=True)
            (home / "skills").mkdir(parents=True, exist_ok=True)
        if self.config.rootfs and not self._overlay_wanted():  # else in the skeleton layer
            etc = self.base_dir / "etc"
            etc.mkdir()
            for name, text in etc_files(self.config.hostname).items():
                (etc / name).write_text(text)
        ws = Path(self.config.workspace_dir)
        ws.mkdir(parents=True, exist_ok=True)
        if self.drop_uid:
            self.host_uid = UID_BASE + (os.getpid() * 7919 + random.randrange(UID_SPAN)) % UID_SPAN
            owned = [self.base_dir / "tmp", self.base_dir / "run", ws]
            for d in owned + ([home] if home.is_dir() else []):
                _chown_tree(d, self.host_uid)
            os.chmod(self.base_dir / "tmp", 0o1777)

    def _home_seed(self, tree_home: Path, writable: bool) -> list[str]:
        """Bind arguments for the environment's own /root entries (e.g. /root/miniconda3,
        ~/.cache/ms-playwright) inside the private home, as an image's /root would show them;
        an entry the home already has (.openclaw, skills) stays the harness's. Writable (into
        the trial's overlay) when the system is."""
        if not tree_home.is_dir():
            return []
        a: list[str] = []
        for entry in sorted(tree_home.iterdir()):
            dest = f"{PATHS.home}/{entry.name}"
            if os.path.lexists(self.home_dir / entry.name):
                continue
            if entry.is_symlink():
                a += ["--symlink", os.readlink(entry), dest]
            elif entry.is_dir() or entry.is_file():
                a += ["--bind" if writable else "--ro-bind", str(entry), dest]
        return a

    def _argv(self, zygote: bool = False) -> list[str]:
        """bwrap's command line; ``zygote``: for a sandbox whose supervisor the zygote forks
        (:mod:`clawrig.sandbox.zygote`): its init as the command."""
        bwrap = bwrap_path()
        if bwrap is None:
            raise SandboxError(NO_BWRAP)
        assert self.base_dir is not None
        cfg = self.config
        a = [bwrap, "--unshare-user", "--uid", "0", "--gid", "0", "--unshare-pid"]
        a += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", cfg.hostname]
        if not cfg.network:
            a.append("--unshare-net")
        # No capabilities inside: root there could otherwise remount read-only binds (even the
        # host's /usr when the harness is root) writable with `mount -o remount,rw,bind`.
        a += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        root = Path(cfg.rootfs) if cfg.rootfs else Path("/")
        writable = self.overlay is not None and self.overlay.writable
        if self.overlay is not None:
            # the whole root in one bind: its mount points and /etc files are in the overlay's
            # skeleton layer (bwrap reads the mount table once per bind: module docs)
            root = self.overlay.merged
            a += ["--bind" if writable else "--ro-bind", str(root), "/"]
        elif cfg.rootfs:
            for entry in sorted(root.iterdir()):
                if entry.name in ("proc", "dev", "tmp", "root", "sys", "run", "tmp_workspace"):
                    continue
                if entry.is_symlink():
                    a += ["--symlink", os.readlink(entry), "/" + entry.name]
                elif entry.is_dir():
                    a += ["--bind" if writable else "--ro-bind", str(entry), "/" + entry.name]
        else:
            a += ["--ro-bind", "/usr", "/usr"]
            for name in TOP_LEVEL_LINKS:
                p = Path("/") / name
                if p.is_symlink():
                    a += ["--symlink", os.readlink(p), "/" + name]
                elif p.is_dir():
                    a += ["--ro-bind", str(p), "/" + name]
            a += self._bind(host_etc(cfg.hostname), "/etc", True)
        if cfg.rootfs and self.overlay is None:
            etc = self.base_dir / "etc"
            for name in ("passwd", "group", "hosts", "hostname"):
                a += self._bind(etc / name, f"/etc/{name}", True)
        # /proc/sys read-only: root inside is the host's uid 0 when the harness is root, which
        # the kernel lets write any sysctl with no capability (kernel.core_pattern = "|PROG"
        # runs PROG as the host's root); bwrap's own cover skips it there (access(2) calls the
        # /proc/sys folder unwritable to any uid, which bwrap reads as already read-only)
        a += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
        if (devs := device_nodes()) is not None and not self._template_devices:
            # not the host's own nodes (device_nodes); a start through the mount template
            # finds them at /dev already (mountns.template_devices)
            for name in DEV_NODES:
                a += ["--dev-bind", str(devs / name), f"/dev/{name}"]
        # /dev/shm: a tmpfs of bounded size (the /dev tmpfs bwrap makes has none: without a
        # memory cgroup a sandbox could hold gigabytes there), then /dev itself read-only
        a += ["--perms", "1777", "--size", str(cfg.limits.shm_bytes), "--tmpfs", "/dev/shm"]
        a += ["--remount-ro", "/dev"]
        if _supports_disable_userns(bwrap):
            # no nested user namespace: inside one, an unprivileged process could mount a
            # tmpfs of its own, unbounded without a memory cgroup
            a.append("--disable-userns")
        a += self._bind(self.base_dir / "tmp", "/tmp", False)
        a += self._bind(self.base_dir / "run", "/run/clawrig", False)
        a += self._bind(Path(cfg.workspace_dir).resolve(), PATHS.workspace, False)
        if self._binds_home():
            a += self._bind(self.home_dir, PATHS.home, False)
            if cfg.rootfs:
                a += self._home_seed(root / PATHS.home.lstrip("/"), writable)
        source = SUPERVISOR_SOURCE
        a += self._bind(SUPERVISOR_PATH, source, True)
        pyc = supervisor_pyc(source)
        if pyc is not None:
            a += self._bind(pyc, f"{source}c", True)
        for b in cfg.binds:
            a += self._bind(Path(b.source).resolve(), b.dest, b.read_only)
        a.append("--clearenv")
        if zygote:  # the sandbox's init is pid 1 (no environment: the agent may read it), the
            # zygote forks the supervisor in
            a += ["--as-pid-1", "--chdir", PATHS.workspace, *init_argv()]
            return a
        for k, v in self.environment().items():
            a += ["--setenv", k, v]
        a += ["--setenv", "CLAWRIG_LOG_DIR", "/run/clawrig"]
        a += ["--chdir", PATHS.workspace]
        a += supervisor_argv(_find_python(root), source, f"{source}c" if pyc else None)
        return a

    def environment(self) -> dict[str, str]:
        """The environment processes in the sandbox see: the defaults (PATH, HOME, LANG ...)
        with ``SandboxConfig.env`` over them."""
        return DEFAULT_ENV | self.config.env

    async def adopt(self) -> None:
        """A pooled sandbox taken by a trial (:meth:`clawrig.sandbox.pool.PoolEntry.claim`,
        after its workspace and binds are mounted and :attr:`config` is the trial's): the
        supervisor takes the trial's environment and enters the workspace, and the trial time
        limit starts. Raises SandboxDied when the supervisor is gone."""
        await self._call("adopt", env=self.environment(), cwd=PATHS.workspace)
        self._arm()

    async def _launch(self) -> PidfdProcess:
        lim = self.config.limits
        name = f"clawrig-{os.getpid()}-{random.randrange(1 << 32):08x}"
        self.cgroup = Cgroup(name, lim.memory_bytes, lim.max_processes)
        wants = (bool(lim.memory_bytes), bool(lim.max_processes))
        have = (self.cgroup.enforces_memory, self.cgroup.enforces_pids)
        # As root without a cgroup for every limit, drop to an unprivileged uid so rlimits hold.
        self.drop_uid = os.geteuid() == 0 and (
            self.force_uid_drop or any(w and not h for w, h in zip(wants, have, strict=True))
        )
        self._prepare_dirs()
        assert self.base_dir is not None
        try:
            self._mount_overlay()
        except BaseException:
            await run_to_end(self._cleanup())
            raise
        procs_files = list(self.cgroup.procs_files)
        use_as = bool(lim.memory_bytes) and not self.cgroup.enforces_memory
        use_nproc = bool(lim.max_processes) and not self.cgroup.enforces_pids
        uid = self.host_uid
        memory, nproc = lim.memory_bytes or 0, lim.max_processes or 0

        def preexec() -> None:  # runs in the child between fork and exec
            pid = str(os.getpid())
            for f in procs_files:
                with open(f, "w") as fh:
                    fh.write(pid)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + SANDBOX_NICE)
            if lim.max_file_bytes:
                resource.setrlimit(resource.RLIMIT_FSIZE, (lim.max_file_bytes, lim.max_file_bytes))
            if use_as:
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            if use_nproc:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            if uid is not None:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)

        # With nothing to drop or to limit by rlimits but core and file size (the usual case: root
        # with cgroups), a shell puts itself in the cgroups, sets those two and becomes bwrap,
        # so this (large) process is not forked to run ``preexec`` (subprocess can vfork); a
        # pooled start's launcher does the shell's part itself (one process fewer)
        launcher: list[str] = []
        launch_fds: tuple[int, ...] = ()
        if uid is None and not use_as and not use_nproc:
            if self.launch_ns is not None and joins():
                join = (procs_files, lim.max_file_bytes or 0)
                launcher, launch_fds = launch_argv(*self.launch_ns, join=join, nice=SANDBOX_NICE)
            else:
                fsize = max(1, lim.max_file_bytes // 512) if lim.max_file_bytes else 0  # blocks
                launcher = ["/bin/sh", "-c", _LAUNCHER, "sh", str(fsize), str(len(procs_files))]
                launcher += procs_files
                if self.launch_ns is not None:
                    prefix, launch_fds = launch_argv(*self.launch_ns, nice=SANDBOX_NICE)
                    launcher += prefix
                else:
                    launcher += nice_argv(SANDBOX_NICE)
        if self.overlay is None and not self.config.rootfs and not _etc.get(self.config.hostname):
            # the copy of the host's /etc the sandbox binds (_argv): made once per process
            # (~735 files: seconds under load), so made in a thread, not on the event loop
            # that serves every other trial meanwhile (once made: no thread hand-off)
            try:
                await asyncio.to_thread(host_etc, self.config.hostname)
            except BaseException:
                await run_to_end(self._cleanup())
                raise
        # Arguments go through a pipe (--args FD), so the sandbox's init process shows
        # "bwrap --args 3" in /proc and no host path leaks into the sandbox.
        self.zygote = bool(launcher) and self._zygote_wanted()
        self._template_devices = (
            bool(launcher) and self.launch_ns is not None and template_devices()
        )
        try:
            argv = self._argv(self.zygote)
            cmd_at = argv.index("--chdir") + 2
            payload = b"".join(x.encode() + b"\0" for x in argv[1:cmd_at])
            if len(payload) >= 65536:
                raise SandboxError("bwrap argument list too long")
            rfd, wfd = os.pipe()
            os.write(wfd, payload)  # < 64 KiB: a pipe's buffer holds it
            os.close(wfd)
        except BaseException:
            await run_to_end(self._cleanup())
            raise
        # The protocol's pipes are extra descriptors, not bwrap's stdio: bwrap's init process
        # (pid 1 inside, dumpable) keeps its stdio and closes the rest, so the agent could
        # open /proc/1/fd/1 and write into the harness's answers (a line of gigabytes, forged
        # answers) or read its requests from /proc/1/fd/0. The supervisor moves them to 0/1.
        try:
            req_r, ans_w, err_w = await self._open_pipes()
        except BaseException:
            os.close(rfd)
            raise
        # clawrig's launcher (its C program) needs no working folder and no fork of this
        # process: posix_spawn (client.spawn_launcher: no listing of this process's thousands
        # of descriptors in the child)
        program = program_fd() if launcher and posix_spawn_keeps_fds() else None
        direct = program is not None and launcher[:2] == program_argv("launch", program)
        if self.zygote:
            return await self._launch_for_zygote(
                [*launcher, argv[0], "--args", str(rfd), *argv[cmd_at:]],
                (rfd, *launch_fds, *init_fds()),
                (req_r, ans_w, err_w),
                procs_files,
                direct,
            )
        return await self._spawn(
            [*launcher, argv[0], "--args", str(rfd), *argv[cmd_at:]]
            + ["--proto-fds", f"{req_r},{ans_w}"],
            (rfd, req_r, ans_w, err_w),
            direct=direct,
            pass_fds=(rfd, req_r, ans_w, *launch_fds),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err_w,
            preexec_fn=None if launcher else preexec,
            env={"PATH": DEFAULT_PATH},
            cwd="/",
            # not in the harness's process group: a terminal's Ctrl-C (which signals that whole
            # group) reaches the harness only, which stops its sandboxes itself. Else bwrap died
            # of it too, and one starting then left its init process (--die-with-parent not set
            # yet) holding the sandbox's pipes: the job waited out its grace time, no summary
            # (tests/sandbox/test_stop.py)
            start_new_session=True,
        )

    def _zygote_wanted(self) -> bool:
        """True when this sandbox's supervisor can be forked by the zygote
        (:mod:`clawrig.sandbox.zygote`): the host's own system (no environment's root), its
        python3 the zygote's."""
        if self.overlay is not None or self.config.rootfs:
            return False
        try:
            return zygote_usable(_find_python(Path("/")))
        except SandboxError:
            return False

    async def _launch_for_zygote(
        self,
        argv: list[str],
        pass_fds: tuple[int, ...],
        ends: tuple[int, int, int],
        procs_files: list[str],
        direct: bool = False,
    ) -> PidfdProcess:
        """Start bwrap with the zygote's init (``argv``, given ``pass_fds``: its arguments'
        pipe, the launcher's), wait until the init says it is up on bwrap's stdout, and ask
        the zygote for the supervisor with ``ends`` (the supervisor's requests' read end,
        answers' and stderr's write ends: closed here; when bwrap fails first, the start then
        reads its reason). On failure (the zygote cannot be reached: SandboxError; a cancel)
        bwrap is killed and :meth:`_cleanup` has run."""
        try:
            ready_r, ready_w = os.pipe()
        except BaseException:
            for fd in (*ends, pass_fds[0]):
                os.close(fd)
            raise
        try:
            proc = await self._spawn(
                argv,
                (pass_fds[0], ready_w),
                direct=direct,
                pass_fds=pass_fds,
                stdin=subprocess.DEVNULL,
                stdout=ready_w,
                stderr=ends[2],
                env={"PATH": DEFAULT_PATH},
                cwd="/",
                start_new_session=True,  # as _launch's (a terminal's Ctrl-C)
            )
        except BaseException:
            for fd in (ready_r, *ends):
                os.close(fd)
            raise
        source = SUPERVISOR_SOURCE
        try:
            if await init_up(ready_r, READY_TIMEOUT_S):
                raise_host_limits()
                bwrap_fd = os.pidfd_open(proc.pid)  # our child, unreaped: this very bwrap
                try:
                    self._zygote_proc = await fork_supervisor(
                        ZYGOTE_PYTHON,
                        SUPERVISOR_PATH,
                        supervisor_pyc(source),
                        self._zygote_request(proc.pid, procs_files, source),
                        (*ends, bwrap_fd),
                    )
                finally:
                    os.close(bwrap_fd)
        except BaseException:
            self._proc = proc
            await self._abort_start()
            raise
        finally:
            for fd in ends:
                os.close(fd)
        return proc

    def _zygote_request(self, outer: int, procs_files: list[str], source: str) -> dict[str, Any]:
        """What the zygote needs to fork this sandbox's supervisor into it (the fields of
        :mod:`clawrig.sandbox.zygote_program`): bwrap's host pid ``outer``, the cgroups, the
        limits bwrap's launcher sets, the default environment and the working folder, the
        inotify caps, the supervisor's path inside (``source``)."""
        return {
            "outer": outer,
            "procs": procs_files,
            "fsize": self.config.limits.max_file_bytes or 0,
            "nice": SANDBOX_NICE,
            "cwd": PATHS.workspace,
            # the defaults only: a trial's own variables (a lease's key) never pass through
            # the zygote, whose memory every later supervisor inherits (_after_start sends them)
            "env": DEFAULT_ENV | {"CLAWRIG_LOG_DIR": "/run/clawrig", "PWD": PATHS.workspace},
            "caps": {
                "max_inotify_instances": SANDBOX_INOTIFY_INSTANCES,
                "max_inotify_watches": SANDBOX_INOTIFY_WATCHES,
            },
            "source": source,
        }

    def _overlay_wanted(self) -> bool:
        """True when the root is an overlay: a root file system with a writable system or
        snapshot layers (required), or read-only where this process may mount one."""
        cfg = self.config
        if not cfg.rootfs:
            return False
        return bool(cfg.writable_root or cfg.layers) or (can_mount() and not self.drop_uid)

    def _binds_home(self) -> bool:
        """True when /root is a private folder of the harness's (:attr:`home_dir`), not the
        writable system's own /root (which has the home's folders in its skeleton layer). A
        kept upper folder (a warm snapshot being made) keeps the private home: what a warmup
        leaves in /root (caches) is not frozen."""
        cfg = self.config
        writable = cfg.writable_root and self._overlay_wanted()
        return cfg.home_dir is not None or cfg.upper_dir is not None or not writable

    def _mount_points(self) -> tuple[tuple[str, bool], ...]:
        """The in-sandbox paths bwrap mounts on within the root (folder: True), for
        :func:`skeleton`: /tmp, /proc, /dev, /root (or the home's folders), /run/clawrig, the
        workspace, the supervisor's files, the config's binds."""
        cfg = self.config
        points = [("/tmp", True), ("/proc", True), ("/dev", True), ("/run/clawrig", True)]
        points += [(PATHS.workspace, True), (PATHS.home, True)]
        if not self._binds_home():
            points += [(PATHS.sessions, True), (PATHS.skills, True)]
        source = SUPERVISOR_SOURCE
        points += [(source, False), (f"{source}c", False)]
        points += [(b.dest, Path(b.source).resolve().is_dir()) for b in cfg.binds]
        return tuple(points)

    def _mount_overlay(self) -> None:
        """Mount the overlay root file system when the config asks for one or may have one
        (see the module docstring): :func:`skeleton` over the layers over the root file
        system, under a writable upper folder for a writable system. Raises SandboxError when
        one is required and cannot be had."""
        cfg = self.config
        if not self._overlay_wanted():
            return
        if not can_mount() or self.drop_uid:
            raise SandboxError(
                "a writable system or warm snapshot needs the harness to run as root with "
                "cgroups (it mounts an overlay for each sandbox)"
            )
        assert self.base_dir is not None and cfg.rootfs is not None
        below = tuple(Path(p) for p in cfg.layers) + (Path(cfg.rootfs),)
        try:
            # a writable system keeps its own users (package scripts add some with adduser)
            top = skeleton(cfg.hostname, not cfg.writable_root, self._mount_points(), below)
        except OSError as exc:
            raise SandboxError(f"cannot make the sandbox's mount points: {exc}") from None
        upper = Path(cfg.upper_dir) if cfg.upper_dir else None
        # the harness's pid in the path: leftover checks tell their mounts from other runs'
        base = self.base_dir / f"ovl-{os.getpid()}"
        self.overlay = Overlay(base, [top, *below], upper, writable=cfg.writable_root)
        self.overlay.mount()

    def _kill(self) -> None:
        """bwrap, then every process of the sandbox's cgroup (:meth:`Cgroup.kill`)."""
        super()._kill()
        if self.cgroup is not None:
            self.cgroup.kill()

    async def _cleanup(self) -> None:
        if self.cgroup is not None:
            # empty by now as a rule (the supervisor's pipes closed: its PID namespace is gone):
            # a few rmdir calls here, a worker thread only to wait for stragglers
            if not self.cgroup.try_remove():
                await asyncio.to_thread(self.cgroup.remove)
            self.cgroup = None
        if self.overlay is not None:
            await asyncio.to_thread(self.overlay.unmount)
            self.overlay = None
        if self.base_dir is not None:
            base = self.base_dir
            self.base_dir = None
            if self.config.scratch_dir is None:  # else its owner removes it (a trial's disk)
                await asyncio.to_thread(remove_tree, base)

    def oom_kills(self) -> int | None:
        """Processes killed for the sandbox's memory limit so far (see the base class)."""
        return self.cgroup.oom_kills() if self.cgroup is not None else None

    @property
    def limits_enforced(self) -> dict[str, str]:
        """How each limit is enforced for this sandbox (see the base class)."""
        lim = self.config.limits
        cg = self.cgroup
        return {
            "memory": "cgroup"
            if cg and cg.enforces_memory
            else ("RLIMIT_AS" if lim.memory_bytes else "none"),
            "processes": "cgroup"
            if cg and cg.enforces_pids
            else ("RLIMIT_NPROC" if lim.max_processes else "none"),
            "file_size": "RLIMIT_FSIZE" if lim.max_file_bytes else "none",
            "shm": f"tmpfs of {lim.shm_bytes} bytes",
            "uid": f"host uid {self.host_uid} mapped to root" if self.host_uid else "caller's uid",
        }


_LAUNCHER = (
    'fsize=$1; n=$2; shift 2; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 126; shift; '
    'n=$((n - 1)); done; ulimit -c 0 || exit 126; if [ "$fsize" != 0 ]; then '
    'ulimit -f "$fsize" || exit 126; fi; exec "$@"'
)
"""``sh -c _LAUNCHER sh FSIZE_BLOCKS N PROCS_FILE... BWRAP ARGS...``: join the N cgroups, no
core dumps, RLIMIT_FSIZE (512-byte blocks, 0: none), then exec bwrap (what ``preexec`` does
when no uid drop and no RLIMIT_AS / RLIMIT_NPROC are needed)."""


@functools.cache
def _supports_disable_userns(bwrap: str) -> bool:
    """True when this bwrap has ``--disable-userns`` (bubblewrap 0.8.0 and later)."""
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
        version = tuple(int(x) for x in out.stdout.split()[-1].split(".")[:2])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return False
    return version >= (0, 8)


def _traversable(path: Path) -> bool:
    """True when every parent folder of ``path`` may be entered by any user (o+x)."""
    for parent in path.resolve().parents:
        if not os.stat(parent).st_mode & 0o001:
            return False
    return True


def _chown_tree(path: Path, uid: int) -> None:
    os.chown(path, uid, uid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def _sandbox_pid_2(root: int, procs_file: str | None, depth: int = 4) -> int | None:
    """The host pid of the process that is pid 2 in its pid namespace (a sandbox's
    supervisor: bwrap's init is pid 1, the supervisor the first process after it): among the
    pids of the sandbox's cgroup (``procs_file``, its ``cgroup.procs``: a supervisor forked by
    the zygote is no descendant of bwrap), else among the descendants of ``root`` (bwrap's
    host pid) down to ``depth`` levels, from /proc's ``children``; by /proc's ``NSpid``
    (Linux 4.1+). None when none is found."""
    if procs_file is not None:
        try:
            candidates = [int(p) for p in Path(procs_file).read_text().split()]
        except OSError:
            candidates = []
        return next((pid for pid in candidates if _is_pid_2(pid)), None)
    level = [root]
    for _ in range(depth):
        below: list[int] = []
        for pid in level:
            try:
                below += [
                    int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                ]
            except OSError:
                continue
        if found := next((pid for pid in below if _is_pid_2(pid)), None):
            return found
        level = below
    return None


def _is_pid_2(pid: int) -> bool:
    """True when host pid ``pid`` is pid 2 of a pid namespace below the host's (``NSpid``)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            ids = line.split()[1:]
            return len(ids) > 1 and ids[-1] == "2"
    return False
