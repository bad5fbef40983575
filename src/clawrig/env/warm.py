"""Warm snapshots: a task's install lines run once per (environment, lines) and are frozen.

:func:`split_warmup` separates a warmup's *install* lines (``pip install``, ``npm install -g``,
``apt-get install``/``update``, with no path argument, nothing in the background; output sent
to ``/dev/null`` allowed) from the rest
(services, files in the workspace), keeping each group's order. :func:`ensure_warm` runs the
install lines once in a fresh sandbox on the environment and freezes the result:

- bwrap: the overlay's upper folder, kept under ``<cache>/warm/<key>/upper`` and stacked as a
  read-only layer (``SandboxConfig.layers``) under every later trial's own writable overlay;
- Docker: ``docker commit`` of the container as ``clawrig-warm:<key>``, every later trial's image.

``key`` is the sha256 (first 16 hex) of the backend, the environment (rootfs key or image id) and
the install lines: a changed warmup or a rebuilt environment makes a new snapshot; ``clawrig env
prune`` removes old ones. The remaining lines still run in every trial (a service started with
``&`` cannot be frozen). Concurrent trials of one task wait for the one snapshot (a file lock).

Network while warming: ``network``/``binds``/``env`` of :func:`ensure_warm` go to the warming
sandbox's :class:`clawrig.sandbox.base.SandboxConfig` and ``attach`` runs once it is up (a trial
passes its egress proxy's: the setup phase's policy, connections logged in the trial's
egress.jsonl; without any, loopback only).

Errors: :class:`clawrig.errors.SetupError` when an install line fails (nothing is kept),
:class:`clawrig.errors.SandboxError` when the sandbox cannot start.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import re
import shlex
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawrig.env.store import SIZE_KEY, WARM_IMAGE_REPO, touch_meta, tree_size, warm_dir
from clawrig.leftovers import owned_tempdir
from clawrig.sandbox.base import Bind, Limits, SandboxConfig

_INSTALL = re.compile(
    r"^(sudo\s+)?("
    r"(python3?\s+-m\s+)?pip3?\s+install\b"
    r"|npm\s+(install|i|add)\s+(.*\s)?(-g|--global)\b"
    r"|(apt-get|apt)\s+(-\S+\s+)*(install|update)\b"
    r")"
)


_QUIET = re.compile(r"(\s+(\d?>|&>)\s*/dev/null|\s+\d>&\d)+\s*$")
"""Output thrown away at the end of a line (``2>/dev/null``, ``>/dev/null 2>&1``): an install
line still (upstream's service tasks run ``pip install -q fastapi uvicorn 2>/dev/null``)."""


def is_install_line(line: str) -> bool:
    """True for a package install that depends on nothing in the trial (see module doc)."""
    text = _QUIET.sub("", line.strip())
    if not _INSTALL.match(text) or text.endswith("&") or "/tmp_workspace" in text:
        return False
    if any(op in text for op in (";", "&&", "||", "|", ">", "<", "`", "$(")):
        return False
    try:
        words = shlex.split(text)
    except ValueError:
        return False
    for w in words:
        if w in ("-r", "-e", "-c", "--requirement", "--editable", "--constraint"):
            return False
        if w.startswith(("./", "../", "/", "~")) or w.endswith((".whl", ".deb", ".tgz", ".txt")):
            return False
    return True


def split_warmup(lines: list[str]) -> tuple[list[str], list[str]]:
    """(install lines frozen in the snapshot, lines run in every trial), each in order."""
    install = [ln for ln in lines if is_install_line(ln)]
    rest = [ln for ln in lines if not is_install_line(ln)]
    return install, rest


def warm_key(backend: str, environment: str, lines: list[str]) -> str:
    body = json.dumps({"backend": backend, "environment": environment, "lines": lines})
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclass
class WarmSnapshot:
    """A frozen warmup: ``layer`` (bwrap: a folder for ``SandboxConfig.layers``) or ``image``
    (Docker), the seconds its warmup took when made, and whether this call made it."""

    key: str
    layer: Path | None
    image: str | None
    warmup_s: float
    made_now: bool


async def ensure_warm(
    lines: list[str],
    *,
    backend: str,
    rootfs: Path | None = None,
    environment: str = "",
    image: str | None = None,
    network: bool = False,
    binds: list[Bind] | None = None,
    env: dict[str, str] | None = None,
    attach: Callable[[Any], Awaitable[Any]] | None = None,
    timeout_s: float = 1800.0,
    cache_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> WarmSnapshot:
    """The snapshot of ``lines`` on an environment: ``rootfs`` (bwrap, named ``environment``,
    e.g. its cache key) or ``image`` (docker). Made on first use (see the module docstring)."""
    if backend == "docker":
        if not image:
            raise ValueError("ensure_warm(backend='docker') needs image")
        environment = f"{environment}@{await _image_id(image)}"  # a retagged image warms anew
    elif rootfs is None:
        raise ValueError("ensure_warm(backend='bwrap') needs rootfs")
    key = warm_key(backend, environment, lines)
    folder = warm_dir(cache_dir) / key
    lock_path = warm_dir(cache_dir) / f".{key}.lock"
    with open(lock_path, "w") as lock:
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        try:
            snap = _existing(folder, key, backend)
            if snap is not None:
                return snap
            say = progress or (lambda _line: None)
            say(f"warming {environment or image}: {len(lines)} install line(s), once")
            return await _make(
                folder,
                key,
                lines,
                backend=backend,
                rootfs=rootfs,
                environment=environment,
                image=image,
                network=network,
                binds=binds or [],
                env=env or {},
                attach=attach,
                timeout_s=timeout_s,
            )
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _existing(folder: Path, key: str, backend: str) -> WarmSnapshot | None:
    meta = folder / "warm.json"
    if not meta.is_file():
        return None
    info = json.loads(meta.read_text())
    if backend == "docker":
        from clawrig.env.build import image_exists

        tag = f"{WARM_IMAGE_REPO}:{key}"
        if not image_exists(tag):
            return None
        touch_meta(meta)
        return WarmSnapshot(key, None, tag, info.get("seconds", 0.0), False)
    touch_meta(meta)
    return WarmSnapshot(key, folder / "upper", None, info.get("seconds", 0.0), False)


async def _image_id(image: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        "docker",
        "image",
        "inspect",
        "--format",
        "{{.Id}}",
        image,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await proc.communicate()
    return out.decode().strip() or image


async def _make(
    folder: Path,
    key: str,
    lines: list[str],
    *,
    backend: str,
    rootfs: Path | None,
    environment: str,
    image: str | None,
    network: bool,
    binds: list[Bind],
    env: dict[str, str],
    attach: Callable[[Any], Awaitable[Any]] | None,
    timeout_s: float,
) -> WarmSnapshot:
    from clawrig.env.build import remove_partial
    from clawrig.sandbox import create_sandbox
    from clawrig.sandbox.workspace import run_warmup

    partial = folder.with_name(f".partial-{key}")
    remove_partial(partial)
    partial.mkdir(mode=0o700)
    ws = owned_tempdir("warm-ws")
    cfg = SandboxConfig(
        workspace_dir=ws,
        rootfs=rootfs if backend == "bwrap" else None,
        image=image if backend == "docker" else None,
        writable_root=True,
        upper_dir=partial / "upper" if backend == "bwrap" else None,
        network=network,
        binds=binds,
        env={"PIP_NO_CACHE_DIR": "1", **env},  # no wheel cache frozen into the snapshot
        limits=Limits(command_timeout_s=timeout_s, trial_timeout_s=timeout_s * max(len(lines), 1)),
    )
    sandbox = create_sandbox(backend, cfg)
    tag = f"{WARM_IMAGE_REPO}:{key}" if backend == "docker" else None
    started = time.monotonic()
    try:
        await sandbox.start()
        if attach is not None:
            await attach(sandbox)
        await run_warmup(sandbox, lines, timeout_s=timeout_s)
        if tag is not None:
            await sandbox.commit(tag)  # type: ignore[attr-defined]
        seconds = time.monotonic() - started
    except BaseException:
        await sandbox.stop()
        remove_partial(partial)  # (never through a mount a stop cut short left)
        shutil.rmtree(ws, ignore_errors=True)
        raise
    await sandbox.stop()
    shutil.rmtree(ws, ignore_errors=True)
    shutil.rmtree(partial / "upper.work", ignore_errors=True)
    (partial / "warm.json").write_text(
        json.dumps(
            {
                "key": key,
                "backend": backend,
                "environment": environment,
                "image": image,
                "lines": lines,
                "seconds": round(seconds, 3),
                "made_at": time.time(),
                SIZE_KEY: tree_size(partial / "upper"),
            },
            indent=2,
        )
    )
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    layer = folder / "upper" if backend == "bwrap" else None
    return WarmSnapshot(key, layer, tag, seconds, True)
