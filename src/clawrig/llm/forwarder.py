"""A tiny TCP -> unix-socket forwarder that runs *inside* a sandbox (standard library only).

A bwrap sandbox has its own network namespace with loopback only, so the harness's model
gateway (:mod:`clawrig.llm.gateway`) is reached through its unix socket, bound read-only into
the sandbox. Programs inside (OpenClaw, a grader calling a judge) speak plain HTTP to
``http://127.0.0.1:<port>/v1``; this script accepts those TCP connections on the sandbox's
loopback and pipes the bytes both ways to the unix socket. It understands nothing of HTTP,
holds no key, and reaches nothing but that one socket.

Run as ``python3 -I -S forwarder.py --port PORT --socket PATH``. It prints
``clawrig-forwarder ready 127.0.0.1:PORT`` once it listens (the harness waits for that line),
then serves until killed. Keep this file importable by any python3 >= 3.8 with ``-S`` (no
site-packages): it runs on whatever python3 the sandbox's root filesystem has.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

READY_PREFIX = "clawrig-forwarder ready"
"""The first line the forwarder prints once it accepts connections."""

_CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(_CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            pass


async def _handle(
    socket_path: str, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
) -> None:
    try:
        up_r, up_w = await asyncio.open_unix_connection(socket_path)
    except OSError as exc:
        body = f"clawrig forwarder: the model gateway is not reachable ({exc})\n".encode()
        head = (
            "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        client_w.write(head.encode() + body)
        try:
            await client_w.drain()
        finally:
            client_w.close()
        return
    try:
        await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))
    finally:
        for w in (up_w, client_w):
            try:
                w.close()
            except (ConnectionError, OSError):
                pass


async def serve(host: str, port: int, socket_path: str) -> None:
    """Accept TCP connections on ``host:port`` and pipe each to ``socket_path`` until killed."""

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _handle(socket_path, r, w)

    server = await asyncio.start_server(handle, host, port)
    sys.stdout.write(f"{READY_PREFIX} {host}:{port}\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="TCP -> unix socket forwarder (clawrig)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--socket", required=True, help="unix socket of the model gateway")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.host, args.port, args.socket))
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        sys.stderr.write(f"clawrig forwarder: cannot listen on {args.host}:{args.port}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
