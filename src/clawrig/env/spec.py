"""EnvSpec: the system a suite's tasks expect (Debian packages, then pip and npm packages).

A spec is a YAML file (``name``, ``suite``, ``variant``, ``debian``, ``pip``, ``npm``, optional
``run`` and ``dockerfile``). Three ship with clawrig in ``clawrig/env/specs/`` (``base``,
``wildclaw``, ``dataclaw``); :func:`load_env_spec` takes one of those names or a path.
:func:`env_for_format` says which one a task format expects (WildClawBench -> ``wildclaw``,
DataClawBench -> ``dataclaw``, four-folder sets -> none: the host's system, read-only).

``digest`` (sha256 hex of the canonical spec, the Dockerfile's text and :data:`BUILDER_VERSION`)
names a build in the cache: a changed spec builds anew, an unchanged one is reused; a changed
Dockerfile rebuilds the image only (the root file system's key leaves it out).
"""

from __future__ import annotations

import hashlib
import json
import re
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from clawrig.errors import UserError, first_invalid

BUILDER_VERSION = 2
"""Bumped when the way a spec becomes a root file system changes (old builds then rebuild)."""

SHIPPED = ("base", "wildclaw", "dataclaw")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_PACKAGE = re.compile(r"^[A-Za-z0-9@][A-Za-z0-9@/_.+:=<>~!,\[\]-]*$")


class EnvSpec(BaseModel):
    """One environment: ``debian`` packages installed with mmdebstrap from Debian ``suite``
    (``variant`` as mmdebstrap names it), then ``pip`` and ``npm`` (global) packages, then the
    ``run`` shell commands (as root in the new tree, ``/bin/sh -c``, ``HOME=/root``; what they
    put under ``/root`` seeds every sandbox's home, as an image's ``/root`` does).
    ``dockerfile``: an optional Dockerfile (path relative to the spec file) applied on top of
    the imported root file system for the Docker backend (``FROM ${BASE}``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    suite: str = "bookworm"
    variant: str = "minbase"
    debian: list[str] = Field(default_factory=list)
    pip: list[str] = Field(default_factory=list)
    npm: list[str] = Field(default_factory=list)
    run: list[str] = Field(default_factory=list)
    dockerfile: Path | None = None
    source: Path | None = Field(default=None, exclude=True)
    """The YAML file this spec was read from (not part of the digest)."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("lower-case letters, digits, '.', '_' or '-' (at most 63)")
        return v

    @field_validator("debian", "pip", "npm")
    @classmethod
    def _packages(cls, v: list[str]) -> list[str]:
        for p in v:
            if not _PACKAGE.match(p):
                raise ValueError(f"not a package name: {p!r}")
        return v

    @property
    def dockerfile_path(self) -> Path | None:
        if self.dockerfile is None:
            return None
        base = self.source.parent if self.source else Path.cwd()
        return (base / self.dockerfile).resolve()

    def _digest(self, with_dockerfile: bool) -> str:
        body = self.model_dump(mode="json", exclude={"source", "dockerfile"})
        body["debian"] = sorted(body["debian"])
        if not body["run"]:
            del body["run"]  # specs without run commands keep the keys they had before it
        df = self.dockerfile_path if with_dockerfile else None
        body["dockerfile_text"] = df.read_text() if df is not None and df.is_file() else None
        body["builder"] = BUILDER_VERSION
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    @property
    def digest(self) -> str:
        """sha256 hex of what determines the build, the Dockerfile's text included."""
        return self._digest(with_dockerfile=True)

    @property
    def key(self) -> str:
        """Image tag of this build: ``<name>-<first 12 of digest>``."""
        return f"{self.name}-{self.digest[:12]}"

    @property
    def rootfs_key(self) -> str:
        """Cache folder of the root file system (the Dockerfile does not change it; equal to
        :attr:`key` without one)."""
        return f"{self.name}-{self._digest(with_dockerfile=False)[:12]}"


def load_env_spec(ref: str | Path) -> EnvSpec:
    """The spec named ``ref``: a shipped name (``base``, ``wildclaw``, ``dataclaw``) or a YAML file.

    Raises UserError (one line naming the file and field) for a missing or malformed spec."""
    text: str
    source: Path | None = None
    if isinstance(ref, str) and ref in SHIPPED:
        text = resources.files("clawrig.env").joinpath("specs", f"{ref}.yaml").read_text()
        label = f"{ref} (shipped)"
    else:
        source = Path(ref)
        if not source.is_file():
            if source.suffix in (".yaml", ".yml") or len(source.parts) > 1:  # meant as a file
                raise UserError(f"{ref}: no such file (an environment spec YAML file)")
            raise UserError(
                f"environment {ref}: not a shipped name ({', '.join(SHIPPED)}) nor a YAML file"
            )
        text = source.read_text()
        label = str(source)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{label}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{label}: expected a mapping with name, debian, pip, npm")
    try:
        spec = EnvSpec.model_validate(data)
    except ValidationError as exc:
        field, what = first_invalid(exc, "(top)")
        raise UserError(f"{label}: field {field}: {what}") from None
    spec.source = source.resolve() if source else None
    df = spec.dockerfile_path
    if df is not None and not df.is_file():
        raise UserError(f"{label}: field dockerfile: no such file: {df}")
    return spec


def env_for_format(task_format: str) -> str | None:
    """The shipped environment a task format expects, or None for the host's system."""
    return {"wildclaw": "wildclaw", "dataclaw": "dataclaw"}.get(str(task_format))


GRADERS_ON_ENVIRONMENT = frozenset({"wildclaw"})
"""Formats whose graders run on the agent's system, as upstream's do: WildClawBench's
``grade()`` runs in the task's container with the container's Python, so what the image and
the warmup installed is importable (shared/reference/upstream-harnesses.md). Other formats'
graders get their declared grader environment (a ``requirements.txt`` beside the tasks)."""


def graders_use_environment(task_format: str) -> bool:
    """True when ``task_format``'s graders run on the environment's own ``python3`` (with the
    task's warm snapshot) rather than a grader environment of their own."""
    return str(task_format) in GRADERS_ON_ENVIRONMENT
