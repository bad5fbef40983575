"""Step-driven episodes, for trainers whose environment interface is ``reset``/``step`` (SkyRL's
``BaseTextEnv``, OpenRLHF's agent functions): the trainer generates each assistant message
itself and hands it to the environment, which runs the tool calls in the sandbox and answers
with the tool results.

clawrig's episode still runs whole (:meth:`clawrig.rl.Rollouts.run_episode`: sandbox,
workspace, services, the native agent loop, grading, the trial folder); its model is a
*policy bridge*: an OpenAI-compatible server on loopback (FastAPI + uvicorn) that holds each
chat request until the trainer's :meth:`StepEpisode.step` supplies the reply. So the agent loop,
the tools and the grader are the same ones ``clawrig run`` uses, and the trial folder records
the episode as usual.

Action text: :func:`parse_action` reads the Hermes / Qwen tool-call convention that open models
trained for tool use emit: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks
(any number), an optional leading ``<think>...</think>`` block (kept as reasoning:
:func:`_reasoning`), the rest as text.
:func:`tools_system_prompt` writes the matching tool list for the prompt (Qwen's template text).

Threads: the episodes run on one background event loop (:func:`background_loop`); the sync
``start``/``step`` calls wait on queues (``timeout_s`` seconds each).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import queue
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from clawrig.errors import ClawrigError
from clawrig.rl.episode import Episode, Rollouts
from clawrig.serving import ThreadedServer, tcp_listener
from clawrig.spec.llm import surrogate_free
from clawrig.spec.task import Task

_NAME = re.compile(r'"name"\s*:\s*"([^"\\]{1,200})"')
"""The name a malformed ``<tool_call>`` block spells (:func:`parse_action`)."""
_CLOSED = object()


NO_SUBAGENTS = (
    "a step-driven episode has one conversation, the trainer's: a sub-agent's model calls "
    "would have no one to answer them"
)
"""Why a step-driven episode's agent may not start sub-agents: its ``sessions_spawn`` answers
with this error (helper-213: a sub-agent's calls took the trainer's next steps, and the
observations were cut from the sub-agent's conversation)."""


class BridgeError(ClawrigError):
    """The step-driven episode could not go on (it ended, timed out, or was closed), or a
    message given to it is not an assistant message."""


class _Function(BaseModel):
    name: str = Field(min_length=1)
    arguments: Any = "{}"

    @field_validator("arguments")
    @classmethod
    def _text_or_object(cls, value: Any) -> Any:
        if not isinstance(value, str | dict):
            raise ValueError("must be JSON text or an object")
        return value


class _ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str | None = None
    type: Literal["function"] = "function"
    function: _Function


class AssistantMessage(BaseModel):
    """The shape :meth:`StepEpisode.step` takes (OpenAI's chat assistant message): ``role``
    "assistant" (or absent), ``content`` text, parts or None, ``tool_calls`` None or a list
    of ``{"id", "type": "function", "function": {"name", "arguments"}}``; other keys
    (``reasoning_content`` ...) pass as they are."""

    model_config = ConfigDict(extra="allow")
    role: Literal["assistant"] = "assistant"
    content: Any = None
    tool_calls: list[_ToolCall] | None = None

    @field_validator("content")
    @classmethod
    def _text_parts_or_none(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, str | list):
            raise ValueError("must be text, a list of text parts or null")
        if isinstance(value, list):
            for part in value:
                if not (
                    isinstance(part, dict)
                    and part.get("type") == "text"
                    and isinstance(part.get("text"), str)
                ):
                    raise ValueError(
                        'a model\'s reply holds text parts only ({"type": "text", "text": ...})'
                    )
        return value


def assistant_message(message: Any) -> dict[str, Any]:
    """``message`` as the bridge sends it to the agent: an :class:`AssistantMessage` whose
    text parts are joined into its ``content`` (the agent reads a reply's text as a string:
    helper-198), its lone surrogates written as U+FFFD. Raises BridgeError naming the first
    field that is not the shape, or when the message cannot be sent as JSON (a NaN, bytes):
    either was a reply the agent's client refused, the episode masked or the step lost."""
    if not isinstance(message, dict):
        raise BridgeError(
            f"message: an assistant message (a dict) or raw text, not {type(message).__name__}"
        )
    message = _sendable(message)  # (a lone surrogate in a name was refused: helper-201)
    try:
        AssistantMessage.model_validate(message)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in ("message", *err.get("loc", ())))
        raise BridgeError(f"{where}: {err['msg']}") from None
    if isinstance(message.get("content"), list):
        message = {**message, "content": "".join(p["text"] for p in message["content"])}
    return message


def _sendable(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as JSON carries it, its lone surrogates U+FFFD. Raises BridgeError when
    JSON cannot carry it (a NaN, bytes)."""
    try:
        value: dict[str, Any] = surrogate_free(message, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise BridgeError(f"message: cannot be sent as JSON: {exc}") from None
    return value


def _blocks(text: str, open_tag: str, close_tag: str) -> tuple[list[str], list[str]]:
    """(the text outside the ``open_tag ... close_tag`` blocks, in pieces; the blocks' own
    text), each block ending at the first ``close_tag`` after its ``open_tag``; an
    ``open_tag`` with no ``close_tag`` after it stays text. Linear in ``len(text)`` (a
    non-greedy pattern took 16 s on 4,000 newlines after an unclosed ``<tool_call>``, and
    minutes on 200,000 of them: helper-201)."""
    outside: list[str] = []
    inside: list[str] = []
    at = 0
    while (start := text.find(open_tag, at)) >= 0:
        end = text.find(close_tag, start + len(open_tag))
        if end < 0:
            break
        outside.append(text[at:start])
        inside.append(text[start + len(open_tag) : end])
        at = end + len(close_tag)
    outside.append(text[at:])
    return outside, inside


def _reasoning(text: str) -> tuple[str | None, str]:
    """(the generation's reasoning, the rest): its text up to the first ``</think>`` when it
    opens with ``<think>`` or has none before it (a chat template that put ``<think>`` in the
    prompt, as Qwen3's does), as vLLM's reasoning parsers read it; else (None, ``text``). A
    ``<think>`` elsewhere, a tool call's argument text for one, stays where it is (helper-202:
    one inside a write's content was cut out of the file)."""
    end = text.find("</think>")
    if end < 0:
        return None, text
    head = text[:end]
    opened = head.lstrip().startswith("<think>")
    if not opened and ("<think>" in head or "<tool_call>" in head):
        return None, text  # (a "</think>" in a call's argument text ends no reasoning)
    thought = head.lstrip().removeprefix("<think>") if opened else head
    return thought.strip() or None, text[end + len("</think>") :]


def parse_action(text: str, turn: int = 0) -> dict[str, Any]:
    """An assistant message (OpenAI chat dict) from a model's raw generation (see the module
    docs). Tool-call ids are ``call_<turn>_<i>``. A ``<tool_call>`` block that is not a JSON
    object with a string ``name`` is still a call: of the name it spells (``"name": "..."``,
    else none), its arguments the block's text, so the tools answer it with their error
    ("Invalid JSON in the arguments of read ...", "Tool '' not found") and the episode goes
    on (helper-199: it stayed in the text, and the episode ended "complete" as if the model
    had chosen to stop)."""
    reasoning, text = _reasoning(text)
    rest, blocks = _blocks(text, "<tool_call>", "</tool_call>")
    calls: list[dict[str, Any]] = []

    def call(name: str, arguments: str) -> None:
        calls.append(
            {
                "id": f"call_{turn}_{len(calls)}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )

    def take(raw: str) -> None:
        raw = raw.strip()
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            obj = None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            spelled = _NAME.search(raw)
            call(spelled.group(1) if spelled else "", raw)
            return
        args = obj.get("arguments", {})
        call(obj["name"], args if isinstance(args, str) else json.dumps(args))

    for raw in blocks:
        take(raw)
    content = "".join(rest).strip()
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        msg["reasoning_content"] = reasoning
    if calls:
        msg["tool_calls"] = calls
    return msg


def tools_system_prompt(tools: list[dict[str, Any]]) -> str:
    """A system message text offering ``tools`` (OpenAI function tools) in the Hermes / Qwen
    convention that :func:`parse_action` reads back."""
    listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{listing}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def background_loop() -> asyncio.AbstractEventLoop:
    """The process-wide event loop (a daemon thread) that step-driven episodes run on."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="clawrig-rl-loop", daemon=True).start()
            _LOOP = loop
        return _LOOP


@dataclass
class StepResult:
    """What :meth:`StepEpisode.step` returns: the new messages the environment added (tool
    results, in OpenAI chat format), whether the episode is over and, when it is, the graded
    :class:`Episode`."""

    observations: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    episode: Episode | None = None


class StepEpisode:
    """One episode of ``task`` driven step by step (see the module docs).

    ``rollouts``: the :class:`Rollouts` whose gateway and output folder to use (it must only be
    used on :func:`background_loop`); ``agent``: native; ``max_turns``: assistant turns at most;
    ``timeout_s``: seconds to wait for the environment at each call.
    """

    def __init__(
        self,
        task: Task | str | Path,
        *,
        rollouts: Rollouts,
        max_turns: int | None = None,
        timeout_s: float = 600.0,
        model: str = "policy",
    ) -> None:
        self.task = task
        self.rollouts = rollouts
        self.max_turns = max_turns
        self.timeout_s = timeout_s
        self.model = model
        self.tools: list[dict[str, Any]] = []
        self.turn = 0
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._replies: queue.Queue[Any] = queue.Queue()
        self._messages: list[dict[str, Any]] = []
        self._server: ThreadedServer | None = None
        self._future: concurrent.futures.Future[Episode] | None = None
        self.episode: Episode | None = None
        self._closed = False

    # -- the policy bridge ---------------------------------------------------------------------
    def _app(self) -> FastAPI:
        app = FastAPI(title="clawrig policy bridge")

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            if not self._closed:
                self._events.put(("request", body))
            reply = await asyncio.to_thread(self._replies.get)
            if reply is _CLOSED:  # and every request after it (the harness's probe too)
                self._replies.put(_CLOSED)
                err = {"message": "the step-driven episode was closed", "code": 400}
                return JSONResponse({"error": err}, status_code=400)
            calls = reply.get("tool_calls")
            return JSONResponse(
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", self.model),
                    "choices": [
                        {
                            "index": 0,
                            "message": reply,
                            "finish_reason": "tool_calls" if calls else "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                }
            )

        return app

    def _next(self) -> tuple[str, Any]:
        try:
            return self._events.get(timeout=self.timeout_s)
        except queue.Empty:
            raise BridgeError(f"the environment did not answer in {self.timeout_s:g} s") from None

    # -- the trainer's side --------------------------------------------------------------------
    def start(self) -> list[dict[str, Any]]:
        """Start the episode (sandbox, workspace, warmup) and return the first prompt: the
        messages the agent would send a model (OpenAI chat format). The offered tools are in
        :attr:`tools`. Raises BridgeError when the episode ends before asking anything."""
        sock = tcp_listener()
        self._server = ThreadedServer(self._app(), [sock], name="clawrig-policy-bridge").start()
        base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        coro = self.rollouts.run_episode(
            self.task,
            base_url=base_url,
            model=self.model,
            max_turns=self.max_turns,
            no_subagents=NO_SUBAGENTS,
        )
        self._future = asyncio.run_coroutine_threadsafe(coro, background_loop())
        self._future.add_done_callback(lambda f: self._events.put(("done", f)))
        kind, value = self._next()
        if kind == "done":
            self._finish(value)
            raise BridgeError(f"the episode ended before its first turn: {self._why()}")
        self._messages = list(value.get("messages") or [])
        self.tools = list(value.get("tools") or [])
        return list(self._messages)

    def step(self, message: dict[str, Any] | str) -> StepResult:
        """Answer the agent's pending model call with ``message`` (an assistant message, or raw
        text read by :func:`parse_action`); return the tool results it led to, or, when the
        episode ended (a message without tool calls, max turns, time), ``done`` and the graded
        episode. Raises BridgeError after the episode ended, on a timeout, or for a message
        that is not an :class:`AssistantMessage` (nothing sent: the episode goes on)."""
        if self._closed or self.episode is not None or self._future is None:
            raise BridgeError("step() after the episode ended or was closed (or before start())")
        if not isinstance(message, str):
            # refused here, the episode going on: a malformed message sent on was the model's
            # "reply of the wrong shape", an infrastructure error masking it (helper-196)
            message = assistant_message(message)
        self.turn += 1
        if isinstance(message, str):
            # its lone surrogates too U+FFFD, and no shape check: a garbled <tool_call> is
            # a call the tools answer with their error (helper-201: refused as a field the
            # trainer never sent)
            message = _sendable(parse_action(message, self.turn))
        self._replies.put(message)
        kind, value = self._next()
        if kind == "done":
            return StepResult(done=True, episode=self._finish(value))
        messages = list(value.get("messages") or [])
        new = messages[len(self._messages) + 1 :]
        self._messages = messages
        return StepResult(observations=new)

    def _finish(self, future: concurrent.futures.Future[Episode]) -> Episode | None:
        with contextlib.suppress(Exception):
            self.episode = future.result()
        self._stop_server()
        return self.episode

    def _why(self) -> str:
        if self.episode is not None:
            return self.episode.error or self.episode.stop_reason
        if self._future is not None and self._future.exception() is not None:
            return str(self._future.exception())
        return "unknown"

    def _stop_server(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def close(self) -> None:
        """End the episode early (the agent's pending call is refused) and stop the bridge."""
        self._closed = True
        if self._future is not None and not self._future.done():
            self._replies.put(_CLOSED)
            with contextlib.suppress(Exception):
                self._future.result(timeout=self.timeout_s)
        self._stop_server()
