"""Real installable packages made on the spot, and the loopback registries that serve them:
the stand-ins for PyPI, the npm registry and a Debian package in tests, benchmarks and the
example suite (no network is needed).

- :func:`make_wheel`: a pure-Python wheel (PEP 427: ``METADATA``, ``WHEEL``, ``RECORD`` with
  sha256 digests) whose package ``<module>`` has ``VALUE = value``;
- :func:`make_deb`: a ``.deb`` (``dpkg-deb --build``) installing ``/usr/share/<name>/hello.txt``;
- :func:`make_npm_registry`: a static npm registry folder (the packument at ``/<name>``, its
  tarball under ``/tarballs/`` with sha1 ``shasum`` and sha512 ``integrity``) whose package has
  one ``bin`` script printing a line;
- :func:`make_simple_index`: a PEP 503 simple index folder (``/simple/<project>/``) of wheels;
- :class:`FolderServer`: a folder over HTTP (stdlib ``http.server``, own thread) on a loopback
  address, recording the paths it is asked for;
- :func:`probe_registries`: a pip index and an npm registry serving the probe packages
  (:data:`PROBE_DIST`, :data:`TEXT_KIT_DIST`, :data:`NPM_PROBE`) that
  examples/wildclaw-patterns' warmups install.

Errors: ``subprocess.CalledProcessError`` when ``dpkg-deb`` fails, ``OSError`` from the files.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import http.server
import io
import json
import subprocess
import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

PROBE_DIST = "clawrig-egress-probe"
PROBE_MODULE = "egress_probe"
PROBE_VALUE = "installed through the egress proxy"
TEXT_KIT_DIST = "clawrig-text-kit"
TEXT_KIT_MODULE = "clawrig_text_kit"
TEXT_KIT_SOURCE = '''

def word_count(text):
    """Words of ``text``: its whitespace-separated tokens (as ``wc -w`` counts them)."""
    return len(text.split())
'''
"""A library a grader imports (examples/wildclaw-patterns' grader-package task): only the
task's warmup installs it."""
NPM_PROBE = "clawrig-npm-probe"
NPM_PROBE_OUTPUT = "npm probe says hello"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(folder: Path, dist: str, module: str, value: str, source: str = "") -> Path:
    """The wheel ``<dist>-1.0`` (py3-none-any) in ``folder``: package ``module`` with
    ``VALUE = value`` and ``source`` (more Python) after it. Returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    norm = dist.replace("-", "_")
    info = f"{norm}-1.0.dist-info"
    files = {
        f"{module}/__init__.py": f"VALUE = {value!r}\n{source}".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: clawrig-testing\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"{norm}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def make_simple_index(root: Path, wheels: list[Path]) -> Path:
    """A PEP 503 index under ``root/simple`` listing ``wheels`` (copied beside their project
    page, with a sha256 fragment). Returns ``root/simple``."""
    for whl in wheels:
        project = whl.name.split("-")[0].replace("_", "-").lower()
        page = root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        data = whl.read_bytes()
        (page / whl.name).write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        (page / "index.html").write_text(
            f'<html><body><a href="{whl.name}#sha256={sha}">{whl.name}</a></body></html>\n'
        )
    return root / "simple"


def make_deb(folder: Path, name: str, text: str) -> Path:
    """The Debian package ``<name>`` 1.0 (all) installing /usr/share/<name>/hello.txt holding
    ``text``, built with ``dpkg-deb``. Returns its path."""
    root = folder / f"{name}-deb"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\n"
        "Description: test package\n"
    )
    (root / "usr" / "share" / name).mkdir(parents=True)
    (root / "usr" / "share" / name / "hello.txt").write_text(text + "\n")
    out = folder / f"{name}_1.0_all.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)],
        check=True,
        capture_output=True,
    )
    return out


def make_npm_registry(folder: Path, base_url: str, name: str, output: str) -> None:
    """A static npm registry under ``folder`` for ``base_url``: package ``name`` 1.0.0 whose
    command ``name`` (a node script) prints ``output``."""
    files = {
        "package/package.json": json.dumps(
            {"name": name, "version": "1.0.0", "bin": {name: "bin/probe.js"}}
        ).encode(),
        "package/bin/probe.js": f"#!/usr/bin/env node\nconsole.log({output!r});\n".encode(),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    tgz = buf.getvalue()
    (folder / "tarballs").mkdir(parents=True, exist_ok=True)
    tar_name = f"{name}-1.0.0.tgz"
    (folder / "tarballs" / tar_name).write_bytes(tgz)
    version = {
        "name": name,
        "version": "1.0.0",
        "bin": {name: "bin/probe.js"},
        "dist": {
            "tarball": f"{base_url}/tarballs/{tar_name}",
            "shasum": hashlib.sha1(tgz).hexdigest(),
            "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode(),
        },
    }
    packument = {"name": name, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": version}}
    (folder / name).write_text(json.dumps(packument))


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.requests.append(self.path)
        super().do_GET()


class FolderServer:
    """A folder served over HTTP on ``host`` (a free port): ``url`` (no trailing slash),
    ``requests`` (the paths asked for, in order); :meth:`stop` shuts it down."""

    def __init__(self, folder: Path, host: str = "127.0.0.1"):
        self.requests: list[str] = []
        handler = type("Handler", (_Handler,), {"requests": self.requests})
        self._server = http.server.ThreadingHTTPServer(
            (host, 0), functools.partial(handler, directory=str(folder))
        )
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://{host}:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def probe_registries(host: str = "127.0.0.2") -> Iterator[dict[str, str]]:
    """Serve the probe wheels (a PEP 503 index) and the npm probe (a registry) on ``host`` (not
    a sandbox's own 127.0.0.1, so a sandbox reaches them through its egress proxy); yields
    the settings that point pip and npm at them (``PIP_INDEX_URL``, ``npm_config_registry``)."""
    with tempfile.TemporaryDirectory(prefix="clawrig-probe-registries-") as tmp:
        root = Path(tmp)
        wheels = [
            make_wheel(root, PROBE_DIST, PROBE_MODULE, PROBE_VALUE),
            make_wheel(root, TEXT_KIT_DIST, TEXT_KIT_MODULE, "1.0", TEXT_KIT_SOURCE),
        ]
        make_simple_index(root / "pypi", wheels)
        pypi = FolderServer(root / "pypi", host)
        (root / "npm").mkdir()
        npm = FolderServer(root / "npm", host)
        make_npm_registry(root / "npm", npm.url, NPM_PROBE, NPM_PROBE_OUTPUT)
        try:
            yield {"PIP_INDEX_URL": pypi.url + "/simple", "npm_config_registry": npm.url + "/"}
        finally:
            pypi.stop()
            npm.stop()
