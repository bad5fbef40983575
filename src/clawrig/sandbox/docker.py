"""DockerSandbox: the same supervisor protocol inside a Docker container.

The image is ``SandboxConfig.image`` (``--image NAME``, or an environment's image built locally
by :mod:`clawrig.env`); without one, the ``base`` environment's image when it is built
(``clawrig env build base --docker``). No image registry is contacted (``--pull never``).

The container's main process is the supervisor itself, behind Docker's init (``--init``), so it
sits at pid 2 exactly as under bubblewrap and ``kill_all`` keeps the container alive. The
channel is the container's stdin/stdout (``docker run -i``); the container is removed on stop
(``--rm``, and ``docker rm -f`` by name, since killing the client leaves a container running).

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
from pathlib import Path

from clawrig.errors import SandboxError
from clawrig.leftovers import fits_socket, owned_tempdir, remove_tree, socket_tempdir
from clawrig.sandbox.base import SandboxConfig
from clawrig.sandbox.bwrap import DEFAULT_PATH
from clawrig.sandbox.client import (
    READY_TIMEOUT_S,
    SUPERVISOR_PATH,
    SupervisedSandbox,
    supervisor_argv,
    supervisor_pyc,
)
from clawrig.sandbox.paths import PATHS

HARNESS_LABEL = "clawrig.harness"
PROTO_DIR = "/run/clawrig-proto"
"""Where the folder of the harness's protocol socket is bound in a container."""
"""Container label holding the pid of the harness that started it."""
CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL")


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

    async def _launch(self) -> asyncio.subprocess.Process:
        docker = shutil.which("docker")
        if docker is None:
            raise SandboxError("the docker sandbox needs the docker client and a Docker engine")
        probe = await asyncio.create_subprocess_exec(
            docker,
            "version",
            "--format",
            "{{.Server.Version}}",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await probe.communicate()
        if probe.returncode != 0:
            msg = err.decode(errors="replace").strip().splitlines()
            raise SandboxError(
                f"no Docker engine answers: {msg[-1] if msg else 'docker version failed'}"
            )
        cfg = self.config
        self.base_dir = owned_tempdir("docker")
        home = Path(cfg.home_dir) if cfg.home_dir else self.base_dir / "home"
        (home / PATHS.sessions.removeprefix("/root/")).mkdir(parents=True, exist_ok=True)
        (home / "skills").mkdir(parents=True, exist_ok=True)
        ws = Path(cfg.workspace_dir).resolve()
        ws.mkdir(parents=True, exist_ok=True)
        lim = cfg.limits
        image = cfg.image or default_image()
        inspect = await asyncio.create_subprocess_exec(
            docker,
            "image",
            "inspect",
            image,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        if await inspect.wait() != 0:
            raise SandboxError(
                f"no local Docker image {image}: build one (clawrig env build base|wildclaw|"
                "FILE) or name a local image with --image"
            )
        argv = [docker, "run", "-i", "--rm", "--init", "--pull", "never", "--name", self.name]
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
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            exited: asyncio.Future[object] = asyncio.ensure_future(proc.wait())
            waited: set[asyncio.Future[object]] = {accepted, exited}  # type: ignore[arg-type]
            await asyncio.wait(waited, timeout=READY_TIMEOUT_S, return_when="FIRST_COMPLETED")
            exited.cancel()
            if not accepted.done():
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                assert proc.stderr is not None
                said = (await proc.stderr.read()).decode(errors="replace").strip()
                await proc.wait()
                why = said[-600:] or "the supervisor never connected"
                raise SandboxError(f"docker sandbox failed to start: {why}")
            self._channel = accepted.result()
            return proc
        finally:
            server.close()
            with contextlib.suppress(OSError):
                (proto / "s").unlink()

    async def commit(self, tag: str) -> str:
        """Freeze the running container's file system (not its binds) as image ``tag``;
        returns ``tag``. Raises SandboxError."""
        proc = await asyncio.create_subprocess_exec(
            "docker",
            "commit",
            self.name,
            tag,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _out, err = await proc.communicate()
        if proc.returncode != 0:
            raise SandboxError(f"docker commit failed: {err.decode(errors='replace').strip()}")
        return tag

    async def _cleanup(self) -> None:
        # the client's death does not stop a container: remove it (and all inside) by name
        with contextlib.suppress(Exception):
            proc = await asyncio.create_subprocess_exec(
                "docker",
                "rm",
                "-f",
                self.name,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            await asyncio.wait_for(proc.wait(), 60)
        if self._proto_dir is not None:
            proto, self._proto_dir = self._proto_dir, None
            await asyncio.to_thread(remove_tree, proto)
        if self.base_dir is not None:
            base, self.base_dir = self.base_dir, None
            await asyncio.to_thread(remove_tree, base)
