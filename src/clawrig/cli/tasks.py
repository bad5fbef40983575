"""`clawrig tasks` (placeholder until its issue lands)."""

import typer

app = typer.Typer(help="tasks commands", no_args_is_help=True)
