"""Serve a saved audit during grading: the standard library only (runs on plain python3).

Used for services started by a command (not built in), whose state cannot be rebuilt: after the
agent has finished, graders written the upstream way still ``GET http://localhost:<port>/<svc>/
audit`` and get the audit saved when the agent finished. Configuration: a JSON
file named by the first argument, deleted once read::

    {"port": 9100, "audit_path": "/gmail/audit", "health_path": "/health", "audit": {...}}

``GET audit_path`` -> the saved audit; ``GET health_path`` -> ``{"status": "ok"}``; anything
else -> 503 ``{"error": "..."}`` (the service itself stopped when the agent finished).
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as fh:
        config = json.load(fh)
    os.unlink(sys.argv[1])
    audit = json.dumps(config.get("audit")).encode("ascii")  # lone surrogates escaped
    audit_path, health_path = config["audit_path"], config.get("health_path", "/health")

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path = self.path.split("?", 1)[0]
            if path == audit_path:
                self._reply(200, audit)
            elif path == health_path:
                self._reply(200, b'{"status": "ok"}')
            else:
                self._unavailable()

        def do_POST(self) -> None:  # noqa: N802
            self._unavailable()

        def _unavailable(self) -> None:
            msg = {"error": "the service stopped when the agent finished; only its audit is served"}
            self._reply(503, json.dumps(msg).encode("utf-8"))

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", int(config["port"])), Handler)
    print(f"clawrig audit replay on 127.0.0.1:{config['port']}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
