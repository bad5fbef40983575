"""A harness-held channel into a sandbox: a unix socket the harness listens on, in a host folder
bound read-only into the sandbox, that accepts connections only while it is open.

Used where something inside a sandbox must tell the harness a fact the agent must not be able
to forge or erase (issue 14): the grader's verdict (:mod:`clawrig.grading.programmatic`: the
grader's runner connects before any grader code runs, the first connection is the only one
taken) and the mock services' audit events (:mod:`clawrig.services.lifecycle`: each service
connects at start, the channel is sealed before the agent starts, so only the services hold a
connection; what they send is in the harness as it happens and nothing later can take it back).

The processes holding a connection make themselves non-dumpable (``PR_SET_DUMPABLE`` 0), so
another process of the sandbox, which has no capabilities, can neither ptrace them nor open
their descriptors through /proc. Data is newline-delimited; each connection is capped at
``max_bytes`` (beyond it the connection is closed and marked ``overflow``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from clawrig.leftovers import fits_socket, socket_tempdir
from clawrig.sandbox.base import Bind, Sandbox

SOCKET_NAME = "s"


@dataclass
class Connection:
    """One accepted connection: the lines it sent (without newlines), whether it ended (EOF)
    and whether it went over the byte cap."""

    lines: list[bytes] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    overflow: bool = False


class HarnessChannel:
    """A unix socket at ``<folder>/s`` bound read-only at ``dest`` in sandboxes that add
    :attr:`bind` to their binds. ``max_connections``: connections taken while open (later ones
    are closed at once; with 1, the first connection wins); ``max_bytes``: per connection."""

    def __init__(
        self, folder: Path, dest: str, *, max_connections: int = 1, max_bytes: int = 16 * 1024**2
    ) -> None:
        self.folder = folder
        self.dest = dest
        self.max_connections = max_connections
        self.max_bytes = max_bytes
        self.connections: list[Connection] = []
        self._own_folder = False
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def host_path(self) -> Path:
        return self.folder / SOCKET_NAME

    @property
    def bind(self) -> Bind:
        return Bind(source=self.folder, dest=self.dest, read_only=True)

    def path_in(self, sandbox: Sandbox) -> str:
        """The socket's path as processes in ``sandbox`` see it (the host path on the local
        backend, which binds nothing)."""
        if sandbox.backend == "local":
            return str(self.host_path)
        return f"{self.dest}/{SOCKET_NAME}"

    async def open(self) -> HarnessChannel:
        """Listen (the folder is made world-traversable and the socket world-connectable, so a
        sandbox's unprivileged host uid may connect)."""
        if not fits_socket(self.folder / SOCKET_NAME):
            self.folder = socket_tempdir("chan", SOCKET_NAME)
            self._own_folder = True
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o755)
        with contextlib.suppress(FileNotFoundError):
            self.host_path.unlink()
        self._server = await asyncio.start_unix_server(self._accept, path=str(self.host_path))
        os.chmod(self.host_path, 0o777)
        return self

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._server is None or len(self.connections) >= self.max_connections:
            writer.close()
            return
        conn = Connection()
        self.connections.append(conn)
        if len(self.connections) >= self.max_connections:
            self.seal()
        task = asyncio.ensure_future(self._read(conn, reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read(
        self, conn: Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        total = 0
        try:
            while True:
                chunk = await reader.read(1 << 16)
                if not chunk:
                    break
                total += len(chunk)
                if total > self.max_bytes:
                    conn.overflow = True
                    break
                conn.lines.append(chunk)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            data = b"".join(conn.lines)
            conn.lines = [ln for ln in data.split(b"\n") if ln.strip()]
            conn.ended.set()
            writer.close()

    def seal(self) -> None:
        """Stop listening and remove the socket file: nobody else can connect."""
        if self._server is not None:
            self._server.close()
            self._server = None
        with contextlib.suppress(OSError):
            self.host_path.unlink()

    async def wait_ended(self, timeout_s: float) -> bool:
        """Wait until every accepted connection has ended; False on timeout."""
        pending = [
            asyncio.ensure_future(c.ended.wait()) for c in self.connections if not c.ended.is_set()
        ]
        if not pending:
            return True
        try:
            # not wait_for(gather(...)): cancelled (the trial stopped), its gather ended with
            # an exception nobody retrieved, a traceback at exit in a harness worker
            _, late = await asyncio.wait(pending, timeout=timeout_s)
            return not late
        finally:
            for waiting in pending:
                waiting.cancel()

    async def close(self) -> None:
        """Seal and stop reading (idempotent)."""
        self.seal()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self._own_folder = False
