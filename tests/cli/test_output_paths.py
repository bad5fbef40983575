"""Output paths a new user gets wrong: ``-o`` at a file, under a file, or somewhere nothing
can be written; ``export`` into a path under a file; ``tasks list`` on a folder tree deeper
than Python's recursion limit. Each is one line naming the path and exit 2, never a
traceback, and nothing is written."""

from __future__ import annotations

import os
import subprocess

import pytest
from cli_helpers import DEMO


def one_line_error(r, needle: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout[-800:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and needle in r.stderr, r.stderr[-2000:]
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1, r.stderr


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("a_file", "a_file is a file, not a folder"),
        ("a_file/out", "a_file is a file, not a folder"),
        (
            "/proc/clawrig-out",
            "cannot write /proc/clawrig-out: no file or folder can be created in /proc",
        ),
    ],
)
def test_run_output_that_cannot_be_a_folder(clawrig, tmp_path, target, needle):
    (tmp_path / "a_file").write_text("keep me\n")
    r = clawrig("run", DEMO, "--agent", "oracle", "--suite", "000001", "-o", target, cwd=tmp_path)
    one_line_error(r, needle)
    assert r.stderr.startswith("clawrig: error: --output:")
    assert (tmp_path / "a_file").read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.mark.parametrize(
    ("record", "kind", "resume"),
    [
        *[(r, k, False) for r in ("progress_oracle.json", "summary_oracle.json")
          for k in ("a folder", "a FIFO", "a link to a file", "a link to a folder")],
        ("progress_oracle.json", "a folder", True),
        ("summary_oracle.json", "a link to a file", True),
    ],
)  # fmt: skip
def test_run_output_whose_record_path_is_no_file(clawrig, tmp_path, record, kind, resume):
    """helper-218: a folder (or FIFO) where the job's progress file or summary goes was
    called "holds a finished job" or "holds an unfinished job (? trial(s) done)"; helper-221:
    a link there too (the job's readers refuse links: "put it back")."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere.json").write_text("{}")
    if kind == "a folder":
        (out / record).mkdir()
    elif kind == "a FIFO":
        os.mkfifo(out / record)
    else:
        target = tmp_path / ("elsewhere.json" if kind.endswith("file") else "elsewhere")
        (out / record).symlink_to(target)
        kind = f"a link (to {target})"
    more = ["--resume"] if resume else []
    r = clawrig("run", DEMO, "--agent", "oracle", "--suite", "000001", "-o", out, *more)
    one_line_error(
        r, f"--output: {out / record} is {kind}, where the job's record goes: remove it or "
    )
    assert sorted(p.name for p in out.iterdir()) == [record]


def test_export_into_a_path_under_a_file(clawrig, tmp_path):
    (tmp_path / "a_file").write_text("")
    job = tmp_path / "job"
    r = clawrig("run", DEMO, "--agent", "oracle", "--suite", "000001", "-o", job, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    # a four-folder set's number is the mean score, once, not WildClawBench's
    (trial,) = [p.relative_to(job) for p in job.glob("000001/*") if p.is_dir()]
    assert str(trial) in r.stdout and r.stdout.count("1.0000") == 2  # the row and the mean
    assert "mean score of the graded trials 1.0000 (n=1: no interval)" in " ".join(r.stdout.split())
    assert "WildClawBench" not in r.stdout
    r = clawrig("export", "sft", job, "a_file/rows.jsonl", cwd=tmp_path)
    one_line_error(r, "a_file/rows.jsonl: a_file is a file, not a folder")
    r = clawrig("export", "fourfolder", job, "a_file/set", cwd=tmp_path)
    one_line_error(r, "a_file/set: a_file is a file, not a folder")


def test_tasks_list_on_a_very_deep_tree(clawrig, tmp_path):
    # deeper than the recursion limit (1000): Path.rglob raised RecursionError here
    deep = tmp_path / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    try:
        for _ in range(1100):  # relative mkdirs: the full path would pass PATH_MAX
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.close(os.open("task.md", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    finally:
        os.close(fd)
    (deep / "ok.md").write_text("")
    try:
        r = clawrig("tasks", "list", deep, "--json", cwd=tmp_path)
    finally:  # pytest's own clean-up of old temp folders recurses and would fail on it
        subprocess.run(["rm", "-rf", str(deep / "d")], check=True)
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr, r.stderr[-1500:]
    # both files were found (and, being empty, reported as unreadable task files)
    assert r.stderr.count("file is empty") == 2, r.stderr[-1500:]
    assert r.returncode == 1
