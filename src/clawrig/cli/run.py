"""``clawrig run PATH``: run a suite with an agent and a model; write trial folders, progress
and a summary. Options follow DataClawBench's CLI (--model/-m, --judge, --suite/-s, --task/-t,
--parallel/-p, --timeout-multiplier, --runs, --resume, --verbose) plus clawrig's own.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from dotenv import load_dotenv
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from clawrig.cli.common import console, err_console
from clawrig.errors import UserError

# Heavy modules (the runner, pydantic models, the openai SDK) are imported inside the command,
# so `clawrig --help` and other commands start fast.

GRADERS = ("auto", "judge", "exact", "both", "programmatic")


def _model_for(
    name: str | None, role: str, env_file: Path | None, replay: Path | None = None
) -> Any:
    """The model ``name`` for ``role``. With ``replay`` a name the settings cannot resolve
    (no base URL or key here) becomes a model that only the replay gateway answers."""
    from clawrig.llm.client import get_model
    from clawrig.llm.providers import load_settings

    settings = load_settings(env_file=env_file) if env_file else load_settings()
    try:
        return get_model(name, settings, role=role)  # type: ignore[arg-type]
    except UserError:
        if replay is None or not name:
            raise
        from clawrig.llm.gateway import replay_model

        return replay_model(name)


def render_summary(summary: dict[str, Any]) -> Table:
    """The end-of-job table: per-category scores, then totals."""
    table = Table(title=f"clawrig: {summary['model']} ({summary['agent']})", show_lines=False)
    for col in ("category", "trials", "graded", "errors", "mean score [95% CI]"):
        table.add_column(col, justify="right" if col != "category" else "left")
    by_cat: dict[str, list[dict[str, Any]]] = {}
    for row in summary["tasks"]:
        by_cat.setdefault(row["category"] or "-", []).append(row)
    for cat in sorted(by_cat):
        rows = by_cat[cat]
        graded = [r["score"] for r in rows if r["score"] is not None and not r["error"]]
        mean = f"{sum(graded) / len(graded):.4f}" if graded else "-"
        errs = sum(1 for r in rows if r["error"])
        table.add_row(cat, str(len(rows)), str(len(graded)), str(errs), mean)
    m = summary.get("mean") or {}
    mean_txt = "-"
    if m.get("mean") is not None:
        mean_txt = f"{m['mean']:.4f}"
        if m.get("low") is not None and m.get("high") is not None:  # scores live in [0, 1]
            mean_txt += f" [{max(m['low'], 0.0):.3f}, {min(m['high'], 1.0):.3f}]"
    table.add_section()
    table.add_row(
        "all",
        str(len(summary["tasks"])),
        str(summary["evaluated_count"]),
        str(summary["error_count"]),
        mean_txt,
    )
    return table


def register(app: typer.Typer) -> None:
    """Add ``run`` to the main app."""

    @app.command("run")
    def run(
        path: Annotated[
            Path | None,
            typer.Argument(
                help="Suite: a task file, a folder of "
                "task files, a four-folder set or a "
                "DataClawBench root."
            ),
        ] = None,
        task: Annotated[Path | None, typer.Option("--task", "-t", help="One task file.")] = None,
        suite: Annotated[str, typer.Option("--suite", "-s", help="all, or ids a,b,c")] = "all",
        category: Annotated[
            list[str] | None,
            typer.Option("--category", help="only tasks of this category (repeatable)"),
        ] = None,
        model: Annotated[
            str | None, typer.Option("--model", "-m", help="provider/model; default DEFAULT_MODEL")
        ] = None,
        judge: Annotated[
            str | None, typer.Option("--judge", help="judge model; default JUDGE_MODEL")
        ] = None,
        agent: Annotated[
            str, typer.Option("--agent", help="native | oracle | nop | openclaw[@VERSION]")
        ] = "native",
        sandbox: Annotated[str, typer.Option("--sandbox", help="bwrap | docker | local")] = "bwrap",
        environment: Annotated[
            str,
            typer.Option(
                "--env",
                help="the system tasks run on: auto (the format's, when built) | host | "
                "base | wildclaw | dataclaw | a spec FILE (built when missing)",
            ),
        ] = "auto",
        image: Annotated[
            str | None, typer.Option("--image", help="a local Docker image (--sandbox docker)")
        ] = None,
        warm: Annotated[
            bool,
            typer.Option(
                "--warm/--no-warm",
                help="run a task's warmup installs once and start every trial from the result",
            ),
        ] = True,
        parallel: Annotated[int, typer.Option("--parallel", "-p", min=1)] = 1,
        runs: Annotated[int, typer.Option("--runs", min=1)] = 1,
        timeout_multiplier: Annotated[float, typer.Option("--timeout-multiplier", min=0.01)] = 1.0,
        max_turns: Annotated[int, typer.Option("--max-turns", min=1)] = 100,
        budget_usd: Annotated[float | None, typer.Option("--budget-usd", min=0.0)] = None,
        resume: Annotated[bool, typer.Option("--resume")] = False,
        output: Annotated[Path, typer.Option("--output", "-o")] = Path("output"),
        grader: Annotated[
            str, typer.Option("--grader", help="auto | judge | exact | both")
        ] = "auto",
        root: Annotated[
            Path | None, typer.Option("--root", help="benchmark root for WildClawBench workspaces")
        ] = None,
        env_file: Annotated[Path | None, typer.Option("--env-file", help="default ./.env")] = None,
        max_attempts: Annotated[int, typer.Option("--max-attempts", min=1)] = 3,
        web: Annotated[
            str,
            typer.Option(
                "--web", help="off | live | record | replay | corpus, for tasks that allow the web"
            ),
        ] = "off",
        web_dir: Annotated[
            Path | None,
            typer.Option(
                "--web-dir",
                help="--web replay: the recorded job folder (default: --replay's); "
                "--web corpus: the document folder or JSONL file",
            ),
        ] = None,
        web_miss: Annotated[
            str,
            typer.Option(
                "--web-miss", help="--web replay, an unrecorded request: error | live | empty"
            ),
        ] = "error",
        web_provider: Annotated[
            str, typer.Option("--web-provider", help="--web live|record search: brave | tavily")
        ] = "brave",
        network: Annotated[
            str,
            typer.Option(
                "--network", help="the agent's egress: none | registries | allow:<hosts> | open"
            ),
        ] = "none",
        setup_network: Annotated[
            str,
            typer.Option(
                "--setup-network",
                help="egress while skills and warmup run: none | registries | allow:<hosts> | open",
            ),
        ] = "registries",
        preamble: Annotated[
            str | None,
            typer.Option(
                "--preamble",
                help="FILE whose text goes before each task prompt, or none; default: the "
                "preamble of the task format's upstream harness",
            ),
        ] = None,
        replay: Annotated[
            Path | None,
            typer.Option(
                "--replay",
                help="answer every model call from a finished job's recorded calls "
                "(JOB_DIR: its output folder); no model server is needed",
            ),
        ] = None,
        judge_cache: Annotated[
            Path | None,
            typer.Option(
                "--judge-cache",
                help="JSONL of recorded judge replies (e.g. an earlier judge_chat.jsonl): "
                "graders' repeated judge calls are answered from it, new replies added",
            ),
        ] = None,
        verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
    ) -> None:
        """Run a suite: every task (x runs) in its own sandbox, graded, with a summary."""
        from clawrig.agents import create_agent
        from clawrig.runner.batch import select_tasks, summary_path
        from clawrig.runner.trial import TrialServices
        from clawrig.sandbox.kinds import check_sandbox_kind
        from clawrig.spec.job import JobConfig, TrialConfig

        if env_file is not None and not env_file.is_file():
            raise UserError(f"--env-file: no such file: {env_file}")
        load_dotenv(env_file or Path(".env"), override=False)
        check_sandbox_kind(sandbox)
        if grader not in GRADERS:
            raise UserError(
                f"--grader: unknown grader {grader!r} (choose from {', '.join(GRADERS)})"
            )
        from clawrig.web import WebService

        if web == "replay" and web_dir is None:
            web_dir = replay  # the whole run from one folder: --replay JOB --web replay
        services_web = WebService(
            web,
            source=web_dir if web in ("replay", "corpus") else None,
            output=output,
            miss=web_miss,
            provider=web_provider,
        )
        if problem := services_web.key_problem():
            err_console.print(f"[bold yellow]note:[/] {problem}", highlight=False, soft_wrap=True)
        from clawrig.egress import NetworkPolicy

        NetworkPolicy.parse(network, option="--network")
        NetworkPolicy.parse(setup_network, option="--setup-network")
        preamble_text = _preamble_text(preamble)
        source = task or path
        if source is None:
            raise UserError("PATH: give a suite path or --task FILE")
        if not source.exists():
            raise UserError(f"PATH: no such file or folder: {source}")
        the_agent = create_agent(agent)
        from clawrig.tasks.registry import load_tasks

        tasks = select_tasks(load_tasks(source, root=root), suite, category or [])
        if sandbox == "local":
            err_console.print(
                "[bold yellow]WARNING: --sandbox local runs the agent's commands "
                "on this machine with NO isolation.[/]"
            )
            if parallel > 1:
                raise UserError("--parallel: the local sandbox runs one trial at a time")
        from clawrig.llm.gateway import Gateway, ResponseCache, recorded_models, replay_gateway

        # e.g. install the pinned OpenClaw once
        the_agent.prepare(lambda line: err_console.print(line, highlight=False))
        services = TrialServices(web=services_web)
        from clawrig.data.manifest import data_summary, drift_line

        if (data := data_summary(source, root)) is not None and (line := drift_line(data)):
            err_console.print(f"[bold yellow]note:[/] {line}", highlight=False, soft_wrap=True)
        recorded = recorded_models(replay) if replay is not None else {}
        model_name = model or recorded.get("agent") or os.environ.get("DEFAULT_MODEL")
        if the_agent.needs_model:
            services.model = _model_for(model_name, "agent", env_file, replay=replay)
            model_name = services.model.name
        else:
            model_name = model_name if model else the_agent.name
        judge_name = judge or recorded.get("judge") or os.environ.get("JUDGE_MODEL")
        if grader in ("judge", "both") or judge or "judge" in recorded:
            services.judge = _model_for(judge_name, "judge", env_file, replay=replay)
        # every model call goes through the job's gateway (usage, budget, records, replay)
        gateway = (
            replay_gateway(replay, budget_usd=budget_usd)
            if replay is not None
            else Gateway(budget_usd=budget_usd)
        )
        services.gateway = gateway
        if judge_cache is not None:
            services.judge_cache = ResponseCache.from_file(judge_cache)
        if replay is None:
            _preflight(sandbox, services)
        _resolve_environments(sandbox, environment, image, tasks)
        trial_cfg = TrialConfig(
            model=model_name or the_agent.name,
            agent=agent,
            sandbox=sandbox,
            environment=environment,
            image=image,
            warm_snapshots=warm,
            timeout_multiplier=timeout_multiplier,
            max_turns=max_turns,
            grader=grader,  # type: ignore[arg-type]
            judge=judge_name if services.judge else None,
            web=web,
            network=network,
            setup_network=setup_network,
            preamble=preamble_text,
        )
        job = JobConfig(
            suite_path=source,
            suite=suite,
            categories=category or [],
            runs=runs,
            parallel=parallel,
            output=output,
            budget_usd=budget_usd,
            max_attempts=max_attempts,
            resume=resume,
            trial=trial_cfg,
            web_dir=web_dir if web in ("replay", "corpus") else None,
            web_miss=web_miss,
            web_provider=web_provider,
        )
        if not resume:
            _warn_unfinished(output, trial_cfg.model)
        with gateway:
            summary = _run_with_view(job, tasks, services, verbose)
        console.print(render_summary(summary))
        for line in summary_lines(summary):
            console.print(line, highlight=False, soft_wrap=True)
        out = summary_path(output, trial_cfg.model)
        bits = [f"summary: {out}"]
        if summary.get("budget_stopped"):
            bits.append(
                f"the budget of ${budget_usd:g} stopped the job; "
                f"{summary['not_run']} trial(s) not run (raise --budget-usd and --resume "
                "to continue)"
            )
        if summary.get("interrupted"):
            bits.append("interrupted: finished trials are kept (--resume continues)")
        console.print("; ".join(bits), highlight=False, soft_wrap=True)
        if summary.get("interrupted"):
            raise typer.Exit(130)
        if summary["error_count"]:
            raise typer.Exit(1)
        if agent == "oracle":
            checked = [r for r in summary["tasks"] if r["meets_expected"] is not None]
            missed = [r for r in checked if not r["meets_expected"]]
            console.print(
                f"oracle: {len(checked) - len(missed)}/{len(checked)} samples reach "
                "their expected reward",
                highlight=False,
            )
            for r in missed:
                console.print(
                    f"  {r['task_id']}: score {r['score']} != expected {r['expected_reward']}",
                    highlight=False,
                )
            if missed:
                raise typer.Exit(1)


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


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The lines printed under the table: the benchmarks' headline numbers, pass@k, and why
    each errored trial failed (at most 10)."""
    lines = []
    wc, dc = summary.get("wildclaw") or {}, summary.get("dataclaw") or {}
    if wc.get("overall") is not None:
        lines.append(
            f"WildClawBench score (all tasks, an errored or missing task counts 0): "
            f"{wc['overall']:.4f}"
            + "".join(
                f"; {m} {v['score']:.4f} ({v['task_count']} tasks)"
                for m, v in (wc.get("modalities") or {}).items()
            )
        )
    if dc.get("overall_score") is not None:
        lines.append(
            f"DataClawBench overall (graded trials only): {dc['overall_score']:.4f} "
            f"({summary['evaluated_count']} graded, {summary['error_count']} errors)"
        )
    passes = summary.get("pass") or {}
    if passes:
        bits = [
            f"pass@{k} {v['pass_at_k']:.3f} pass^{k} {v['pass_hat_k']:.3f}"
            for k, v in passes.items()
            if v.get("pass_at_k") is not None
        ]
        lines.append(f"success = score >= {summary.get('threshold', 1.0):g}: " + ", ".join(bits))
    errored = [r for r in summary.get("tasks", []) if r.get("error")]
    if errored:
        lines.append(f"{len(errored)} trial(s) ended with an error:")
        for r in errored[:10]:
            err = r["error"]
            msg = str(err.get("message", "")).splitlines()[0][:200] if err else ""
            lines.append(f"  {r['task_id']} run {r['run_index']}: {err.get('kind')}: {msg}")
        if len(errored) > 10:
            lines.append(f"  ... and {len(errored) - 10} more (see the summary JSON)")
    return lines


def _resolve_environments(sandbox: str, environment: str, image: str | None, tasks: Any) -> None:
    """Before any trial: build a named environment when missing (with progress) and say in one
    line each where a format's environment is not built (see clawrig.env.system)."""
    from clawrig.env.system import resolve_environment

    def progress(line: str) -> None:
        err_console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)

    for fmt in sorted({str(t.format) for t in tasks}):
        choice = resolve_environment(sandbox, environment, image, fmt, progress)
        if choice.note:
            err_console.print(f"note: {choice.note}", highlight=False, soft_wrap=True)


def _preflight(sandbox: str, services: Any) -> None:
    """Fail fast, before any trial, when the sandbox backend or the model endpoint cannot
    work at all: a Docker engine that does not answer, a model server nobody listens on."""
    if sandbox == "docker":
        import shutil
        import subprocess

        docker = shutil.which("docker")
        probe = (
            subprocess.run([docker, "version"], capture_output=True, timeout=20) if docker else None
        )
        if probe is None or probe.returncode != 0:
            raise UserError("--sandbox docker: no Docker engine answers on this machine")
    import httpx

    for role, model in (("--model", services.model), ("--judge", services.judge)):
        endpoint = getattr(model, "endpoint", None)
        base = getattr(endpoint, "base_url", None)
        if not base or not str(base).startswith(("http://127.", "http://localhost")):
            continue  # remote providers are checked by their first request (free probe only
            # for local servers: nothing is spent, and a refused connection is certain)
        try:
            httpx.get(f"{str(base).rstrip('/')}/models", timeout=5)
        except httpx.TransportError as exc:
            raise UserError(
                f"{role}: cannot reach {model.name} at {base} ({type(exc).__name__}): is the "
                "model server running?"
            ) from None


def _warn_unfinished(output: Path, model: str) -> None:
    from clawrig.runner.batch import progress_path

    path = progress_path(output, model)
    if path.exists():
        err_console.print(
            f"[bold yellow]note:[/] {path} holds an unfinished job of this model; starting a "
            "new job (use --resume to continue that one instead)",
            highlight=False,
            soft_wrap=True,
        )


def _run_with_view(job: Any, tasks: list[Any], services: Any, verbose: bool) -> dict[str, Any]:
    from clawrig.runner.batch import JobState, run_job
    from clawrig.spec.trial import TrialResult

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )
    bar = progress.add_task("trials", total=len(tasks) * job.runs, info="")
    started = time.monotonic()

    def on_update(state: JobState, result: TrialResult | None) -> None:  # noqa: F821
        info = f"running {state.running}  failed {state.failed}  spend ${state.spend_usd:.4f}"
        progress.update(bar, completed=state.done, info=info)
        if verbose and result is not None:
            score = result.score.score if result.score else None
            err = f" ERROR {result.error.kind}: {result.error.message}" if result.error else ""
            progress.console.print(
                f"{result.task_id} run {result.run_index}: score {score}{err} "
                f"({time.monotonic() - started:.1f}s)",
                highlight=False,
                soft_wrap=True,
            )

    with progress:
        return asyncio.run(run_job(job, tasks, services, on_update=on_update))
