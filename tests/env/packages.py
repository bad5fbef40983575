"""Real installable packages made on the spot: a wheel (pip), a .deb (dpkg-deb), an npm tarball,
and a PEP 503 simple index serving the wheel over HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def make_wheel(folder: Path, name: str, value: str) -> Path:
    """A pure-Python wheel ``<name>-1.0`` whose module ``<name>`` has ``VALUE = value``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-1.0-py3-none-any.whl"
    files = {
        f"{name}/__init__.py": f"VALUE = {value!r}\n",
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for rel, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{rel},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{name}-1.0.dist-info/RECORD,,")
    files[f"{name}-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    with zipfile.ZipFile(path, "w") as zf:
        for rel, text in files.items():
            zf.writestr(rel, text)
    return path


def make_deb(folder: Path, name: str, text: str) -> Path:
    """A .deb ``<name>`` that installs /usr/share/<name>/hello.txt holding ``text``."""
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


class _QuietHandler(SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.requests.append(self.path)
        super().do_GET()


@contextmanager
def simple_index(wheels: list[Path]) -> Iterator[tuple[str, list[str]]]:
    """Serve ``wheels`` as a PEP 503 index on 127.0.0.1; yields its ``/simple`` URL and the
    list of request paths it receives."""
    root = wheels[0].parent / "index"
    for whl in wheels:
        project = whl.name.split("-")[0].replace("_", "-")
        d = root / "simple" / project
        d.mkdir(parents=True, exist_ok=True)
        (d / whl.name).write_bytes(whl.read_bytes())
        (d / "index.html").write_text(f'<a href="{whl.name}">{whl.name}</a>\n')
    requests: list[str] = []
    handler = partial(
        type("Handler", (_QuietHandler,), {"requests": requests}), directory=str(root)
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", requests
    finally:
        server.shutdown()
        server.server_close()
