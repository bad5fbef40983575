"""The narrow Sandbox protocol every backend implements (bwrap, docker, local).

One sandbox per trial. All paths given to a sandbox are paths *inside* it (``/tmp_workspace``
...); host paths appear only in ``put_dir``/``get_dir`` and in :class:`SandboxConfig`.
Times are seconds, sizes are bytes unless the name says otherwise.

Errors: :class:`clawrig.errors.SandboxError` for a failed operation,
:class:`clawrig.errors.SandboxDied` when the sandbox is gone,
:class:`clawrig.errors.CommandTimeout` only where a caller asked for an exception on timeout
(``exec`` itself reports ``timed_out=True``).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field


class Limits(BaseModel):
    """Per-trial resource limits. ``None`` means no limit for that resource.

    memory_bytes: address space / cgroup memory cap for the whole sandbox.
    max_processes: processes (tasks) alive at once inside the sandbox.
    max_file_bytes: largest file a process may write (RLIMIT_FSIZE).
    disk_bytes: the trial's disk (:mod:`clawrig.sandbox.disk`): everything the sandbox can
      write on the host (workspace, /root, /tmp, the writable system) shares this many bytes.
    shm_bytes: the size of /dev/shm, a tmpfs (memory) of its own, with or without cgroups.
    scratch_in_memory: the disk is a tmpfs of ``disk_bytes`` (its pages count toward
      ``memory_bytes``, with the processes' own memory) instead of an ext4 image (the clean
      room's: what a grader writes is small and short-lived, and a tmpfs costs the host no loop
      device, image or flush; :class:`clawrig.sandbox.disk.TrialDisk`).
    output_bytes: captured stdout/stderr per command; longer output keeps head and tail.
    command_timeout_s: default wall time of one exec.
    trial_timeout_s: wall time of the whole sandbox life; it is stopped after that.
    """

    memory_bytes: int | None = 4 * 1024**3
    max_processes: int | None = 512
    max_file_bytes: int | None = 1024**3
    disk_bytes: int | None = 8 * 1024**3
    shm_bytes: int = 64 * 1024**2
    scratch_in_memory: bool = False
    output_bytes: int = 256 * 1024
    command_timeout_s: float = 600.0
    trial_timeout_s: float | None = None
    call_timeout_s: float = 120.0
    """How long the supervisor may take to answer a request (beyond an exec's own timeout)
    before the sandbox counts as gone (e.g. its supervisor was stopped with SIGSTOP)."""

    def scratch_bytes(self) -> int | None:
        """The size of the sandbox's disk in bytes: ``disk_bytes``, at most ``memory_bytes``
        when it is memory (``scratch_in_memory``: its files can never hold more, and its free
        space then says so to a program that looks); None: no disk."""
        if self.scratch_in_memory and self.disk_bytes and self.memory_bytes:
            return min(self.disk_bytes, self.memory_bytes)
        return self.disk_bytes


class Bind(BaseModel):
    """A host path made visible inside the sandbox at ``dest``."""

    source: Path
    dest: str
    read_only: bool = True


class SandboxConfig(BaseModel):
    """How to build one trial's sandbox.

    ``workspace_dir`` is the host folder bound writable at /tmp_workspace. ``home_dir`` is the
    host folder bound at /root (created when None). ``rootfs`` replaces the host's /usr etc. with
    a root filesystem folder (an environment, :mod:`clawrig.env`). ``env`` is the *whole*
    environment processes see (no harness variable leaks in). ``network`` False means an own
    network namespace with loopback only. ``image`` is for the docker backend.

    Writable system (bwrap with a ``rootfs``, harness as root): ``layers`` are read-only folders
    stacked over ``rootfs`` (top first: warm snapshots); ``writable_root`` puts a per-sandbox
    overlay on top so root inside may install software, all of it gone at stop, unless
    ``upper_dir`` names where the overlay's writes are kept (a warm snapshot being made).
    Docker containers have a writable layer of their own; ``layers`` do not apply there.
    """

    workspace_dir: Path
    home_dir: Path | None = None
    rootfs: Path | None = None
    binds: list[Bind] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)
    network: bool = False
    hostname: str = "sandbox"
    image: str | None = None
    layers: list[Path] = Field(default_factory=list)
    writable_root: bool = False
    upper_dir: Path | None = None
    scratch_dir: Path | None = None
    """Where the sandbox makes its own folder (/tmp, /root, /run/clawrig, the writable
    system's upper folder); a trial puts it on its disk (:mod:`clawrig.sandbox.disk`). None:
    the system temp folder."""


class ExecResult(BaseModel):
    """Result of one command. ``stdout``/``stderr`` are decoded UTF-8 (errors replaced);
    ``truncated`` says output was cut (head and tail kept, with a note in the text).
    ``duration_s`` is the command's own wall time measured inside the sandbox."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    truncated: bool = False
    omitted: list[int] = []
    """Bytes the capture left out of stdout, then of stderr (those cut only): the counts its
    notes in the text say (:func:`truncate_middle` takes them, never a note the command
    printed)."""
    duration_s: float = 0.0


class FileEntry(BaseModel):
    """One entry of ``list``: name, kind ("file", "dir", "link", "other"), size in bytes."""

    name: str
    kind: str
    size: int = 0


@runtime_checkable
class ProcessHandle(Protocol):
    """A background process started by :meth:`Sandbox.spawn`."""

    id: str

    async def poll(self) -> int | None:
        """Exit code, or None while it runs."""
        ...

    async def read_log(self, offset: int = 0, limit: int | None = None) -> tuple[str, int]:
        """Merged stdout+stderr from byte ``offset``; returns (text, next offset)."""
        ...

    async def read_log_ends(
        self, offset: int = 0, limit: int | None = None
    ) -> tuple[str, int, list[int]]:
        """The log from byte ``offset`` to its end, or its head and tail within ``limit``
        bytes (default and most: 4 MiB) with a :func:`truncation_note` between them; returns
        (text, next offset, the notes' counts as :attr:`ExecResult.omitted`)."""
        ...

    async def write_stdin(self, data: str | bytes, eof: bool = False) -> None: ...

    async def kill(self) -> None:
        """Kill the process and its whole process group."""
        ...


class Forward(Protocol):
    """A TCP -> unix socket forward inside a sandbox (:meth:`Sandbox.forward`)."""

    port: int

    async def stop(self) -> None:
        """Stop listening and close its connections (idempotent; no error once the sandbox
        is gone)."""
        ...


@runtime_checkable
class Sandbox(Protocol):
    """One isolated environment per trial. Backends: bwrap (default), docker, local."""

    config: SandboxConfig
    network: str
    """"loopback", "none" or "host" (see :class:`clawrig.sandbox.client.SupervisedSandbox`)."""
    supports_binds: bool
    supports_snapshots: bool

    @property
    def backend(self) -> str: ...

    @property
    def root_is_host_root(self) -> bool:
        """True when root inside is root on the host (the work folder must be closed)."""
        ...

    @property
    def limits_enforced(self) -> dict[str, str]:
        """Each limit -> how this backend enforces it (memory, processes, file_size, shm,
        uid)."""
        ...

    def oom_kills(self) -> int | None:
        """Processes the kernel has killed for this sandbox's memory limit so far, or None
        where the backend cannot tell (no memory cgroup, docker)."""
        ...

    def path_seen_by_commands(self, path: str) -> str:
        """The path a command run in this sandbox opens for the in-sandbox ``path`` (e.g. a
        file :meth:`write_file` wrote, named in a command's arguments): ``path`` itself, except
        on the local backend, whose /root is a private host folder (its file operations
        translate paths, the commands it runs do not)."""
        ...

    async def start(self) -> None:
        """Start the sandbox and its supervisor. Raises SandboxError."""
        ...

    async def exec(
        self,
        command: str | list[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        stdin: str | bytes | None = None,
        merge_stderr: bool = False,
        fork_python: bool = False,
    ) -> ExecResult:
        """Run a command to completion. A str runs under ``/bin/sh -c``. On timeout every
        process the command started is killed and ``timed_out`` is True (exit code 124).
        ``timeout_s`` (seconds; default ``Limits.command_timeout_s``) must be finite and > 0:
        else ValueError, and nothing runs; a limit over a million seconds is cut to that.

        ``fork_python`` (harness code only, never the agent's): a command
        ``[PYTHON, "-I", "-B", SCRIPT, ARGS...]`` whose PYTHON is the supervisor's own
        interpreter, or a virtual environment's python of it (a ``pyvenv.cfg`` beside it or
        one folder up), runs as a fork of the supervisor, the same program without a new
        interpreter's start (:func:`clawrig.sandbox.supervisor._fork_python`); any other
        command runs as usual."""
        ...

    async def spawn(
        self,
        command: str | list[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ProcessHandle:
        """Start a background process that survives between calls; output goes to its log."""
        ...

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Raises FileNotFoundError, IsADirectoryError, PermissionError as the OS would."""
        ...

    async def write_file(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        """Create parent folders as needed."""
        ...

    async def list(self, path: str) -> builtins.list[FileEntry]: ...

    async def put_dir(self, host_dir: Path, sandbox_dir: str) -> None:
        """Copy a host folder's contents into ``sandbox_dir`` (merged, created if missing)."""
        ...

    async def get_dir(
        self, sandbox_dir: str, host_dir: Path, max_bytes: int | None = None
    ) -> builtins.list[str]:
        """Copy ``sandbox_dir``'s contents to a host folder (symlinks kept as links; links,
        devices and paths leaving the folder are left out). Files past ``max_bytes`` in total
        are left out too; returns their names."""
        ...

    def hold_stop(self) -> None:
        """Hold the stop at ``Limits.trial_timeout_s`` until the next :meth:`postpone_stop` (a
        harness wait in progress: :class:`clawrig.waits.WaitClock`)."""
        ...

    def postpone_stop(self, seconds: float) -> None:
        """Move the stop at ``Limits.trial_timeout_s`` ``seconds`` later (harness waits) and end
        a :meth:`hold_stop`."""
        ...

    async def kill_all(self) -> int:
        """Kill every process inside except the supervisor; returns how many were killed.
        Used before gt/ is injected so nothing the agent started survives into grading."""
        ...

    async def forward(self, port: int, socket_path: str, *, max_connections: int = 64) -> Forward:
        """Pipe TCP connections to the sandbox's ``127.0.0.1:port`` to the unix socket
        ``socket_path`` inside (at most ``max_connections`` at once); listening on return.
        Raises OSError (the port is taken) or SandboxDied."""
        ...

    async def stop(self) -> None:
        """Kill everything inside and release all resources. Idempotent."""
        ...


def truncation_note(omitted: int) -> bytes:
    """The note put where output was cut (the supervisor's capture writes the same)."""
    return f"\n[... {omitted} bytes omitted: output truncated, head and tail kept ...]\n".encode()


def truncate_middle(data: bytes, limit: int, earlier: Iterable[int] = ()) -> tuple[bytes, bool]:
    """Keep the head and the tail of ``data`` within ``limit`` bytes, with a note in between.

    Returns (bytes, truncated). The note says how many bytes were omitted: with those of the
    supervisor's notes ``data`` holds already (``earlier``: their counts,
    :attr:`ExecResult.omitted`; the capture keeps as many bytes as the tools, so its note
    alone was cut again, and the agent was told "70 bytes omitted" of 6.6 MB, helper-195).
    Those notes' own bytes do not count toward ``limit``; a note the command printed itself
    is output like any other (helper-198: one claiming 10**19 bytes was believed).
    """
    found: list[tuple[int, bytes]] = []
    counted = 0  # (of the notes found: a count whose note is not in ``data`` is no part of it)
    for count in earlier:
        note = truncation_note(count)
        at = data.find(note)
        if at < 0 and data.endswith(note.rstrip(b"\n")):  # (its newline stripped after it:
            note = note.rstrip(b"\n")  # an output of newlines only, helper-201)
            at = len(data) - len(note)
        if at >= 0:
            found.append((at, note))
            counted += count
            data = data[:at] + data[at + len(note) :]
    if len(data) <= limit:
        for at, note in reversed(found):  # (as they were: nothing more was cut)
            data = data[:at] + note + data[at:]
        return data, bool(found)
    half = max(limit // 2, 1)
    omitted = len(data) - 2 * half + counted
    return data[:half] + truncation_note(omitted) + data[-half:], True


def oom_kill_count(files: Iterable[Path]) -> int | None:
    """The ``oom_kill`` count of the first readable memory-cgroup file in ``files``: cgroup
    v2's ``memory.events`` or v1's ``memory.oom_control`` (Linux 4.13+); None when none has
    it. Source: the kernel's cgroup-v2.rst and cgroup-v1/memory.rst."""
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def oom_note(sandbox: Sandbox) -> str | None:
    """ "the kernel killed N process(es) for the sandbox's memory limit of M MiB: --memory-mb",
    or None when it killed none so far or the backend cannot tell (:meth:`Sandbox.oom_kills`;
    a plugin backend written before it has none)."""
    count = getattr(sandbox, "oom_kills", lambda: None)()
    if not count:
        return None
    limit = (sandbox.config.limits.memory_bytes or 0) // 1024**2
    return (
        f"the kernel killed {count} process(es) for the sandbox's memory limit of {limit} MiB: "
        "--memory-mb"
    )
