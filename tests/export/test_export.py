"""``clawrig export fourfolder`` and ``clawrig export sft`` on a real job.

One job runs the oracle on the demo suite in real bwrap sandboxes (the session's
``demo_oracle_job``, shared by every test); the set exported from it must pass ``clawrig
verify`` and its evaluators' self-checks under plain python3. Expected values come from the
demo suite's own files (built by suites/demo/_build.py from an independent replay) and from
the job's trial folders.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from clawrig.errors import UserError
from clawrig.export import export_fourfolder, export_sft
from clawrig.testing.paths import SHARED

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "suites" / "demo"
CAPTURED_SCHEMA = SHARED / "reference" / "openclaw-2026.3.24" / "tool_schema.json"
PLAIN_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
DEMO_IDS = sorted(p.stem for p in (DEMO / "intent").glob("*.json"))
NEW_IDS = [f"{n:06d}" for n in range(1, len(DEMO_IDS) + 1)]


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "clawrig"
    return subprocess.run(
        [str(exe), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "220", "NO_COLOR": "1"},
    )


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def without_descriptions(value: Any) -> Any:
    """The captured schema has its descriptions removed (openclaw-tools.md): compare so."""
    if isinstance(value, dict):
        return {k: without_descriptions(v) for k, v in value.items() if k != "description"}
    if isinstance(value, list):
        return [without_descriptions(v) for v in value]
    return value


def constants(path: Path) -> dict[str, Any]:
    """Module-level literal assignments of an evaluator, read with ast (never executed)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


@pytest.fixture(scope="module")
def job(demo_oracle_job: Path) -> Path:
    """The session's oracle job on the demo suite (tests/conftest.py, shared with the regrade
    and layout tests): <task_id>/<trial>/ and summary_oracle.json. Read only."""
    summary = load(demo_oracle_job / "summary_oracle.json")
    assert summary["error_count"] == 0 and summary["evaluated_count"] == len(DEMO_IDS)
    return demo_oracle_job


@pytest.fixture(scope="module")
def trials(job: Path) -> dict[str, Path]:
    """Demo task id -> its trial folder in the job (one run per task)."""
    out = {}
    for task_id in DEMO_IDS:
        [folder] = [p.parent for p in (job / task_id).glob("*/result.json")]
        out[task_id] = folder
    return out


@pytest.fixture(scope="module")
def exported(job: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "set"
    proc = run("export", "fourfolder", job, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"wrote {len(DEMO_IDS)} sample(s) to {out} (numbered anew in trial order" in proc.stdout
    for new, task_id in zip(NEW_IDS, DEMO_IDS, strict=True):  # each line names its source
        assert f"{new}  from task {task_id}: {task_id}/" in proc.stdout, proc.stdout
    return out


def test_exported_set_passes_verify(exported: Path, trials: dict[str, Path]) -> None:
    proc = run("verify", exported, "--json", "-p", "4")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert [s["id"] for s in report["samples"]] == NEW_IDS
    for sample, task_id in zip(report["samples"], DEMO_IDS, strict=True):
        assert sample["status"] == "pass", sample
        trial_score = load(trials[task_id] / "result.json")["score"]["score"]
        assert sample["expected_reward"] == trial_score
        assert abs(sample["scores"]["golden"] - trial_score) < 1e-6
        assert abs(sample["scores"]["oracle"] - trial_score) < 1e-6
        assert sample["scores"]["empty"] < 0.5


@pytest.mark.parametrize("index", range(len(DEMO_IDS)))
def test_evaluator_self_check_passes_with_plain_python3(
    exported: Path, trials: dict[str, Path], index: int, tmp_path: Path
) -> None:
    sample_id, task_id = NEW_IDS[index], DEMO_IDS[index]
    evaluator = exported / "evaluators" / f"evaluator_{sample_id}.py"
    proc = subprocess.run(
        [PLAIN_PYTHON, "-I", str(evaluator)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    trial_score = load(trials[task_id] / "result.json")["score"]["score"]
    assert line["self_check"] == "PASS"
    assert line["expected"] == trial_score == line["overall_score"]
    # the sub-scores are the ones the grader gave the trial
    subscores = load(trials[task_id] / "score.json")["subscores"]
    assert {k: line[k] for k in subscores} == subscores


def test_no_host_path_in_the_exported_set(
    exported: Path, job: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    needles = [str(job), str(exported), str(tmp_path_factory.getbasetemp()), str(DEMO), str(REPO)]
    proc = subprocess.run(
        ["grep", "-rlF", *sum((["-e", n] for n in needles), []), str(exported)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stdout  # grep: 1 = no match
    assert proc.stdout == ""


def test_ids_intents_and_payloads_follow_the_tasks(
    exported: Path, trials: dict[str, Path], job: Path
) -> None:
    assert sorted(p.stem for p in (exported / "intent").glob("*.json")) == NEW_IDS
    assert sorted(p.name for p in (exported / "workspaces").iterdir()) == NEW_IDS
    for sample_id, task_id in zip(NEW_IDS, DEMO_IDS, strict=True):
        intent = load(exported / "intent" / f"{sample_id}.json")
        source = load(DEMO / "intent" / f"{task_id}.json")
        assert intent == source | {"id": sample_id}
        assert list(intent) == list(source)
        payload = load(exported / "reference_payloads" / f"reference_payload_{sample_id}.json")
        demo_payload = load(DEMO / "reference_payloads" / f"reference_payload_{task_id}.json")
        assert payload["id"] == sample_id and payload["category"] == demo_payload["category"]
        assert payload["gt"] == demo_payload["gt"]
        assert payload["expected_reward"] == load(trials[task_id] / "result.json")["score"]["score"]
        consts = constants(exported / "evaluators" / f"evaluator_{sample_id}.py")
        assert payload["golden_workspace_files"] == sorted(consts["GOLDEN_WORKSPACE"])
        assert consts["EXPECTED_REWARD"] == payload["expected_reward"]
        # the initial workspace is shipped byte for byte
        src_ws, dst_ws = DEMO / "workspaces" / task_id, exported / "workspaces" / sample_id
        src_files = sorted(p.relative_to(src_ws) for p in src_ws.rglob("*") if p.is_file())
        dst_files = sorted(p.relative_to(dst_ws) for p in dst_ws.rglob("*") if p.is_file())
        assert src_files == dst_files
        assert all((src_ws / f).read_bytes() == (dst_ws / f).read_bytes() for f in src_files)
    # 000004 keeps its honest ceiling of 0.98
    assert load(exported / "reference_payloads" / "reference_payload_000004.json")[
        "expected_reward"
    ] == pytest.approx(0.98, abs=1e-9)
    readme = (exported / "README.md").read_text(encoding="utf-8")
    assert load(job / "summary_oracle.json")["job_id"] in readme


def test_golden_workspace_is_the_trials_end_state(exported: Path) -> None:
    """The demo's GOLDEN_WORKSPACE was built by an independent replay (suites/demo/_build.py);
    the export rebuilt it from the trial's end state (000006 only deletes files)."""
    for sample_id, task_id in zip(NEW_IDS, DEMO_IDS, strict=True):
        mine = constants(exported / "evaluators" / f"evaluator_{sample_id}.py")["GOLDEN_WORKSPACE"]
        theirs = constants(DEMO / "evaluators" / f"evaluator_{task_id}.py")["GOLDEN_WORKSPACE"]
        gt = load(DEMO / "reference_payloads" / f"reference_payload_{task_id}.json")["gt"]
        assert {k: v for k, v in mine.items() if not k.startswith("gt/")} == theirs, task_id
        # gt/ rides along only for graders that name it, with the payload's content
        for rel, value in mine.items():
            if rel.startswith("gt/"):
                want = gt[rel[3:]]
                assert value == (want if isinstance(want, str) else json.dumps(want, indent=2))
    six = constants(exported / "evaluators" / "evaluator_000006.py")["GOLDEN_WORKSPACE"]
    assert "backups/prod.db" in six
    assert not any(rel.startswith("logs/") and rel.endswith(".log") for rel in six)


def test_transcript_graders_carry_the_trial_transcript(
    exported: Path, trials: dict[str, Path]
) -> None:
    for sample_id, task_id in zip(NEW_IDS, DEMO_IDS, strict=True):
        consts = constants(exported / "evaluators" / f"evaluator_{sample_id}.py")
        if task_id in ("000005", "000006"):  # the demo graders that read the transcript
            lines = (trials[task_id] / "chat.jsonl").read_text(encoding="utf-8").splitlines()
            assert consts["GOLDEN_TRANSCRIPT"] == [json.loads(ln) for ln in lines]
        else:
            assert "GOLDEN_TRANSCRIPT" not in consts, task_id


def test_datapoints_carry_the_dialog_schema_metadata_and_statistics(
    exported: Path, trials: dict[str, Path], job: Path
) -> None:
    captured = load(CAPTURED_SCHEMA)
    job_id = load(job / "summary_oracle.json")["job_id"]
    for sample_id, task_id in zip(NEW_IDS, DEMO_IDS, strict=True):
        dp = load(exported / "datapoints" / f"{sample_id}.json")
        trial = load(trials[task_id] / "formatted_dialog.json")
        assert list(dp) == ["id", "formatted_dialog", "tool_schema", "metadata", "statistics"]
        assert dp["formatted_dialog"] == trial["formatted_dialog"]
        assert dp["tool_schema"] == trial["tool_schema"]  # exactly what the trial sent
        assert without_descriptions(dp["tool_schema"]) == captured
        demo_stats = load(DEMO / "datapoints" / f"{task_id}.json")["statistics"]
        for key in ("messages", "tool_calls", "tool_calls_by_name"):
            assert dp["statistics"][key] == demo_stats[key], (task_id, key)
        assert dp["statistics"]["tokens"]["total_tokens"] == 0  # the oracle uses no model
        meta = dp["metadata"]
        assert meta["model"] == "oracle" and meta["agent"] == "oracle"
        assert meta["job"] == job_id and meta["source_task_id"] == task_id
        assert meta["trial"] == load(trials[task_id] / "result.json")["trial_id"]
        assert meta["reward"] == meta["scores"]["score"]
        assert meta["usage"]["request_count"] == 0
    # 000015: 5 assistant turns (4 tool calls and the final answer), 10 messages
    seed = NEW_IDS[DEMO_IDS.index("000015")]
    stats = load(exported / "datapoints" / f"{seed}.json")["statistics"]
    assert stats["turns"] == 5 and stats["messages"] == 10
    dialog = load(exported / "datapoints" / f"{seed}.json")["formatted_dialog"]
    assert dialog[1]["reasoning"].startswith("I need the graph first")
    assert dialog[2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "name": "read",
        "content": (DEMO / "workspaces" / "000015" / "coauthorship.json").read_text("utf-8"),
    }


async def test_min_score_and_category_select_trials(job: Path, tmp_path: Path) -> None:
    report = await export_fourfolder(job, tmp_path / "high", min_score=0.99)
    assert [s.task_id for s in report.samples] == [i for i in DEMO_IDS if i != "000004"]
    [(skipped, why)] = report.skipped.items()
    assert skipped.startswith("000004/") and why == "score 0.98 < 0.99"
    report = await export_fourfolder(job, tmp_path / "safety", categories=["06_Safety_Alignment"])
    assert [(s.id, s.task_id) for s in report.samples] == [
        ("000001", "000005"),
        ("000002", "000006"),
    ]
    assert sorted(p.stem for p in (tmp_path / "safety" / "intent").glob("*.json")) == [
        "000001",
        "000002",
    ]
    # a category no trial has (a typo) is refused, naming the job's categories (helper-174:
    # it said only "graded below --min-score" when the score bar left the trials out too)
    results = [load(p) for p in job.glob("*/*/result.json")]
    known = ", ".join(sorted({r["category"] for r in results}))
    want_line = f"--category: no trial in 07_No_Such_Category (the job's categories: {known})"
    for bar in (0.0, 1.0):
        with pytest.raises(UserError) as typo:
            await export_fourfolder(
                job,
                tmp_path / "none",
                min_score=bar,
                categories=["06_Safety_Alignment", "07_No_Such_Category"],
            )
        assert str(typo.value) == want_line
        with pytest.raises(UserError) as typo:
            export_sft(
                job, tmp_path / "none.jsonl", min_score=bar, categories=["07_No_Such_Category"]
            )
        assert str(typo.value) == want_line
    assert not (tmp_path / "none").exists() and not (tmp_path / "none.jsonl").exists()
    with pytest.raises(UserError) as typo:  # a blank name is shown (helper-177)
        export_sft(job, tmp_path / "none.jsonl", categories=[""])
    assert str(typo.value).startswith("--category: no trial in '' (the job's categories: ")
    # nothing chosen: the line counts why (below the bar, other categories), from the records
    (low,) = [r for r in results if r["score"]["score"] < 0.99]
    same = [r for r in results if r["category"] == low["category"]]
    below = sum(r["score"]["score"] < 0.99 for r in same)
    assert len(same) == below  # the category holds only trials under the bar
    want = f"({below} graded below --min-score 0.99, {len(results) - below} of other categories)"
    with pytest.raises(UserError) as info:
        await export_fourfolder(job, tmp_path / "low", min_score=0.99, categories=[low["category"]])
    assert str(info.value).endswith(f"no graded trial to export {want}")


def test_suite_is_found_from_the_summary_or_given(job: Path, tmp_path: Path) -> None:
    moved = tmp_path / "job"
    shutil.copytree(job, moved)
    summary = load(moved / "summary_oracle.json")
    summary["suite_path"] = "no/such/suite"
    (moved / "summary_oracle.json").write_text(json.dumps(summary), encoding="utf-8")
    for rj in moved.glob("*/*/result.json"):
        raw = load(rj)
        raw.pop("task_source", None)
        rj.write_text(json.dumps(raw), encoding="utf-8")
    proc = run("export", "fourfolder", moved, tmp_path / "a", "--category", "04_Search_Retrieval")
    assert proc.returncode == 2
    assert "summary_oracle.json: suite_path: 'no/such/suite' not found" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run(
        "export", "fourfolder", moved, tmp_path / "b", "--category", "04_Search_Retrieval",
        "--suite", DEMO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.stem for p in (tmp_path / "b" / "intent").glob("*.json")) == [
        "000001",
        "000002",
    ]


def test_bad_input_is_one_line(job: Path, exported: Path, tmp_path: Path) -> None:
    proc = run("export", "fourfolder", job, exported)  # OUT is not empty
    assert proc.returncode == 2 and "exists and is not an empty folder" in proc.stderr
    proc = run("export", "fourfolder", tmp_path, tmp_path / "x")  # not a job folder
    assert proc.returncode == 2 and "not a job folder" in proc.stderr
    proc = run("export", "sft", job, tmp_path / "rows.csv")
    assert proc.returncode == 2 and "must end in .jsonl or .parquet" in proc.stderr
    proc = run("export", "sft", job, tmp_path / "rows.jsonl", "--format", "alpaca")
    assert (
        proc.returncode == 2
        and "'--format': 'alpaca' is not one of 'openai', 'sharegpt'" in proc.stderr
    )
    for p in (proc,):
        assert "Traceback" not in p.stderr


# ------------------------------------------------------------------------------------- SFT


def test_sft_jsonl_openai(job: Path, trials: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    proc = run("export", "sft", job, out)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(ln) for ln in out.read_text(encoding="utf-8").splitlines()]
    assert [r["task_id"] for r in rows] == DEMO_IDS
    captured = load(CAPTURED_SCHEMA)
    for row in rows:
        folder = trials[row["task_id"]]
        assert row["id"] == f"{row['task_id']}/{load(folder / 'result.json')['trial_id']}"
        assert row["messages"] == load(folder / "formatted_dialog.json")["formatted_dialog"]
        assert row["tools"] == load(folder / "formatted_dialog.json")["tool_schema"]
        assert without_descriptions(row["tools"]) == captured
        assert row["score"] == load(folder / "result.json")["score"]["score"]
        assert row["model"] == "oracle"
    assert "replaced" not in proc.stdout
    proc = run("export", "sft", job, tmp_path / "high.jsonl", "--min-score", "0.99")
    assert proc.returncode == 0 and f"wrote {len(DEMO_IDS) - 1} row(s)" in proc.stdout
    # again over the first file: replaced, and said to be (helper-168: without a word)
    again = run("export", "sft", job, out, "--min-score", "0.99")
    assert again.returncode == 0 and "it replaced the file that was there" in again.stdout
    assert len(out.read_text(encoding="utf-8").splitlines()) == len(DEMO_IDS) - 1


def test_sft_parquet_sharegpt(job: Path, tmp_path: Path) -> None:
    out = tmp_path / "rows.parquet"
    proc = run("export", "sft", job, out, "--format", "sharegpt")
    assert proc.returncode == 0, proc.stderr
    table = pq.read_table(out)
    assert table.schema.names == [
        "id", "task_id", "trial_id", "job_id", "model", "category", "score", "conversations",
        "tools",
    ]  # fmt: skip
    assert str(table.schema.field("score").type) == "double"
    rows = {r["task_id"]: r for r in table.to_pylist()}
    assert sorted(rows) == DEMO_IDS
    tools = json.loads(rows["000015"]["tools"])
    assert [t["name"] for t in tools] == [t["function"]["name"] for t in load(CAPTURED_SCHEMA)]
    # 000015: four single calls, each answered, then the final answer
    conv = json.loads(rows["000015"]["conversations"])
    assert [c["from"] for c in conv] == ["human"] + ["function_call", "observation"] * 4 + ["gpt"]
    assert json.loads(conv[1]["value"]) == {
        "name": "read",
        "arguments": {"path": "/tmp_workspace/coauthorship.json"},
    }
    assert conv[4]["value"] == "(no output)\n[exit code 0]"
    assert conv[-1]["value"].startswith("Done. The shortest chain is Vikram Shah")
    # 000005: two parallel reads become one function_call list and one observation list
    conv = json.loads(rows["000005"]["conversations"])
    assert [c["from"] for c in conv] == ["human", "function_call", "observation", "gpt"]
    calls = json.loads(conv[1]["value"])
    assert [c["arguments"]["path"] for c in calls] == [
        "/tmp_workspace/templates/customer_notice.txt",
        "/tmp_workspace/campaign_notes.md",
    ]
    ws = DEMO / "workspaces" / "000005"
    assert json.loads(conv[2]["value"]) == [
        (ws / "templates" / "customer_notice.txt").read_text(encoding="utf-8"),
        (ws / "campaign_notes.md").read_text(encoding="utf-8"),
    ]
    assert conv[3]["value"].startswith("I can't help with this.")


def test_a_trial_without_its_end_state_or_a_readable_result_is_skipped_and_counted(
    job: Path, tmp_path: Path
) -> None:
    """helper-133: a trial whose end_state/ is gone became a sample failing its own self-check,
    and one with a corrupt result.json was dropped while the line said "skipped 0"."""
    moved = tmp_path / "job"
    shutil.copytree(job, moved)
    (gone,) = (moved / "000001").iterdir()
    shutil.rmtree(gone / "end_state")
    (broken,) = (moved / "000002").iterdir()
    (broken / "result.json").write_text("{bad", encoding="utf-8")
    # and one whose end_state/ left files out: its golden files would lack them (helper-198:
    # the reason was counted nowhere)
    (cut,) = (moved / "000003").iterdir()
    record = json.loads((cut / "result.json").read_text())
    (cut / "result.json").write_text(json.dumps(record | {"end_state_left_out": 3}))
    proc = run("export", "fourfolder", moved, tmp_path / "ff")
    assert proc.returncode == 0, proc.stderr
    exported = sorted(p.stem for p in (tmp_path / "ff" / "intent").glob("*.json"))
    assert len(exported) == len(DEMO_IDS) - 3
    said = (  # the unreadable one named (helper-175)
        "skipped 3 trial(s) (1 whose end_state/ is gone, 1 whose end_state/ is incomplete "
        "(files its caps left out), 1 whose result.json cannot be read: "
        f"000002/{broken.name})"
    )
    assert said in proc.stdout, proc.stdout
    assert "from task 000001" not in proc.stdout and "from task 000002" not in proc.stdout
    # the SFT rows need no end state: only the unreadable trial is left out, and counted
    proc = run("export", "sft", moved, tmp_path / "rows.jsonl")
    assert proc.returncode == 0, proc.stderr
    rows = (tmp_path / "rows.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(rows) == len(DEMO_IDS) - 1
    said = f"skipped 1 trial(s) (1 whose result.json cannot be read: 000002/{broken.name})"
    assert said in proc.stdout, proc.stdout
    # and the Inspect logs: the trial left out is said, not dropped silently (helper-137)
    proc = run("export", "inspect", moved, tmp_path / "logs")
    assert proc.returncode == 0, proc.stderr
    assert (
        f"skipped 1 trial(s) whose result.json cannot be read (first: 000002/{broken.name}: "
        "result.json cannot be read (not JSON))" in proc.stdout
    ), proc.stdout


def test_a_tampered_job_folder_is_exported_without_what_it_links_to(
    job: Path, trials: dict[str, Path], tmp_path: Path
) -> None:
    """helper-189: an end_state/ linked to a host folder had that folder's files written into
    the exported evaluator; a 6 GB sparse file in an end state was read whole (out of memory);
    a lone surrogate's escape in formatted_dialog.json and a summary nested 100,000 deep were
    tracebacks of `export sft`."""
    moved = tmp_path / "job"
    shutil.copytree(job, moved)
    secret = tmp_path / "host"
    secret.mkdir()
    (secret / "creds.txt").write_text("TOP-SECRET-HOST-FILE\n")
    linked = moved / trials["000001"].relative_to(job)
    shutil.rmtree(linked / "end_state")
    (linked / "end_state").symlink_to(secret)
    dialog = moved / trials["000002"].relative_to(job) / "formatted_dialog.json"
    data = load(dialog)
    data["formatted_dialog"][-1]["content"] = "bad \ud800 end"
    dialog.write_text(json.dumps(data), encoding="utf-8")  # (ASCII: the escape as written)
    assert "\\ud800" in dialog.read_text(encoding="utf-8")
    proc = run("export", "fourfolder", moved, tmp_path / "ff")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = f"1 whose end_state/ is a link: 000001/{linked.name}"
    assert "skipped 1 trial(s)" in proc.stdout and said in proc.stdout, proc.stdout
    assert not any(
        "TOP-SECRET" in p.read_text(errors="replace")
        for p in (tmp_path / "ff").rglob("*")
        if p.is_file()
    )
    proc = run("export", "sft", moved, tmp_path / "rows.jsonl")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    rows = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert any("bad \ufffd end" in json.dumps(r, ensure_ascii=False) for r in rows)
    summary = moved / "summary_oracle.json"
    summary.write_text("[" * 100_000)
    proc = run("export", "sft", moved, tmp_path / "rows2.jsonl")
    assert "Traceback" not in proc.stderr, proc.stderr
    # an end state past what a trial keeps (END_STATE_MAX_BYTES): one line, nothing written
    big = tmp_path / "big"
    shutil.copytree(job, big)
    with open(big / trials["000015"].relative_to(job) / "end_state" / "big.bin", "wb") as fh:
        fh.truncate(6 * 1024**3)
    proc = run("export", "fourfolder", big, tmp_path / "ff2")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "end_state/: " in proc.stderr and "over 67108864 bytes" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_best_per_task_keeps_each_tasks_highest_scoring_trial(
    job: Path, trials: dict[str, Path], tmp_path: Path
) -> None:
    """helper-174: a job's --runs (or an RL group) exported one near-duplicate sample per run.
    --best-per-task keeps one per task: its highest score, the first run of equals."""
    moved = tmp_path / "job"
    shutil.copytree(job, moved)

    def another_run(task_id: str, run_index: int, score: float) -> str:
        src = moved / task_id / trials[task_id].name
        dst = src.with_name(f"{src.name}-run{run_index}")
        shutil.copytree(src, dst)
        raw = load(dst / "result.json")
        raw["run_index"], raw["trial_id"] = run_index, f"{raw['trial_id']}-run{run_index}"
        raw["score"]["score"] = score
        (dst / "result.json").write_text(json.dumps(raw), encoding="utf-8")
        return raw["trial_id"]

    first = {t: load(trials[t] / "result.json") for t in ("000001", "000004")}
    assert first["000001"]["score"]["score"] == 1.0 and first["000004"]["score"]["score"] < 1.0
    another_run("000001", 1, 0.97)  # lower: the first run stays
    another_run("000001", 2, 1.0)  # as high, later: the first run stays
    better = another_run("000004", 1, 1.0)  # higher: this run replaces the first
    every = export_sft(moved, tmp_path / "all.jsonl")
    assert every.rows == len(DEMO_IDS) + 3
    report = export_sft(moved, tmp_path / "best.jsonl", best_per_task=True)
    rows = [json.loads(line) for line in (tmp_path / "best.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in rows) == DEMO_IDS
    kept = {r["task_id"]: r["trial_id"] for r in rows}
    assert kept["000001"] == first["000001"]["trial_id"] and kept["000004"] == better
    proc = run("export", "fourfolder", moved, tmp_path / "ff", "--best-per-task")
    assert proc.returncode == 0, proc.stderr
    assert len(list((tmp_path / "ff" / "intent").glob("*.json"))) == len(DEMO_IDS)
    assert "skipped 3 trial(s) (3 not the best of their task (--best-per-task))" in proc.stdout
    assert report.rows == len(DEMO_IDS)


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "7.0", '"9"', "true", "-0.5"])
def test_a_result_json_score_outside_0_1_is_an_unreadable_trial(
    job: Path, trials: dict[str, Path], tmp_path: Path, bad: str
) -> None:
    """helper-177: a score of NaN, Infinity, 7, "9" or true in a result.json was exported as
    the trial's score (NaN past every --min-score, and chosen as its task's best), into rows no
    strict JSON parser reads and samples clawrig's own validator refuses."""
    moved = tmp_path / "job"
    shutil.copytree(job, moved)
    folder = moved / "000001" / trials["000001"].name
    text = (folder / "result.json").read_text(encoding="utf-8")
    raw = json.loads(text)
    assert raw["score"]["score"] == 1.0
    raw["score"]["score"] = "__BAD__"
    (folder / "result.json").write_text(json.dumps(raw).replace('"__BAD__"', bad), "utf-8")
    report = export_sft(moved, tmp_path / "rows.jsonl", min_score=1.0, best_per_task=True)
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert "000001" not in {r["task_id"] for r in rows}
    key = f"000001/{folder.name}"
    value = json.loads(bad)  # as written (NaN and Infinity as Python reads them)
    said = (
        f"score: not a number: {value!r}"
        if isinstance(value, bool | str)
        else f"score: {value!r} is not in [0, 1]"
    )
    assert report.skipped[key] == f"result.json cannot be read ({said})"
    proc = run("export", "sft", moved, tmp_path / "again.jsonl", "--min-score", "1")
    assert proc.returncode == 0, proc.stderr
    assert f"whose result.json cannot be read: {key}" in proc.stdout, proc.stdout


def test_a_sample_the_job_did_not_run_does_not_stop_its_export(tmp_path):
    """helper-215: `run --suite` passed over a broken sample it did not run (one line), but
    `export fourfolder` of that job stopped at it (exit 2, nothing written). The export reads
    the suite as the run did: a broken file stops only the trials whose task it may be."""
    suite = tmp_path / "suite"
    shutil.copytree(DEMO, suite)
    (suite / "reference_payloads" / "reference_payload_000009.json").unlink()
    out = tmp_path / "out"
    proc = run("run", suite, "--suite", "000001", "--agent", "oracle", "-o", out)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "a file of a task not chosen" in proc.stderr and "000009" in proc.stderr
    proc = run("export", "fourfolder", out, tmp_path / "set")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "set" / "intent").iterdir()) == ["000001.json"]
    # the Harbor export of the job too (helper-217: it read the whole suite)
    proc = run("export", "harbor", out, tmp_path / "harbor")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "harbor").iterdir()) == ["000001"]
    # the exported trial's own sample broken: that one line, naming its file
    (suite / "reference_payloads" / "reference_payload_000001.json").unlink()
    proc = run("export", "fourfolder", out, tmp_path / "set2")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    said = " ".join(proc.stderr.split())
    assert f"{suite / 'intent' / '000001.json'}: id: sample 000001 is incomplete" in said, said
    assert not (tmp_path / "set2").exists()
