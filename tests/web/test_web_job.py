"""A whole job recorded with ``--web record`` and run again with ``--web replay`` and the model
gateway's replay: every trial's transcript and score come out identical, with the model
server and the web server stopped. The agent is the native loop driven by the scripted
model; the web is the loopback Brave API and a page reached through the host's HTTP proxy."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from web_helpers import BRAVE_KEY

from clawrig.testing.scripted_server import Reply, call, reply, usage
from clawrig.web.records import WEB_RECORD_FILE

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))

GRADE = """
import os
def grade(transcript=None, workspace_path="/tmp_workspace", **kwargs):
    path = os.path.join(workspace_path, "results", "out.txt")
    got = open(path).read().strip() if os.path.exists(path) else ""
    return {"correct": 1.0 if got == "2026-03-02" else 0.0,
            "overall_score": 1.0 if got == "2026-03-02" else 0.0}
"""


def write_web_bench(root: Path, n: int) -> Path:
    cat = "04_Search_Retrieval"
    for k in range(1, n + 1):
        slug = f"task_{k}_release_date"
        md = root / "tasks" / cat / f"{cat}_{slug}.md"
        md.parent.mkdir(parents=True, exist_ok=True)
        md.write_text(
            f"---\nid: {cat}_{slug}\nname: Release date {k}\ncategory: {cat}\n"
            "timeout_seconds: 60\n---\n\n## Prompt\n\nFind when Tern 4.2 was released and write "
            f"the date (YYYY-MM-DD) to /tmp_workspace/results/out.txt. TASKNUM={k}\n\n"
            "## Expected Behavior\n\nSearch, read the page, write the date.\n\n"
            "## Grading Criteria\n\n- [ ] the date\n\n"
            "## Automated Checks\n\n```python\n" + GRADE.strip() + "\n```\n\n"
            "## Workspace Path\n\n```\n" + f"workspace/{cat}/{slug}" + "\n```\n",
            encoding="utf-8",
        )
        (root / "workspace" / cat / slug / "exec").mkdir(parents=True, exist_ok=True)
        (root / "workspace" / cat / slug / "exec" / "notes.txt").write_text("look it up\n")
    return root


def researcher(request: dict[str, Any]) -> Reply:
    """Search, fetch the first hit, write the date it finds; task 2 writes the year only."""
    messages = request["messages"]
    k = int(re.search(r"TASKNUM=(\d+)", json.dumps(messages[0])).group(1))
    tools = [m for m in messages if m.get("role") == "tool"]
    if not tools:
        return reply(
            tool_calls=[call("web_search", {"query": "Tern 4.2 release"})], usage=usage(50, 5)
        )
    if len(tools) == 1:
        url = json.loads(tools[0]["content"])["results"][0]["url"]
        return reply(tool_calls=[call("web_fetch", {"url": url})], usage=usage(80, 5))
    if len(tools) == 2:
        date = re.search(r"\d{4}-\d{2}-\d{2}", json.loads(tools[1]["content"])["text"]).group(0)
        text = date if k == 1 else date[:4]
        cmd = f"mkdir -p /tmp_workspace/results && echo {text} > /tmp_workspace/results/out.txt"
        return reply(tool_calls=[call("exec", {"command": cmd})], usage=usage(120, 9))
    return reply("done", usage=usage(130, 1))


def without_clock(entry: dict[str, Any]) -> dict[str, Any]:
    """An OpenClaw session entry without what differs between any two runs: wall-clock
    timestamps, tool durations and the entries' random ids."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("timestamp", "durationMs")}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return {k: strip(v) for k, v in entry.items() if k not in ("id", "parentId", "timestamp")}


def trial_files(out: Path) -> dict[str, dict[str, Any]]:
    """task id -> its trial's transcript (formatted_dialog.json and the OpenClaw chat.jsonl),
    score and web records."""
    found = {}
    for result in sorted(out.glob("*/*/result.json")):
        folder = result.parent
        found[folder.parent.name] = {
            "dialog": json.loads((folder / "formatted_dialog.json").read_text())[
                "formatted_dialog"
            ],
            "chat": [
                without_clock(json.loads(x))
                for x in (folder / "chat.jsonl").read_text().splitlines()
            ],
            "score": json.loads((folder / "score.json").read_text()),
            "web": [
                {k: v for k, v in json.loads(x).items() if k not in ("task_id", "run_index")}
                for x in (folder / WEB_RECORD_FILE).read_text().splitlines()
            ],
        }
    return found


def clawrig_run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    return subprocess.run(
        [CLAWRIG, "run", *args], capture_output=True, text=True, env={**environ, **env}, timeout=300
    )


def test_recorded_job_replays_identically_without_network(
    tmp_path, scripted_server, web_server
) -> None:
    web_server.page_base = "http://tern.example"  # pages come through the host's HTTP proxy
    bench = write_web_bench(tmp_path / "bench", 2)
    srv = scripted_server(responder=researcher)
    rec, rep = tmp_path / "rec", tmp_path / "rep"
    live_env = {
        "SCRIPTED_BASE_URL": srv.base_url,
        "BRAVE_API_KEY": BRAVE_KEY,
        "CLAWRIG_BRAVE_ENDPOINT": f"{web_server.url}/res/v1/web/search",
        "HTTP_PROXY": web_server.url,
        "NO_PROXY": "127.0.0.1,localhost",
    }
    r = clawrig_run(str(bench / "tasks"), "-m", "scripted/test", "-p", "2", "-o", str(rec),
                    "--web", "record", env=live_env)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    recorded = json.loads((rec / "summary_scripted_test.json").read_text())
    rows = [(t["task_id"].split("_task_")[1], t["score"]) for t in recorded["tasks"]]
    assert rows == [("1_release_date", 1.0), ("2_release_date", 0.0)]
    assert recorded["web"] == {
        "mode": "record", "dir": None, "miss": None, "provider": "brave", "misses": None
    }  # fmt: skip
    # two trials run at once (-p 2): their calls interleave in any order
    assert sorted(x["api"] for x in web_server.requests) == ["brave", "brave", "page", "page"]
    srv.stop()
    seen = len(web_server.requests)

    # no model server, no search key, no proxy: the whole run from its folder
    r = clawrig_run(str(bench / "tasks"), "--replay", str(rec), "--web", "replay", "-o", str(rep),
                    env={})  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(web_server.requests) == seen  # no search and no page reached the network
    replayed = json.loads((rep / "summary_scripted_test.json").read_text())
    assert replayed["web"] == {
        "mode": "replay", "dir": str(rec), "miss": "error", "provider": None, "misses": 0
    }  # fmt: skip
    assert [(t["task_id"], t["score"], t["error"]) for t in replayed["tasks"]] == [
        (t["task_id"], t["score"], None) for t in recorded["tasks"]
    ]
    before, after = trial_files(rec), trial_files(rep)
    assert before == after  # transcripts, scores and web exchanges, trial by trial
    dialog = before["04_Search_Retrieval_task_1_release_date"]["dialog"]
    fetched = json.loads(next(m["content"] for m in dialog if m.get("name") == "web_fetch"))
    assert fetched["url"] == "http://tern.example/tern.html"
    assert "Released on 2026-03-02" in fetched["text"]

    # replayed against a web record without these searches: the search the model chose is a
    # tool error it sees and the trial is scored (its 0, never voided), the miss counted
    other = tmp_path / "other" / "t" / "trial"
    other.mkdir(parents=True)
    line = next(iter((next(rec.glob("*/*/" + WEB_RECORD_FILE))).read_text().splitlines()))
    (other / WEB_RECORD_FILE).write_text(line.replace("Tern 4.2 release", "something else") + "\n")
    shutil.copytree(rec / "web_blobs", tmp_path / "other" / "web_blobs")  # the bodies it names
    seen_tools: list[str] = []

    def gives_up(request: dict[str, Any]) -> Reply:
        tools = [m for m in request["messages"] if m.get("role") == "tool"]
        if not tools:
            return reply(tool_calls=[call("web_search", {"query": "Tern 4.2 release"})])
        seen_tools.append(tools[0]["content"])
        return reply("no date found")

    srv2 = scripted_server(responder=gives_up)
    args = ["--web", "replay", "--web-dir", str(tmp_path / "other"), "-m", "scripted/test"]
    r = clawrig_run(str(bench / "tasks"), *args, "-o", str(tmp_path / "miss"),
                    env={"SCRIPTED_BASE_URL": srv2.base_url})  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(web_server.requests) == seen
    assert (
        seen_tools
        == [
            "web_search: no recorded search for 'Tern 4.2 release': this run's web is a recording "
            "(--web replay)"
        ]
        * 2
    )
    missed = json.loads((tmp_path / "miss" / "summary_scripted_test.json").read_text())
    assert missed["web"]["misses"] == 2
    for row in missed["tasks"]:
        assert row["error"] is None and row["score"] == 0.0 and row["attempts"] == 1
    for result in (tmp_path / "miss").glob("*/*/result.json"):
        assert json.loads(result.read_text())["web_misses"] == 1


def test_the_summarys_web_dir_is_absolute_as_replayed_from(tmp_path, monkeypatch):
    """A --web-dir typed relative is recorded absolute, as ``replayed_from`` is (it was as
    typed, so the summary's two folders read differently: helper-204)."""
    from clawrig.spec.job import JobConfig
    from clawrig.web.service import web_summary

    (tmp_path / "rec").mkdir()
    monkeypatch.chdir(tmp_path)
    config = JobConfig(suite_path=tmp_path, web_dir=Path("rec"))
    config.trial.web = "replay"
    assert web_summary(config)["dir"] == str(tmp_path / "rec")
    config.trial.web = "corpus"
    assert web_summary(config)["dir"] == str(tmp_path / "rec")
