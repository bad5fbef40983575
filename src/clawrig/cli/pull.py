"""``clawrig pull SOURCE[@REVISION] [--include PATTERN] [--to DIR]``: benchmark data from the
Hugging Face Hub, pinned, laid out for clawrig's readers, validated (and verified when its
samples ship expected rewards), with a manifest that ``clawrig run`` checks and copies into
the job summary. See :mod:`clawrig.data.pull`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clawrig.choices import DEFAULT_MEMORY_MB
from clawrig.cli.common import (
    MemoryMbOption,
    console,
    err_console,
    local_sandbox_guard,
    run_async,
)


def register(app: typer.Typer) -> None:
    """Add ``pull`` to the main app."""

    @app.command("pull")
    def pull_cmd(
        source: Annotated[
            str,
            typer.Argument(
                help="eigendata/wildclaw | wildclawbench | dataclawbench | "
                "hf://datasets/OWNER/NAME or hf://datasets/OWNER/NAME/PATH, optionally @REVISION "
                "(branch, tag, commit)"
            ),
        ],
        include: Annotated[
            list[str] | None,
            typer.Option("--include", help="only files matching this pattern (repeatable)"),
        ] = None,
        to: Annotated[
            Path | None, typer.Option("--to", help="destination folder (default data/<name>)")
        ] = None,
        verify: Annotated[
            bool,
            typer.Option(
                "--verify/--no-verify",
                help="verify sets whose samples ship expected rewards (runs sandboxes)",
            ),
        ] = True,
        sandbox: Annotated[str, typer.Option("--sandbox", help="bwrap | docker | local")] = "bwrap",
        memory_mb: MemoryMbOption = DEFAULT_MEMORY_MB,
        parallel: Annotated[int, typer.Option("--parallel", "-p", min=1)] = 4,
        progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
    ) -> None:
        """Download benchmark data by revision, lay it out, validate it, write its manifest."""
        from clawrig.data.pull import pull
        from clawrig.data.sources import parse_source
        from clawrig.sandbox.kinds import check_sandbox_kind

        check_sandbox_kind(sandbox)
        if verify:
            local_sandbox_guard(sandbox, parallel)
        src = parse_source(source, include)
        dest = to or Path("data") / src.name.replace("/", "-")

        def note(line: str) -> None:
            err_console.print(line, highlight=False, soft_wrap=True)

        manifest, mpath = pull(src, dest, progress=progress, note=note)
        console.print(
            f"manifest: {mpath} ({len(manifest.files)} files, commit {manifest.commit})",
            highlight=False,
            soft_wrap=True,
        )
        if manifest.suite is None:
            console.print(
                f"no task files in this data: run the benchmark's tasks with --root {dest}",
                highlight=False,
                soft_wrap=True,
            )
            return
        suite = dest / manifest.suite if manifest.suite else dest
        from clawrig.spec.task import TaskFormat
        from clawrig.tasks.registry import load_suite, root_applies

        root = dest if root_applies(suite) else None  # a four-folder set reads no root
        loaded = load_suite(suite, root=root)
        for issue in loaded.issues[:20]:
            (err_console if issue.severity == "error" else console).print(
                f"{issue.severity}: {issue}", highlight=False, soft_wrap=True
            )
        console.print(f"validate: {loaded.counts()}", highlight=False)
        if loaded.errors:
            raise typer.Exit(1)
        if verify and loaded.format == TaskFormat.FOURFOLDER:
            from clawrig.verify import verify_path

            report = run_async(
                verify_path(
                    suite, sandbox=sandbox, memory_mb=memory_mb, parallel=parallel, root=root
                )
            )
            counts = report.counts
            console.print(
                f"verify: {counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail",
                highlight=False,
            )
            for sample in report.samples:
                if sample.status == "fail":
                    why = next(f.message for f in sample.findings if f.severity == "error")
                    console.print(f"  {sample.id}: {why}", highlight=False, soft_wrap=True)
            if not report.ok:
                raise typer.Exit(1)
        console.print(f"run it: clawrig run {suite}", highlight=False, soft_wrap=True)
