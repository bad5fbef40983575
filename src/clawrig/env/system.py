"""Which system a trial's sandbox runs on, and its warm snapshot.

:func:`resolve_environment` turns the job's choice (``--env auto|host|NAME|FILE``,
``--image NAME``) and a task's format into a :class:`SystemChoice`:

- ``auto`` (default): the environment the format expects (:func:`clawrig.env.spec.env_for_format`)
  when it is built, else the host's read-only system (bwrap) or the ``base`` image (Docker), with
  a note saying how to build it; building takes minutes, so ``auto`` never builds;
- ``host``: the host's /usr read-only (bwrap), no writable system;
- a name or a YAML file: that environment, built first when missing (progress shown);
- ``--image NAME`` (Docker): that local image.

:func:`prepare_system` adds the task's warm snapshot (:mod:`clawrig.env.warm`) and returns the
:class:`TrialSystem` a trial builds its :class:`clawrig.sandbox.base.SandboxConfig` from, plus the
warmup lines still to run in the trial. Errors: UserError (bad name, build failure),
SetupError (an install line failed while warming).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrig.env.build import ensure_image, ensure_rootfs, image_exists, image_name, rootfs_path
from clawrig.env.spec import env_for_format, load_env_spec
from clawrig.env.warm import WarmSnapshot, ensure_warm, split_warmup
from clawrig.errors import UserError
from clawrig.sandbox.base import Bind


@dataclass
class SetupNetwork:
    """The network of the sandbox that makes a warm snapshot (the setup phase's egress
    policy): ``network`` False keeps its loopback only; True shares the host's network.
    ``env`` (e.g. ``HTTPS_PROXY``, ``PIP_INDEX_URL``) and ``binds`` (e.g. a proxy's socket) are
    added to that sandbox only. The job sets it in ``TrialServices.setup_network``."""

    network: bool = False
    env: dict[str, str] = field(default_factory=dict)
    binds: list[Bind] = field(default_factory=list)
    attach: Callable[[Any], Awaitable[Any]] | None = None
    """Called with the warming sandbox once it runs (e.g. start the egress forwarder)."""


@dataclass(frozen=True)
class SystemChoice:
    """The system of a trial before its warmup: ``rootfs`` (bwrap) or ``image`` (Docker),
    ``environment`` its name (cache key), ``note`` a one-line remark for the user or ""."""

    rootfs: Path | None = None
    image: str | None = None
    environment: str = "host"
    note: str = ""

    @property
    def has_environment(self) -> bool:
        return self.rootfs is not None or self.image is not None


@dataclass
class TrialSystem:
    """What a trial's sandbox is built on: SandboxConfig's ``rootfs``, ``image``, ``layers``,
    ``writable_root``; ``warm`` the snapshot used (None without one); ``warmup`` the lines the
    trial still runs."""

    choice: SystemChoice
    layers: list[Path] = field(default_factory=list)
    image: str | None = None
    writable_root: bool = False
    warm: WarmSnapshot | None = None
    warmup: list[str] = field(default_factory=list)

    def sandbox_fields(self) -> dict[str, object]:
        """Keyword arguments for :class:`clawrig.sandbox.base.SandboxConfig`."""
        return {
            "rootfs": self.choice.rootfs,
            "image": self.image,
            "layers": list(self.layers),
            "writable_root": self.writable_root,
        }


def resolve_environment(
    sandbox: str,
    environment: str = "auto",
    image: str | None = None,
    task_format: str = "",
    progress: Callable[[str], None] | None = None,
) -> SystemChoice:
    """The system for ``sandbox`` (bwrap | docker | local); see the module docstring."""
    say = progress or (lambda _line: None)
    if sandbox == "local":
        return SystemChoice(note="the local sandbox runs on the host's own system")
    if image:
        if sandbox != "docker":
            raise UserError("--image: only the docker sandbox runs images")
        if not image_exists(image):
            raise UserError(f"--image: no local Docker image {image} (docker images lists them)")
        return SystemChoice(image=image, environment=image)
    if environment == "host":
        return SystemChoice()
    if environment == "auto":
        name = env_for_format(task_format) if task_format else None
        spec = load_env_spec(name or "base")
        if sandbox == "docker":
            tag = image_name(spec)
            if image_exists(tag):
                return SystemChoice(image=tag, environment=spec.key)
            base = load_env_spec("base")
            if not image_exists(image_name(base)):
                raise UserError(
                    "--sandbox docker: no image to run (build one: clawrig env build "
                    f"{spec.name} --docker, or name a local one with --image)"
                )
            note = (
                f"environment {spec.name} is not built for Docker "
                f"(clawrig env build {spec.name} --docker): tasks run on the base image"
            )
            return SystemChoice(image=image_name(base), environment=base.key, note=note)
        if name is None:
            return SystemChoice()
        built = rootfs_path(spec)
        if built is not None:
            return SystemChoice(rootfs=built, environment=spec.rootfs_key)
        return SystemChoice(
            note=f"environment {name} is not built (clawrig env build {name}): tasks run on "
            "the host's read-only system"
        )
    spec = load_env_spec(environment)
    if sandbox == "docker":
        return SystemChoice(image=ensure_image(spec, progress=say), environment=spec.key)
    return SystemChoice(rootfs=ensure_rootfs(spec, progress=say), environment=spec.rootfs_key)


async def prepare_system(
    choice: SystemChoice,
    warmup: list[str],
    *,
    sandbox: str,
    snapshots: bool = True,
    setup_network: SetupNetwork | None = None,
    progress: Callable[[str], None] | None = None,
) -> TrialSystem:
    """The trial's system: ``choice`` plus, when it is an environment and ``snapshots`` is on,
    the warm snapshot of ``warmup``'s install lines (made now when missing, in a sandbox with
    ``setup_network``). Raises SetupError, SandboxError."""
    net = setup_network or SetupNetwork()
    system = TrialSystem(choice=choice, image=choice.image, warmup=list(warmup))
    if not choice.has_environment or sandbox == "local":
        return system
    system.writable_root = True
    install, rest = split_warmup(warmup)
    if not snapshots or not install:
        return system
    snap = await ensure_warm(
        install,
        backend=sandbox,
        rootfs=choice.rootfs,
        environment=choice.environment,
        image=choice.image,
        network=net.network,
        binds=net.binds,
        env=net.env,
        attach=net.attach,
        progress=progress,
    )
    system.warm = snap
    system.warmup = rest
    if snap.layer is not None:
        system.layers = [snap.layer]
    if snap.image is not None:
        system.image = snap.image
    return system
