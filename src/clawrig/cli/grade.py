"""``clawrig grade TRIAL_DIR...``: re-grade finished trials under their recorded conditions
(replaying recorded judge calls); the trial folders change only with ``--write``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from clawrig.choices import GraderMode
from clawrig.cli.common import DEFAULT_PARALLEL, console, echo_json, err_console, run_async
from clawrig.errors import UserError

if TYPE_CHECKING:
    from clawrig.runner.regrade import RegradeReport


def _trial_folders(paths: list[Path]) -> list[Path]:
    """Each path as given when it is a trial folder; a job folder (:meth:`JobPaths.is_job`)
    gives its trial folders, a task folder of a job (``<job>/<task>/``) its own
    (:meth:`JobPaths.task_trials`: no ``.tmp-`` trials, no links out of the job). Raises
    UserError for a job folder that holds no finished trial. A trial named twice (a folder
    given twice, or a job and one of its trials) is graded once."""
    from clawrig.spec.layout import JobPaths, TrialPaths

    out: list[Path] = []
    for path in paths:
        if not TrialPaths(path).is_trial() and path.is_dir():
            job, parent = JobPaths(path), JobPaths(path.parent)
            # a folder is a job's (or a task's in one) by the job's own files: a trial folder
            # without result.json holds its agent's end_state/, which may look like trials
            found = (
                [rj.parent for rj in job.trial_results()]
                if job.is_job()
                else parent.task_trials(path.name)
                if parent.is_job()
                else []
            )
            if found:
                out += found
                continue
            if job.is_job():
                from clawrig.runner.batch import gone_trial_lines

                # (its summary's trials all deleted: said as when only some are, helper-194)
                gone = "".join(f"; {line}" for line in gone_trial_lines([path], "re-graded"))
                raise UserError(
                    f"TRIAL_DIR: {path} is a job folder with no finished trial in it (no "
                    f"<task>/<trial>/result.json): nothing to grade{gone}"
                )
        out.append(path)
    unique: dict[Path, Path] = {}
    for folder in out:
        unique.setdefault(folder.resolve(), folder)
    return list(unique.values())


def _misnamed(summary: Path) -> str:
    """A note when ``summary`` records a model whose summary has another name (renamed by
    hand: ``run --resume`` does not find it), else ""."""
    from clawrig.spec.layout import JobPaths

    try:
        model = json.loads(summary.read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError, AttributeError):
        return ""
    if not isinstance(model, str) or not model:
        return ""
    right = JobPaths(summary.parent).summary(model)
    return (
        "" if right.name == summary.name else f" (named for another model: rename it {right.name})"
    )


def _same_scores(report: RegradeReport) -> bool:
    """The trial re-graded to its recorded score, sub-scores and process metrics (whatever
    its score.json says: that is reported apart)."""
    return (
        report.not_gradable is None
        and report.unreadable is None
        and report.before.score == report.after.score
        and report.before.subscores == report.after.subscores
        and report.before.process == report.after.process
    )


def _shown(score: float | None) -> str:
    """A recorded score as the console shows it: "no score" for None (not Python's None)."""
    return "no score" if score is None else str(score)


def _folder_name(trial: str) -> str:
    """A trial folder's name as given (``.`` inside it named too: helper-221 saw none)."""
    return Path(trial).resolve().name or trial


def register(app: typer.Typer) -> None:
    """Add ``grade`` to the main app."""

    @app.command("grade")
    def grade(
        trial_dirs: Annotated[
            list[Path] | None,
            typer.Argument(
                metavar="TRIAL_DIR",
                help="Trial folders (each holds result.json), or a job folder for all its trials.",
                show_default=False,
            ),
        ] = None,
        judge_cache: Annotated[
            list[Path] | None,
            typer.Option(
                "--judge-cache",
                help="more recorded judge calls to replay (judge_chat.jsonl or model_calls.jsonl "
                "files), beside the trial's own",
            ),
        ] = None,
        judge: Annotated[
            str | None,
            typer.Option(
                "--judge",
                help="a live judge model for requests the records lack (without it such a "
                "request is a replay miss: reported, and the trial is not written)",
            ),
        ] = None,
        grader: Annotated[
            GraderMode | None,
            typer.Option(
                "--grader",
                metavar="<mode>",
                help="auto, judge, exact, both or programmatic (see clawrig run --help); "
                "default: as the trial ran",
            ),
        ] = None,
        sandbox: Annotated[
            str | None,
            typer.Option(
                "--sandbox", help="bwrap | docker | local (default: the trial's sandbox kind)"
            ),
        ] = None,
        write: Annotated[
            bool,
            typer.Option(
                "--write",
                metavar="",
                help="replace the trial's score.json, process_score.json and result.json with "
                "the new grading and recompute its job's summary (without it nothing changes)",
            ),
        ] = False,
        as_json: Annotated[
            bool,
            typer.Option("--json", metavar="", help="One JSON report per trial, one per line."),
        ] = False,
        parallel: Annotated[
            int,
            typer.Option(
                "--parallel", "-p", min=1, help="Trials graded at once, each in its own sandbox."
            ),
        ] = DEFAULT_PARALLEL,
    ) -> None:
        """Grade finished trials again and compare with the recorded scores.

        Exit 1 when a score differs from the recorded one, a trial has no end state to grade
        (it ended with an infrastructure, setup, cancelled or budget error, or its end_state/
        is gone) or a trial folder cannot be read (a corrupt result.json, its task file gone):
        each listed with the reason, nothing written for it, the others graded; also when a
        job's summary lists trial folders that are gone (deleted: `clawrig run --resume` runs
        them again)."""
        if not trial_dirs:
            raise UserError(
                "TRIAL_DIR: give one or more trial folders (each holds result.json) or a job "
                "folder (clawrig run's --output) to grade all its trials "
                "(see 'clawrig grade --help')"
            )
        for path in judge_cache or []:  # once, not per trial (each would be "unreadable")
            if not path.is_file():
                raise UserError(f"--judge-cache: no such file: {path}")
        if sandbox is not None:  # one line, not Python's UserWarning per sandbox (helper-133)
            from clawrig.cli.common import local_sandbox_guard

            local_sandbox_guard(sandbox, parallel)
        import asyncio  # lazily: ~40 ms of the CLI's start-up

        from clawrig.runner.regrade import refresh_job_summary, regrade_trial, unreadable_report
        from clawrig.spec.layout import TrialPaths

        live = None
        if judge:
            from clawrig.llm.client import get_model

            live = get_model(judge, role="judge")

        async def all_reports() -> list[RegradeReport]:  # one event loop for every trial
            slots = asyncio.Semaphore(parallel)

            async def one(folder: Path) -> RegradeReport:
                async with slots:
                    try:
                        return await regrade_trial(
                            folder,
                            grader=grader,
                            judge=live,
                            judge_cache=judge_cache,
                            sandbox=sandbox,
                            write=write,
                            refresh=False,  # once per job at the end
                        )
                    except UserError as exc:
                        if not os.path.lexists(TrialPaths(folder).result):
                            raise  # not a trial folder: a bad argument
                        return unreadable_report(folder, str(exc))  # the others go on

            # in the folders' order, whatever order they finish in; a path that is not a
            # trial or job folder ends the command (asyncio.run cancels the trials grading);
            # a trial folder that cannot be read is reported and the others graded
            return list(await asyncio.gather(*(one(f) for f in _trial_folders(trial_dirs))))

        reports = run_async(all_reports())
        summaries: dict[Path, Path] = {}  # job folder -> its refreshed summary
        stale: dict[Path, str] = {}  # job folder -> why its summary was not recomputed
        for report in reports:
            job = Path(report.trial).parent.parent
            if report.written and job not in summaries and job not in stale:
                try:
                    refreshed = refresh_job_summary(Path(report.trial))
                except UserError as exc:  # e.g. another trial's result.json is unreadable
                    stale[job] = str(exc)
                    continue
                if refreshed is not None:
                    summaries[job] = refreshed
            if report.written and job in summaries:
                report.summary = str(summaries[job])
        for report in reports:
            if as_json:
                echo_json(json.dumps(report.model_dump(mode="json")))
                continue
            if report.unreadable:
                console.print(
                    f"{report.task_id} {_folder_name(report.trial)}: cannot re-grade: "
                    f"{report.unreadable}",
                    highlight=False,
                    soft_wrap=True,
                )
                continue
            if report.not_gradable:
                console.print(
                    f"{report.task_id} {_folder_name(report.trial)}: recorded "
                    f"{_shown(report.before.score)}: not re-gradable: {report.not_gradable}",
                    highlight=False,
                    soft_wrap=True,
                )
                continue
            b, a = report.before.score, report.after.score
            verdict = "same scores" if report.same else "DIFFERENT scores"
            if not report.same and b == a and report.score_file:
                verdict = "same scores, but score.json disagrees"
            elif report.replay_misses or (a is None and report.after.error and b is not None):
                verdict = "could not be re-graded"  # a judge it needed did not answer
            console.print(
                f"{report.task_id} {_folder_name(report.trial)}: recorded {_shown(b)} -> "
                + (f"re-graded {a}" if a is not None else "no score")
                + f": {verdict} (judge records: {report.judge_cache['hits']} used, "
                f"{report.judge_cache['misses']} missing)"
                + ("; written" if report.written else ""),
                highlight=False,
                soft_wrap=True,
            )
            if report.task_changed:
                console.print(report.task_changed, highlight=False, soft_wrap=True)
            if report.score_file and not report.written:
                console.print(report.score_file, highlight=False, soft_wrap=True)
            if report.replay_misses:
                console.print(
                    f"replay miss: the grading asked the judge {report.replay_misses} "
                    "request(s) the trial never recorded; pass --judge MODEL to ask a live judge"
                    + (" (not written)" if write else ""),
                    highlight=False,
                    soft_wrap=True,
                )
            elif report.after.error:
                console.print(f"grading error: {report.after.error}", highlight=False)
        if not as_json:  # the closing line, one trial or many
            same, n = sum(_same_scores(r) for r in reports), len(reports)
            tail = (
                "trial re-grades to its recorded score"
                if n == 1
                else "trials re-grade to their recorded scores"
            )
            skipped = sum(r.not_gradable is not None for r in reports)
            unreadable = sum(r.unreadable is not None for r in reports)
            disagree = sum(r.score_file is not None and not r.written for r in reports)
            # the ones graded again to another score, counted (helper-195: left to subtract)
            differ = n - same - skipped - unreadable
            console.print(
                f"{same}/{n} {tail}"
                + (f"; {differ} re-grade(s) to another score" if differ > 0 else "")
                + (f"; {skipped} not re-gradable (no end state)" if skipped else "")
                + (f"; {unreadable} could not be read" if unreadable else "")
                + (f"; {disagree} score.json disagree(s) with result.json" if disagree else ""),
                highlight=False,
                soft_wrap=True,
            )
        if not as_json:
            for path in summaries.values():
                console.print(
                    f"summary recomputed: {path}{_misnamed(path)}", highlight=False, soft_wrap=True
                )
        for why in stale.values():
            err_console.print(f"summary not recomputed: {why}", highlight=False, soft_wrap=True)
        from clawrig.runner.batch import gone_trial_lines

        gone = gone_trial_lines(trial_dirs, "re-graded")
        for line in gone:
            err_console.print(line, highlight=False, soft_wrap=True)
        if stale or gone or not all(r.same for r in reports):
            raise typer.Exit(1)
