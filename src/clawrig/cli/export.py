"""`clawrig export` (placeholder until its issue lands)."""

import typer

app = typer.Typer(help="export commands", no_args_is_help=True)
