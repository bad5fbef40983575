"""Built-in mock services (gmail, calendar, contacts, slack) that run inside a trial's sandbox.

Self-contained: only the standard library, pydantic, FastAPI and uvicorn, with relative imports,
so the harness can copy this folder into a sandbox under any package name. ``core`` holds the
state and the audit, ``server`` the FastAPI app and its entry point, ``replay`` a standard-library
server that serves a saved audit during grading.
"""
