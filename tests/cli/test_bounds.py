"""Out-of-range numbers on the command line are usage errors (exit 2, no traceback)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "suites/demo", "--port", "70000"],
        ["serve", "suites/demo", "--port", "-1"],
        ["run", "suites/demo", "--timeout-multiplier", "inf"],
        ["run", "suites/demo", "--timeout-multiplier", "1e9"],
        # red team: the job sat listing 10^11 trials per task (nop needs no model to get there)
        ["run", "suites/demo", "--agent", "nop", "--runs", "100000000000"],
        ["run", "suites/demo", "--agent", "nop", "--runs", "1001"],
        # each slot is queued as the node's worker starts: 10^11 of them never finished
        ["run", "suites/demo", "--agent", "nop", "--executor", "ray",
         "--slots-per-node", "100000000000"],
        ["serve", "suites/demo", "--executor", "ray", "--slots-per-node", "100000000000"],
        # a new user's: every trial was then scored 0, its disk "full" with 14 KB used
        ["run", "suites/demo", "--agent", "nop", "--disk-mb", "8"],
    ],
)  # fmt: skip
def test_out_of_range_numbers_are_usage_errors(args: list[str], tmp_path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "clawrig", *args, "-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["run", "suites/demo", "--bogus"], "--bogus"),
        (["run", "suites/demo", "-p", "0"], "--parallel"),
        (["serve", "suites/demo", "--port", "70000"], "--port"),
        (["grade"], "TRIAL_DIR"),
        (["export", "no-such-format"], "no-such-format"),
        (["run", "suites/[demo]", "--runs", "x"], "--runs"),
        (["run", "suites/demo", "--runs", "100000000000"], "--runs"),
        (["serve", "suites/demo", "--slots-per-node", "1001"], "--slots-per-node"),
    ],
)
def test_usage_errors_are_one_line_naming_the_option(args: list[str], named: str) -> None:
    """click's usage errors print as clawrig's own: one line on stderr naming the option and the
    command's --help, exit 2 (not typer's boxed panel)."""
    r = subprocess.run(
        [sys.executable, "-m", "clawrig", *args], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("clawrig: error: ") and named in lines[0], lines[0]
    assert f"'clawrig {args[0]} --help'" in lines[0]
    assert r.stdout == ""


def test_oracle_without_a_golden_trajectory_is_refused_before_any_sandbox(tmp_path) -> None:
    task = "examples/wildclaw/tasks/01_Productivity_Flow/01_Productivity_Flow_task_1_word_count.md"
    r = subprocess.run(
        [sys.executable, "-m", "clawrig", "run", task, "--agent", "oracle"]
        + ["-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert "no golden trajectory or gold answer" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()  # no lock, no progress file, nothing to --resume


def test_runs_up_to_the_bound_are_taken() -> None:
    """--runs 1000 (the bound) passes the option's check: the next problem named is the
    agent's."""
    r = subprocess.run(
        [sys.executable, "-m", "clawrig", "run", "suites/demo", "--runs", "1000", "--agent", "x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "clawrig: error: --agent: unknown agent 'x' (choose from native, oracle, nop, openclaw; "
        "openclaw@VERSION pins OpenClaw's version)"
    ]


@pytest.mark.parametrize("command", ["run", "verify"])
@pytest.mark.parametrize("value", ["nan", "inf", "5000", "0", "-1", "0.001"])
def test_a_timeout_multiplier_out_of_range_says_the_range(command: str, value: str) -> None:
    """helper-177: ``--timeout-multiplier nan`` was refused as "less than or equal to 1000"."""
    r = subprocess.run(
        [sys.executable, "-m", "clawrig", command, "suites/demo", "--timeout-multiplier", value],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    shown = f"{float(value):g}"  # as the line shows the number it read
    assert r.stderr.strip() == (
        "clawrig: error: Invalid value for '--timeout-multiplier': must be a number from 0.01 "
        f"to 1000, got {shown} (see 'clawrig {command} --help')"
    )
