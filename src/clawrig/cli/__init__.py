"""The ``clawrig`` command line (typer)."""

import sys

# httpx's package imports its command-line client (httpx._main) when it is imported, and that
# imports click, pygments and rich's syntax highlighting: ~0.2 s of CPU at the start of every
# `clawrig run` (its gateway uses httpx), for a CLI clawrig never calls. A None entry makes
# that one import fail, which httpx expects (it then defines a ``main`` that says its CLI
# extras are missing); the rest of httpx is unchanged, and the `httpx` command, its own
# process, still works. Only when httpx is not imported yet (not to undo a real one), and only
# for the command line: a program that imports clawrig as a library keeps its httpx whole.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
