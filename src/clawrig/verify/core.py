"""``clawrig verify PATH``: self-check, killer question and lint for every task or sample.

:func:`verify_path` reads a suite (any format :func:`clawrig.tasks.registry.load_suite`
reads: a four-folder set, WildClawBench task files, DataClawBench), keeps every problem the
reader found, then for each task runs, in real sandboxes:

a. self-check (:mod:`clawrig.verify.selfcheck`): the golden workspace graded, and the golden
   trajectory replayed by the oracle and graded, each compared with ``expected_reward``;
b. the killer question (:mod:`clawrig.verify.killer`): the empty rollout, and the golden end
   state with its result files removed, then corrupted, must score below ``threshold``;
c. lint (:mod:`clawrig.verify.lint`).

It returns a :class:`clawrig.verify.report.VerifyReport` (``ok`` False on any error).
"""

from __future__ import annotations

import asyncio
import math
import re
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from clawrig.choices import DEFAULT_MEMORY_MB, MAX_MEMORY_MB, MIN_MEMORY_MB
from clawrig.errors import ClawrigError, SetupError
from clawrig.leftovers import owned_tempdir, remove_tree
from clawrig.sandbox.workspace import materialise_workspace
from clawrig.spec.task import Task, ValidationIssue
from clawrig.tasks.registry import NO_TASK, load_suite, raise_first
from clawrig.verify import killer, lint, selfcheck
from clawrig.verify.report import Finding, SampleReport, VerifyReport

T = TypeVar("T")

DEFAULT_THRESHOLD = 0.5
"""The EigenData demo's killer-question threshold."""

_SAMPLE_ID = re.compile(r"(?<!\d)(\d{6})(?!\d)")

# Reader issues that the lint reports itself, with more detail.
_COVERED = {"imports"}
_COVERED_RANGE = {"expected_reward", "EXPECTED_REWARD"}


def _covered(issue: ValidationIssue) -> bool:
    if issue.field in _COVERED and "standard" in issue.message:
        return True
    return issue.field in _COVERED_RANGE and "[0, 1]" in issue.message


def _issue_finding(issue: ValidationIssue) -> Finding:
    return Finding(
        check="read",
        severity=issue.severity,
        message=f"{issue.field}: {issue.message}",
        path=str(issue.path),
        line=issue.line,
    )


def tool_schema_for_lint(task: Task) -> tuple[list[dict[str, Any]] | None, str]:
    """(the tool schema a task's trajectory is checked against, what it is): the datapoint's
    own ``tool_schema``, else the OpenClaw tool profile's; (None, ...) when neither is had."""
    if task.golden_tool_schema is not None:  # (an empty one too: it names no tool, helper-137)
        return task.golden_tool_schema, "datapoint's tool_schema"
    try:
        from clawrig.tools.catalog import tool_schema

        profile = task.tool_profile or "coding"
        return tool_schema(profile), f"{profile} tool profile"
    except Exception:  # the tool catalog is optional for lint
        return None, "tool schema"


async def verify_task(
    task: Task,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    sandbox: str = "bwrap",
    memory_mb: int = DEFAULT_MEMORY_MB,
    work_dir: Path,
    slots: asyncio.Semaphore | None = None,
    timeout_multiplier: float = 1.0,
) -> SampleReport:
    """Verify one task (see the module docstring). ``work_dir`` holds the trial folders and
    workspaces it makes; ``slots`` bounds the sandboxes running at once;
    ``timeout_multiplier`` scales the task's time limits and its grader's."""
    slots = slots or asyncio.Semaphore(4)
    report = SampleReport(
        id=task.id,
        name=task.name,
        category=task.category,
        source=str(task.source.path),
        expected_reward=task.expected_reward,
    )
    tdir = Path(tempfile.mkdtemp(prefix=f"{task.id}-", dir=work_dir))
    trials = tdir / "trials"
    trials.mkdir()

    # the initial workspace, materialised once for lint and the killer question
    initial: Path | None = None
    setup_findings: list[Finding] = []
    if not task.workspace.missing:
        initial = tdir / "initial"
        try:
            materialise_workspace(task, initial)
        except (SetupError, OSError) as exc:
            initial = None
            setup_findings.append(
                Finding(check="read", severity="error", message=f"workspace: {exc}")
            )

    async def bounded(make: Callable[[], Awaitable[T]]) -> T:
        async with slots:
            return await make()

    async def guarded(check: str, make: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await bounded(make)
        except ClawrigError as exc:
            return None, [Finding(check=check, severity="error", message=f"could not run: {exc}")]
        except Exception as exc:  # a harness bug must not hide the other samples' results
            message = f"could not run: {type(exc).__name__}: {exc}"
            return None, [Finding(check=check, severity="error", message=message)]

    kw: dict[str, Any] = {
        "sandbox": sandbox,
        "memory_mb": memory_mb,
        "work_dir": tdir,
        "timeout_multiplier": timeout_multiplier,
    }
    golden, oracle, empty, wrong = await asyncio.gather(
        guarded("self_check.golden", lambda: selfcheck.check_golden(task, **kw)),
        guarded(
            "self_check.oracle",
            lambda: selfcheck.check_oracle(task, trials / "oracle", initial, **kw),
        ),
        guarded("killer.empty", lambda: killer.check_empty(task, trials / "nop", threshold, **kw)),
        guarded("killer.removed", lambda: killer.check_wrong(task, initial, threshold, **kw)),
    )
    listing = lint.workspace_listing(initial) if initial is not None else None
    golden_files = list(task.golden_workspace) if task.golden_workspace is not None else None
    schema, schema_origin = tool_schema_for_lint(task)
    lint_findings = (
        lint.lint_prompt_paths(task, listing, golden_files)
        + lint.lint_gt_paths(task)
        + lint.lint_grade_returns(task)
        + lint.lint_expected_reward(task)
        + lint.lint_imports(task)
        + lint.lint_tool_schema(task, schema, schema_origin)
    )

    for name, (score, findings) in (("golden", golden), ("oracle", oracle), ("empty", empty)):
        if findings or score is not None:
            report.scores[name] = score
    wrong_scores, wrong_findings = wrong
    report.scores.update(wrong_scores or {})
    grader_file = str((task.metadata.get("files") or {}).get("evaluators") or task.source.path)
    for f in empty[1] + wrong_findings:  # the grader's checks name its file (helper-206)
        if f.check.startswith("killer.") and f.path is None:
            f.path = grader_file
    report.findings = (
        setup_findings + golden[1] + oracle[1] + empty[1] + wrong_findings + lint_findings
    )
    exp = task.expected_reward
    if exp is not None and 0.0 <= exp < threshold:  # (a grader scoring 0 for all passes)
        report.add(
            "killer.threshold",
            "warning",
            f"expected_reward {exp:g} is below --threshold {threshold:g}: the killer question "
            "(wrong rollouts must score below the threshold) cannot tell a wrong rollout from "
            "the golden one",
        )
    if task.golden_workspace is None and not task.golden_dialog:
        report.add(
            "self_check.golden",
            "info",
            "no golden workspace nor trajectory: self-check not applicable (graders only)",
        )
    shutil.rmtree(tdir, ignore_errors=True)
    return report


async def verify_path(
    path: Path | str,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    sandbox: str = "bwrap",
    memory_mb: int = DEFAULT_MEMORY_MB,
    parallel: int = 4,
    root: Path | str | None = None,
    work_dir: Path | None = None,
    timeout_multiplier: float = 1.0,
    on_start: Callable[[list[Task]], None] | None = None,
    on_sample: Callable[[SampleReport], None] | None = None,
    on_report: Callable[[VerifyReport], None] | None = None,
) -> VerifyReport:
    """Verify every task under ``path``; returns the report (never raises for a bad sample:
    problems become findings). Raises UserError when ``path`` does not exist, ``threshold``
    is outside (0, 1], ``memory_mb`` outside the CLI's range, or ``sandbox`` is docker for
    tasks using the built-in mock services (:func:`clawrig.services.lifecycle.docker_refusal`).
    ``memory_mb``: each sandbox's memory limit in MiB (``--memory-mb``: it also holds what a
    grader writes to /tmp). ``parallel`` bounds the sandboxes running at once; ``root`` is the
    benchmark root for WildClawBench workspaces; ``timeout_multiplier`` (> 0) scales every
    task's time limits and its grader's (``--timeout-multiplier``). ``on_start`` is called
    with the tasks read before any is verified, ``on_sample`` with each sample's report as it
    is done (a grader that hangs holds its sample up to its time limit: the caller can say
    so, and show progress), ``on_report`` with the report once the tasks are read: each
    sample's report is added to its ``samples`` as it is done, so a caller stopped by a
    signal can still say what was verified (``clawrig verify`` does; it sets
    ``interrupted``). Raises UserError for a multiplier not above 0, too."""
    from clawrig.errors import UserError

    if not 0.0 < threshold <= 1.0:
        raise UserError(f"--threshold: must be in (0, 1], got {threshold:g}")
    if not (math.isfinite(timeout_multiplier) and timeout_multiplier > 0):
        raise UserError(f"--timeout-multiplier: must be above 0, got {timeout_multiplier:g}")
    if not MIN_MEMORY_MB <= memory_mb <= MAX_MEMORY_MB:  # (the CLI's range, for the API)
        raise UserError(
            f"--memory-mb: must be in [{MIN_MEMORY_MB}, {MAX_MEMORY_MB}] MiB, got {memory_mb}"
        )
    suite = load_suite(path, root)
    if not suite.tasks:
        # a path whose files are no tasks (a job's output) is bad input: one line, exit 2, as
        # clawrig run says it (helper-223: a warning per file, an empty table, exit 1)
        raise_first([i for i in suite.issues if i.severity == "error" and NO_TASK in i.message])
    if sandbox == "docker":  # refused before any sandbox starts, as clawrig run refuses it
        from clawrig.services.lifecycle import docker_refusal

        if refusal := docker_refusal(suite.tasks):
            raise UserError(refusal)
    report = VerifyReport(
        path=str(path),
        format=str(suite.format) if suite.format else None,
        threshold=threshold,
        sandbox=sandbox,
        memory_mb=memory_mb,
        timeout_multiplier=timeout_multiplier,
    )
    owners: dict[Path, str] = {}
    for task in suite.tasks:
        owners[Path(task.source.path)] = task.id
        for file in (task.metadata.get("files") or {}).values():
            owners[Path(file)] = task.id
        if task.grader.origin is not None:
            owners[Path(task.grader.origin.path)] = task.id
    by_id: dict[str, list[Finding]] = {}
    for issue in suite.issues:
        if _covered(issue):
            continue
        owner = owners.get(Path(issue.path))
        if owner is None and suite.format is not None and str(suite.format) == "fourfolder":
            m = _SAMPLE_ID.search(Path(issue.path).name)
            owner = m.group(1) if m else None
        if owner is None:
            report.suite_findings.append(_issue_finding(issue))
        else:
            by_id.setdefault(owner, []).append(_issue_finding(issue))
    if not suite.tasks and not suite.issues:
        report.suite_findings.append(
            Finding(check="read", severity="error", message="no tasks found", path=str(path))
        )

    slots = asyncio.Semaphore(max(1, parallel))
    # owned: a verify killed with SIGKILL leaves its trials' mounted disks below it, which the
    # next harness's sweep unmounts and removes (a plain temp folder was never swept)
    work = owned_tempdir("verify", work_dir)

    async def one(task: Task) -> None:
        sample = await verify_task(
            task,
            threshold=threshold,
            sandbox=sandbox,
            memory_mb=memory_mb,
            work_dir=work,
            slots=slots,
            timeout_multiplier=timeout_multiplier,
        )
        # (with what reading it found: the status on_sample sees is the report's)
        sample.findings = by_id.pop(sample.id, []) + sample.findings
        report.samples.append(sample)
        if on_sample is not None:
            on_sample(sample)

    known = {t.id for t in suite.tasks}
    for sample_id in sorted(by_id.keys() - known):  # samples that could not be read at all
        report.samples.append(SampleReport(id=sample_id, findings=by_id.pop(sample_id)))
    report.task_count = len(suite.tasks) + len(report.samples)
    if on_report is not None:
        on_report(report)
    if on_start is not None:
        on_start(suite.tasks)
    try:
        await asyncio.gather(*(one(t) for t in suite.tasks))
    finally:
        remove_tree(work)
        report.samples.sort(key=lambda s: s.id)
    return report


def static_lint(task: Task) -> list[Finding]:
    """The checks of ``verify``'s lint that need no sandbox: the trajectory read against the
    tool schema (:func:`lint.lint_tool_schema`), the gt files the grader names
    (:func:`lint.lint_gt_paths`) and a grade() that returns nothing
    (:func:`lint.lint_grade_returns`). ``tasks validate`` runs them too, so a sample whose calls
    name a tool outside its schema, or carry arguments that are not JSON (helper-135), or whose
    grader reads a gt file the task lacks (helper-190), fails validate as it fails verify.
    Info findings left out."""
    schema, origin = tool_schema_for_lint(task)
    found = (
        lint.lint_tool_schema(task, schema, origin)
        + lint.lint_gt_paths(task)
        + lint.lint_grade_returns(task)
    )
    return [f for f in found if f.severity != "info"]
