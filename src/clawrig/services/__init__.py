"""Mock services as task components (issue 4): built-in gmail, calendar, contacts and slack
(FastAPI + uvicorn) or a task's own start command, run inside the trial's sandbox, with their
audit saved to the end state (``/tmp_workspace/.services/<name>/audit.json``).

Wiring in a trial (see :mod:`clawrig.services.lifecycle` for the order and the reasons)::

    binds += await service_binds(task)                 # before the sandbox is created
    handles = await start_services(sandbox, task, audit=channel)  # before the warmup
    ...agent...
    audits, _ = await fetch_audits(sandbox, task, handles, builtin=False)  # command services
    ...the agent's sandbox stopped; audits_from_streams(task, channel.connections)...
    await restart_services(clean_room, task, audits=audits)  # before grading

Task declaration: :func:`parse_services` (the ``services`` list of a four-folder intent).
"""

from clawrig.services.declare import parse_service, parse_services
from clawrig.services.kinds import SERVICE_KINDS, service_class
from clawrig.services.lifecycle import (
    SERVICES_REQUIREMENTS,
    ServiceHandle,
    audit_file,
    audit_path,
    audit_text,
    audits_from_streams,
    fetch_audits,
    has_fixture_files,
    needs_services_env,
    read_fixture_files,
    restart_services,
    save_audits,
    service_binds,
    services_env,
    services_python,
    start_services,
    stop_services,
)
from clawrig.services.mock.core import DEFAULT_PORTS, KINDS, FixtureError, make_service

__all__ = [
    "DEFAULT_PORTS",
    "KINDS",
    "SERVICES_REQUIREMENTS",
    "SERVICE_KINDS",
    "FixtureError",
    "ServiceHandle",
    "audit_file",
    "audit_path",
    "audit_text",
    "audits_from_streams",
    "fetch_audits",
    "has_fixture_files",
    "make_service",
    "needs_services_env",
    "parse_service",
    "parse_services",
    "read_fixture_files",
    "restart_services",
    "save_audits",
    "service_binds",
    "service_class",
    "services_env",
    "services_python",
    "start_services",
    "stop_services",
]
