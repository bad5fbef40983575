"""Helpers for the viewer's tests (the fixtures are in conftest.py): the scripted model, the
`clawrig` command, starting `clawrig view`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from clawrig.testing.scripted_server import call, load_script, reply, usage

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "suites" / "demo"
TASKS = ("000001", "000003", "000004", "000015")
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
CLAWRIG = Path(sys.executable).parent / "clawrig"
COST = 0.0012
"""USD the scripted model charges per reply."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clawrig(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLAWRIG), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=kwargs.pop("timeout", 300),
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **kwargs.pop("env", {})},
        **kwargs,
    )


SUB_TASK = "Write the word delegated to /tmp_workspace/sub.txt"
CRON_TEXT = "time to check"


def responder() -> Any:
    """The scripted model: the example script's replies on task 000015 (picked by the number
    of assistant turns so far); on 000001 a sub-agent (sessions_spawn, which writes sub.txt),
    then a cron job whose message arrives between turns; "I cannot help" on any other task.
    Every reply costs COST."""
    replies, _ = load_script(REPO / "examples" / "scripted-000015.json")

    def respond(request: dict[str, Any]) -> Any:
        messages = request.get("messages") or []
        first = str(next((m.get("content") for m in messages if m.get("role") == "user"), ""))
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        base = reply("I cannot help with that.")
        if "coauthor" in first and turn < len(replies):
            base = replies[turn]
        elif first == SUB_TASK:
            base = reply(tool_calls=[call("exec", {"command": "echo delegated > sub.txt"})])
            base = base if turn == 0 else reply("sub-agent wrote sub.txt")
        elif "expenses.csv" in first:
            job = {"name": "ping", "schedule": {"kind": "delay", "delayMs": 50},
                   "payload": {"kind": "message", "text": CRON_TEXT}}  # fmt: skip
            steps = [
                reply(tool_calls=[call("sessions_spawn", {"task": SUB_TASK, "label": "writer"})]),
                reply(tool_calls=[call("sessions_yield", {"message": "waiting for writer"})]),
                reply(tool_calls=[call("cron", {"action": "add", "job": job})]),
                reply(tool_calls=[call("exec", {"command": "sleep 0.3"})]),
            ]
            base = steps[turn] if turn < len(steps) else reply("main: done")
        return base.model_copy(update={"usage": usage(100, 20, cost=COST)})

    return respond


def read_summary(folder: Path) -> dict[str, Any]:
    [path] = folder.glob("summary_*.json")
    return json.loads(path.read_text(encoding="utf-8"))


def start_view(*args: Any) -> tuple[subprocess.Popen[bytes], str]:
    """``clawrig view ARGS --port P`` in a subprocess; returns it and its base URL once it
    answers."""
    port = free_port()
    proc = subprocess.Popen(
        [str(CLAWRIG), "view", *map(str, args), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"clawrig view exited: {proc.stderr.read().decode()}")
        try:
            if httpx.get(base, timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("clawrig view did not answer within 60 s")
