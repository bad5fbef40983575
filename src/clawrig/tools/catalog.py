"""The tool catalog: OpenClaw's tool schemas, the profiles, and :class:`Toolset`.

Source of the schemas: ``openclaw_2026_3_24_tool_schema.json`` beside this file is a verbatim
copy of shared/reference/openclaw-2026.3.24/tool_schema.json, the 17 tools OpenClaw 2026.3.24
sends with its default ``coding`` profile (names, order, parameter names, aliases, required
lists and types as captured from a real run; the capture has no descriptions). The function
descriptions below are clawrig's own. ``image`` (profile ``full``) is not in the capture; its
parameters follow openclaw-tools.md.

Profiles: ``coding`` (default; the 17, in captured order), ``minimal`` (read, edit, write,
exec, process), ``full`` (coding + image).

Use from an agent loop::

    toolset = Toolset("coding")
    tools = toolset.schema()                    # OpenAI function tools for the model
    result = await toolset.call(ctx, "exec", '{"command": "ls"}')   # -> ToolResult
    ...
    await toolset.aclose(ctx)                   # end of the trial: cron, watchdogs, sub-agents

``Toolset.call`` never raises for anything the model did (unknown tool, malformed JSON, a
non-object, missing or mistyped arguments, failing commands): those are ToolResults with
``is_error=True`` and a message the model can act on. Only infrastructure failures
(:class:`clawrig.errors.InfrastructureError`, e.g. ``SandboxDied``) and cancellation
propagate.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from clawrig.errors import InfrastructureError, UserError
from clawrig.jsonl import loads_strict
from clawrig.spec.trial import TOOL_ARGUMENTS_MAX_DEPTH, nested_deeper
from clawrig.tools import cron, fs, image, memory, sessions, shell, web
from clawrig.tools._common import error, is_agent_os_failure
from clawrig.tools.base import ToolContext, ToolFn, ToolResult

log = logging.getLogger(__name__)

OPENCLAW_VERSION = "2026.3.24"
"""The OpenClaw release whose ``coding`` tool set is reproduced here."""
SCHEMA_FILE = "openclaw_2026_3_24_tool_schema.json"

DESCRIPTIONS: dict[str, str] = {
    "read": (
        "Read a file in the workspace (relative paths are under /tmp_workspace). Returns the "
        "text as is; output stops at 2000 lines or 50 KB with a note telling the offset to "
        "continue from. offset = first line (1-based), limit = number of lines. PNG, JPEG, "
        "GIF and WebP files come back as images when the model can see them."
    ),
    "edit": (
        "Edit a file by exact text replacement: oldText must occur exactly once in the file "
        "(copy it exactly, whitespace and newlines included; add surrounding lines to make it "
        "unique) and is replaced by newText."
    ),
    "write": (
        "Create or overwrite a file with the given content; parent folders are created. "
        "Relative paths are under /tmp_workspace."
    ),
    "exec": (
        "Run a shell command (/bin/sh -c) in the workspace. Returns stdout and stderr merged, "
        "then the exit code as [exit code N]. workdir: folder to run in; env: extra "
        "variables; timeout: seconds before the command and its children are killed. "
        "background: true (or yieldMs: N to background after N ms) returns a sessionId for "
        "the process tool; use it for servers and long jobs."
    ),
    "process": (
        "Manage background exec sessions. action: list | poll (status and new output; "
        "timeout = ms to wait) | log (offset/limit in lines) | write (data, eof) | send-keys "
        "(keys such as Enter, C-c; hex; literal) | submit (data + newline) | paste (text) | "
        "kill | clear (forget a finished session) | remove (kill and forget). sessionId names "
        "the session."
    ),
    "cron": (
        "Schedule jobs inside this run. action: add (job: {name, schedule: {kind: at, at: "
        "ISO time} | {kind: every, everyMs} | {kind: delay, delayMs} | {kind: cron, expr}, "
        "payload: {kind: command, command, workdir, timeout} to run a shell command, or "
        "{kind: systemEvent, text} / {kind: agentTurn, message} to get a message later}) | "
        "list | status | update (jobId, patch) | remove (jobId) | run (jobId: run now) | runs "
        "(jobId: past runs with output) | wake (text: message now)."
    ),
    "sessions_list": (
        "List the agent sessions of this run (main and sub-agents) with status and, with "
        "messageLimit, their last messages. kinds filters (main, subagent)."
    ),
    "sessions_history": (
        "Read the messages of a session (sessionKey or label). includeTools adds tool calls "
        "and results; limit keeps the last N."
    ),
    "sessions_send": (
        "Send a message to another session (sessionKey or label). timeoutSeconds > 0 waits "
        "that long for its reply; 0 sends without waiting."
    ),
    "sessions_yield": (
        "End this turn to wait for sub-agents: returns the results of sub-agents that have "
        "finished (waits for a running one when none has)."
    ),
    "sessions_spawn": (
        "Start a background sub-agent on a task, working in the same sandbox with its own "
        "transcript. Returns its childSessionKey at once; its result arrives through "
        "sessions_yield (or wait with timeoutSeconds). runTimeoutSeconds caps its run."
    ),
    "subagents": (
        "Manage the sub-agents this session spawned. action: list (default) | steer (target, "
        "message: send it guidance) | kill (target: key, label or 'all')."
    ),
    "session_status": (
        "Status of a session (default: this one): state, message count, runtime, model. "
        "model sets a model override for that session's next run."
    ),
    "web_search": (
        "Search the web (Brave Search) when this task allows web access. query; count 1-10; "
        "region (country code); safeSearch (off, moderate, strict)."
    ),
    "web_fetch": (
        "Fetch a URL (http/https) when this task allows web access and return its readable "
        "content as markdown or text (extractMode); maxChars caps the text."
    ),
    "memory_search": (
        "Search MEMORY.md and memory/*.md in the workspace (full-text, BM25 ranking). Returns "
        "path, line range, score and a snippet per hit; maxResults, minScore (0-1)."
    ),
    "memory_get": (
        "Read lines of a memory file (MEMORY.md or memory/*.md, path relative to the "
        "workspace): from = first line (1-based), lines = how many."
    ),
    "image": (
        "Show an image file from the workspace (PNG, JPEG, GIF, WebP) to the model. prompt: "
        "what to look for; maxBytesMb: size cap in MiB."
    ),
}

TOOL_FUNCTIONS: dict[str, ToolFn] = {
    **fs.TOOLS,
    **shell.TOOLS,
    **cron.TOOLS,
    **sessions.TOOLS,
    **web.TOOLS,
    **memory.TOOLS,
    **image.TOOLS,
}
"""Every implemented tool by name."""


@cache
def _captured() -> tuple[tuple[str, str], ...]:
    text = resources.files("clawrig.tools").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return tuple(
        (t["function"]["name"], json.dumps(t["function"]["parameters"])) for t in json.loads(text)
    )


@cache
def _parameters() -> dict[str, dict[str, Any]]:
    """Tool name -> its JSON-schema ``parameters``, parsed once per process (every trial's
    toolset reads them: ~0.8 ms of CPU a trial to parse again). Shared: read, never change."""
    params = {name: json.loads(p) for name, p in _captured()}
    params["image"] = json.loads(json.dumps(image.IMAGE_SCHEMA))
    return params


CODING: tuple[str, ...] = tuple(name for name, _ in _captured())
PROFILES: dict[str, tuple[str, ...]] = {
    "coding": CODING,
    "minimal": ("read", "edit", "write", "exec", "process"),
    "full": (*CODING, "image"),
}
"""Profile name -> tool names in the order they are sent to the model."""
DEFAULT_PROFILE = "coding"


def _profile_names(profile: str) -> tuple[str, ...]:
    try:
        return PROFILES[profile]
    except KeyError:
        raise UserError(
            f"tool profile {profile!r} is unknown (choose from {', '.join(PROFILES)})"
        ) from None


def tool_schema(profile: str = DEFAULT_PROFILE) -> list[dict[str, Any]]:
    """The OpenAI function tools of ``profile``: ``[{"type": "function", "function": {"name",
    "description", "parameters"}}, ...]``. ``parameters`` are OpenClaw's as captured. A new
    list each call (the caller may change it), read from :func:`tool_schema_text`.

    Raises UserError for an unknown profile.
    """
    return json.loads(tool_schema_text(profile))  # type: ignore[no-any-return]


@cache
def tool_schema_text(profile: str = DEFAULT_PROFILE) -> str:
    """:func:`tool_schema` of ``profile`` as compact JSON text, made once per profile and
    process (every trial of a job asks for it, twice). Raises UserError for an unknown
    profile."""
    params = _parameters()
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": DESCRIPTIONS[name],
                "parameters": params[name],
            },
        }
        for name in _profile_names(profile)
    ]
    return json.dumps(tools, ensure_ascii=False, separators=(",", ":"))


# -- argument validation (pydantic models built from the JSON schemas) ---------------------


def _py_type(spec: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(python type, Field kwargs) for one JSON-schema property of the captured subset."""
    kind = spec.get("type")
    constraints: dict[str, Any] = {}
    if "minimum" in spec:
        constraints["ge"] = spec["minimum"]
    if "maximum" in spec:
        constraints["le"] = spec["maximum"]
    if "minLength" in spec:
        constraints["min_length"] = spec["minLength"]
    if "maxLength" in spec:
        constraints["max_length"] = spec["maxLength"]
    if "maxItems" in spec:
        constraints["max_length"] = spec["maxItems"]
    if "enum" in spec:
        return Literal[tuple(spec["enum"])], constraints
    if kind == "string":
        return str, constraints
    if kind == "number":
        return float, constraints
    if kind == "integer":
        return int, constraints
    if kind == "boolean":
        return bool, constraints
    if kind == "array":
        item, _ = _py_type(spec.get("items", {}))
        return list[item], constraints  # type: ignore[valid-type]
    if kind == "object":
        pattern = spec.get("patternProperties") or {}
        if pattern and all(v.get("type") == "string" for v in pattern.values()):
            return dict[str, str], constraints
        return dict[str, Any], constraints
    return Any, constraints


def _args_model(name: str, parameters: Mapping[str, Any]) -> type[BaseModel]:
    required = set(parameters.get("required") or [])
    extra: Literal["forbid", "allow"] = (
        "forbid" if parameters.get("additionalProperties") is False else "allow"
    )
    fields: dict[str, Any] = {}
    for i, (prop, spec) in enumerate((parameters.get("properties") or {}).items()):
        typ, kw = _py_type(spec)
        if prop in required:
            fields[f"f{i}"] = (typ, Field(..., alias=prop, **kw))
        else:
            fields[f"f{i}"] = (typ | None, Field(None, alias=prop, **kw))
    config = ConfigDict(extra=extra, populate_by_name=False)
    return create_model(f"{name}_args", __config__=config, **fields)


@cache
def _model(name: str) -> type[BaseModel]:
    """The arguments model of tool ``name``, made when a call first needs it (made for every
    tool at once, the job's first tool call cost ~0.3 s of CPU; most agents call a few)."""
    return _args_model(name, _parameters()[name])


def _describe_errors(tool: str, exc: ValidationError, params: Mapping[str, Any]) -> str:
    problems = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        if err["type"] == "missing":
            problems.append(f"missing required argument `{loc}`")
        elif err["type"] == "extra_forbidden":
            problems.append(f"unknown argument `{loc}`")
        else:
            got = json.dumps(err.get("input"), ensure_ascii=False, default=str)
            if len(got) > 80:
                got = got[:77] + "..."
            problems.append(f"argument `{loc}`: {err['msg']} (got {got})")
    props = params.get("properties") or {}
    required = set(params.get("required") or [])
    sig = ", ".join(
        f"{p}{'*' if p in required else ''}: {s.get('type', 'any')}" for p, s in props.items()
    )
    return (
        f"Invalid arguments for {tool}: {'; '.join(problems)}. Expected {{{sig}}} (* = required)."
    )


def _example(tool: str, params: Mapping[str, Any]) -> str:
    required = params.get("required") or []
    sample = {
        p: f"<{(params.get('properties') or {}).get(p, {}).get('type', 'value')}>" for p in required
    }
    return json.dumps(sample)


class Toolset:
    """The tools of one profile, callable with a model's raw tool-call arguments.

    ``Toolset(profile="coding")``; ``names`` in send order; ``schema()`` the OpenAI tool list;
    ``await call(ctx, name, raw_arguments)`` -> :class:`ToolResult`; ``await aclose(ctx)`` at
    the end of a trial. Raises UserError for an unknown profile.
    """

    def __init__(self, profile: str = DEFAULT_PROFILE):
        self.profile = profile
        self.names: tuple[str, ...] = _profile_names(profile)
        self._params = _parameters()

    def schema(self) -> list[dict[str, Any]]:
        """The profile's OpenAI function tools (see :func:`tool_schema`)."""
        return tool_schema(self.profile)

    def parse_arguments(
        self, name: str, raw_arguments: str | Mapping[str, Any] | None
    ) -> dict[str, Any] | ToolResult:
        """Parse and validate a tool call's arguments: the validated dict (null values and
        absent optional parameters left out; unknown extra keys kept), or an error result."""
        if name not in self.names:
            return error(f"Tool {name!r} not found. Available tools: {', '.join(self.names)}.")
        params = self._params[name]
        if raw_arguments is None or (isinstance(raw_arguments, str) and not raw_arguments.strip()):
            data: Any = {}
        elif isinstance(raw_arguments, str):
            try:
                data = loads_strict(raw_arguments)  # as the transcript keeps them
            except RecursionError:
                return error(f"The arguments of {name} are nested too deeply to parse.")
            except json.JSONDecodeError as exc:
                return error(
                    f"Invalid JSON in the arguments of {name}: {exc.msg} at line {exc.lineno} "
                    f"column {exc.colno}. Send the arguments as one JSON object, e.g. "
                    f"{_example(name, params)}."
                )
            except ValueError as exc:  # JSON that Python cannot hold (an int past 4300 digits)
                return error(
                    f"Invalid JSON in the arguments of {name}: {str(exc)[:200]}. Send the "
                    f"arguments as one JSON object, e.g. {_example(name, params)}."
                )
        else:
            data = dict(raw_arguments)
        if nested_deeper(data, TOOL_ARGUMENTS_MAX_DEPTH):  # as the transcript keeps them
            return error(
                f"The arguments of {name} are nested more than {TOOL_ARGUMENTS_MAX_DEPTH} "
                "levels deep."
            )
        if not isinstance(data, dict):
            return error(
                f"The arguments of {name} must be a JSON object, got {type(data).__name__} "
                f"{json.dumps(data, default=str)[:80]}. E.g. {_example(name, params)}."
            )
        try:
            model = _model(name).model_validate(data)
        except ValidationError as exc:
            return error(_describe_errors(name, exc, params))
        out = {k: v for k, v in model.model_dump(by_alias=True).items() if v is not None}
        return out

    async def call(
        self, ctx: ToolContext, name: str, raw_arguments: str | Mapping[str, Any] | None
    ) -> ToolResult:
        """Run tool ``name`` with the model's raw JSON arguments (a str as the model sent
        it; a dict or None are accepted too) in ``ctx``'s sandbox.

        Returns the tool's result; every model-caused problem is an ``is_error`` result.
        Raises only InfrastructureError (e.g. SandboxDied) and CancelledError.
        """
        args = self.parse_arguments(name, raw_arguments)
        if isinstance(args, ToolResult):
            return args
        fn = TOOL_FUNCTIONS[name]
        try:
            return await fn(ctx, args)
        except Exception as exc:
            if is_agent_os_failure(exc):
                return error(f"{name}: {exc}")
            if isinstance(exc, InfrastructureError):
                raise
            log.exception("tool %s failed", name)
            return error(f"{name} failed: {type(exc).__name__}: {exc}")

    async def aclose(self, ctx: ToolContext) -> None:
        """End-of-trial cleanup for ``ctx``: stop the cron scheduler, the exec timeout
        watchdogs and running sub-agents. Idempotent; never raises for a dead sandbox."""
        await shell.close(ctx)
        if isinstance(ctx.cron, cron.CronScheduler):
            await ctx.cron.stop()
        if isinstance(ctx.sessions, sessions.SessionManager):
            await ctx.sessions.close()
