"""Replies written by hand by the tests' stdlib HTTP servers (the ``provider`` fixture):
a status line and headers, then a body at once or however the test writes it."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


def start_reply(
    h: BaseHTTPRequestHandler, length: int | None, content_type: str = "application/json"
) -> None:
    """Send 200, ``content-type`` and (unless None) ``content-length``; the body is the
    caller's to write."""
    h.send_response(200)
    h.send_header("content-type", content_type)
    if length is not None:
        h.send_header("content-length", str(length))
    h.end_headers()


def send_body(
    h: BaseHTTPRequestHandler, body: bytes, content_type: str = "application/json"
) -> None:
    """A whole 200 reply: ``body`` with its length."""
    start_reply(h, len(body), content_type)
    h.wfile.write(body)
