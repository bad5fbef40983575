"""The oracle agent: replays a golden trajectory through the same tools and sandbox.

The golden trajectory is a four-folder ``formatted_dialog`` (OpenAI chat messages; formats.md
section 2). Each assistant message's tool calls are executed in order through the trial's
toolset (the same code paths a model's calls take), the recorded reasoning is kept, and the run
ends with the golden final answer. Recorded tool results are not reused: the transcript holds
what replay produced (``clawrig verify`` compares the two). A task without a golden trajectory
makes the oracle answer with the task's gold ``answer`` when it has one (DataClawBench), else
it fails with a clear message.
"""

from __future__ import annotations

import json
from typing import Any

from clawrig.agents.base import Agent, AgentContext, AgentOutcome, now_ms
from clawrig.agents.native import run_tool_calls
from clawrig.agents.preamble import first_user_message
from clawrig.errors import UserError
from clawrig.spec.llm import ToolCall
from clawrig.spec.transcript import TranscriptMessage
from clawrig.spec.trial import StopReason
from clawrig.transcript.dialog import content_text


def golden_steps(dialog: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The assistant messages of a golden dialog, in order."""
    return [m for m in dialog if m.get("role") == "assistant"]


class OracleAgent(Agent):
    name = "oracle"
    needs_model = False

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        task = ctx.task
        tr = ctx.transcript
        tr.model, tr.provider, tr.started_ms = "oracle", "clawrig", now_ms()
        first = first_user_message(task.prompt, task.timeout_seconds, ctx.preamble)
        tr.messages.append(TranscriptMessage(role="user", text=first, timestamp_ms=now_ms()))
        outcome = AgentOutcome(stop_reason=StopReason.REPLAY_END)
        if not task.golden_dialog:
            if task.answer is None:
                raise UserError(
                    f"{task.source}: golden trajectory: task {task.id} has none for the oracle"
                )
            answer = (
                task.answer
                if isinstance(task.answer, str)
                else json.dumps(task.answer, ensure_ascii=False)
            )
            tr.messages.append(_assistant(answer, None, []))
            outcome.turns = 1
            outcome.stop_reason = StopReason.FINAL_ANSWER
            return outcome
        for step in golden_steps(task.golden_dialog):
            calls = [
                ToolCall(
                    id=c.get("id") or f"call_{outcome.tool_calls + i + 1}",
                    name=(c.get("function") or {}).get("name", ""),
                    arguments=_args((c.get("function") or {}).get("arguments")),
                )
                for i, c in enumerate(step.get("tool_calls") or [])
            ]
            reasoning = step.get("reasoning") or step.get("reasoning_content")
            msg = _assistant(content_text(step.get("content")), reasoning, calls)
            tr.messages.append(msg)
            outcome.turns += 1
            if not calls:
                outcome.stop_reason = StopReason.FINAL_ANSWER
                continue
            # golden calls ran one after another: replay them in order
            for call in calls:
                single = msg.model_copy(update={"tool_calls": [call]})
                results = await run_tool_calls(ctx, single)
                tr.messages.extend(results)
                outcome.tool_calls += 1
                outcome.tool_errors += sum(r.is_error for r in results)
        return outcome


def _args(raw: Any) -> str:
    if raw is None:
        return "{}"
    return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)


def _assistant(text: str, reasoning: str | None, calls: list[ToolCall]) -> TranscriptMessage:
    return TranscriptMessage(
        role="assistant",
        text=text or None,
        reasoning=reasoning,
        tool_calls=calls,
        model="oracle",
        provider="clawrig",
        stop_reason="toolUse" if calls else "stop",
        timestamp_ms=now_ms(),
    )
