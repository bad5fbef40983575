"""``clawrig view`` and ``clawrig export inspect``.

- ``clawrig view [JOB_DIR ...] [--host 127.0.0.1] [--port 7788]``: a local, read-only web app
  over job folders (job, compare and trial pages; live while a job runs);
- ``clawrig view --bundle OUT_DIR JOB_DIR ...``: the same pages as a static site;
- ``clawrig export inspect JOB_DIR OUT``: Inspect AI eval logs of the job (one per model).

Exit code 2 for bad usage or input (one line naming the folder or file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clawrig.cli.common import console, err_console, fail, warn_gone_trials
from clawrig.errors import UserError

DEFAULT_JOB = Path("output/demo")
"""The job ``clawrig view`` shows when given none: what ``make demo`` writes."""


def view(
    job_dirs: Annotated[
        list[Path] | None,
        typer.Argument(help="Job output folders (clawrig run --output); default: output/demo"),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")
    ] = 7788,
    bundle: Annotated[
        Path | None,
        typer.Option("--bundle", help="Write a static site to this folder instead of serving."),
    ] = None,
) -> None:
    """Look at jobs in a browser: headline numbers, plots, trials, transcripts, end states."""
    if not job_dirs and not DEFAULT_JOB.is_dir():  # the default, from another folder
        raise UserError(
            f"JOB_DIR: no such folder: {DEFAULT_JOB} (the default: what `make demo` writes in "
            "the repository); give the job folders to show (clawrig run's --output), e.g. "
            "clawrig view path/to/output"
        )
    folders = list(job_dirs or [DEFAULT_JOB])
    if bundle is not None:
        from clawrig.view.bundle import write_bundle

        report = write_bundle(bundle, folders)
        console.print(
            f"wrote {report.pages} page(s) ({report.trials} trial page(s)) to {report.out}; "
            f"open {report.out / 'index.html'}",
            highlight=False,
            soft_wrap=True,
        )
        return
    from clawrig.view.server import create_app

    app = create_app(folders, host=host)  # reads and indexes the folders: errors before listening
    if not app.state.site.jobs:
        err_console.print(
            f"note: no job in {', '.join(map(str, folders))} yet: a job started there appears "
            "in the jobs list within a second or so",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    import uvicorn

    from clawrig.serving import exposure_warning, tcp_listener

    try:
        sock = tcp_listener(host, port)
    except OSError as exc:
        fail(f"--host/--port: cannot listen on {host}:{port} ({exc.strerror or exc})")
    exposed = exposure_warning(host, "view", "read every trial of these jobs")
    if exposed is not None:
        err_console.print(exposed, highlight=False, markup=False, soft_wrap=True)
    address, bound = sock.getsockname()[:2]
    address = f"[{address}]" if ":" in address else address
    # (no markup: rich took "[fd00::2]" for a tag and printed http://:PORT/, helper-170)
    console.print(
        f"clawrig view on http://{address}:{bound}/  (Ctrl-C to stop)",
        highlight=False,
        markup=False,
    )
    import signal

    # uvicorn puts the SIGINT handler it found back before raising the signal again: started
    # with it ignored (`&` in a script) a Ctrl-C stopped the viewer with exit 0 (helper-155)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def export_inspect(
    job_dir: Annotated[Path, typer.Argument(help="A job's output folder (clawrig run --output).")],
    out: Annotated[Path, typer.Argument(help="Folder for the .eval log files.")],
) -> None:
    """Write the job as Inspect AI eval logs (open them with `inspect view --log-dir OUT`)."""
    from clawrig.export.inspect import export_inspect as run_export

    unreadable: dict[str, str] = {}

    def checked() -> None:
        warn_gone_trials(job_dir, "exported (the log's metrics are the summary's)")

    for path in run_export(job_dir, out, unreadable, checked):
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)
    if unreadable:  # (left out silently before: helper-137)
        first, why = next(iter(unreadable.items()))
        console.print(
            f"skipped {len(unreadable)} trial(s) whose result.json cannot be read "
            f"(first: {first}: {why})",
            highlight=False,
            soft_wrap=True,
        )


def register(app: typer.Typer) -> None:
    """Add ``view`` to the main app (``clawrig export inspect`` is :func:`export_inspect`,
    registered by :mod:`clawrig.cli.export`)."""
    app.command("view")(view)
