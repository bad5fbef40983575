"""Job and trial configuration, and the resume progress file.

The progress file follows DataClawBench (shared/reference/formats.md section 3):
``output/progress_<model>.json`` = {model, suite, runs, completed[{task_id, run_index, result}]}.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, StrictFloat, StrictInt, ValidationError, field_validator

from clawrig.choices import (
    DEFAULT_DISK_MB,
    DEFAULT_MEMORY_MB,
    MAX_RUNS,
    MAX_WORKERS,
    Executor,
    GraderMode,
    WebFlag,
    WebMiss,
    WebProvider,
)

__all__ = ["GraderMode", "JobConfig", "Progress", "ProgressEntry", "TrialConfig", "UnwrittenSpend"]


class TrialConfig(BaseModel):
    """How one trial runs. Times in seconds, money in USD, tokens as counts.

    ``model`` is the agent's model name (``provider/model``; ``none`` for oracle/nop);
    ``agent`` native | oracle | nop | openclaw[@VERSION]; ``sandbox`` bwrap | docker | local;
    ``grader`` auto (the task's own: programmatic, else judge), judge, exact, both;
    ``judge`` the judge model name (None: JUDGE_MODEL / exact fallback);
    ``environment`` auto | host | an environment name or spec file, ``image`` a local Docker
    image, ``warm_snapshots`` whether install lines of a warmup run once and are frozen
    (:mod:`clawrig.env`).
    """

    model: str = "none"
    agent: str = "native"
    sandbox: str = "bwrap"
    environment: str = "auto"
    image: str | None = None
    warm_snapshots: bool = True
    timeout_multiplier: float = 1.0
    max_turns: int = 100
    max_tokens_per_trial: int | None = None
    max_cost_usd_per_trial: float | None = None
    grader: GraderMode = "auto"
    judge: str | None = None
    judge_repeats: int = 1
    preamble: str | None = None
    tool_profile: str = "coding"
    web: WebFlag = "off"
    """off | live | record | replay | corpus (``on`` = live), for tasks that allow the web."""
    network: str = "none"
    """The agent's egress policy: none | registries | allow:<hosts> | open
    (:mod:`clawrig.egress.policy`)."""
    setup_network: str = "registries"
    """The egress policy while skills are copied and the warmup runs."""
    memory_mb: int = DEFAULT_MEMORY_MB
    max_processes: int = 512
    disk_mb: int = DEFAULT_DISK_MB
    """The trial's disk in MiB (:mod:`clawrig.sandbox.disk`): workspace, /root, /tmp and the
    writable system together; 0 = no disk of its own (only the per-file size limit)."""
    grader_timeout_s: float = 120.0
    call_timeout_s: float = 120.0
    """Seconds the sandbox's supervisor may take to answer (beyond an exec's own timeout)."""
    success_threshold: float = 1.0
    judge_cache: Path | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    def config_hash(self) -> str:
        """Short SHA-256 of the settings that change a trial's outcome."""
        keys = self.model_dump(mode="json", exclude={"judge_cache", "extra"})
        blob = json.dumps(keys, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def resume_settings(self) -> dict[str, Any]:
        """The settings of :meth:`config_hash` but the model, judge and agent (``--resume``
        compares those by name, before they are resolved), as JSON values: what a job's
        progress file records (:attr:`Progress.settings`) and a resume must match."""
        return self.model_dump(
            mode="json", exclude={"judge_cache", "extra", "model", "judge", "agent"}
        )


class JobConfig(BaseModel):
    """One job (``clawrig run``, or ``clawrig.Job(config).run()`` from Python): which tasks,
    how many runs each, parallelism, budget (USD), output folder, and where models come from.

    ``trial.model`` ``"none"`` (the default) means "not given": the job takes the replayed
    job's model, else ``DEFAULT_MODEL`` (environment, then ``env_file``/``./.env``);
    ``trial.judge`` None likewise takes the replayed judge, else ``JUDGE_MODEL``.
    ``root``: benchmark root for WildClawBench workspace paths; ``env_file``: the .env file
    (default ``./.env`` when present); ``replay``: a finished job's folder whose recorded model
    calls answer every call (no model server needed).
    """

    suite_path: Path
    suite: str = "all"
    categories: list[str] = Field(default_factory=list)
    runs: int = 1
    parallel: int = 1
    output: Path = Path("output")
    budget_usd: float | None = None
    max_attempts: int = 3
    resume: bool = False
    trial: TrialConfig = Field(default_factory=TrialConfig)
    root: Path | None = None
    env_file: Path | None = None
    replay: Path | None = None
    web_dir: Path | None = None
    """``--web replay``: the recorded job folder (default: ``--replay``'s); ``--web corpus``:
    the document collection."""
    web_miss: WebMiss = "error"
    """``--web replay``: what a request that was not recorded gets: error | live | empty."""
    web_provider: WebProvider = "brave"
    """``--web live|record``: the search provider (brave | tavily)."""
    executor: Executor = "local"
    """Where trials run: ``local`` (this process, ``parallel`` at once) or ``ray`` (the nodes
    of a Ray cluster, :mod:`clawrig.runner.executors.ray`; needs ``pip install clawrig[ray]``)."""
    ray_address: str | None = None
    """``--executor ray``: the cluster to join (``ray.init(address=...)``: ``auto``,
    ``HOST:PORT``, ``ray://HOST:PORT``); None starts a one-node cluster on this machine."""
    slots_per_node: int | None = Field(default=None, ge=1)
    """``--executor ray``: trials at once per node (None: the node's CPU count)."""
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    """``--executor local``: harness processes that run the trials (1: this one; more:
    :mod:`clawrig.runner.executors.processes`, each running its share of ``parallel``, so the
    harness uses more than one core)."""

    def replay_source(self) -> str | None:
        """The job folder ``--replay`` answers from, as an absolute path (what a job's progress
        file and summary record: :attr:`Progress.replay`), or None for a live job."""
        return str(self.replay.resolve()) if self.replay is not None else None


class ProgressEntry(BaseModel):
    task_id: str
    run_index: int
    result: str
    """The trial folder, relative to the job's output folder."""


class UnwrittenSpend(BaseModel):
    """What a trial's attempts spent when its latest attempt's folder could not be written (a
    full disk): ``usage`` a :class:`clawrig.spec.trial.Usage` as JSON (that attempt's
    ``spent()``: its earlier attempts' too). No folder records it, so the progress file does,
    for ``--resume``'s budget and totals."""

    task_id: str
    run_index: int = Field(ge=0)
    usage: dict[str, Any] = Field(default_factory=dict)

    @field_validator("usage")
    @classmethod
    def _counts(cls, usage: dict[str, Any]) -> dict[str, Any]:
        """Every value a finite number, 0 or more (helper-214: an infinite cost stopped a
        resumed job's budget at once, a NaN one was dropped)."""
        from clawrig.spec.trial import Usage  # (it imports this module)

        for key, value in usage.items():
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok or not math.isfinite(value) or value < 0:
                raise ValueError(f"{key}: must be a finite number, 0 or more, got {value!r}")
        try:  # (a count of 1.5 tokens was a traceback at --resume: helper-217)
            Usage.model_validate(usage)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err.get("loc", ()))
            raise ValueError(f"{where}: {err.get('msg', 'invalid')}") from None
        return usage


class Progress(BaseModel):
    """``output/progress_<model>.json``: written atomically after each finished trial."""

    model: str
    suite: str
    runs: StrictInt = Field(ge=1, le=MAX_RUNS)
    """Trials per task (``--runs``): a count of 1 to :data:`clawrig.choices.MAX_RUNS`, a JSON
    integer (helper-226: a hand-edited -1 finished a job with trials not run, 10^12 sat listing
    them, true was read as 1; helper-227: "1" and 1.0 were taken, a summary's refused)."""
    job_id: str = ""
    completed: list[ProgressEntry] = Field(default_factory=list)
    task_digests: dict[str, str] = Field(default_factory=dict)
    """Task id -> :meth:`clawrig.spec.task.Task.digest` of the tasks the job ran: ``--resume``
    refuses a suite whose tasks differ (empty in files written before it was recorded)."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """The job's trial settings (:meth:`TrialConfig.resume_settings`: turns, time multiplier,
    preamble, grader, caps ...): ``--resume`` with others refuses, naming them (empty in files
    written before they were recorded: not compared)."""
    agent: str = ""
    """The job's agent (``--agent``): ``--resume`` with another refuses (empty in files written
    before it was recorded: the summary beside it, when there is one, says)."""
    replay: str | None = None
    """The job folder ``--replay`` answered every model call from (absolute), None for a job
    that called its models: ``--resume`` refuses the other kind (a job is replayed or live as a
    whole, as its summary's ``replayed_from`` says). Absent from files written before it was
    recorded (not compared then)."""

    unwritten: list[UnwrittenSpend] = Field(default_factory=list)
    """Trials whose latest attempt spent on its model but left no folder (:class:`UnwrittenSpend`;
    helper-212: a full disk's attempts were dropped from a resumed job's budget and totals).
    Empty in files written before it was recorded."""

    elapsed_s: StrictFloat = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Wall time of the job so far, in seconds: its invocations' (the first run's and every
    ``--resume``'s) summed, each up to its latest write of this file; the time between them is
    not counted. 0 in files written before it was recorded."""

    def done(self) -> set[tuple[str, int]]:
        return {(c.task_id, c.run_index) for c in self.completed}


RL_JOB_ID = "rl"
"""The job id of an RL environment's episodes (:class:`clawrig.rl.episode.Environment`): trial
folders that no job's progress file or summary records."""

MODEL_SLUG_MAX_BYTES = 128
"""Longest :func:`model_slug`, in UTF-8 bytes: a file name is at most 255 bytes and the names
built from a slug add to it (a trial folder ``_<YYYYmmdd_HHMM>_<6 hex>`` and its temporary
``.tmp-...-<8>``, ``progress_...json``, an export's ``<job id>_...eval``)."""


def model_slug(model: str) -> str:
    """A model name made safe for a file name: ``openrouter/a/b`` -> ``openrouter_a_b``.
    A slug past :data:`MODEL_SLUG_MAX_BYTES` (a long checkpoint path served as the model name)
    is cut there and ends ``-<8 hex of the whole name's sha256>``, so names differing past the
    cut keep apart."""
    slug = "".join(ch if ch.isalnum() or ch in "-._" else "_" for ch in model)
    if len(slug.encode()) <= MODEL_SLUG_MAX_BYTES:
        return slug
    digest = hashlib.sha256(model.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    head = slug.encode()[: MODEL_SLUG_MAX_BYTES - len(digest) - 1]
    return f"{head.decode(errors='ignore')}-{digest}"


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))
