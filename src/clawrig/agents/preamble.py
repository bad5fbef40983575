"""The first user message: a fixed preamble followed by the task prompt.

WildClawBench prepends a restricted-environment preamble to each task prompt (in substance:
expert in a restricted, non-interactive environment; solve before the timeout of
``{timeout_seconds}`` s; run processes in the foreground; no user input; a complete solution in
one pass, no placeholders; shared/reference/formats.md section 1). The EigenData four-folder demo
keeps the same idea under a ``## Role & Context`` heading with the prompt under ``## Task``
(shared/examples/fourfolder). :func:`preamble_for` picks the one a task's format uses upstream
(WildClawBench's one paragraph, the four-folder ``## Role & Context`` form for the others); a
job may replace it (``--preamble FILE|none``).
"""

from __future__ import annotations

DEFAULT_PREAMBLE = (
    "## Role & Context\n"
    "You are an autonomous expert agent solving a self-contained technical task in a restricted, "
    "fully automated, non-interactive environment. Nobody will answer questions or provide "
    "input. You work in a repeated action loop: deliberate internally, then either invoke one or "
    "more tools or emit a final message. Solve the task efficiently before the timeout of "
    "{timeout_seconds} seconds. Run processes in the foreground unless the task needs a service. "
    "Deliver a complete solution in one pass, with no placeholders. Inputs are under "
    "/tmp_workspace/; write outputs where the task says.\n"
    "\n"
    "## Task\n"
)


WILDCLAW_PREAMBLE = (
    "You are an expert agent working in a restricted, non-interactive environment. Solve the "
    "task below efficiently; it must be finished before the timeout of {timeout_seconds} "
    "seconds. Run every process in the foreground (no background services), do not wait for "
    "user input, and deliver a complete, working solution in one pass with no placeholders.\n\n"
)
"""WildClawBench's preamble, in substance (shared/reference/upstream-harnesses.md: restricted
environment, the timeout, foreground work with no background services)."""


def preamble_for(task_format: str) -> str:
    """The preamble the upstream harness of ``task_format`` puts before the task prompt:
    :data:`WILDCLAW_PREAMBLE` for ``wildclaw``, :data:`DEFAULT_PREAMBLE` otherwise."""
    return WILDCLAW_PREAMBLE if task_format == "wildclaw" else DEFAULT_PREAMBLE


def first_user_message(prompt: str, timeout_seconds: float, preamble: str | None = None) -> str:
    """Return preamble (with ``{timeout_seconds}`` filled in, whole seconds) + prompt."""
    text = DEFAULT_PREAMBLE if preamble is None else preamble
    return text.replace("{timeout_seconds}", str(int(timeout_seconds))) + prompt
