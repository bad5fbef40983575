"""Serving an ASGI app (FastAPI) from a background thread: the model gateway, the scripted model
server and anything else the harness hosts on loopback or a unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from typing import Any

import uvicorn


def tcp_listener(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A bound TCP socket for uvicorn. ``proto=IPPROTO_TCP`` matters: asyncio sets TCP_NODELAY
    on accepted connections only when the socket says it is TCP; without it every reply on a
    kept-alive connection waits ~40 ms for a delayed ACK (Nagle). Raises OSError."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class ThreadedServer:
    """uvicorn serving ``app`` on ``sockets`` in a daemon thread.

    ``start()`` returns once the server accepts (RuntimeError after ``start_timeout_s``
    seconds); ``stop()`` asks it to exit and joins the thread (``stop_timeout_s`` seconds).
    ``config`` goes to :class:`uvicorn.Config` (log_level, lifespan, timeouts ...).
    """

    def __init__(
        self,
        app: Any,
        sockets: list[socket.socket],
        *,
        name: str,
        start_timeout_s: float = 10.0,
        stop_timeout_s: float = 10.0,
        **config: Any,
    ):
        self.sockets = sockets
        self.name = name
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        settings = {"log_level": "critical", "access_log": False, **config}
        self.server = uvicorn.Server(uvicorn.Config(app, **settings))
        self.thread: threading.Thread | None = None

    def start(self) -> ThreadedServer:
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": self.sockets}, name=self.name, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} could not start")
            time.sleep(0.005)
        return self

    @property
    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=self.stop_timeout_s)
        for s in self.sockets:
            try:
                s.close()
            except OSError:
                pass
        self.thread = None


PIPE_CHUNK = 65536


async def pipe_streams(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    """Copy ``reader`` to ``writer`` until EOF (then half-close ``writer``); returns the bytes
    copied. A connection error ends the copy quietly (the other side went away)."""
    total = 0
    try:
        while data := await reader.read(PIPE_CHUNK):
            total += len(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
    return total
