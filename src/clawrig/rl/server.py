"""The rollout server (``clawrig serve``): episodes over HTTP for a trainer in another process
or on another machine. FastAPI + uvicorn.

Routes (JSON in and out):

- ``GET /health``: ``{"status": "ok", "running": episodes running, "waiting": episodes
  admitted but waiting for a slot, "tasks": task count}``.
- ``GET /v1/tasks``: ``{"tasks": [{id, name, category, timeout_seconds, expected_reward,
  grader}]}``.
- ``POST /v1/episodes``: :class:`EpisodeRequest` -> :class:`clawrig.rl.Episode`.
- ``POST /v1/groups``: :class:`GroupRequest` -> :class:`clawrig.rl.EpisodeGroup`.

Errors are ``{"error": "<field>: <one line>"}`` with a 4xx, naming the request's field: 422 for
a body that does not validate, 404 for an unknown task, 400 for a value clawrig refuses
(``base_url``, ``model``, ``api_key``, ``sampling.<field>``:
:meth:`clawrig.rl.Rollouts.endpoint`) or the model server refuses (:func:`refusal_line`:
``api_key`` for 401/402/403, ``model`` for 404, ``sampling`` for another refusal), 502 led by
``base_url`` when the model server could not be reached (:func:`unreached_line`; the episode's
trial folder is still written), 429 with ``Retry-After`` when more episodes are asked for than
the server admits (``max_concurrency`` running + ``max_queue`` waiting), 504 when an episode
outlives its timeout (the request's ``timeout_s``, at most the server's). A route the server
does not have is ``{"error": "path: ..."}`` with 404 (405 for a method the route does not
take); an error the server did not foresee is ``{"error": "internal error: <type>:
<one line>"}`` with 500 (its traceback in the log).

The trainer's ``api_key`` (in the request, else the server's default) is held by the host's
model gateway for the episode and never enters a sandbox or a trial folder.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt
from starlette.exceptions import HTTPException

from clawrig.errors import ModelRequestError, UserError
from clawrig.rl.episode import MAX_EPISODE_TURNS, SEED_MAX, SEED_MIN, Rollouts, Sampling
from clawrig.serving import guard_hosts
from clawrig.spec.task import Task

MAX_BODY_BYTES = 1024 * 1024
"""A request body over this many bytes gets 413 once that much is read (an episode request is
a few KB; a 300 MB body took the server to 800 MB of memory before its 422: helper-134)."""
STOP_CLEAN_UP_S = 60.0
"""Seconds the server, stopping, waits for the episodes it cancelled to clean up (their
sandboxes stopped, their trial folders set aside or removed) before it exits."""


class BodyCap:
    """ASGI middleware: each HTTP request's body read whole, up to :data:`MAX_BODY_BYTES`,
    before the app sees it; over it, a 413 with the server's error shape, the rest unread."""

    def __init__(self, app: Any, cap: int = MAX_BODY_BYTES) -> None:
        self.app, self.cap = app, cap

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        over = length.isdigit() and int(length) > self.cap
        parts: list[bytes] = []
        seen, more = 0, not over
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return None
            parts.append(message.get("body", b""))
            seen += len(parts[-1])
            more = message.get("more_body", False)
            over = seen > self.cap
            if over:
                break
        if over:
            error = f"body: over {self.cap // 1024} KiB (an episode request is a few KB)"
            return await JSONResponse({"error": error}, status_code=413)(scope, receive, send)
        body, sent = b"".join(parts), False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


"""Agents a request may ask for."""


class EpisodeRequest(BaseModel):
    """``POST /v1/episodes``. ``base_url``: the trainer's OpenAI-compatible ``.../v1``;
    ``model``: the model id it serves; ``api_key``: its key (optional); ``sampling``: per-call
    sampling fields (:class:`clawrig.rl.Sampling`); ``server``: vllm | sglang when
    ``base_url`` is one (token ids and logprobs are then captured); ``seed``: per-request
    sampling seed; ``max_turns``: assistant messages at most; ``timeout_s``: seconds before
    the server gives up with 504 (at most the server's limit)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(min_length=1)
    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    api_key: str | None = Field(default=None, repr=False)
    sampling: Sampling = Field(default_factory=Sampling)
    agent: Literal["native", "openclaw"] = "native"
    server: Literal["vllm", "sglang"] | None = None
    seed: StrictInt | None = Field(default=None, ge=SEED_MIN, le=SEED_MAX)
    max_turns: StrictInt | None = Field(default=None, ge=1, le=MAX_EPISODE_TURNS)
    timeout_s: StrictFloat | None = Field(default=None, gt=0, allow_inf_nan=False)


class GroupRequest(EpisodeRequest):
    """``POST /v1/groups``: :class:`EpisodeRequest` plus ``n`` episodes (1..256)."""

    n: StrictInt = Field(ge=1, le=256)


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:500]


def refusal_line(exc: ModelRequestError, req: EpisodeRequest, default_key: bool) -> str:
    """The 400's line for the model server's refusal of an episode's request (before it had
    answered any request of this process), led by the request field to fix: ``api_key`` for
    401/402/403 (``default_key``: the server's ``--api-key-env`` key was used), ``model`` for
    404, else ``sampling`` (the request's other settings)."""
    where = f"the model server at {req.base_url}"
    said = f"HTTP {exc.status}: {exc.detail}" if exc.detail else f"HTTP {exc.status}"
    if exc.status in (401, 402, 403):
        key = (
            "the given key"
            if req.api_key
            else "the server's default key (--api-key-env)"
            if default_key
            else "no key (none given)"
        )
        return f"api_key: {where} refused {key} ({_one_line(said)})"
    if exc.status == 404:
        return (
            f"model: {where} does not serve {req.model!r}, or base_url is not its .../v1 "
            f"({_one_line(said)})"
        )
    if exc.status is None:
        return f"base_url: {where} did not answer as an OpenAI-compatible server ({exc})"
    return (
        f"sampling: {where} refused the episode's request with model {req.model!r} "
        f"({_one_line(said)})"
    )


def unreached_line(answer: Any, req: EpisodeRequest, rollouts: Rollouts) -> str | None:
    """The 502's line when the model server at ``req.base_url`` could not be reached, else
    None. ``answer``: the :class:`clawrig.rl.Episode` or :class:`clawrig.rl.EpisodeGroup`
    that came back; a masked ``infra_error`` episode whose server never opened a connection
    in this process (:func:`clawrig.llm.client.unreachable`: a wrong base URL, a server not
    started; or one gone for several requests in a row after answering) is not a rollout to
    train on, so the trainer gets the error instead of a masked 200."""
    from clawrig.llm.client import unreachable

    episodes = getattr(answer, "episodes", None) or [answer]
    if not any(getattr(e, "stop_reason", None) == "infra_error" for e in episodes):
        return None
    why = unreachable(rollouts.endpoint(base_url=req.base_url, model=req.model))
    if why is None:
        return None
    folders = [str(e.trial_dir) for e in episodes if getattr(e, "trial_dir", None) is not None]
    kept = f"; trial folder(s) written: {', '.join(folders)}" if folders else ""
    return (
        f"base_url: could not connect to the model server at {req.base_url} "
        f"({_one_line(why)}){kept}"
    )


def _validation_line(exc: RequestValidationError) -> str:
    first = exc.errors()[0]
    if first.get("type") == "json_invalid":
        err = (first.get("ctx") or {}).get("error", "")
        return f"body: not valid JSON ({err})" if err else "body: not valid JSON"
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    field = ".".join(loc) or "body"
    return f"{field}: {first.get('msg', 'invalid')}"


def create_app(
    rollouts: Rollouts,
    tasks: list[Task],
    *,
    max_queue: int = 256,
    timeout_s: float = 3600.0,
    api_key: str | None = None,
    host: str = "127.0.0.1",
) -> FastAPI:
    """The rollout server's app over ``rollouts`` (its ``max_concurrency`` episodes run at
    once) for ``tasks``. ``max_queue``: episodes admitted beyond those running; ``timeout_s``:
    the longest an episode request may take (seconds); ``api_key``: the default trainer key
    for requests that give none; ``host``: the address it listens on (a request whose Host
    header names another is answered 400: :func:`clawrig.serving.guard_hosts`, so no web page
    starts episodes by DNS rebinding)."""
    by_id = {t.id: t for t in tasks}
    running: set[asyncio.Task[Any]] = set()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        # the server stops: uvicorn cancelled the requests still running when its grace ran
        # out and goes on at once; their episodes' clean-up (the sandbox stopped, the trial
        # folder set aside with its spend or removed) gets this loop's time here (helper-153:
        # a .tmp- trial folder was left in the output)
        if running:
            await asyncio.wait(set(running), timeout=STOP_CLEAN_UP_S)

    app = FastAPI(title="clawrig rollout server", lifespan=lifespan)
    guard_hosts(app, host, lambda line: JSONResponse({"error": line}, status_code=400))
    app.add_middleware(BodyCap)
    state = {"admitted": 0, "running": 0}
    limit = rollouts.max_concurrency + max(0, max_queue)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        line = _validation_line(exc)
        ctype = request.headers.get("content-type", "")
        if line.startswith("body: ") and "json" not in ctype.lower():
            # (curl -d sends form data: the JSON object read as a string, helper-133)
            line += " (the body is read as JSON: send it as Content-Type: application/json, "
            line += f"not {ctype or 'no Content-Type'})"
        return JSONResponse({"error": line}, status_code=422)

    @app.exception_handler(_Refused)
    async def _refused(request: Request, exc: _Refused) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(HTTPException)  # an unknown route (404), a method it lacks (405)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, RecursionError | ValueError):
            # FastAPI's "error parsing the body" (JSON nested too deeply, a number past
            # Python's 4,300 digits, bytes that are not UTF-8): bad JSON as any other, not a
            # fault of the path
            cause = exc.__cause__
            if isinstance(cause, RecursionError):
                why = "nested too deeply"
            elif isinstance(cause, UnicodeDecodeError):
                why = "not UTF-8"  # (it said "a number": helper-196)
            else:
                why = "a number"
            line = f"body: not valid JSON ({why}: {_one_line(cause)[:200]})"
            return JSONResponse({"error": line}, status_code=422)
        line = f"path: {request.method} {request.url.path}: {_one_line(exc.detail)}"
        return JSONResponse({"error": line}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)  # the server's own fault: still the documented shape
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        line = f"internal error: {type(exc).__name__}: {_one_line(exc)}"
        return JSONResponse({"error": line}, status_code=500)

    def admit(n: int) -> None:
        if n > limit:  # never admitted, however long the trainer waits: not a 429
            raise _Refused(
                400,
                f"n: a group of {n} is more episodes than this server ever admits at once "
                f"({limit}: --max-concurrency + --max-queue); send smaller groups",
            )
        if state["admitted"] + n > limit:
            raise _Refused(
                429,
                f"busy: {state['admitted']} episode(s) admitted, the server takes {limit}; "
                "retry later",
                {"Retry-After": "1"},
            )
        state["admitted"] += n

    def task_for(req: EpisodeRequest) -> Task:
        task = by_id.get(req.task_id)
        if task is None:
            raise _Refused(404, f"task_id: no task {req.task_id!r} on this server")
        return task

    async def guarded(req: EpisodeRequest, n: int, coro_fn: Any) -> Any:
        task = task_for(req)
        admit(n)
        limit_s = min(req.timeout_s or timeout_s, timeout_s)
        me = asyncio.current_task()
        if me is not None:
            running.add(me)
        try:
            answer = await asyncio.wait_for(coro_fn(task), timeout=limit_s)
            why = unreached_line(answer, req, rollouts)
            if why is not None:
                raise _Refused(502, why)
            return answer
        except TimeoutError:
            raise _Refused(504, f"timeout_s: the episode did not finish in {limit_s:g} s") from None
        except asyncio.CancelledError:  # the server stops (Ctrl-C, SIGTERM) and stopped it
            what = "the episode was stopped, not graded"
            if n > 1:  # (its finished episodes' folders were said nowhere: helper-199)
                what = (
                    "the group was stopped: its episodes not finished were not graded; any "
                    f"that finished are written in {rollouts.output / req.task_id}"
                )
            raise _Refused(503, f"server: shutting down: {what}") from None
        except ModelRequestError as exc:
            raise _Refused(400, refusal_line(exc, req, api_key is not None)) from None
        except UserError as exc:
            raise _Refused(400, _one_line(exc)) from None
        finally:
            state["admitted"] -= n
            running.discard(me)  # type: ignore[arg-type]

    def kwargs(req: EpisodeRequest) -> dict[str, Any]:
        return {
            "base_url": req.base_url,
            "model": req.model,
            "sampling": req.sampling,
            "agent": req.agent,
            "seed": req.seed,
            "server": req.server,
            "api_key": req.api_key or api_key,
            "max_turns": req.max_turns,
        }

    @app.get("/health")
    async def health() -> dict[str, Any]:
        running = min(state["admitted"], rollouts.max_concurrency)
        return {
            "status": "ok",
            "running": running,
            "waiting": state["admitted"] - running,
            "tasks": len(by_id),
        }

    @app.get("/v1/tasks")
    async def list_tasks() -> dict[str, Any]:
        return {
            "tasks": [
                {
                    "id": t.id,
                    "name": t.name,
                    "category": t.category,
                    "timeout_seconds": t.timeout_seconds,
                    "expected_reward": t.expected_reward,
                    "grader": str(t.grader.kind),
                }
                for t in tasks
            ]
        }

    @app.post("/v1/episodes")
    async def episodes(req: EpisodeRequest) -> JSONResponse:
        ep = await guarded(req, 1, lambda task: rollouts.run_episode(task, **kwargs(req)))
        return JSONResponse(ep.model_dump(mode="json"))

    @app.post("/v1/groups")
    async def groups(req: GroupRequest) -> JSONResponse:
        group = await guarded(
            req, req.n, lambda task: rollouts.run_group(task, req.n, **kwargs(req))
        )
        return JSONResponse(group.model_dump(mode="json"))

    return app
