"""A deep ``TMPDIR`` (~120 characters): clawrig's unix sockets (the model gateway's, each
sandbox's door, the grader's verdict channel ...) cannot live there (a socket's path holds at
most 107 bytes), so they go to a short folder clawrig owns (:func:`clawrig.leftovers.
socket_tempdir`). Before, ``clawrig run`` and ``clawrig grade`` died with "AF_UNIX path too
long" and a traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from cli_helpers import CLAWRIG, DEMO, REPO, clean_env

from clawrig import leftovers
from clawrig.errors import UserError
from clawrig.leftovers import SHORT_TEMP_DIRS, socket_tempdir

DEPTH = 120
"""Characters of the deep temp folder the tests use."""


def _deep(tmp_path: Path) -> Path:
    """A folder below ``tmp_path`` whose path is :data:`DEPTH` characters long."""
    pad = DEPTH - len(str(tmp_path)) - 1
    assert pad > 10, f"the test's own temp folder is already {len(str(tmp_path))} characters"
    parts = [("d" * 40)[: min(40, pad - i)] for i in range(0, pad, 41)]
    deep = tmp_path.joinpath(*[p for p in parts if p])
    deep.mkdir(parents=True)
    assert len(str(deep)) in (DEPTH, DEPTH - 1)  # a part of one character cannot be dropped
    return deep


def _bind(path: Path) -> None:
    """Listen on a unix socket at ``path`` for real, then close it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(str(path))
    finally:
        s.close()
        path.unlink(missing_ok=True)


def _left_by(pid: int) -> list[Path]:
    """Folders ``clawrig-<kind>-<pid>-*`` of the harness ``pid`` in the short temp folders."""
    found: list[Path] = []
    for base in map(Path, SHORT_TEMP_DIRS):
        if base.is_dir():
            found += [p for p in base.iterdir() if leftovers.owner_pid(p.name) == pid]
    return found


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """``argv`` started with ``env``, its output piped (its pid names its owned folders)."""
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_socket_folder_of_a_deep_tmpdir_moves_where_its_path_fits(tmp_path, monkeypatch):
    monkeypatch.setattr(leftovers, "scratch_dir", lambda: None)  # the temp folder's choice
    deep = _deep(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with pytest.raises(OSError, match="too long"):  # what every socket of a job met
        _bind(Path(tempfile.mkdtemp(prefix=f"clawrig-gw-{os.getpid()}-")) / "gateway.sock")
    folder = socket_tempdir("gw", "gateway.sock")
    try:
        assert folder.parent != deep and str(folder.parent) in SHORT_TEMP_DIRS
        assert folder.name.startswith(f"clawrig-gw-{os.getpid()}-")  # swept when we die
        _bind(folder / "gateway.sock")
    finally:
        folder.rmdir()
    # a temp folder where the path fits keeps it (a short one: an xdist worker's tmp_path is
    # ~70 characters, too deep already)
    short = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(short))
    try:
        folder = socket_tempdir("gw", "gateway.sock")
        assert folder.parent == short
        folder.rmdir()
    finally:
        short.rmdir()


def test_no_folder_where_a_socket_fits_is_one_line_naming_tmpdir(tmp_path, monkeypatch):
    monkeypatch.setattr(leftovers, "scratch_dir", lambda: None)  # the temp folder's choice
    deep = _deep(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    monkeypatch.setattr(leftovers, "SHORT_TEMP_DIRS", (str(deep),))
    with pytest.raises(UserError) as err:
        socket_tempdir("gw", "gateway.sock")
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"TMPDIR={deep}: too deep")
    assert f"({len(str(deep))} bytes;" in line
    assert not [p for p in deep.iterdir()]  # nothing made


@pytest.mark.sandbox
def test_run_and_grade_work_with_a_deep_tmpdir(scripted_server, tmp_path):
    script = json.loads((REPO / "examples" / "scripted-000015.json").read_text())
    srv = scripted_server(script["replies"], models=script["models"])
    deep = _deep(tmp_path)
    env = clean_env({"TMPDIR": str(deep), "SCRIPTED_BASE_URL": srv.base_url})
    out = tmp_path / "out"
    run = [CLAWRIG, "run", str(DEMO), "--suite", "000015", "-m", "scripted/demo", "-o", str(out)]
    proc = _start(run, env)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, (stdout, stderr)
    assert "Traceback" not in stderr
    (result,) = out.glob("000015/*/result.json")
    assert json.loads(result.read_text())["score"]["score"] == 1.0  # the script solves the task
    assert len(srv.requests) == len(script["replies"])
    assert not _left_by(proc.pid)  # the short socket folders went with the job

    grade = [CLAWRIG, "grade", str(out)]
    proc = _start(grade, env)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, (stdout, stderr)
    assert "Traceback" not in stderr
    assert "1/1 trial re-grades to its recorded score" in stdout + stderr
    assert not _left_by(proc.pid)
