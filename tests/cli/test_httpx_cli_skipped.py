"""The command line skips httpx's own CLI module (click, pygments: ~0.14 s of every
`clawrig run`'s start); a program that imports clawrig as a library keeps httpx whole."""

from __future__ import annotations

import subprocess
import sys

PROBE = "import sys, {mod}, httpx; print(sys.modules.get('httpx._main') is not None)"


def _probe(mod: str) -> str:
    r = subprocess.run(
        [sys.executable, "-c", PROBE.format(mod=mod)], capture_output=True, text=True, check=True
    )
    return r.stdout.strip()


def test_the_library_keeps_httpx_cli_and_the_command_line_skips_it():
    assert _probe("clawrig, clawrig.runner.trial") == "True"
    assert _probe("clawrig.cli.main") == "False"
