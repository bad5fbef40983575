"""Tests' programs that must end (a sandbox's start cut at a program's exit, a pool never
closed): run one to its exit; a hang fails the test with every thread's stack, which the
program prints on SIGABRT (its code enables ``faulthandler.enable(all_threads=True)``)."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def run_to_exit(
    argv: list[str], timeout_s: float, **popen: Any
) -> tuple[subprocess.Popen[str], str, str]:
    """Run ``argv`` (``popen``: more of :class:`subprocess.Popen`'s keyword arguments) until it
    exits; returns it with its stdout and stderr. Raises AssertionError, with the program's
    threads' stacks, when it is still running after ``timeout_s`` seconds."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate()
        raise AssertionError(f"the program did not end; its threads:\n{err[-6000:]}") from None
    return proc, out, err
