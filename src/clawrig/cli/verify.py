"""`clawrig verify` (placeholder until its issue lands)."""

import typer


def register(app: typer.Typer) -> None:
    """Add the `verify` command to the main app."""
