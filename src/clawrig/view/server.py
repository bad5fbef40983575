"""``clawrig view``'s web app: FastAPI pages over the job folders, served by uvicorn.

Read-only: every route is a GET; a trial page is served only for a trial folder the folder
index knows (no path from the URL is opened as is). Routes mirror the static bundle's file
layout (:mod:`clawrig.view.pages`), plus ``GET /api/<job key>/state.json?since=<stamp>``,
the live state a running job's page polls (:meth:`clawrig.view.pages.Site.job_state`).
Unknown jobs, trials or pages answer 404.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from markupsafe import escape
from starlette.exceptions import HTTPException as StarletteHTTPException

from clawrig.serving import guard_hosts
from clawrig.view.index import folders_of_jobs, open_jobs
from clawrig.view.pages import STATIC_DIR, Site


def create_app(folders: list[Path], *, host: str = "127.0.0.1") -> FastAPI:
    """The app over ``folders`` (job output folders), to listen on ``host``: a request whose
    Host header names another host is answered 400, one plain line
    (:func:`clawrig.serving.guard_hosts`: no web page reads the trials by DNS rebinding).
    Raises UserError for a folder that is not a job folder."""
    site = Site(open_jobs(folders), live=True, folders=folders_of_jobs(folders))
    app = FastAPI(title="clawrig view", docs_url=None, redoc_url=None, openapi_url=None)
    guard_hosts(app, host, lambda line: PlainTextResponse(line, status_code=400))
    app.state.site = site

    @app.exception_handler(StarletteHTTPException)
    async def page_error(request: Request, exc: StarletteHTTPException) -> Response:
        """A page that is not there is a page saying so, with the way back to the jobs list
        (helper-168: a deleted job's trial links answered a line of JSON); the state API
        keeps FastAPI's JSON."""
        if request.url.path.startswith("/api/"):
            return await http_exception_handler(request, exc)
        said = escape(str(exc.detail))
        body = (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{exc.status_code}'
            f"</title></head><body><p>{exc.status_code}: {said}</p>"
            '<p><a href="/">the jobs</a></p></body></html>'
        )
        return HTMLResponse(body, status_code=exc.status_code, headers=exc.headers)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    def job_or_404(key: str) -> None:
        if key not in site.by_key:
            site.add_new_jobs()  # (a job started since the last look)
        if key not in site.by_key:
            raise HTTPException(404, f"no job {key!r} (known: {', '.join(site.by_key)})")

    @app.get("/", response_class=HTMLResponse)
    @app.get("/index.html", response_class=HTMLResponse)
    def index() -> str:
        return site.index_page()

    @app.get("/compare.html", response_class=HTMLResponse)
    def compare(
        jobs: Annotated[
            list[str], Query(description="job keys, comma-separated or repeated; all if none")
        ] = [],  # noqa: B006 - FastAPI copies a query default
        base: Annotated[str, Query(description="the job the others are paired against")] = "",
    ) -> str:
        keys = list(dict.fromkeys(k for value in jobs for k in value.split(",") if k))
        for k in [*keys, *([base] if base else [])]:
            job_or_404(k)
        # the page's form: the jobs ticked (none: all) and the one the others are paired
        # against, which counts only when ticked (helper-221: an unticked one came back)
        if base and not keys:
            site.add_new_jobs()
            keys = [j.key for j in site.jobs]
        if base in keys:
            keys = [base, *(k for k in keys if k != base)]
        return site.compare_page(keys or None)

    @app.get("/api/{key}/state.json")
    def state(key: str, since: str = "") -> Response:
        job_or_404(key)
        return Response(
            site.job_state(key, since),
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    @app.get("/{key}", include_in_schema=False)
    def job_slash(key: str) -> RedirectResponse:
        job_or_404(key)
        return RedirectResponse(f"/{key}/index.html")

    @app.get("/{key}/", response_class=HTMLResponse)
    @app.get("/{key}/index.html", response_class=HTMLResponse)
    def job(key: str) -> str:
        job_or_404(key)
        return site.job_page(key)

    @app.get("/{key}/trials/{task}/{trial}.html", response_class=HTMLResponse)
    def trial(key: str, task: str, trial: str) -> str:
        job_or_404(key)
        page = site.trial_page(key, f"{task}/{trial}")
        if page is None:
            raise HTTPException(
                404, f"no trial {task}/{trial} in job {key} (or its folder is gone)"
            )
        return page

    return app
