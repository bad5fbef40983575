"""`clawrig tools` (placeholder until its issue lands)."""

import typer

app = typer.Typer(help="tools commands", no_args_is_help=True)
