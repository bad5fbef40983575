"""A job's warm pool: bwrap sandboxes started ahead, each on a trial disk made ahead, so a trial's
sandbox (the agent's, then the clean room for grading) is ready in milliseconds instead of a
cold start (mkfs + mount + cgroup + bwrap + the supervisor's interpreter).

What makes a sandbox reusable for a trial it was not started for is that nothing of the trial
is decided at its start: the pooled sandbox binds empty **slots** (host folders or files under
its entry folder) where the trial's workspace and binds go, with its supervisor up and no
environment but the defaults. When a trial takes it (:meth:`PoolEntry.claim`):

1. each of the trial's binds (and its workspace) is bind-mounted on the host onto its slot: a
   bind in a private staging folder, remounted read-only (with ``nosuid,nodev``) when the bind
   is, then moved onto the slot. The slots' folder is a shared mount and the sandbox's binds of
   the slots are its slaves, so the move shows inside the sandbox at once, read-only as made
   (mount propagation, see the kernel's ``sharedsubtree.txt``); the sandbox has no
   capabilities and the mounts come from a more privileged namespace (locked), so nothing
   inside can unmount them to see the slot below;
2. the supervisor is told the trial's environment and enters the now-mounted workspace
   (``adopt``: commands never saw the pooled defaults);
3. the sandbox's trial time limit starts.

Everything that decides what a sandbox is at its start is the pool's **key**
(:func:`pool_key`): backend, root file system and warm snapshot layers, writable system,
network, hostname, the limits bwrap and the cgroup enforce (memory, processes, file size,
/dev/shm, disk and whether it is memory: the clean room's), and the binds' destinations, modes
and kinds. A sandbox is taken by exactly one trial and never returned: after the trial it is
stopped, its disk unmounted and its folder removed (:meth:`PoolEntry.release`), so nothing of
one trial reaches another. Fresh ones are started in the background to refill the key the
trial took from.

A trial also asks for its clean room ahead, as its agent's sandbox comes up
(:meth:`WarmPool.expect`): started while the agent runs, once no trial waits for a sandbox
start, instead of when every trial of a large job ends its agent at once.

Bounded: :class:`WarmPool` keeps at most ``max_idle`` sandboxes idle or starting (default from
the job's concurrency, the CPUs and the free memory, :func:`default_size`), and starts at most
one refill's sandbox per CPU at once (bwrap and the supervisor: CPU). Its file work (disks
written, attached and mounted, slots made; unmounts and removals) is a few system calls per
sandbox (no process: :mod:`clawrig.sandbox.disk`) that may wait on the kernel's mount lock and
the disk, so it runs on threads of the pool's own, not tied to the CPU count and not the event
loop's worker threads (the live trials' end-state walks and copies,
:func:`clawrig.waits.in_thread`): :data:`POOL_THREADS` for starts and as many again for
releases, so hundreds of trials ending at once never hold up the ones starting.
:meth:`WarmPool.close` (job end, Ctrl-C: the batch runner's ``finally``) stops and removes every
idle one, and any a trial took and did not release. Each entry is a ``clawrig-trial-<pid>-*``
folder in the work folder: a pool never closed is unmounted and removed at the harness's exit
(:func:`clawrig.leftovers.release_own_mounts`), and after ``kill -9``
:func:`clawrig.leftovers.sweep_dead` unmounts and removes it at the next start (the sandboxes
die with the harness: ``--die-with-parent``; their cgroups are swept by
:func:`clawrig.sandbox.bwrap.sweep_stale_cgroups`; a loop device frees itself with its disk's
last mount).

Every sandbox of the pool adds a few mounts to the host's table (its disk, its slots), and bwrap
reads the whole table of the namespace it starts in for each bind it makes: so each one starts
in a mount namespace of its own made from a small saved one, with the host's system mounts and
its entry's only (:mod:`clawrig.sandbox.mountns`: no cost that grows with the sandboxes alive
or other jobs' mounts). Where that cannot be had, from :data:`ISOLATE_FROM` sandboxes alive new
ones start in a copy of the host's namespace where the pool's mounts are gone but their own.
For that the entries' folders are below the pool's root, ``clawrig-pool-<pid>-*/w`` (a mount
of its own, private: what is mounted below it never reaches other namespaces), removed by
:meth:`WarmPool.close` once its last entry is gone. The entries' staging points share one
private mount there too (``w/st``): a mount fewer each.

Pooling needs the harness as root (mounts) with cgroups (no per-sandbox uid drop) and the
bwrap backend; :meth:`WarmPool.take` returns None otherwise (and for a config it cannot pool:
a kept overlay ``upper_dir``, a fixed ``home_dir``), and the caller starts a sandbox cold.
Measured: ``benchmarks/sandbox.py`` (cold start vs pooled ready, the clean room's cost).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrig.leftovers import owned_tempdir, remove_tree, scratch_dir
from clawrig.sandbox.base import Bind, Limits, SandboxConfig
from clawrig.sandbox.disk import (
    MS_BIND,
    MS_MOVE,
    MS_NODEV,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REMOUNT,
    MS_SHARED,
    TrialDisk,
    can_make_disks,
    mount,
    umount_lazy,
)
from clawrig.sandbox.mountns import can_isolate, template

ISOLATE_FROM = 48
"""Sandboxes of a pool alive (starting, idle or a trial's) from which a new one starts isolated
from the others' mounts where there is no template namespace (module docs): below that, the
three processes it takes cost more than bwrap reading the mount table
(``benchmarks/sandbox.py``). With the template every start is isolated: it costs less than
bwrap reading even a table of ~50 mounts."""
POOL_THREADS = 8
"""Threads of each of a pool's two executors: starts (disks written and mounted, slots made) and
releases (unmounts, removal)."""
AHEAD_POLL_S = 0.05
"""How often the pool looks again whether it may start a clean room ahead (:meth:`WarmPool.
expect`) while trials wait for sandbox starts or its cap is reached (seconds)."""
AHEAD_STARTS_PER_CPU = 2
"""Sandboxes started ahead at once per CPU (:meth:`WarmPool.expect`): a start waits on its
threads' mounts and its supervisor's first answer part of its time."""
AHEAD_BYTES = 16 * 1024**2
"""Host memory counted per sandbox started ahead (bwrap, its init and a supervisor forked from
the zygote, an empty memory-backed room: ~3 MiB measured at 500 alive), for
:func:`default_ahead`'s cap."""
WORKSPACE_SLOT = "ws"
"""The slot bound at /tmp_workspace (the trial's workspace is mounted onto it)."""

_ids = itertools.count(1)


class _PoolClosed(Exception):
    """A refill that waited for its start until the pool closed (it never starts)."""


def _mount(source: str | None, target: Path, flags: int) -> None:
    """mount(2) with no file system type or data. Raises OSError."""
    mount(source, target, None, flags)


def bind_onto(source: Path, slot: Path, stage: Path, *, read_only: bool) -> None:
    """Bind ``source`` onto ``slot`` (a folder or file under a shared mount) so that sandboxes
    binding ``slot`` see it: bound first at ``stage`` (a fresh point under a private mount,
    of the same kind as ``source``), remounted ``nosuid,nodev`` (and read-only when asked),
    then moved onto ``slot`` (the move propagates with its flags). Raises OSError."""
    _mount(str(source), stage, MS_BIND)
    try:
        flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (MS_RDONLY if read_only else 0)
        _mount(None, stage, flags)
        _mount(str(stage), slot, MS_MOVE)
    except OSError:
        umount_lazy(stage)
        raise


def _private_mount(folder: Path, *, shared: bool) -> None:
    """Make ``folder`` a mount of its own: a private one, or (``shared``) the root of a new
    peer group whose binds (the sandboxes') receive what is later mounted below it."""
    _mount(str(folder), folder, MS_BIND)
    _mount(None, folder, MS_PRIVATE)
    if shared:
        _mount(None, folder, MS_SHARED)


def pooling_possible() -> bool:
    """True when this process may pool sandboxes: root (mounts), mke2fs, bwrap."""
    from clawrig.sandbox.bwrap import bwrap_path

    return os.geteuid() == 0 and can_make_disks() and bwrap_path() is not None


def warm_pool_wanted() -> bool:
    """False when the environment says ``CLAWRIG_WARM_POOL=0`` (every sandbox starts cold:
    benchmarks' "before", debugging)."""
    return os.environ.get("CLAWRIG_WARM_POOL", "1").strip() not in ("0", "false", "no", "off")


def default_size(parallel: int) -> int:
    """How many sandboxes a job keeps idle or starting: two per concurrent trial (its agent's
    and its clean room's next), at most 4 per CPU, and at most what 1/8 of the available memory
    holds at ~32 MiB each (bwrap and the supervisor); at least 2."""
    cpus = os.cpu_count() or 2
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        avail = 1 << 30
    by_memory = max(2, avail // 8 // (32 * 1024**2))
    return max(2, min(2 * max(1, parallel), 4 * cpus, by_memory))


def default_ahead() -> int:
    """How many sandboxes a job may have started ahead for its trials' clean rooms and not yet
    taken (:meth:`WarmPool.expect`): what a quarter of the available memory holds at
    :data:`AHEAD_BYTES` each; at least 2."""
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        avail = 1 << 30
    return max(2, avail // 4 // AHEAD_BYTES)


class Ahead:
    """A trial's clean room asked for ahead (:meth:`WarmPool.expect`): ``key`` and ``config``
    as :meth:`WarmPool.take` will get them; ``state`` ``queued`` (waiting for the harness to
    have a start to spare), ``starting``, ``done`` (started: idle in the pool, for any trial
    of the key) or ``dropped`` (taken or given up before it started: never starts).
    ``started``: set once its start ended (well or not)."""

    def __init__(self, key: tuple[Any, ...], config: SandboxConfig) -> None:
        self.key = key
        self.config = config
        self.state = "queued"
        self.started = asyncio.Event()


def pool_key(kind: str, config: SandboxConfig) -> tuple[Any, ...] | None:
    """Everything that decides a sandbox at its start (module docs), or
    None when ``config`` cannot be pooled (another backend, a kept ``upper_dir``, a fixed
    ``home_dir``, a bind source that does not exist)."""
    if kind != "bwrap" or config.upper_dir is not None or config.home_dir is not None:
        return None
    binds = []
    for b in config.binds:
        try:
            is_dir = Path(b.source).resolve().is_dir()
        except OSError:
            return None
        if not is_dir and not Path(b.source).is_file():
            return None
        binds.append((b.dest, b.read_only, is_dir))
    lim = config.limits
    return (
        kind,
        str(config.rootfs or ""),
        tuple(str(p) for p in config.layers),
        config.writable_root,
        config.network,
        config.hostname,
        lim.memory_bytes,
        lim.max_processes,
        lim.max_file_bytes,
        lim.shm_bytes,
        lim.disk_bytes,
        lim.scratch_in_memory,
        tuple(binds),
    )


KEY_BINDS = -1
"""Where :func:`pool_key` keeps the binds' (destination, read-only, is a folder)."""


@dataclass
class PoolEntry:
    """One pooled sandbox: its folder (``clawrig-trial-<pid>-*``: ``fs/`` its disk, ``b/`` the
    slots; its staging points in :attr:`stage_dir`), its disk, the started sandbox. ``hit``: it
    was started ahead (False: started for the trial that took it). ``ready_s``: seconds from the
    trial asking for it to its being the trial's: :meth:`claim` (mounts, adopt, the time limit
    armed), plus ``start_s``, the start a miss waited for (0.0 on a hit)."""

    id: str
    key: tuple[Any, ...]
    folder: Path
    disk: TrialDisk
    box: Any = None
    hit: bool = False
    ready_s: float = 0.0
    start_s: float = 0.0
    claimed: bool = False
    ahead: bool = False
    """Started ahead for a trial's clean room (:meth:`WarmPool.expect`), not by a refill."""
    threads: Executor | None = None
    """Where :meth:`release` does its file work (its pool's release threads; None: the event
    loop's default ones)."""
    removed: Callable[[PoolEntry], None] | None = None
    """Told (in a thread) once the entry's mounts and folder are gone."""
    stage_dir: Path | None = None
    """Its staging points' folder under its pool's private staging mount (None: ``st/`` in its
    own folder, a private mount of its own)."""
    _mounts: list[Path] = field(default_factory=list)

    @property
    def slots(self) -> Path:
        return self.folder / "b"

    @property
    def stage(self) -> Path:
        return self.stage_dir or self.folder / "st"

    async def claim(self, config: SandboxConfig) -> Any:
        """Make the sandbox ``config``'s (module docs, steps 1-3) and return it. ``config``
        must have this entry's key; its ``scratch_dir`` is replaced by this entry's disk.
        Raises OSError (a mount failed) or SandboxError/SandboxDied (the supervisor)."""
        t = time.monotonic()
        if self.claimed:
            raise RuntimeError(f"pooled sandbox {self.id} was already taken")
        self.claimed = True
        box = self.box
        self._mount_all(config)  # a few mount(2) calls: microseconds, no thread hop
        box.config = config.model_copy(update={"scratch_dir": self.disk.path})
        await box.adopt()
        self.ready_s = self.start_s + time.monotonic() - t
        return box

    def _mount_all(self, config: SandboxConfig) -> None:
        pairs = [(Path(config.workspace_dir), WORKSPACE_SLOT, False)]
        pairs += [(Path(b.source), str(i), b.read_only) for i, b in enumerate(config.binds)]
        for source, name, read_only in pairs:
            slot = self.slots / name
            point = self.stage / name
            real = source.resolve()  # once: the kind checked is the kind bound
            if real.is_dir():
                point.mkdir(exist_ok=True)
            else:
                point.touch(exist_ok=True)
            bind_onto(real, slot, point, read_only=read_only)
            self._mounts.append(slot)

    async def release(self) -> None:
        """Stop the sandbox, unmount everything of the entry and remove its folder (never
        raises; idempotent)."""
        box, self.box = self.box, None
        if box is not None:
            with contextlib.suppress(Exception):
                await box.stop()
        try:
            await asyncio.get_running_loop().run_in_executor(self.threads, self._remove)
        except RuntimeError:  # its pool has closed (a trial cancelled late): default threads
            await asyncio.to_thread(self._remove)

    def _remove(self) -> None:
        for slot in reversed(self._mounts):
            umount_lazy(slot)
        self._mounts = []
        for point in (self.slots, self.stage):
            umount_lazy(point)
        self.disk.release()
        if not os.path.ismount(self.disk.path):
            remove_tree(self.folder)
        if self.stage_dir is not None:
            remove_tree(self.stage_dir)
        if (told := self.removed) is not None:
            self.removed = None
            told(self)


class WarmPool:
    """Pre-started sandboxes per key (module docs). ``max_idle``: sandboxes idle or starting at
    once (default :func:`default_size` of ``parallel``); ``depth``: how many each key keeps
    ahead (default: ``parallel``, within ``max_idle``); ``work_dir``: where the pool's root
    goes (default: the temp folder); ``isolate_from``: sandboxes alive from which new ones start
    isolated from the others' mounts (module docs; default 0 with the template namespace, else
    :data:`ISOLATE_FROM`); ``max_ahead``: sandboxes started ahead for trials' clean rooms and
    not yet taken (:meth:`expect`; default :func:`default_ahead`); ``foreground``: the job's
    sandbox-start slots, which trials wait on (a start ahead waits while any trial does, and
    holds one while it starts). Use inside one event loop; :meth:`close` at the end."""

    def __init__(
        self,
        *,
        parallel: int = 1,
        max_idle: int | None = None,
        depth: int | None = None,
        work_dir: Path | None = None,
        isolate_from: int | None = None,
        max_ahead: int | None = None,
        foreground: asyncio.Semaphore | None = None,
    ) -> None:
        self.max_ahead = max_ahead if max_ahead is not None else default_ahead()
        self.foreground = foreground
        self._ahead: collections.deque[Ahead] = collections.deque()
        """Clean rooms asked for ahead, in the order asked, not started yet."""
        self._ahead_task: asyncio.Task[None] | None = None
        self._ahead_out = 0
        """Sandboxes started (or starting) ahead and not taken yet."""
        self._ahead_starts = asyncio.Semaphore(AHEAD_STARTS_PER_CPU * (os.cpu_count() or 2))
        self._taking = 0
        """Trials' own starts under way (a :meth:`take` that found none started)."""
        self.max_idle = max_idle if max_idle is not None else default_size(parallel)
        self.depth = max(1, min(depth or parallel, self.max_idle))
        self.work_dir = work_dir
        self.enabled = pooling_possible()
        if isolate_from is None:
            isolate_from = 0 if self.enabled and template() is not None else ISOLATE_FROM
        self.isolate_from = isolate_from
        cpus = os.cpu_count() or 2
        self._threads = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="clawrig-pool")
        self._release_threads = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="clawrig-rel")
        self._refills = asyncio.Semaphore(cpus)
        """Refills' sandboxes starting at once: one per CPU (a trial's own start, a miss, does
        not wait; nor does a refill's file work)."""
        self._idle: dict[tuple[Any, ...], list[PoolEntry]] = {}
        self._starting: dict[tuple[Any, ...], int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._retiring: set[asyncio.Task[None]] = set()
        self._unpoolable: set[tuple[Any, ...]] = set()
        self._closed = False
        self._root: Path | None = None
        """``clawrig-pool-<pid>-*``: ``w`` the entries' folders (a private mount), ``p`` the
        point an isolated start binds its entry at (module docs)."""
        self._alive: set[str] = set()
        """Entries made and not yet removed (their mounts are on the host)."""
        self._out: dict[str, PoolEntry] = {}
        """Entries :meth:`take` handed out and not yet removed (:meth:`close` releases them)."""
        self._alive_lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def idle(self) -> int:
        """Sandboxes started and waiting for a trial."""
        return sum(len(v) for v in self._idle.values())

    @property
    def starting(self) -> int:
        return sum(self._starting.values())

    def expect(self, kind: str, config: SandboxConfig) -> Ahead | None:
        """Start a sandbox for ``config``'s key ahead of its :meth:`take`: a trial's clean room,
        asked for as its agent starts, so grading finds it started instead of starting it
        then, when every trial of a large job ends at once (at ``-p 500`` with 2 s model calls
        the clean rooms' starts queued behind each other after the agents, while the CPU had
        been idle during them). It starts once no trial waits for a sandbox start
        (:attr:`foreground`) or starts one itself, with fewer than :attr:`max_ahead` started
        ahead and not taken, at most :data:`AHEAD_STARTS_PER_CPU` per CPU at once; it is any
        trial's of the key once started. Returns the ask, for :meth:`take` (``ahead``) or
        :meth:`drop`; None when the pool is off or cannot pool ``config``."""
        key = pool_key(kind, config)
        if not self.enabled or self._closed or key is None or key in self._unpoolable:
            return None
        ahead = Ahead(key, config)
        self._ahead.append(ahead)
        if self._ahead_task is None or self._ahead_task.done():
            self._ahead_task = asyncio.get_running_loop().create_task(self._start_ahead())
        return ahead

    @staticmethod
    def drop(ahead: Ahead | None) -> None:
        """The trial that asked for ``ahead`` needs it no more (it took its clean room, or ended
        before grading): not started yet, it never starts; started, it stays for another trial
        of its key."""
        if ahead is not None and ahead.state == "queued":
            ahead.state = "dropped"

    async def _start_ahead(self) -> None:
        """Start the asked-for sandboxes (:meth:`expect`) in order, a few per CPU at once,
        while no trial waits for a sandbox start or starts one, and the pool is under
        :attr:`max_ahead`."""
        while self._ahead and not self._closed:
            if self._ahead[0].state != "queued":
                self._ahead.popleft()
                continue
            busy = self._taking or (self.foreground is not None and self.foreground.locked())
            if busy or self._ahead_out >= self.max_ahead or self._ahead_starts.locked():
                await asyncio.sleep(AHEAD_POLL_S)
                continue
            ahead = self._ahead.popleft()
            # its start slot held before it is "starting": a take waits for a starting one
            # holding a slot of its own, and never for one that waits for a slot (helper-230)
            if self.foreground is not None:
                await self.foreground.acquire()  # (free: not locked, checked above)
            await self._ahead_starts.acquire()  # (likewise)
            ahead.state = "starting"
            self._ahead_out += 1
            task = asyncio.get_running_loop().create_task(self._fill_ahead(ahead))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _fill_ahead(self, ahead: Ahead) -> None:
        key = ahead.key
        self._starting[key] = self._starting.get(key, 0) + 1
        entry = None
        try:
            entry = None if self._closed else await self._start(key, ahead.config)
        except Exception:  # noqa: BLE001 - a failed start leaves the trial to start its own
            entry = None
        finally:
            self._starting[key] -= 1
            self._ahead_starts.release()
            if self.foreground is not None:
                self.foreground.release()
            ahead.state = "done"
            if entry is None:
                self._ahead_out -= 1
            ahead.started.set()
        if entry is None:
            return
        if self._closed:
            self._ahead_out -= 1
            await entry.release()
            return
        entry.ahead = True
        self._idle.setdefault(key, []).append(entry)

    async def take(
        self, kind: str, config: SandboxConfig, ahead: Ahead | None = None
    ) -> PoolEntry | None:
        """A started sandbox for ``config``'s key, taken out of the pool for good (one started
        now when none waits), with its key refilled in the background; None when the pool is
        off or cannot pool ``config`` (start one cold). ``ahead``: the trial's ask of
        :meth:`expect`, dropped now; when it is starting, the take waits for that start
        rather than making another. Raises SandboxError when a sandbox started now fails to
        start."""
        key = pool_key(kind, config)
        self.drop(ahead)
        if not self.enabled or self._closed or key is None or key in self._unpoolable:
            return None
        if ahead is not None and ahead.state == "starting" and ahead.key == key:
            await ahead.started.wait()
        waiting = self._idle.get(key)
        entry = waiting.pop() if waiting else None
        if entry is not None and entry.ahead:
            self._ahead_out -= 1
        if entry is not None and (entry.box is None or entry.box._died is not None):
            await entry.release()  # died while idle (never seen by a trial): start another
            entry = None
        if entry is not None:
            self.hits += 1
            entry.hit = True
        else:
            self.misses += 1
            started = time.monotonic()
            self._taking += 1
            try:
                entry = await self._start(key, config)
            finally:
                self._taking -= 1
            if entry is None:
                return None
            entry.start_s = time.monotonic() - started
        with self._alive_lock:
            self._out[entry.id] = entry
        self._refill(key, config)
        return entry

    def _refill(self, key: tuple[Any, ...], config: SandboxConfig) -> None:
        have = len(self._idle.get(key, [])) + self._starting.get(key, 0)
        # (the sandboxes started ahead are the trials', not the refills' room)
        room = self.max_idle - self.idle - self.starting + self._ahead_out
        for _ in range(max(0, min(self.depth - have, room))):
            self._starting[key] = self._starting.get(key, 0) + 1
            task = asyncio.get_running_loop().create_task(self._fill(key, config))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _fill(self, key: tuple[Any, ...], config: SandboxConfig) -> None:
        try:
            entry = None if self._closed else await self._start(key, config, self._refills)
        except Exception:  # noqa: BLE001 - a failed refill leaves the key to cold starts
            entry = None
        finally:
            self._starting[key] -= 1
        if entry is None:
            return
        if self._closed:
            await entry.release()
            return
        self._idle.setdefault(key, []).append(entry)

    async def _start(
        self,
        key: tuple[Any, ...],
        config: SandboxConfig,
        starts: asyncio.Semaphore | None = None,
    ) -> PoolEntry | None:
        """A new entry for ``key``: folder, disk, slots, and a sandbox started on them (within
        ``starts``, when given: the disk and slots are made first, outside it)."""
        from clawrig.sandbox.bwrap import BwrapSandbox

        root = self._entries_root()
        folder = owned_tempdir("trial", root / "w")
        os.chmod(folder, 0o700)  # the sandbox's root is the host's root (no uid drop)
        entry = PoolEntry(
            id=f"{os.getpid()}-{next(_ids)}",
            key=key,
            folder=folder,
            disk=TrialDisk(
                folder, config.limits.scratch_bytes(), in_memory=config.limits.scratch_in_memory
            ),
            threads=self._release_threads,
            removed=self._removed,
            stage_dir=root / "w" / "st" / folder.name,
        )
        with self._alive_lock:
            self._alive.add(entry.id)
            isolate = len(self._alive) >= self.isolate_from and can_isolate()
        prepared: asyncio.Future[None] | None = None
        try:
            prepared = asyncio.get_running_loop().run_in_executor(
                self._threads, self._prepare, entry
            )
            # shielded: cancelled, the thread would go on mounting while release unmounts
            await asyncio.shield(prepared)
            lim = config.limits
            box = BwrapSandbox(
                SandboxConfig(
                    workspace_dir=entry.slots / WORKSPACE_SLOT,
                    scratch_dir=entry.disk.path,
                    binds=[
                        Bind(source=entry.slots / str(i), dest=dest, read_only=read_only)
                        for i, (dest, read_only, _) in enumerate(key[KEY_BINDS])
                    ],
                    limits=Limits(
                        memory_bytes=lim.memory_bytes,
                        max_processes=lim.max_processes,
                        max_file_bytes=lim.max_file_bytes,
                        disk_bytes=lim.disk_bytes,
                        scratch_in_memory=lim.scratch_in_memory,
                        shm_bytes=lim.shm_bytes,
                        trial_timeout_s=None,  # armed when a trial takes it
                    ),
                    rootfs=config.rootfs,
                    layers=config.layers,
                    writable_root=config.writable_root,
                    network=config.network,
                    hostname=config.hostname,
                )
            )
            entry.box = box
            if isolate:
                box.launch_ns = (root / "w", folder, root / "p")
            async with starts or contextlib.nullcontext():
                if self._closed and starts is not None:  # a refill that waited past close
                    raise _PoolClosed
                await box.start(arm=False)
        except BaseException:
            # its mounts made (or not) before they are undone; in a task close() waits for, so
            # a second cancel does not leave them (it would cut the wait, the release skipped)
            undo = asyncio.ensure_future(self._undo(entry, prepared))
            self._retiring.add(undo)
            undo.add_done_callback(self._retiring.discard)
            await asyncio.shield(undo)
            raise
        if box.host_uid is not None:  # no cgroups: rlimits on a dropped uid, not poolable
            self._unpoolable.add(key)
            await entry.release()
            return None
        return entry

    @staticmethod
    async def _undo(entry: PoolEntry, prepared: asyncio.Future[None] | None) -> None:
        """Release ``entry`` of a start that failed or was cancelled, once its disk and slots'
        thread (``prepared``) has ended. Never raises."""
        if prepared is not None:
            await asyncio.wait([prepared])
        await entry.release()

    def _entries_root(self) -> Path:
        """The pool's root (made on first use: module docs). Raises OSError."""
        if self._root is None:
            root = owned_tempdir("pool", self.work_dir or scratch_dir())
            os.chmod(root, 0o700)
            for part in ("w", "p"):
                (root / part).mkdir()
            _private_mount(root / "w", shared=False)
            (root / "w" / "st").mkdir()
            _private_mount(root / "w" / "st", shared=False)
            self._root = root
        return self._root

    def _removed(self, entry: PoolEntry) -> None:
        """An entry's mounts and folder are gone (in a thread): the pool's root goes with the
        last one after :meth:`close`."""
        with self._alive_lock:
            self._alive.discard(entry.id)
            self._out.pop(entry.id, None)
            last = self._closed and not self._alive
        if last:
            self._remove_root()

    def _remove_root(self) -> None:
        root, self._root = self._root, None
        if root is not None:
            for part in ("w/st", "w"):
                umount_lazy(root / part)
            if not any(os.path.ismount(root / part) for part in ("w/st", "w")):
                remove_tree(root)

    @staticmethod
    def _prepare(entry: PoolEntry) -> None:
        """Mount the entry's disk and make its slots, of the kinds its key says (the template
        config's bind sources may be gone by now: a refill runs after its trial)."""
        entry.disk.mount()
        entry.slots.mkdir()
        entry.stage.mkdir()
        (entry.slots / WORKSPACE_SLOT).mkdir()
        for i, (_, _, is_dir) in enumerate(entry.key[KEY_BINDS]):
            slot = entry.slots / str(i)
            if is_dir:
                slot.mkdir()
            else:
                slot.touch()
        for slot in entry.slots.iterdir():
            # read-only below the mounts: a process that still sees the bare slot (bwrap's init
            # process entered the workspace slot before it was mounted: /proc/1/cwd) cannot
            # write there (no capabilities inside, so the owner's bits hold for root)
            os.chmod(slot, 0o555 if slot.is_dir() else 0o444)
        if entry.stage_dir is None:
            _private_mount(entry.stage, shared=False)
        _private_mount(entry.slots, shared=True)

    async def retire(self, entry: PoolEntry) -> None:
        """Release ``entry`` after its trial (:meth:`PoolEntry.release`) in the background: its
        sandbox is stopped at once, its unmounts and removal finish before :meth:`close`
        returns. Never raises."""
        if entry.box is not None:
            with contextlib.suppress(Exception):
                await entry.box.stop()
        if self._closed:
            await entry.release()
            return
        task = asyncio.get_running_loop().create_task(entry.release())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def close(self) -> None:
        """Stop refilling, release every idle sandbox and wait for retired ones to be gone
        (job end, Ctrl-C), then release the ones taken and not released yet (their trials are
        over by the job's end: one whose owner never released it, e.g. an exception past its
        trial's close, would keep its disk and slots mounted on the host after the harness
        ended; releasing it again is a no-op). Idempotent."""
        self._closed = True
        self._ahead.clear()
        if self._ahead_task is not None and not self._ahead_task.done():
            self._ahead_task.cancel()  # (only ever between starts: in its poll's sleep)
            await asyncio.gather(self._ahead_task, return_exceptions=True)
        # sandboxes being started finish starting and are then released (a start cancelled
        # half-way could leave a bwrap whose process the harness never got to know)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        idle = [e for entries in self._idle.values() for e in entries]
        self._idle.clear()
        await asyncio.gather(*(e.release() for e in idle), return_exceptions=True)
        with self._alive_lock:
            taken = list(self._out.values())
        await asyncio.gather(*(e.release() for e in taken), return_exceptions=True)
        with self._alive_lock:
            last = not self._alive  # else the last trial's release removes the root
        if last:
            self._remove_root()
        for threads in (self._threads, self._release_threads):
            threads.shutdown(wait=False)  # idle by now: their work was awaited above

    async def __aenter__(self) -> WarmPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
