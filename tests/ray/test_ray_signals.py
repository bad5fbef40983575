"""The harness's signal handlers around ``ray.init`` (no cluster needed: Ray's own handler, as
``ray.init`` installs it, in a process of its own)."""

from __future__ import annotations

import signal
import subprocess
import sys


def test_a_signal_during_ray_init_reaches_the_harness_handler():
    """helper-166: a SIGTERM ~1 s into a Ray job exited 15 with a C++ stack dump and no
    clawrig line (``ray.init`` puts ``sys.exit(15)`` on SIGTERM; in the middle of its core
    worker's start it aborted). Around ``ray.init`` the harness's handlers are kept: blocked
    while it runs, Ray's own handler (its real ``set_sigterm_handler``, as ``ray.init`` calls
    it) never sees SIGTERM, and the harness's, put back, takes it once it is over."""
    script = """
import os, signal, sys
import ray._private.utils as ray_utils
from clawrig.runner.executors.ray import keeping_signal_handlers

class Ours(Exception):
    pass

def ours(signum, frame):
    raise Ours(signum)

signal.signal(signal.SIGTERM, ours)
try:
    with keeping_signal_handlers(hold=True):
        ray_utils.set_sigterm_handler(lambda signum, frame: sys.exit(signum))
        os.kill(os.getpid(), signal.SIGTERM)
        held = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        print("inside: held", signal.SIGTERM in held, signal.SIGINT in held, flush=True)
except Ours as exc:
    print("ours", exc.args[0], signal.getsignal(signal.SIGTERM) is ours)
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # (SIGINT is not held: a Ctrl-C still stops a join that hangs)
    assert proc.stdout.splitlines() == [
        "inside: held True False",
        f"ours {int(signal.SIGTERM)} True",
    ]
