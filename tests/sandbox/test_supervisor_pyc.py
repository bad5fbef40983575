"""The precompiled supervisor file (sandbox/client.py ``supervisor_pyc``): one per version in
use is kept in the temp folder; files no live process holds are removed when a new one is made."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from clawrig.sandbox import client


@pytest.fixture
def tmp_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _hold_lock(path: Path) -> subprocess.Popen[str]:
    """Another process holding a shared lock on ``path`` until its stdin closes."""
    code = (
        "import fcntl,sys;f=open(sys.argv[1],'rb');fcntl.flock(f,fcntl.LOCK_SH);"
        "print('held',flush=True);sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_new_file_removes_the_unheld_ones_and_keeps_the_held(tmp_tempdir: Path) -> None:
    uid = os.geteuid()
    stale = tmp_tempdir / f"clawrig-supervisor-{uid}-{'a' * 20}.pyc"
    held = tmp_tempdir / f"clawrig-supervisor-{uid}-{'b' * 20}.pyc"
    unrelated = tmp_tempdir / "clawrig-supervisor-notes.txt"
    for p in (stale, held, unrelated):
        p.write_bytes(b"old")
    holder = _hold_lock(held)
    try:
        path = client.supervisor_pyc("/sandbox/test-a-new-file/supervisor.py")
    finally:
        holder.communicate("")
    assert path is not None and path.parent == tmp_tempdir
    # the file holds this interpreter's code for the name asked
    data = path.read_bytes()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    code = marshal.loads(data[16:])
    assert code.co_filename == "/sandbox/test-a-new-file/supervisor.py"
    assert sorted(p.name for p in tmp_tempdir.iterdir()) == sorted(
        [path.name, held.name, unrelated.name]
    )


def test_the_file_in_use_is_locked_against_a_sweep(tmp_tempdir: Path) -> None:
    path = client.supervisor_pyc("/sandbox/test-in-use/supervisor.py")
    assert path is not None
    # another harness making a file of its own version sweeps; ours is held by this process
    other = tmp_tempdir / f"clawrig-supervisor-{os.geteuid()}-{'c' * 20}.pyc"
    other.write_bytes(b"x")
    code = (
        "import sys;from pathlib import Path;from clawrig.sandbox import client;"
        "print([p.name for p in client._sweep_pycs(Path(sys.argv[1]))])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(other)], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
    assert path.exists()


_SOURCE = """
import sys
print("ran", sys.argv[1:], __name__)
def fail():
    raise ValueError("from the source")
if sys.argv[1:] == ["fail"]:
    fail()
"""
_NO_COMPILE = (
    "import builtins,sys;builtins.compile=None;sys.argv=sys.argv[1:];exec(open(sys.argv[0]).read())"
)
"""Runs a script with ``compile`` gone (the script itself is compiled by ``exec``)."""


@pytest.mark.parametrize("same_bytecode", [True, False])
def test_a_precompiled_script_runs_its_code_compiled_here_or_its_source(tmp_path, same_bytecode):
    """``precompiled`` (the clean room's grader runner): an interpreter with this one's
    bytecode runs the code compiled here, with no compile() of its own (it is taken away
    here); one with another magic number compiles the source. Either way the same output and a
    traceback that names the given file and the source's line."""
    text = client.precompiled(_SOURCE, "named-runner.py")
    if not same_bytecode:
        magic = repr(importlib.util.MAGIC_NUMBER)
        assert text.count(magic) == 1
        text = text.replace(magic, repr(b"\x00\x00\r\n"))
    script = tmp_path / "runner.py"
    script.write_text(text)
    ok = subprocess.run(
        [sys.executable, "-I", "-c", _NO_COMPILE, str(script), "a", "b"],
        capture_output=True,
        text=True,
    )
    if same_bytecode:
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout == "ran ['a', 'b'] __main__\n"
    else:  # the source is compiled there: compile() is needed
        assert "NoneType" in ok.stderr and ok.returncode == 1
    run = subprocess.run(
        [sys.executable, "-I", str(script), "fail"], capture_output=True, text=True
    )
    assert run.stdout == "ran ['fail'] __main__\n"
    assert 'File "named-runner.py", line 5, in fail' in run.stderr
    assert run.stderr.rstrip().endswith("ValueError: from the source")
    # the traceback's lines of the script itself are short: not its 3 KB of base64 (or the
    # source's text), which filled the 4,000 characters of stderr a grader's failure keeps
    assert max(len(line) for line in run.stderr.splitlines()) < 120, run.stderr


def test_the_supervisor_serves_a_trials_requests_without_importing_os(tmp_path: Path) -> None:
    """Start-up and the requests of a trial (adopt, exec, write_file into new folders, a
    background spawn, list) import only C modules: not os (its Python part costs as much as the
    rest of a supervisor's own start), re, enum or collections. The answers are the real ones:
    the command's output, the file's bytes on disk, the spawned command's log."""
    source = str(client.SUPERVISOR_PATH)
    argv = client.supervisor_argv(sys.executable, source, None)
    argv.insert(1, "-X")
    argv.insert(2, "importtime")
    target = tmp_path / "a" / "b" / "c.txt"
    logs = tmp_path / "logs"
    requests = [
        {"id": 1, "op": "adopt", "env": {"PATH": "/usr/bin:/bin", "X": "y"}, "cwd": str(tmp_path)},
        {"id": 2, "op": "exec", "cmd": 'echo "$X" && pwd'},
        {"id": 3, "op": "write_file", "path": str(target), "data": "aGVsbG8="},
        {"id": 4, "op": "spawn", "cmd": ["printf", "bg"]},
        {"id": 5, "op": "list", "path": str(target.parent)},
    ]
    answers = {}
    with subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "CLAWRIG_LOG_DIR": str(logs)},
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        assert '"ready": true' in proc.stdout.readline()

        def call(req: dict[str, object]) -> dict[str, object]:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
            answer: dict[str, object] = json.loads(proc.stdout.readline())
            return answer

        for req in requests:  # one at a time: each answered before the next is sent
            answers[req["id"]] = call(req)
        poll = {"id": 6, "op": "poll", "handle": answers[4].get("handle")}
        while call(poll).get("exit_code") is None:  # the background command's log is whole
            time.sleep(0.01)
        proc.stdin.close()
        imports = proc.stderr.read()
    assert all(a["ok"] for a in answers.values()), answers
    assert answers[2]["stdout"] == f"y\n{tmp_path}\n"
    assert target.read_bytes() == b"hello"
    assert [e["name"] for e in answers[5]["entries"]] == ["c.txt"]
    assert (logs / f"{answers[4]['handle']}.log").read_text() == "bg"
    modules = {line.rsplit("|", 1)[1].strip() for line in imports.splitlines() if "|" in line}
    assert "_json" in modules  # the report is read right: the supervisor's own imports are in it
    assert not modules & {"os", "re", "enum", "collections", "stat", "posixpath"}, modules
