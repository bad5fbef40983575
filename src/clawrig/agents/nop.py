"""The nop agent: does nothing and answers "done" (for grader checks: the killer question)."""

from __future__ import annotations

from clawrig.agents.base import Agent, AgentContext, AgentOutcome, now_ms
from clawrig.agents.preamble import first_user_message
from clawrig.spec.transcript import TranscriptMessage
from clawrig.spec.trial import StopReason


class NopAgent(Agent):
    name = "nop"
    needs_model = False

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        tr = ctx.transcript
        tr.model, tr.provider, tr.started_ms = "nop", "clawrig", now_ms()
        first = first_user_message(ctx.task.prompt, ctx.task.timeout_seconds, ctx.preamble)
        tr.messages.append(TranscriptMessage(role="user", text=first, timestamp_ms=now_ms()))
        tr.messages.append(
            TranscriptMessage(
                role="assistant",
                text="done",
                model="nop",
                provider="clawrig",
                stop_reason="stop",
                timestamp_ms=now_ms(),
            )
        )
        return AgentOutcome(stop_reason=StopReason.FINAL_ANSWER, turns=1)
