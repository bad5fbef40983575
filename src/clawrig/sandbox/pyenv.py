"""Python environments for code that runs inside sandboxes (mock services, task graders).

The sandbox's ``python3`` is the host's ``/usr/bin/python3`` (Debian 12: CPython 3.11) without
third-party packages. :func:`ensure_env` builds a virtual environment from that same interpreter,
so compiled wheels match the ABI the sandbox runs, and pip-installs the requirements into it:

- ``/usr/bin/python3 -m venv --without-pip`` (works without Debian's ``python3-venv``, which only
  adds ``ensurepip``), then the harness's own pip installs into it with ``pip --python
  <env>/bin/python install ...`` (pip >= 22.3). When the harness has no pip, the environment is
  created with its own pip instead (that path needs ``python3-venv`` on Debian).
- Cached under ``<cache>/envs/<key>/`` where ``<key>`` is the sha256 (hex) of the sorted,
  de-duplicated requirement list plus the base interpreter's version, implementation tag and
  machine (:func:`env_key`). ``<cache>`` is ``$CLAWRIG_CACHE_DIR``, else
  ``$XDG_CACHE_HOME/clawrig``, else ``~/.cache/clawrig``.
- Atomic and built once: a build happens in ``envs/.tmp-<key>-<random>/`` under an exclusive
  ``flock`` on ``envs/.<key>.lock`` and is renamed to ``envs/<key>/`` when complete; parallel
  trials (threads or processes) wait for the lock and reuse the result.

Inside a sandbox an environment is bound read-only at ``/opt/clawrig-env/<key>`` and run as
``/opt/clawrig-env/<key>/bin/python3`` (:func:`env_bind`): the venv's ``bin/python3`` is a symlink
to ``/usr/bin/python3``, which the sandbox has, and ``pyvenv.cfg`` beside ``bin/`` puts the
environment's ``site-packages`` (and not Debian's ``dist-packages``) on ``sys.path``, also
under ``python3 -I``.

Graders (issue 9 item 2) get their environment for the grading phase only
(:class:`GradingEnvStage`): an empty staging folder is bound read-only at
``/opt/clawrig-grader-env`` when the sandbox is created, and filled with hard links to the cached
environment (a copy when the cache is on another file system) only after every agent process is
dead. Requirements come from a ``requirements.txt`` beside the tasks
(:func:`read_requirements`, :func:`suite_grader_requirements`); WildClawBench suites without one
use :data:`WILDCLAW_GRADER_REQUIREMENTS`.

These environments serve the bwrap backend (and ``local``, which runs the host's paths); a
Docker image has its own interpreter, for which a venv made from the host's is not valid.

When the harness runs as root without cgroups, bwrap drops the sandbox to an unprivileged uid
that must be able to enter every parent folder of a bound path: point ``CLAWRIG_CACHE_DIR`` at a
folder every user may enter (``/root`` usually may not be) in that case.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from clawrig.errors import SetupError, TaskFormatError
from clawrig.leftovers import pid_alive, pid_in_name
from clawrig.sandbox.base import Bind
from clawrig.sandbox.paths import PATHS

BASE_PYTHON = "/usr/bin/python3"
"""The interpreter sandboxes run (the host's Debian python3, bound with /usr)."""

ENV_MOUNT = "/opt/clawrig-env"
"""Where :func:`env_bind` binds an environment inside the sandbox: ``ENV_MOUNT/<key>``."""

PIP_TIMEOUT_S = 1800.0
"""Upper bound for one environment build (pip install), seconds."""

WILDCLAW_GRADER_REQUIREMENTS: tuple[str, ...] = (
    "numpy==2.4.6",
    "openai==3.57.0",
    "Pillow==13.0.0",
    "PyYAML==6.0.4",
    "requests==2.34.2",
)
"""Default grader environment of WildClawBench suites (issue 9 item 2), used when no
``requirements.txt`` sits beside the tasks. The published task graders import, beyond the
standard library: ``openai`` (LLM/VLM judges; 16 of 60 graders fail at import on a bare Python
with ``openai`` or ``PIL``), ``PIL`` (Pillow, image checks), ``numpy`` and ``yaml`` (PyYAML);
``requests`` is what graders written against the mock services use for
``GET http://localhost:<port>/<svc>/audit``. Pinned so every machine grades with the same code.
The shipped ``wildclaw`` environment installs the same pins: on it, WildClawBench graders run on
its own ``python3`` (:func:`clawrig.env.system.grader_on_system`)."""

_env_memo: dict[str, Path] = {}


def cache_root() -> Path:
    """``$CLAWRIG_CACHE_DIR``, else ``$XDG_CACHE_HOME/clawrig``, else ``~/.cache/clawrig``."""
    if os.environ.get("CLAWRIG_CACHE_DIR"):
        return Path(os.environ["CLAWRIG_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "clawrig"
    return Path.home() / ".cache" / "clawrig"


def requirement_problem(line: str) -> str | None:
    """Why a requirement string may not be installed, or None. Refused: pip options (``-r``,
    ``--index-url`` ...) and anything that is not a package from the index: a direct reference
    (``pkg @ file:///...``, ``pkg @ git+https://...``), a URL, a path. Requirements come from
    task files, which are untrusted input: a local project's build backend would run on the
    host, and installs take wheels only (:func:`ensure_env`). Also refused: a line that is not
    a PEP 508 requirement (``pandas[``, ``numpy; os_name``), which pip would refuse later."""
    if line.startswith("-"):
        return "pip options are not supported"
    if "@" in line or "://" in line or line.startswith((".", "/", "~")) or "/" in line:
        return (
            "direct references, URLs and paths are not supported (a task is untrusted input): "
            "name a package on the index"
        )
    from packaging.requirements import InvalidRequirement, Requirement

    try:  # what pip would refuse at install time, refused when the suite is read (PEP 508)
        Requirement(line)
    except InvalidRequirement as exc:
        return f"not a valid requirement: {str(exc).splitlines()[0]}"
    return None


def normalize_requirements(requirements: Iterable[str]) -> list[str]:
    """Requirement strings stripped, without blanks and ``#`` comments, de-duplicated, sorted.

    Raises :class:`clawrig.errors.SetupError` for a refused requirement
    (:func:`requirement_problem`): an environment is described by index packages only.
    """
    out: set[str] = set()
    for raw in requirements:
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if problem := requirement_problem(line):
            raise SetupError(f"requirement {line!r}: {problem}")
        out.add(line)
    return sorted(out)


@functools.lru_cache(maxsize=8)
def base_python_info(python: str = BASE_PYTHON) -> dict[str, str]:
    """``{"version": "3.11.2", "cache_tag": "cpython-311", "machine": "x86_64"}`` of ``python``.

    Raises SetupError when the interpreter is missing or does not run.
    """
    code = (
        "import json, platform, sys; print(json.dumps({'version': platform.python_version(), "
        "'cache_tag': sys.implementation.cache_tag, 'machine': platform.machine()}))"
    )
    try:
        proc = subprocess.run(
            [python, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as exc:
        raise SetupError(
            f"{python}: cannot run the sandbox's Python ({exc.strerror}): apt-get install python3"
        ) from None
    if proc.returncode != 0:
        raise SetupError(f"{python}: exits with {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)


def env_key(requirements: Iterable[str], python: str = BASE_PYTHON) -> str:
    """sha256 hex of the normalized requirement list and the base interpreter's identity."""
    info = base_python_info(python)
    payload = json.dumps(
        {"requirements": normalize_requirements(requirements), "python": info},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def envs_dir(cache_dir: Path | None = None) -> Path:
    return (Path(cache_dir) if cache_dir else cache_root()) / "envs"


def cache_folder_problem(path: Path, exc: OSError, variable: str = "CLAWRIG_CACHE_DIR") -> str:
    """The line for a folder of clawrig's cache that cannot be made (a file in its way, a
    read-only file system): the folder, the reason and the ``variable`` that moves it."""
    return (
        f"clawrig's cache folder {path}: {exc.strerror or exc} (set {variable} to a folder "
        "that can be written)"
    )


def envs_folder(cache_dir: Path | None = None) -> Path:
    """:func:`envs_dir`, made when missing. Raises SetupError (:func:`cache_folder_problem`)
    when it cannot be."""
    root = envs_dir(cache_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SetupError(cache_folder_problem(root, exc)) from None
    return root


def env_path(
    requirements: Iterable[str], *, python: str = BASE_PYTHON, cache_dir: Path | None = None
) -> Path:
    """Host folder the environment for ``requirements`` has (or will have) in the cache."""
    return envs_dir(cache_dir) / env_key(requirements, python)


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    return (errors[-1] if errors else lines[-1] if lines else "no output")[:400]


def _has_pip() -> bool:
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError:
        return False
    return proc.returncode == 0


def _build(tmp: Path, reqs: list[str], python: str) -> None:
    harness_pip = _has_pip()
    venv = [python, "-m", "venv"] + (["--without-pip"] if harness_pip else []) + [str(tmp)]
    proc = subprocess.run(venv, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        hint = (
            "apt-get install python3-venv (or install pip in clawrig's environment)"
            if "ensurepip" in proc.stdout + proc.stderr
            else _last_error(proc.stdout + proc.stderr)
        )
        raise SetupError(f"cannot create a Python environment with {python} -m venv: {hint}")
    env_python = tmp / "bin" / "python"
    if reqs:
        if harness_pip:
            pip = [sys.executable, "-m", "pip", "--python", str(env_python)]
        else:
            pip = [str(env_python), "-m", "pip"]
        cmd = [
            *pip,
            "install",
            "--no-input",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            "--only-binary",  # wheels only: no package's build backend runs on the host
            ":all:",
            "--quiet",
            *reqs,
        ]
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=PIP_TIMEOUT_S,
                check=False,
                env=_pip_env(),
            )
        except subprocess.TimeoutExpired:
            raise SetupError(
                f"pip install of {', '.join(reqs)} took more than {PIP_TIMEOUT_S:g} s"
            ) from None
        if proc.returncode != 0:
            raise SetupError(
                f"pip could not install {', '.join(reqs)}: {_last_error(proc.stderr + proc.stdout)}"
            )
    manifest = {
        "requirements": reqs,
        "python": base_python_info(python),
        "installed": _installed(tmp),
    }
    (tmp / "clawrig-env.json").write_text(json.dumps(manifest, indent=2) + "\n")


_PIP_ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR")


def _pip_env() -> dict[str, str]:
    """The environment pip runs in: what it needs to reach the index (PATH, HOME, locale, pip's
    own ``PIP_*`` settings, proxies, CA bundles), none of the harness's keys."""
    keep = set(_PIP_ENV_KEEP) | {"REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"}
    return {
        k: v
        for k, v in os.environ.items()
        if k in keep
        or k.startswith("PIP_")
        or k.lower() in ("http_proxy", "https_proxy", "no_proxy")
    }


def _installed(env: Path) -> list[str]:
    """``Name==version`` of every distribution in the environment, read from its
    ``*.dist-info/METADATA`` files (the environment's Python is never run on the host: a
    package's ``.pth`` file would run there)."""
    found = set()
    for meta in env.glob("lib/python*/site-packages/*.dist-info/METADATA"):
        name = version = ""
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for line in meta.read_text(encoding="utf-8").splitlines():
                if line.startswith("Name: "):
                    name = line[6:].strip()
                elif line.startswith("Version: "):
                    version = line[9:].strip()
                elif not line:
                    break
        if name and version:
            found.add(f"{name}=={version}")
    return sorted(found)


def ensure_env(
    requirements: Sequence[str],
    *,
    python: str = BASE_PYTHON,
    cache_dir: Path | None = None,
) -> Path:
    """Return the host folder of a venv with ``requirements`` installed, building it once.

    ``python`` is the base interpreter (the sandbox's). Blocking (a first build runs pip for up
    to :data:`PIP_TIMEOUT_S` seconds): from async code use ``asyncio.to_thread(ensure_env, ...)``.
    The folder holds ``bin/python3``, ``lib/python3.X/site-packages`` and ``clawrig-env.json``
    (requirements, interpreter, installed distributions). Raises
    :class:`clawrig.errors.SetupError` naming what failed (no interpreter, no venv, pip's last
    error line).
    """
    reqs = normalize_requirements(requirements)
    root = envs_dir(cache_dir)
    key = env_key(reqs, python)
    target = root / key
    memo_key = f"{root}/{key}"
    if memo_key in _env_memo and target.is_dir():
        return target
    envs_folder(cache_dir)
    with open(root / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not target.is_dir():
                tmp = root / f".tmp-{key}-{secrets.token_hex(4)}"
                try:
                    _build(tmp, reqs, python)
                    os.rename(tmp, target)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    _env_memo[memo_key] = target
    return target


def env_python(path: Path) -> Path:
    """Host path of an environment's interpreter."""
    return Path(path) / "bin" / "python3"


def env_bind(path: Path) -> tuple[Bind, str]:
    """(read-only Bind of the environment at ``/opt/clawrig-env/<key>``, its python3 there)."""
    dest = f"{ENV_MOUNT}/{Path(path).name}"
    return Bind(source=Path(path), dest=dest, read_only=True), f"{dest}/bin/python3"


def read_requirements(path: Path) -> list[str]:
    """Requirement strings of a ``requirements.txt`` (comments and blank lines dropped).

    Raises :class:`clawrig.errors.TaskFormatError` naming the file and line for a pip option
    (``-r``, ``-e``, ``--index-url``: not supported) or an unreadable file.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(path, "requirements", f"cannot read: {exc}") from None
    out = []
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if problem := requirement_problem(line):
            raise TaskFormatError(path, "requirements", f"{line!r}: {problem}", n)
        out.append(line)
    return normalize_requirements(out)


def suite_grader_requirements(root: Path, default: Sequence[str] = ()) -> list[str]:
    """Grader requirements of a suite: ``requirements.txt`` in ``root`` or its ``tasks/``
    folder (the first found), else ``default`` (e.g. :data:`WILDCLAW_GRADER_REQUIREMENTS`).
    Raises TaskFormatError for a ``requirements.txt`` that leads outside ``root`` (a link to
    a host file: its lines were read as package names, and would have been sent to the
    package index: helper-205) and as :func:`read_requirements` does."""
    from clawrig.tasks.safety import is_inside, outside_message

    root = Path(root)
    for candidate in (root / "requirements.txt", root / "tasks" / "requirements.txt"):
        if candidate.is_file():
            if not is_inside(candidate, root):
                raise TaskFormatError(candidate, "requirements", outside_message(candidate, root))
            return read_requirements(candidate)
    return normalize_requirements(default)


class GradingEnvStage:
    """An environment visible in the sandbox for the grading phase only.

    Create it before the sandbox (``stage = GradingEnvStage(env)``) and add ``stage.bind`` to
    ``SandboxConfig.binds``: an empty host folder is bound read-only at
    ``/opt/clawrig-grader-env``. After the agent's processes are dead, :meth:`activate` fills
    the folder with hard links to the cached environment (copies across file systems; the
    sandbox sees new entries of a bound folder at once) and returns the interpreter to pass as
    ``run_grader(python=...)``. :meth:`cleanup` removes the folder (links only; the cache stays).
    The staging folder lives in ``<cache>/stage/`` so hard links stay on one file system.
    """

    def __init__(self, env: Path, *, cache_dir: Path | None = None, dest: str = PATHS.grader_env):
        self.env = Path(env)
        base = (Path(cache_dir) if cache_dir else cache_root()) / "stage"
        base.mkdir(parents=True, exist_ok=True)
        sweep_stale_stages(base)
        self.folder = base / f"{os.getpid()}-{secrets.token_hex(6)}"
        self.folder.mkdir(mode=0o755)
        self.dest = dest
        self.active = False

    @property
    def bind(self) -> Bind:
        return Bind(source=self.folder, dest=self.dest, read_only=True)

    @property
    def python(self) -> str:
        """The interpreter inside the sandbox once active."""
        return f"{self.dest}/bin/python3"

    def activate(self) -> str:
        """Fill the staging folder from the environment; return :attr:`python`. Idempotent."""
        if not self.active:
            _link_tree(self.env, self.folder)
            self.active = True
        return self.python

    def cleanup(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _link_tree(src: Path, dest: Path) -> None:
    """Mirror ``src`` into ``dest``: folders created, symlinks recreated, files hard-linked
    (copied when linking fails, e.g. across file systems)."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        out = dest if rel == "." else dest / rel
        out.mkdir(exist_ok=True)
        for name in list(dirnames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                os.symlink(os.readlink(full), out / name)
                dirnames.remove(name)
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                os.symlink(os.readlink(full), out / name)
                continue
            try:
                os.link(full, out / name)
            except OSError:
                shutil.copy2(full, out / name)


def sweep_stale_stages(base: Path) -> int:
    """Remove the staging folders in ``base`` (``<pid>-<random>``) left by harness processes
    that no longer run; return how many were removed (0 when ``base`` cannot be listed)."""
    removed = 0
    try:
        entries = list(base.iterdir())
    except OSError:
        return 0
    for entry in entries:
        pid = pid_in_name(entry.name.split("-", 1)[0])
        if pid is None or pid == os.getpid() or pid_alive(pid):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed += not entry.exists()
    return removed


__all__ = [
    "BASE_PYTHON",
    "ENV_MOUNT",
    "WILDCLAW_GRADER_REQUIREMENTS",
    "GradingEnvStage",
    "base_python_info",
    "cache_root",
    "env_bind",
    "env_key",
    "env_path",
    "env_python",
    "ensure_env",
    "normalize_requirements",
    "read_requirements",
    "suite_grader_requirements",
]
