"""The killer question (``clawrig verify`` part b): does the grader reward a wrong rollout?

Source: the EigenData WildClawBench demo's verification ("a wrong or empty rollout must fail",
shared/reference/formats.md section 2). Three rollouts, each graded in a real sandbox, must
score below the threshold (default 0.5):

- empty: the nop agent on the untouched initial workspace; its transcript is the prompt and
  the answer "done" (a whole trial, warmup included, so WildClawBench tasks with graders only
  are covered);
- removed: the golden end state with its result files removed;
- corrupted: the golden end state with each result file replaced by ``corrupted\\n``.

Result files are the golden end-state files (outside gt/) that are absent from, or different
in, the initial workspace; when the initial workspace is unknown, the golden files under
``results/``. The removed and corrupted rollouts carry the "done" transcript.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from clawrig.choices import DEFAULT_MEMORY_MB
from clawrig.spec.task import Task, Workspace
from clawrig.spec.trial import ErrorKind, Score, TrialError
from clawrig.verify.report import Finding
from clawrig.verify.sandboxed import content_bytes, done_transcript, grade_files, run_agent

CORRUPTED = b"corrupted\n"

WRONG = "grader rewards a wrong rollout"


def result_files(golden: Mapping[str, bytes], initial: Path | None) -> list[str]:
    """Golden end-state files the rollout produced: absent from or different in ``initial``
    (a folder), gt/ excluded; with no initial workspace, the golden files under results/."""
    out = []
    for rel, data in sorted(golden.items()):
        if rel == "gt" or rel.startswith("gt/"):
            continue
        if initial is None:
            if rel.startswith("results/"):
                out.append(rel)
            continue
        path = initial / rel
        if not path.is_file() or path.read_bytes() != data:
            out.append(rel)
    return out


def limit_hit(score: Score | None, error: TrialError | None = None) -> bool:
    """True when the grader was killed for the sandbox's memory limit (``--memory-mb``:
    ``details["out_of_memory"]``), or the clean room died of it while grading (the kernel may
    kill its supervisor instead of the grader: a CI run saw it; the trial's ``error``
    ``out_of_memory``, not its message, which can hold what the agent wrote): the check could
    not run."""
    if score is not None and score.details.get("out_of_memory"):
        return True
    return error is not None and error.phase in ("gt_inject", "grading") and error.out_of_memory


def judge(check: str, what: str, score: Score | None, threshold: float) -> Finding:
    """The finding for one wrong rollout's score against ``threshold``. A grader that fails
    on it is a warning (failing may be its way to refuse a wrong end state), except one the
    sandbox's memory limit killed: then the check did not run (an error, :func:`limit_hit`)."""
    if score is None or score.score is None or score.error is not None:
        why = score.error if score is not None else "no score"
        return Finding(
            check=check,
            severity="error" if limit_hit(score) else "warning",
            message=f"the grader fails on {what}: {why}",
        )
    if score.score >= threshold:
        return Finding(
            check=check,
            severity="error",
            message=f"{WRONG}: {what} scores {score.score:g} (threshold {threshold:g})",
            score=score.score,
        )
    return Finding(
        check=check,
        severity="info",
        message=f"{what} scores {score.score:g} < {threshold:g}",
        score=score.score,
    )


async def check_empty(
    task: Task,
    out_root: Path,
    threshold: float,
    *,
    sandbox: str = "bwrap",
    memory_mb: int = DEFAULT_MEMORY_MB,
    work_dir: Path | None = None,
    timeout_multiplier: float = 1.0,
) -> tuple[float | None, list[Finding]]:
    """The empty rollout: a nop-agent trial, graded; (score, findings)."""
    findings: list[Finding] = []
    run_task = task
    if task.workspace.missing:
        ws = task.workspace
        gt_dir = ws.gt_dir if ws.gt_dir is not None and Path(ws.gt_dir).is_dir() else None
        run_task = task.model_copy(
            update={"workspace": Workspace(gt_dir=gt_dir, gt_files=ws.gt_files), "warmup": []}
        )
        findings.append(
            Finding(
                check="killer.empty",
                severity="warning",
                message="workspace data not present: the empty rollout ran on an empty "
                "workspace without warmup",
            )
        )
    result, _, _ = await run_agent(
        run_task,
        "nop",
        out_root,
        sandbox=sandbox,
        memory_mb=memory_mb,
        work_dir=work_dir,
        timeout_multiplier=timeout_multiplier,
    )
    what = 'the empty rollout (nop agent, untouched workspace, final answer "done")'
    if result.error is not None and result.error.kind not in (ErrorKind.GRADING,):
        # the sandbox's memory limit (--memory-mb) stopped the check: not verified (an error,
        # as for the removed and corrupted rollouts: judge); any other failure on an untouched
        # workspace may be the grader's own way to refuse it (a warning)
        hit = limit_hit(result.score, result.error)
        if hit:
            message = f"{what} could not be graded: {result.error.message}"
        elif result.error.phase == "grading":  # it ran; its grader failed on it (helper-135)
            message = f"the grader fails on {what}: {result.error.message}"
        else:
            message = (
                f"the empty rollout could not run ({result.error.kind} error in "
                f"{result.error.phase or '?'}): {result.error.message}"
            )
        findings.append(
            Finding(
                check="killer.empty",
                severity="error" if hit else "warning",
                message=message,
            )
        )
        return None, findings
    finding = judge("killer.empty", what, result.score, threshold)
    findings.append(finding)
    return finding.score, findings


async def check_wrong(
    task: Task,
    initial: Path | None,
    threshold: float,
    *,
    sandbox: str = "bwrap",
    memory_mb: int = DEFAULT_MEMORY_MB,
    work_dir: Path | None = None,
    timeout_multiplier: float = 1.0,
) -> tuple[dict[str, float | None], list[Finding]]:
    """The removed and corrupted rollouts of the golden end state; ({name: score}, findings).
    Nothing when the task has no golden workspace."""
    if task.golden_workspace is None:
        return {}, []
    golden = {rel: content_bytes(c) for rel, c in task.golden_workspace.items()}
    results = result_files(golden, initial)
    if not results:
        return {}, [
            Finding(
                check="killer.removed",
                severity="info",
                message="the golden rollout writes no result files: the removed and corrupted "
                "rollouts are not defined (the empty rollout covers it)",
            )
        ]
    listed = ", ".join(results)
    transcript = done_transcript(task)
    scores: dict[str, float | None] = {}
    findings: list[Finding] = []
    removed = {rel: data for rel, data in golden.items() if rel not in results}
    score = await grade_files(
        task,
        removed,
        transcript,
        sandbox=sandbox,
        memory_mb=memory_mb,
        work_dir=work_dir,
        timeout_multiplier=timeout_multiplier,
    )
    f = judge("killer.removed", f"the golden end state without its result files ({listed})",
              score, threshold)  # fmt: skip
    scores["removed"] = f.score
    findings.append(f)
    corrupted = dict(golden) | {rel: CORRUPTED for rel in results}
    score = await grade_files(
        task,
        corrupted,
        transcript,
        sandbox=sandbox,
        memory_mb=memory_mb,
        work_dir=work_dir,
        timeout_multiplier=timeout_multiplier,
    )
    f = judge("killer.corrupted", f"the golden end state with corrupted result files ({listed})",
              score, threshold)  # fmt: skip
    scores["corrupted"] = f.score
    findings.append(f)
    return scores, findings
