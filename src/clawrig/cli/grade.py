"""``clawrig grade TRIAL_DIR``: re-grade a finished trial (replaying recorded judge calls)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from clawrig.cli.common import console


def register(app: typer.Typer) -> None:
    """Add ``grade`` to the main app."""

    @app.command("grade")
    def grade(
        trial_dir: Annotated[Path, typer.Argument(help="A trial folder (holds result.json).")],
        judge_cache: Annotated[
            list[Path] | None,
            typer.Option(
                "--judge-cache", help="judge_chat.jsonl files to replay (default: the trial's)"
            ),
        ] = None,
        judge: Annotated[
            str | None, typer.Option("--judge", help="live judge for requests the cache lacks")
        ] = None,
        grader: Annotated[str, typer.Option("--grader")] = "auto",
        sandbox: Annotated[str, typer.Option("--sandbox")] = "bwrap",
        as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print JSON.")] = False,
    ) -> None:
        """Grade a finished trial again; exit 1 when the scores differ from the recorded ones."""
        from clawrig.runner.regrade import regrade_trial

        live = None
        if judge:
            from clawrig.llm.client import get_model

            live = get_model(judge, role="judge")
        report = asyncio.run(
            regrade_trial(
                trial_dir, grader=grader, judge=live, judge_cache=judge_cache, sandbox=sandbox
            )
        )
        if as_json:
            console.print_json(json.dumps(report, default=str))
        else:
            b, a = report["before"]["score"], report["after"]["score"]
            verdict = "same scores" if report["same"] else "DIFFERENT scores"
            console.print(
                f"{report['task_id']}: recorded {b} -> re-graded {a}: {verdict} "
                f"(judge cache: {report['judge_cache']['hits']} hits, "
                f"{report['judge_cache']['misses']} misses)",
                highlight=False,
            )
            if report["after"]["error"]:
                console.print(f"grading error: {report['after']['error']}", highlight=False)
        if not report["same"]:
            raise typer.Exit(1)
