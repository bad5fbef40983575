"""``clawrig env build|list|prune``: environments (root file systems, Docker images) and warm
snapshots in the cache (see :mod:`clawrig.env`)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer

from clawrig.cli.common import console, err_console, stdout_console

app = typer.Typer(
    add_completion=False,
    help="Environments tasks run on: build (mmdebstrap, docker import), list, prune.",
    no_args_is_help=True,
)


@app.command("build")
def build(
    ref: Annotated[str, typer.Argument(help="base | wildclaw | dataclaw | a spec YAML FILE")],
    docker: Annotated[
        bool, typer.Option("--docker", help="also import it into Docker as an image")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="rebuild even when cached")] = False,
) -> None:
    """Build an environment and cache it (minutes the first time; at once when cached)."""
    from clawrig.env.build import ensure_image, ensure_rootfs
    from clawrig.env.spec import load_env_spec

    spec = load_env_spec(ref)

    def progress(line: str) -> None:
        err_console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)

    rootfs = ensure_rootfs(spec, progress=progress, force=force)
    console.print(f"{spec.name}: root file system {rootfs}", highlight=False)
    if docker:
        tag = ensure_image(spec, progress=progress, force=force)
        console.print(f"{spec.name}: Docker image {tag}", highlight=False)


@app.command("list")
def list_cmd(
    paths: Annotated[bool, typer.Option("--paths", help="show where each item is")] = False,
) -> None:
    """Cached environments, warm snapshots and clawrig's Docker images, with their sizes."""
    from rich import box
    from rich.table import Table

    from clawrig.env.store import list_cached

    items = list_cached()
    if not items:
        console.print("nothing cached (clawrig env build base|wildclaw|dataclaw|FILE)")
        return
    # one line per item where the terminal allows: only the detail wraps
    table = Table(
        "kind", "name", "size", "last used", "detail", box=box.SIMPLE_HEAD, padding=(0, 1)
    )
    for column in table.columns[:4]:
        column.no_wrap = True
    if paths:
        table.add_column("path / image id", overflow="fold")
    for item in items:
        used = (
            dt.datetime.fromtimestamp(item.last_used).strftime("%m-%d %H:%M")
            if item.last_used
            else ""
        )
        row = [item.kind, item.key, item.size_text, used, item.detail]
        table.add_row(*row, *([item.path] if paths else []))
    stdout_console().print(table)


@app.command("prune")
def prune(
    everything: Annotated[bool, typer.Option("--all", help="remove everything cached")] = False,
    days: Annotated[
        float, typer.Option("--days", min=0.0, help="remove what was unused this many days")
    ] = 7.0,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="list what would be removed, with sizes; remove nothing"),
    ] = False,
) -> None:
    """Remove old builds and warm snapshots (superseded or unused for --days)."""
    from clawrig.env.spec import SHIPPED, load_env_spec
    from clawrig.env.store import prune as do_prune
    from clawrig.sizes import format_bytes

    keep = {load_env_spec(name).rootfs_key for name in SHIPPED}
    removed = do_prune(
        keep_keys=keep, older_than_s=days * 86400, everything=everything, dry_run=dry_run
    )
    verb = "would remove" if dry_run else "removed"
    for item in removed:
        console.print(f"{verb} {item}", highlight=False)
    total = format_bytes(sum(item.size or 0 for item in removed))
    images = sum(item.size is None for item in removed)
    uncounted = f" (and {images} Docker image(s), sized by Docker)" if images else ""
    line = (
        f"{len(removed)} item(s) would be removed, freeing {total}{uncounted} "
        "(--dry-run: nothing was)"
        if dry_run
        else f"{len(removed)} item(s) removed, {total} freed{uncounted}"
    )
    console.print(line, highlight=False)
