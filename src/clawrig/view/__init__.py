"""``clawrig view``: a local, read-only web app and static report over job folders.

- :mod:`clawrig.view.index`: the per-folder trial index (cached in the job folder);
- :mod:`clawrig.view.trial`: reading one trial folder for its page;
- :mod:`clawrig.view.plots`: plots as server-side SVG;
- :mod:`clawrig.view.pages`: the pages (Jinja2 templates in ``templates/``, ``static/``);
- :mod:`clawrig.view.server`: the FastAPI app; :mod:`clawrig.view.bundle`: the static site.
"""
