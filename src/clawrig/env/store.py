"""Where built environments and warm snapshots live, and how they are listed and pruned.

Layout under ``<cache>`` (``$CLAWRIG_ENV_CACHE_DIR``, else clawrig's cache: ``$CLAWRIG_CACHE_DIR``,
``$XDG_CACHE_HOME/clawrig`` or ``~/.cache/clawrig``, see :func:`clawrig.sandbox.pyenv.cache_root`),
every folder 0700 because a root file system written by a sandbox's root may hold setuid files:

- ``environments/<name>-<digest12>/rootfs/`` a root file system for bwrap, ``env.json`` beside
  it (spec, build seconds, ``size_bytes``); present only once complete;
- ``warm/<key>/upper/`` a frozen warmup (the overlay's upper folder, used as a lower layer by
  every trial of that task), ``warm.json`` beside it (environment, warmup lines, seconds,
  ``size_bytes``; its mtime is the last use).

Both trees are never written after they are made, so their size is measured once, when they
are made (:func:`recorded_size`), and ``clawrig env list`` reads it instead of walking every
file (a 10 GiB cache took ~13 s to walk).

Docker images are tagged ``clawrig-env:<name>-<digest12>`` and ``clawrig-warm:<key>``.
Sizes are bytes (apparent sizes of regular files, each hard-linked inode once).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from clawrig.errors import UserError
from clawrig.sandbox.pyenv import cache_folder_problem, cache_root
from clawrig.sizes import format_bytes

ENV_IMAGE_REPO = "clawrig-env"
WARM_IMAGE_REPO = "clawrig-warm"


def _private_dir(path: Path) -> Path:
    """``path`` made (with its parents) and private to this user (0700). Raises UserError
    naming it when it cannot be (a file in its way, a read-only file system)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)
    except OSError as exc:
        variable = "CLAWRIG_CACHE_DIR, or CLAWRIG_ENV_CACHE_DIR for environments,"
        raise UserError(cache_folder_problem(path, exc, variable)) from None
    return path


def env_cache_root(cache_dir: Path | None = None) -> Path:
    """``cache_dir``, else ``$CLAWRIG_ENV_CACHE_DIR``, else clawrig's cache folder."""
    if cache_dir:
        return Path(cache_dir)
    if os.environ.get("CLAWRIG_ENV_CACHE_DIR"):
        return Path(os.environ["CLAWRIG_ENV_CACHE_DIR"]).expanduser()
    return cache_root()


def environments_dir(cache_dir: Path | None = None) -> Path:
    return _private_dir(env_cache_root(cache_dir) / "environments")


def warm_dir(cache_dir: Path | None = None) -> Path:
    return _private_dir(env_cache_root(cache_dir) / "warm")


def tree_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links not followed, hard links once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


SIZE_KEY = "size_bytes"
"""The key of a cached tree's size (bytes, :func:`tree_size`) in its metadata file."""


def recorded_size(meta: Path, tree: Path) -> int:
    """The size in bytes of ``tree`` (a rootfs or warm layer: never written once made) as
    its metadata file ``meta`` records it; measured (:func:`tree_size`) and recorded there
    when missing (items made before sizes were recorded), keeping ``meta``'s mtime: it is the
    item's last use."""
    info = _read_json(meta)
    size = info.get(SIZE_KEY)
    if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
        return size
    size = tree_size(tree)
    try:
        st = meta.stat()
        tmp = meta.with_name(f".{meta.name}.{os.getpid()}")
        tmp.write_text(json.dumps({**info, SIZE_KEY: size}, indent=2))
        os.chmod(tmp, st.st_mode & 0o777)
        os.replace(tmp, meta)
        os.utime(meta, ns=(st.st_atime_ns, st.st_mtime_ns))
    except OSError:  # a cache not ours to write: measured again next time
        pass
    return size


def docker_available() -> bool:
    """True when the docker client is installed and an engine answers."""
    docker = shutil.which("docker")
    if docker is None:
        return False
    r = subprocess.run([docker, "version"], capture_output=True, timeout=30)
    return r.returncode == 0


def docker_images(repo: str) -> list[dict[str, str]]:
    """``[{"tag", "id", "size"}]`` of the local images of ``repo`` (empty without Docker)."""
    if not docker_available():
        return []
    r = subprocess.run(
        ["docker", "images", repo, "--format", "{{.Tag}}\t{{.ID}}\t{{.Size}}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = []
    for line in r.stdout.splitlines():
        tag, image_id, size = (line.split("\t") + ["", ""])[:3]
        rows.append({"tag": tag, "id": image_id, "size": size})
    return rows


@dataclass
class CachedItem:
    """One row of ``clawrig env list``: kind ("rootfs", "warm", "image"), its key, size in
    bytes (None for images: Docker reports its own text in ``size_text``), last use (Unix s)."""

    kind: str
    key: str
    path: str
    size: int | None
    size_text: str
    last_used: float
    detail: str = ""


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def touch_meta(path: Path) -> None:
    """Record a use of a cached item (its metadata file's mtime)."""
    try:
        os.utime(path)
    except OSError:
        pass


def list_cached(cache_dir: Path | None = None, *, sizes: bool = True) -> list[CachedItem]:
    """Every built environment, warm snapshot and clawrig image, newest use first; sizes as
    recorded when each was made (:func:`recorded_size`), None with ``sizes`` False."""
    items: list[CachedItem] = []
    for d in sorted(environments_dir(cache_dir).iterdir()):
        meta = d / "env.json"
        if not meta.is_file():
            continue
        size = recorded_size(meta, d / "rootfs") if sizes else None
        info = _read_json(meta)
        items.append(
            CachedItem(
                "rootfs",
                d.name,
                str(d / "rootfs"),
                size,
                _human(size),
                meta.stat().st_mtime,
                f"built in {info.get('seconds', 0):.0f} s",
            )
        )
    for d in sorted(warm_dir(cache_dir).iterdir()):
        meta = d / "warm.json"
        if not meta.is_file():
            continue
        info = _read_json(meta)
        size = recorded_size(meta, d / "upper") if sizes else None
        items.append(
            CachedItem(
                "warm",
                d.name,
                str(d / "upper"),
                size,
                _human(size),
                meta.stat().st_mtime,
                f"{info.get('environment', '?')}, {len(info.get('lines', []))} line(s), "
                f"warmup {info.get('seconds', 0):.1f} s",
            )
        )
    for repo in (ENV_IMAGE_REPO, WARM_IMAGE_REPO):
        for row in docker_images(repo):
            items.append(
                CachedItem("image", f"{repo}:{row['tag']}", row["id"], None, row["size"], 0.0)
            )
    items.sort(key=lambda i: -i.last_used)
    return items


def _human(size: int | None) -> str:
    """:func:`clawrig.sizes.format_bytes`, or ``?`` for an unknown size."""
    return "?" if size is None else format_bytes(size)


@dataclass
class Pruned:
    """One item ``prune`` removed (or, dry, would remove): ``what`` (``kind key``) and its
    size in bytes (None for a Docker image: its engine keeps its own sizes)."""

    what: str
    size: int | None = None

    def __str__(self) -> str:
        return self.what if self.size is None else f"{self.what} ({_human(self.size)})"


def prune(
    cache_dir: Path | None = None,
    *,
    keep_keys: set[str] | None = None,
    older_than_s: float = 7 * 86400,
    everything: bool = False,
    dry_run: bool = False,
) -> list[Pruned]:
    """Remove old builds and snapshots; returns what was removed (or, with ``dry_run``, what
    would be: nothing is touched).

    Removed: with ``everything`` all of them and every clawrig image; otherwise every rootfs
    build whose key is not in ``keep_keys`` (the current builds of known specs) and unused for
    ``older_than_s`` seconds, every warm snapshot unused for ``older_than_s`` seconds or whose
    environment is gone, and the Docker images of what was removed (only those: images of
    other caches on the same engine stay)."""
    now = time.time()
    keep = keep_keys or set()
    removed: list[Pruned] = []

    def drop(path: Path, what: str) -> None:
        # the whole folder's bytes (its tree and metadata): what removing it frees; a prune
        # walks what it removes anyway
        removed.append(Pruned(what, tree_size(path)))
        if not dry_run:
            _remove_tree(path)

    def drop_image(name: str) -> None:
        if _remove_image(name, dry_run=dry_run):
            removed.append(Pruned(f"image {name}"))

    envs = environments_dir(cache_dir)
    for folder in (envs, warm_dir(cache_dir)):
        for d in _in_progress(folder, now, everything):
            if d.is_dir():
                drop(d, f"unfinished {d.name}")
            elif not dry_run:
                d.unlink(missing_ok=True)
    gone: set[str] = set()
    for d in sorted(envs.iterdir()):
        if d.name.startswith("."):
            continue
        meta = d / "env.json"
        complete = meta.is_file()
        idle = now - (meta.stat().st_mtime if complete else d.stat().st_mtime)
        if everything or not complete or (d.name not in keep and idle > older_than_s):
            drop(d, f"rootfs {d.name}")
            gone.add(d.name)
            for tag in (d.name, f"{d.name}-base"):
                drop_image(f"{ENV_IMAGE_REPO}:{tag}")
    present = {d.name for d in envs.iterdir()} - gone
    for d in sorted(warm_dir(cache_dir).iterdir()):
        if d.name.startswith("."):
            continue
        meta = d / "warm.json"
        info = _read_json(meta)
        idle = now - (meta.stat().st_mtime if meta.is_file() else d.stat().st_mtime)
        orphan = info.get("backend") == "bwrap" and info.get("environment") not in present
        if everything or not meta.is_file() or orphan or idle > older_than_s:
            drop(d, f"warm {d.name}")
            if info.get("backend") == "docker":
                drop_image(f"{WARM_IMAGE_REPO}:{d.name}")
    if everything:
        for repo in (ENV_IMAGE_REPO, WARM_IMAGE_REPO):
            for row in docker_images(repo):
                drop_image(f"{repo}:{row['tag']}")
    return removed


IN_PROGRESS_GRACE_S = 86400.0
"""A build or snapshot in progress (``.partial-*``) or its lock older than this is stale."""


def _in_progress(folder: Path, now: float, everything: bool) -> list[Path]:
    """The stale ``.partial-*`` folders and ``.<key>.lock`` files in ``folder`` (a day old,
    or all)."""
    stale = []
    for d in sorted(folder.iterdir()):
        if not d.name.startswith("."):
            continue
        try:
            idle = now - d.stat().st_mtime
        except OSError:
            continue
        if everything or idle > IN_PROGRESS_GRACE_S:
            stale.append(d)
    return stale


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _remove_image(name: str, *, dry_run: bool = False) -> bool:
    """``docker rmi`` ``name``; True when an image was removed (``dry_run``: when it exists,
    and it stays)."""
    if not shutil.which("docker"):
        return False
    there = subprocess.run(["docker", "image", "inspect", name], capture_output=True, timeout=60)
    if there.returncode != 0:  # (``rmi -f`` succeeds on a missing image)
        return False
    if dry_run:
        return True
    r = subprocess.run(["docker", "rmi", "-f", name], capture_output=True, timeout=120)
    return r.returncode == 0
