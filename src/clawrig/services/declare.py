"""How a task declares its services: the ``services`` list of a four-folder intent file.

Shape (clawrig's extension of ``intent/NNNNNN.json``; the same list can come from any task
reader)::

    "services": [
      {"name": "gmail", "kind": "gmail", "port": 9100,
       "fixtures": {"now": "2026-03-24T09:00:00", "messages": [...], "reactions": [...]},
       "faults": {"error_rate": 0.2, "seed": 7}},
      {"name": "slack", "kind": "slack", "fixtures": "fixtures/slack.json"},
      {"name": "crm", "command": "python3 crm.py", "port": 9200, "health_path": "/health"}
    ]

- ``kind``: a service kind (built-in: gmail, calendar, contacts, slack; more from the
  ``clawrig.services`` entry points, :mod:`clawrig.services.kinds`), or omitted with
  ``command`` (a start command run with ``/bin/sh -c`` in /tmp_workspace);
- ``name``: defaults to the kind; names the end-state folder ``.services/<name>/``;
- ``port``: defaults to the kind's ``default_port`` (gmail 9100, calendar 9101, contacts 9103,
  slack 9110);
- ``fixtures``: an object (inline; never visible to the agent), or a path relative to
  /tmp_workspace of a JSON object (read in the sandbox when the service starts), stored as
  ``{"$file": path}``; inside the object, a string value ending in ``.json`` (except ``now``)
  is likewise a workspace path of that fixture's JSON value;
- ``faults``: see :mod:`clawrig.services.mock.core` (seeded 429/500 rate and latency);
- ``health_path`` (default ``/health``), ``reset_path`` (default ``/<kind>/reset`` for built-ins).

Inline fixtures and faults of a kind are checked here with the kind's own code, so a typo is a
read-time error naming the file and the field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from clawrig.errors import TaskFormatError, UserError
from clawrig.services.kinds import SERVICE_KINDS, service_class
from clawrig.services.mock.core import Faults, FixtureError, MockService
from clawrig.spec.task import ServiceSpec

ENTRY_KEYS = {"name", "kind", "command", "port", "health_path", "fixtures", "faults", "reset_path"}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _is_path(key: str, value: Any) -> bool:
    return isinstance(value, str) and value.endswith(".json") and key != "now"


def fixture_files(spec: ServiceSpec) -> list[str]:
    """The paths of the JSON files ``spec``'s fixtures name (``$file``, and string values ending
    in ``.json`` but ``now``), as declared: relative to /tmp_workspace."""
    return [
        str(value)
        for key, value in spec.fixtures.items()
        if (key == "$file" and value is not None) or _is_path(key, value)
    ]


def _workspace_path(value: str) -> bool:
    """True for a path relative to /tmp_workspace that stays in it (no '/' start, no '..')."""
    return bool(value.strip()) and not value.startswith("/") and ".." not in Path(value).parts


def parse_service(entry: Any, path: Path, where: str, line: int | None = None) -> ServiceSpec:
    """One entry of a ``services`` list. Raises TaskFormatError naming ``where.<field>``."""

    def fail(field: str, message: str) -> TaskFormatError:
        return TaskFormatError(path, f"{where}.{field}" if field else where, message, line)

    if not isinstance(entry, dict):
        raise fail("", "must be an object with at least a kind (or a command) ")
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:
        raise fail(unknown[0], f"unknown key (known: {', '.join(sorted(ENTRY_KEYS))})")
    kind, command = entry.get("kind"), entry.get("command")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise fail("command", "must be a non-empty shell command")
    if kind is not None and not isinstance(kind, str):
        raise fail("kind", "must be a string")
    cls: type[MockService] | None = None
    if command is None:
        if kind not in SERVICE_KINDS:
            raise fail(
                "kind",
                f"{kind!r} is not a service kind ({', '.join(SERVICE_KINDS.names())}); give a "
                "`command` to start another one",
            )
        try:
            cls = service_class(str(kind))
        except UserError as exc:
            raise fail("kind", str(exc).removeprefix("services[].kind: ")) from None
    name = entry.get("name", kind)
    if name is None:
        raise fail("name", "required for a service started by a command")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise fail("name", f"{name!r}: letters, digits, '_', '.', '-' only")
    port = entry.get("port", cls.default_port if cls is not None else None)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise fail("port", f"must be a port number, got {port!r}")
    for key in ("health_path", "reset_path"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, str) or not value.startswith("/")):
            raise fail(key, f"must be a path starting with '/', got {value!r}")
    fixtures = entry.get("fixtures", {})
    if isinstance(fixtures, str):
        if not _workspace_path(fixtures):
            raise fail("fixtures", f"{fixtures!r} is not a path relative to /tmp_workspace")
        fixtures = {"$file": fixtures}
    elif not isinstance(fixtures, dict):
        raise fail("fixtures", "must be an object or a workspace path of a JSON file")
    for key, value in fixtures.items():
        if _is_path(key, value) and not _workspace_path(value):
            raise fail(f"fixtures.{key}", f"{value!r} is not a path relative to /tmp_workspace")
    faults = entry.get("faults", {})
    if not isinstance(faults, dict):
        raise fail("faults", "must be an object")
    try:
        Faults(faults)
    except FixtureError as exc:
        raise fail("faults", str(exc).removeprefix("faults: ").removeprefix("faults.")) from None
    if cls is not None:
        inline = {k: v for k, v in fixtures.items() if k != "$file" and not _is_path(k, v)}
        for key in fixtures:
            if key != "$file" and key not in cls.fixture_keys:
                raise fail(
                    f"fixtures.{key}",
                    f"unknown fixture for {kind} (known: {', '.join(sorted(cls.fixture_keys))})",
                )
        try:
            cls(inline, None)
        except FixtureError as exc:
            raise fail("fixtures", str(exc)) from None
    reset_path = entry.get("reset_path")
    if reset_path is None and command is None:
        reset_path = f"/{kind}/reset"
    return ServiceSpec(
        name=name,
        kind=kind,
        command=command,
        port=port,
        health_path=entry.get("health_path") or "/health",
        fixtures=fixtures,
        faults=faults,
        reset_path=reset_path,
    )


def parse_services(value: Any, path: Path, line: int | None = None) -> list[ServiceSpec]:
    """A task's ``services`` list -> ServiceSpecs (names and ports unique).

    Raises :class:`clawrig.errors.TaskFormatError` naming ``path`` and the field
    (``services[1].port``) with ``line`` when given.
    """
    if not isinstance(value, list):
        raise TaskFormatError(path, "services", "must be a list of service objects", line)
    specs: list[ServiceSpec] = []
    for i, entry in enumerate(value):
        spec = parse_service(entry, path, f"services[{i}]", line)
        for other in specs:
            if other.name == spec.name:
                raise TaskFormatError(
                    path, f"services[{i}].name", f"{spec.name!r} is used twice", line
                )
            if other.port == spec.port:
                raise TaskFormatError(
                    path,
                    f"services[{i}].port",
                    f"{spec.port} is already the port of {other.name!r}",
                    line,
                )
        specs.append(spec)
    return specs
