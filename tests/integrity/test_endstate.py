"""The end state as inert data (:mod:`clawrig.sandbox.endstate`), on real folders: what settle
keeps, drops and records, its caps, and that no depth or link can crash or mislead it."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

from clawrig.sandbox.endstate import EndStateCaps, EndStateRejected, scan, settle


def test_settle_keeps_files_and_folders_and_drops_everything_else(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "results" / "deep").mkdir(parents=True)
    (ws / "results" / "out.txt").write_text("answer\n")
    (ws / "shipped").write_text("x")
    os.symlink("../gt/answer.txt", ws / "results" / "copy.txt")
    os.symlink("/", ws / "results" / "root")
    os.symlink("input.txt", ws / "alias")  # the task shipped this one
    os.mkfifo(ws / "results" / "pipe")
    (ws / "gt").mkdir()
    (ws / "gt" / "answer.txt").write_text("planted")
    (ws / ".services").write_text("fake audit")
    os.chmod(ws / "results" / "out.txt", 0)
    os.chmod(ws / "results" / "deep", 0)
    state = settle(ws, EndStateCaps(), keep_links={"alias": "input.txt"})
    assert state.files == {
        "results/out.txt": "7:" + hashlib.sha256(b"answer\n").hexdigest(),
        "shipped": "1:" + hashlib.sha256(b"x").hexdigest(),
    }
    assert state.links == {
        "results/copy.txt": "../gt/answer.txt",
        "results/root": "/",
        "alias": "input.txt",
    }
    assert state.dropped == {
        "results/copy.txt": "link",
        "results/root": "link",
        "results/pipe": "fifo",
        "gt": "top-level",
        ".services": "top-level",
    }
    left = sorted(str(p.relative_to(ws)) for p in ws.rglob("*"))
    assert left == ["alias", "results", "results/deep", "results/out.txt", "shipped"]
    assert os.readlink(ws / "alias") == "input.txt"
    assert stat.S_IMODE(os.stat(ws / "results" / "out.txt").st_mode) & 0o600 == 0o600
    assert stat.S_IMODE(os.stat(ws / "results" / "deep").st_mode) & 0o700 == 0o700


def test_a_1200_level_tree_is_read_without_recursion_and_refused_over_the_depth_cap(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1200):  # made level by level: no path of the whole depth is ever used
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
        os.close(old)
    os.close(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)
    assert scan(ws).depth == 1200  # no RecursionError, no cap
    with pytest.raises(EndStateRejected, match="more than 128 folders deep"):
        settle(ws, EndStateCaps())
    settled = settle(ws, EndStateCaps(max_depth=2000, max_path_bytes=4000))  # within caps
    assert settled.depth == 1200 and list(settled.files) == ["/".join(["d"] * 1200) + "/leaf.txt"]
    subprocess.run(["rm", "-rf", str(ws)], check=True)  # pytest's own cleanup would recurse


@pytest.mark.parametrize(
    ("caps", "message"),
    [
        (EndStateCaps(max_entries=50), "more than 50 files and folders"),
        (EndStateCaps(max_bytes=10_000), "more than 10000 bytes"),
        (EndStateCaps(max_path_bytes=20), "longer than 20 bytes"),
    ],
)
def test_each_cap_is_an_agent_fault(tmp_path: Path, caps: EndStateCaps, message: str) -> None:
    ws = tmp_path / "ws"
    (ws / "many").mkdir(parents=True)
    for i in range(60):
        (ws / "many" / f"file-with-a-long-name-{i}").write_bytes(b"z" * 200)
    with pytest.raises(EndStateRejected, match=message):
        settle(ws, caps)


def test_caps_apply_on_top_of_the_initial_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    for i in range(30):
        (ws / "data" / f"{i}.bin").write_bytes(b"q" * 1000)
    initial = scan(ws)
    caps = EndStateCaps(max_entries=5, max_bytes=100).over(initial)
    assert (caps.max_entries, caps.max_bytes) == (2 * 31, 2 * 30_000)
    assert len(settle(ws, caps).files) == 30


WORKSPACE_GRADER = """
import os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    p = lambda *a: os.path.join(workspace_path, *a)
    checks = {
        "d_gone": not os.path.exists(p("d")),
        "empty_made": os.path.isdir(p("out", "empty")),
        "file_became_folder": os.path.isdir(p("x")),
        "old_renamed": not os.path.exists(p("old")) and os.path.isfile(p("new", "x.txt")),
        "chmod_x": os.access(p("run.sh"), os.X_OK),
        "new_x": os.access(p("new.sh"), os.X_OK),
    }
    return {"overall_score": 1.0 if all(checks.values()) else 0.0,
            **{k: float(v) for k, v in checks.items()}}
"""


@pytest.mark.sandbox
async def test_regrading_replays_folders_and_modes_the_agent_changed(attack, make_task):
    """helper-194: the recorded end state held changed files and deleted files only. An
    `rm -rf d` (its empty folders came back), a `mkdir`, a file replaced by an empty folder,
    a folder renamed, a `chmod +x` (unchanged content) and a new executable lost their
    folders or modes on re-grading: a 1.0 re-graded 0.0, and `grade --write` stored it."""
    from clawrig.runner.trial import RecordedEndState
    from clawrig.sandbox.workspace import materialise_workspace

    files = {"d/a.txt": "a", "d/sub/b.txt": "b", "old/x.txt": "o", "run.sh": "echo", "x": "f"}
    task = make_task(WORKSPACE_GRADER, files=files)
    result, folder = await attack(
        task,
        "rm -rf d && mkdir -p out/empty && rm x && mkdir x && mv old new && chmod +x run.sh"
        " && printf 'echo' > new.sh && chmod 755 new.sh && touch -m -d @981173106 new.sh",
    )
    assert result.error is None and result.score.score == 1.0, result.score
    # what re-grading does: the task's initial workspace, the recorded end state over it
    ws = folder.parent.parent / "regraded"
    materialise_workspace(task, ws)
    RecordedEndState.of(folder).apply(ws)
    assert not (ws / "d").exists() and (ws / "out" / "empty").is_dir()
    assert (ws / "x").is_dir() and not (ws / "old").exists()
    assert (ws / "new" / "x.txt").read_text() == "o"
    assert os.access(ws / "run.sh", os.X_OK) and os.access(ws / "new.sh", os.X_OK)
    # and the times the agent left (helper-197: they were the copies')
    assert (folder / "end_state" / "new.sh").stat().st_mtime == 981173106
    assert (ws / "new.sh").stat().st_mtime == 981173106
