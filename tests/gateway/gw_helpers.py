"""Helpers shared by the gateway tests (imported by name: tests are not a package)."""

from __future__ import annotations

from pydantic import SecretStr

from clawrig.llm.client import RetryPolicy
from clawrig.llm.pricing import Prices
from clawrig.llm.providers import ModelEndpoint
from clawrig.testing.scripted_server import ScriptedServer

REAL_KEY = "sk-real-7f3c9a1e5b2d4c6e8a0b1c2d3e4f5a6b"
"""A provider key that must reach the upstream and never a sandbox."""
FAST_RETRY = RetryPolicy(attempts=3, initial_s=0.001, max_s=0.01, retry_after_cap_s=0.05)


def upstream(
    srv: ScriptedServer, name: str = "scripted/scripted", prices: Prices | None = None
) -> ModelEndpoint:
    """The scripted server as the trial's upstream, with :data:`REAL_KEY` as its key."""
    return srv.endpoint(name, prices=prices).model_copy(update={"api_key": SecretStr(REAL_KEY)})


KEY_SEARCH = r"""
import glob, os, sys
needle = (sys.argv[1] + sys.argv[2]).encode()  # whole only in this process's memory
procs = 0
for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    try:
        procs += needle in open(path, "rb").read()
    except OSError:
        pass
files = []
for top in sys.argv[3:]:
    for dirpath, _, names in os.walk(top):
        for name in names:
            p = os.path.join(dirpath, name)
            try:
                if needle in open(p, "rb").read(8_000_000):
                    files.append(p)
            except OSError:
                pass
print("procs:%d files:%d %s" % (procs, len(files), " ".join(files[:5])))
"""
"""A python3 script (run inside a sandbox) that looks for a key given in two halves in every
process's environment and command line and in the files under the folders given."""


def key_search_argv(key: str, *folders: str) -> list[str]:
    """The argv that runs :data:`KEY_SEARCH` for ``key`` in the sandbox."""
    half = len(key) // 2
    return ["/usr/bin/python3", "-c", KEY_SEARCH, key[:half], key[half:], *folders]
