"""A loopback web for web tests (the ``web_server`` fixture is in conftest.py): one FastAPI
server on 127.0.0.1 that speaks the Brave Search
API (``GET /res/v1/web/search`` with ``X-Subscription-Token``), the Tavily API (``POST /search``
with ``Authorization: Bearer``) and serves a few pages, also as the host's forward HTTP proxy
(``HTTP_PROXY``: a request for ``http://any.host/tern.html`` gets the page). It counts every
request, so a test can show a replay made none."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

BRAVE_KEY = "brave-test-key"
TAVILY_KEY = "tavily-test-key"
PAGES = {
    "/tern.html": (
        "text/html; charset=utf-8",
        "<html><head><title>Tern 4.2</title></head><body><h1>Tern 4.2</h1>"
        "<p>Released on 2026-03-02 with offline mode.</p></body></html>",
    ),
    "/notes.txt": ("text/plain", "tern changelog: offline mode, purge --apply"),
}
DOCS = [
    ("Tern 4.2 release", "/tern.html", "Tern 4.2 was <strong>released</strong> in March."),
    ("Tern changelog", "/notes.txt", "Offline mode and purge."),
    ("Unrelated", "/other", "Weather today."),
]


@dataclass
class WebServer:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    page_base: str = ""
    """Where search results point (default: this server's URL)."""


def _hits(query: str, count: int) -> list[tuple[str, str, str]]:
    words = set(re.findall(r"\w+", query.lower()))
    hits = [d for d in DOCS if words & set(re.findall(r"\w+", (d[0] + " " + d[2]).lower()))]
    return hits[:count]


def build_app(state: WebServer) -> Any:
    app = FastAPI()

    async def forward_proxy(scope: dict, receive: Any, send: Any) -> None:
        """A proxied request names an absolute URL: serve its path."""
        if scope["type"] == "http" and scope["path"].startswith(("http://", "https://")):
            url = urlsplit(scope["path"])
            path = url.path or "/"
            scope = {
                **scope,
                "path": path,
                "raw_path": path.encode(),
                "query_string": url.query.encode(),
            }
        await app(scope, receive, send)

    @app.get("/res/v1/web/search")
    async def brave(
        request: Request, x_subscription_token: str | None = Header(default=None)
    ) -> Response:
        q = dict(request.query_params)
        state.requests.append({"api": "brave", "params": q, "token": x_subscription_token})
        if x_subscription_token != BRAVE_KEY:
            return JSONResponse(
                {"type": "ErrorResponse", "error": {"code": "SUBSCRIPTION_TOKEN_INVALID"}}, 422
            )
        results = [
            {
                "title": t,
                "url": (state.page_base or state.url) + p,
                "description": d,
                "age": "March 2, 2026",
            }
            for t, p, d in _hits(q.get("q", ""), int(q.get("count", 20)))
        ]
        return JSONResponse(
            {
                "type": "search",
                "query": {"original": q.get("q")},
                "web": {"type": "search", "results": results},
            }
        )

    @app.post("/search")
    async def tavily(
        request: Request, authorization: str | None = Header(default=None)
    ) -> Response:
        body = await request.json()
        state.requests.append({"api": "tavily", "body": body, "token": authorization})
        if authorization != f"Bearer {TAVILY_KEY}":
            return JSONResponse(
                {"detail": {"error": "Unauthorized: missing or invalid API key."}}, 401
            )
        results = [
            {
                "title": t,
                "url": (state.page_base or state.url) + p,
                "content": re.sub("<[^>]+>", "", d),
                "score": 0.9,
            }
            for t, p, d in _hits(body["query"], int(body.get("max_results", 5)))
        ]
        return JSONResponse(
            {"query": body["query"], "answer": None, "results": results, "response_time": 0.01}
        )

    @app.get("/{path:path}")
    async def page(path: str) -> Response:
        state.requests.append({"api": "page", "path": "/" + path})
        if "/" + path in PAGES:
            ctype, text = PAGES["/" + path]
            return Response(text.encode(), media_type=ctype)
        return PlainTextResponse("no such page", 404)

    return forward_proxy
