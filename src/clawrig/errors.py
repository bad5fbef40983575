"""Typed errors. Every user-facing error renders as one line naming the file and the field.

Failure taxonomy (shared/DESIGN.md): an *agent* error counts against the model; an
*infrastructure* error (sandbox died, provider down after retries) is retried and never counted
as a model failure; a *grading* error is reported, never a silent 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError

    from clawrig.spec.trial import Usage


class ClawrigError(Exception):
    """Base class. ``str(err)`` is a single line fit to show a user without a traceback."""


class UserError(ClawrigError):
    """Bad input from the user: CLI flags, config files, model names. Exit code 2."""


class SummaryNotWritten(ClawrigError):
    """A job ran but its summary file could not be written (exit 1, as a job stopped with
    trials not run: not bad input): ``summary`` is what the file would have held, ``path``
    where (``clawrig run`` prints its table before the error's line)."""

    def __init__(self, message: str, summary: dict[str, Any], path: Path) -> None:
        super().__init__(message)
        self.summary = summary
        self.path = path


class InterruptedAfterJob(KeyboardInterrupt):
    """A Ctrl-C (``signum`` SIGINT) or SIGTERM that came after every trial of a job had ended,
    while its summary was written and its sandboxes and services stopped: held until then, so
    the job ended whole (helper-225: it cut the summary's writing, or said "interrupted" of a
    finished job with no table). ``summary`` is the job's, written; ``config`` the job's
    (``clawrig.spec.job.JobConfig``). ``clawrig run`` prints the job's table, then exits
    128 + ``signum``."""

    def __init__(self, summary: dict[str, Any], signum: int, config: Any) -> None:
        super().__init__(signum)
        self.summary = summary
        self.signum = signum
        self.config = config


def not_a_folder(label: str, path: Path) -> UserError:
    """The error for a folder argument ``label`` (``JOB_DIR`` ...) whose ``path`` is no folder:
    "no such folder", or a file given for one (helper-164: a file was "no such folder")."""
    if path.exists() or path.is_symlink():
        return UserError(f"{label}: {path} is not a folder")
    return UserError(f"{label}: no such folder: {path}")


def first_invalid(exc: ValidationError, top: str = "(the file)") -> tuple[str, str]:
    """(field, what) of a pydantic ValidationError's first error, for the one line: the
    field's path joined with ``.`` (``top`` for the object itself), and pydantic's message
    with how many more errors follow ("... (and 73 more)": a manifest with 74 wrong fields
    said "74 validation errors for DataManifest" and named none: helper-204)."""
    first = exc.errors()[0]
    field = ".".join(str(x) for x in first.get("loc", ())) or top
    more = exc.error_count() - 1
    return field, first.get("msg", "invalid") + (f" (and {more} more)" if more else "")


class TaskFormatError(UserError):
    """A task file that cannot be read: names the file, the field and, when known, the line."""

    def __init__(self, path: Path | str, field: str, message: str, line: int | None = None):
        self.path = Path(path)
        self.field = field
        self.line = line
        self.message = message
        loc = f"{self.path}:{line}" if line else str(self.path)
        super().__init__(f"{loc}: {field}: {message}")


class SetupError(ClawrigError):
    """The trial could not be set up (warmup line failed, service unhealthy, workspace missing)."""


class InfrastructureError(ClawrigError):
    """A failure of the harness or a provider, not of the model. Retried; never scored."""


class AttemptLost(InfrastructureError):
    """A trial attempt lost with the process that ran it (a ``--workers`` worker that died):
    ``spent`` is what it had spent (a :class:`clawrig.spec.trial.Usage`, set aside in
    ``_retried/``), or None when it recorded nothing."""

    def __init__(self, message: str, spent: Usage | None = None) -> None:
        super().__init__(message)
        self.spent = spent


class SandboxError(InfrastructureError):
    """A sandbox operation failed."""


class SandboxDied(SandboxError):
    """The sandbox (or its supervisor) exited while the trial still needed it.
    ``out_of_memory``: the kernel had killed processes of it for its memory limit (its
    cgroup's count), the supervisor perhaps."""

    def __init__(self, message: str = "", *, out_of_memory: bool = False) -> None:
        super().__init__(message)
        self.out_of_memory = out_of_memory


class CommandTimeout(SandboxError):
    """A sandbox command exceeded its wall-time limit; every process it started was killed."""


class ProviderError(InfrastructureError):
    """The model provider failed after retries (429/5xx/timeouts/dropped connections)."""


class ProviderRefused(ProviderError):
    """The provider refused one trial's request (a 4xx, or a 5xx marked ``x-should-retry:
    false``) after its model had answered earlier requests: the settings work, so this trial
    ends as an infrastructure error. Its message says what happened to the trial only; a job
    goes on (or, after a refusal of the key, account or model, starts no new trial:
    :func:`clawrig.llm.client.provider_stop`), does not retry it (the same request would be
    refused again), and ``--resume`` runs it again. ``status``: the HTTP status; ``detail``:
    the provider's own message."""

    retryable = False

    def __init__(
        self, message: str, *, status: int | None = None, detail: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail
        """The provider's own message of the refusal (its error body's), when it gave one."""


class ModelRequestError(UserError):
    """The provider refused the request (400/401/403/404, or a 5xx that says not to retry):
    fail fast with one clear line. ``status``: the HTTP status, when there was one;
    ``detail``: the server's own message (one line), when known."""

    def __init__(self, message: str, *, status: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class AgentFault(ClawrigError):
    """A failure whose cause lies in state the agent could touch (its end state, its
    transcript, its sandbox), e.g. a limit of its trial its doing exceeded: the trial's disk
    left full, a workspace too deep or with too many entries for the harness to list, a phase
    deadline missed while the harness handled what it left. An agent error that counts 0
    (DESIGN.md "blame follows control")."""


class TrialDeadline(ClawrigError):
    """A phase of the trial, or the trial as a whole, ran past its deadline
    (:class:`clawrig.runner.trial.TimeoutPlan`). ``phase``: the phase that was cut off;
    ``limit_s``: the limit in seconds."""

    def __init__(self, phase: str, limit_s: float, *, whole_trial: bool = False) -> None:
        self.phase = phase
        self.limit_s = limit_s
        self.whole_trial = whole_trial
        what = "the trial's deadline" if whole_trial else f"the {phase} phase's deadline"
        super().__init__(f"{what} of {limit_s:g} s passed in phase {phase}")


class BudgetExceeded(ClawrigError):
    """The job's or trial's spend reached its cap (USD or tokens)."""


class GradingError(ClawrigError):
    """A grader crashed, timed out, printed no JSON, or a judge stayed unparseable."""
