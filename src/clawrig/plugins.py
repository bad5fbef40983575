"""Registries of pluggable families, one style for all: agents, sandboxes, formats, services.

Each family maps a name to an object (a class or a factory) given as a ``"module:attribute"``
string, imported on first use, so listing names stays cheap (the CLI's start-up). Third parties
add names through Python entry points in the group ``clawrig.<family>``
(``clawrig.agents``, ``clawrig.sandboxes``, ``clawrig.formats``, ``clawrig.services``), e.g. in
their ``pyproject.toml``::

    [project.entry-points."clawrig.agents"]
    my-agent = "my_package.agent:MyAgent"

or at run time with :meth:`Registry.register`. A built-in name wins over an entry point of the
same name. Unknown names raise :class:`clawrig.errors.UserError` with one line naming the flag
and the choices.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar, cast

from clawrig.errors import UserError

T = TypeVar("T")

FAMILIES = ("agents", "sandboxes", "formats", "services")
"""The entry-point groups are ``clawrig.<family>`` for each of these."""


def _load_target(target: str) -> object:
    module, _, attr = target.partition(":")
    obj: object = importlib.import_module(module)
    for part in attr.split(".") if attr else []:
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Names of one pluggable family -> the object behind each (loaded on first use).

    ``family``: one of :data:`FAMILIES` (its entry-point group is ``clawrig.<family>``);
    ``builtins``: name -> ``"module:attribute"`` in the order they are listed;
    ``flag``: how a user names it in error messages (``--agent``).
    """

    def __init__(self, family: str, builtins: dict[str, str], *, flag: str) -> None:
        self.family = family
        self.flag = flag
        self._targets: dict[str, str | T] = dict(builtins)
        self._loaded: dict[str, T] = {}
        self._scanned = False

    @property
    def singular(self) -> str:
        """One of the family in messages: "agent", "sandbox" (it said "sandboxe": helper-204)."""
        return self.family.removesuffix("es") if self.family.endswith("xes") else self.family[:-1]

    @property
    def group(self) -> str:
        """The entry-point group third parties register in."""
        return f"clawrig.{self.family}"

    def _scan(self) -> None:
        if self._scanned:
            return
        self._scanned = True
        from importlib.metadata import entry_points  # costs ~20 ms: only when a name is looked up

        for ep in entry_points(group=self.group):
            self._targets.setdefault(ep.name, ep.value)

    def register(self, name: str, target: str | T) -> None:
        """Add (or replace) ``name``: an object or a ``"module:attribute"`` string."""
        self._targets[name] = target
        self._loaded.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """Every known name: built-ins first, then registered and entry-point names."""
        self._scan()
        return tuple(self._targets)

    def __contains__(self, name: object) -> bool:
        if name in self._targets:
            return True
        self._scan()
        return name in self._targets

    def check(self, name: str) -> str:
        """Return ``name`` when known (nothing imported); raise UserError otherwise."""
        if name not in self:
            raise UserError(
                f"{self.flag}: unknown {self.singular} {name!r} "
                f"(choose from {', '.join(self.names())})"
            )
        return name

    def get(self, name: str) -> T:
        """The object registered as ``name``, imported on first use. Raises UserError for an
        unknown name and for an entry point that cannot be imported (one line naming it)."""
        if name in self._loaded:
            return self._loaded[name]
        self.check(name)
        target = self._targets[name]
        if isinstance(target, str):
            try:
                obj = cast(T, _load_target(target))
            except (ImportError, AttributeError) as exc:
                raise UserError(
                    f"{self.flag}: {self.singular} {name!r} ({target}) cannot be loaded: {exc}"
                ) from None
        else:
            obj = target
        self._loaded[name] = obj
        return obj

    def create(self, name: str, *args: object, **kwargs: object) -> object:
        """Call the object registered as ``name`` (a class or factory) with the arguments."""
        factory = cast(Callable[..., object], self.get(name))
        return factory(*args, **kwargs)
