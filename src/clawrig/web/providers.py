"""Search providers with a documented HTTP API, called from the host (keys never enter a sandbox).

- **Brave Search** (WildClawBench's provider): ``GET {endpoint}?q=&count=&country=&safesearch=``
  with the header ``X-Subscription-Token: <BRAVE_API_KEY>``; the reply is JSON whose
  ``web.results[]`` items carry ``title``, ``url``, ``description`` (with ``<strong>`` marks)
  and ``age`` / ``page_age``. Default endpoint ``https://api.search.brave.com/res/v1/web/search``.
- **Tavily**: ``POST {endpoint}`` with a JSON body ``{"query", "max_results", "search_depth"}``
  and ``Authorization: Bearer <TAVILY_API_KEY>``; the reply's ``results[]`` items carry
  ``title``, ``url``, ``content`` and optionally ``published_date``. Default endpoint
  ``https://api.tavily.com/search``.

Each endpoint can be overridden by an environment variable (``CLAWRIG_BRAVE_ENDPOINT``,
``CLAWRIG_TAVILY_ENDPOINT``) or :attr:`clawrig.tools.base.WebPolicy.search_endpoint`, so tests
point them at a loopback server speaking the same shape. Every provider's results are turned
into the one shape web_search returns: ``{"title", "url", "description", "published"}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

SEARCH_QUERY_KEYS = ("query", "count", "country", "safesearch")
"""The fields of a normalised search request (what a recorded search is keyed by)."""


def normalise_search(args: dict[str, Any]) -> dict[str, Any]:
    """The normalised request of web_search's arguments: ``query`` with runs of white space
    made one space, ``count`` an int (default 5), ``country`` upper case, ``safesearch`` lower
    case (None when absent). Raises ValueError for an empty query."""
    query = " ".join(str(args.get("query") or "").split())
    if not query:
        raise ValueError("web_search: `query` is empty")
    country = args.get("region") or args.get("country")
    safe = args.get("safeSearch") or args.get("safesearch")
    return {
        "query": query,
        "count": int(args.get("count") or 5),
        "country": str(country).upper() if country else None,
        "safesearch": str(safe).lower() if safe else None,
    }


@dataclass(frozen=True)
class Provider:
    """One search provider: its name, display label, key variable and default endpoint."""

    name: str
    label: str
    key_env: str
    endpoint_env: str
    default_endpoint: str

    def request(self, search: dict[str, Any], key: str, endpoint: str) -> dict[str, Any]:
        """Keyword arguments of ``httpx.AsyncClient.request`` for a normalised search."""
        if self.name == "brave":
            params: dict[str, Any] = {"q": search["query"], "count": search["count"]}
            if search.get("country"):
                params["country"] = search["country"]
            if search.get("safesearch"):
                params["safesearch"] = search["safesearch"]
            headers = {"Accept": "application/json", "X-Subscription-Token": key}
            return {"method": "GET", "url": endpoint, "params": params, "headers": headers}
        body = {"query": search["query"], "max_results": search["count"], "search_depth": "basic"}
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        return {"method": "POST", "url": endpoint, "json": body, "headers": headers}

    def results(self, data: Any) -> list[dict[str, Any]]:
        """The provider's reply (parsed JSON) as web_search results. Raises ValueError when the
        reply is not the provider's shape."""
        if not isinstance(data, dict):
            raise ValueError(f"{self.label} sent a reply that is not a JSON object")
        if self.name == "brave":
            items = (data.get("web") or {}).get("results", [])
            return [
                {
                    "title": r.get("title", ""),
                    "url": r.get("url", ""),
                    "description": re.sub(r"<[^>]+>", "", r.get("description", "")),
                    "published": r.get("age") or r.get("page_age"),
                }
                for r in items
                if isinstance(r, dict)
            ]
        return [
            {
                "title": r.get("title", ""),
                "url": r.get("url", ""),
                "description": r.get("content", ""),
                "published": r.get("published_date"),
            }
            for r in data.get("results", [])
            if isinstance(r, dict)
        ]


PROVIDERS: dict[str, Provider] = {
    "brave": Provider(
        "brave",
        "Brave Search",
        "BRAVE_API_KEY",
        "CLAWRIG_BRAVE_ENDPOINT",
        "https://api.search.brave.com/res/v1/web/search",
    ),
    "tavily": Provider(
        "tavily",
        "Tavily",
        "TAVILY_API_KEY",
        "CLAWRIG_TAVILY_ENDPOINT",
        "https://api.tavily.com/search",
    ),
}
"""The search providers web_search can call live, by name."""
