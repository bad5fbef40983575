"""FastAPI app of one built-in mock service, and its entry point inside the sandbox.

Started by :func:`clawrig.services.lifecycle.start_services` with the services environment's
interpreter, one process per service::

    python3 -I -c "import sys; sys.path.insert(0, DIR); \
        from clawrig.services.mock.server import main; main()" CONFIG_FILE

The configuration is a JSON file named by the first argument, which the service deletes as soon
as it has read it (services start before the agent, so fixtures, which may script what other
people will answer, are gone before the agent could read them)::

    {"kind": "gmail", "target": "clawrig.services.mock.core:GmailService", "port": 9100,
     "host": "127.0.0.1", "fixtures": {...}, "faults": {...}, "restore": <a saved audit> | null}

``target`` (``module:Class``, importable from DIR) names the kind's class: a built-in one or an
entry-point kind's (:mod:`clawrig.services.kinds`); without it ``kind`` picks a built-in.

With ``"audit_socket": PATH`` in the configuration, the service connects to that unix socket
(the harness's, :class:`clawrig.sandbox.channel.HarnessChannel`) before it serves, makes itself
non-dumpable, and sends every change of its audit as it happens, one JSON line each:
``{"hello": name, "kind": kind, "now": ...}`` first, then ``{"append": {key: [new items]},
"set": {key: new value}}`` after each call (lists of the audit grow, other values are replaced)
and ``{"reset": true}`` for ``POST /<kind>/reset``; so the harness holds the audit as it grew,
whatever happens to the service later (issue 14).

Routes: ``GET /health``, ``GET /<kind>/audit``, ``POST /<kind>/reset`` and the kind's API
endpoints (``POST``, JSON bodies; see :mod:`.core`). API calls, including malformed ones and
calls to unknown paths under ``/<kind>/``, are recorded in the audit. Bad fixtures end the
process with exit code 2 and one line on stderr naming the key.
"""

import asyncio
import importlib
import json
import os
import sys
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse as _JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .core import FixtureError, MockService, make_service

_UNSET = object()


class JSONResponse(_JSONResponse):
    """A JSON response in ASCII: a lone surrogate the agent sent (and the audit recorded) is
    written as an escape instead of failing the response (``GET /<kind>/audit`` included)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")


class AuditStream:
    """The audit's growth, sent to the harness as it happens (see the module docstring)."""

    def __init__(self, path: str | None, service: MockService, name: str = "") -> None:
        self.sock = None
        self.sent: dict[str, int] = {}
        self.scalars: dict[str, Any] = {}
        if not path:
            return
        import ctypes
        import socket

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace, no /proc/fd
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self._send({"hello": name or service.kind, "kind": service.kind, "now": service.now})

    def _send(self, event: dict[str, Any]) -> None:
        if self.sock is None:
            return
        try:  # ASCII: a lone surrogate the agent sent (JSON "\\udcff") travels as an escape
            line = json.dumps(event, default=str) + "\n"
        except (ValueError, TypeError, RecursionError) as exc:
            # the change cannot be told: the harness learns there is a hole in the audit
            line = json.dumps({"unrecorded": f"{type(exc).__name__}: {exc}"[:300]}) + "\n"
        self.sock.sendall(line.encode("ascii"))

    def sync(self, service: MockService) -> None:
        """Send what changed in the audit since the last sync: the items appended to each list
        (``append``) and any other value that changed (``set``)."""
        if self.sock is None:
            return
        new: dict[str, Any] = {}
        changed: dict[str, Any] = {}
        for key, value in service.audit.items():
            if isinstance(value, list):
                done = self.sent.get(key, 0)
                if len(value) > done:
                    new[key] = value[done:]
                    self.sent[key] = len(value)
            elif self.scalars.get(key, _UNSET) != value:
                changed[key] = self.scalars[key] = value
        if new or changed:
            self._send({"append": new, "set": changed})

    def reset(self) -> None:
        self._send({"reset": True})
        self.sent = {}


MAX_BODY_DEPTH = 64
"""Nesting levels of a request body the service accepts (a deeper one is recorded as text and
refused with 400): its audit event, a few levels deeper, must always serialise."""


def _parse(raw: bytes) -> tuple[Any, str | None]:
    """(body, error): None for an empty body; the text and an error for invalid JSON or JSON
    nested deeper than :data:`MAX_BODY_DEPTH`."""
    if not raw.strip():
        return None, None
    text = raw.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return text, "the request body is not valid JSON"
    if _depth(body) > MAX_BODY_DEPTH:
        return text, f"the request body is nested more than {MAX_BODY_DEPTH} levels deep"
    return body, None


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level + 1)
            stack.extend(
                (v, level + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def _handler(service: MockService, endpoint: str, stream: AuditStream) -> Any:
    async def handle(request: Request) -> JSONResponse:
        body, error = _parse(await request.body())
        latency, fault = service.faults.draw(endpoint)
        if latency:
            await asyncio.sleep(latency)
        if fault is not None:
            service.record("POST", endpoint, body, fault, fault=True, latency_s=latency)
            stream.sync(service)
            if fault == 429:
                return JSONResponse(
                    {"error": "rate limited: retry later"},
                    status_code=429,
                    headers={"Retry-After": "1"},
                )
            return JSONResponse({"error": "internal server error"}, status_code=fault)
        if error is not None:
            status, payload = 400, {"error": error}
            service.record("POST", endpoint, body, status, latency_s=latency)
        else:
            status, payload = service.call(endpoint, body, latency_s=latency)
        stream.sync(service)
        return JSONResponse(payload, status_code=status)

    return handle


def create_app(service: MockService, stream: AuditStream | None = None) -> FastAPI:
    """The FastAPI app serving ``service`` (its audit's growth sent on ``stream``)."""
    stream = stream or AuditStream(None, service)
    kind = service.kind
    prefix = f"/{kind}"
    app = FastAPI(title=f"clawrig mock {kind}", docs_url=None, redoc_url=None, openapi_url=None)

    async def health() -> dict[str, str]:
        return {"status": "ok", "service": kind}

    async def audit() -> JSONResponse:
        return JSONResponse(service.audit)

    async def reset() -> dict[str, str]:
        service.reset()
        stream.reset()
        return {"status": "reset"}

    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route(f"{prefix}/audit", audit, methods=["GET"])
    app.add_api_route(f"{prefix}/reset", reset, methods=["POST"])
    for endpoint in service.endpoints:
        app.add_api_route(endpoint, _handler(service, endpoint, stream), methods=["POST"])

    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        path = request.url.path
        if path.startswith(prefix + "/") and path not in (f"{prefix}/audit", f"{prefix}/reset"):
            body, _ = _parse(await request.body())
            service.record(request.method, path, body, exc.status_code)
            stream.sync(service)
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)

    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
    return app


def read_config() -> dict[str, Any]:
    """The JSON object in the file ``sys.argv[1]``, which is deleted once read."""
    path = sys.argv[1]
    with open(path, encoding="utf-8") as fh:
        config = json.load(fh)
    os.unlink(path)
    return config


def main() -> None:
    """Read (and delete) the configuration file, build the service, serve it with uvicorn."""
    config = read_config()
    kind = config.get("kind", "?")
    try:
        target = config.get("target")
        if target:
            module, _, name = str(target).partition(":")
            cls = getattr(importlib.import_module(module), name)
            service = cls(config.get("fixtures"), config.get("faults"))
        else:
            service = make_service(kind, config.get("fixtures"), config.get("faults"))
        if config.get("restore"):
            service.restore(config["restore"])
    except FixtureError as exc:
        print(f"clawrig mock {kind}: bad fixtures: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    stream = AuditStream(config.get("audit_socket"), service, str(config.get("name") or ""))
    import uvicorn

    host, port = config.get("host", "127.0.0.1"), int(config["port"])
    print(f"clawrig mock {kind} serving on {host}:{port}", flush=True)
    uvicorn.run(
        create_app(service, stream),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
    )
