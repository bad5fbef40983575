"""``clawrig export``: turn a finished job into data.

- ``clawrig export fourfolder JOB_DIR OUT [--min-score 0.96] [--category C]``: graded trials ->
  a four-folder sample set (intent, datapoints, evaluators, reference_payloads, workspaces);
- ``clawrig export sft JOB_DIR OUT.jsonl|OUT.parquet [--min-score 0.96] [--format
  openai|sharegpt]``: one row per graded trial with messages and tools.

Exit code 0 on success, 2 for bad usage or input (one line naming the file), 1 when a sample
cannot be written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from clawrig.choices import SftFormat
from clawrig.cli.common import console, run_async, warn_gone_trials
from clawrig.cli.view import export_inspect
from clawrig.errors import UserError
from clawrig.sandbox.kinds import check_sandbox_kind

# The export machinery is imported inside each command (fast start-up); this mirrors
# clawrig.export.fourfolder.DEFAULT_MIN_SCORE (a test checks).
DEFAULT_MIN_SCORE = 0.96

app = typer.Typer(
    help="Export a job's graded trials: four-folder sets, SFT data, Inspect logs, Harbor tasks.",
    no_args_is_help=True,
    add_completion=False,
)

JobDir = Annotated[Path, typer.Argument(help="A job's output folder (clawrig run --output).")]
MinScore = Annotated[
    float, typer.Option("--min-score", min=0.0, max=1.0, help="Keep trials scoring at least this.")
]
Category = Annotated[
    list[str] | None, typer.Option("--category", help="Keep only this category (repeatable).")
]
BestPerTask = Annotated[
    bool,
    typer.Option(
        "--best-per-task",
        help="Keep one trial per task: its highest-scoring (the first of equals), not every "
        "run of it (--runs, an RL group).",
    ),
]


@app.command("fourfolder")
def fourfolder(
    job_dir: JobDir,
    out: Annotated[Path, typer.Argument(help="New folder for the sample set.")],
    min_score: MinScore = DEFAULT_MIN_SCORE,
    category: Category = None,
    suite: Annotated[
        Path | None,
        typer.Option("--suite", help="The suite the job ran (default: the job's suite_path)."),
    ] = None,
    sandbox: Annotated[
        str, typer.Option("--sandbox", help="bwrap | docker | local (replays, when needed)")
    ] = "bwrap",
    best_per_task: BestPerTask = False,
) -> None:
    """Write the job's graded trials as a four-folder sample set that passes clawrig verify."""
    check_sandbox_kind(sandbox)
    _check_writable(out, "OUT", folder=True)

    from clawrig.export.fourfolder import export_fourfolder

    report = run_async(
        export_fourfolder(
            job_dir, out, min_score=min_score, categories=category or [], suite=suite,
            sandbox=sandbox, best_per_task=best_per_task,
            checked=lambda: warn_gone_trials(job_dir, "exported"),
        )
    )  # fmt: skip
    for s in report.samples:
        note = f"  ({'; '.join(s.notes)})" if s.notes else ""
        console.print(
            f"{s.id}  from task {s.task_id}: {s.trial}  score {s.score:g}{note}", highlight=False
        )
    console.print(
        f"wrote {len(report.samples)} sample(s) to {out} (numbered anew in trial order, as a "
        f"four-folder set's samples are); skipped {_skipped(report)}. Check it with: "
        f"clawrig verify {out}",
        highlight=False,
        soft_wrap=True,
    )


@app.command("sft")
def sft(
    job_dir: JobDir,
    out: Annotated[Path, typer.Argument(help="OUT.jsonl or OUT.parquet")],
    min_score: MinScore = DEFAULT_MIN_SCORE,
    fmt: Annotated[SftFormat, typer.Option("--format", help="Each row's messages.")] = "openai",
    category: Category = None,
    best_per_task: BestPerTask = False,
) -> None:
    """Write one SFT row (messages + tools) per graded trial of the job."""
    from clawrig.export.sft import export_sft

    _check_writable(out, "OUT", folder=False)
    replaced = out.is_file()  # (helper-168: a file there was replaced without a word)
    report = export_sft(
        job_dir,
        out,
        min_score=min_score,
        fmt=fmt,
        categories=category or [],
        best_per_task=best_per_task,
        checked=lambda: warn_gone_trials(job_dir, "exported"),
    )
    console.print(
        f"wrote {report.rows} row(s) to {out} ({fmt}"
        f"{'; it replaced the file that was there' if replaced else ''}); skipped "
        f"{_skipped(report)}",
        highlight=False,
        soft_wrap=True,
    )


def _skipped(report: Any) -> str:
    """ "N trial(s)" and, when N > 0, how many each reason left out (an export's ``skipped``)."""
    from clawrig.export.fourfolder import skipped_counts

    why = skipped_counts(report.skipped, report.min_score)
    return f"{len(report.skipped)} trial(s)" + (f" ({why})" if why else "")


def _check_writable(path: Path, label: str, *, folder: bool) -> None:
    """UserError (one line, exit 2) when ``path`` cannot be written, before any work."""
    from clawrig.runner.preflight import writable_problem

    if problem := writable_problem(path, label, folder=folder):
        raise UserError(problem)


@app.command("harbor")
def harbor(
    source: Annotated[
        Path, typer.Argument(help="A suite path, or a job folder (the tasks it ran).")
    ],
    out: Annotated[Path, typer.Argument(help="Folder for the Harbor task folders.")],
    image: Annotated[
        str, typer.Option("--image", help="Base image of each Dockerfile (python3 and bash).")
    ] = "python:3.11-slim",
    suite: Annotated[str, typer.Option("--suite", help="all, or comma-separated ids.")] = "all",
    allow_internet: Annotated[
        bool | None,
        typer.Option(
            "--allow-internet/--no-internet",
            help="task.toml's allow_internet (default: the task's own). Harbor's docker "
            "environment enforces --no-internet with an egress sidecar it pulls from Docker Hub.",
        ),
    ] = None,
) -> None:
    """Write each task in Harbor's layout, its tests running the clawrig grader.

    Each task: instruction, environment, tests that run the clawrig grader and write the
    reward, solution from the golden trajectory."""
    from clawrig.export.harbor import export_harbor

    report = export_harbor(source, out, image=image, suite=suite, allow_internet=allow_internet)
    for t in report.tasks:
        if t.skipped:
            console.print(f"{t.task_id}  skipped: {t.skipped}", highlight=False, soft_wrap=True)
        else:
            note = f"  ({'; '.join(t.notes)})" if t.notes else ""
            console.print(f"{t.task_id}  {t.folder}{note}", highlight=False, soft_wrap=True)
    if not report.exported:  # as export sft / fourfolder with nothing to write: exit 2
        raise UserError(
            f"{source}: no task to export to Harbor ({len(report.tasks)} skipped, each for "
            "the reason above)"
        )
    # Harbor's oracle agent runs solution/, which only a task with a golden trajectory has
    # (helper-168: the hint named it for tasks without one); another's agent is the user's
    solved = [t for t in report.tasks if not t.skipped and t.has_solution]
    run_one = (
        f"harbor run -p {out}/{solved[0].task_id} -a oracle"
        if solved
        else f"harbor run -p {out}/<task_id> -a AGENT (none has solution/ for -a oracle)"
    )
    console.print(
        f"wrote {len(report.exported)} Harbor task(s) to {out}; skipped "
        f"{len(report.tasks) - len(report.exported)}. Run one with: {run_one}",
        highlight=False,
        soft_wrap=True,
    )


app.command("inspect")(export_inspect)  # written beside `clawrig view` (the Inspect log format)
