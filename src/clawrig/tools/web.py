"""``web_search`` and ``web_fetch``, governed by the trial's :class:`WebPolicy`.

Both run on the harness side (sandboxes have no network) and only when the policy allows:

- ``mode="off"`` (default): an error result ``web access is disabled for this task``;
- ``mode="on"``: web_fetch fetches with httpx, reading at most ``max_bytes`` bytes of the body
  within ``timeout_s`` seconds; when ``allow_hosts`` is not empty, the URL's host (and every
  redirect's) must be one of them or a subdomain of one. web_search asks the Brave Search API
  (``search_provider="brave"``) with ``search_api_key`` or the ``BRAVE_API_KEY`` environment
  variable; without a key it is a clear error.

web_fetch result (JSON, as OpenClaw's): ``{"url", "finalUrl", "status", "contentType",
"title", "extractMode", "truncated", "length", "text"}``. HTML is turned into markdown (links
as ``[text](href)``, headings as ``#``) or plain text by a small :class:`html.parser.HTMLParser`
extraction; text and JSON bodies are returned as they are; ``maxChars`` (default
:data:`DEFAULT_MAX_CHARS`) caps the text. web_search result: ``{"query", "provider",
"results": [{"title", "url", "description", "published"}]}``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

import httpx

from clawrig.tools._common import error, json_result
from clawrig.tools.base import ToolContext, ToolResult, WebPolicy

DISABLED = "web access is disabled for this task"
DEFAULT_MAX_CHARS = 50_000
BRAVE_ENDPOINT = "https://api.search.brave.com/res/v1/web/search"
BRAVE_ENDPOINT_ENV = "CLAWRIG_BRAVE_ENDPOINT"
"""Environment variable overriding :data:`BRAVE_ENDPOINT` (a proxy or a recorded replay)."""
USER_AGENT = "clawrig-web-fetch/0.1 (+https://github.com/clawrig)"
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")
HTML_TYPES = ("text/html", "application/xhtml+xml")


class HostNotAllowed(Exception):
    """A request (or redirect) to a host outside ``WebPolicy.allow_hosts``."""


def _policy_error(policy: WebPolicy) -> ToolResult | None:
    if policy.mode == "off":
        return error(DISABLED)
    if policy.mode != "on":
        return error(f"web access mode {policy.mode!r} is not supported here ({DISABLED})")
    return None


def _internal(host: str) -> bool:
    if host == "localhost" or host.endswith((".localhost", ".local", ".internal")):
        return True
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return not ip.is_global


def host_allowed(policy: WebPolicy, host: str) -> bool:
    """True when ``host`` may be reached under ``policy``.

    An empty allow list admits any public host. Loopback, private and link-local addresses
    and ``localhost`` (the harness's own machine) are refused unless listed in
    ``allow_hosts`` by name.
    """
    host = host.lower().rstrip(".")
    listed = False
    for allowed in policy.allow_hosts:
        a = allowed.lower().strip().rstrip(".")
        if host == a or host.endswith("." + a):
            listed = True
            break
    if _internal(host):
        return host in {a.lower().strip().rstrip(".") for a in policy.allow_hosts}
    return listed or not policy.allow_hosts


# -- HTML extraction -----------------------------------------------------------------------

_PRE_START, _PRE_END = "\ue000", "\ue001"  # private-use marks around <pre> text
_SKIP = {"script", "style", "noscript", "template", "svg", "head", "iframe", "canvas"}
_BLOCK = {
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "ul", "ol",
    "table", "tr", "blockquote", "form", "figure", "figcaption", "dl", "dt", "dd", "hr",
}  # fmt: skip


class _Extractor(HTMLParser):
    def __init__(self, markdown: bool):
        super().__init__(convert_charrefs=True)
        self.markdown = markdown
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False
        self._pre = 0
        self._links: list[str | None] = []

    def _nl(self, n: int = 2) -> None:
        self.parts.append("\n" * n)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
            return
        if tag in _SKIP:
            self._skip += 1
            return
        if self._skip:
            return
        if re.fullmatch(r"h[1-6]", tag):
            self._nl()
            if self.markdown:
                self.parts.append("#" * int(tag[1]) + " ")
        elif tag == "li":
            self._nl(1)
            self.parts.append("- ")
        elif tag in ("br",):
            self._nl(1)
        elif tag in _BLOCK:
            self._nl()
        elif tag == "pre":
            self._pre += 1
            self._nl()
            if self.markdown:
                self.parts.append("```\n")
            self.parts.append(_PRE_START)
        elif tag == "code" and self.markdown and not self._pre:
            self.parts.append("`")
        elif tag in ("td", "th"):
            self.parts.append(" | " if self.markdown else "\t")
        elif tag == "a":
            href = dict(attrs).get("href")
            self._links.append(href)
            if self.markdown and href and not href.startswith(("#", "javascript:")):
                self.parts.append("[")
        elif tag in ("strong", "b") and self.markdown:
            self.parts.append("**")
        elif tag in ("em", "i") and self.markdown:
            self.parts.append("*")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            return
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
            return
        if self._skip:
            return
        if re.fullmatch(r"h[1-6]", tag) or tag in _BLOCK:
            self._nl()
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
            self.parts.append(_PRE_END)
            if self.markdown:
                self.parts.append("\n```")
            self._nl()
        elif tag == "code" and self.markdown and not self._pre:
            self.parts.append("`")
        elif tag == "a":
            href = self._links.pop() if self._links else None
            if self.markdown and href and not href.startswith(("#", "javascript:")):
                self.parts.append(f"]({href})")
        elif tag in ("strong", "b") and self.markdown:
            self.parts.append("**")
        elif tag in ("em", "i") and self.markdown:
            self.parts.append("*")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
            return
        if self._skip:
            return
        if self._pre:
            self.parts.append(data)
        else:
            self.parts.append(re.sub(r"\s+", " ", data))

    def text(self) -> str:
        out = []
        for i, seg in enumerate(re.split("[\ue000\ue001]", "".join(self.parts))):
            if i % 2:  # inside <pre>: kept as it is
                out.append(seg)
            else:
                out.append("\n".join(line.strip() for line in seg.split("\n")))
        return re.sub(r"\n{3,}", "\n\n", "".join(out)).strip()


def html_to_text(html: str, markdown: bool = True) -> tuple[str, str]:
    """(title, readable text) of an HTML page; markdown keeps headings, links, emphasis."""
    parser = _Extractor(markdown)
    parser.feed(html)
    parser.close()
    return re.sub(r"\s+", " ", parser.title).strip(), parser.text()


# -- tools ---------------------------------------------------------------------------------


async def _fetch(policy: WebPolicy, url: str) -> tuple[httpx.Response, bytes, bool]:
    async def check(request: httpx.Request) -> None:
        if not host_allowed(policy, request.url.host):
            raise HostNotAllowed(request.url.host)

    async with httpx.AsyncClient(
        follow_redirects=True,
        timeout=httpx.Timeout(policy.timeout_s),
        headers={"User-Agent": USER_AGENT, "Accept": "text/html,application/json,text/*;q=0.9"},
        event_hooks={"request": [check]},
    ) as client:
        async with client.stream("GET", url) as resp:
            body = bytearray()
            truncated = False
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > policy.max_bytes:
                    del body[policy.max_bytes :]
                    truncated = True
                    break
            return resp, bytes(body), truncated


async def web_fetch(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Fetch ``url`` and extract readable text (see the module docstring).

    Errors: web access off, not an http(s) URL, host not allowed, connection failure or
    timeout, HTTP status >= 400, a binary content type.
    """
    policy = ctx.web
    refused = _policy_error(policy)
    if refused:
        return refused
    url = args["url"].strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return error(f"web_fetch: {url!r} is not an http(s) URL")
    if not host_allowed(policy, parts.hostname):
        return error(f"web_fetch: host {parts.hostname} is not allowed for this task")
    mode = args.get("extractMode") or "markdown"
    max_chars = int(args.get("maxChars") or DEFAULT_MAX_CHARS)
    try:
        resp, body, truncated = await asyncio.wait_for(_fetch(policy, url), policy.timeout_s)
    except HostNotAllowed as exc:
        return error(f"web_fetch: redirected to host {exc} which is not allowed for this task")
    except (TimeoutError, httpx.TimeoutException):
        return error(f"web_fetch: {url} did not answer within {policy.timeout_s:g} s")
    except httpx.HTTPError as exc:
        return error(f"web_fetch: could not fetch {url}: {type(exc).__name__}: {exc}")
    ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
    text = body.decode(resp.charset_encoding or "utf-8", errors="replace")
    if resp.status_code >= 400:
        snippet = text[:300].strip()
        return error(
            f"web_fetch: {url} answered HTTP {resp.status_code}"
            + (f": {snippet}" if snippet else ""),
            status=resp.status_code,
        )
    title = ""
    if ctype in HTML_TYPES or (not ctype and "<html" in text[:2000].lower()):
        title, text = html_to_text(text, markdown=mode == "markdown")
    elif ctype and not ctype.startswith(TEXT_TYPES) and not ctype.endswith(("+json", "+xml")):
        return error(f"web_fetch: {url} is {ctype}, not a text or HTML page")
    if len(text) > max_chars:
        text = text[:max_chars]
        truncated = True
    return json_result(
        {
            "url": url,
            "finalUrl": str(resp.url),
            "status": resp.status_code,
            "contentType": ctype,
            "title": title,
            "extractMode": mode,
            "truncated": truncated,
            "length": len(text),
            "text": text,
        }
    )


async def web_search(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Search through the Brave Search API (see the module docstring).

    Errors: web access off, an unsupported provider, no API key, an empty query, an API
    failure (status and message).
    """
    policy = ctx.web
    refused = _policy_error(policy)
    if refused:
        return refused
    if policy.search_provider != "brave":
        return error(f"web_search: provider {policy.search_provider!r} is not supported (brave)")
    key = policy.search_api_key or os.environ.get("BRAVE_API_KEY")
    if not key:
        return error(
            "web_search: no search API key is configured (set BRAVE_API_KEY or the web "
            "policy's search_api_key); use web_fetch on a known URL instead"
        )
    query = args["query"].strip()
    if not query:
        return error("web_search: `query` is empty")
    params: dict[str, Any] = {"q": query, "count": int(args.get("count") or 5)}
    if args.get("region"):
        params["country"] = args["region"]
    if args.get("safeSearch"):
        params["safesearch"] = args["safeSearch"]
    endpoint = policy.search_endpoint or os.environ.get(BRAVE_ENDPOINT_ENV) or BRAVE_ENDPOINT
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(policy.timeout_s)) as client:
            resp = await client.get(
                endpoint,
                params=params,
                headers={"Accept": "application/json", "X-Subscription-Token": key},
            )
    except httpx.HTTPError as exc:
        return error(f"web_search: the search request failed: {type(exc).__name__}: {exc}")
    if resp.status_code >= 400:
        return error(
            f"web_search: Brave Search answered HTTP {resp.status_code}: {resp.text[:300]}"
        )
    try:
        data = resp.json()
    except ValueError:
        return error("web_search: Brave Search sent a reply that is not JSON")
    results = [
        {
            "title": r.get("title", ""),
            "url": r.get("url", ""),
            "description": re.sub(r"<[^>]+>", "", r.get("description", "")),
            "published": r.get("age") or r.get("page_age"),
        }
        for r in (data.get("web") or {}).get("results", [])
    ]
    return json_result({"query": query, "provider": "brave", "results": results})


TOOLS = {"web_search": web_search, "web_fetch": web_fetch}
