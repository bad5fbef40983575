"""Self-check (``clawrig verify`` part a): does the grader reproduce ``expected_reward``?

Two ways, both in a real sandbox:

- golden: the evaluator's ``GOLDEN_WORKSPACE`` is written to a fresh workspace, gt/ injected,
  the transcript (``GOLDEN_TRANSCRIPT`` when the evaluator has one, else the golden trajectory
  as OpenClaw entries) put at the session path, and the grader run;
- oracle: the golden trajectory is replayed through the real tools by the oracle agent on the
  initial workspace (a whole trial), then graded; the recorded tool results are compared with
  what replay produced (:func:`clawrig.verify.lint.replay_diff`).

A score matches when it is within :data:`TOLERANCE` of ``expected_reward``.
"""

from __future__ import annotations

import json
from pathlib import Path

from clawrig.choices import DEFAULT_MEMORY_MB
from clawrig.errors import ClawrigError
from clawrig.spec.layout import TrialPaths
from clawrig.spec.task import Task
from clawrig.spec.transcript import Transcript
from clawrig.spec.trial import Score
from clawrig.transcript import from_formatted_dialog
from clawrig.verify.lint import literal_assignment, replay_diff
from clawrig.verify.report import Finding
from clawrig.verify.sandboxed import content_bytes, grade_files, run_agent

TOLERANCE = 1e-6


def golden_transcript(task: Task) -> Transcript | str | None:
    """The golden rollout's transcript: the evaluator's ``GOLDEN_TRANSCRIPT`` (OpenClaw entries,
    returned as chat.jsonl text) when it has one, else the golden trajectory converted, else
    None."""
    source = task.grader.source or ""
    if "GOLDEN_TRANSCRIPT" in source:
        found = literal_assignment(source, "GOLDEN_TRANSCRIPT")
        if found is not None and isinstance(found[0], list):
            return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in found[0])
    if task.golden_dialog:
        try:
            return from_formatted_dialog(task.golden_dialog)
        except ClawrigError:
            return None
    return None


def compare(check: str, what: str, score: Score | None, expected: float | None) -> Finding:
    """One finding for a graded rollout compared with ``expected`` (within TOLERANCE)."""
    if score is None or score.error is not None or score.score is None:
        why = score.error if score is not None else "no score"
        return Finding(check=check, severity="error", message=f"grading {what} failed: {why}")
    value = score.score
    if expected is None:
        return Finding(
            check=check,
            severity="info",
            message=f"{what} scores {value:g} (no expected_reward to compare with)",
            score=value,
        )
    if abs(value - expected) > TOLERANCE:
        return Finding(
            check=check,
            severity="error",
            message=f"{what} scores {value:g} but expected_reward is {expected:g}",
            score=value,
        )
    return Finding(
        check=check,
        severity="info",
        message=f"{what} scores {value:g} = expected_reward",
        score=value,
    )


async def check_golden(
    task: Task,
    *,
    sandbox: str = "bwrap",
    memory_mb: int = DEFAULT_MEMORY_MB,
    work_dir: Path | None = None,
    timeout_multiplier: float = 1.0,
) -> tuple[float | None, list[Finding]]:
    """Grade the golden workspace in a sandbox; (score, findings). Nothing when the task has
    no golden workspace."""
    if task.golden_workspace is None:
        return None, []
    files = {rel: content_bytes(c) for rel, c in task.golden_workspace.items()}
    score = await grade_files(
        task,
        files,
        golden_transcript(task),
        sandbox=sandbox,
        memory_mb=memory_mb,
        work_dir=work_dir,
        timeout_multiplier=timeout_multiplier,
    )
    finding = compare("self_check.golden", "the golden workspace", score, task.expected_reward)
    finding.path = str(task.grader.origin.path) if task.grader.origin else None
    return (score.score if score.error is None else None), [finding]


async def check_oracle(
    task: Task,
    out_root: Path,
    initial: Path | None = None,
    *,
    sandbox: str = "bwrap",
    memory_mb: int = DEFAULT_MEMORY_MB,
    work_dir: Path | None = None,
    timeout_multiplier: float = 1.0,
) -> tuple[float | None, list[Finding]]:
    """Replay the golden trajectory with the oracle agent and grade it; (score, findings),
    including the replay diff warnings and, given the ``initial`` workspace (a folder), the
    golden end state's files the replay leaves otherwise (:func:`golden_drift`). Nothing when
    the task has no golden trajectory."""
    if not task.golden_dialog:
        return None, []
    if task.workspace.missing:
        return None, [
            Finding(
                check="self_check.oracle",
                severity="warning",
                message="oracle replay not run: the initial workspace is not present "
                f"({', '.join(map(str, task.workspace.missing))})",
            )
        ]
    result, transcript, folder = await run_agent(
        task,
        "oracle",
        out_root,
        sandbox=sandbox,
        memory_mb=memory_mb,
        work_dir=work_dir,
        timeout_multiplier=timeout_multiplier,
    )
    findings: list[Finding] = []
    if result.error is not None and (result.score is None or result.score.error is None):
        findings.append(
            Finding(
                check="self_check.oracle",
                severity="error",
                message=f"oracle replay failed ({result.error.kind} error in "
                f"{result.error.phase or '?'}): {result.error.message}",
            )
        )
        score_value = None
    else:
        findings.append(
            compare("self_check.oracle", "the oracle replay", result.score, task.expected_reward)
        )
        # a grader that failed on the replay gave no score (the trial counts it 0 for an agent,
        # but the column says what the grader gave: -, as golden's; helper-135)
        failed = result.score is None or result.score.error is not None
        score_value = None if failed else result.counted_score()
    findings += replay_diff(task, transcript)
    if result.error is None and initial is not None:
        findings += golden_drift(task, initial, TrialPaths(folder).end_state)
    return score_value, findings


def golden_drift(task: Task, initial: Path, end_state: Path, shown: int = 5) -> list[Finding]:
    """Warnings (``lint.golden_drift``) for each result file of the golden end state (new or
    changed against ``initial``: :func:`clawrig.verify.killer.result_files`) that the oracle
    replay's end state (``end_state``, the trial's end_state/ folder) lacks or holds otherwise:
    the golden and oracle columns then grade two different end states, and both may pass
    (helper-135: a GOLDEN_WORKSPACE edited after the trajectory was recorded passed). At most
    ``shown`` files are named."""
    from clawrig.verify.killer import result_files

    if task.golden_workspace is None:
        return []
    golden = {rel: content_bytes(c) for rel, c in task.golden_workspace.items()}
    drifted = []
    for rel in result_files(golden, initial):
        path = end_state / rel
        replayed = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        if replayed != golden[rel]:
            drifted.append(f"{rel} ({'not written' if replayed is None else 'other content'})")
    if not drifted:
        return []
    more = f" and {len(drifted) - shown} more" if len(drifted) > shown else ""
    return [
        Finding(
            check="lint.golden_drift",
            severity="warning",
            message=f"the oracle replay's end state differs from the golden end state in "
            f"{', '.join(drifted[:shown])}{more}: the golden and oracle columns grade "
            "different end states (was the golden end state or the trajectory edited alone?)",
        )
    ]
