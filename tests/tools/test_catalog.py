"""The tool catalog against the captured OpenClaw 2026.3.24 schema, and Toolset.call's handling
of bad tool calls (unknown tool, malformed JSON, non-object, missing/mistyped arguments)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clawrig.errors import SandboxDied, UserError
from clawrig.testing.paths import SHARED
from clawrig.tools import PROFILES, Toolset, tool_schema

REPO = Path(__file__).resolve().parents[2]
CAPTURED = SHARED / "reference" / "openclaw-2026.3.24" / "tool_schema.json"
CODING_NAMES = [
    "read",
    "edit",
    "write",
    "exec",
    "process",
    "cron",
    "sessions_list",
    "sessions_history",
    "sessions_send",
    "sessions_yield",
    "sessions_spawn",
    "subagents",
    "session_status",
    "web_search",
    "web_fetch",
    "memory_search",
    "memory_get",
]  # fmt: skip  (openclaw-tools.md, the table's order)


def _by_name(tools: list[dict]) -> dict[str, dict]:
    return {t["function"]["name"]: t["function"] for t in tools}


def test_coding_profile_matches_the_captured_schema() -> None:
    captured = json.loads(CAPTURED.read_text())
    ours = tool_schema("coding")
    assert [t["function"]["name"] for t in ours] == [t["function"]["name"] for t in captured]
    assert [t["function"]["name"] for t in ours] == CODING_NAMES
    for mine, theirs in zip(ours, captured, strict=True):
        name = theirs["function"]["name"]
        p, q = mine["function"]["parameters"], theirs["function"]["parameters"]
        assert list(p["properties"]) == list(q["properties"]), name
        assert p.get("required", []) == q.get("required", []), name
        for prop, spec in q["properties"].items():
            assert p["properties"][prop].get("type") == spec.get("type"), (name, prop)
            assert p["properties"][prop].get("enum") == spec.get("enum"), (name, prop)
        assert p == q, name  # and nothing else changed
        assert mine["type"] == "function"
        assert isinstance(mine["function"]["description"], str)
        assert len(mine["function"]["description"]) > 20


def test_required_lists_as_documented() -> None:
    # openclaw-tools.md marks these required (*); read and edit have none (aliases)
    fns = _by_name(tool_schema())
    assert fns["write"]["parameters"]["required"] == ["content"]
    assert fns["exec"]["parameters"]["required"] == ["command"]
    assert fns["sessions_spawn"]["parameters"]["required"] == ["task"]
    assert fns["memory_get"]["parameters"]["required"] == ["path"]
    assert fns["read"]["parameters"]["required"] == []
    assert "required" not in fns["sessions_yield"]["parameters"]


def test_same_parameters_as_the_demo_datapoints() -> None:
    for path in sorted((REPO / "suites" / "demo" / "datapoints").glob("*.json")):
        theirs = json.loads(path.read_text())["tool_schema"]
        ours = tool_schema()
        assert [t["function"]["parameters"] for t in ours] == [
            t["function"]["parameters"] for t in theirs
        ], path.name


def test_profiles() -> None:
    assert [t["function"]["name"] for t in tool_schema("minimal")] == [
        "read", "edit", "write", "exec", "process",
    ]  # fmt: skip
    full = tool_schema("full")
    assert [t["function"]["name"] for t in full] == [*CODING_NAMES, "image"]
    image = full[-1]["function"]["parameters"]
    assert image["required"] == ["image"]
    assert list(image["properties"]) == ["image", "prompt", "model", "maxBytesMb"]
    assert set(PROFILES) == {"coding", "minimal", "full"}
    assert Toolset().schema() == tool_schema("coding")
    with pytest.raises(UserError, match="tool profile 'nope' is unknown"):
        Toolset("nope")


def test_cli_prints_the_schema() -> None:
    exe = Path(sys.executable).with_name("clawrig")  # the console script of this venv

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([exe, "tools", *args], capture_output=True, text=True)

    out = run("schema")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == tool_schema("coding")
    minimal = run("schema", "--profile", "minimal")
    assert [t["function"]["name"] for t in json.loads(minimal.stdout)] == list(PROFILES["minimal"])
    bad = run("schema", "--profile", "nope")
    assert bad.returncode == 2
    assert "tool profile 'nope' is unknown (choose from coding, minimal, full)" in bad.stderr
    assert "Traceback" not in bad.stderr


# -- argument handling (no sandbox call happens for these) --------------------------------


async def test_unknown_tool_names_the_available_ones(ctx) -> None:
    r = await Toolset("minimal").call(ctx, "browser", "{}")
    assert r.is_error
    assert r.text == "Tool 'browser' not found. Available tools: read, edit, write, exec, process."
    # a tool of another profile is unknown here too
    r = await Toolset("minimal").call(ctx, "cron", '{"action": "list"}')
    assert r.is_error and "not found" in r.text


async def test_malformed_json_is_an_error_result(call) -> None:
    r = await call("exec", '{"command": "echo hi"')
    assert r.is_error
    assert r.text.startswith("Invalid JSON in the arguments of exec: ")
    assert "line 1 column 22" in r.text  # 21 characters, then the missing brace
    assert '{"command": "<string>"}' in r.text


async def test_non_object_arguments(call) -> None:
    r = await call("exec", '["echo hi"]')
    assert r.is_error
    assert r.text.startswith("The arguments of exec must be a JSON object, got list")


async def test_missing_required_argument(call) -> None:
    r = await call("write", {"path": "a.txt"})
    assert r.is_error
    assert "Invalid arguments for write: missing required argument `content`" in r.text
    assert "content*: string" in r.text


async def test_wrong_type(call) -> None:
    r = await call("exec", {"command": "true", "timeout": "soon"})
    assert r.is_error
    assert "argument `timeout`" in r.text and '(got "soon")' in r.text
    r = await call("exec", {"command": ["echo", "hi"]})
    assert r.is_error and "argument `command`" in r.text


async def test_enum_and_additional_properties(call) -> None:
    r = await call("cron", {"action": "explode"})
    assert r.is_error and "argument `action`" in r.text and "'status'" in r.text
    r = await call("web_search", {"query": "x", "lang": "en"})  # additionalProperties: false
    assert r.is_error and "unknown argument `lang`" in r.text


async def test_empty_arguments_mean_no_arguments(call) -> None:
    r = await call("sessions_list", "")
    assert r.is_error  # no session manager in this context, but the arguments were fine
    assert r.text == "sessions_list: sessions are not available in this trial (no session manager)"


async def test_numbers_given_as_strings_are_accepted(call, workspace) -> None:
    (workspace / "n.txt").write_text("1\n2\n3\n4\n")
    r = await call("read", '{"path": "n.txt", "offset": "2", "limit": 2}')
    assert not r.is_error
    assert r.text == "2\n3\n\n[1 more line in file. Use offset=4 to continue.]"


async def test_null_optional_arguments_are_ignored(call) -> None:
    r = await call("exec", '{"command": "echo ok", "workdir": null, "timeout": null}')
    assert r.text == "ok\n[exit code 0]"


async def test_a_dead_sandbox_propagates(call, sandbox) -> None:
    # infrastructure failures are not the model's: they raise, never become tool results
    await sandbox.stop()
    with pytest.raises(SandboxDied):
        await call("exec", {"command": "echo hi"})
    with pytest.raises(SandboxDied):
        await call("read", {"path": "a.txt"})
    with pytest.raises(SandboxDied):
        await call("write", {"path": "a.txt", "content": "x"})


def test_tool_schema_is_a_new_list_each_call():
    first = tool_schema("coding")
    n = len(first)
    first[0]["function"]["name"] = "changed"
    first.append({"type": "function"})
    again = tool_schema("coding")
    assert len(again) == n and again[0]["function"]["name"] == "read"  # the captured first
