"""agent.log: each line is in the file as soon as it is logged (one open file per agent run,
closed with the run), and a sub-agent's lines go in the same file without losing any."""

from __future__ import annotations

import re

from clawrig.agents.base import AgentContext


def _ctx(path, started=None) -> AgentContext:
    kw = {"started": started} if started is not None else {}
    return AgentContext(
        task=None,  # type: ignore[arg-type]
        sandbox=None,  # type: ignore[arg-type]
        tool_ctx=None,  # type: ignore[arg-type]
        toolset=None,
        log_path=path,
        **kw,
    )


def _lines(path) -> list[str]:
    return [re.sub(r"^\[\s*[\d.]+s\] ", "", x) for x in path.read_text().splitlines()]


def test_lines_are_in_the_file_at_once_and_after_close(tmp_path):
    log = tmp_path / "agent.log"
    log.write_text("[   0.000s] earlier\n")  # appended to, never truncated
    ctx = _ctx(log)
    ctx.log("one")
    assert _lines(log) == ["earlier", "one"]  # before any close: a reader sees it
    parent_sub = _ctx(log, started=ctx.started)  # a sub-agent: its own context, same file
    parent_sub.log("sub 1")
    ctx.log("two")
    parent_sub.log("sub 2")
    parent_sub.close_log()
    ctx.close_log()
    ctx.close_log()  # twice: nothing
    ctx.log("after close")  # opens it again
    ctx.close_log()
    assert _lines(log) == ["earlier", "one", "sub 1", "two", "sub 2", "after close"]
    assert re.fullmatch(r"\[\s*\d+\.\d{3}s\] one", log.read_text().splitlines()[1])


def test_no_path_logs_nothing(tmp_path):
    ctx = _ctx(None)
    ctx.log("nowhere")
    ctx.close_log()
    assert list(tmp_path.iterdir()) == []
