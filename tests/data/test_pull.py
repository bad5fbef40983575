"""``clawrig pull`` end to end: the real huggingface_hub client (in a ``clawrig`` process)
against the loopback Hub of hf_helpers.py, then validation and verification of the pulled
four-folder set, the manifest, resuming, and one-line errors."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hf_helpers import COMMIT, LFS_THRESHOLD, SAMPLES

from clawrig.data.manifest import MANIFEST_NAME, check_data, drift_line
from clawrig.data.pull import layout_for
from clawrig.data.sources import parse_source
from clawrig.errors import UserError

CLAWRIG = str(Path(sys.executable).with_name("clawrig"))


def pull(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), **(env or {})}
    return subprocess.run(
        [CLAWRIG, "pull", *args, "--no-progress"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=240,
    )


def run(out: Path, suite: Path) -> subprocess.CompletedProcess:
    """``clawrig run`` with the oracle agent on one sample of ``suite`` (wide terminal)."""
    args = [CLAWRIG, "run", str(suite), "--agent", "oracle", "--suite", "000001", "-o", str(out)]
    env = {**os.environ, "COLUMNS": "400"}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=240)


def test_pull_lays_out_validates_verifies_and_writes_a_manifest(hub, demo_dir, tmp_path) -> None:
    dest = tmp_path / "data"
    # --memory-mb: each verify sandbox's limit, as verify's (helper-127: pull had none)
    r = pull(tmp_path, "eigendata/wildclaw", "--to", str(dest), "--memory-mb", "256")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "validate: 2 task(s), 0 error(s)" in r.stdout
    assert "verify: 2 pass, 0 warn, 0 fail" in r.stdout
    assert f"run it: clawrig run {dest / 'wildclaw'}" in r.stdout
    # exactly the included files, byte for byte; the other folder and README not pulled
    want = {
        f"wildclaw/{p.relative_to(demo_dir).as_posix()}": p.read_bytes()
        for p in demo_dir.rglob("*")
        if p.is_file() and any(s in str(p.relative_to(demo_dir)) for s in SAMPLES)
    }
    want["wildclaw/big.bin"] = bytes(range(256)) * 40
    got = {
        p.relative_to(dest).as_posix(): p.read_bytes()
        for p in dest.rglob("*")
        if p.is_file() and ".cache" not in p.parts and p.name != MANIFEST_NAME
    }
    assert got == want
    # large files came the LFS way: from the "CDN" the Hub redirected to, by SHA-256
    assert sorted(hub.downloads("/cdn/")) == sorted(
        f"/cdn/{hashlib.sha256(b).hexdigest()}" for b in want.values() if len(b) >= LFS_THRESHOLD
    )
    manifest = json.loads((dest / MANIFEST_NAME).read_text())
    assert manifest["source"] == "hf://datasets/jindidi/eigendata-demo-data@main"
    assert manifest["commit"] == COMMIT and manifest["revision"] == "main"
    assert manifest["include"] == ["wildclaw/*"] and manifest["suite"] == "wildclaw"
    assert {p: e["sha256"] for p, e in manifest["files"].items()} == {
        p: hashlib.sha256(b).hexdigest() for p, b in want.items()
    }
    check = check_data(dest / MANIFEST_NAME, dest / "wildclaw")
    assert check.matches is True and check.files == len(want)
    assert drift_line(check) is None

    # a job on the pulled set carries the manifest's source, commit and digest in its summary
    r = run(tmp_path / "out1", dest / "wildclaw")
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads((tmp_path / "out1" / "summary_oracle.json").read_text())["data"]
    assert data["source"] == manifest["source"] and data["commit"] == COMMIT
    assert data["matches"] is True and data["files"] == len(want)
    assert (
        data["files_sha256"]
        == hashlib.sha256(
            "".join(f"{p} {hashlib.sha256(want[p]).hexdigest()}\n" for p in sorted(want)).encode()
        ).hexdigest()
    )
    assert "data differs" not in r.stderr

    # drift: one file edited -> the job says so in one line, and its summary records it
    intent = dest / "wildclaw" / "intent" / "000001.json"
    intent.write_text(intent.read_text().replace("Expense", "Expanse"))
    r = run(tmp_path / "out2", dest / "wildclaw")
    assert r.returncode == 0, r.stdout + r.stderr
    notes = [x for x in r.stderr.splitlines() if "data differs" in x]
    assert notes == [
        f"note: data differs from its manifest {dest / MANIFEST_NAME} "
        f"(hf://datasets/jindidi/eigendata-demo-data@main, commit {COMMIT[:12]}): 1 changed, "
        "0 missing, 0 added (first: wildclaw/intent/000001.json); `clawrig pull` again to "
        "restore it"
    ]
    data = json.loads((tmp_path / "out2" / "summary_oracle.json").read_text())["data"]
    assert data["matches"] is False and data["changed"] == ["wildclaw/intent/000001.json"]

    # one removed, one added too
    (dest / "wildclaw" / "evaluators" / "evaluator_000002.py").unlink()
    (dest / "wildclaw" / "intent" / "000099.json").write_text("{}")
    check = check_data(dest / MANIFEST_NAME, dest / "wildclaw")
    assert (check.changed, check.missing, check.added) == (
        ["wildclaw/intent/000001.json"],
        ["wildclaw/evaluators/evaluator_000002.py"],
        ["wildclaw/intent/000099.json"],
    )
    line = drift_line(check)
    assert line is not None and "\n" not in line
    assert "1 changed, 1 missing, 1 added (first: wildclaw/intent/000001.json)" in line

    # a rerun resumes: only what is missing or changed is downloaded again, then it matches
    (dest / "wildclaw" / "intent" / "000099.json").unlink()
    before = len(hub.downloads())
    r = pull(tmp_path, "eigendata/wildclaw@" + COMMIT, "--to", str(dest), "--no-verify")
    assert r.returncode == 0, r.stdout + r.stderr
    # only the removed and the edited file were fetched again (both large: from the CDN)
    redo = ("wildclaw/evaluators/evaluator_000002.py", "wildclaw/intent/000001.json")
    assert all(len(want[p]) >= LFS_THRESHOLD for p in redo)
    assert sorted(hub.downloads()[before:]) == sorted(
        f"/cdn/{hashlib.sha256(want[p]).hexdigest()}" for p in redo
    )
    assert intent.read_bytes() == want["wildclaw/intent/000001.json"]
    check = check_data(dest / MANIFEST_NAME, dest / "wildclaw")
    assert check.matches is True, check


def test_missing_private_and_unknown_revision_are_one_line_errors(hub, tmp_path) -> None:
    from hf_helpers import Dataset

    r = pull(tmp_path, "hf://datasets/nobody/nothing", "--to", str(tmp_path / "a"))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "clawrig: error: hf://datasets/nobody/nothing: no such dataset, or it is private "
        "(set HF_TOKEN if it is private)"
    ]
    hub.datasets["team/secret"] = Dataset({"tasks/a.md": b"x"}, COMMIT, private_token="hf_good")
    r = pull(tmp_path, "hf://datasets/team/secret", "--to", str(tmp_path / "b"))
    assert r.returncode == 2 and "it is private (set HF_TOKEN" in r.stderr
    r = pull(
        tmp_path,
        "hf://datasets/team/secret",
        "--to",
        str(tmp_path / "b"),
        env={"HF_TOKEN": "hf_bad"},
    )
    assert r.returncode == 2 and "your HF_TOKEN cannot read it" in r.stderr
    r = pull(tmp_path, "hf://datasets/team/secret", "--to", str(tmp_path / "b"), "--no-verify",
             env={"HUGGING_FACE_HUB_TOKEN": "hf_good"})  # fmt: skip
    assert (tmp_path / "b" / "tasks" / "a.md").read_bytes() == b"x", r.stdout + r.stderr
    r = pull(tmp_path, "eigendata@nope", "--to", str(tmp_path / "c"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "hf://datasets/jindidi/eigendata-demo-data@nope: no such revision" in r.stderr
    r = pull(tmp_path, "eigendata", "--include", "nothing/*", "--to", str(tmp_path / "d"))
    assert r.returncode == 2 and "--include: nothing/* matched no file" in r.stderr
    # its verify on the local sandbox runs one at a time, as verify's (helper-128): refused
    # before anything is downloaded
    r = pull(tmp_path, "eigendata/wildclaw", "--to", str(tmp_path / "e"), "--sandbox", "local")
    assert r.returncode == 2 and not (tmp_path / "e").exists()
    assert "--parallel: the local sandbox runs one trial at a time" in r.stderr
    assert not any(".Traceback" in x for x in (r.stdout, r.stderr))


def test_sources_and_layouts() -> None:
    s = parse_source("wildclawbench@v1.3")
    assert (s.repo_id, s.revision, s.include) == ("internlm/WildClawBench", "v1.3", ())
    s = parse_source("dataclawbench")
    assert (s.repo_id, s.revision) == ("GTML-LAB/DataClaw", "main")
    s = parse_source("hf://datasets/jindidi/eigendata-demo-data@abc/wildclaw")
    assert (s.repo_id, s.revision, s.include) == (
        "jindidi/eigendata-demo-data",
        "abc",
        ("wildclaw/*",),
    )
    assert parse_source("eigendata/wildclaw", ["wildclaw/intent/*"]).include == (
        "wildclaw/intent/*",
    )
    with pytest.raises(UserError, match="unknown source 'wildclaw'"):
        parse_source("wildclaw")
    with pytest.raises(UserError, match="only dataset paths"):
        parse_source("hf://models/a/b")
    assert layout_for(["01_Productivity_Flow/task_1/exec/a.txt", "02_Code/t/gt/b"]) == "workspace"
    assert layout_for(["workspace/01_X/t/exec/a"]) == ""
    assert layout_for(["database/x.csv", "qa_gold/cat/1.json"]) == "assets"
    assert layout_for(["wildclaw/intent/000001.json"]) == ""


def test_dataclaw_and_wildclaw_data_are_laid_out_where_the_readers_look(hub, tmp_path) -> None:
    from hf_helpers import Dataset

    from clawrig.testing.paths import SHARED

    assets = SHARED / "data" / "dataclawbench" / "assets"
    files = {  # published without the assets/ folder: database/ and qa_gold/ at the top
        p.relative_to(assets).as_posix(): p.read_bytes()
        for sub in ("database", "qa_gold")
        for p in sorted((assets / sub).rglob("*"))
        if p.is_file()
    }
    hub.datasets["GTML-LAB/DataClaw"] = Dataset(files, COMMIT)
    dest = tmp_path / "dc"
    r = pull(tmp_path, "dataclawbench", "--to", str(dest))
    assert r.returncode == 0, r.stdout + r.stderr
    gold = len(list((assets / "qa_gold").glob("*/*.json")))
    assert f"validate: {gold} task(s), 0 error(s)" in r.stdout
    assert "verify:" not in r.stdout  # no expected rewards: nothing to verify
    pulled = [p for p in (dest / "assets").rglob("*") if p.is_file() and ".cache" not in p.parts]
    assert {p.relative_to(dest / "assets").as_posix() for p in pulled} == set(files)
    manifest = json.loads((dest / MANIFEST_NAME).read_text())
    assert manifest["layout"] == "assets" and manifest["suite"] == ""
    assert set(manifest["files"]) == {f"assets/{p}" for p in files}

    ws = {"01_Productivity_Flow/task_1_echo/exec/input.txt": b"task 1\n",
          "01_Productivity_Flow/task_1_echo/gt/expected.txt": b"ok-1\n"}  # fmt: skip
    hub.datasets["internlm/WildClawBench"] = Dataset(ws, COMMIT)
    dest = tmp_path / "wc"
    r = pull(tmp_path, "wildclawbench", "--to", str(dest))
    assert r.returncode == 0, r.stdout + r.stderr
    for rel, data in ws.items():
        assert (dest / "workspace" / rel).read_bytes() == data
    assert f"no task files in this data: run the benchmark's tasks with --root {dest}" in r.stdout


def test_a_manifest_with_wrong_fields_names_the_first_and_counts_the_rest(tmp_path) -> None:
    """A hand-written manifest with wrong fields says which (it said "74 validation errors
    for DataManifest" and named none: helper-204)."""
    from clawrig.data.manifest import read_manifest
    from clawrig.errors import UserError

    path = tmp_path / "clawrig-data.json"
    path.write_text(json.dumps({"source": "hf://x/y", "repo": "x/y", "files": {"a": 1}}))
    with pytest.raises(UserError) as err:
        read_manifest(path)
    # required and missing: repo_id, revision, commit; files.a is no {size, sha256} entry
    assert str(err.value) == (
        f"{path}: not a clawrig data manifest: repo_id: Field required (and 3 more)"
    )
