"""Which system a trial's sandbox runs on, and its warm snapshot.

:func:`resolve_environment` turns the job's choice (``--env auto|host|NAME|FILE``,
``--image NAME``) and a task's format into a :class:`SystemChoice`:

- ``auto`` (default): the environment the format expects (:func:`clawrig.env.spec.env_for_format`)
  when it is built, else the host's read-only system (bwrap) or the ``base`` image (Docker), with
  a note saying how to build it; building takes minutes, so ``auto`` never builds;
- ``host``: the host's /usr read-only (bwrap), no writable system;
- a name or a YAML file: that environment, built first when missing (progress shown);
- ``--image NAME`` (Docker): that local image.

With ``build=False`` (the pre-run checks) nothing is built: a named environment not built yet
comes back as a choice with its ``spec`` only (no ``rootfs``/``image``).

:func:`grader_on_system` says where a task's grader runs: on the trial's own system
(``python3`` of the environment and its warm snapshot, in the clean room) or in the grader
environment of its own (:class:`clawrig.sandbox.pyenv.GradingEnvStage`).

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
from clawrig.env.spec import EnvSpec, env_for_format, graders_use_environment, load_env_spec
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
    spec: EnvSpec | None = field(default=None, compare=False)
    """The spec the environment is (or, with ``build=False``, will be) built from; None for
    the host's system and ``--image``."""

    @property
    def has_environment(self) -> bool:
        return self.rootfs is not None or self.image is not None

    @property
    def will_have_environment(self) -> bool:
        """An environment now, or one the job builds before its trials (``build=False``)."""
        return self.has_environment or self.spec is not None


def grader_on_system(choice: SystemChoice, sandbox: str, task_format: str) -> bool:
    """True when a task's grader runs on the trial's own system: the clean room's ``python3``
    (the environment's, with the task's warm snapshot: what the image and the warmup's install
    lines installed, nothing the agent installed). So on Docker always (an image has its own
    interpreter, for which no grader environment is made) and on bwrap for the formats whose
    graders run with the agent's environment upstream
    (:func:`clawrig.env.spec.graders_use_environment`: WildClawBench) when the trial runs on an
    environment. False: the grader environment the task declares (bwrap) or the host's
    ``python3`` (the host's read-only system, the local sandbox)."""
    if sandbox == "docker":
        return True
    if sandbox != "bwrap":
        return False
    return choice.will_have_environment and graders_use_environment(task_format)


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
    *,
    build: bool = True,
) -> SystemChoice:
    """The system for ``sandbox`` (bwrap | docker | local); see the module docstring. Raises
    UserError (an unknown environment or image, no image to run)."""
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
                return SystemChoice(image=tag, environment=spec.key, spec=spec)
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
            return SystemChoice(image=image_name(base), environment=base.key, note=note, spec=base)
        if name is None:
            return SystemChoice()
        built = rootfs_path(spec)
        if built is not None:
            return SystemChoice(rootfs=built, environment=spec.rootfs_key, spec=spec)
        return SystemChoice(
            note=f"environment {name} is not built (clawrig env build {name}): tasks run on "
            "the host's read-only system"
        )
    try:
        spec = load_env_spec(environment)
    except UserError as exc:
        raise UserError(f"--env: {exc}") from None
    if not build:
        tag, built = image_name(spec), rootfs_path(spec)
        if sandbox == "docker":
            return SystemChoice(
                image=tag if image_exists(tag) else None, environment=spec.key, spec=spec
            )
        return SystemChoice(rootfs=built, environment=spec.rootfs_key, spec=spec)
    if sandbox == "docker":
        return SystemChoice(image=ensure_image(spec, progress=say), environment=spec.key, spec=spec)
    return SystemChoice(
        rootfs=ensure_rootfs(spec, progress=say), environment=spec.rootfs_key, spec=spec
    )


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
