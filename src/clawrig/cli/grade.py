"""`clawrig grade` (placeholder until its issue lands)."""

import typer


def register(app: typer.Typer) -> None:
    """Add the `grade` command to the main app."""
