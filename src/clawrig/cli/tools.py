"""`clawrig tools`: the native tool set (OpenClaw 2026.3.24's action space).

- ``clawrig tools schema [--profile coding]``: the JSON list of OpenAI function tools, the
  ``tool_schema`` exported datapoints carry.
- ``clawrig tools list [--profile coding]``: one row per tool (name, required parameters).
"""

from __future__ import annotations

import json

import typer
from rich.table import Table

from clawrig.cli.common import console, echo_json

# The tools load on use (fast start-up); these mirror clawrig.tools.catalog (a test checks).
DEFAULT_PROFILE = "coding"
OPENCLAW_VERSION = "2026.3.24"
PROFILES = ("coding", "minimal", "full")


def tool_schema(profile: str) -> list[dict]:
    from clawrig.tools.catalog import tool_schema as _tool_schema

    return _tool_schema(profile)


app = typer.Typer(
    add_completion=False,
    help=f"The native tools (OpenClaw {OPENCLAW_VERSION} action space): schemas and profiles.",
    no_args_is_help=True,
)

_PROFILE_HELP = f"Tool profile: {', '.join(PROFILES)}."


@app.command("schema")
def schema(
    profile: str = typer.Option(DEFAULT_PROFILE, "--profile", help=_PROFILE_HELP),
    indent: int = typer.Option(2, "--indent", help="JSON indent (0: one line)."),
) -> None:
    """Print the profile's tools as a JSON list of OpenAI function tools."""
    tools = tool_schema(profile)
    echo_json(json.dumps(tools, ensure_ascii=False, indent=indent or None))


@app.command("list")
def list_tools(
    profile: str = typer.Option(DEFAULT_PROFILE, "--profile", help=_PROFILE_HELP),
) -> None:
    """Show the profile's tools, in the order they are sent to the model."""
    table = Table(title=f"profile {profile} (OpenClaw {OPENCLAW_VERSION})")
    table.add_column("#", justify="right")
    table.add_column("tool")
    table.add_column("required")
    table.add_column("parameters")
    for i, tool in enumerate(tool_schema(profile), 1):
        fn = tool["function"]
        params = fn["parameters"]
        table.add_row(
            str(i),
            fn["name"],
            ", ".join(params.get("required") or []),
            ", ".join(params.get("properties") or {}),
        )
    console.print(table)
