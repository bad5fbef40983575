"""clawrig's native agent: a tool-calling loop over any OpenAI-compatible model.

Loop (the OpenClaw shape, shared/reference/openclaw-tools.md): the first user message is the
preamble + task prompt (:mod:`clawrig.agents.preamble`); each turn sends the conversation and
the tool schema, records the assistant message (text, reasoning, tool calls, usage), runs the
tool calls concurrently in the trial's sandbox and records their results. It stops on a final
answer (an assistant message without tool calls), max turns, the time limit, or the token /
cost budget; the stop reason is recorded. Malformed tool arguments get an error tool result
and the loop goes on. A provider failure after retries propagates as
:class:`clawrig.errors.ProviderError` (an infrastructure error, never a model failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from clawrig.agents.base import Agent, AgentContext, AgentOutcome, now_ms
from clawrig.agents.preamble import first_user_message
from clawrig.spec.llm import AGENT_SESSION, ChatResponse
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.spec.trial import StopReason

_STOP_REASONS = {"stop": "stop", "tool_calls": "toolUse", "length": "length"}


def assistant_message(resp: ChatResponse) -> TranscriptMessage:
    """The transcript form of one model reply."""
    return TranscriptMessage(
        role="assistant",
        text=resp.content or None,
        reasoning=resp.reasoning,
        tool_calls=list(resp.tool_calls),
        usage=resp.usage,
        model=resp.model,
        provider=resp.provider,
        stop_reason="toolUse" if resp.tool_calls else _STOP_REASONS.get(resp.finish_reason, "stop"),
        response_id=resp.response_id,
        timestamp_ms=now_ms(),
    )


def openai_assistant(msg: TranscriptMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": msg.text or ""}
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "id": tc.id,
                "type": "function",
                "function": {"name": tc.name, "arguments": tc.arguments},
            }
            for tc in msg.tool_calls
        ]
    return out


def openai_tool(msg: TranscriptMessage) -> list[dict[str, Any]]:
    """The chat messages for one tool result (plus a user message carrying its images)."""
    out: list[dict[str, Any]] = [
        {
            "role": "tool",
            "tool_call_id": msg.tool_call_id,
            "name": msg.tool_name,
            "content": msg.text or "",
        }
    ]
    if msg.images:
        parts: list[dict[str, Any]] = [{"type": "text", "text": f"Image from {msg.tool_name}:"}]
        for img in msg.images:
            url = f"data:{img.get('mimeType', 'image/png')};base64,{img['data']}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        out.append({"role": "user", "content": parts})
    return out


async def run_tool_calls(ctx: AgentContext, msg: TranscriptMessage) -> list[TranscriptMessage]:
    """Run an assistant message's tool calls concurrently; results in call order."""

    async def one(tc: Any) -> TranscriptMessage:
        t0 = time.monotonic()
        result = await ctx.toolset.call(ctx.tool_ctx, tc.name, tc.arguments)
        ctx.log(
            f"tool {tc.name} ({(time.monotonic() - t0) * 1000:.0f} ms)"
            f"{' ERROR' if result.is_error else ''}: {tc.arguments[:200]}"
        )
        return TranscriptMessage(
            role="toolResult",
            tool_call_id=tc.id,
            tool_name=tc.name,
            text=result.text,
            is_error=result.is_error,
            details=result.details,
            images=result.images,
            timestamp_ms=now_ms(),
        )

    if len(msg.tool_calls) == 1:
        return [await one(msg.tool_calls[0])]
    return list(await asyncio.gather(*(one(tc) for tc in msg.tool_calls)))


class NativeAgent(Agent):
    """The tool-calling loop (see the module docstring).

    It also gives the trial a cron scheduler (fired message jobs arrive as user messages
    between turns) and a session manager whose sub-agents (sessions_spawn) run this same loop
    on the same sandbox with their own transcripts (``ctx.subagent_transcripts``); their usage
    counts towards the trial's.
    """

    name = "native"
    needs_model = True

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        assert ctx.model is not None, "the native agent needs a model"
        from clawrig.tools.cron import CronScheduler
        from clawrig.tools.sessions import SessionManager

        tc = ctx.tool_ctx
        if tc.cron is None:
            tc.cron = CronScheduler(ctx.sandbox, output_bytes=tc.output_bytes)
        if tc.sessions is None:
            tc.sessions = SessionManager(runner=subagent_runner(ctx))
        first = first_user_message(ctx.task.prompt, ctx.task.timeout_seconds, ctx.preamble)
        return await run_loop(ctx, first, ctx.transcript)


def subagent_runner(parent: AgentContext) -> Any:
    """The runner a SessionManager uses for sessions_spawn: the same loop, own transcript."""

    async def run(session: Any) -> str:
        transcript = Transcript(session_id=session.key)
        parent.subagent_transcripts[session.key] = transcript
        ctx = AgentContext(
            task=parent.task,
            sandbox=parent.sandbox,
            tool_ctx=session.context,
            toolset=parent.toolset,
            model=parent.model,
            limits=parent.limits,
            transcript=transcript,
            log_path=parent.log_path,
            started=parent.started,
            held_chars=parent.held_chars,  # one limit for the agent and its sub-agents
        )
        before = ctx.usage
        marked = AGENT_SESSION.set(str(session.key))  # (its calls' records say whose they are)
        try:
            await run_loop(ctx, session.task, transcript, session=session)
        finally:
            AGENT_SESSION.reset(marked)
            parent.usage = parent.usage.add(ctx.usage)
            ctx.close_log()
            del before
        return transcript.final_text()

    return run


async def run_loop(
    ctx: AgentContext, first_message: str, transcript: Transcript, session: Any = None
) -> AgentOutcome:
    """Run one session's loop from a first user message, filling ``transcript`` in place.

    ``session``: the sub-agent's :class:`clawrig.tools.sessions.Session` (its inbox is read
    between turns); None for the main agent, whose inbox, finished sub-agents and fired cron
    messages are read between turns instead."""
    assert ctx.model is not None
    transcript.model = transcript.model or ctx.model.name
    transcript.started_ms = transcript.started_ms or now_ms()
    transcript.messages.append(
        TranscriptMessage(role="user", text=first_message, timestamp_ms=now_ms())
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": first_message}]
    tools = ctx.toolset.schema()
    outcome = AgentOutcome(stop_reason=StopReason.MAX_TURNS)
    held = _Held(ctx.held_chars)
    held.chars += len(first_message)
    lim = ctx.limits
    while outcome.turns < lim.max_turns:
        _subagent_failure(ctx)
        if lim.tokens is not None and ctx.usage.total_tokens >= lim.tokens:
            outcome.stop_reason = StopReason.TOKEN_BUDGET
            return outcome
        if lim.cost_usd is not None and ctx.usage.cost_usd >= lim.cost_usd:
            outcome.stop_reason = StopReason.COST_BUDGET
            return outcome
        resp = await ctx.model.chat(messages, tools=tools)
        ctx.usage = ctx.usage.add(resp.usage)
        outcome.turns += 1
        msg = assistant_message(resp)
        transcript.provider = transcript.provider or resp.provider
        transcript.messages.append(msg)
        messages.append(openai_assistant(msg))
        ctx.log(
            f"turn {outcome.turns}: {len(msg.tool_calls)} tool call(s), "
            f"{resp.usage.input_tokens}+{resp.usage.output_tokens} tokens"
        )
        if not msg.tool_calls:
            _subagent_failure(ctx)
            outcome.stop_reason = StopReason.FINAL_ANSWER
            return outcome
        results = [held.kept(r) for r in await run_tool_calls(ctx, msg)]
        outcome.tool_calls += len(results)
        outcome.tool_errors += sum(r.is_error for r in results)
        for r in results:
            transcript.messages.append(r)
            messages.extend(openai_tool(r))
        for text in _between_turns(ctx, session):
            text = held.kept_text(text)
            transcript.messages.append(
                TranscriptMessage(role="user", text=text, timestamp_ms=now_ms())
            )
            messages.append({"role": "user", "content": text})
    return outcome


MAX_CONVERSATION_CHARS = 64 * 1024 * 1024
"""Most characters of tool results (images' base64 included) and harness-delivered user
messages the agent's conversations hold, its sub-agents' together; past it a result's text is
dropped for a one-line note (an error result): the harness keeps every conversation in memory
and writes it to the trial folder twice, and 200 calls a turn of 256 KiB each took it to
2.1 GB in three turns
(helper-142). No model reads that much: its provider refuses the request first."""


class _Held:
    """Characters the agent's conversations hold so far, its sub-agents' included
    (:data:`MAX_CONVERSATION_CHARS`; sub-agents each with a limit of their own took the
    harness to 2.9 GB: helper-143): ``count`` is the trial's shared one-item list."""

    def __init__(self, count: list[int]) -> None:
        self._count = count

    @property
    def chars(self) -> int:
        return self._count[0]

    @chars.setter
    def chars(self, value: int) -> None:
        self._count[0] = value

    def _note(self, size: int) -> str:
        return (
            f"[dropped by the harness: {size:,} characters; this conversation holds "
            f"{self.chars // 1024**2} MiB of tool output and messages, its limit is "
            f"{MAX_CONVERSATION_CHARS // 1024**2} MiB]"
        )

    def kept(self, r: TranscriptMessage) -> TranscriptMessage:
        """``r``, or (past the limit) ``r`` with its text and images replaced by a note."""
        size = len(r.text or "") + sum(len(str(i.get("data", ""))) for i in r.images)
        if self.chars + size <= MAX_CONVERSATION_CHARS:
            self.chars += size
            return r
        return r.model_copy(
            update={"text": self._note(size), "images": [], "details": None, "is_error": True}
        )

    def kept_text(self, text: str) -> str:
        """``text``, or (past the limit) a note in its place."""
        if self.chars + len(text) <= MAX_CONVERSATION_CHARS:
            self.chars += len(text)
            return text
        return self._note(len(text))


def _subagent_failure(ctx: AgentContext) -> None:
    """Raise the infrastructure error a sub-agent of this trial ended on (a provider outage
    during it is the trial's, not a failed sub-agent the agent is scored with)."""
    raise_fatal = getattr(ctx.tool_ctx.sessions, "raise_fatal", None)
    if raise_fatal is not None:
        raise_fatal()


def _between_turns(ctx: AgentContext, session: Any) -> list[str]:
    """User messages that arrived during a turn: steering sent to this session, finished
    sub-agents' results and fired cron messages (main session only)."""
    out: list[str] = []
    tc = ctx.tool_ctx
    mgr = tc.sessions
    if session is not None:
        return [str(m) for m in session.drain_inbox()]
    if mgr is not None and hasattr(mgr, "take_results"):
        with contextlib.suppress(KeyError):
            out += [f"[message to main] {m}" for m in mgr.session(tc.session_key).drain_inbox()]
        for r in mgr.take_results(tc.session_key):
            rest = {k: v for k, v in r.items() if k != "sessionKey"}
            out.append(
                f"[subagent {r['sessionKey']} {r['status']}] "
                + json.dumps(rest, ensure_ascii=False)
            )
    take = getattr(tc.cron, "pending_messages", None)
    if take is not None:
        for m in take():
            out.append(m.as_user_text() if hasattr(m, "as_user_text") else str(m))
    return out
