"""``python -m clawrig``: the same as the ``clawrig`` command."""

from clawrig.cli.main import app

app()
