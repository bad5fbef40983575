"""Where benchmark data comes from: the known Hugging Face datasets by short name, or any
``hf://datasets/OWNER/NAME[@REVISION][/PATH]``.

Known sources (shared/reference/upstream-harnesses.md):

| short name | dataset | include |
|---|---|---|
| ``eigendata/wildclaw`` (alias ``eigendata``) | ``jindidi/eigendata-demo-data`` | ``wildclaw/*`` |
| ``wildclawbench`` | ``internlm/WildClawBench`` | everything |
| ``dataclawbench`` | ``GTML-LAB/DataClaw`` | everything |

``SOURCE@REVISION`` pins a branch, tag or commit (default ``main``); a ``/PATH`` after an
``hf://`` dataset pulls only that folder (``PATH/*``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clawrig.errors import UserError


@dataclass(frozen=True)
class Source:
    """A dataset to pull: ``repo_id`` (``OWNER/NAME``), the ``revision`` asked for, the
    ``include`` patterns (fnmatch, as ``huggingface_hub`` applies them; empty = every file),
    ``name`` (the short name, or the dataset's name) and the ``spec`` the user wrote."""

    repo_id: str
    revision: str = "main"
    include: tuple[str, ...] = field(default_factory=tuple)
    name: str = ""
    spec: str = ""

    @property
    def url(self) -> str:
        """``hf://datasets/OWNER/NAME@REVISION``."""
        return f"hf://datasets/{self.repo_id}@{self.revision}"


KNOWN: dict[str, tuple[str, tuple[str, ...]]] = {
    "eigendata/wildclaw": ("jindidi/eigendata-demo-data", ("wildclaw/*",)),
    "eigendata": ("jindidi/eigendata-demo-data", ("wildclaw/*",)),
    "wildclawbench": ("internlm/WildClawBench", ()),
    "dataclawbench": ("GTML-LAB/DataClaw", ()),
}
"""Short name -> (dataset repo id, default include patterns)."""

_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def parse_source(spec: str, include: list[str] | None = None) -> Source:
    """The :class:`Source` of ``SOURCE[@REVISION]``; ``include`` (``--include``) replaces the
    known source's default patterns. Raises UserError (one line) for an unknown short name or
    a malformed ``hf://`` path."""
    text = spec.strip()
    if text.startswith("hf://"):
        rest = text[len("hf://") :]
        if not rest.startswith("datasets/"):
            raise UserError(
                f"SOURCE: {spec}: only dataset paths are supported (hf://datasets/OWNER/NAME)"
            )
        rest = rest[len("datasets/") :]
        parts = rest.split("/")
        if len(parts) < 2:
            raise UserError(f"SOURCE: {spec}: expected hf://datasets/OWNER/NAME[@REVISION][/PATH]")
        owner, name_rev, sub = parts[0], parts[1], "/".join(p for p in parts[2:] if p)
        name, _, revision = name_rev.partition("@")
        repo_id = f"{owner}/{name}"
        if not _REPO.fullmatch(repo_id):
            raise UserError(f"SOURCE: {spec}: {repo_id!r} is not a dataset id (OWNER/NAME)")
        patterns = tuple(include or ((f"{sub}/*",) if sub else ()))
        return Source(repo_id, revision or "main", patterns, name, spec)
    short, _, revision = text.partition("@")
    key = short.lower()
    if key not in KNOWN:
        raise UserError(
            f"SOURCE: unknown source {short!r} (known: {', '.join(sorted(KNOWN))}; or "
            "hf://datasets/OWNER/NAME)"
        )
    repo_id, patterns = KNOWN[key]
    return Source(repo_id, revision or "main", tuple(include or patterns), key, spec)
