"""DockerSandbox: the same supervisor protocol inside a Docker container.

The image is ``SandboxConfig.image`` (``--image NAME``, or an environment's image built locally
by :mod:`clawrig.env`); without one, the ``base`` environment's image when it is built
(``clawrig env build base --docker``). No image registry is contacted (``--pull never``).

The container's main process is the supervisor itself, behind Docker's init (``--init``), so it
sits at pid 2 exactly as under bubblewrap and ``kill_all`` keeps the container alive. The
channel is a unix socket the supervisor connects to at its start (bound in from the harness,
removed once taken); the container is removed on stop (``--rm``, and ``docker rm -f`` by name,
since killing the client leaves a container running).

The docker client runs without asyncio's subprocess machinery (as bwrap, see
:class:`clawrig.sandbox.client.PidfdProcess`): ``docker run`` under ``subprocess.Popen``, its
short commands (``version``, ``image inspect``, ``rm -f``, ``commit``) the same way
(:func:`docker_command`). A program that ended while a container started hung in asyncio's
(CPython 3.11), and a start cancelled half-way left its container running and its folder. A
start cut after ``docker run`` began lets the client end by itself before the container is
removed (:meth:`DockerSandbox._undo_container`).

Inside: /tmp_workspace bound read-write, /root the image's with the harness's folders
(/root/.openclaw, /root/skills) bound in, no network (``--network none``;
``--network host`` with ``SandboxConfig.network``, as bwrap shares the host's); memory, pids and
file-size limits from ``Limits`` (``--memory``, ``--pids-limit``, ``--ulimit fsize``); only the
capabilities a package manager needs as root (chown, file ownership, setuid/setgid to drop to
``_apt``, kill) and ``no-new-privileges``. The container's own writable layer is the trial's
writable system: ``pip install``, ``npm install -g``, ``apt-get install`` work and vanish with
the container; :meth:`DockerSandbox.commit` freezes it as an image (a warm snapshot). Needs a
Docker engine: without one ``start`` raises SandboxError naming what is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import subprocess
from pathlib import Path

from clawrig.errors import SandboxError
from clawrig.leftovers import fits_socket, owned_tempdir, remove_tree, socket_tempdir
from clawrig.sandbox.base import SandboxConfig, oom_kill_count
from clawrig.sandbox.bwrap import DEFAULT_PATH
from clawrig.sandbox.client import (
    READY_TIMEOUT_S,
    SUPERVISOR_PATH,
    PidfdProcess,
    SupervisedSandbox,
    run_command,
    run_to_end,
    supervisor_argv,
    supervisor_pyc,
)
from clawrig.sandbox.paths import PATHS

HARNESS_LABEL = "clawrig.harness"
"""Container label holding the pid of the harness that started it."""
PROTO_DIR = "/run/clawrig-proto"
"""Where the folder of the harness's protocol socket is bound in a container."""
WIND_DOWN_S = 20.0
"""Seconds a cut start waits for its docker client to end by itself (:meth:`DockerSandbox.
_undo_container`) before killing it."""
CLIENT_TIMEOUT_S = 120.0
"""Seconds a short docker command (:func:`docker_command`) may take before it is killed."""
REMOVE_TIMEOUT_S = 60.0
"""Seconds a sandbox's ``docker rm -f`` may take, as before the client left asyncio (an engine
stuck that long: the container, if any, stays labelled with the harness's pid). A start cut on
a stuck engine waits :data:`WIND_DOWN_S` and this."""
CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL")


async def docker_command(
    *args: str, timeout_s: float = CLIENT_TIMEOUT_S
) -> subprocess.CompletedProcess[bytes]:
    """``docker ARGS...`` run to its end (:func:`clawrig.sandbox.client.run_command`: killed
    at once when the caller is cancelled), output captured. Raises SandboxError when the client
    is missing or takes over ``timeout_s`` seconds."""
    docker = shutil.which("docker")
    if docker is None:
        raise SandboxError("the docker sandbox needs the docker client and a Docker engine")
    try:
        return await run_command([docker, *args], timeout_s)
    except TimeoutError:
        raise SandboxError(
            f"docker {args[0]} took over {timeout_s:g} s (is the Docker engine stuck?)"
        ) from None


def default_image() -> str:
    """The ``base`` environment's image name (built by ``clawrig env build base``)."""
    from clawrig.env.build import image_name
    from clawrig.env.spec import load_env_spec

    return image_name(load_env_spec("base"))


class DockerSandbox(SupervisedSandbox):
    backend_name = "docker"
    supports_snapshots = True
    host_uid = None
    """Root in a container is the host's root (no user namespace remapping)."""

    def __init__(self, config: SandboxConfig):
        super().__init__(config)
        self.name = f"clawrig-{secrets.token_hex(6)}"
        self.base_dir: Path | None = None
        self._proto_dir: Path | None = None
        """The protocol socket's own folder when ``base_dir/proto/s`` is too long a path."""
        self._removed = False
        """``docker rm -f`` has run for the container (:meth:`_cleanup`)."""
        self._client: PidfdProcess | None = None
        """The ``docker run`` client of the start under way (:meth:`_undo_container`)."""
        self._accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] | None
        self._accepted = None
        """The supervisor's connection, once it has connected (:meth:`_undo_container`)."""

    def oom_kills(self) -> int | None:
        """Processes the kernel has killed for the container's memory limit so far: the
        ``oom_kill`` count of its memory cgroup (v1 ``memory.oom_control`` or v2
        ``memory.events``, at Docker's cgroupfs or systemd path for the id ``docker run
        --cidfile`` wrote); None when that cannot be read (not root, another layout)."""
        if self.base_dir is None or not self.config.limits.memory_bytes:
            return None
        try:
            cid = (self.base_dir / "cid").read_text().strip()
        except OSError:
            return None
        if not cid.isalnum():
            return None
        root = Path("/sys/fs/cgroup")
        return oom_kill_count(
            (
                root / "memory" / "docker" / cid / "memory.oom_control",
                root / "memory" / "system.slice" / f"docker-{cid}.scope" / "memory.oom_control",
                root / "system.slice" / f"docker-{cid}.scope" / "memory.events",
                root / "docker" / cid / "memory.events",
            )
        )

    @property
    def limits_enforced(self) -> dict[str, str]:
        """How each limit is enforced (see the base class): Docker's own flags."""
        lim = self.config.limits
        return {
            "memory": "docker --memory (cgroup)" if lim.memory_bytes else "none",
            "processes": "docker --pids-limit (cgroup)" if lim.max_processes else "none",
            "file_size": "docker --ulimit fsize" if lim.max_file_bytes else "none",
            "shm": f"docker --shm-size of {lim.shm_bytes} bytes"
            if lim.shm_bytes
            else "docker's default (64 MiB)",
            "uid": "root in a container (the host's user namespace)",
        }

    async def _launch(self) -> PidfdProcess:
        probe = await docker_command("version", "--format", "{{.Server.Version}}")
        if probe.returncode != 0:
            msg = probe.stderr.decode(errors="replace").strip().splitlines()
            raise SandboxError(
                f"no Docker engine answers: {msg[-1] if msg else 'docker version failed'}"
            )
        self._removed, self._client, self._accepted = False, None, None
        self.base_dir = owned_tempdir("docker")
        try:
            return await self._run_container()
        except BaseException:  # cancelled too: no container, folder or pipe of it left
            await run_to_end(self._undo_container())
            raise

    async def _undo_container(self) -> None:
        """Undo a start that failed or was cut: the docker client, once it has ended by itself
        (at most :data:`WIND_DOWN_S`), then the container (by name), folders and pipes. The
        client is not killed first: killed while the engine made the container, the engine
        finished it after the ``docker rm -f`` and it stayed, created and never started, for
        good. Left alone, it ends soon: the supervisor finds no socket to reach (removed with
        the start) or its channel closed, and the container ends with it."""
        client = self._client
        if self._accepted is not None and self._accepted.done():
            with contextlib.suppress(Exception):
                self._accepted.result()[1].close()
        if client is not None and client.returncode is None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.wait(), WIND_DOWN_S)
            with contextlib.suppress(ProcessLookupError):
                client.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.wait(), 10)
        self._close_errors()
        await self._cleanup()

    async def _run_container(self) -> PidfdProcess:
        """:meth:`_launch` once the engine answers and the sandbox's folder is made: the
        container started and its supervisor connected (:attr:`_channel`). Raises
        SandboxError; the caller cleans up."""
        cfg = self.config
        assert self.base_dir is not None
        home = Path(cfg.home_dir) if cfg.home_dir else self.base_dir / "home"
        (home / PATHS.sessions.removeprefix("/root/")).mkdir(parents=True, exist_ok=True)
        (home / "skills").mkdir(parents=True, exist_ok=True)
        ws = Path(cfg.workspace_dir).resolve()
        ws.mkdir(parents=True, exist_ok=True)
        lim = cfg.limits
        image = cfg.image or default_image()
        if (await docker_command("image", "inspect", image)).returncode != 0:
            raise SandboxError(
                f"no local Docker image {image}: build one (clawrig env build base|wildclaw|"
                "FILE) or name a local image with --image"
            )
        docker = shutil.which("docker") or "docker"
        argv = [docker, "run", "-i", "--rm", "--init", "--pull", "never", "--name", self.name]
        argv += ["--cidfile", str(self.base_dir / "cid")]  # its id: its cgroup (oom_kills)
        argv += ["--label", f"{HARNESS_LABEL}={os.getpid()}"]  # whose container (leftover checks)
        argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        argv += [f"--cap-add={c}" for c in CAPS]
        argv += ["--hostname", cfg.hostname, "--workdir", PATHS.workspace]
        # as under bwrap: loopback only, or the host's own network (never a bridge to elsewhere)
        argv += ["--network", "host" if cfg.network else "none"]
        if lim.memory_bytes:
            argv += ["--memory", str(lim.memory_bytes), "--memory-swap", str(lim.memory_bytes)]
        if lim.max_processes:
            argv += ["--pids-limit", str(lim.max_processes)]
        if lim.max_file_bytes:
            argv += ["--ulimit", f"fsize={lim.max_file_bytes}:{lim.max_file_bytes}"]
        if lim.shm_bytes:  # as under bwrap: /dev/shm of its own size (Docker's default: 64 MiB)
            argv += ["--shm-size", str(lim.shm_bytes)]
        argv += ["-v", f"{ws}:{PATHS.workspace}:rw"]
        # the harness's folders in /root, not /root itself: the image's own /root entries
        # (e.g. /root/miniconda3) stay visible, as under bwrap with an environment
        for entry in sorted(home.iterdir()):
            argv += ["-v", f"{entry}:{PATHS.home}/{entry.name}:rw"]
        source = f"{PATHS.clawrig}/supervisor.py"
        argv += ["-v", f"{SUPERVISOR_PATH}:{source}:ro"]
        pyc = supervisor_pyc(source)
        if pyc is not None:
            argv += ["-v", f"{pyc}:{source}c:ro"]
        # The protocol goes over a socket the supervisor connects to at start, not the
        # container's stdio: docker-init (pid 1, dumpable, the agent's uid) holds the stdio, so
        # the agent could write into the harness's answers through /proc/1/fd/1. The harness
        # takes the first connection and removes the socket.
        proto = self.base_dir / "proto"
        if fits_socket(proto / "s"):
            proto.mkdir()
        else:  # a deep TMPDIR: the socket's folder goes where its path fits
            proto = self._proto_dir = socket_tempdir("docker", "s")
        accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.get_running_loop().create_future()
        )

        def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if accepted.done():
                writer.close()
            else:
                accepted.set_result((reader, writer))

        server = await asyncio.start_unix_server(accept, proto / "s", limit=1 << 30)
        argv += ["-v", f"{proto}:{PROTO_DIR}:ro"]
        for b in cfg.binds:
            argv += ["-v", f"{Path(b.source).resolve()}:{b.dest}:{'ro' if b.read_only else 'rw'}"]
        env = {
            "PATH": DEFAULT_PATH,
            "HOME": PATHS.home,
            "LANG": "C.UTF-8",
            "CLAWRIG_LOG_DIR": "/tmp/.clawrig",
            **cfg.env,
        }
        # the environment goes to the supervisor through `env -i`, not `docker run -e`: the
        # container's configuration (and so an image committed from it) keeps none of it
        argv += [image, "env", "-i", *(f"{k}={v}" for k, v in env.items())]
        argv += supervisor_argv("python3", source, f"{source}c" if pyc else None)
        argv += ["--proto-socket", f"{PROTO_DIR}/s"]
        err_r, err_w = os.pipe()
        try:
            self._errors = await self._read_pipe(err_r)  # owns err_r
        except BaseException:
            os.close(err_w)
            server.close()
            raise
        self._accepted = accepted
        exited: asyncio.Future[int] | None = None
        try:
            proc = self._client = await self._spawn(
                argv,
                (err_w,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err_w,
                start_new_session=True,  # a terminal's Ctrl-C reaches the harness only
            )
            exited = asyncio.ensure_future(proc.wait())
            waited: set[asyncio.Future[object]] = {accepted, exited}  # type: ignore[arg-type]
            await asyncio.wait(waited, timeout=READY_TIMEOUT_S, return_when="FIRST_COMPLETED")
            if not accepted.done():
                raise SandboxError(
                    "docker sandbox failed to start: "
                    + (await self._client_said(proc) or "the supervisor never connected")
                )
            self._channel = accepted.result()
            return proc
        finally:
            if exited is not None:
                exited.cancel()
            server.close()
            with contextlib.suppress(OSError):
                (proto / "s").unlink()

    async def _client_said(self, proc: PidfdProcess) -> str:
        """The docker client's last words (its stderr, up to 600 characters) once it has been
        killed and has exited; empty when it said nothing."""
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 10)
        said = b""
        if self._errors is not None:
            with contextlib.suppress(Exception):
                said = await asyncio.wait_for(self._errors[0].read(), 5)
        return said.decode(errors="replace").strip()[-600:]

    async def commit(self, tag: str) -> str:
        """Freeze the running container's file system (not its binds) as image ``tag``;
        returns ``tag``. Raises SandboxError."""
        done = await docker_command("commit", self.name, tag)
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip()
            raise SandboxError(f"docker commit failed: {said}")
        return tag

    async def _cleanup(self) -> None:
        # the client's death does not stop a container: remove it (and all inside) by name,
        # once (a failed start's clean-up, then its trial's stop)
        if not self._removed:
            self._removed = True
            with contextlib.suppress(Exception):
                await docker_command("rm", "-f", self.name, timeout_s=REMOVE_TIMEOUT_S)
        if self._proto_dir is not None:
            proto, self._proto_dir = self._proto_dir, None
            await asyncio.to_thread(remove_tree, proto)
        if self.base_dir is not None:
            base, self.base_dir = self.base_dir, None
            await asyncio.to_thread(remove_tree, base)
