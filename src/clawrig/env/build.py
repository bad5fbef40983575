"""Build an environment: a root file system with mmdebstrap (bwrap), an image from it (Docker).

:func:`ensure_rootfs` runs ``mmdebstrap`` (Debian's package, installed by ``make test`` when
root) from Debian's package mirror, then ``pip install`` and ``npm install -g`` inside the new
tree (chroot, with the host's CA bundle so a TLS-inspecting egress proxy is trusted) and the spec's
``run`` commands (chroot, ``sh -ec``), removes
Python's EXTERNALLY-MANAGED marker (upstream's warmups run ``pip install`` as root), lets apt
download as root (a sandbox has no capability to switch to ``_apt``), adds the host's own CA
certificates (``/usr/local/share/ca-certificates``: a TLS-inspecting proxy's) and moves
the finished tree into the cache. :func:`ensure_image` imports that tree into Docker
(``docker import``, no registry needed) and applies the spec's Dockerfile, if any, with
``docker build --build-arg BASE=<imported image>``. Both return at once when the build for the
spec's digest exists. Progress lines go to ``progress``.

Errors: :class:`clawrig.errors.UserError` when a tool is missing or we are not root (mmdebstrap
needs root here), :class:`EnvBuildError` (a UserError) when a build step fails, with the tail of
its output.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from clawrig.env.spec import EnvSpec
from clawrig.env.store import ENV_IMAGE_REPO, SIZE_KEY, environments_dir, touch_meta, tree_size
from clawrig.errors import UserError

log = logging.getLogger(__name__)

MIRROR = "http://deb.debian.org/debian"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_EXTRA_CAS = "/usr/local/share/ca-certificates"
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")

Progress = Callable[[str], None]


class EnvBuildError(UserError):
    """A build step failed (mmdebstrap, pip, npm, docker import/build)."""


def _quiet(_line: str) -> None:
    pass


def rootfs_path(spec: EnvSpec, cache_dir: Path | None = None) -> Path | None:
    """The finished root file system of ``spec``, or None when it is not built."""
    d = environments_dir(cache_dir) / spec.rootfs_key
    return d / "rootfs" if (d / "env.json").is_file() else None


def _hooks(spec: EnvSpec) -> list[str]:
    """mmdebstrap --customize-hook commands (run on the host; ``$1`` is the new tree)."""
    clean_env = f"env -i PATH={CHROOT_PATH} HOME=/root LANG=C.UTF-8"
    hooks = [
        'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
        # a sandbox's root has no CAP_SETUID: apt downloads as root instead of _apt
        """echo 'APT::Sandbox::User "root";' > "$1"/etc/apt/apt.conf.d/99clawrig-sandbox""",
        # trust what the host trusts (a TLS-inspecting egress proxy's CA, a company CA)
        f"if ls {HOST_EXTRA_CAS}/*.crt >/dev/null 2>&1; then "
        f'mkdir -p "$1"{HOST_EXTRA_CAS} && cp {HOST_EXTRA_CAS}/*.crt "$1"{HOST_EXTRA_CAS}/ && '
        '{ chroot "$1" update-ca-certificates >/dev/null 2>&1 || true; }; fi',
    ]
    if spec.pip or spec.npm:
        hooks.append(f'cp {HOST_CA_BUNDLE} "$1"/tmp/clawrig-ca.crt')
    if spec.pip:
        pkgs = " ".join(shlex.quote(p) for p in spec.pip)
        hooks.append(
            f'chroot "$1" {clean_env} PIP_CERT=/tmp/clawrig-ca.crt '
            f"python3 -m pip install --no-cache-dir --root-user-action=ignore {pkgs}"
        )
    if spec.npm:
        pkgs = " ".join(shlex.quote(p) for p in spec.npm)
        hooks.append(
            f'chroot "$1" {clean_env} NODE_EXTRA_CA_CERTS=/tmp/clawrig-ca.crt '
            f"npm install -g --no-fund --no-audit {pkgs}"
        )
    if spec.pip or spec.npm:
        hooks.append('rm -rf "$1"/tmp/clawrig-ca.crt "$1"/root/.npm "$1"/root/.cache')
    for command in spec.run:
        hooks.append(f'chroot "$1" {clean_env} /bin/sh -ec {shlex.quote(command)}')
    return hooks


def mmdebstrap_argv(spec: EnvSpec, target: Path) -> list[str]:
    """The mmdebstrap command line that builds ``spec`` into ``target``."""
    argv = ["mmdebstrap", "--mode=root", f"--variant={spec.variant}"]
    if spec.debian:
        argv.append("--include=" + ",".join(spec.debian))
    for pattern in EXCLUDES:
        argv.append(f"--dpkgopt=path-exclude={pattern}")
    for hook in _hooks(spec):
        argv.append(f"--customize-hook={hook}")
    argv += [spec.suite, str(target), MIRROR]
    return argv


STOP_GRACE_S = 60.0
"""Seconds a build step gets to clean up (mmdebstrap unmounts what it mounted in the root
file system) once the build is stopped (Ctrl-C, SIGTERM), before it is killed."""


def _run_streamed(argv: list[str], progress: Progress, what: str, **kw: object) -> None:
    """Run ``argv``, passing each output line to ``progress``; raise EnvBuildError on failure.
    Stopped meanwhile (an exception here: Ctrl-C, SIGTERM), the program is sent SIGTERM and
    waited for (its output still read) up to :data:`STOP_GRACE_S`, then killed, before the
    exception goes on: closing its output under it killed mmdebstrap by SIGPIPE with the
    host's /proc, /sys, /dev/pts and /dev/shm still bound into the root file system, which
    the caller's clean-up then deleted through (helper-161: the host's /dev/shm emptied)."""
    tail: list[str] = []
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        **kw,  # type: ignore[call-overload]
    ) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                line = line.rstrip()
                if line:
                    tail = (tail + [line])[-15:]
                    progress(line)
        except BaseException:
            with contextlib.suppress(OSError):
                proc.terminate()
            try:
                proc.communicate(timeout=STOP_GRACE_S)
            except BaseException:  # (past the grace, or stopped again)
                proc.kill()
                proc.wait()
            raise
    if proc.returncode != 0:
        raise EnvBuildError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail[-15:]))


def ensure_rootfs(
    spec: EnvSpec,
    *,
    progress: Progress = _quiet,
    cache_dir: Path | None = None,
    force: bool = False,
) -> Path:
    """The root file system of ``spec``, built first when missing (minutes; see the module
    docstring). Returns ``<cache>/environments/<key>/rootfs``. One build of an environment
    at a time per cache: a process that finds another building it waits for that build and
    takes its result (three test workers ran three mmdebstraps of one environment at once,
    ~55 s each on 2 cores)."""
    if not force and (done := _built_rootfs(spec, cache_dir)) is not None:
        return done
    with _build_lock(f"build-{spec.rootfs_key}", spec, cache_dir, progress):
        if not force and (done := _built_rootfs(spec, cache_dir)) is not None:
            return done  # built by the process we waited for
        return _build_rootfs(spec, progress, cache_dir, force)


def _built_rootfs(spec: EnvSpec, cache_dir: Path | None) -> Path | None:
    """:func:`rootfs_path`, its use recorded (``env.json``'s time: ``env prune`` keeps what is
    used) when it is built."""
    done = rootfs_path(spec, cache_dir)
    if done is not None:
        touch_meta(done.parent / "env.json")
    return done


@contextlib.contextmanager
def _build_lock(
    name: str, spec: EnvSpec, cache_dir: Path | None, progress: Progress
) -> Iterator[None]:
    """Hold lock ``name`` of ``spec``'s builds in the cache (``flock`` of
    ``environments/.<name>.lock``, released with the process: ``build-<key>`` for its root file
    system, ``image-<key>`` for its Docker image), waiting for another process's build
    first, with a progress line saying so."""
    import fcntl

    folder = environments_dir(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f".{name}.lock", "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"another process is building environment {spec.name}: waiting for it")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _build_rootfs(spec: EnvSpec, progress: Progress, cache_dir: Path | None, force: bool) -> Path:
    """Build ``spec``'s root file system into the cache (:func:`ensure_rootfs`, its lock held)."""
    if shutil.which("mmdebstrap") is None:
        raise UserError(
            "building an environment needs mmdebstrap: apt-get install mmdebstrap "
            "(make test installs it when root)"
        )
    if os.geteuid() != 0:
        raise UserError("building an environment needs root (mmdebstrap --mode=root)")
    final = environments_dir(cache_dir) / spec.rootfs_key
    partial = final.with_name(f".partial-{spec.rootfs_key}-{os.getpid()}")
    remove_partial(partial)
    partial.mkdir(mode=0o700)
    started = time.monotonic()
    progress(
        f"building environment {spec.name} ({spec.key}): {len(spec.debian)} Debian, "
        f"{len(spec.pip)} pip, {len(spec.npm)} npm package(s)"
    )
    try:
        _run_streamed(mmdebstrap_argv(spec, partial / "rootfs"), progress, "mmdebstrap")
        seconds = time.monotonic() - started
        (partial / "env.json").write_text(
            json.dumps(
                {
                    "name": spec.name,
                    "key": spec.rootfs_key,
                    "digest": spec.digest,
                    "seconds": round(seconds, 1),
                    "built_at": time.time(),
                    SIZE_KEY: tree_size(partial / "rootfs"),
                    "spec": spec.model_dump(mode="json"),
                },
                indent=2,
            )
        )
        if force and final.exists():
            shutil.rmtree(final)
        try:
            partial.rename(final)
        except OSError:  # another process finished the same build first: keep theirs
            remove_partial(partial)
    except BaseException:
        remove_partial(partial)
        raise
    progress(f"environment {spec.name} ready in {time.monotonic() - started:.0f} s: {final}")
    return final / "rootfs"


def remove_partial(partial: Path) -> None:
    """Remove an unfinished build's folder, never through a mount: what is mounted below it
    (mmdebstrap's binds of the host's /proc, /sys, /dev/pts, /dev/shm, left by a build that
    was killed) is detached first; a folder that still holds a mount is left, with a
    warning (:func:`clawrig.leftovers.remove_tree` stays on one file system too)."""
    from clawrig.leftovers import mounts_below, remove_tree, unmount_below

    if not partial.exists():
        return
    unmount_below(partial)
    if left := mounts_below(partial):
        log.warning("%s: left in place: %d mount(s) below it (%s)", partial, len(left), left[0])
        return
    remove_tree(partial)


def image_exists(name: str) -> bool:
    """True when Docker has an image called ``name`` locally."""
    r = subprocess.run(["docker", "image", "inspect", name], capture_output=True, timeout=60)
    return r.returncode == 0


def image_name(spec: EnvSpec) -> str:
    return f"{ENV_IMAGE_REPO}:{spec.key}"


def import_rootfs(rootfs: Path, tag: str, progress: Progress = _quiet) -> None:
    """``docker import`` a root file system folder as image ``tag`` (a tar stream, no registry).
    Raises EnvBuildError."""
    progress(f"importing {rootfs} into Docker as {tag}")
    tar = subprocess.Popen(
        ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        r = subprocess.run(
            ["docker", "import", "--change", f"ENV PATH={CHROOT_PATH}", "-", tag],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            timeout=1800,
        )
    finally:
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
    if r.returncode != 0:
        raise EnvBuildError(f"docker import of {rootfs} failed: {r.stderr.strip()[-500:]}")


def ensure_image(
    spec: EnvSpec,
    *,
    progress: Progress = _quiet,
    cache_dir: Path | None = None,
    force: bool = False,
) -> str:
    """The Docker image of ``spec`` (``clawrig-env:<key>``), built when missing from the
    spec's root file system (built too when missing) and its Dockerfile. Returns its name."""
    if shutil.which("docker") is None:
        raise UserError("the docker sandbox needs the docker client and a Docker engine")
    tag = image_name(spec)
    if not force and image_exists(tag):
        return tag
    with _build_lock(f"image-{spec.key}", spec, cache_dir, progress):
        if not force and image_exists(tag):  # imported by the process we waited for
            return tag
        return _build_image(spec, tag, progress, cache_dir)


def _build_image(spec: EnvSpec, tag: str, progress: Progress, cache_dir: Path | None) -> str:
    """Import and build ``spec``'s Docker image ``tag`` (:func:`ensure_image`, its lock held)."""
    rootfs = ensure_rootfs(spec, progress=progress, cache_dir=cache_dir)
    dockerfile = spec.dockerfile_path
    base = f"{tag}-base" if dockerfile else tag
    import_rootfs(rootfs, base, progress)
    if dockerfile is not None:
        progress(f"docker build {dockerfile} FROM {base}")
        _run_streamed(
            [
                "docker",
                "build",
                "--build-arg",
                f"BASE={base}",
                "-t",
                tag,
                "-f",
                str(dockerfile),
                str(dockerfile.parent),
            ],
            progress,
            f"docker build of {dockerfile}",
        )
    return tag
