"""`clawrig run` (placeholder until its issue lands)."""

import typer


def register(app: typer.Typer) -> None:
    """Add the `run` command to the main app."""
