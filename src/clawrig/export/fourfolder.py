"""``clawrig export fourfolder``: graded trials of a job -> a four-folder sample set.

Layout and keys: shared/reference/fourfolder-spec.md (worked sample in
shared/examples/fourfolder/). Every graded trial (result.json with a score and no error) with
score >= ``min_score`` (and in ``categories`` when given) becomes one sample, ids ``000001``
upwards in (task id, run index, trial id) order:

- ``intent/NNNNNN.json``: id, name, category, tier (when the task has a level), prompt,
  expected_behavior, grading_criteria, timeout_seconds and its mock services (clawrig's
  ``services`` extension, :mod:`clawrig.services.declare`), from the task (re-loaded from
  the job's suite);
- ``datapoints/NNNNNN.json``: id, the trial's formatted_dialog (reasoning, tool_calls, tool
  results), its exact tool_schema, metadata (model, agent, job, trial, source task, scores,
  usage) and statistics (:func:`clawrig.transcript.dialog_statistics`: messages, turns, tool
  calls per tool, tokens);
- ``evaluators/evaluator_NNNNNN.py`` (:mod:`clawrig.export.evaluator`): the grader inlined,
  GOLDEN_WORKSPACE = the trial's end state (initial workspace + end_state/ changes - deleted
  files, + gt/ files when the grader reads gt), GOLDEN_TRANSCRIPT = the trial's chat.jsonl
  entries when the grader reads the transcript, EXPECTED_REWARD = the trial's score;
- ``reference_payloads/reference_payload_NNNNNN.json``: id, category, expected_reward, gt
  (path -> JSON value, or text when the file is not JSON or would not round-trip), and
  golden_workspace_files;
- ``workspaces/NNNNNN/``: the initial workspace, when the task's workspace is present;
- ``README.md``: where the set came from.

No host path is written: every output file is scanned for the job folder, the suite folder
and the scratch folder before the set is moved into place (:class:`ExportError` otherwise).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrig import __version__
from clawrig.errors import SetupError, UserError
from clawrig.export.evaluator import (
    evaluator_source,
    file_value,
    grader_body,
    reads_gt,
    reads_transcript,
)
from clawrig.export.job import UNREADABLE, ExportError, JobTrial, TaskResolver, find_trials
from clawrig.export.replay import deleted_by_replay, may_delete, recorded_deletions
from clawrig.runner.regrade import INCOMPLETE_END_STATE, end_state_left_out
from clawrig.runner.trial import END_STATE_MAX_BYTES
from clawrig.sandbox.workspace import materialise_workspace, read_tree
from clawrig.spec.task import ServiceSpec, Task, TaskFormat
from clawrig.tasks.fourfolder import file_names
from clawrig.tasks.text import dumps_json_text
from clawrig.transcript import dialog_statistics

DEFAULT_MIN_SCORE = 0.96


@dataclass
class ExportedSample:
    """One written sample: its new id and where it came from."""

    id: str
    task_id: str
    trial: str
    score: float
    notes: list[str] = field(default_factory=list)


@dataclass
class ExportReport:
    """What an export wrote and what it left out (``skipped``: trial -> reason)."""

    out: Path
    samples: list[ExportedSample] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    min_score: float = DEFAULT_MIN_SCORE


NO_END_STATE = "no end_state/ (its end state is gone)"
LINKED_END_STATE = "end_state/ is a link (not the end state the trial recorded)"
NOT_BEST = "another trial of its task scored higher, or as high and came first (--best-per-task)"


def _shown(category: str) -> str:
    """A category as a message names it: quoted when blank or holding a control character
    (helper-177: ``--category ""`` read "no trial in  (...)")."""
    return category if category.strip() and category.isprintable() else repr(category)


def select_trials(
    trials: Iterable[JobTrial],
    min_score: float,
    categories: Iterable[str] = (),
    *,
    need_end_state: bool = False,
    best_per_task: bool = False,
) -> tuple[list[JobTrial], dict[str, str]]:
    """(chosen trials, {trial: why skipped}): graded without error, score >= ``min_score``,
    category in ``categories`` (when any), and (``need_end_state``: a sample's golden files
    are its end state) an ``end_state/`` folder; with ``best_per_task``, of those only the
    highest-scoring trial of each task (the first in trial order among equals: a job's
    ``--runs`` or an RL group otherwise give one task's near-duplicates). Raises UserError
    when a category of ``categories`` is no trial's (a typo would otherwise only shrink the
    export)."""
    cats = set(categories)
    trials = list(trials)
    if cats:
        present = {t.result.category for t in trials}
        unknown = sorted(cats - present)
        if unknown:
            known = ", ".join(sorted(c for c in present if c)) or "none"
            raise UserError(
                f"--category: no trial in {', '.join(map(_shown, unknown))} (the job's "
                f"categories: {known})"
            )
    chosen: list[JobTrial] = []
    skipped: dict[str, str] = {}
    for t in trials:
        key = f"{t.result.task_id}/{t.result.trial_id}"
        if t.result.error is not None:
            skipped[key] = f"{t.result.error.kind} error: {t.result.error.message}"
        elif t.score is None:
            skipped[key] = "not graded"
        elif t.score < min_score:
            skipped[key] = f"score {t.score:g} < {min_score:g}"
        elif cats and t.result.category not in cats:
            skipped[key] = f"category {t.result.category or '-'} not selected"
        elif need_end_state and t.paths.end_state.is_symlink():
            # a job folder from elsewhere: what it links to is no end state of the trial's
            # (helper-189: a host folder's files were written into the exported evaluator)
            skipped[key] = LINKED_END_STATE
        elif need_end_state and not t.paths.end_state.is_dir():
            skipped[key] = NO_END_STATE
        elif need_end_state and (cut := end_state_left_out(t.result)) is not None:
            skipped[key] = cut  # (its golden end state would lack files the grader read)
        else:
            chosen.append(t)
    if best_per_task:
        best: dict[str, JobTrial] = {}
        for t in chosen:
            kept = best.get(t.result.task_id)
            if kept is None or (t.score or 0.0) > (kept.score or 0.0):
                best[t.result.task_id] = t
        for t in chosen:
            if best[t.result.task_id] is not t:
                skipped[f"{t.result.task_id}/{t.result.trial_id}"] = NOT_BEST
        chosen = [t for t in chosen if best[t.result.task_id] is t]
    return chosen, skipped


def skipped_counts(skipped: dict[str, str], min_score: float) -> str:
    """How many trials each reason of :func:`select_trials` (and :func:`find_trials`'
    unreadable ones) left out, as "N graded below --min-score X, M with an error, ...", or ""
    when none was."""
    below = sum(why.startswith("score ") for why in skipped.values())
    errored = sum(" error: " in why for why in skipped.values())
    ungraded = sum(why == "not graded" for why in skipped.values())
    other = sum(why.startswith("category ") for why in skipped.values())
    gone = sum(why == NO_END_STATE for why in skipped.values())
    incomplete = sum(why.startswith(INCOMPLETE_END_STATE) for why in skipped.values())
    linked = [key for key, why in skipped.items() if why == LINKED_END_STATE]
    not_best = sum(why == NOT_BEST for why in skipped.values())
    unread = [key for key, why in skipped.items() if why.startswith(UNREADABLE)]
    unreadable = len(unread)
    # the folders named (helper-175: "1 whose result.json cannot be read" said not which)
    named = ", ".join(unread[:3]) + (f" and {unreadable - 3} more" if unreadable > 3 else "")
    default = " (the default)" if min_score == DEFAULT_MIN_SCORE else ""
    parts = [
        f"{below} graded below --min-score {min_score:g}{default}" if below else "",
        f"{errored} with an error" if errored else "",
        f"{ungraded} not graded" if ungraded else "",
        f"{other} of other categories" if other else "",
        f"{gone} whose end_state/ is gone" if gone else "",
        f"{incomplete} whose end_state/ is incomplete (files its caps left out)"
        if incomplete
        else "",
        f"{len(linked)} whose end_state/ is a link: {', '.join(linked[:3])}" if linked else "",
        f"{not_best} not the best of their task (--best-per-task)" if not_best else "",
        f"{unreadable} whose result.json cannot be read: {named}" if unreadable else "",
    ]
    return ", ".join(p for p in parts if p)


def nothing_to_export(job_dir: Path, skipped: dict[str, str], min_score: float) -> UserError:
    """The one line when :func:`select_trials` chose nothing: how many trials each reason
    left out (:func:`skipped_counts`), so a job whose graded trials all scored under the bar
    says so."""
    why = skipped_counts(skipped, min_score) or "no trials"
    return UserError(f"{job_dir}: no graded trial to export ({why})")


def gt_files(task: Task) -> dict[str, bytes]:
    """The task's gt (relative path under gt/ -> bytes): its gt folder and inline gt files."""
    out: dict[str, bytes] = {}
    ws = task.workspace
    if ws.gt_dir is not None and Path(ws.gt_dir).is_dir():
        out.update(read_tree(Path(ws.gt_dir)))
    for rel, content in ws.gt_files.items():
        if content.base64 is not None:
            import base64

            out[rel] = base64.b64decode(content.base64)
        else:
            out[rel] = (content.text or "").encode("utf-8")
    return out


def payload_gt_value(rel: str, data: bytes) -> Any:
    """The reference payload's value for one gt file: the parsed JSON when the file is JSON
    that the four-folder reader writes back byte for byte, else the text. Raises ValueError
    for a binary file (the payload's gt holds JSON values or text only)."""
    text = data.decode("utf-8")  # UnicodeDecodeError is a ValueError
    if rel.endswith(".json"):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if not isinstance(value, str) and dumps_json_text(value) == text:
            return value
    return text


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def service_entry(spec: ServiceSpec) -> dict[str, Any]:
    """A task's service as an intent ``services`` entry (:mod:`clawrig.services.declare`),
    defaults left out: a workspace fixture file goes back to its path string."""
    entry: dict[str, Any] = {"name": spec.name}
    if spec.kind:
        entry["kind"] = spec.kind
    if spec.command:
        entry["command"] = spec.command
    entry["port"] = spec.port
    if spec.health_path != "/health":
        entry["health_path"] = spec.health_path
    fixtures: Any = spec.fixtures
    if isinstance(fixtures, dict) and set(fixtures) == {"$file"}:
        fixtures = fixtures["$file"]
    if fixtures:
        entry["fixtures"] = fixtures
    if spec.faults:
        entry["faults"] = spec.faults
    default_reset = f"/{spec.kind}/reset" if spec.command is None else None
    if spec.reset_path and spec.reset_path != default_reset:
        entry["reset_path"] = spec.reset_path
    return entry


def _intent(task: Task, sample_id: str) -> dict[str, Any]:
    intent: dict[str, Any] = {"id": sample_id, "name": task.name or task.id}
    intent["category"] = task.category
    if task.level:
        intent["tier"] = task.level
    intent["prompt"] = task.prompt
    intent["expected_behavior"] = task.expected_behavior
    intent["grading_criteria"] = list(task.grading_criteria)
    intent["timeout_seconds"] = int(round(task.timeout_seconds))
    if task.services:
        intent["services"] = [service_entry(s) for s in task.services]
    return intent


def _header(sample_id: str, task: Task, trial: JobTrial) -> str:
    r = trial.result
    return (
        f"Evaluator for sample {sample_id}: {task.name or task.id}. Standard library only.\n"
        f"Exported by clawrig {__version__} from job {r.job_id or '-'}, trial {r.trial_id} "
        f"(task {task.id}, model {r.model}, score {trial.score:g}).\n"
        "grade(workspace_path, transcript) -> dict of sub-scores and overall_score in [0, 1].\n"
        "Run as a script: materialises GOLDEN_WORKSPACE in a temp dir, grades it, compares "
        "with EXPECTED_REWARD."
    )


def _grader_source(task: Task) -> str:
    source = task.grader.source
    if not source:
        raise ExportError(f"{task.source}: task {task.id} has no programmatic grader to export")
    if task.format == TaskFormat.FOURFOLDER:
        try:
            return grader_body(source)
        except SyntaxError as exc:
            raise ExportError(f"{task.source}: grader: syntax error: {exc.msg}") from None
    return source


async def _export_one(
    trial: JobTrial,
    task: Task,
    sample_id: str,
    root: Path,
    scratch: Path,
    sandbox: str,
) -> ExportedSample:
    assert trial.score is not None
    sample = ExportedSample(
        id=sample_id,
        task_id=task.id,
        trial=f"{trial.result.task_id}/{trial.result.trial_id}",
        score=trial.score,
    )
    names = file_names(sample_id)
    dialog_file = trial.dialog()
    dialog = dialog_file["formatted_dialog"]
    schema = dialog_file.get("tool_schema") or []
    usage = trial.usage()
    grader_source = _grader_source(task)

    # the initial workspace, then the end state
    initial: dict[str, bytes] = {}
    if not task.workspace.missing:
        ws_dir = root / "workspaces" / sample_id
        try:
            materialise_workspace(task, ws_dir)
        except SetupError as exc:
            raise ExportError(f"task {task.id}: initial workspace: {exc}") from None
        initial = read_tree(ws_dir)
    else:
        sample.notes.append("initial workspace not present: workspaces/ folder not written")
    try:  # (nothing under a linked end_state/: read_tree; at most what a trial keeps there)
        changed = read_tree(trial.paths.end_state, END_STATE_MAX_BYTES)
    except OSError as exc:
        raise ExportError(f"trial {trial.result.trial_id}: end_state/: {exc}") from None
    deleted = recorded_deletions(trial.folder)
    if deleted is None:
        deleted = set()
        if initial and may_delete(dialog):
            deleted = await deleted_by_replay(
                task, dialog, sandbox=sandbox, tool_profile=task.tool_profile or "coding",
                work_dir=scratch,
            )  # fmt: skip
            if deleted:
                sample.notes.append(
                    f"deleted files found by replaying the trial: {', '.join(sorted(deleted))}"
                )
    end_state = {rel: data for rel, data in initial.items() if rel not in deleted}
    end_state.update(changed)
    gt = gt_files(task)
    if gt and reads_gt(grader_source):
        end_state.update({f"gt/{rel}": data for rel, data in gt.items()})
    golden = {rel: file_value(end_state[rel]) for rel in sorted(end_state)}
    transcript = trial.transcript_entries() if reads_transcript(grader_source) else None

    # the four files
    _write_json(root / names["intent"], _intent(task, sample_id))
    metadata = {
        "category": task.category,
        "model": trial.result.model,
        "agent": trial.result.agent,
        "job": trial.result.job_id,
        "trial": trial.result.trial_id,
        "run_index": trial.result.run_index,
        "source_task_id": task.id,
        "source_format": str(task.format),
        "reward": trial.score,
        "scores": {
            "score": trial.score,
            "subscores": trial.result.score.subscores if trial.result.score else {},
            "grader": trial.result.score.grader if trial.result.score else "",
        },
        "usage": usage.model_dump(mode="json"),
        "stop_reason": str(trial.result.stop_reason) if trial.result.stop_reason else None,
        "exported_by": f"clawrig {__version__}",
    }
    _write_json(
        root / names["datapoints"],
        {
            "id": sample_id,
            "formatted_dialog": dialog,
            "tool_schema": schema,
            "metadata": metadata,
            "statistics": dialog_statistics(dialog, usage),
        },
    )
    evaluator = root / names["evaluators"]
    evaluator.parent.mkdir(parents=True, exist_ok=True)
    evaluator.write_text(
        evaluator_source(
            sample_id=sample_id,
            header=_header(sample_id, task, trial),
            grader_source=grader_source,
            golden_workspace=golden,
            expected_reward=trial.score,
            golden_transcript=transcript,
        ),
        encoding="utf-8",
    )
    payload_gt: dict[str, Any] = {}
    for rel, data in sorted(gt.items()):
        try:
            payload_gt[rel] = payload_gt_value(rel, data)
        except ValueError:
            sample.notes.append(f"gt/{rel} is binary: left out of the reference payload's gt")
    _write_json(
        root / names["reference_payloads"],
        {
            "id": sample_id,
            "category": task.category,
            "expected_reward": trial.score,
            "gt": payload_gt,
            "golden_workspace_files": sorted(golden),
        },
    )
    if task.warmup:
        sample.notes.append("the task's warmup lines are not part of the four-folder format")
    return sample


def _readme(report: ExportReport, trials: list[JobTrial], min_score: float) -> str:
    jobs = sorted({t.result.job_id for t in trials if t.result.job_id})
    models = sorted({t.result.model for t in trials})
    lines = [
        "# Four-folder sample set exported by clawrig",
        "",
        f"{len(report.samples)} sample(s) from job(s) {', '.join(jobs) or '-'} "
        f"(model(s) {', '.join(models) or '-'}): graded trials with score >= {min_score:g}.",
        "Check it with `clawrig verify <this folder>`; run one evaluator's self-check with "
        "`python3 evaluators/evaluator_NNNNNN.py`.",
        "",
        "| id | source task | trial | score |",
        "|---|---|---|---|",
    ]
    lines += [f"| {s.id} | {s.task_id} | {s.trial} | {s.score:g} |" for s in report.samples]
    return "\n".join(lines) + "\n"


def _scan_host_paths(root: Path, forbidden: Iterable[Path]) -> None:
    patterns = []
    for p in forbidden:
        text = str(p)
        if len(text) > 1:
            patterns.append(re.compile(re.escape(text) + r"(?![\w.-])"))
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            try:
                text = path.read_bytes().decode("utf-8", errors="replace")
            except OSError:
                continue
            for pat in patterns:
                if pat.search(text):
                    rel = path.relative_to(root)
                    raise ExportError(
                        f"{rel}: holds the host path {pat.pattern.split('(?!')[0]!s}; "
                        "nothing was written"
                    )


async def export_fourfolder(
    job_dir: Path,
    out: Path,
    *,
    min_score: float = DEFAULT_MIN_SCORE,
    categories: Iterable[str] = (),
    suite: Path | None = None,
    sandbox: str = "bwrap",
    best_per_task: bool = False,
    checked: Callable[[], None] | None = None,
) -> ExportReport:
    """Write the job's graded trials as a four-folder set at ``out`` (see the module doc);
    ``best_per_task``: one sample per task, its best trial (:func:`select_trials`).
    ``checked``: called once the arguments are checked, before the job is read (the command's
    warnings about the job come after its refusals of bad arguments).

    Raises UserError when ``out`` exists and is not empty, when the job or its suite cannot be
    read, or when no trial qualifies; ExportError when a sample cannot be written. The set is
    built in a scratch folder beside ``out`` and moved into place only when whole.
    """
    job_dir, out = Path(job_dir), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"OUT: {out} exists and is not an empty folder")
    if not 0.0 <= min_score <= 1.0:
        raise UserError(f"--min-score: must be in [0, 1], got {min_score:g}")
    if checked is not None:
        checked()
    unreadable: dict[str, str] = {}
    trials = find_trials(job_dir, unreadable)
    chosen, skipped = select_trials(
        trials, min_score, categories, need_end_state=True, best_per_task=best_per_task
    )
    skipped |= unreadable
    if not chosen:
        raise nothing_to_export(job_dir, skipped, min_score)
    resolver = TaskResolver(job_dir, suite)
    tasks = [resolver.task_for(t) for t in chosen]
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    root = scratch / "set"
    root.mkdir()
    report = ExportReport(out=out, skipped=skipped, min_score=min_score)
    try:
        for n, (trial, task) in enumerate(zip(chosen, tasks, strict=True), start=1):
            sample = await _export_one(trial, task, f"{n:06d}", root, scratch, sandbox)
            report.samples.append(sample)
        (root / "README.md").write_text(_readme(report, chosen, min_score), encoding="utf-8")
        forbidden = {job_dir.resolve(), scratch.resolve(), out.resolve()}
        forbidden |= {r.parent if r.is_file() else r for r in resolver.suite_roots}
        _scan_host_paths(root, forbidden)
        if out.exists():
            out.rmdir()
        os.replace(root, out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report
