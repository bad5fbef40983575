"""Service kinds: the ``kind`` a task's ``services`` entry names, one registry like the other
pluggable families (:mod:`clawrig.plugins`).

A kind is a :class:`clawrig.services.mock.core.MockService` subclass, imported on first use.
The built-in ones are gmail, calendar, contacts and slack; third parties add kinds in the
``clawrig.services`` entry-point group::

    [project.entry-points."clawrig.services"]
    crm = "my_services.crm:CrmService"

or at run time with ``SERVICE_KINDS.register("crm", CrmService)``. A kind runs inside the
trial's sandbox on the services environment (FastAPI + uvicorn): the harness copies the module
that defines the class (one file) into the sandbox beside the built-in services' code, so that
module may import only the standard library, pydantic and ``clawrig.services.mock.core``.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING

from clawrig.errors import UserError
from clawrig.plugins import Registry

if TYPE_CHECKING:
    from clawrig.services.mock.core import MockService

SERVICE_KINDS: Registry[type[MockService]] = Registry(
    "services",
    {
        "gmail": "clawrig.services.mock.core:GmailService",
        "calendar": "clawrig.services.mock.core:CalendarService",
        "contacts": "clawrig.services.mock.core:ContactsService",
        "slack": "clawrig.services.mock.core:SlackService",
    },
    flag="services[].kind",
)


def service_class(kind: str) -> type[MockService]:
    """The class behind ``kind``. Raises UserError (one line) for an unknown kind, one that
    cannot be imported, or an object that is not a MockService subclass."""
    from clawrig.services.mock.core import MockService

    cls = SERVICE_KINDS.get(kind)
    if not (isinstance(cls, type) and issubclass(cls, MockService)):
        raise UserError(
            f"services[].kind: {kind!r} is not a MockService subclass "
            "(clawrig.services.mock.core.MockService)"
        )
    return cls


def service_target(kind: str) -> tuple[str, str, Path]:
    """(module, class name, source file) of ``kind``'s class: how the service process inside
    the sandbox imports it. Raises UserError like :func:`service_class`, and when the class's
    module is not a source file."""
    cls = service_class(kind)
    source = inspect.getsourcefile(cls)
    if source is None:
        raise UserError(f"services[].kind: {kind!r}: {cls.__module__} has no source file")
    return cls.__module__, cls.__qualname__, Path(source)
