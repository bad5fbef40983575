"""Which top-level Python modules a system's ``python3`` can import, read from its files (the
system's interpreter never runs on the host: a package's ``.pth`` file would run there).

Used by the pre-run check that a grader's imports are where it will run
(:func:`clawrig.runner.fidelity_checks.note_grader_imports`): a WildClawBench grader on an
environment runs on the clean room's ``python3`` (the environment plus the task's warm
snapshot, :func:`clawrig.env.system.grader_on_system`), so its modules are

- the environment's: read from its root file system (bwrap; :func:`tree_modules`) or from the
  Docker image's overlay2 layers (``docker image inspect`` ``GraphDriver``; :func:`image_trees`);
- the task's warm snapshot's: its overlay upper folder (bwrap) or image layers (Docker), when
  it is made;
- when the environment or the snapshot is not built yet: what its spec's ``pip`` list and
  ``python3-*`` Debian packages, or the warmup's install lines, name (:func:`named_modules`),
  taken as installed (their dependencies are not known until they are installed).

Module names of a requirement: :func:`requirement_modules` (``Pillow`` -> ``PIL``, from
:data:`IMPORT_NAMES`, else the distribution's name with ``-`` as ``_``).
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from clawrig.env.build import rootfs_path
from clawrig.env.store import WARM_IMAGE_REPO, warm_dir
from clawrig.env.warm import split_warmup, warm_key

if TYPE_CHECKING:
    from clawrig.env.system import SystemChoice

IMPORT_NAMES = {
    "pillow": ["PIL"],
    "pymupdf": ["fitz", "pymupdf"],
    "beautifulsoup4": ["bs4"],
    "pyyaml": ["yaml"],
    "opencv-python": ["cv2"],
    "opencv-python-headless": ["cv2"],
    "python-docx": ["docx"],
    "python-pptx": ["pptx"],
    "scikit-learn": ["sklearn"],
    "scikit-image": ["skimage"],
    "python-dateutil": ["dateutil"],
    "pypdf2": ["PyPDF2"],
    "attrs": ["attr", "attrs"],
    "protobuf": ["google"],
    "pyjwt": ["jwt"],
    "python-dotenv": ["dotenv"],
    "python-magic": ["magic"],
    "python-multipart": ["multipart"],
    "pycryptodome": ["Crypto"],
    "pyserial": ["serial"],
    "pyzmq": ["zmq"],
    "pdfminer-six": ["pdfminer"],
    "python-levenshtein": ["Levenshtein"],
    "faiss-cpu": ["faiss"],
    "opencv-contrib-python": ["cv2"],
    "opencv-contrib-python-headless": ["cv2"],
    "ruamel-yaml": ["ruamel"],
    "google-genai": ["google"],
    # Debian's python3-<name> packages whose module is named otherwise
    "pil": ["PIL"],
}
"""Import names of distributions whose import name differs from the distribution's."""

DEPENDENCIES = {
    "pandas": ["numpy", "python-dateutil", "pytz"],
    "matplotlib": ["numpy", "pillow", "python-dateutil"],
    "seaborn": ["pandas", "numpy", "matplotlib"],
    "scipy": ["numpy"],
    "scikit-learn": ["numpy", "scipy", "joblib"],
    "scikit-image": ["numpy", "scipy", "pillow"],
    "requests": ["urllib3", "idna", "certifi", "charset-normalizer"],
    "openai": [
        "httpx",
        "pydantic",
        "anyio",
        "distro",
        "jiter",
        "sniffio",
        "tqdm",
        "typing-extensions",
    ],
    "flask": ["jinja2", "werkzeug", "markupsafe", "click", "itsdangerous", "blinker"],
}
"""Distributions that a common distribution always installs with it (its required
dependencies on PyPI, one level, lower-case names): a requirement of ``pandas`` provides
``numpy`` too."""

SITE_DIRS = (
    "usr/lib/python3/dist-packages",
    "usr/lib/python3*/site-packages",
    "usr/local/lib/python3*/dist-packages",
    "usr/local/lib/python3*/site-packages",
)
"""Where a Debian (or python:3.x image) ``python3`` finds packages, relative to the root."""

_PIP_VALUE_OPTIONS = {
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-t",
    "--target",
    "--prefix",
    "--root",
    "--platform",
    "--python-version",
    "--implementation",
    "--abi",
    "--root-user-action",
    "--progress-bar",
    "--trusted-host",
    "--cache-dir",
    "--log",
    "--proxy",
    "--timeout",
    "--retries",
}


def requirement_modules(requirement: str) -> list[str]:
    """The module names a requirement line (``Pillow==13.0.0``, ``pymupdf>=1``) provides:
    :data:`IMPORT_NAMES`, else the distribution's name with ``-`` and ``.`` as ``_``, as
    spelled and in lower case (``Flask`` -> ``flask``, ``PyPDF2`` -> ``PyPDF2``); and those of
    the distributions it installs with it (:data:`DEPENDENCIES`: ``pandas`` -> ``numpy``)."""
    dist = re.split(r"[\s<>=!~;\[@]", requirement.strip(), maxsplit=1)[0]
    key = dist.lower().replace("_", "-").replace(".", "-")
    names = list(IMPORT_NAMES.get(key, ()))
    if not names:
        plain = dist.replace("-", "_").replace(".", "_")
        names = list(dict.fromkeys([plain, plain.lower()]))
    for dep in DEPENDENCIES.get(key, ()):
        names += [n for n in requirement_modules(dep) if n not in names]
    return names


def _entry_module(path: Path) -> str | None:
    name = path.name
    if name.startswith(".") or name == "__pycache__" or path.is_char_device():
        return None  # hidden, a byte-code cache, an overlay whiteout (deleted in this layer)
    if path.is_dir():
        return None if "." in name else name  # not *.dist-info, *.egg-info
    if name.endswith(".py"):
        return name[:-3]
    if name.endswith(".so"):
        return name.split(".", 1)[0]
    return None


@functools.lru_cache(maxsize=256)
def _tree_modules(root: str) -> frozenset[str]:
    found: set[str] = set()
    base = Path(root)
    for pattern in SITE_DIRS:
        for site in base.glob(pattern):
            try:
                entries = list(site.iterdir())
            except OSError:
                continue
            for entry in entries:
                module = _entry_module(entry)
                if module:
                    found.add(module)
    return frozenset(found)


def tree_modules(root: Path) -> set[str]:
    """Top-level modules (packages, ``.py`` files, extension modules) in the package folders
    (:data:`SITE_DIRS`) of the system tree ``root`` (a root file system, an overlay's upper
    folder, an image layer); the standard library is not listed. Read once per folder."""
    return set(_tree_modules(str(root)))


def install_words(line: str) -> tuple[str, list[str]]:
    """``("pip" | "apt" | "", package words)`` of one warmup install line (options dropped)."""
    try:
        words = shlex.split(line)
    except ValueError:
        return "", []
    if words[:1] == ["sudo"]:
        words = words[1:]
    if words[:2] in (["python3", "-m"], ["python", "-m"]):
        words = words[2:]
    if not words or "install" not in words:
        return "", []
    tool = words[0]
    kind = "pip" if tool in ("pip", "pip3") else "apt" if tool in ("apt", "apt-get") else ""
    rest, out, skip = words[words.index("install") + 1 :], [], False
    for word in rest:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in _PIP_VALUE_OPTIONS
        elif word[:1].isdigit() or word.startswith(("/dev/", "&")):
            continue  # the target of a redirection (2>/dev/null split as "2>/dev/null")
        else:
            out.append(word)
    return kind, out


def named_modules(pip: Iterable[str] = (), debian: Iterable[str] = ()) -> set[str]:
    """Modules named by pip requirements and Debian ``python3-<name>`` packages."""
    found = {m for req in pip for m in requirement_modules(req)}
    for pkg in debian:
        if pkg.startswith("python3-"):
            found.update(requirement_modules(pkg[len("python3-") :]))
    return found


def line_modules(lines: Iterable[str]) -> set[str]:
    """Modules the warmup install lines (``pip install X``, ``apt-get install python3-X``)
    name."""
    pip: list[str] = []
    debian: list[str] = []
    for line in lines:
        kind, words = install_words(line)
        (pip if kind == "pip" else debian if kind == "apt" else []).extend(words)
    return named_modules(pip, debian)


def _inspect(image: str) -> dict | None:
    try:
        proc = subprocess.run(
            ["docker", "image", "inspect", image], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    try:
        return json.loads(proc.stdout)[0]
    except (ValueError, IndexError):
        return None


def image_id(image: str) -> str | None:
    """The image's id (``sha256:...``), or None when Docker does not know it."""
    info = _inspect(image)
    return str(info.get("Id")) if info else None


def image_trees(image: str) -> list[Path] | None:
    """The folders of a local Docker image's layers (overlay2: ``LowerDir`` and ``UpperDir``),
    or None when the image is unknown, another storage driver holds it or its folders cannot
    be read (not root)."""
    info = _inspect(image)
    driver = (info or {}).get("GraphDriver") or {}
    if driver.get("Name") != "overlay2":
        return None
    data = driver.get("Data") or {}
    dirs = [d for d in str(data.get("LowerDir") or "").split(":") if d]
    if data.get("UpperDir"):
        dirs.append(str(data["UpperDir"]))
    trees = [Path(d) for d in dirs]
    try:
        if not trees or not all(t.is_dir() for t in trees):
            return None
    except OSError:
        return None
    return trees


@dataclass
class GradingModules:
    """The modules a grader on an environment can import: ``found`` read from files,
    ``assumed`` named by a spec or warmup not built yet (None: the image's cannot be read),
    ``agent_only`` named by warmup lines that run in the agent's sandbox only (not in the
    warm snapshot the clean room starts from), ``where`` a phrase naming the system."""

    where: str
    found: set[str] | None = field(default_factory=set)
    assumed: set[str] = field(default_factory=set)
    agent_only: set[str] = field(default_factory=set)

    def lacks(self, modules: Iterable[str]) -> list[str] | None:
        """The modules of ``modules`` not importable there (None: unknown)."""
        if self.found is None:
            return None
        return [m for m in modules if m not in self.found and m not in self.assumed]


def grading_modules(
    choice: SystemChoice, sandbox: str, warmup: list[str], *, snapshots: bool = True
) -> GradingModules:
    """The modules a grader running on ``choice``'s ``python3`` in the clean room can import:
    the environment's and the task's warm snapshot's (see the module docstring). A warmup's
    install lines reach the clean room only through the snapshot: with ``snapshots`` off, or
    for lines a snapshot cannot hold, what they install is in ``agent_only``."""
    name = choice.spec.name if choice.spec is not None else choice.environment
    result = GradingModules(where=f"the {name} environment's python3 with the task's warmup")
    install, rest = split_warmup(warmup) if snapshots else ([], list(warmup))
    result.agent_only = line_modules(rest)
    trees: list[Path] | None = []
    if sandbox == "docker" and choice.image is not None:
        trees = image_trees(choice.image)
    elif choice.rootfs is not None:
        trees = [choice.rootfs]
    elif choice.spec is not None:  # built when the job starts
        result.assumed |= named_modules(choice.spec.pip, choice.spec.debian)
        if sandbox == "docker" and (built := rootfs_path(choice.spec)) is not None:
            trees = [built]  # the image is imported from this tree
    if trees is None:
        result.found = None
        return result
    for tree in trees:
        result.found = (result.found or set()) | tree_modules(tree)
    if install:
        snapshot = _warm_trees(choice, sandbox, install)
        if snapshot is None:
            result.assumed |= line_modules(install)  # made before the task's first trial
        else:
            for tree in snapshot:
                result.found = (result.found or set()) | tree_modules(tree)
    result.agent_only -= result.found or set()
    result.agent_only -= result.assumed
    return result


def _warm_trees(choice: SystemChoice, sandbox: str, install: list[str]) -> list[Path] | None:
    """The folders of the task's warm snapshot when it is made (None: not yet)."""
    if sandbox == "docker":
        if choice.image is None or (ident := image_id(choice.image)) is None:
            return None
        key = warm_key("docker", f"{choice.environment}@{ident}", install)
        return image_trees(f"{WARM_IMAGE_REPO}:{key}")
    if choice.rootfs is None:
        return None
    folder = warm_dir() / warm_key("bwrap", choice.environment, install)
    return [folder / "upper"] if (folder / "warm.json").is_file() else None


__all__ = [
    "IMPORT_NAMES",
    "GradingModules",
    "grading_modules",
    "image_id",
    "image_trees",
    "install_words",
    "line_modules",
    "named_modules",
    "requirement_modules",
    "tree_modules",
]
