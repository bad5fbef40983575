"""``clawrig view --bundle OUT_DIR JOB_DIR...``: the viewer's pages as a static site.

The site has the server's layout (:mod:`clawrig.view.pages`) with every page written as a file,
so it opens from ``file://`` or any static host: the job pages carry their trial rows inline
(sorting and filtering work offline) and never poll. OUT_DIR may exist but must not hold files
other than an earlier bundle's; that bundle's pages this one does not write (a job or trial no
longer given) are removed, so none is published with it unlinked. Nothing else there is.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from clawrig.errors import UserError
from clawrig.view.index import open_jobs
from clawrig.view.pages import STATIC_DIR, Site


@dataclass
class BundleReport:
    """What was written: ``pages`` (HTML files), ``trials`` (trial pages among them)."""

    out: Path
    pages: int
    trials: int


def _check_out(out: Path) -> None:
    from clawrig.runner.preflight import writable_problem

    if problem := writable_problem(out, "--bundle", folder=True):  # a file, /proc, read-only
        raise UserError(problem)
    if out.is_dir() and any(out.iterdir()) and not (out / "static" / "app.js").is_file():
        raise UserError(f"--bundle: {out} is not empty and holds no earlier bundle")


def write_bundle(out: Path, folders: list[Path]) -> BundleReport:
    """Write the static site of ``folders`` into ``out``. Raises UserError for a bad job folder
    or an ``out`` that cannot be written (a file, a read-only or pseudo file system) or is a
    non-empty folder of something else."""
    out = Path(out)
    _check_out(out)
    jobs = open_jobs(folders)
    if not jobs:  # (empty folders: a live viewer waits for their jobs, a bundle has none)
        raise UserError(f"JOB_DIR: no job in {', '.join(map(str, folders))} yet: nothing to write")
    site = Site(jobs, live=False)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(STATIC_DIR, out / "static", dirs_exist_ok=True)
    pages = trials = 0
    written: set[Path] = set()

    def put(rel: str, html: str) -> None:
        nonlocal pages
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
        written.add(path)
        pages += 1

    put("index.html", site.index_page())
    if len(site.jobs) > 1:
        put("compare.html", site.compare_page())
    for job in site.jobs:
        put(f"{job.key}/index.html", site.job_page(job.key))
        for row in job.rows():
            html = site.trial_page(job.key, row["id"])
            if html is not None:
                put(f"{job.key}/trials/{row['id']}.html", html)
                trials += 1
    _remove_stale_pages(out, written)
    return BundleReport(out=out, pages=pages, trials=trials)


_JOB_FOLDER = re.compile(r"job[0-9]+")
"""The name of a job's folder in a bundle (:class:`clawrig.view.index.JobView`'s key)."""


def _remove_stale_pages(out: Path, written: set[Path]) -> None:
    """Remove the pages an earlier bundle wrote into ``out`` that this one did not
    (``index.html``, ``compare.html``, ``<job>/index.html``, ``<job>/trials/<task>/<id>.html``),
    and the folders that leaves empty; nothing else (``static/`` is this bundle's, a folder not
    named as job folders are, ``job<N>``, is the publisher's)."""
    jobs = [d for d in out.glob("job*") if _JOB_FOLDER.fullmatch(d.name) and not d.is_symlink()]
    stale = [p for p in [out / "compare.html"] if p not in written]
    for job in jobs:
        stale += [p for p in job.glob("index.html") if p not in written]
        stale += [p for p in (job / "trials").rglob("*.html") if p not in written]
    for page in stale:
        if page.is_file() and not page.is_symlink():
            page.unlink()
    for job in jobs:  # deepest first: a folder emptied above leaves its parent empty
        for folder in sorted(job.rglob("*"), key=lambda p: len(p.parts), reverse=True) + [job]:
            if folder.is_dir() and not folder.is_symlink():
                with contextlib.suppress(OSError):  # not empty: something else is there
                    folder.rmdir()
