"""A job folder from elsewhere (shared, downloaded) or an agent's odd file names must not turn the
viewer against its user (helper-134): links out of the folder are not followed, a FIFO does not
hang it, a huge file is not read whole, a name that is not UTF-8 shows escaped, and malformed
records or a corrupted index cache show as absent, never an HTTP 500."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import httpx
import pytest
from view_helpers import clawrig, start_view

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def hostile(jobs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A copy of the model job (demo 000015 and others) whose 000015 trial holds links to a
    secret outside, a non-UTF-8 file name in end_state/, a FIFO as agent.log, a 300 MB sparse
    file, and malformed logs; a viewer over it."""
    root = tmp_path_factory.mktemp("hostile")
    secret = root / "secret.txt"
    secret.write_text("TOP-SECRET-of-the-host\n")
    job = root / "job"
    shutil.copytree(jobs["model"], job)
    (trial,) = (job / "000015").iterdir()
    (trial / "end_state" / "leak.txt").symlink_to(secret)
    (trial / "task_output").mkdir(exist_ok=True)
    (trial / "task_output" / "pw.txt").symlink_to(secret)
    (trial / "notes.log").symlink_to(secret)
    odd = os.fsencode(trial / "end_state") + b"/bad\xff.md"
    with open(odd, "wb") as fh:
        fh.write(b"an agent's file\n")
    (trial / "agent.log").unlink()
    os.mkfifo(trial / "agent.log")
    with open(trial / "end_state" / "big.bin", "wb") as fh:
        fh.truncate(300 * 1024**2)
    (trial / "model_calls.jsonl").write_text(
        "\n".join(
            json.dumps(x)
            for x in (
                {"seq": 1, "response": {"choices": {"a": 1}}},
                {"seq": 2, "response": {"choices": [{"message": {"tool_calls": 5}}]}},
                {
                    "seq": 3,
                    "response": {"choices": [{"message": {"tool_calls": [{"function": "x"}]}}]},
                },
            )
        )
        + "\n"
        + "[" * 100_000
        + "]" * 100_000
        + "\n"
    )
    (trial / "score.json").write_text("[" * 100_000 + "]" * 100_000)
    # another trial: its transcript a link to the host's file, records with values no page
    # formats (helper-137: each was followed, or a 500)
    (other,) = (job / "000003").iterdir()
    (other / "chat.jsonl").unlink()
    leak = {"type": "message", "message": {"role": "user", "content": "TOP-SECRET-chat"}}
    (root / "chat.jsonl").write_text(json.dumps(leak) + "\n")
    (other / "chat.jsonl").symlink_to(root / "chat.jsonl")
    (other / "model_calls.jsonl").write_text(
        '{"seq": 1, "usage": {"input_tokens": Infinity, "cost_usd": NaN}}\n'
    )
    (other / "judge_chat.jsonl").write_text(
        json.dumps({"response": {"content": "x", "reasoning": 7}}) + "\n"
    )
    (other / "score.json").write_text(json.dumps({"score": 1.0, "subscores": [1, 2]}))
    (other / "egress.jsonl").write_text('{"host": "x", "bytes_up": Infinity}\n')
    # a sub-agent's transcript through a linked subagents/ folder, a 401-digit timestamp
    # (helper-138: the one shown, the other a 500)
    spawn = {"type": "message", "timestamp": 10**400, "message": {"role": "assistant",
             "content": [{"type": "toolCall", "id": "s1", "name": "sessions_spawn",
                          "arguments": {"task": "x"}}]}}  # fmt: skip
    said = json.dumps({"childSessionKey": "kid"})
    result = {"role": "toolResult", "toolCallId": "s1", "toolName": "sessions_spawn",
              "content": [{"type": "text", "text": said}]}  # fmt: skip
    spawned = {"type": "message", "message": result}
    (trial / "chat.jsonl").write_text(
        (trial / "chat.jsonl").read_text() + json.dumps(spawn) + "\n" + json.dumps(spawned) + "\n"
    )
    outside = root / "outside"
    outside.mkdir()
    kid = {"type": "message", "message": {"role": "user", "content": "TOP-SECRET-kid"}}
    (outside / "kid.jsonl").write_text(json.dumps(kid) + "\n")
    shutil.rmtree(trial / "subagents", ignore_errors=True)
    (trial / "subagents").symlink_to(outside)
    (third,) = (job / "000001").iterdir()
    with open(third / "chat.jsonl", "r+b") as fh:  # 1 GiB, sparse: read whole it took 2 GB
        fh.truncate(1024**3)
    for folder in (other, third):  # two scores of 1e308 overflowed the means: a 500
        result = json.loads((folder / "result.json").read_text())
        result["score"]["score"] = 1e308
        (folder / "result.json").write_text(json.dumps(result))
    proc, base = start_view(job)
    yield {"job": job, "trial": trial, "other": other, "third": third, "base": base,
           "secret": secret}  # fmt: skip
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # (a viewer stuck on a FIFO ignored SIGTERM)
        proc.kill()
        proc.wait()


def test_a_hostile_trial_page_shows_without_following_links_or_hanging(hostile):
    trial = hostile["trial"]
    url = f"{hostile['base']}job0/trials/000015/{trial.name}.html"
    page = httpx.get(url, timeout=60)
    assert page.status_code == 200
    assert "TOP-SECRET" not in page.text  # no link was followed
    assert "bad\\xff.md" in page.text  # the agent's non-UTF-8 name, escaped
    assert "big.bin" in page.text
    for key in ("other", "third"):
        folder = hostile[key]
        page = httpx.get(
            f"{hostile['base']}job0/trials/{folder.parent.name}/{folder.name}.html", timeout=60
        )
        assert page.status_code == 200, key
        assert "TOP-SECRET" not in page.text, key
    # the job and compare pages and the live state still answer
    for path in ("", "job0/", "api/job0/state.json"):
        assert httpx.get(hostile["base"] + path, timeout=60).status_code == 200, path


def test_a_corrupted_index_cache_is_rebuilt_not_a_500(hostile, tmp_path):
    job = tmp_path / "job"

    def big_or_fifo(folder: str, names: list[str]) -> list[str]:  # (not copied byte by byte)
        def skip(name: str) -> bool:
            st = os.lstat(os.path.join(folder, name))
            return stat.S_ISFIFO(st.st_mode) or st.st_size > 50 * 1024**2

        return [n for n in names if skip(n)]

    shutil.copytree(hostile["job"], job, symlinks=True, ignore=big_or_fifo)
    proc = clawrig("view", job, "--bundle", tmp_path / "site")  # builds the index cache
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cache = job / ".clawrig_view_index.json"
    data = json.loads(cache.read_text())
    data["rows"][0]["score"] = "x"  # its mtime still the trial's: trusted before
    data["rows"][1]["score"] = float("nan")  # (json.dumps writes NaN)
    cache.write_text(json.dumps(data))
    (job / ".clawrig.lock").unlink(missing_ok=True)
    os.mkfifo(job / ".clawrig.lock")  # (opened to test the job's lock, it hung the viewer)
    summary = next(job.glob("summary_*.json"))
    s = json.loads(summary.read_text())
    s["pass"] = {"²": {"pass_at_k": 1.0}, "9" * 5000: {"pass_at_k": 1.0}}
    summary.write_text(json.dumps(s))
    proc = clawrig("view", job, "--bundle", tmp_path / "site2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the job page links every trial without JavaScript too (helper-139: a text browser or
    # curl reached none: the table is drawn by app.js)
    page = (tmp_path / "site2" / "job0" / "index.html").read_text()
    plain = page.split('<ul id="t-plain">', 1)[1].split("</ul>", 1)[0]
    for trial in job.glob("*/*/result.json"):
        assert f'href="trials/{trial.parent.parent.name}/{trial.parent.name}.html"' in plain
    # a FIFO as a result.json whose cached row still matches it: read for the trial's task,
    # it hung the page and the bundle (helper-138); and the exports (no cache needed)
    (trial,) = (job / "000015").iterdir()
    (trial / "result.json").unlink()
    os.mkfifo(trial / "result.json")
    data = json.loads(cache.read_text())
    rel = f"000015/{trial.name}"
    for row in data["rows"]:
        if row["id"] == rel:
            row["mt"] = (trial / "result.json").stat().st_mtime_ns
    data["dirs"]["000015"] = (job / "000015").stat().st_mtime_ns
    cache.write_text(json.dumps(data))
    proc = clawrig("view", job, "--bundle", tmp_path / "site3", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = clawrig("export", "sft", job, tmp_path / "rows.jsonl", "--min-score", "0", timeout=120)
    # every trial left is unreadable to an export: the FIFO, and the two whose score of 1e308
    # is no score in [0, 1] (helper-177): one line naming them, not a hang
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no graded trial to export (3 whose result.json cannot be read: " in proc.stderr
    assert f"000015/{trial.name}" in proc.stderr and "Traceback" not in proc.stderr
    assert "TOP-SECRET" not in "".join(
        p.read_text(errors="replace") for p in (tmp_path / "site2").rglob("*.html")
    )
