"""``web_search`` and ``web_fetch``, governed by the trial's :class:`WebPolicy` and served by the
job's web (:mod:`clawrig.web`: live, record, replay or corpus).

Both run on the harness side (sandboxes have no network, search keys stay on the host) and only
when the policy allows:

- ``mode="off"`` (default): an error result ``web access is disabled for this task``;
- any other mode: web_fetch checks the URL (http(s); when ``allow_hosts`` is not empty, the
  host, and every redirect's, must be one of them or a subdomain of one) and asks the trial's
  :class:`clawrig.web.WebSession` (``ToolContext.web_backend``; a live one when None) for the
  page; web_search asks it for a search (Brave or Tavily live, see
  :mod:`clawrig.web.providers`; a recorded reply; the corpus index).

web_fetch result (JSON, as OpenClaw's): ``{"url", "finalUrl", "status", "contentType",
"title", "extractMode", "truncated", "length", "text"}``. HTML is turned into markdown (links
as ``[text](href)``, headings as ``#``) or plain text by a small :class:`html.parser.HTMLParser`
extraction; text and JSON bodies are returned as they are; ``maxChars`` (default
:data:`DEFAULT_MAX_CHARS`) caps the text. web_search result: ``{"query", "provider",
"results": [{"title", "url", "description", "published"}]}``.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

from clawrig.egress.policy import ip_of
from clawrig.tools._common import error, json_result
from clawrig.tools.base import ToolContext, ToolResult, WebPolicy

DISABLED = "web access is disabled for this task"
DEFAULT_MAX_CHARS = 50_000
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")
HTML_TYPES = ("text/html", "application/xhtml+xml")


def _policy_error(policy: WebPolicy) -> ToolResult | None:
    if policy.mode == "off":
        return error(DISABLED)
    return None


def _session(ctx: ToolContext) -> Any:
    """The trial's web session; without one (a bare ToolContext), a live one."""
    if ctx.web_backend is None:
        from clawrig.web import WebService

        ctx.web_backend = WebService("live").session("", 0, None)
    return ctx.web_backend


def _internal(host: str) -> bool:
    if host == "localhost" or host.endswith((".localhost", ".local", ".internal")):
        return True
    ip = ip_of(host)
    return ip is not None and not ip.is_global


def named(policy: WebPolicy, host: str) -> bool:
    """True when ``allow_hosts`` names ``host`` itself (the task's choice, a local one too)."""
    return host.lower().rstrip(".") in {a.lower().strip().rstrip(".") for a in policy.allow_hosts}


def host_allowed(policy: WebPolicy, host: str) -> bool:
    """True when ``host`` may be reached under ``policy``.

    An empty allow list admits any public host. Loopback, private and link-local addresses
    (in any spelling a connection takes: :func:`clawrig.egress.policy.ip_of`) and
    ``localhost`` (the harness's own machine) are refused unless listed in ``allow_hosts`` by
    name. A name that resolves to such an address is refused when the page is fetched
    (:func:`clawrig.web.service.live_fetch`).
    """
    host = host.lower().rstrip(".")
    listed = False
    for allowed in policy.allow_hosts:
        a = allowed.lower().strip().rstrip(".")
        if host == a or host.endswith("." + a):
            listed = True
            break
    if _internal(host):
        return named(policy, host)
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


async def web_fetch(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Fetch ``url`` and extract readable text (see the module docstring).

    Errors (results): web access off, not an http(s) URL, host not allowed, connection failure
    or timeout, HTTP status >= 400, a binary content type, a page a replay has no record of.
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
    out = await _session(ctx).fetch(policy, url)
    if out.error:
        return error(out.error)
    ctype = out.content_type
    text = out.body.decode(out.charset or "utf-8", errors="replace")
    truncated = out.truncated
    if out.status >= 400:
        snippet = text[:300].strip()
        return error(
            f"web_fetch: {url} answered HTTP {out.status}" + (f": {snippet}" if snippet else ""),
            status=out.status,
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
            "finalUrl": out.final_url,
            "status": out.status,
            "contentType": ctype,
            "title": title,
            "extractMode": mode,
            "truncated": truncated,
            "length": len(text),
            "text": text,
        }
    )


async def web_search(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Search the web (see the module docstring).

    Errors (results): web access off, an unsupported provider, no API key, an empty query, an
    API failure (status and message), a search a replay has no record of.
    """
    from clawrig.web.providers import normalise_search

    policy = ctx.web
    refused = _policy_error(policy)
    if refused:
        return refused
    try:
        search = normalise_search(args)
    except ValueError as exc:
        return error(str(exc))
    out = await _session(ctx).search(policy, search)
    results, problem = out.parsed()
    if problem is not None:
        return error(problem)
    return json_result({"query": search["query"], "provider": out.provider, "results": results})


TOOLS = {"web_search": web_search, "web_fetch": web_fetch}
