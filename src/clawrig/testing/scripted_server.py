"""A scripted OpenAI-compatible chat server on loopback: the LLM stand-in for tests and demos.

It is a real FastAPI + uvicorn server on ``127.0.0.1`` (a free port picked by the OS), run in a
background thread so sync tests, async tests and benchmarks can all use it. Clients talk to it
over HTTP with the real ``openai`` SDK. It serves

- ``POST /v1/chat/completions``: non-streaming, and streaming (SSE, ``data: {...}`` lines ending
  with ``data: [DONE]``; with ``stream_options.include_usage`` a last chunk with empty
  ``choices`` carries ``usage``). Tool calls are streamed in OpenAI's delta shape (first delta
  per call: ``index``, ``id``, ``type``, ``function.name``; then ``function.arguments`` pieces).
- ``GET /v1/models``: the configured model ids.

A malformed chat request is answered as the OpenAI API answers it, before any scripted reply is
used (it is still recorded in ``.requests``): HTTP 400 with ``{"error": {"message", "type":
"invalid_request_error", "param", "code"}}`` for a body that is not a JSON object, a missing or
non-string ``model``, a missing, non-list or empty ``messages`` or a message that is not an
object with a known ``role`` (``system``, ``developer``, ``user``, ``assistant``, ``tool``,
``function``), or a ``stream_options`` that is not an object (a body nested past Python's
recursion limit is not JSON to it). When the server is given the model ids it serves
(``models=[...]``, or ``"models"`` in a script file), a request for any other model gets
HTTP 404 with ``code: "model_not_found"``; without them (the default) any model name is
served.

Each request consumes the next scripted :class:`Reply`; when the script is empty the optional
``responder(request_json) -> Reply | str`` is asked; with neither, the server answers HTTP 500
``ScriptedServer: script exhausted ...`` with ``x-should-retry: false`` (no retry can help).
Every request body is recorded in ``.requests`` (in arrival order, including error and dropped
replies), so tests can assert on what was sent.

Usage::

    from clawrig.testing.scripted_server import ScriptedServer, call, drop, error, reply

    with ScriptedServer([
        error(429, retry_after=0),                              # rate limited once
        reply(tool_calls=[call("exec", {"command": "ls"})]),    # then a tool call
        reply(tool_calls=[call("read", '{"path": ')]),          # malformed JSON arguments
        reply("done", reasoning="thinking...", usage=usage(100, 20, cached=40, cost=0.001)),
        reply("slow", delay=2.0),                               # answers after 2 s
        drop(),                                                 # connection closed mid-reply
    ]) as srv:
        srv.base_url      # "http://127.0.0.1:PORT/v1"
        srv.requests      # [request JSON dict, ...]
        srv.chat_model()  # an OpenAIChatModel on this server with test-sized backoff

``start()`` / ``stop()`` work as well as ``with``. ``add(*replies)`` appends to the script.

Token ids and logprobs, as vLLM and SGLang return them (see :mod:`clawrig.llm.gateway.tokens`
for their request fields), from a scripted tokenizer (:func:`scripted_tokens`):

- vLLM: ``return_token_ids`` adds top-level ``prompt_token_ids`` and per choice ``token_ids``;
  ``logprobs`` adds ``logprobs.content`` (``token`` is ``token_id:<id>`` with
  ``return_tokens_as_token_ids``). Streams: ``prompt_token_ids`` in the first chunk, each
  chunk's ``token_ids`` / ``logprobs.content`` for its delta.
- SGLang: ``return_prompt_token_ids`` adds per choice ``prompt_token_ids``, ``return_meta_info``
  adds ``meta_info.output_token_logprobs`` (``[logprob, token_id, text]``) and
  ``meta_info.output_ids``; on a stream either field is refused with HTTP 400, as SGLang does.

``sent_tokens`` lists what was sent per request that asked (prompt and completion ids,
logprobs or None), in order.

Usage numbers: when a reply gives no ``usage``, ``prompt_tokens=10, completion_tokens=5`` (see
:data:`DEFAULT_PROMPT_TOKENS`, :data:`DEFAULT_COMPLETION_TOKENS`). ``cached`` is sent as
``usage.prompt_tokens_details.cached_tokens``, ``cache_write`` as
``usage.prompt_tokens_details.cache_write_tokens`` and ``cost`` (USD) as ``usage.cost`` (the
OpenRouter shape).

A script file for the CLI (``python -m clawrig.testing.scripted_server --script FILE.json
--port N``) is a JSON list of replies (or ``{"replies": [...], "models": [...]}``), each an object
with the fields of :class:`Reply`, e.g. ``{"content": "hi"}``,
``{"tool_calls": [{"name": "exec", "arguments": {"command": "ls"}}]}``,
``{"error": 429, "retry_after": 0}``, ``{"drop": true}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from clawrig.errors import UserError
from clawrig.serving import ThreadedServer, tcp_listener

if TYPE_CHECKING:
    from clawrig.llm.client import OpenAIChatModel, RetryPolicy
    from clawrig.llm.pricing import Prices
    from clawrig.llm.providers import ModelEndpoint

__all__ = [
    "DEFAULT_COMPLETION_TOKENS",
    "DEFAULT_PROMPT_TOKENS",
    "Reply",
    "ScriptUsage",
    "ScriptedCall",
    "ScriptedServer",
    "call",
    "drop",
    "error",
    "load_script",
    "reply",
    "scripted_logprob",
    "scripted_prompt_ids",
    "scripted_token_id",
    "usage",
]

DEFAULT_PROMPT_TOKENS = 10
"""``usage.prompt_tokens`` sent when a reply sets no usage."""
DEFAULT_COMPLETION_TOKENS = 5
"""``usage.completion_tokens`` sent when a reply sets no usage."""

_log = logging.getLogger(__name__)


class ScriptedCall(BaseModel):
    """One tool call to send. ``arguments`` is a dict (sent as compact JSON) or a raw string
    (sent verbatim, so it may be deliberately malformed JSON). ``id`` defaults to
    ``call_<n>`` numbered across the server's lifetime."""

    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not ignored

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str | None = None

    def arguments_text(self) -> str:
        """The ``function.arguments`` string as it goes over the wire."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


class ScriptUsage(BaseModel):
    """Usage numbers to report (tokens are counts, ``cost`` is USD or None for "not sent")."""

    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not ignored

    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    completion_tokens: int = DEFAULT_COMPLETION_TOKENS
    cached: int | None = None
    cache_write: int | None = None
    reasoning_tokens: int | None = None
    cost: float | None = None

    def to_openai(self) -> dict[str, Any]:
        """The ``usage`` object in the OpenAI (+ OpenRouter ``cost``) shape."""
        out: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        details: dict[str, int] = {}
        if self.cached is not None:
            details["cached_tokens"] = self.cached
        if self.cache_write is not None:
            details["cache_write_tokens"] = self.cache_write
        if details:
            out["prompt_tokens_details"] = details
        if self.reasoning_tokens is not None:
            out["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        if self.cost is not None:
            out["cost"] = self.cost
        return out


class Reply(BaseModel):
    """One scripted answer.

    - ``content``: assistant text; ``tool_calls``: calls to make; ``reasoning``: sent as
      ``message.reasoning_content`` (``delta.reasoning_content`` when streaming), or under
      ``reasoning_key`` (e.g. ``reasoning``, OpenRouter's name).
    - ``usage``: numbers to report (defaults 10 prompt / 5 completion tokens).
    - ``finish_reason``: default ``tool_calls`` when there are calls, else ``stop``.
    - ``error``: an HTTP status (429, 500, 401 ...) answered instead, with ``error_message``
      and, when ``retry_after`` (seconds) is set, a ``Retry-After`` header; ``should_retry``
      set sends ``x-should-retry: true|false`` (False: the client must not retry).
    - ``delay``: seconds to wait before answering (for slow replies and client timeouts).
    - ``drop``: start the response, then close the connection mid-body.
    - ``model``: the ``model`` field of the answer (default: the request's).
    """

    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not ignored

    content: str | None = None
    tool_calls: list[ScriptedCall] = Field(default_factory=list)
    reasoning: str | None = None
    reasoning_key: str = "reasoning_content"
    usage: ScriptUsage = Field(default_factory=ScriptUsage)
    finish_reason: str | None = None
    error: int | None = None
    error_message: str | None = None
    retry_after: float | None = None
    should_retry: bool | None = None
    delay: float = 0.0
    drop: bool = False
    model: str | None = None


def reply(
    content: str | None = None,
    *,
    tool_calls: Iterable[ScriptedCall] = (),
    reasoning: str | None = None,
    reasoning_key: str = "reasoning_content",
    usage: ScriptUsage | None = None,
    finish_reason: str | None = None,
    delay: float = 0.0,
    model: str | None = None,
) -> Reply:
    """An assistant reply: text and/or tool calls, optional reasoning, usage and delay (s)."""
    return Reply(
        content=content,
        tool_calls=list(tool_calls),
        reasoning=reasoning,
        reasoning_key=reasoning_key,
        usage=usage or ScriptUsage(),
        finish_reason=finish_reason,
        delay=delay,
        model=model,
    )


def call(name: str, arguments: dict[str, Any] | str | None = None, *, id: str | None = None):
    """A tool call. ``arguments``: dict (sent as JSON) or raw string (sent verbatim)."""
    return ScriptedCall(name=name, arguments={} if arguments is None else arguments, id=id)


def usage(
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS,
    completion_tokens: int = DEFAULT_COMPLETION_TOKENS,
    *,
    cached: int | None = None,
    cache_write: int | None = None,
    reasoning_tokens: int | None = None,
    cost: float | None = None,
) -> ScriptUsage:
    """Usage numbers for a reply (token counts; ``cost`` in USD as OpenRouter sends it)."""
    return ScriptUsage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached=cached,
        cache_write=cache_write,
        reasoning_tokens=reasoning_tokens,
        cost=cost,
    )


def error(
    status: int,
    message: str | None = None,
    *,
    retry_after: float | None = None,
    delay: float = 0,
    should_retry: bool | None = None,
) -> Reply:
    """An HTTP error answer (e.g. 429 with ``retry_after`` seconds, 500, 401); ``should_retry``
    False adds ``x-should-retry: false`` (a reply no client retries)."""
    return Reply(
        error=status,
        error_message=message,
        retry_after=retry_after,
        delay=delay,
        should_retry=should_retry,
    )


def drop(*, delay: float = 0.0) -> Reply:
    """A reply whose connection is closed after the headers and part of the body."""
    return Reply(drop=True, delay=delay)


Responder = Callable[[dict[str, Any]], "Reply | str"]
"""Per-request logic: gets the request JSON, returns a :class:`Reply` (or plain text)."""


class _DroppedResponse(Response):
    """Sends the status line, headers and a partial chunked body, then returns without ending
    the response, which makes uvicorn close the TCP connection (a dropped connection)."""

    def __init__(self) -> None:
        super().__init__(status_code=200, media_type="application/json")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"id": "chatcmpl-', "more_body": True})


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


class ScriptedServer:
    """An OpenAI-compatible server on 127.0.0.1 answering from a script (see module docs).

    ``script``: replies consumed in order; ``responder``: asked when the script is empty;
    ``models``: the model ids served (listed by ``GET /v1/models``; a chat request for another
    model gets the API's 404 ``model_not_found``); None (default) serves any model name and
    lists ``scripted``; ``port``: 0 picks a free port; ``record`` False: requests, their
    headers, peers and sent token ids are counted but not kept (``requests``, ``headers``,
    ``peers``, ``sent_tokens`` stay empty): a long-lived server (the command line's, a
    benchmark's model stand-in answering thousands of requests) neither grows nor has its
    collector walk every body again.
    """

    def __init__(
        self,
        script: Iterable[Reply | str] = (),
        *,
        responder: Responder | None = None,
        models: Iterable[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        record: bool = True,
    ) -> None:
        self._record = record
        self._script: list[Reply] = [_as_reply(r) for r in script]
        self._responder = responder
        self.models = list(models) if models is not None else ["scripted"]
        self._serves_any_model = models is None
        self.host = host
        self._port = port
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._peers: list[int | None] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._received = 0
        self._used = 0
        self._call_counter = 0
        self._sent_tokens: list[dict[str, Any]] = []
        self._server: ThreadedServer | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.app = self._build_app()

    # ----------------------------------------------------------------- public API

    @property
    def port(self) -> int:
        """The TCP port (known after :meth:`start`)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://{self.host}:{self._port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in ``/v1``."""
        return f"{self.url}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A copy of every request body received on ``/v1/chat/completions``, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The HTTP headers (lower-case names) of each recorded request, same order."""
        with self._lock:
            return list(self._headers)

    @property
    def peers(self) -> list[int | None]:
        """The client's TCP port of each recorded request, same order (requests that share a
        port came over one kept-alive connection)."""
        with self._lock:
            return list(self._peers)

    @property
    def sent_tokens(self) -> list[dict[str, Any]]:
        """What was sent to each request that asked for token ids or logprobs, in order:
        ``{"prompt_token_ids": [int] | None, "completion_token_ids": [int] | None,
        "completion_logprobs": [float] | None}`` (None: not asked)."""
        with self._lock:
            return list(self._sent_tokens)

    @property
    def max_in_flight(self) -> int:
        """The most chat requests this server was handling at the same time."""
        with self._lock:
            return self._max_in_flight

    @property
    def remaining(self) -> int:
        """Scripted replies not yet consumed."""
        with self._lock:
            return len(self._script)

    def add(self, *replies: Reply | str) -> None:
        """Append replies to the script (plain strings become text replies)."""
        with self._lock:
            self._script.extend(_as_reply(r) for r in replies)

    def start(self) -> ScriptedServer:
        """Bind the port and serve in a background thread; returns ``self`` once it accepts."""
        if self._thread is not None:
            return self
        sock = tcp_listener(self.host, self._port)
        self._port = sock.getsockname()[1]
        self._socket = sock
        self._server = ThreadedServer(
            self.app,
            [sock],
            name=f"scripted-server-{self._port}",
            lifespan="off",
            timeout_graceful_shutdown=1,
            timeout_keep_alive=5,
        ).start()
        self._thread = self._server.thread
        return self

    def stop(self) -> None:
        """Stop serving and join the thread (in-flight replies get at most ~1 s)."""
        if self._server is not None:
            self._server.stop()
        self._server = self._thread = self._socket = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def endpoint(
        self,
        name: str = "scripted/scripted",
        *,
        prices: Prices | None = None,
        max_concurrency: int | None = None,
        context_window: int | None = None,
        max_tokens: int | None = None,
    ) -> ModelEndpoint:
        """A :class:`clawrig.llm.providers.ModelEndpoint` for this server.

        ``name`` is ``provider/model``; the part after the first ``/`` is the model id sent.
        """
        from clawrig.llm.pricing import Prices as _Prices
        from clawrig.llm.providers import ModelEndpoint as _Endpoint

        provider, _, model_id = name.partition("/")
        return _Endpoint(
            name=name,
            provider=provider,
            model_id=model_id or name,
            base_url=self.base_url,
            api_key=SecretStr("scripted-key"),
            prices=prices or _Prices(),
            max_concurrency=max_concurrency,
            context_window=context_window,
            max_tokens=max_tokens,
        )

    def chat_model(
        self,
        name: str = "scripted/scripted",
        *,
        retry: RetryPolicy | None = None,
        stream: bool = False,
        timeout_s: float = 30.0,
        prices: Prices | None = None,
        max_concurrency: int | None = None,
    ) -> OpenAIChatModel:
        """An :class:`clawrig.llm.client.OpenAIChatModel` on this server.

        Default retry policy for tests: 4 attempts, backoff 1-10 ms, Retry-After capped at 0.05 s.
        """
        from clawrig.llm.client import OpenAIChatModel as _Model
        from clawrig.llm.client import RetryPolicy as _Policy

        return _Model(
            self.endpoint(name, prices=prices, max_concurrency=max_concurrency),
            retry=retry or _Policy(attempts=4, initial_s=0.001, max_s=0.01, retry_after_cap_s=0.05),
            stream=stream,
            timeout_s=timeout_s,
        )

    # ----------------------------------------------------------------- internals

    def _next_reply(
        self, body: dict[str, Any], headers: dict[str, str], peer: int | None = None
    ) -> tuple[Reply | None, int]:
        with self._lock:
            n = self._record_locked(body, headers, peer)
            if self._script:
                self._used += 1
                return self._script.pop(0), n
        if self._responder is not None:
            answer = self._responder(body)
            try:
                rep = _as_reply(answer)
            except ValidationError as exc:
                shown = repr(answer)
                shown = shown if len(shown) <= 200 else shown[:200] + "..."
                wrong = sorted({".".join(map(str, e["loc"])) or "reply" for e in exc.errors()})
                raise _NotAReply(
                    f"it returned {shown}, not a reply ({', '.join(wrong)}: a reply is text, "
                    f"or a dict of {', '.join(Reply.model_fields)}: docs in "
                    "clawrig.testing.scripted_server)"
                ) from None
            with self._lock:
                self._used += 1
            return rep, n
        return None, n

    def _record_locked(self, body: Any, headers: dict[str, str], peer: int | None) -> int:
        """Record one chat request (caller holds the lock; kept unless ``record`` is False);
        returns its number (from 1)."""
        if self._record:
            self._requests.append(body)
            self._headers.append(headers)
            self._peers.append(peer)
        self._received += 1
        return self._received

    def _next_call_id(self) -> str:
        with self._lock:
            self._call_counter += 1
            return f"call_{self._call_counter}"

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="clawrig scripted OpenAI-compatible server")

        @app.get("/v1/models")
        async def list_models() -> dict[str, Any]:
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "clawrig"}
                for m in self.models
            ]
            return {"object": "list", "data": data}

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> Response:
            try:
                body = await request.json()
            except (ValueError, RecursionError):  # RecursionError: nested past Python's limit
                return _api_error(
                    400,
                    "We could not parse the JSON body of your request. (HINT: This likely "
                    "means you aren't using your HTTP library correctly. The OpenAI API expects "
                    "a JSON payload, but what was sent was not valid JSON.)",
                )
            refusal = self._refusal(body)
            if refusal is not None:
                peer = request.client.port if request.client is not None else None
                with self._lock:
                    self._record_locked(body, dict(request.headers), peer)
                return refusal
            with self._lock:
                self._in_flight += 1
                self._max_in_flight = max(self._max_in_flight, self._in_flight)
            try:
                peer = request.client.port if request.client is not None else None
                return await self._answer(body, dict(request.headers), peer)
            finally:
                with self._lock:
                    self._in_flight -= 1

        return app

    def _refusal(self, body: Any) -> JSONResponse | None:
        """The OpenAI API's 4xx answer to a malformed chat request or an unserved model, or
        None when the request is well formed (see the module docs for what is checked)."""
        if not isinstance(body, dict):
            kind = _json_kind(body)
            return _api_error(
                400, f"Invalid type for request body: expected an object, but got {kind} instead."
            )
        if "model" not in body:
            return _api_error(400, "you must provide a model parameter")
        model = body["model"]
        if not isinstance(model, str):
            return _api_error(
                400,
                f"Invalid type for 'model': expected a string, but got {_json_kind(model)} "
                "instead.",
                param="model",
                code="invalid_type",
            )
        if "messages" not in body:
            return _api_error(
                400,
                "Missing required parameter: 'messages'.",
                param="messages",
                code="missing_required_parameter",
            )
        messages = body["messages"]
        if not isinstance(messages, list):
            return _api_error(
                400,
                f"Invalid type for 'messages': expected an array of objects, but got "
                f"{_json_kind(messages)} instead.",
                param="messages",
                code="invalid_type",
            )
        if not messages:
            return _api_error(
                400,
                "Invalid 'messages': empty array. Expected an array with minimum length 1, but "
                "got an empty array instead.",
                param="messages",
                code="empty_array",
            )
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                return _api_error(
                    400,
                    f"Invalid type for 'messages[{i}]': expected an object, but got "
                    f"{_json_kind(m)} instead.",
                    param=f"messages[{i}]",
                    code="invalid_type",
                )
            if "role" not in m:
                return _api_error(
                    400,
                    f"Missing required parameter: 'messages[{i}].role'.",
                    param=f"messages[{i}].role",
                    code="missing_required_parameter",
                )
            if not isinstance(m["role"], str) or m["role"] not in _ROLES:
                return _api_error(
                    400,
                    f"Invalid value: {json.dumps(m['role'])}. Supported values are: "
                    "'system', 'assistant', 'user', 'function', 'tool', and 'developer'.",
                    param=f"messages[{i}].role",
                    code="invalid_value",
                )
        opts = body.get("stream_options")
        if opts is not None and not isinstance(opts, dict):
            return _api_error(
                400,
                f"Invalid type for 'stream_options': expected an object, but got "
                f"{_json_kind(opts)} instead.",
                param="stream_options",
                code="invalid_type",
            )
        if not self._serves_any_model and model not in self.models:
            return _api_error(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                code="model_not_found",
            )
        return None

    async def _answer(
        self, body: dict[str, Any], headers: dict[str, str], peer: int | None = None
    ) -> Response:
        """Build the response to one chat request (consumes one reply)."""
        try:
            rep, n = self._next_reply(body, headers, peer)
        except Exception as exc:  # a responder bug: report it to the client, keep serving
            _log.exception("ScriptedServer responder failed")
            why = " ".join(str(exc).split()) or type(exc).__name__
            if not isinstance(exc, _NotAReply):
                why = f"{type(exc).__name__}: {why}"
            # the same bug fails every retry: said so (the OpenAI API's header), as for an
            # exhausted script, so a client stops at once (helper-140: 204 s of retries)
            return _error_response(
                500, f"ScriptedServer responder failed: {why}", None, should_retry=False
            )
        if rep is None:
            msg = (
                f"ScriptedServer: script exhausted: request #{n} came after all "
                f"{self._used} scripted replies were used"
            )
            # retrying cannot help: say so (the OpenAI API's header), so clients fail at once
            return _error_response(500, msg, None, should_retry=False)
        if rep.delay > 0:
            await asyncio.sleep(rep.delay)
        if rep.drop:
            return _DroppedResponse()
        if rep.error is not None:
            msg = rep.error_message or f"scripted error {rep.error}"
            return _error_response(rep.error, msg, rep.retry_after, should_retry=rep.should_retry)
        model = rep.model or str(body.get("model", "scripted"))
        calls = [(c, c.id or self._next_call_id()) for c in rep.tool_calls]
        finish = rep.finish_reason or ("tool_calls" if calls else "stop")
        cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        toks = _TokenRequest.of(body)
        if toks.sglang and body.get("stream"):
            return _error_response(
                400,
                "return_prompt_token_ids / return_meta_info are not supported with streaming: "
                "set stream=false",
                None,
            )
        if toks.any:
            self._note_tokens(toks, body, rep, calls)
        if body.get("stream"):
            opts = body.get("stream_options") or {}
            gen = _stream(
                rep, calls, finish, model, cid, bool(opts.get("include_usage")), toks, body
            )
            return StreamingResponse(gen, media_type="text/event-stream")
        message: dict[str, Any] = {"role": "assistant", "content": rep.content}
        if rep.reasoning is not None:
            message[rep.reasoning_key] = rep.reasoning
        if calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_text()},
                }
                for c, call_id in calls
            ]
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
        out: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "usage": rep.usage.to_openai(),
        }
        if toks.any:
            pieces = _completion_pieces(rep, calls)
            ids = [scripted_token_id(p) for p in pieces]
            if toks.token_ids:
                out["prompt_token_ids"] = scripted_prompt_ids(body)
                choice["token_ids"] = ids
            if toks.logprobs:
                choice["logprobs"] = {"content": [toks.entry(p) for p in pieces]}
            if toks.prompt_token_ids:
                choice["prompt_token_ids"] = scripted_prompt_ids(body)
            if toks.meta_info:
                choice["meta_info"] = {
                    "id": cid,
                    "output_token_logprobs": [
                        [scripted_logprob(i), i, p] for p, i in zip(pieces, ids, strict=True)
                    ],
                    "output_ids": ids,
                }
        return JSONResponse(out)

    def _note_tokens(
        self,
        toks: _TokenRequest,
        body: dict[str, Any],
        rep: Reply,
        calls: list[tuple[ScriptedCall, str]],
    ) -> None:
        if not self._record:  # nothing kept: no prompt tokenized for it
            return
        ids = [scripted_token_id(p) for p in _completion_pieces(rep, calls)]
        record = {
            "prompt_token_ids": scripted_prompt_ids(body)
            if toks.token_ids or toks.prompt_token_ids
            else None,
            "completion_token_ids": ids if toks.token_ids or toks.meta_info else None,
            "completion_logprobs": [scripted_logprob(i) for i in ids]
            if toks.logprobs or toks.meta_info
            else None,
        }
        with self._lock:
            self._sent_tokens.append(record)


def scripted_token_id(piece: str) -> int:
    """The scripted tokenizer's id of one piece of text: CRC-32 of its UTF-8 bytes mod 100000."""
    return zlib.crc32(piece.encode("utf-8")) % 100_000


def scripted_logprob(token_id: int) -> float:
    """The scripted logprob of a sampled token: ``-((id % 997) + 1) / 1000``."""
    return -((token_id % 997) + 1) / 1000


def scripted_prompt_ids(body: dict[str, Any]) -> list[int]:
    """The scripted prompt token ids of a request: one per whitespace-separated word of
    ``role: content`` of each message (content as JSON when not a string)."""
    words: list[str] = []
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else m
        text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
        words += f"{m.get('role') if isinstance(m, dict) else ''}: {text}".split()
    return [scripted_token_id(w) for w in words]


def _completion_pieces(rep: Reply, calls: list[tuple[ScriptedCall, str]]) -> list[str]:
    """The sampled "tokens" of a reply: the pieces it streams (reasoning, content, each tool
    call's name and argument pieces), in order."""
    out = _pieces(rep.reasoning) if rep.reasoning else []
    if rep.content:
        out += _pieces(rep.content)
    for c, _ in calls:
        out.append(c.name)
        out += [p for p in _pieces(c.arguments_text()) if p]
    return out


@dataclass(frozen=True)
class _TokenRequest:
    """Which token fields a request asked for (vLLM's and SGLang's names)."""

    token_ids: bool = False
    logprobs: bool = False
    as_token_ids: bool = False
    prompt_token_ids: bool = False
    meta_info: bool = False

    @classmethod
    def of(cls, body: dict[str, Any]) -> _TokenRequest:
        return cls(
            token_ids=bool(body.get("return_token_ids")),
            logprobs=bool(body.get("logprobs")),
            as_token_ids=bool(body.get("return_tokens_as_token_ids")),
            prompt_token_ids=bool(body.get("return_prompt_token_ids")),
            meta_info=bool(body.get("return_meta_info")),
        )

    @property
    def any(self) -> bool:
        return self.token_ids or self.logprobs or self.prompt_token_ids or self.meta_info

    @property
    def sglang(self) -> bool:
        return self.prompt_token_ids or self.meta_info

    def entry(self, piece: str) -> dict[str, Any]:
        tid = scripted_token_id(piece)
        token = f"token_id:{tid}" if self.as_token_ids else piece
        return {
            "token": token,
            "logprob": scripted_logprob(tid),
            "bytes": list(piece.encode("utf-8")),
            "top_logprobs": [],
        }


class _NotAReply(ValueError):
    """A responder returned something that is no :class:`Reply` (its message says what)."""


def _as_reply(item: Reply | str | dict[str, Any]) -> Reply:
    if isinstance(item, Reply):
        return item
    if isinstance(item, str):
        return Reply(content=item)
    if hasattr(item, "model_dump"):  # a Reply of another copy of this module (python -m)
        return Reply.model_validate(item.model_dump())
    return Reply.model_validate(item)


def _error_response(
    status: int, message: str, retry_after: float | None, *, should_retry: bool | None = None
) -> JSONResponse:
    headers = {}
    if retry_after is not None:
        headers["Retry-After"] = f"{retry_after:g}"
    if should_retry is not None:
        headers["x-should-retry"] = "true" if should_retry else "false"
    err = {"message": message, "type": _ERROR_TYPES.get(status, "server_error"), "code": status}
    return JSONResponse({"error": err}, status_code=status, headers=headers)


_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
"""The message roles the OpenAI chat-completions API accepts."""


def _json_kind(value: Any) -> str:
    """How the OpenAI API names a JSON value's type in its 'Invalid type' messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _api_error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> JSONResponse:
    """The OpenAI API's answer to a request it refuses: ``{"error": {"message", "type":
    "invalid_request_error", "param", "code"}}`` with HTTP ``status`` (400, 404)."""
    err = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return JSONResponse({"error": err}, status_code=status)


def _pieces(text: str, size: int = 8) -> list[str]:
    """Split ``text`` into chunks of ``size`` characters (at least one piece)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


async def _stream(
    rep: Reply,
    calls: list[tuple[ScriptedCall, str]],
    finish: str,
    model: str,
    cid: str,
    include_usage: bool,
    toks: _TokenRequest | None = None,
    body: dict[str, Any] | None = None,
) -> AsyncIterator[bytes]:
    created = int(time.time())
    toks = toks or _TokenRequest()

    def chunk(
        delta: dict[str, Any], finish_reason: str | None = None, piece: str | None = None
    ) -> bytes:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        if toks.token_ids:
            choice["token_ids"] = [scripted_token_id(piece)] if piece is not None else []
        if toks.logprobs and piece is not None:
            choice["logprobs"] = {"content": [toks.entry(piece)]}
        obj = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
        }
        return f"data: {json.dumps(obj)}\n\n".encode()

    first = chunk({"role": "assistant", "content": ""})
    if toks.token_ids:
        obj = json.loads(first[6:])
        obj["prompt_token_ids"] = scripted_prompt_ids(body or {})
        first = f"data: {json.dumps(obj)}\n\n".encode()
    yield first
    if rep.reasoning:
        for piece in _pieces(rep.reasoning):
            yield chunk({rep.reasoning_key: piece}, piece=piece)
    if rep.content:
        for piece in _pieces(rep.content):
            yield chunk({"content": piece}, piece=piece)
    for index, (c, call_id) in enumerate(calls):
        head = {"index": index, "id": call_id, "type": "function"}
        yield chunk(
            {"tool_calls": [head | {"function": {"name": c.name, "arguments": ""}}]}, piece=c.name
        )
        for piece in _pieces(c.arguments_text()):
            yield chunk(
                {"tool_calls": [{"index": index, "function": {"arguments": piece}}]},
                piece=piece or None,
            )
    yield chunk({}, finish)
    if include_usage:
        obj = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": rep.usage.to_openai(),
        }
        yield f"data: {json.dumps(obj)}\n\n".encode()
    yield b"data: [DONE]\n\n"


class _ScriptFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replies: list[Reply]
    models: list[str] | None = None


def load_script(path: Path | str) -> tuple[list[Reply], list[str] | None]:
    """Read a script file: a JSON list of replies or ``{"replies": [...], "models": [...]}``.

    Returns ``(replies, models)``; ``models`` is None when the file names none (the server then
    serves any model name). Raises :class:`clawrig.errors.UserError` with one line naming
    the file and the field on unreadable or invalid input.
    """
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"{p}: cannot read script: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if isinstance(raw, list):
        raw = {"replies": raw}
    try:
        data = _ScriptFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(x) for x in first["loc"]) or "(root)"
        raise UserError(f"{p}: {field}: {first['msg']}") from None
    return data.replies, data.models


def _load_responder(spec: str) -> Responder:
    """``module:function`` -> the function (for ``--responder``)."""
    import importlib

    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UserError(f"--responder: cannot load {spec!r} ({exc})") from None
    if not callable(fn):
        raise UserError(f"--responder: {spec!r} is not callable")
    return fn


def _cli(
    script: Annotated[Path | None, typer.Option(help="JSON list of scripted replies.")] = None,
    responder: Annotated[
        str | None,
        typer.Option(help="module:function answering each request (after the script)."),
    ] = None,
    port: Annotated[int, typer.Option(help="TCP port on 127.0.0.1 (0 = any free port).")] = 8765,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
) -> None:
    """Serve an OpenAI-compatible API on HOST:PORT answering from SCRIPT (and/or a
    RESPONDER function) until Ctrl-C."""
    try:
        if script is None and responder is None:
            raise UserError("give --script FILE and/or --responder module:function")
        replies, models = load_script(script) if script is not None else ([], None)
        fn = _load_responder(responder) if responder else None
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    # nothing reads another process's .requests: not kept (a benchmark's stand-in answers
    # thousands of requests, each with its whole conversation)
    srv = ScriptedServer(replies, responder=fn, models=models, host=host, port=port, record=False)
    try:
        srv.start()
    except OSError as exc:
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    n = len(replies)
    answers = f"{n} scripted {'reply' if n == 1 else 'replies'}" + (
        f", then every request asked of {responder}" if responder else ""
    )  # (helper-165: "0 replies" read as a server that answers nothing)
    typer.echo(f"scripted OpenAI-compatible server: {srv.base_url} ({answers})")
    try:
        while srv._thread is not None and srv._thread.is_alive():
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()


def main() -> None:
    """Entry point of ``python -m clawrig.testing.scripted_server``."""
    typer.run(_cli)


if __name__ == "__main__":
    main()
