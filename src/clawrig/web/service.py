"""The job's web: one :class:`WebService` per job (its mode), one :class:`WebSession` per trial.

Modes (``clawrig run --web MODE``; a task whose format forbids the web gets ``off`` anyway):

- ``off``: web_search and web_fetch answer ``web access is disabled for this task``;
- ``live``: they call the search provider (:mod:`clawrig.web.providers`) and fetch pages from
  the host (through its ``HTTP_PROXY``/``HTTPS_PROXY`` when set, ``NO_PROXY`` honoured); keys
  come from the host's environment and never enter a sandbox;
- ``record``: as live, and every exchange is recorded (:mod:`clawrig.web.records`) in the
  trial folder, bodies in the job folder's ``web_blobs/``;
- ``replay DIR``: answered only from DIR's records (a finished job folder); a request that was
  not recorded (a miss) is a tool error the agent sees (``--web-miss error``: the search or
  page is not in the recording; the query or URL is the model's choice, so a miss is its
  outcome, never a voided trial), or, with ``--web-miss live``, is done live, or with
  ``--web-miss empty`` gets no results / a 404. Every miss is counted (the trial's
  ``web_misses``, the summary's ``web.misses``), so a recording's gaps are visible. Served
  exchanges are recorded again, so a replayed job replays too (a miss answered with an error
  or empty is not recorded: it misses again);
- ``corpus DIR``: answered from a local collection (:class:`clawrig.web.corpus.Corpus`).

Outcomes are raw (provider JSON, page bytes); :mod:`clawrig.tools.web` turns them into tool
results the same way in every mode, so a replayed trial sees byte-identical tool results.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpcore
import httpx

from clawrig.choices import MISS_POLICIES, WEB_MODES
from clawrig.errors import UserError
from clawrig.net import env_proxy_mounts
from clawrig.web.providers import PROVIDERS
from clawrig.web.records import BLOB_DIR, BlobStore, WebRecorder, WebRecords, normalise_url

USER_AGENT = "clawrig-web-fetch/0.1 (+https://github.com/clawrig)"


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context (certifi's CA bundle, as httpx's default) shared by every web client:
    building one per client costs tens to hundreds of milliseconds."""
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


class HostNotAllowed(Exception):
    """A request (or redirect) to a host outside ``WebPolicy.allow_hosts``, or to a name that
    resolves to a local or private address: ``HostNotAllowed(host, why)``."""

    def __init__(self, host: str, why: str) -> None:
        super().__init__(host, why)
        self.host, self.why = host, why


@dataclass
class SearchOutcome:
    """A search's outcome: the provider's name and status and its raw reply ``body``, or the
    finished ``results`` (corpus, empty miss), or an ``error`` message for the tool."""

    provider: str
    status: int = 200
    body: bytes | None = None
    results: list[dict[str, Any]] | None = None
    error: str | None = None

    def parsed(self) -> tuple[list[dict[str, Any]] | None, str | None]:
        """(results, None) or (None, error message): the one place a reply becomes results."""
        if self.error:
            return None, self.error
        if self.results is not None:
            return self.results, None
        provider = PROVIDERS[self.provider]
        text = (self.body or b"").decode("utf-8", errors="replace")
        if self.status >= 400:
            return None, f"web_search: {provider.label} answered HTTP {self.status}: {text[:300]}"
        try:
            return provider.results(json.loads(text)), None
        except ValueError:
            return None, f"web_search: {provider.label} sent a reply that is not JSON"


@dataclass
class FetchOutcome:
    """A fetch's outcome: status, final URL, content type and charset, the body read (at
    most the policy's ``max_bytes``; ``truncated`` when cut), or an ``error`` message."""

    status: int = 0
    final_url: str = ""
    content_type: str = ""
    charset: str | None = None
    body: bytes = b""
    truncated: bool = False
    error: str | None = None

    def fields(self) -> dict[str, Any]:
        """The recorded response fields (everything but the body)."""
        return {
            "status": self.status,
            "final_url": self.final_url,
            "content_type": self.content_type,
            "charset": self.charset,
            "truncated": self.truncated,
            "error": self.error,
        }


async def _public_addresses(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (for TCP to ``port``), each once, in the resolver's
    order. Raises :class:`HostNotAllowed` when one is not public (loopback, private,
    link-local ...: a name can point at the harness's machine or its private network as an
    address can, ``localtest.me``) and OSError when the name does not resolve."""
    from clawrig.egress.policy import is_public_address

    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(i[4][0]) for i in infos))
    local = [a for a in addresses if not is_public_address(a)]
    if local:
        raise HostNotAllowed(host, f"it resolves to {local[0]}, a local or private address")
    return addresses


def _host_check(policy: Any):
    """The request hook of a live fetch: each request's host (the URL's and every
    redirect's) must be allowed (:func:`clawrig.tools.web.host_allowed`), and, unless the
    task names it in ``allow_hosts``, resolve to public addresses only
    (:func:`_public_addresses`). A direct connection is checked again where it is made, on the
    address it connects to (:class:`_PublicOnly`: a DNS answer that changes in between,
    rebinding, reaches nothing); through the host's HTTP proxy, the proxy resolves the name
    and this check is the only one."""
    from clawrig.tools.web import host_allowed, named

    async def check(request: httpx.Request) -> None:
        host = request.url.host
        if not host_allowed(policy, host):
            raise HostNotAllowed(host, "not allowed for this task")
        if named(policy, host):
            return
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        with contextlib.suppress(OSError):  # (no address: httpx says it cannot connect)
            await _public_addresses(host, port)

    return check


class _PublicOnly(httpcore.AsyncNetworkBackend):
    """httpcore's network backend for a live fetch's direct connections: a host the task does
    not name in ``allow_hosts`` is resolved here and connected to by an address just checked
    (:func:`_public_addresses`), so the address checked is the address reached. TLS still
    names the host (httpcore's ``server_hostname``: SNI and the certificate's check)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        from clawrig.tools.web import named

        if named(self.policy, host):
            return await self.inner.connect_tcp(host, port, timeout, local_address, socket_options)
        try:
            addresses = await _public_addresses(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(f"{host}: {exc.strerror or exc}") from exc
        failed: Exception = httpcore.ConnectError(f"{host}: no address")
        for address in addresses:
            try:
                return await self.inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                failed = exc
        raise failed

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        return await self.inner.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class PublicOnlyTransport(httpx.AsyncHTTPTransport):
    """httpx's transport whose connections are made by :class:`_PublicOnly` (``policy``: the
    trial's web policy). httpx takes no network backend, so its connection pool is replaced
    by one made the way httpx makes it (its default limits) with that backend."""

    def __init__(self, policy: Any) -> None:
        super().__init__(verify=tls_context())
        limits = httpx.Limits()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_PublicOnly(policy),
        )


async def live_fetch(policy: Any, url: str) -> FetchOutcome:
    """GET ``url`` from the host under ``policy`` (redirects followed, each host checked;
    at most ``max_bytes`` read within ``timeout_s`` seconds). Never raises for a network
    problem: it is the outcome's ``error``."""

    async def go() -> FetchOutcome:
        async with httpx.AsyncClient(
            follow_redirects=True,
            transport=PublicOnlyTransport(policy),
            mounts=env_proxy_mounts(verify=tls_context()),  # (as without a transport)
            timeout=httpx.Timeout(policy.timeout_s),
            headers={"User-Agent": USER_AGENT, "Accept": "text/html,application/json,text/*;q=0.9"},
            event_hooks={"request": [_host_check(policy)]},
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
                ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
                return FetchOutcome(
                    status=resp.status_code,
                    final_url=str(resp.url),
                    content_type=ctype,
                    charset=resp.charset_encoding,
                    body=bytes(body),
                    truncated=truncated,
                )

    try:
        return await asyncio.wait_for(go(), policy.timeout_s)
    except HostNotAllowed as exc:
        return FetchOutcome(error=f"web_fetch: host {exc.host} (of {url} or a redirect): {exc.why}")
    except (TimeoutError, httpx.TimeoutException):
        return FetchOutcome(error=f"web_fetch: {url} did not answer within {policy.timeout_s:g} s")
    except httpx.HTTPError as exc:
        return FetchOutcome(error=f"web_fetch: could not fetch {url}: {type(exc).__name__}: {exc}")


async def live_search(policy: Any, search: dict[str, Any]) -> SearchOutcome:
    """Ask the policy's provider (``search_provider``) for a normalised search, with the key
    from ``search_api_key`` or the provider's environment variable (on the host)."""
    provider = PROVIDERS.get(policy.search_provider)
    if provider is None:
        return SearchOutcome(
            policy.search_provider,
            error=f"web_search: provider {policy.search_provider!r} is not supported "
            f"({', '.join(PROVIDERS)})",
        )
    key = policy.search_api_key or os.environ.get(provider.key_env)
    if not key:
        return SearchOutcome(
            provider.name,
            error=f"web_search: no search API key is configured (set {provider.key_env} or the "
            "web policy's search_api_key); use web_fetch on a known URL instead",
        )
    endpoint = (
        policy.search_endpoint or os.environ.get(provider.endpoint_env) or provider.default_endpoint
    )
    try:
        async with httpx.AsyncClient(
            verify=tls_context(), timeout=httpx.Timeout(policy.timeout_s)
        ) as client:
            resp = await client.request(**provider.request(search, key, endpoint))
    except httpx.HTTPError as exc:
        return SearchOutcome(
            provider.name,
            error=f"web_search: the search request failed: {type(exc).__name__}: {exc}",
        )
    return SearchOutcome(provider.name, status=resp.status_code, body=resp.content)


class WebService:
    """The job's web settings and shared state (replay records, corpus index, blob store).

    ``mode``: one of :data:`WEB_MODES` (``on`` is read as ``live``); ``source``: the folder of
    ``replay`` (a recorded job) or ``corpus`` (a collection); ``output``: the job folder
    (record and replay store bodies in its ``web_blobs/``); ``miss``: error | live | empty
    (replay only); ``provider``: the live search provider. Raises UserError (one line, naming
    the flag) for a bad combination or an unreadable source.
    """

    def __init__(
        self,
        mode: str = "off",
        *,
        source: Path | str | None = None,
        output: Path | str | None = None,
        miss: str = "error",
        provider: str = "brave",
    ) -> None:
        mode = "live" if mode == "on" else mode
        if mode not in WEB_MODES:
            raise UserError(f"--web: unknown mode {mode!r} (choose from {', '.join(WEB_MODES)})")
        if miss not in MISS_POLICIES:
            raise UserError(f"--web-miss: choose from {', '.join(MISS_POLICIES)}")
        if provider not in PROVIDERS:
            raise UserError(f"--web-provider: choose from {', '.join(PROVIDERS)}")
        if mode in ("replay", "corpus") and source is None:
            raise UserError(f"--web {mode}: give its folder with --web-dir DIR")
        if mode not in ("replay", "corpus") and source is not None:
            raise UserError(
                f"--web-dir: only --web replay and --web corpus take a folder, not {mode}"
            )
        self.mode = mode
        self.source = Path(source) if source is not None else None
        self.output = Path(output) if output is not None else None
        self.miss = miss
        self.provider = provider
        self.records: WebRecords | None = None
        self.corpus: Any = None
        if mode == "replay":
            self.records = WebRecords(self.source)  # type: ignore[arg-type]
        elif mode == "corpus":
            from clawrig.web.corpus import Corpus

            self.corpus = Corpus(self.source)  # type: ignore[arg-type]
        self.blobs = BlobStore(self.output / BLOB_DIR) if self.output is not None else None

    @classmethod
    def for_job(cls, config: Any) -> WebService:
        """The web of a job (a :class:`clawrig.spec.job.JobConfig`): ``trial.web``,
        ``web_dir`` (for replay, default the job's ``replay`` folder), ``web_miss``,
        ``web_provider``; bodies recorded under ``output``. Raises UserError as the
        constructor does."""
        mode = config.trial.web
        web_dir = config.web_dir
        if mode == "replay" and web_dir is None:
            web_dir = getattr(config, "replay", None)  # the whole run from one folder
        return cls(
            mode,
            source=web_dir,  # a folder given to a mode that takes none is refused
            output=config.output,
            miss=config.web_miss,
            provider=config.web_provider,
        )

    @property
    def records_calls(self) -> bool:
        """True when trials record their exchanges (record, replay)."""
        return self.mode in ("record", "replay") and self.blobs is not None

    def key_problem(self) -> str | None:
        """One line when live calls will find no search key on this host, else None."""
        if self.mode not in ("live", "record") and not (
            self.mode == "replay" and self.miss == "live"
        ):
            return None
        prov = PROVIDERS[self.provider]
        if os.environ.get(prov.key_env):
            return None
        return (
            f"--web {self.mode}: {prov.key_env} is not set: web_search will answer an error "
            "(web_fetch still works)"
        )

    def describe(self) -> dict[str, Any]:
        """The settings for the job summary: mode, provider, source, miss policy."""
        return {
            "mode": self.mode,
            "provider": self.provider if self.mode in ("live", "record") else None,
            "source": str(self.source) if self.source else None,
            "miss": self.miss if self.mode == "replay" else None,
        }

    def session(self, task_id: str, run_index: int, record_dir: Path | None) -> WebSession:
        """The trial's web: records go to ``record_dir/web_calls.jsonl`` (record, replay)."""
        from clawrig.web.records import WEB_RECORD_FILE

        recorder = None
        if self.records_calls and record_dir is not None:
            recorder = WebRecorder(record_dir / WEB_RECORD_FILE, self.blobs, task_id, run_index)  # type: ignore[arg-type]
        return WebSession(self, task_id, run_index, recorder)


class WebSession:
    """One trial's web (what :attr:`clawrig.tools.base.ToolContext.web_backend` holds).

    :meth:`search` and :meth:`fetch` return raw outcomes (see the module docs); a replay miss
    under ``--web-miss error`` is an outcome with ``error`` set (a tool error). ``misses``:
    the requests ``--web replay`` did not hold, in order (``"search 'query'"``,
    ``"page URL"``), whatever the miss policy."""

    def __init__(
        self, service: WebService, task_id: str, run_index: int, recorder: WebRecorder | None
    ) -> None:
        self.service = service
        self.task_id = task_id
        self.run_index = run_index
        self.recorder = recorder
        self.misses: list[str] = []

    @property
    def scope(self) -> str:
        return f"{self.task_id}#{self.run_index}"

    def _miss(self, kind: str, what: str) -> str:
        """Count a miss; the tool error ``--web-miss error`` answers with."""
        self.misses.append(f"{kind} {what}")
        tool = "web_search" if kind == "search" else "web_fetch"
        return (
            f"{tool}: no recorded {kind} for {what}: this run's web is a recording (--web replay)"
        )

    async def search(self, policy: Any, search: dict[str, Any]) -> SearchOutcome:
        """The outcome of a normalised search
        (:func:`clawrig.web.providers.normalise_search`)."""
        svc = self.service
        if svc.mode == "corpus":
            return SearchOutcome(
                "corpus", results=svc.corpus.search(search["query"], search["count"])
            )
        if svc.mode == "replay":
            rec = svc.records.take("search", search, self.scope)  # type: ignore[union-attr]
            why = None if rec is not None else self._miss("search", repr(search["query"]))
            if rec is not None:
                out = SearchOutcome(
                    rec.get("provider") or "brave",
                    status=int(rec.get("status") or 0),
                    body=svc.records.body(rec),  # type: ignore[union-attr]
                    error=rec.get("error"),
                )
            elif svc.miss == "empty":
                return SearchOutcome("replay", results=[])
            elif svc.miss == "live":
                out = await live_search(policy, search)
            else:
                return SearchOutcome("replay", error=why)
        else:
            out = await live_search(policy, search)
        if self.recorder is not None and (out.body is not None or out.error):
            self.recorder.add(
                "search",
                search,
                {"provider": out.provider, "status": out.status, "error": out.error},
                out.body,
            )
        return out

    async def fetch(self, policy: Any, url: str) -> FetchOutcome:
        """The outcome of fetching ``url`` (already checked against the policy's hosts)."""
        svc = self.service
        request = {"url": normalise_url(url)}
        if svc.mode == "corpus":
            page = svc.corpus.page(url)
            if page is None:
                return FetchOutcome(
                    status=404, final_url=url, content_type="text/plain",
                    body=b"not in the corpus",
                )  # fmt: skip
            return FetchOutcome(status=200, final_url=url, content_type=page[0], body=page[1])
        if svc.mode == "replay":
            rec = svc.records.take("fetch", request, self.scope)  # type: ignore[union-attr]
            why = None if rec is not None else self._miss("page", url)
            if rec is not None:
                out = FetchOutcome(
                    status=int(rec.get("status") or 0),
                    final_url=rec.get("final_url") or "",
                    content_type=rec.get("content_type") or "",
                    charset=rec.get("charset"),
                    body=svc.records.body(rec) or b"",  # type: ignore[union-attr]
                    truncated=bool(rec.get("truncated")),
                    error=rec.get("error"),
                )
            elif svc.miss == "empty":
                return FetchOutcome(
                    status=404, final_url=url, content_type="text/plain", body=b"not recorded"
                )
            elif svc.miss == "live":
                out = await live_fetch(policy, url)
            else:
                return FetchOutcome(final_url=url, error=why)
        else:
            out = await live_fetch(policy, url)
        if self.recorder is not None:
            self.recorder.add("fetch", request, out.fields(), None if out.error else out.body)
        return out


def web_session(
    service: WebService | None,
    mode: str,
    task: Any,
    run_index: int,
    record_dir: Path | None,
    output: Path | None,
) -> WebSession | None:
    """A trial's web session: None when the task's web is off (``mode`` off, or the task does
    not allow the web); else a session of the job's ``service``, or, without one, of a new
    live or recording service (``output``: the job folder for recorded bodies). Raises
    UserError for replay or corpus without a service (they need their folder)."""
    if mode == "off" or not getattr(task, "web_allowed", False):
        return None
    if service is None:
        if mode not in ("on", "live", "record"):
            raise UserError(f"--web {mode}: the job has no web service (give --web-dir DIR)")
        service = WebService(mode, output=output)
    return service.session(task.id, run_index, record_dir)


def web_summary(config: Any, results: Any = ()) -> dict[str, Any]:
    """The job summary's ``web`` entry from a JobConfig: ``mode``, ``dir``, ``miss``,
    ``provider`` (what answered web_search and web_fetch) and, for replay, ``misses``: the
    requests the recording did not hold, summed over ``results`` (TrialResults). ``dir`` is
    absolute, as the summary's ``replayed_from`` (it was as typed: helper-204)."""
    mode = "live" if config.trial.web == "on" else config.trial.web
    web_dir = getattr(config, "web_dir", None)
    shown = mode in ("replay", "corpus")
    return {
        "mode": mode,
        "dir": str(Path(web_dir).resolve()) if web_dir is not None and shown else None,
        "miss": getattr(config, "web_miss", "error") if mode == "replay" else None,
        "provider": getattr(config, "web_provider", "brave")
        if mode in ("live", "record")
        else None,
        "misses": sum(r.web_misses for r in results) if mode == "replay" else None,
    }
