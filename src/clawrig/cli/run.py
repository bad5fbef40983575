"""``clawrig run PATH``: run a suite with an agent and a model; write trial folders, progress
and a summary. Options follow DataClawBench's CLI (--model/-m, --judge, --suite/-s, --task/-t,
--parallel/-p, --timeout-multiplier, --runs, --resume, --verbose) plus clawrig's own.
"""

from __future__ import annotations

import gc
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from clawrig.choices import (
    DEFAULT_DISK_MB,
    DEFAULT_MEMORY_MB,
    MAX_DISK_MB,
    MAX_RUNS,
    MAX_WORKERS,
    Executor,
    GraderMode,
    WebFlag,
    WebMiss,
    WebProvider,
)
from clawrig.cli.common import (
    DEFAULT_PARALLEL,
    LIMITS_PANEL,
    MAX_SLOTS_PER_NODE,
    ROOT_HELP,
    SANDBOX_PANEL,
    SCALE_PANEL,
    WEB_PANEL,
    MemoryMbOption,
    TimeoutMultiplierOption,
    err_console,
    raise_signal,
    stdout_console,
    terminate_like_ctrl_c,
    usd_amount,
)
from clawrig.errors import (
    InterruptedAfterJob,
    ModelRequestError,
    SummaryNotWritten,
    UserError,
)

if TYPE_CHECKING:
    from rich.table import Table

    from clawrig.runner.batch import JobState

# Heavy modules (the runner, pydantic models, the openai SDK) are imported inside the command,
# so `clawrig --help` and other commands start fast.

PROGRESS_REFRESH_HZ = 2.0
"""Redraws per second of the progress bar on a terminal (none when stderr is not one)."""


SUMMARY_TABLE_ROWS = 50
"""Trials the end-of-job table shows at most (a 500-row table took ~0.8 s of the harness's CPU
to lay out, after the job, and no terminal shows it whole); the summary file lists every one."""


def table_rows(rows: list[dict[str, Any]], limit: int = SUMMARY_TABLE_ROWS) -> list[dict[str, Any]]:
    """At most ``limit`` of the summary's trial ``rows``, in their order: the unscored ones
    (an error other than the agent's) first, then the lowest scores; every row when there
    are no more than ``limit``."""
    if len(rows) <= limit:
        return rows

    def rank(i: int) -> tuple[int, float]:
        row = rows[i]
        score = row.get("score")
        unscored = score is None or (row.get("error") or {}).get("kind") not in (None, "agent")
        return (0 if unscored else 1, score if score is not None else -1.0)

    keep = set(sorted(range(len(rows)), key=rank)[:limit])
    return [row for i, row in enumerate(rows) if i in keep]


def first_line(message: Any, width: int, *, tail: int = 0) -> str:
    """The first line of an error message, cut to at most ``width`` characters when longer:
    its start and (``tail`` > 0) up to its last ``tail`` characters, where clawrig's messages
    say what to do, joined by " … " (a cut mid-word read as the whole message); with a tail
    both cuts fall between words where a space is near (within a fifth of each part)."""
    lines = str(message or "").splitlines()
    line = lines[0] if lines else ""
    if len(line) <= width:
        return line
    if not tail:
        return line[: width - 1] + "…"
    tail = min(tail, width // 2)
    head = line[: width - tail - 3]
    if (space := head.rfind(" ")) > len(head) * 4 // 5:
        head = head[:space]
    end = line[-tail:]
    if 0 <= (space := end.find(" ")) < tail // 5:
        end = end[space + 1 :]
    return f"{head} … {end}"


MESSAGE_WIDTH, MESSAGE_TAIL = 400, 160
"""Characters of a trial's error (or stop) message listed under the job's table, and of them
its last ones kept (:func:`first_line`): where a message says what to do."""


def _mean_label(mean: dict[str, Any]) -> str:
    """What the summary's ``mean`` averages: its graded trials, or (``unit`` "task", with
    several runs of a task) each task's mean over its graded runs."""
    if mean.get("unit") == "task":
        return f"mean score over {mean.get('n', 0)} task(s) (each its runs' mean)"
    return "mean score of the graded trials"


def render_summary(summary: dict[str, Any]) -> Table:
    """The end-of-job table: one row per trial (task, run, score, error or why a graded agent
    was cut short (``stopped: cost_budget``), trial folder; past
    :data:`SUMMARY_TABLE_ROWS` trials, the unscored and lowest-scored ones: :func:`table_rows`),
    then the totals (trials, graded, errors, mean score with its 95% interval)."""
    from rich.table import Table

    from clawrig.spec.trial import CUT_SHORT

    table = Table(title=f"clawrig: {summary['model']} ({summary['agent']})", show_lines=False)
    runs = int(summary.get("runs_per_task") or 1)
    table.add_column("task")
    if runs > 1:
        table.add_column("run", justify="right")
    table.add_column("score", justify="right")
    table.add_column("error / stop")
    table.add_column("trial folder")
    shown = table_rows(summary["tasks"])
    for row in shown:
        score = row.get("score")
        err = row.get("error")
        err_txt = f"{err.get('kind')}: {first_line(err.get('message'), 60)}" if err else ""
        if not err and row.get("stop_reason") in CUT_SHORT:  # graded as it stood (helper-168:
            err_txt = f"stopped: {row['stop_reason']}"  # a budget's 0 showed no reason)
        cells = [row["task_id"]]
        if runs > 1:
            cells.append(str(row["run_index"]))
        cells += ["-" if score is None else f"{score:.4f}", err_txt, row.get("trial") or ""]
        table.add_row(*cells)
    m = summary.get("mean") or {}
    mean_txt = ""
    if m.get("mean") is not None:
        if m.get("low") is not None and m.get("high") is not None:  # scores live in [0, 1]
            mean_txt = (
                f"[95% CI] {m['mean']:.4f} [{max(m['low'], 0.0):.3f}, {min(m['high'], 1.0):.3f}]"
            )
        else:  # one score (one trial, or one task): no interval to give
            mean_txt = f"{m['mean']:.4f} (n={m.get('n', 1)}: no interval)"
    # an agent error is scored (0); every other kind is not scored (error_count)
    kinds = dict(summary.get("errors_by_kind") or {})
    agent = kinds.pop("agent", 0)
    table.caption = (
        f"{len(summary['tasks'])} trial(s), {summary['evaluated_count']} graded"
        + (f" ({agent} of them agent error(s), scored 0)" if agent else "")
        + f", {summary['error_count']} not scored"
        + (f" ({', '.join(f'{kind} {n}' for kind, n in kinds.items())})" if kinds else "")
        + (f"; {_mean_label(m)} {mean_txt}" if mean_txt else "; no trial graded: no mean score")
    )
    if len(shown) < len(summary["tasks"]):
        table.caption += (
            f"; the table shows {len(shown)} of them (the unscored and lowest scores first): "
            "the summary file lists all"
        )
    return table


EXIT_OK, EXIT_TRIAL_ERRORS, EXIT_USAGE, EXIT_BUDGET, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
"""``clawrig run`` exit codes (also in its --help)."""

GRADER_HELP = (
    "auto: each task's own grader (its Python checks, else a judge when the job has one); "
    "judge: an LLM judge compares the answer with the reference; exact: the answer must "
    "match the reference; both: judge and exact, with their agreement; programmatic: only "
    "the task's Python checks"
)


def register(app: typer.Typer) -> None:
    """Add ``run`` to the main app."""

    @app.command(
        "run",
        epilog="Exit codes: 0 every trial ran and was graded (an agent error is graded: "
        "score 0); 1 some trial ended with an error that left it unscored (or, with "
        "--agent oracle, missed its expected reward; or the model's server "
        "could not be reached, or its output folder or progress file could not be written, or "
        "the folder or its lock file was removed or replaced while it ran, and the job "
        "stopped, --resume continues; or its summary could not be written); 2 bad "
        "input, found "
        "before any sandbox starts, or a model server refusing the job's first request, or a "
        "--replay that diverged (finished trials kept, --resume continues); 3 the "
        "--budget-usd cap stopped the job before every trial ran (--resume with a higher "
        "budget continues); 130 interrupted (Ctrl-C), 143 terminated (SIGTERM: kill, "
        "timeout), both stopped cleanly (--resume continues); 141 stdout's reader went away "
        "(--help | head; a job's end-of-run table cut so keeps the job's code).",
    )
    def run(
        path: Annotated[
            Path | None,
            typer.Argument(
                help="Suite: a task file, a folder of task files, a four-folder set or a "
                "DataClawBench root."
            ),
        ] = None,
        task: Annotated[
            Path | None, typer.Option("--task", "-t", help="Run this one task file.")
        ] = None,
        suite: Annotated[
            str, typer.Option("--suite", "-s", help="all, or task ids: a,b,c")
        ] = "all",
        category: Annotated[
            list[str] | None,
            typer.Option("--category", help="Only tasks of this category (repeatable)."),
        ] = None,
        model: Annotated[
            str | None,
            typer.Option(
                "--model", "-m", help="The agent's model, provider/model (default: DEFAULT_MODEL)."
            ),
        ] = None,
        judge: Annotated[
            str | None,
            typer.Option(
                "--judge",
                help="The judge model, provider/model (default: JUDGE_MODEL from the "
                "environment or .env).",
            ),
        ] = None,
        agent: Annotated[
            str,
            typer.Option("--agent", help="native | oracle | nop | openclaw (or openclaw@VERSION)"),
        ] = "native",
        sandbox: Annotated[
            str,
            typer.Option("--sandbox", rich_help_panel=SANDBOX_PANEL, help="bwrap | docker | local"),
        ] = "bwrap",
        environment: Annotated[
            str,
            typer.Option(
                "--env",
                rich_help_panel=SANDBOX_PANEL,
                help="The system tasks run on: auto (the format's, when built) | host | "
                "base | wildclaw | dataclaw | a spec FILE (built when missing).",
            ),
        ] = "auto",
        image: Annotated[
            str | None,
            typer.Option(
                "--image",
                rich_help_panel=SANDBOX_PANEL,
                help="A local Docker image (--sandbox docker).",
            ),
        ] = None,
        no_warm: Annotated[
            bool,
            typer.Option(
                "--no-warm",
                rich_help_panel=SANDBOX_PANEL,
                help="Run a task's warmup installs in every trial's sandbox (by default they "
                "run once, and every trial starts from the result).",
            ),
        ] = False,
        parallel: Annotated[
            int,
            typer.Option(
                "--parallel",
                "-p",
                rich_help_panel=SCALE_PANEL,
                min=1,
                help="Trials at once, each in its own sandbox.",
            ),
        ] = DEFAULT_PARALLEL,
        runs: Annotated[
            int | None,
            typer.Option(
                "--runs",
                min=1,
                max=MAX_RUNS,
                show_default=False,
                help="Trials per task (default 1; with --resume, the resumed job's).",
            ),
        ] = None,
        workers: Annotated[
            int,
            typer.Option(
                "--workers",
                rich_help_panel=SCALE_PANEL,
                min=1,
                max=MAX_WORKERS,
                help="Harness processes that run the trials, each its share of -p (more use "
                "more cores).",
            ),
        ] = 1,
        executor: Annotated[
            Executor,
            typer.Option(
                "--executor",
                rich_help_panel=SCALE_PANEL,
                help="local, or ray (the nodes of a Ray cluster, docs/ray.md).",
            ),
        ] = "local",
        ray_address: Annotated[
            str | None,
            typer.Option(
                "--ray-address",
                rich_help_panel=SCALE_PANEL,
                help="--executor ray: the cluster (auto, HOST:PORT).",
            ),
        ] = None,
        slots_per_node: Annotated[
            int | None,
            typer.Option(
                "--slots-per-node",
                rich_help_panel=SCALE_PANEL,
                min=1,
                max=MAX_SLOTS_PER_NODE,
                help="--executor ray: trials at once per node.",
            ),
        ] = None,
        timeout_multiplier: TimeoutMultiplierOption = 1.0,
        max_turns: Annotated[
            int,
            typer.Option(
                "--max-turns",
                rich_help_panel=LIMITS_PANEL,
                min=1,
                help="Model calls per trial at most.",
            ),
        ] = 100,
        disk_mb: Annotated[
            int,
            typer.Option(
                "--disk-mb",
                rich_help_panel=SANDBOX_PANEL,
                min=0,
                max=MAX_DISK_MB,
                help="Each trial's disk in MiB (workspace, /root, /tmp, a writable system; "
                "sparse: the host pays for what is written); at least 32, or 0: none of its own. "
                "The grader's /tmp, /root and /run/clawrig in the clean room get a room of this "
                "size too (memory: at most --memory-mb).",
            ),
        ] = DEFAULT_DISK_MB,
        memory_mb: MemoryMbOption = DEFAULT_MEMORY_MB,
        budget_usd: Annotated[
            float | None,
            typer.Option(
                "--budget-usd",
                rich_help_panel=LIMITS_PANEL,
                callback=usd_amount,
                help="Stop starting trials once the job spent this many USD (exit 3).",
            ),
        ] = None,
        max_cost_per_trial: Annotated[
            float | None,
            typer.Option(
                "--max-cost-usd-per-trial",
                rich_help_panel=LIMITS_PANEL,
                callback=usd_amount,
                help="A trial attempt's model spend in USD at most (its programs' calls "
                "included; an attempt run again after an infrastructure failure starts anew); "
                "reached, the trial stops and is graded as it stands.",
            ),
        ] = None,
        max_tokens_per_trial: Annotated[
            int | None,
            typer.Option(
                "--max-tokens-per-trial",
                rich_help_panel=LIMITS_PANEL,
                min=1,
                help="A trial attempt's model tokens at most (its programs' calls included; "
                "an attempt run again starts anew); reached, the trial stops and is graded as "
                "it stands.",
            ),
        ] = None,
        resume: Annotated[
            bool,
            typer.Option(
                "--resume",
                help="Continue the unfinished job in --output: run only the trials not done. "
                "What a job killed with kill -9 left (its sandboxes' mounts, folders and "
                "cgroups) the next job's start removes, or `clawrig cleanup` at once.",
            ),
        ] = False,
        output: Annotated[
            Path, typer.Option("--output", "-o", help="The job's folder (one job per folder).")
        ] = Path("output"),
        grader: Annotated[
            GraderMode, typer.Option("--grader", metavar="<mode>", help=GRADER_HELP)
        ] = "auto",
        root: Annotated[
            Path | None,
            typer.Option("--root", help=ROOT_HELP),
        ] = None,
        env_file: Annotated[
            Path | None,
            typer.Option("--env-file", help="Model settings and keys (default: ./.env)."),
        ] = None,
        max_attempts: Annotated[
            int,
            typer.Option(
                "--max-attempts",
                rich_help_panel=LIMITS_PANEL,
                min=1,
                help="Tries per trial when the infrastructure fails (not the model).",
            ),
        ] = 3,
        web: Annotated[
            WebFlag,
            typer.Option(
                "--web",
                rich_help_panel=WEB_PANEL,
                metavar="<mode>",
                help="The web, for tasks that allow it: off, live (on), record, replay (a "
                "recorded job's), corpus (a local collection).",
            ),
        ] = "off",
        web_dir: Annotated[
            Path | None,
            typer.Option(
                "--web-dir",
                rich_help_panel=WEB_PANEL,
                help="--web replay: the recorded job folder (default: --replay's); "
                "--web corpus: the document folder or JSONL file.",
            ),
        ] = None,
        web_miss: Annotated[
            WebMiss,
            typer.Option(
                "--web-miss",
                rich_help_panel=WEB_PANEL,
                metavar="<mode>",
                help="--web replay: what an unrecorded request gets: error, live (fetched) "
                "or empty (an empty result).",
            ),
        ] = "error",
        web_provider: Annotated[
            WebProvider,
            typer.Option(
                "--web-provider",
                rich_help_panel=WEB_PANEL,
                help="--web live|record: the search API.",
            ),
        ] = "brave",
        network: Annotated[
            str,
            typer.Option(
                "--network",
                rich_help_panel=SANDBOX_PANEL,
                help="The agent's egress: none | registries | allow:<hosts> | open.",
            ),
        ] = "none",
        setup_network: Annotated[
            str,
            typer.Option(
                "--setup-network",
                rich_help_panel=SANDBOX_PANEL,
                help="Egress while skills and warmup run: none | registries | allow:<hosts> | "
                "open.",
            ),
        ] = "registries",
        preamble: Annotated[
            str | None,
            typer.Option(
                "--preamble",
                help="FILE whose text goes before each task prompt, or none; default: the "
                "preamble of the task format's upstream harness.",
            ),
        ] = None,
        replay: Annotated[
            Path | None,
            typer.Option(
                "--replay",
                help="Answer every model call from a job's recorded calls (JOB_DIR: its "
                "output folder, finished or not, or one trial's folder); no model server is "
                "needed.",
            ),
        ] = None,
        judge_cache: Annotated[
            Path | None,
            typer.Option(
                "--judge-cache",
                help="JSONL of recorded judge replies (e.g. an earlier judge_chat.jsonl): "
                "graders' repeated judge calls are answered from it, new replies added.",
            ),
        ] = None,
        verbose: Annotated[
            bool,
            typer.Option("--verbose", "-v", help="Print each trial as it ends."),
        ] = False,
    ) -> None:
        """Run a suite: every task (x runs) in its own sandbox, graded, with a summary."""
        # Start-up (importing the runner, building its pydantic models, loading the suite)
        # makes ~10^6 objects that live as long as the process and no garbage worth a cyclic
        # collection: the collector's passes over them cost ~15% of it. _run_with_view turns
        # it back on once they are frozen out of its reach (gc.freeze).
        gc.disable()
        try:
            from clawrig.spec.job import JobConfig, TrialConfig

            if task is not None and not task.exists():
                raise UserError(f"--task: no such file: {task}")
            if task is not None and path is not None:  # PATH would be ignored: say so
                if not path.exists():
                    raise UserError(f"PATH: no such file or folder: {path}")
                pairs = ((task.absolute(), path.absolute()), (task.resolve(), path.resolve()))
                if not any(t.is_relative_to(p) for t, p in pairs):  # (as named, or linked)
                    raise UserError(
                        f"--task: {task} is not in PATH {path}: give PATH or --task FILE, not both"
                    )
            source = task or path
            if source is None:
                raise UserError("PATH: give a suite path or --task FILE")
            config = JobConfig(
                suite_path=source,
                suite=suite,
                categories=category or [],
                **({} if runs is None else {"runs": runs}),  # unset: --resume takes the job's
                parallel=parallel,
                output=output,
                budget_usd=budget_usd,
                max_attempts=max_attempts,
                resume=resume,
                root=root,
                env_file=env_file,
                replay=replay,
                web_dir=web_dir,
                web_miss=web_miss,
                web_provider=web_provider,
                executor=executor,
                ray_address=ray_address,
                slots_per_node=slots_per_node,
                workers=workers,
                trial=TrialConfig(
                    model=model or "none",
                    agent=agent,
                    sandbox=sandbox,
                    environment=environment,
                    image=image,
                    warm_snapshots=not no_warm,
                    timeout_multiplier=timeout_multiplier,
                    max_turns=max_turns,
                    disk_mb=disk_mb,
                    memory_mb=memory_mb,
                    max_cost_usd_per_trial=max_cost_per_trial,
                    max_tokens_per_trial=max_tokens_per_trial,
                    grader=grader,
                    judge=judge,
                    web=web,
                    network=network,
                    setup_network=setup_network,
                    preamble=_preamble_text(preamble),
                    judge_cache=judge_cache,
                ),
            )
            terminate_like_ctrl_c()
            # a Ctrl-C or SIGTERM before the job's loop handles them (the job being prepared,
            # its --workers starting): said and exited as its signal by common.run_guarded;
            # after every trial ended: held (from the job's end to its table's) and said so
            from clawrig.held_signals import HeldSignals

            held = HeldSignals()
            try:
                try:
                    summary, job = _run_with_view(config, verbose, held)
                except ModelRequestError as exc:
                    raise _resumable(exc, config) from None
                except SummaryNotWritten as exc:
                    report(exc.summary, config, not_written=exc.path)  # its table all the same
                    raise
                held.hold()  # the table printed whole (helper-225)
                code = report(summary, job.config)
            finally:
                held.release()
            if held.signum is not None:
                if summary.get("interrupted"):  # (a second Ctrl-C as an interrupted job ended)
                    raise_signal(held.signum)
                raise InterruptedAfterJob(summary, held.signum, job.config)
            raise typer.Exit(code)
        finally:
            gc.enable()


def _resumable(exc: ModelRequestError, config: Any) -> ModelRequestError:
    """``exc`` (a provider refusal that stopped the job before its model ever answered: exit
    2), saying that the output folder holds the job to ``--resume`` once the cause is fixed
    when its progress file was written (a new user re-ran the same command and was refused:
    "holds an unfinished job"); for a model the server does not have (404), that the right
    ``-m`` is another job (the folder may hold it too); a job of that name that finished no
    trial is not kept (its progress file is removed: nothing of it to resume)."""
    from clawrig.runner.batch import progress_path, read_progress

    model = config.trial.model
    said = str(exc)
    if said.startswith("--replay:") or "--resume" in said or model in ("", "none"):
        # a replay's miss (the gateway's 404: no recorded reply, not "no such model") says
        # what to do already (helper-155: a recorded refusal got "run it again with the right
        # -m" and its progress file was removed)
        return exc
    path = progress_path(config.output, model)
    if not path.is_file():
        return exc
    if exc.status == 404:  # no such model: the fix is another -m, which is another job
        try:
            progress = read_progress(path)
        except UserError:
            progress = None
        if progress is not None and not progress.completed:
            path.unlink(missing_ok=True)  # (helper-140: it stayed for good)
            then = "no trial ran: run it again with the right -m"
        else:
            then = (
                f"{config.output} keeps this name's finished trials; the right -m is another job "
                "(in this folder too)"
            )
    else:
        then = f"{config.output} keeps the job: fix that, then run the same command with --resume"
    return ModelRequestError(f"{exc}; {then}", status=exc.status, detail=exc.detail)


def _unscored(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary's rows of trials that ended with an error other than an agent's: not
    scored, and run again by ``--resume`` (``clawrig.runner.batch``'s final outcomes)."""
    return [
        r
        for r in summary.get("tasks") or []
        if isinstance(r.get("error"), dict) and r["error"].get("kind") != "agent"
    ]


def _left_for_resume(summary: dict[str, Any]) -> str:
    """What ``--resume`` would run: "N trial(s) not run", "and M errored" for the
    :func:`_unscored` trials ("M trial(s) errored" alone); "" when there is neither (helper-222:
    "0 trial(s) not run" after a stop that came as the last trial ended)."""
    errored = len(_unscored(summary))
    not_run = summary.get("not_run") or 0
    if not not_run:
        return f"{errored} trial(s) errored" if errored else ""
    text = f"{not_run} trial(s) not run"
    return f"{text} and {errored} errored" if errored else text


def resume_line(state: JobState) -> str | None:
    """What a ``--resume`` takes up, as its job starts (``state``: its first counters): the
    trials done and left, and what it did with the stopped run's attempts that did not
    finish or ended in an error (set aside in ``_retried/``, or removed: helper-228); None
    when it found nothing to set aside and nothing done (a new job) or everything done (a
    finished job, which says so itself)."""
    if not (state.set_aside or state.removed) and state.skipped in (0, state.total):
        return None  # a new job, or a finished one (which says so: helper-229)
    left = state.total - state.skipped
    line = f"resuming: {state.skipped} of {state.total} trial(s) done, {left} to run"
    parts = []
    if state.set_aside:
        parts.append(f"{state.set_aside} set aside in _retried/ (what they spent still counts)")
    if state.removed:
        parts.append(f"{state.removed} removed (no model call recorded in them)")
    if parts:
        line += "; the stopped run's unfinished or errored attempts: " + ", ".join(parts)
    return line


def stop_lines(summary: dict[str, Any], budget_usd: float | None) -> list[str]:
    """The lines after "summary: ..." at the end of a job: why it stopped starting trials
    (the budget of ``budget_usd`` USD, a model's provider, its output folder, an interrupt)
    and what ``--resume`` would run (:func:`_left_for_resume`)."""
    from clawrig.spec.summary import OUTPUT_MOVED

    left = _left_for_resume(summary)
    lines = []
    if summary.get("budget_stopped"):
        then = f"; {left} (raise --budget-usd and --resume to continue)" if left else ""
        lines.append(f"the budget of ${budget_usd:g} stopped the job{then}")
    if stopped := summary.get("provider_stopped"):
        from clawrig.llm.client import PROMPTS_REFUSED

        # a model that refuses the job's prompts (not its settings) refuses them on --resume too
        # (a stop line saying itself how --resume goes, as the Ray executor's, says it once)
        says_how = PROMPTS_REFUSED in stopped or "--resume" in stopped
        resume = "" if says_how else " (--resume continues once it answers)"
        lines.append(f"stopped: {stopped}" + (f"; {left}{resume}" if left else ""))
    output_stopped = summary.get("output_stopped")
    if output_stopped:
        lines.append(f"stopped: {output_stopped}" + (f"; {left}" if left else ""))
    if lines:
        left = ""  # said once (helper-226: twice after an interrupt of a stopped job)
    if summary.get("interrupted"):
        by = summary.get("interrupted_by")
        # (not said when the folder went: its line says they may be gone with it, helper-222)
        gone = (
            isinstance(output_stopped, str)
            and output_stopped.startswith("the output folder ")
            and OUTPUT_MOVED in output_stopped
        )
        kept = [] if gone else ["finished trials are kept"]
        then = "; ".join(kept + ([f"{left} (--resume continues)"] if left else []))
        lines.append(f"interrupted{f' ({by})' if by else ''}" + (f": {then}" if then else ""))
    return lines


def report(summary: dict[str, Any], config: Any, *, not_written: Path | None = None) -> int:
    """Print the end-of-job tables and lines; return the exit code (see the command's
    epilog). ``not_written``: the summary file that could not be written (its line says so)."""
    from clawrig.runner.batch import summary_path

    console = stdout_console()
    table = render_summary(summary)
    if summary["tasks"]:
        console.print(table)
    else:  # no trial finished (an interrupt): the totals in one line, not a caption wrapped
        # to the width of an empty table's headers (helper-157)
        line = f"{table.title}: {table.caption}"
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    for line in summary_lines(summary):  # plain text: paths and trials' messages hold "[...]"
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    if not_written is None:
        bits = [f"summary: {summary_path(config.output, config.trial.model)}"]
    else:
        bits = [f"summary: not written to {not_written}"]
    bits += stop_lines(summary, config.budget_usd)
    console.print("; ".join(bits), highlight=False, soft_wrap=True, markup=False)
    missed: list[dict[str, Any]] = []
    if config.trial.agent == "oracle":  # said also when some trials errored (helper-126)
        expected = [r for r in summary["tasks"] if r.get("expected_reward") is not None]
        missed = [r for r in expected if r["meets_expected"] is False]
        reached = sum(1 for r in expected if r["meets_expected"])
        unscored = len(expected) - reached - len(missed)
        what = "trials" if int(summary.get("runs_per_task") or 1) > 1 else "samples"
        # of those that ran: an interrupted or stopped job's too (helper-228: none was said)
        left = [f"{unscored} not scored"] if unscored else []
        if not_run := summary.get("not_run"):
            left.append(f"{not_run} not run")
        line = f"oracle: {reached}/{len(expected)} {what} reach their expected reward"
        if not expected:  # (an interrupt before any finished: "0/0" read oddly, helper-229)
            line = f"oracle: no {what[:-1]} finished"
        console.print(line + (f" ({', '.join(left)})" if left else ""), highlight=False)
        for r in missed:
            console.print(
                f"  {r['task_id']}: score {r['score']} != expected {r['expected_reward']}",
                highlight=False,
            )
    if summary.get("interrupted"):
        by = summary.get("interrupted_by")
        return 128 + signal.Signals[by].value if by else EXIT_INTERRUPTED
    if summary.get("budget_stopped"):
        return EXIT_BUDGET
    # a job stopped by its model's server or its output folder left trials not run: not "all
    # trials ran" (it exited 0 with 8 of 10 trials not run after its progress file failed);
    # an output folder removed meanwhile took trials that ran with it (helper-218)
    stopped = summary.get("provider_stopped") or summary.get("output_stopped")
    lost = bool(stopped and summary.get("not_run")) or bool(summary.get("output_stopped"))
    return EXIT_TRIAL_ERRORS if summary["error_count"] or missed or lost else EXIT_OK


def headline(summary: dict[str, Any]) -> list[str]:
    """The headline numbers of the suite's own benchmark (by the tasks' format):
    DataClawBench's Acc (sum score / sum max over graded trials) and EE/GPR/TPE,
    WildClawBench's average (over all selected tasks, an errored one counts 0). A four-folder
    set's own number is the mean score of the graded trials, which the table's caption
    already gives (:func:`render_summary`): no line here."""
    from clawrig.spec.summary import headline_benchmarks

    formats = headline_benchmarks(summary) or set()
    wc = summary.get("wildclaw") or {}
    acc = summary.get("overall_score")  # DataClawBench's Acc (the summary's top level)
    lines = []
    if "dataclaw" in formats and isinstance(acc, int | float):
        lines.append(
            f"DataClawBench Acc: {acc:.4f} ({summary['evaluated_count']} "
            f"graded, {summary['error_count']} errors)"
        )
        proc = summary.get("process") or {}
        bits = [
            f"{key.upper()} {proc[key]['mean']:.4f} (n={proc[key]['n']})"
            for key in ("ee", "gpr", "tpe")
            if (proc.get(key) or {}).get("mean") is not None
        ]
        if bits:
            lines.append("DataClawBench process: " + ", ".join(bits))
    if "wildclaw" in formats and wc.get("overall") is not None:
        not_run = summary.get("not_run")
        lines.append(
            f"WildClawBench average score: {wc['overall']:.4f} (its leaderboard's number: all "
            "selected tasks, an errored or missing task counts 0)"
            + "".join(
                f"; {m} {v['score']:.4f} ({v['task_count']} task"
                f"{'' if v['task_count'] == 1 else 's'})"
                for m, v in (wc.get("modalities") or {}).items()
            )
            # an unfinished job's 0s are trials not run, not failed (helper-195: an interrupt
            # before any trial finished read "0.0000" as a result)
            + (
                f"; so far: {not_run} trial(s) not run yet count 0 (--resume runs them)"
                if isinstance(not_run, int) and not_run > 0
                else ""
            )
        )
    return lines


def _preamble_text(value: str | None) -> str | None:
    """``--preamble``: None (the format's own), ``none`` (no preamble) or a file's text."""
    if value is None:
        return None
    if value == "none":
        return ""
    path = Path(value)
    if not path.is_file():
        raise UserError(f"--preamble: no such file: {path} (give a file or none)")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--preamble: cannot read {path}: {exc}") from None


def waits_line(summary: dict[str, Any]) -> str | None:
    """How long trials waited on the harness (the summary's ``waits``), or None without
    trials: the median and largest per trial, and the kinds that were waited for."""
    from clawrig.spec.trial import HarnessWaits

    waits = summary.get("waits") or {}
    total = waits.get("total") or {}
    if not summary.get("tasks") or not total:
        return None
    kinds = [
        f"{kind.replace('_', ' ')} {waits[kind]['median_s']:.2f}/{waits[kind]['max_s']:.2f}"
        for kind in HarnessWaits.model_fields
        if (waits.get(kind) or {}).get("max_s")
    ]
    return (
        f"harness waits per trial (not counted toward time limits): median "
        f"{total['median_s']:.2f} s, max {total['max_s']:.2f} s"
        + (f" (median/max: {', '.join(kinds)})" if kinds else "")
    )


PASS_K_SHOWN = 8
"""More values of k than this (``--runs`` > 8): the console shows pass@k and pass^k for k = 1,
2, 4, ... and n only (the summary file keeps every k)."""


def usage_line(summary: dict[str, Any]) -> str | None:
    """What the job spent on models (the summary's ``usage``: every attempt's, requests,
    tokens, USD), or None when it made no model request."""
    usage = summary.get("usage") or {}
    requests = usage.get("total_requests") or 0
    if not requests:
        return None
    cached = (usage.get("cache_read_tokens") or 0) + (usage.get("cache_write_tokens") or 0)
    line = (
        f"model usage: {requests:,} request{'s' if requests != 1 else ''}, "
        f"{usage.get('total_tokens') or 0:,} tokens ({usage.get('input_tokens') or 0:,} in, "
        f"{usage.get('output_tokens') or 0:,} out"
        + (f", {cached:,} cached" if cached else "")
        + f"), ${usage.get('total_cost_usd') or 0:.4f}"
    )
    retried = usage.get("retried") or {}
    if retried.get("request_count"):
        # attempts set aside in _retried/ (run again already, or by --resume: helper-153 saw
        # "run again" right after a Ctrl-C, before any was), and those lost with a Ray node,
        # in their trial's retried_usage (helper-166: "set aside in _retried/", none there)
        line += (
            f" (${retried.get('cost_usd') or 0:.4f} of it by attempts that did not finish: set "
            "aside in _retried/, lost with a Ray node, or whose folder could not be written)"
        )
    return line


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The lines printed under the table: the benchmark's headline numbers, pass@k, how long
    trials waited on the harness, why each errored trial failed and which trials the
    provider's refusal of their conversation stopped (at most 10 of each)."""
    lines = headline(summary)
    passes = {
        int(k): v for k, v in (summary.get("pass") or {}).items() if v.get("pass_at_k") is not None
    }
    if passes:
        n, note = max(passes), ""
        if len(passes) > PASS_K_SHOWN:  # k = 1, 2, 4, ..., n: every k is in the summary
            passes = {k: v for k, v in passes.items() if k & (k - 1) == 0 or k == n}
            note = f' (k = 1, 2, 4, ..., {n}; every k in the summary\'s "pass")'
        every = max((v.get("tasks") or 0) for v in passes.values())
        bits = [  # a k over fewer tasks (those with >= k graded runs) says so
            f"pass@{k} {v['pass_at_k']:.3f} pass^{k} {v['pass_hat_k']:.3f}"
            + (f" (over {v['tasks']} of {every} tasks)" if v.get("tasks", every) < every else "")
            for k, v in sorted(passes.items())
        ]
        lines.append(
            f"success = score >= {summary.get('threshold', 1.0):g}: " + ", ".join(bits) + note
        )
    if line := usage_line(summary):
        lines.append(line)
    if line := waits_line(summary):
        lines.append(line)
    if replayed := summary.get("replayed_from"):
        lines.append(
            f"replayed from {replayed}: every model reply came from its records (no model was "
            "called): the job's usage and spend are those of the recorded calls it used"
        )
    # an agent error is the agent's doing (blame follows control): graded, scored 0, and no
    # reason for exit 1; every other kind leaves the trial unscored (error_count, exit 1)
    rows = [r for r in summary.get("tasks", []) if r.get("error")]
    agent = [r for r in rows if r["error"].get("kind") == "agent"]
    unscored = _unscored(summary)
    from clawrig.llm.client import PROMPTS_REFUSED

    # the model refused the job's prompts: --resume would ask the same model again (the stop
    # line says what runs them: helper-153)
    refused_all = PROMPTS_REFUSED in (summary.get("provider_stopped") or "")
    again = "" if refused_all else "; --resume runs them again"
    # the oracle's agent is the golden trajectory: what fails on its end state is the task's
    # (helper-200: a vendor's crashing grader read as "the agent's doing")
    whose = (
        "the golden trajectory's end state, so the task's: clawrig verify checks it"
        if summary.get("agent") == "oracle"
        else "the agent's doing"
    )
    for group, head in (
        (unscored, f"{len(unscored)} trial(s) ended with an error (not scored{again}):"),
        (agent, f"{len(agent)} trial(s) scored 0 for an agent error ({whose}):"),
    ):
        if not group:
            continue
        lines.append(head)
        for r in group[:10]:
            err = r["error"]
            msg = first_line(err.get("message"), MESSAGE_WIDTH, tail=MESSAGE_TAIL)
            lines.append(f"  {r['task_id']} run {r['run_index']}: {err.get('kind')}: {msg}")
        if len(group) > 10:
            lines.append(f"  ... and {len(group) - 10} more (see the summary JSON)")
    refused = [r for r in summary.get("tasks", []) if r.get("stop_reason") == "model_error"]
    if refused:
        lines.append(
            f"{len(refused)} trial(s) stopped when the provider refused the agent's "
            "conversation (model_error: graded as it stood):"
        )
        for r in refused[:10]:
            detail = first_line(r.get("stop_detail"), MESSAGE_WIDTH, tail=MESSAGE_TAIL)
            lines.append(f"  {r['task_id']} run {r['run_index']}: {detail}")
        if len(refused) > 10:
            lines.append(f"  ... and {len(refused) - 10} more (see the summary JSON)")
    return lines


def _run_with_view(config: Any, verbose: bool, held: Any = None) -> tuple[dict[str, Any], Any]:
    """Prepare the Job (errors before any progress bar), then run it under a progress bar."""
    import asyncio

    from rich.progress import (
        BarColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    from clawrig.runner.batch import job_spend_usd
    from clawrig.runner.heap import settle
    from clawrig.runner.job import Job
    from clawrig.spec.trial import TrialResult

    seen: list[JobState] = []  # the job's live counters, once it has started
    job: Job | None = None

    class LiveInfo(ProgressColumn):
        """Running and failed trials, and the job's spend as the gateway counts it when the
        bar is drawn (helper-168: the finished trials' alone read $0.0000 at a Ctrl-C after
        two answered requests that the usage line then counted)."""

        def render(self, task: Any) -> Text:
            if not seen:
                return Text("")
            state = seen[0]
            spend = job_spend_usd(state, job.services) if job is not None else state.spend_usd
            return Text(f"running {state.running}  failed {state.failed}  spend ${spend:.4f}")

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        LiveInfo(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
        # redrawn twice a second on a terminal (each redraw renders the whole table in the
        # harness's process); elsewhere nothing is drawn until the end, so no redraws at all
        auto_refresh=err_console.is_terminal,
        refresh_per_second=PROGRESS_REFRESH_HZ,
    )
    started = time.monotonic()
    bar: Any = None

    def note(line: str) -> None:
        style = "bold yellow" if line.startswith("WARNING") else None
        progress.console.print(line, style=style, highlight=False, soft_wrap=True)

    def on_update(state: JobState, result: TrialResult | None) -> None:
        if not seen and (line := resume_line(state)):  # its bar starts part-way (helper-225)
            note(line)
        seen[:] = [state]
        progress.update(bar, total=state.total, completed=state.done)
        if verbose and result is not None:
            score = result.counted_score()
            err = f" ERROR {result.error.kind}: {result.error.message}" if result.error else ""
            progress.console.print(
                f"{result.task_id} run {result.run_index}: score {score}{err} "
                f"({time.monotonic() - started:.1f}s)",
                highlight=False,
                soft_wrap=True,
            )

    job = Job(config, on_note=note, on_update=on_update).prepare()
    bar = progress.add_task("trials", total=len(job.tasks) * job.config.runs)
    # what exists now (modules, tasks, settings) lives as long as the process: kept out of the
    # cyclic collector's passes, which otherwise walk it again and again mid-job (heap.settle)
    settle()  # the collector was off since the command started (run)
    with progress:
        return asyncio.run(job.arun(held)), job
