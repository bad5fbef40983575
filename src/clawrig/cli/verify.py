"""``clawrig verify PATH``: self-check, killer question and lint for every task or sample.

Prints a report per sample (its errors and warnings, with diffs; ``--verbose`` adds what ran)
and a summary table; ``--json`` prints the :class:`clawrig.verify.report.VerifyReport` as JSON
instead. Exit code 0 when nothing failed, 1 on any error, 2 for bad usage.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from clawrig.choices import DEFAULT_MEMORY_MB
from clawrig.cli.common import (
    DEFAULT_PARALLEL,
    ROOT_HELP,
    SANDBOX_PANEL,
    MemoryMbOption,
    TimeoutMultiplierOption,
    echo_json,
    err_console,
    local_sandbox_guard,
    run_async,
    signals_held,
    stdout_console,
)
from clawrig.errors import UserError
from clawrig.sandbox.kinds import check_sandbox_kind

if TYPE_CHECKING:
    from clawrig.spec.task import Task
    from clawrig.verify.report import Finding, SampleReport, VerifyReport

# The verify machinery is imported when the command runs (fast start-up); this mirrors
# clawrig.verify.DEFAULT_THRESHOLD (a test checks).
DEFAULT_THRESHOLD = 0.5

_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim", "pass": "green",
          "warn": "yellow", "fail": "bold red"}  # fmt: skip
SCORE_COLUMNS = ("golden", "oracle", "empty", "removed", "corrupted")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def render_sample(sample: SampleReport, verbose: bool = False) -> Group:
    """One sample's block: a header line, then its findings (info only when ``verbose``)."""
    head = Text()
    head.append(f"{sample.id}", style="bold")
    if sample.name:
        head.append(f"  {sample.name}")
    head.append(f"  {sample.status.upper()}", style=_STYLE[sample.status])
    parts: list[Text | Padding] = [head]
    for f in sample.findings:
        if f.severity == "info" and not verbose:
            continue
        parts.append(Padding(finding_text(f), (0, 0, 0, 2), expand=False))
        if f.diff:
            parts.append(
                Padding(Text(f.diff.rstrip("\n"), style="cyan"), (0, 0, 0, 6), expand=False)
            )
    return Group(*parts)


def finding_text(f: Finding) -> Text:
    """One finding as a line: severity, check, message and where (``[file:line]``)."""
    line = Text()
    line.append(f"{f.severity:<7}", style=_STYLE[f.severity])
    line.append(f" {f.check:<18} ")
    line.append(f.message)
    if f.location():
        line.append(f"  [{f.location()}]", style="dim")
    return line


def render_summary(report: VerifyReport) -> Table:
    """The summary table: one row per sample with its scores, error and warning counts."""
    table = Table(title=f"clawrig verify: {report.path} (threshold {report.threshold:g})")
    table.add_column("id")
    table.add_column("category")
    table.add_column("expected", justify="right")
    for col in SCORE_COLUMNS:
        table.add_column(col, justify="right")
    table.add_column("errors", justify="right")
    table.add_column("warnings", justify="right")
    table.add_column("status")
    for s in report.samples:
        table.add_row(
            s.id,
            s.category or "-",
            _fmt(s.expected_reward),
            *(_fmt(s.scores.get(c)) for c in SCORE_COLUMNS),
            str(s.errors),
            str(s.warnings),
            Text(s.status, style=_STYLE[s.status]),
        )
    c = report.counts
    table.caption = f"{c['pass']} pass, {c['warn']} warn, {c['fail']} fail"
    if report.interrupted:
        table.caption += (
            f" (interrupted: {len(report.samples)} of {report.task_count} verified; the others "
            "were not)"
        )
    # ("pass" says less for these: a new user read it as a solved task reproduced)
    graded = [any(v is not None for v in s.scores.values()) for s in report.samples]
    unread = graded.count(False)  # (also a grader failing on every rollout: helper-137)
    untried = sum(
        1
        for s, g in zip(report.samples, graded, strict=True)
        if g and not {"golden", "oracle"} & s.scores.keys()
    )
    if untried:
        table.caption += (
            f"; {untried} with no golden end state or trajectory to self-check: only the empty "
            "rollout was graded (a gold answer a judge grades is not self-checked)"
        )
    if unread:  # (counted as "only the empty rollout" when nothing was graded: helper-135)
        table.caption += (
            f"; {unread} not graded at all (their errors or warnings say why: --verbose or --json)"
        )
    if any(s.scores.get(c) is None for s in report.samples for c in SCORE_COLUMNS):
        # (helper-176: a grader that ran and timed out is no "not run")
        table.caption += (
            "; - : no score for that sample: not run (removed and corrupted, when its golden "
            "rollout writes no result files), or its grading failed (--verbose or --json says "
            "why)"
        )
    return table


class _Progress:
    """Lines on stderr while ``verify`` runs (the report goes to stdout at the end): what will
    be verified and how long a grader may take at most, then each sample as it is done
    (helper-175: a grader stuck in a loop held a sample set silent for minutes)."""

    def __init__(self) -> None:
        self.total = self.finished = 0
        self.started = time.monotonic()

    def start(self, tasks: list[Task], multiplier: float, unread: int = 0) -> None:
        """The first line: the ``tasks`` read (to verify), and ``unread``, the samples that
        could not be read (failed already; the report lists them too)."""
        self.total = len(tasks)
        also = f" ({unread} more could not be read: they fail)" if unread else ""
        if tasks:
            longest = max(t.grader.timeout_seconds for t in tasks) * multiplier
            err_console.print(
                f"verifying {len(tasks)} task(s){also}: up to 5 gradings each, a grader "
                f"stopped after {longest:g} s at most (--timeout-multiplier)",
                highlight=False,
                soft_wrap=True,
            )
        elif unread:
            err_console.print(
                f"{unread} sample(s) could not be read: they fail", highlight=False, soft_wrap=True
            )

    def done(self, sample: SampleReport) -> None:
        self.finished += 1
        err_console.print(
            f"[{self.finished}/{self.total}] {sample.id}: {sample.status} "
            f"({time.monotonic() - self.started:.1f} s elapsed)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


def register(app: typer.Typer) -> None:
    """Add the ``verify`` command to the main app."""

    @app.command("verify")
    def verify(
        path: Annotated[
            Path,
            typer.Argument(
                help="The tasks: a four-folder set, a WildClawBench task file or folder of "
                "task files, or a DataClawBench root (as clawrig run reads them)."
            ),
        ],
        json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
        threshold: Annotated[
            float,
            typer.Option("--threshold", help="An empty or wrong rollout must score below this."),
        ] = DEFAULT_THRESHOLD,
        sandbox: Annotated[
            str,
            typer.Option("--sandbox", rich_help_panel=SANDBOX_PANEL, help="bwrap | docker | local"),
        ] = "bwrap",
        memory_mb: MemoryMbOption = DEFAULT_MEMORY_MB,
        parallel: Annotated[
            int, typer.Option("--parallel", "-p", min=1, help="Sandboxes at once.")
        ] = DEFAULT_PARALLEL,
        root: Annotated[Path | None, typer.Option("--root", help=ROOT_HELP)] = None,
        verbose: Annotated[
            bool, typer.Option("--verbose", "-v", help="Also show what passed.")
        ] = False,
        timeout_multiplier: TimeoutMultiplierOption = 1.0,
        strict: Annotated[
            bool,
            typer.Option(
                "--strict",
                help="A warning fails too (exit 1): e.g. a recorded tool result replay does "
                "not reproduce (lint.replay_diff), for a data set's gate.",
            ),
        ] = False,
    ) -> None:
        """Check that every task or sample can be trusted; exit 1 on failure.

        Three checks per task: the self-check (its reference solution, replayed in a
        sandbox, earns the expected score), the killer question (does the grader reward a
        wrong rollout? an empty one, and the golden end state with its result files removed
        or corrupted, must score below --threshold) and lint (the files and fields the format
        asks for).
        """
        check_sandbox_kind(sandbox)
        from clawrig.verify import verify_path

        if not path.exists():
            raise UserError(f"PATH: no such file or folder: {path}")
        local_sandbox_guard(sandbox, parallel)

        progress = _Progress()
        made: list[VerifyReport] = []
        try:
            report = run_async(
                verify_path(
                    path,
                    threshold=threshold,
                    sandbox=sandbox,
                    memory_mb=memory_mb,
                    parallel=parallel,
                    root=root,
                    timeout_multiplier=timeout_multiplier,
                    # (made[0] holds, before any is verified, the samples that could not
                    # be read: helper-206 saw "verifying 1 task(s)" above a table of 2)
                    on_start=lambda tasks: progress.start(
                        tasks, timeout_multiplier, len(made[0].samples) if made else 0
                    ),
                    on_sample=progress.done,
                    on_report=made.append,
                )
            )
        except KeyboardInterrupt:  # (Ctrl-C, or SIGTERM: Terminated) what was verified is said
            if made:  # (verify_path sorted its samples as it was stopped)
                made[0].interrupted = True
                _print_report(made[0], json_out, verbose)
            raise
        _print_report(report, json_out, verbose)
        warned = any(f.severity == "warning" for f in report.suite_findings) or any(
            s.warnings for s in report.samples
        )
        # (a trajectory with made-up tool results passed with a warning: helper-205)
        if report.ok and strict and warned:
            warns = sum(1 for s in report.samples if s.status == "warn")
            err_console.print(
                f"--strict: {warns} sample(s) with a warning (and no error) count as failed",
                highlight=False,
                soft_wrap=True,
            )  # (the exit 1 was unsaid: helper-206)
        raise SystemExit(0 if report.ok and not (strict and warned) else 1)


def _print_report(report: VerifyReport, json_out: bool, verbose: bool) -> None:
    """The report on stdout: as JSON, or each sample's findings and the summary table; whole
    (a signal meanwhile is raised once it is written: :func:`signals_held`)."""
    with signals_held():
        if json_out:
            echo_json(report.model_dump_json(indent=2))
            return
        out = stdout_console()
        for f in report.suite_findings:
            out.print(finding_text(f))
        for sample in report.samples:
            out.print(render_sample(sample, verbose))
        out.print(render_summary(report))
