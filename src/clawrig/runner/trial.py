"""One trial's lifecycle (:class:`Trial`): sandbox up, workspace and services, agent, agent
stopped, gt in, grading, results written; each phase timed; every time limit from one
:class:`TimeoutPlan`. Run, re-grade (:mod:`clawrig.runner.regrade`), verify
(:mod:`clawrig.verify.sandboxed`) and export replay (:mod:`clawrig.export.replay`) all go
through :class:`Trial`: it is the only place a task's sandbox is started. The trial folder is
written to a temporary name and renamed, so it is either whole or absent (the unit of resume).

Folder: ``<output>/<task_id>/<model>_<YYYYmmdd_HHMM>_<6 hex>/``, its files named and described in
:mod:`clawrig.spec.layout` (DataClawBench's layout, formats.md section 3, plus result.json and
end_state/).

Failures are typed (shared/DESIGN.md), and blame follows control: what the agent could cause is
an agent error that counts 0 (its sandbox dying under it, an end state over a cap, a grader that
crashes or hangs on what it left); infrastructure errors (the clean room failing to start, a
provider down after retries, on the harness's own evidence) are marked retryable and never
scored; setup errors and grading errors (the task's grader cannot run at all) are recorded; a
refused model request (:class:`clawrig.errors.ModelRequestError`) before the model answered any
request of the job propagates to stop the job with one line (after, it ends only its trial:
:class:`clawrig.errors.ProviderRefused`). Such a refusal (but one of the key, account or
model before the trial's first answer, which stops new trials as it is), or any refusal by the
judge, is followed by the harness's own plain request (:func:`_answers_probe`): answered, the
refusal was of what the agent put in the request (graded as it stands after the trial's first
answer, or the agent's 0; before it, that trial only ends); refused too, the provider is
broken (infrastructure, no new trial starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import errno
import functools
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
import traceback
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from clawrig import __version__
from clawrig.agents import Agent, AgentContext, AgentLimits, create_agent
from clawrig.agents.preamble import preamble_for
from clawrig.choices import DISK_RESERVE_BYTES
from clawrig.egress.trial import TrialNetwork
from clawrig.env.system import (
    SetupNetwork,
    grader_on_system,
    prepare_system,
    resolve_environment,
)
from clawrig.errors import (
    AgentFault,
    BudgetExceeded,
    InfrastructureError,
    ModelRequestError,
    ProviderError,
    ProviderRefused,
    SandboxDied,
    SetupError,
    TrialDeadline,
    UserError,
)
from clawrig.grading.answers import check_answer, combine
from clawrig.grading.judge import judge_answer
from clawrig.grading.judge_proxy import (
    JudgeProxy,
    grader_may_call_judge,
    judge_proxy,
    upstream_endpoint,
)
from clawrig.grading.process import grade_process
from clawrig.grading.programmatic import run_grader
from clawrig.jsonl import JSONL_LIMIT, jsonl_objects
from clawrig.leftovers import owned_tempdir, remove_tree, scratch_dir
from clawrig.llm.base import ChatModel
from clawrig.llm.client import (
    MAX_REPLY_BYTES,
    PROBE,
    PROBE_REPLY_BYTES,
    PROMPTS_REFUSED,
    SETTINGS_REFUSALS,
    OpenAIChatModel,
    ProviderRetriesExhausted,
    RetryPolicy,
    has_answered,
    mark_refused,
    note_first_refusal,
    provider_answers,
)
from clawrig.llm.gateway import (
    CAP_STOPS,
    JOB_BUDGET_REFUSAL,
    Gateway,
    GatewayDoor,
    GatewayLease,
    GatewayRefusal,
    ResponseCache,
)
from clawrig.llm.gateway.replay import read_records
from clawrig.llm.providers import ModelEndpoint
from clawrig.llm.stalls import RequestWatch, probe_s, stall_limit_s, watching
from clawrig.sandbox import Bind, Limits, Sandbox, SandboxConfig, create_sandbox
from clawrig.sandbox.channel import HarnessChannel
from clawrig.sandbox.client import run_to_end
from clawrig.sandbox.disk import TrialDisk
from clawrig.sandbox.endstate import (
    EndState,
    EndStateCaps,
    EndStateRejected,
    scan,
    settle,
    tree_of,
)
from clawrig.sandbox.paths import PATHS
from clawrig.sandbox.pool import Ahead, PoolEntry, WarmPool
from clawrig.sandbox.pyenv import GradingEnvStage, ensure_env
from clawrig.sandbox.workspace import (
    gt_size,
    inject_gt,
    install_skills,
    materialise_workspace,
    run_warmup,
)
from clawrig.services import (
    audit_file,
    audit_text,
    audits_from_streams,
    fetch_audits,
    has_fixture_files,
    read_fixture_files,
    restart_services,
    service_binds,
    start_services,
)
from clawrig.sizes import format_bytes
from clawrig.spec.job import TrialConfig, model_slug
from clawrig.spec.layout import (
    TMP_PREFIX,
    JobPaths,
    TrialPaths,
    json_text,
    json_text_reusing,
    model_json_text,
    read_record,
    read_regular,
    umask_mode,
    unfinished_trial_name,
)
from clawrig.spec.process import ProcessScore
from clawrig.spec.task import GraderKind, Task
from clawrig.spec.transcript import Transcript
from clawrig.spec.trial import (
    ErrorKind,
    HarnessWaits,
    PooledSandbox,
    Score,
    ScoreFile,
    StopReason,
    TrialError,
    TrialResult,
    Usage,
)
from clawrig.tools.base import ToolContext, WebPolicy
from clawrig.transcript import (
    dumps_openclaw_jsonl,
    from_formatted_dialog,
    from_openclaw_entries,
    openclaw_entries_from_jsonl,
    to_formatted_dialog,
)
from clawrig.waits import WaitClock, in_thread, slot, watch_loop
from clawrig.web.service import WebService, web_session

END_STATE_MAX_BYTES = 64 * 1024 * 1024
"""Bytes of changed files kept in a trial folder's ``end_state/`` (and of ``task_output/``)."""
END_STATE_MAX_FILES = 10_000
"""Files kept in a trial folder's ``end_state/`` (and in ``task_output/``): an agent leaving
99,000 empty files cost two minutes of copying and 200,000 files in the job's folder."""
DROPPED_RECORDED = 1_000
"""Entries of a trial folder's ``end_state_dropped.json`` (the shallowest first)."""
DROPPED_LOGGED = 20
"""Of those, the ones the trial's log names (beside their count)."""
AUDIT_DEST = "/run/clawrig-audit"
"""Where the services' audit channel is bound in the agent's sandbox (sealed before it runs)."""
VERDICT_DEST = "/run/clawrig-verdict"
"""Where the grader's verdict channel is bound in the clean room."""
TRIAL_OVERHEAD_S = 900.0
"""Seconds a trial may take beyond its agent and grader limits (sandbox start, services,
warmup, gt, collection) before its sandbox is stopped (:class:`TimeoutPlan`)."""
AGENT_PHASES = ("agent", "kill", "collect")
"""Phases in which a dead sandbox is the agent's doing (it had the sandbox to itself)."""


@dataclass
class TrialServices:
    """Shared, job-level things a trial may use: the agent's and the judge's models."""

    model: ChatModel | None = None
    judge: ChatModel | None = None
    work_dir: Path | None = None
    """Where trial workspaces are made (default: the system temp folder)."""
    sandbox_starts: asyncio.Semaphore | None = None
    """Limits how many sandboxes start at once (the batch runner sets it)."""
    grading_slots: asyncio.Semaphore | None = None
    """Limits how many trials grade at once (graders are CPU-heavy)."""
    hooks: dict[str, Any] = field(default_factory=dict)
    gateway: Gateway | None = None
    """The job's model gateway (started): the trial's model calls go through it (counted,
    capped, recorded in model_calls.jsonl, replayable) and graders reach a judge through it."""
    judge_cache: ResponseCache | None = None
    """``--judge-cache``: recorded judge replies that answer graders' repeated judge calls."""
    setup_network: SetupNetwork | None = None
    """The network of the sandbox that makes a task's warm snapshot (None: loopback only)."""
    web: WebService | None = None
    """The job's web (``--web``: live, record, replay, corpus; see :mod:`clawrig.web`)."""
    pool: WarmPool | None = None
    """The job's warm pool (:mod:`clawrig.sandbox.pool`): the agent's sandbox and the clean
    room are taken started from it (None: every sandbox starts cold)."""
    log_line: str | None = None
    """A last line for every trial's agent.log, written before its folder's rename (a
    ``--workers`` process says which one ran the trial: :data:`clawrig.runner.executors.
    processes.WORKER_LOG_LINE`)."""
    no_subagents: str | None = None
    """Why the agent may not start sub-agents (``sessions_spawn`` then answers with an error
    saying so: a step-driven RL episode, whose one conversation is the trainer's:
    :mod:`clawrig.rl.bridge`); None: it may."""
    environments: dict[tuple[str, ...], Any] = field(default_factory=dict)
    """Environments resolved for this job's trials (:func:`resolve_environment` by sandbox,
    environment, image and task format): read once, not per trial (~8 ms of YAML each)."""


def trial_folder_name(model: str, when: dt.datetime | None = None) -> str:
    """``<model>_<YYYYmmdd_HHMM>_<6 hex>`` (DataClawBench's per-run folder name)."""
    when = when or dt.datetime.now()
    return f"{model_slug(model)}_{when:%Y%m%d_%H%M}_{secrets.token_hex(3)}"


def names_a_trial_of(name: str, model: str) -> bool:
    """Whether folder name ``name`` is one :func:`trial_folder_name` gives ``model``'s trials,
    or such a folder set aside in ``_retried/`` (:func:`move_to_retried`:
    ``<task>__<name>``, ``-N`` when taken); not another model's whose slug starts the same."""
    slug = re.escape(model_slug(model))
    return re.search(rf"(?:^|__){slug}_\d{{8}}_\d{{4}}_[0-9a-f]{{6}}(?:-\d+)?$", name) is not None


DISK_RESERVE_INODES = 256
"""Files and folders the agent must leave free on its disk (:meth:`Trial.check_disk`; its bytes:
:data:`clawrig.choices.DISK_RESERVE_BYTES`)."""
MANIFEST_MAX_ENTRIES = 100_000
"""Entries (files, folders, links, others) the harness lists in a workspace; more is an agent
error after the agent ran (a setup error in a task's initial workspace)."""
MANIFEST_MAX_DEPTH = 128
"""Folder depth the harness lists in a workspace; deeper is handled like too many entries."""


def manifest_caps() -> EndStateCaps:
    """The caps of every listing of a workspace (:data:`MANIFEST_MAX_ENTRIES`,
    :data:`MANIFEST_MAX_DEPTH`; :class:`EndStateCaps` for paths and bytes)."""
    return EndStateCaps(max_depth=MANIFEST_MAX_DEPTH, max_entries=MANIFEST_MAX_ENTRIES)


def _manifest(
    root: Path, *, known: Mapping[str, str] | None = None, deadline: float | None = None
) -> dict[str, str]:
    """Relative path -> ``"<size>:<sha256>"`` of every regular file under ``root`` (links not
    followed, FIFOs and devices skipped; :func:`clawrig.sandbox.endstate.scan`, with ``known``
    and ``deadline`` as there). Raises :class:`clawrig.errors.AgentFault` past
    :func:`manifest_caps` or the deadline."""
    return scan(root, caps=manifest_caps(), known=known, deadline=deadline).files


def _shallow_first(rel: str) -> tuple[int, str]:
    """Sort key of the copies under caps: shallow files first (``results/out.txt`` before the
    thousands in ``results/m/``), then by path."""
    return rel.count("/"), rel


def _copy_changed(
    ws: Path,
    before: dict[str, str],
    after: EndState,
    dest: Path,
    always: Collection[str] = (),
    before_dirs: Collection[str] = (),
) -> tuple[list[str], int]:
    """Copy the files the agent created or changed (``after``, a settled end state: no links
    left) into ``dest``, within :data:`END_STATE_MAX_BYTES` and :data:`END_STATE_MAX_FILES`;
    return their paths and how many created or changed files (and made folders) the caps
    left out. ``always``:
    paths copied first and whatever the caps (the harness's saved audits: an end state
    without them re-grades from the services' fixtures alone).
    Initial files and folders (``before_dirs``) that are gone are listed in
    ``<dest>_deleted.json``; folders the agent made are made in ``dest`` (empty ones too, at
    most :data:`END_STATE_MAX_FILES`), and a file keeps its permission bits: re-grading
    replays them (helper-194: an ``rm -rf d``, a ``mkdir``, a ``chmod +x`` were lost, a 1.0
    re-graded 0.0). ``dest`` is made even when nothing changed: a trial folder without it
    has lost its end state (re-grading refuses it rather than grade the initial workspace)."""
    dest.mkdir(parents=True, exist_ok=True)
    gone_dirs = set(before_dirs) - set(after.dirs)
    deleted = sorted(set(before) - set(after.files)) + sorted(gone_dirs)
    _write_json(TrialPaths(dest.parent).end_state_deleted, deleted)
    made = sorted(set(after.dirs) - set(before_dirs), key=_shallow_first)
    for rel in made[:END_STATE_MAX_FILES]:
        (dest / rel).mkdir(parents=True, exist_ok=True)
    dirs_left_out = max(0, len(made) - END_STATE_MAX_FILES)  # (counted too: helper-198)
    changed = sorted(
        (rel for rel, digest in after.files.items() if before.get(rel) != digest),
        key=lambda rel: (rel not in always, _shallow_first(rel)),
    )
    total = 0
    kept: list[str] = []
    for rel in changed:
        src = ws / rel
        try:
            size = os.lstat(src).st_size
        except OSError:
            continue
        if rel not in always:
            if len(kept) >= END_STATE_MAX_FILES:
                break
            if total + size > END_STATE_MAX_BYTES:
                continue
        total += size
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh, open(target, "wb") as out:
            shutil.copyfileobj(fh, out)
            # its permission bits (never setuid, setgid or sticky: the folder stays data),
            # the owner's read and write kept, and its times (a grader may read them: they
            # were the copy's, helper-197)
            st = os.fstat(fh.fileno())
            os.fchmod(out.fileno(), (st.st_mode & 0o777) | 0o600)
            out.flush()
            os.utime(out.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))
        kept.append(rel)
    return kept, len(changed) - len(kept) + dirs_left_out


def _audit_files(audits: Mapping[str, Any]) -> dict[str, bytes]:
    """Service name -> the bytes of its ``audit.json`` (:func:`audit_text`), made once: their
    size is room the agent must leave on its disk (:meth:`Trial.check_disk`)."""
    return {name: audit_text(audit).encode("utf-8") for name, audit in audits.items()}


def _put_audits(ws: Path, task: Task, audits: Mapping[str, bytes], state: EndState) -> set[str]:
    """Write the harness's audits (:func:`_audit_files`) into the settled workspace
    (``.services/<name>/audit.json``) and list them among ``state``'s files (so ``end_state/``
    keeps them for re-grading); returns their paths relative to the workspace."""
    written: set[str] = set()
    for spec in task.services:
        if spec.name not in audits:
            continue
        rel = audit_file(spec).removeprefix(PATHS.workspace + "/")
        data = audits[spec.name]
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_bytes(data)
        state.files[rel] = f"{len(data)}:{hashlib.sha256(data).hexdigest()}"
        written.add(rel)
    return written


def _copy_capped(src: Path, dest: Path, max_bytes: int) -> list[str]:
    """Copy the settled folder ``src`` (no links, bounded depth) to ``dest``; files past
    ``max_bytes`` in total or past :data:`END_STATE_MAX_FILES` are left out. Returns the
    relative paths left out."""
    left_out: list[str] = []
    total = copied = 0
    for rel in sorted(scan(src, hash_files=False).files, key=_shallow_first):
        size = os.lstat(src / rel).st_size
        if total + size > max_bytes or copied >= END_STATE_MAX_FILES:
            left_out.append(rel)
            continue
        total += size
        copied += 1
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel, follow_symlinks=False)
    return left_out


def transcript_from_model_calls(path: Path, trial_id: str) -> Transcript | None:
    """The agent's conversation as the gateway recorded it (``model_calls.jsonl``): the last
    answered request of the trial's agent, its messages plus the reply, as a Transcript (None
    when there is none). The harness's own evidence, unlike a session file in the sandbox.

    Residual risk: request histories are sent from inside the agent's sandbox (OpenClaw's, or
    requests the agent's programs make through the forwarder with the trial's token), so they
    are the agent's account of the past turns; only the replies are the provider's. So the
    history's own end-of-turn claims (``stopReason``/``stop_reason``, ``errorMessage``) are
    dropped: a history message saying "the provider failed" would make the grade an agent run
    error, which the trial retries as an infrastructure error (a free re-roll of a losing
    run). A provider failure is known from the gateway's own record of the upstream
    (``GatewayLease.upstream_errors``, :meth:`OpenClawAgent._outcome`), never from here."""
    if not path.is_file():
        return None
    try:
        records = read_records(path)
    except UserError:
        return None
    answered = [
        r
        for r in records
        if r.get("role") == "agent"
        and r.get("trial_id") == trial_id
        and isinstance(r.get("response"), dict)
        and isinstance(r.get("request"), dict)
    ]
    for rec in reversed(answered):
        choices = rec["response"].get("choices") or [{}]
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        messages = rec["request"].get("messages")
        if not isinstance(message, dict) or not isinstance(messages, list):
            continue
        reply: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            reply["tool_calls"] = message["tool_calls"]
        try:
            tr = from_formatted_dialog([*messages, reply], source=str(path))
        except (UserError, ValueError):
            continue
        for m in tr.messages:
            m.stop_reason = m.error_message = None  # the sandbox's claims (see above)
        return tr
    return None


def _write_json(path: Path, value: Any) -> None:
    """``value`` (a pydantic model: its JSON dump) as :func:`json_text` into ``path``."""
    text = model_json_text(value) if isinstance(value, BaseModel) else json_text(value)
    path.write_text(text + "\n", encoding="utf-8")


@functools.cache
def _dialog_tool_schema(profile: str) -> list[dict[str, Any]]:
    """The trial dialog file's ``tool_schema`` of ``profile``: one parsed list per profile and
    process, shared (only ever written out: :func:`json_text_reusing` keeps its text). Raises
    UserError for an unknown profile."""
    from clawrig.tools.catalog import tool_schema

    return tool_schema(profile)


def write_tree(dest: Path, files: Mapping[str, bytes]) -> None:
    """Write relative path -> bytes under ``dest``. Raises SetupError for a path that would
    leave it (absolute, or with ``..``)."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        p = Path(rel)
        if p.is_absolute() or ".." in p.parts:
            raise SetupError(f"path escapes the workspace: {rel!r}")
        (dest / p).parent.mkdir(parents=True, exist_ok=True)
        (dest / p).write_bytes(data)


def suite_root_of(task: Task) -> Path:
    """A path ``load_tasks`` can read back to find this task (for re-grading): the task file
    (WildClawBench), the four-folder root, or the DataClawBench root."""
    src = Path(task.source.path).resolve()
    if task.format == "fourfolder":
        return src.parents[1]
    if task.format == "dataclaw":
        if task.workspace.root is not None:
            return Path(task.workspace.root).resolve().parent
        for parent in src.parents:
            if (parent / "assets" / "qa_gold").is_dir():
                return parent
    return src


def grader_env(task: Task) -> dict[str, str]:
    """Environment for graders: the task's Env names, with host values only for names the user
    lets through (``CLAWRIG_PASS_ENV``, :func:`clawrig.egress.trial.host_value`), placeholders
    for keys, plus placeholders so graders that read judge settings do not crash with a
    KeyError when they are unset (peers.md pain point 15). Real keys are never passed."""
    from clawrig.egress.trial import host_value

    env: dict[str, str] = {}
    for name in task.env:
        if name.endswith("_API_KEY"):
            env[name] = "clawrig-placeholder-key"
        elif (value := host_value(name)) is not None:
            env[name] = value
    env.setdefault("OPENROUTER_API_KEY", "clawrig-placeholder-key")
    env.setdefault("OPENROUTER_BASE_URL", "http://127.0.0.1:9/v1")
    env.setdefault("JUDGE_MODEL", "clawrig-judge-unavailable")
    return env


SETUP_S = 600.0
"""Seconds for setting a trial up (sandbox start, services, skills, the warmup lines the warm
snapshot does not hold), not counting a warm snapshot being built (built once per task, with
limits of its own)."""
AGENT_GRACE_S = 30.0
"""Seconds the agent phase may run past the agent's limit (closing its tools, sub-agents)."""
COLLECT_S = 120.0
"""Seconds for each of stopping the agent (audits, kill, end state copied out), gt in, and
the results folder copied out."""
JUDGE_S = 300.0
"""Seconds the grading phase may run past the grader's own limit (judge calls, process
metrics)."""


@dataclass(frozen=True)
class TimeoutPlan:
    """Every time limit of one trial, in seconds, computed once from the task and the job.

    - ``agent_s`` = the task's ``timeout_seconds`` x ``timeout_multiplier``: the agent phase's
      wall time, and the limit the agent is told in its first message;
    - ``grader_s`` = the grader's ``timeout_seconds`` x ``timeout_multiplier``;
    - ``command_s`` = ``max(agent_s, 1)``: the default wall time of one command in the sandbox;
    - ``trial_s`` = ``agent_s + grader_s +`` :data:`TRIAL_OVERHEAD_S`: the whole trial's
      deadline (from its start, a warm snapshot build excluded), and the sandbox's
      (``Limits.trial_timeout_s``, after which it is stopped);
    - per phase (:meth:`phase_s`): setup :data:`SETUP_S` x ``max(1, multiplier)``, agent
      ``agent_s +`` :data:`AGENT_GRACE_S`, kill/collect, gt_inject and results
      :data:`COLLECT_S` each, grading ``grader_s +`` :data:`JUDGE_S`.

    The multiplier is the job's ``--timeout-multiplier`` (slow machines, big models). It scales
    the task's own limits only: setup is the harness's (each warmup line at most 300 s,
    :func:`clawrig.sandbox.workspace.run_warmup`; a warm snapshot's install lines 1800 s each),
    as upstream runs a warmup before the task's clock starts, so a small multiplier never
    fails an install.
    """

    agent_s: float
    grader_s: float
    command_s: float
    trial_s: float
    setup_s: float = SETUP_S

    @classmethod
    def of(cls, task: Task, config: TrialConfig) -> TimeoutPlan:
        """The plan for ``task`` under ``config`` (see the class docs for the formulas)."""
        m = config.timeout_multiplier
        agent = task.timeout_seconds * m
        grader = task.grader.timeout_seconds * m
        return cls(
            agent_s=agent,
            grader_s=grader,
            command_s=max(agent, 1.0),
            trial_s=agent + grader + TRIAL_OVERHEAD_S,
            setup_s=SETUP_S * max(1.0, m),
        )

    def phase_s(self, phase: str) -> float:
        """The limit of one phase of :meth:`Trial.run` (``setup``, ``agent``, ``kill``,
        ``gt_inject``, ``grading``, ``results``), seconds."""
        if phase == "setup":
            return self.setup_s
        if phase == "agent":
            return self.agent_s + AGENT_GRACE_S
        if phase == "grading":
            return self.grader_s + JUDGE_S
        return COLLECT_S

    def limits(self, config: TrialConfig) -> Limits:
        """The sandbox limits of a trial under this plan (memory, disk and /dev/shm in bytes,
        times in seconds). /dev/shm gets a quarter of the memory, at most 256 MiB."""
        memory = config.memory_mb * 1024**2
        return Limits(
            memory_bytes=memory,
            max_processes=config.max_processes,
            disk_bytes=config.disk_mb * 1024**2 or None,
            shm_bytes=min(256 * 1024**2, memory // 4),
            command_timeout_s=self.command_s,
            trial_timeout_s=self.trial_s,
            call_timeout_s=config.call_timeout_s,
        )


@dataclass
class RecordedEndState:
    """A finished trial's end state, to grade again: the folder's ``end_state/`` overlaid on
    the task's initial workspace, ``deleted`` (workspace-relative paths) removed, and the
    transcript text the harness put at the session path (``chat.jsonl``)."""

    end_state: Path | None
    deleted: list[str]
    transcript_text: str

    @classmethod
    def of(cls, folder: Path) -> RecordedEndState:
        """The end state ``folder`` (a finished trial's) records. Its files are read as a job
        folder's (:func:`read_record`, :func:`tree_of`): a linked ``end_state/`` is no end
        state (a FIFO as ``chat.jsonl`` held ``clawrig grade`` for good, past SIGTERM:
        helper-189). Raises UserError when ``chat.jsonl`` or ``end_state_deleted.json`` is
        there but no regular file (a FIFO, a link, a folder), or ``chat.jsonl`` is over
        :data:`JSONL_LIMIT` bytes; either is absent in a folder written before them."""
        paths = TrialPaths(folder)
        deleted: list[str] = []
        for path in (paths.end_state_deleted, paths.chat):
            # absent: an older folder's (none written); there but no record: not the trial's
            # (read as empty, the grading differed and --write stored it: helper-193)
            if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
                raise UserError(f"{path}: not a regular file: not the trial's record")
        with contextlib.suppress(OSError, ValueError, RecursionError):
            value = json.loads(read_record(paths.end_state_deleted))
            if isinstance(value, list):
                deleted = [v for v in value if isinstance(v, str)]
        data = read_regular(paths.chat, JSONL_LIMIT + 1)
        if data is not None and len(data) > JSONL_LIMIT:
            raise UserError(f"{paths.chat}: over {JSONL_LIMIT} bytes")
        linked = os.path.islink(paths.end_state)
        return cls(
            end_state=paths.end_state if paths.end_state.is_dir() and not linked else None,
            deleted=deleted,
            transcript_text=(data or b"").decode("utf-8", "replace"),
        )

    def apply(self, ws: Path) -> None:
        """Overlay the end state on the initial workspace ``ws`` (a host folder): its folders
        and regular files (:func:`tree_of`: no link followed, no FIFO or device), each
        replacing what the initial workspace has at its path."""
        # what the agent deleted first: a path it deleted and then made anew (a file replaced
        # by a folder) is in both, and the end state's is the one kept (helper-193: the
        # deletion after the overlay removed the agent's new folder, 1.0 re-graded 0.0)
        for rel in self.deleted:
            p = Path(rel)
            if p.is_absolute() or ".." in p.parts or not p.parts:
                continue
            if any((ws / Path(*p.parts[:i])).is_symlink() for i in range(1, len(p.parts))):
                continue  # (never through a link of the initial workspace)
            target = ws / p
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
        if self.end_state is not None:
            folders, files = tree_of(self.end_state)
            for rel in folders:
                _make_folder(ws, rel)
            for rel, src in files:
                dest = ws / rel
                _make_folder(ws, os.path.dirname(rel))
                if dest.is_symlink() or dest.is_dir():
                    remove_tree(dest)  # (the initial workspace's, replaced by the agent's file)
                shutil.copyfile(src, dest, follow_symlinks=False)
                # its permission bits, never setuid, setgid or sticky (the end state is data),
                # and its times, as the agent left them
                st = os.lstat(src)
                os.chmod(dest, (st.st_mode & 0o777) | 0o600)
                os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _make_folder(ws: Path, rel: str) -> None:
    """Make ``ws/rel`` a folder, each part of it that the initial workspace has as a file or
    a link replaced (the agent replaced it with a folder)."""
    here = ws
    for part in Path(rel).parts:
        here = here / part
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            here.unlink()
        if not here.is_dir():
            here.mkdir()


class Trial:
    """One trial of ``task`` under ``config``: the only place a task's sandbox is started.

    One method per phase, in order (each timed into ``result.timings`` under today's phase
    names: setup, warm, sandbox_start, agent, kill, collect, gt_inject, grading, results, stop):

    1. :meth:`sandbox_up`: the workspace on the host (the task's initial files, or a recorded
       end state), binds (agent needs, services environment, gateway, grader environment), the
       sandbox started;
    2. :meth:`workspace_and_services`: services started, skills installed, warmup run;
    3. :meth:`run_agent`: the agent within ``plan.agent_s``;
    4. :meth:`stop_agent`: the agent's sandbox stopped, the services' audits as the harness
       recorded them, the transcript the harness writes, the end state settled into inert data
       on the host (:mod:`clawrig.sandbox.endstate`) and its changes copied out;
    5. :meth:`gt_in`: the clean room: a fresh sandbox from the same environment and warm
       snapshot with the end state, gt/, the transcript and the services restarted from their
       audits;
    6. :meth:`grade`: the task's grader(s) (verdict on a harness-held channel) and process
       metrics;
    7. :meth:`write`: task_output/ collected, the trial folder written and renamed.

    :meth:`run` does all of them with typed failures (module docs); re-grading, verify and
    export replay use the phases they need (``async with Trial(...)`` stops the sandbox and
    removes the work folder). ``folder`` is where the trial's files are written (default: a
    ``.tmp-`` folder under ``out_root/<task_id>/`` when ``out_root`` is given, else a temporary
    folder removed on close).
    """

    def __init__(
        self,
        task: Task,
        config: TrialConfig,
        *,
        out_root: Path | None = None,
        run_index: int = 0,
        services: TrialServices | None = None,
        job_id: str = "",
        plan: TimeoutPlan | None = None,
        folder: Path | None = None,
    ) -> None:
        self.task = task
        self.config = config
        self.services = services or TrialServices()
        self.plan = plan or TimeoutPlan.of(task, config)
        self.run_index = run_index
        started = dt.datetime.now(dt.UTC)
        self.name = trial_folder_name(config.model, started.astimezone())
        self.task_dir: Path | None = None
        self._own_folder = False
        if folder is None and out_root is not None:
            self.task_dir = JobPaths(out_root).task_dir(task.id)
            folder = _unfinished_folder(self.task_dir, self.name)
        elif folder is None:
            folder = owned_tempdir("trial-files")
            self._own_folder = True
        folder.mkdir(parents=True, exist_ok=True)
        self.paths = TrialPaths(folder)
        self.out_root = out_root
        # the harness's tmpfs when it has one (leftovers.scratch_dir: its disk's image and
        # files are on the host's disk all the same)
        self.work = owned_tempdir("trial", self.services.work_dir or scratch_dir())
        os.chmod(self.work, 0o755)
        self.disk = TrialDisk(self.work, config.disk_mb * 1024**2)
        """The trial's disk: the workspace and the sandbox's own folders live on it."""
        self.clean_room_disk: TrialDisk | None = None
        """A clean room started without the warm pool: a room of its own for its folders (a
        tmpfs, ``Limits.scratch_in_memory``), as a pooled one has (:meth:`_start_sandbox`)."""
        self.workspace = self.disk.path / "workspace"
        self.result = TrialResult(
            task_id=task.id,
            category=task.category,
            run_index=run_index,
            trial_id=self.name,
            job_id=job_id,
            task_source=str(suite_root_of(task)),
            task_digest=task.digest(),
            model=config.model,
            agent=config.agent,
            sandbox=config.sandbox,
            config_hash=config.config_hash(),
            versions={"clawrig": __version__},
            started_at=started.isoformat(),
            config=config,
        )
        self.paths.agent_log.touch()
        self.transcript = Transcript()
        self.transcript_text: str | None = None
        """The session file's text as put in the sandbox (chat.jsonl is the same text)."""
        self.usage = Usage()
        self.sandbox: Sandbox | None = None
        self.pooled: list[PoolEntry] = []
        """Sandboxes taken from the job's warm pool (released, with their disks, at close)."""
        self.clean_room_ahead: Ahead | None = None
        """The clean room asked of the warm pool as the agent's sandbox came up
        (:meth:`WarmPool.expect`), taken by :meth:`gt_in`."""
        self.agent: Agent | None = None
        self.network: TrialNetwork | None = None
        self.door: GatewayDoor | None = None
        """The sandbox's capped socket to the job's gateway (:mod:`clawrig.llm.gateway.door`)."""
        self.system: Any = None
        """The environment and warm snapshot the sandbox starts from (:mod:`clawrig.env`)."""
        self.lease: Any = None
        """The trial's gateway lease: the agent's calls and those its programs make with the
        task's model keys are counted, capped and recorded together."""
        self.grader_stage: GradingEnvStage | None = None
        self.grader_on_system = False
        """The grader runs on the clean room's own python3 (:func:`grader_on_system`)."""
        self.service_handles: list[Any] = []
        # the task's own fixture files, read before a recorded end state is laid over them
        self.fixture_files: dict[str, bytes | None] = {}
        self.before: dict[str, str] = {}
        self.initial = EndState()
        """The task's initial workspace as the harness made it (files, folders, links)."""
        self.end_state: EndState | None = None
        """The settled end state (:meth:`stop_agent`)."""
        self.grading_binds: list[Bind] = []
        self.audit_channel: HarnessChannel | None = None
        self.audits: dict[str, Any] = {}
        """Service name -> its audit as the harness recorded it (:meth:`stop_agent`)."""
        self.rebuilding_calls = 0
        """The agent's recorded service calls being replayed into the clean room's services
        (:meth:`gt_in`), 0 before and after: a phase deadline meanwhile is the agent's."""
        self.verdict: HarnessChannel | None = None
        """The grader's verdict channel into the clean room (:meth:`gt_in`)."""
        self.timings: dict[str, float] = {}
        self.clock = WaitClock()
        """The trial's harness waits (sandbox-start and grading slots, model slots), which move
        the agent's deadline and are written as ``result.waits``."""
        self._held: Sandbox | None = None
        """The sandbox whose stop a wait in progress holds (:meth:`_postpone_stop`)."""
        self.clock.postpone = self._postpone_stop
        self.phase = "setup"
        self._t_phase = time.monotonic()
        self._closed = False
        self._timeout: asyncio.Timeout | None = None
        self._deadline: float | None = None
        """The whole trial's deadline (event-loop time) while :meth:`run` runs."""

    # -- bookkeeping ---------------------------------------------------------------------------

    def mark(self, next_phase: str) -> None:
        """End the current phase (its seconds added to the timings) and start ``next_phase``."""
        now = time.monotonic()
        self.timings[self.phase] = self.timings.get(self.phase, 0.0) + now - self._t_phase
        self.phase, self._t_phase = next_phase, now

    def _extend_deadline(self, seconds: float) -> None:
        """Move the trial's and the running phase's deadlines ``seconds`` later (time spent on
        something with limits of its own: a warm snapshot being built)."""
        if self._deadline is not None:
            self._deadline += seconds
        if self._timeout is not None and (when := self._timeout.when()) is not None:
            self._timeout.reschedule(when + seconds)

    def _wall_deadline(self) -> float | None:
        """The running phase's deadline as a ``time.monotonic()`` value (for work in threads,
        which a cancelled phase cannot stop), None outside :meth:`run`."""
        return self._timeout.when() if self._timeout is not None else None

    async def _within(self, group: str, coro: Any) -> Any:
        """Await ``coro`` within the ``group`` phase's limit (:meth:`TimeoutPlan.phase_s`) and
        what is left of the whole trial's. Raises :class:`clawrig.errors.TrialDeadline`."""
        loop = asyncio.get_running_loop()
        limit = self.plan.phase_s(group)
        end = loop.time() + limit
        # time the trial waited on the harness (slots) is not the trial's: every deadline moves
        trial_end = None if self._deadline is None else self._deadline + self.clock.paused_s
        whole = trial_end is not None and trial_end < end
        if whole:
            assert trial_end is not None
            end = trial_end
        cm = asyncio.timeout_at(end)
        self._timeout = cm
        self.clock.track(cm)
        try:
            async with cm:
                return await coro
        except TimeoutError:
            if cm.expired():
                total = self.plan.trial_s if whole else limit
                raise TrialDeadline(self.phase, total, whole_trial=whole) from None
            raise
        finally:
            self._timeout = None
            self.clock.untrack(cm)

    def log(self, line: str) -> None:
        """Append a line to agent.log (a full host disk loses the line, never the job)."""
        with (
            contextlib.suppress(OSError),
            open(self.paths.agent_log, "a", encoding="utf-8", errors="backslashreplace") as fh,
        ):
            fh.write(line.rstrip("\n") + "\n")

    async def __aenter__(self) -> Trial:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the sandbox, remove the work folder and the grader stage (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.mark("stop")
        await self._stop_sandbox()
        for channel in (self.audit_channel, self.verdict):
            if channel is not None:
                await channel.close()
        pool = self.services.pool
        WarmPool.drop(self.clean_room_ahead)  # (no grading: an error, a cancel)
        for entry in reversed(self.pooled):  # stopped now, unmounted and removed meanwhile
            await (pool.retire(entry) if pool is not None else entry.release())
        if not any(entry.disk is self.disk for entry in self.pooled):
            await in_thread(self.disk.release)
        if self.clean_room_disk is not None:
            await in_thread(self.clean_room_disk.release)
        if self.network is not None:
            with contextlib.suppress(Exception):
                await self.network.close()
        if self.door is not None:
            if self.door.refused or self.door.dropped:
                self.log(
                    f"gateway door: {self.door.refused} connection(s) refused over the cap, "
                    f"{self.door.dropped} silent one(s) dropped"
                )
            with contextlib.suppress(Exception):
                await self.door.stop()
        if self.lease is not None and not self.lease.closed and self.services.gateway is not None:
            self.services.gateway.close_trial(self.lease)
        self.timings[self.phase] = self.timings.get(self.phase, 0.0) + (
            time.monotonic() - self._t_phase
        )
        self._t_phase = time.monotonic()
        remove_tree(self.work)
        if self.grader_stage is not None:
            self.grader_stage.cleanup()
        if self._own_folder:
            remove_tree(self.paths.root)
        # the clock's callback is a method of this trial: a cycle only the collector frees
        self.clock.postpone = self._held = None

    # -- phases --------------------------------------------------------------------------------

    async def sandbox_up(
        self,
        *,
        recorded: RecordedEndState | None = None,
        files: Mapping[str, bytes] | None = None,
        with_agent: bool = True,
        warm: bool = True,
    ) -> Sandbox | None:
        """Phase 1. Make the workspace (the task's initial files; with ``recorded``, a finished
        trial's end state over them; with ``files``, exactly those files), bind what the trial
        needs and start the sandbox from the task's environment (and, with ``warm``, its warm
        snapshot: the warmup's install lines run once and frozen). Without ``with_agent``
        (re-grading, verify) no sandbox starts: :meth:`gt_in` starts the clean room. Raises
        SetupError (missing workspace data), SandboxError, UserError (an agent that needs a
        model without one)."""
        services, task, config = self.services, self.task, self.config
        needs = None
        if with_agent:
            self.agent = create_agent(config.agent)
            if self.agent.needs_model and services.model is None:
                raise UserError(f"--model: the {self.agent.name} agent needs a model")
            if services.gateway is not None and self.agent.uses_gateway:
                self.agent.gateway = services.gateway  # agents that run their own client
            needs = self.agent.sandbox_needs(task)
        pool = services.pool if with_agent and config.sandbox == "bwrap" else None
        if pool is None:
            await self._workspace_in(recorded, files)
        self.mark("sandbox_start")
        endpoint = upstream_endpoint(services.model)
        if with_agent and services.gateway is not None and endpoint is not None:
            self.lease = services.gateway.open_trial(
                endpoint,
                trial_id=self.name,
                task_id=task.id,
                run_index=self.run_index,
                record_path=self.paths.model_calls,
                max_cost_usd=config.max_cost_usd_per_trial,
                max_tokens=config.max_tokens_per_trial,
                clock=self.clock,  # its socket requests' waits for a provider's place
            )
        self.network = network = await TrialNetwork.open(
            folder=self.paths.root,
            sandbox_kind=config.sandbox,
            setup=config.setup_network,
            agent=config.network,
            env_names=task.env,
            gateway=services.gateway,
            lease=self.lease,
            agent_forwards=self.agent is not None and self.agent.uses_gateway,
        )
        # what the clean room for grading needs too: the services environment (read-only),
        # the gateway's door (the judge proxy), the egress proxy, the grader environment
        shared = list(network.binds) + await service_binds(task)
        gateway = services.gateway
        if gateway is None and self.agent is not None and self.agent.uses_gateway:
            gateway = self.agent.gateway  # an agent's own (OpenClaw without a job gateway)
        if gateway is not None:  # the judge proxy, OpenClaw, the agent's programs reach it
            # through the trial's own door: a capped socket, never the gateway's
            self.door = await GatewayDoor(gateway).start()
            shared += self.door.sandbox_binds()
        key = (config.sandbox, config.environment, config.image or "", str(task.format))
        choice = services.environments.get(key)
        if choice is None:
            choice = services.environments[key] = resolve_environment(
                config.sandbox, config.environment, config.image, str(task.format)
            )
        # a grader on the system runs on the clean room's python3 (the environment and the warm
        # snapshot: what the warmup installed, nothing the agent did); else its own environment
        self.grader_on_system = grader_on_system(choice, config.sandbox, str(task.format))
        if task.grader.requirements and task.grader.source and not self.grader_on_system:
            if config.sandbox == "bwrap":
                # grader environment: an empty folder now, filled only after the agent is gone
                self.grader_stage = GradingEnvStage(
                    await in_thread(ensure_env, task.grader.requirements)
                )
                shared.append(self.grader_stage.bind)
        self.grading_binds = shared
        binds = (list(needs.binds) if needs else []) + shared
        if task.services:  # the services' audit events reach the harness as they happen
            self.audit_channel = await HarnessChannel(
                self.work / "audit", AUDIT_DEST, max_connections=len(task.services)
            ).open()
            binds.append(self.audit_channel.bind)
        self.mark("warm")  # the environment and the task's warm snapshot (made once, reused)
        warm_started = time.monotonic()
        self.system = system = await prepare_system(
            choice,
            task.warmup if warm else [],
            sandbox=config.sandbox,
            snapshots=config.warm_snapshots,
            setup_network=services.setup_network or network.setup_network(),
        )
        self._extend_deadline(time.monotonic() - warm_started)  # built once, limits of its own
        self.result.versions["environment"] = system.choice.environment
        if system.warm is not None:
            self.result.versions["warm_snapshot"] = system.warm.key
        self.mark("sandbox_start")
        if not with_agent:  # re-grading and verify: only the clean room (gt_in) starts
            self.mark("setup")
            return None
        env = network.sandbox_env(writable_system=system.writable_root)
        env |= dict(needs.env) if needs else {}
        entry = None
        if pool is not None:  # the workspace goes on the pooled sandbox's own disk
            entry = await self._take_pooled(self._sandbox_config(binds, env))
            if entry is not None:
                self.disk, self.workspace = entry.disk, entry.disk.path / "workspace"
            self.mark("setup")
            await self._workspace_in(recorded, files)
            self.mark("sandbox_start")
        self.sandbox = await self._start_sandbox(binds, env, entry=entry)
        disk = self.disk
        self.result.protections = {
            **self.sandbox.limits_enforced,
            "disk": f"trial disk of {disk.size_bytes} bytes"
            if disk.enforced
            else f"none: {disk.problem or 'no disk size set (--disk-mb 0)'}",
        }
        self.mark("setup")
        await network.attach(self.sandbox)
        if pool is not None and config.sandbox == "bwrap":
            # the clean room started while the agent runs (the CPU is mostly idle then), not
            # when every trial of a large job wants one at once; the verdict channel's folder
            # is made at grading: the work folder stands in for it (only its kind is the key's)
            verdict = HarnessChannel(self.work, VERDICT_DEST).bind
            room = self._role_config([*self.grading_binds, verdict], {}, "clean_room")
            self.clean_room_ahead = pool.expect(config.sandbox, room)
        return self.sandbox

    async def _workspace_in(
        self, recorded: RecordedEndState | None, files: Mapping[str, bytes] | None
    ) -> None:
        """The trial's disk mounted and the workspace made on it (:meth:`sandbox_up`), its
        initial listing taken: file work done in one worker thread (one hand-off, not the
        event loop's). Raises SetupError."""
        # to its end even when cancelled: a disk the thread mounted after the cancel, past
        # close()'s release, stayed mounted until the harness's exit
        self.initial = await run_to_end(in_thread(self._make_workspace, recorded, files))
        if self.disk.problem:
            self.log(f"setup: no disk limit: {self.disk.problem}")
        self.before = self.initial.files

    def _make_workspace(
        self, recorded: RecordedEndState | None, files: Mapping[str, bytes] | None
    ) -> EndState:
        """:meth:`_workspace_in`'s file work (in a thread): the disk mounted, the workspace
        written (``files``, else the task's, with ``recorded`` applied), its listing."""
        self.disk.mount()
        try:
            if files is not None:
                write_tree(self.workspace, files)
                if has_fixture_files(self.task):
                    materialise_workspace(self.task, self.work / "initial")
                    self.fixture_files = read_fixture_files(self.task, self.work / "initial")
            else:
                materialise_workspace(self.task, self.workspace)
                if recorded is not None:  # (a live trial's services hold what they started on)
                    self.fixture_files = read_fixture_files(self.task, self.workspace)
                    recorded.apply(self.workspace)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not self.disk.enforced:
                raise
            raise SetupError(
                f"the task's workspace does not fit the trial's disk of {self.config.disk_mb} MiB "
                "(TrialConfig.disk_mb)"
            ) from None
        # what the harness writes after the agent (check_disk) must fit even if the agent
        # writes nothing: else every agent would be blamed for the task's own size
        if self._short_of_room(*gt_size(self.task)):
            raise SetupError(
                f"the task's workspace and gt/ leave less than the harness's reserve "
                f"({DISK_RESERVE_BYTES // 2**20} MiB, {DISK_RESERVE_INODES} files) free on "
                f"the trial's disk of {self.config.disk_mb} MiB: raise "
                "TrialConfig.disk_mb (--disk-mb)"
            )
        try:
            return scan(self.workspace, caps=manifest_caps())
        except AgentFault as exc:  # the task's own files, before any agent
            raise SetupError(f"the task's initial workspace: {exc}") from None

    def _sandbox_config(self, binds: list[Bind], env: dict[str, str]) -> SandboxConfig:
        """The config of a sandbox of this trial: its workspace folder, the plan's limits, its
        disk, the system (environment and warm snapshot) :meth:`sandbox_up` prepared."""
        return SandboxConfig(
            workspace_dir=self.workspace,
            limits=self.plan.limits(self.config),
            scratch_dir=self.disk.path,
            binds=binds,
            env=env,
            **self.system.sandbox_fields(),  # type: ignore[union-attr]
        )

    async def _take_pooled(
        self, cfg: SandboxConfig, ahead: Ahead | None = None
    ) -> PoolEntry | None:
        """A started sandbox for ``cfg`` from the job's warm pool (``ahead``: the one asked
        for it, :meth:`WarmPool.take`); None: no pool, or ``cfg`` cannot be pooled. It is the
        trial's at once (released at close)."""
        pool = self.services.pool
        if pool is None:
            return None
        async with slot(self.services.sandbox_starts, "sandbox_start", self.clock):
            entry = await pool.take(self.config.sandbox, cfg, ahead)
        if entry is not None:
            self.pooled.append(entry)
            # a miss waited for a start the pool should have made ahead: a harness wait (at
            # -p 1000 such starts took minutes and ran the clean room's phase out of time)
            self.clock.charge("sandbox_start", entry.start_s)
        return entry

    async def _start_sandbox(
        self,
        binds: list[Bind],
        env: dict[str, str],
        *,
        entry: PoolEntry | None = None,
        role: str = "agent",
    ) -> Sandbox:
        """Start a sandbox of this trial (:meth:`_sandbox_config`), or make ``entry`` (or one
        taken now from the job's warm pool) this trial's; it becomes :attr:`sandbox`, and
        ``result.pooled[role]`` says how it was had. Raises SandboxError (OSError: a pooled
        sandbox's mounts failed)."""
        cfg = self._role_config(binds, env, role)
        in_memory = cfg.limits.scratch_in_memory
        if entry is None and self.config.sandbox == "bwrap":  # the clean room
            ahead, self.clean_room_ahead = self.clean_room_ahead, None
            entry = await self._take_pooled(cfg, ahead)
        if entry is not None:
            self.sandbox = entry.box
            os.chmod(self.work, 0o700)  # a pooled sandbox's root is the host's root
            box = await entry.claim(cfg)
            self.result.pooled[role] = PooledSandbox(
                id=entry.id, hit=entry.hit, ready_s=round(entry.ready_s, 6)
            )
            return box
        if (
            role == "clean_room"
            and self.config.sandbox == "bwrap"
            and self.disk.enforced
            and self.clean_room_disk is None
        ):
            # its /tmp, /root and /run/clawrig on a fresh room of the trial disk's size, not on
            # what the agent left free of the trial's: the grader's room is the same with a
            # pool or without (a grader copying a big file to /tmp failed without one, scored 0)
            self.clean_room_disk = disk = TrialDisk(
                self.work / "clean-room", cfg.limits.scratch_bytes(), in_memory=in_memory
            )
            # to its end even when cancelled: a mount the thread made after the cancel would
            # stay until the harness's exit (close() releases what it finds enforced)
            await run_to_end(in_thread(disk.mount))
            if disk.enforced:
                cfg = cfg.model_copy(update={"scratch_dir": disk.path})
            else:
                self.log(f"clean room: no room of its own ({disk.problem}): on the trial's")
        box = create_sandbox(self.config.sandbox, cfg)
        self.sandbox = box  # stopped by close() even when cancelled while it starts
        async with slot(self.services.sandbox_starts, "sandbox_start", self.clock):
            await box.start()
        if box.root_is_host_root:
            # the sandbox's root is the host's root: no other host user may reach its files
            # (a setuid program the agent made, gt/ once injected)
            os.chmod(self.work, 0o700)
        return box

    def _role_config(self, binds: list[Bind], env: dict[str, str], role: str) -> SandboxConfig:
        """:meth:`_sandbox_config` for the sandbox of ``role`` (``agent``, ``clean_room``): the
        clean room's /tmp, /root and /run/clawrig on a tmpfs of the trial disk's size (at most
        the memory limit), counted in its memory limit, when :meth:`_room_in_memory`: no
        second disk per trial (a loop device, an image, its flush)."""
        cfg = self._sandbox_config(binds, env)
        if role == "clean_room" and self._room_in_memory(cfg.limits):
            limits = cfg.limits.model_copy(update={"scratch_in_memory": True})
            cfg = cfg.model_copy(update={"limits": limits})
        return cfg

    def _room_in_memory(self, limits: Limits) -> bool:
        """True when the clean room's own folders are to be a tmpfs (``scratch_in_memory``):
        the trial has a disk and a memory limit. Always so then, whatever the agent left: a
        room chosen by the end state's size let the agent pick its grader's room (a sparse
        file switched it) and a re-grading measure it otherwise (helper-124)."""
        return bool(self.disk.enforced and limits.disk_bytes and limits.memory_bytes)

    async def _stop_sandbox(self) -> None:
        """Stop the current sandbox: every process in it ends (errors ignored)."""
        box, self.sandbox = self.sandbox, None
        if box is not None:
            with contextlib.suppress(Exception):
                await box.stop()

    def _postpone_stop(self, seconds: float | None) -> None:
        """The trial's waits on the harness move its sandbox's whole-trial stop
        (``Limits.trial_timeout_s``) as they move its deadlines (:attr:`WaitClock.postpone`):
        None, a wait begins: the current sandbox's stop is held; seconds, it ended: that
        sandbox's stop moves later by them and is released. A wait while the agent ran (a
        model slot, the busy event loop) moved every deadline but not that stop, which then
        stopped the sandbox under the agent: an agent error, scored 0."""
        if seconds is None:
            self._held = self.sandbox
            if self._held is not None:
                self._held.hold_stop()
            return
        held, self._held = self._held, None
        for box in {id(b): b for b in (held, self.sandbox) if b is not None}.values():
            box.postpone_stop(seconds)

    @property
    def box(self) -> Sandbox:
        """The started sandbox (RuntimeError before :meth:`sandbox_up`)."""
        if self.sandbox is None:
            raise RuntimeError("the trial's sandbox is not up")
        return self.sandbox

    async def workspace_and_services(self) -> None:
        """Phase 2: services started (health-checked), skills installed, the warmup run (under
        the setup network policy; the agent's policy from then on). Raises SetupError with the
        failing service's log or warmup line's output."""
        self.service_handles = await start_services(self.box, self.task, audit=self.audit_channel)
        for note in await install_skills(self.box, self.task):
            self.log(f"setup: {note}")
        warmup = self.system.warmup if self.system is not None else self.task.warmup
        await run_warmup(self.box, warmup)  # what the warm snapshot does not hold
        if warmup and self._short_of_room(0, 0):
            # the task's own warmup left less than the harness needs after the agent: every
            # agent would then be blamed for a full disk (helper-125, a nop agent's 0)
            used, _ = self.disk.usage()
            raise SetupError(
                f"the task's warmup left the trial's disk ({self.config.disk_mb} MiB) too full "
                f"({used} bytes used) for the harness's writes after the agent: a bigger "
                "--disk-mb"
            )
        if self.network is not None:
            self.network.agent_phase()

    async def run_agent(self, agent: Any = None) -> None:
        """Phase 3: the agent (``agent``, default the configured one) within ``plan.agent_s``
        seconds; it is told that limit. Sets stop reason, turns, tool calls and usage."""
        self.mark("agent")
        services, config, result, task = self.services, self.config, self.result, self.task
        agent = agent if agent is not None else self.agent
        if agent is None:
            agent = self.agent = create_agent(config.agent)
        result.versions.update(agent.versions())
        from clawrig.tools.catalog import Toolset

        limits = self.box.config.limits
        tool_ctx = ToolContext(
            sandbox=self.box,
            exec_timeout_s=limits.command_timeout_s,
            web=WebPolicy(mode=config.web if task.web_allowed else "off"),  # type: ignore[arg-type]
            web_backend=web_session(
                services.web, config.web, task, self.run_index, self.paths.root, self.out_root
            ),
            output_bytes=limits.output_bytes,
        )
        if services.no_subagents is not None:
            from clawrig.tools.sessions import SessionManager

            tool_ctx.sessions = SessionManager(unavailable=services.no_subagents)
        toolset = Toolset(task.tool_profile or config.tool_profile)
        agent_time = self.plan.agent_s
        model, lease = services.model, self.lease
        if lease is not None:
            model = lease.chat_model(stream=getattr(services.model, "stream", False))
        ctx = AgentContext(
            # the agent is told the limit it really has (the multiplied one)
            task=task.model_copy(update={"timeout_seconds": agent_time}),
            sandbox=self.box,
            tool_ctx=tool_ctx,
            toolset=toolset,
            model=model,
            limits=AgentLimits(
                max_turns=config.max_turns,
                time_s=agent_time,
                tokens=config.max_tokens_per_trial,
                cost_usd=config.max_cost_usd_per_trial,
            ),
            preamble=config.preamble if config.preamble is not None else preamble_for(task.format),
            transcript=self.transcript,
            log_path=self.paths.agent_log,
        )
        ctx.log(f"task {task.id} run {self.run_index} agent {agent.name} model {config.model}")
        transcript = self.transcript
        # the agent's deadline: agent_time of its own, moved later by every wait on the
        # harness meanwhile (a model-request slot: clawrig.waits)
        clock_token = self.clock.install()
        requests = RequestWatch()  # the agent's model requests: a provider's stall is no limit
        try:
            async with asyncio.timeout(agent_time) as deadline:
                self.clock.deadline = deadline
                with watch_loop(self.clock), watching(requests):  # and the harness's busy loop
                    outcome = await agent.run(ctx)
            self.clock.deadline = None  # finished: a probe's wait below moves no deadline
            result.stop_reason = outcome.stop_reason
            result.turns, result.tool_calls = outcome.turns, outcome.tool_calls
            refused = lease.upstream_refusals if lease is not None else []
            if outcome.stop_reason == StopReason.MODEL_ERROR and refused:
                if not _answered(transcript, lease):  # before the trial's first answer: as
                    # the native agent's refusal (below: _refusal_of)
                    result.stop_reason = None
                    raise ModelRequestError(
                        f"HTTP {refused[-1]}: {outcome.error or 'refused'}",
                        status=refused[-1],
                        detail=lease.last_refusal or "",
                    )
                # OpenClaw's request refused by the provider through the gateway after it
                # answered this trial: the same plain-request test as the native agent's
                refusal = ModelRequestError(
                    f"HTTP {refused[-1]}: {outcome.error or 'refused'}",
                    status=refused[-1],
                    detail=lease.last_refusal or "",
                )
                if not await _answers_probe(refusal, lease.endpoint, lease=lease):
                    raise _provider_broken(refusal, lease.endpoint, "the model")
                self._conversation_refused(
                    refused[-1], lease.last_refusal or outcome.error or "refused"
                )
        except TimeoutError:
            # the time ran out while the provider kept a request silent (a hang, a dribble):
            # an outage, not the model's time limit (retried by the job)
            # the requests the harness made for the agent; OpenClaw's go through the gateway
            # (streamed ones only: a program's own non-streamed request is the agent's choice)
            sandboxed = lease is not None and config.agent.startswith("openclaw")
            silent = max(requests.silent_s(), lease.watch.silent_s() if sandboxed else 0.0)
            stall_s = stall_limit_s(agent_time)
            if sandboxed and silent >= stall_s:
                # the agent's time is over: its requests still in flight give their places of
                # the provider's max_concurrency to the probe (GatewayLease.cut_upstream)
                lease.cut_upstream()
            # and the provider does not answer the harness's own plain request either (it
            # does: it is up, and the silent request was slow for what it asked)
            if silent >= stall_s and not await provider_answers(
                lease.endpoint if lease is not None else getattr(model, "endpoint", None),
                probe_s(agent_time),
                stall_s,  # its wait for a place of max_concurrency, at most
            ):
                ctx.log(f"agent stopped: its model's provider silent for {silent:.0f} s")
                raise ProviderError(
                    f"the model's provider stalled: a request unanswered for {silent:.0f} s "
                    f"when the agent's {agent_time:g} s ran out"
                ) from None
            result.stop_reason = StopReason.TIME_LIMIT
            _count_steps(result, transcript)
            ctx.log(f"agent stopped: time limit of {agent_time:g} s")
        except GatewayRefusal as exc:  # a cap of the job or the trial: graded as it stands
            result.stop_reason = CAP_STOPS.get(exc.kind, StopReason.COST_BUDGET)
            _count_steps(result, transcript)
            ctx.log(f"agent stopped: {exc}")
        except ModelRequestError as exc:
            self.clock.deadline = None  # the agent's time is over: a probe's wait moves none
            if not result.turns:  # the native agent's (OpenClaw's outcome counted them)
                _count_steps(result, transcript)  # an unscored trial's too: its answers
            # a refusal before this trial's first answer: the settings are in doubt
            # (_refusal_of). After it, the harness asks the provider a plain request of its
            # own: answered, the refusal was of what the agent put in its conversation (a
            # context overflow, a content filter): it stops and is graded as it stands;
            # refused too, the provider is broken (_provider_broken: no new trial starts)
            if exc.status is None or not _answered(transcript, lease) or _replay_miss(lease):
                raise await _refusal_of(exc, lease, model) from None
            endpoint = lease.endpoint if lease is not None else getattr(model, "endpoint", None)
            if not await _answers_probe(exc, endpoint, lease=lease):
                raise _provider_broken(exc, endpoint, "the model") from None
            self._conversation_refused(exc.status, exc.detail or str(exc))
            ctx.log(f"agent stopped: the provider refused its conversation: {exc}")
        except ProviderRetriesExhausted as exc:
            # a server's error (HTTP 5xx) for a request of the agent's after the retries,
            # once the trial had answers: what the agent put in its conversation can cause
            # one (a 500 for content the model cannot serve; helper-156: provoked, it ended
            # the trial unscored, a free abstention). Judged as a refusal is: the provider
            # answering the harness's plain request, the conversation is to blame (graded
            # as it stands, model_error) when the same request fails again; else an outage
            # (retried)
            self.clock.deadline = None
            # a 500 only: 502, 503, 504 and 529 are a gateway's or an overloaded server's
            # (helper-158: load shed for long requests scored an outage as the agent's)
            if exc.status != 500 or lease is None or not _answered(transcript, lease):
                raise
            if not await _fails_on_content(exc, lease):
                raise
            self._conversation_refused(500, exc.detail or str(exc))
            ctx.log(f"agent stopped: the provider fails its conversation: {exc}")
        finally:
            self.clock.deadline = None
            WaitClock.uninstall(clock_token)
            with contextlib.suppress(Exception):
                await toolset.aclose(tool_ctx)
            misses = tool_ctx.web_backend.misses if tool_ctx.web_backend is not None else []
            result.web_misses = len(misses)
            if misses:  # the recording's gaps (tool errors the agent saw, or --web-miss's)
                ctx.log(f"web replay: {len(misses)} request(s) not recorded: {misses[:20]}")
            self.usage = ctx.usage
            if lease is not None:
                # the gateway counted every call of the trial: the agent's, those the agent's
                # programs made with the task's model keys (a skill script), and a replayed
                # call at what its record says it cost (the agent prices replies itself)
                retries = max(lease.usage.retries, ctx.usage.retries)
                self.usage = lease.usage.model_copy(update={"retries": retries})
            if lease is not None and services.gateway is not None:
                services.gateway.close_trial(lease)
                with contextlib.suppress(Exception):
                    await model.aclose()  # type: ignore[union-attr]
            for key, sub in ctx.subagent_transcripts.items():
                self.paths.subagents.mkdir(exist_ok=True)
                self.paths.subagent(key).write_text(dumps_openclaw_jsonl(sub))
            ctx.close_log()
        refusals = lease.refusals if lease is not None else []
        if JOB_BUDGET_REFUSAL in refusals and "budget_share" not in refusals:
            # the job's spend cap, not this trial's: the trial was cut short by the job, and an
            # agent that would have finished must not be scored 0 (nor a trial started once the
            # spend was reached): not scored, run again by --resume. A trial that spent its
            # share of the budget itself (budget_share) is graded as it stands. Its stop is
            # the job's doing (cancelled), not the trial's own cost cap (cost_budget: helper-148)
            self.result.stop_reason = StopReason.CANCELLED
            raise BudgetExceeded(
                "the job's budget (--budget-usd) ran out while this trial ran: not scored "
                "(--resume with a larger budget runs it again)"
            )

    def _conversation_refused(self, status: int | None, message: str) -> None:
        """The agent's stop on a provider refusing its conversation (the provider answers
        plain requests): ``model_error``, graded as it stands, ``stop_detail`` the refusal as
        ``HTTP <status>: <the provider's own message>`` (``message``), for either agent."""
        result = self.result
        result.stop_reason = StopReason.MODEL_ERROR
        result.stop_detail = f"HTTP {status}: {message}"[:2000]
        _count_steps(result, self.transcript)

    async def stop_agent(self, *, copy_end_state: bool = True) -> None:
        """Phase 4: the agent's sandbox stopped (every process in it ends), its service audits
        taken from what the harness recorded as it happened, the transcript chosen, and the
        workspace settled into inert data on the host side (:func:`settle`: regular files and
        folders only, within :func:`manifest_caps`), the changed files copied to
        ``end_state/``. Raises :class:`EndStateRejected` (an agent error) over a cap."""
        self.mark("kill")
        box, task = self.box, self.task
        # command services keep their own audit (no event stream): fetched while they run
        fetched, status = await fetch_audits(box, task, self.service_handles, builtin=False)
        await self._stop_sandbox()
        self.mark("collect")
        recorded = await self._recorded_audits() | fetched
        for service, why in status.items():
            if why != "saved":
                self.log(f"service {service}: {why}")
        raw = self.agent.raw_transcript if self.agent is not None else None
        if raw is not None:
            # OpenClaw's own session file is the agent's to edit: graded is the conversation
            # the gateway recorded (the raw file stays in the trial folder as an artifact)
            recorded_tr = await in_thread(
                transcript_from_model_calls, self.paths.model_calls, self.name
            )
            if recorded_tr is not None:
                recorded_tr.session_id = self.transcript.session_id or recorded_tr.session_id
                self.transcript.messages[:] = recorded_tr.messages
            else:
                self.transcript.messages[:] = []
                self.log("transcript: the gateway recorded no answered model call of the agent")
        self.transcript_text = dumps_openclaw_jsonl(self.transcript)
        text_bytes = len(self.transcript_text.encode("utf-8", "replace"))
        caps = manifest_caps().over(self.initial)
        initial = self.initial
        audit_files: dict[str, bytes] = {}

        def end_state() -> EndState:  # one worker thread's hand-off for the disk and the walk
            audit_files.update(_audit_files(recorded))  # (tens of MB at most: not on the loop)
            gt_bytes, gt_entries = gt_size(task)
            # the harness writes the audits and gt/ into the workspace, on the agent's disk
            # (the transcript too, counted whatever the backend): room for them, or a full
            # disk the agent left fails the harness's own write, an infrastructure error
            # that was retried (a free second try for a losing agent)
            audit_bytes = sum(len(data) for data in audit_files.values())
            need_inodes = gt_entries + 8 + 2 * len(audit_files)
            self.check_disk(text_bytes + gt_bytes + audit_bytes, need_inodes)
            try:
                return settle(
                    self.workspace,
                    caps,
                    keep_links=initial.links,
                    known=self.before,
                    deadline=self._wall_deadline(),  # read once the thread runs: moved by waits
                )
            except EndStateRejected:
                raise
            except OSError as exc:  # only the agent's files are read here
                raise EndStateRejected(f"the end state cannot be read: {exc}") from exc

        state = await in_thread(end_state)
        self.end_state = state
        self.audits = recorded
        audits = _put_audits(self.workspace, task, audit_files, state)
        if state.dropped:
            self._record_dropped(state.dropped)
        if copy_end_state:
            changed, left_out = await in_thread(
                _copy_changed,
                self.workspace,
                self.before,
                state,
                self.paths.end_state,
                audits,
                self.initial.dirs,
            )
            self.log(f"end state: {len(changed)} file(s) created or changed")
            self.result.end_state_left_out = left_out
            if left_out:  # (helper-187: 9,998 of 20,000 kept, said nowhere)
                self.log(
                    f"end state: {left_out} more created or changed file(s) or folder(s) left "
                    f"out of end_state/ (it keeps at most {END_STATE_MAX_FILES} files and "
                    f"{END_STATE_MAX_BYTES} bytes)"
                )

    def _record_dropped(self, dropped: dict[str, str]) -> None:
        """Record what settling the end state removed (``path -> kind``, :class:`EndState`'s
        ``dropped``): ``end_state_dropped.json`` holds the :data:`DROPPED_RECORDED` shallowest,
        the log their count and the first :data:`DROPPED_LOGGED` (helper-197: 95,000 links
        made a 166 MB log line, as much JSON, and 700 MB of the harness's memory)."""
        kept = sorted(dropped, key=_shallow_first)[:DROPPED_RECORDED]
        _write_json(self.paths.end_state_dropped, {k: dropped[k] for k in kept})
        agents = [k for k in kept if dropped[k] != "top-level"]
        count = sum(kind != "top-level" for kind in dropped.values())
        if count:
            shown = {k: dropped[k] for k in agents[:DROPPED_LOGGED]}
            more = f" and {count - len(shown)} more" if count > len(shown) else ""
            self.log(f"end state: {count} link(s) or special file(s) left out: {shown}{more}")

    def _short_of_room(self, need_bytes: int, need_inodes: int) -> bool:
        """True when the trial's disk (enforced) has less than ``need_bytes`` +
        :data:`DISK_RESERVE_BYTES` or ``need_inodes`` + :data:`DISK_RESERVE_INODES` free."""
        if not self.disk.enforced:
            return False
        st = os.statvfs(self.disk.path)
        return (
            st.f_bavail * st.f_frsize < DISK_RESERVE_BYTES + need_bytes
            or st.f_favail < DISK_RESERVE_INODES + need_inodes
        )

    def check_disk(self, need_bytes: int = 0, need_inodes: int = 0) -> None:
        """Raise :class:`clawrig.errors.AgentFault` when the agent left its disk full: less
        than ``need_bytes`` + :data:`DISK_RESERVE_BYTES` or ``need_inodes`` +
        :data:`DISK_RESERVE_INODES` free. The harness's own writes after the agent (gt/ and
        the transcript in the clean room, ``need_*``) must not fail for its doing."""
        if self._short_of_room(need_bytes, need_inodes):
            used, inodes = self.disk.usage()
            raise AgentFault(
                f"the trial's disk ({self.config.disk_mb} MiB, --disk-mb) is full: {used} bytes "
                f"and {inodes} files and folders used"
            )

    async def _recorded_audits(self) -> dict[str, Any]:
        """The built-in services' audits from their event streams (the agent's sandbox is
        stopped, so every stream has ended). Raises :class:`clawrig.errors.AgentFault` when
        the agent's calls made a stream go over its cap or left a change unrecorded (an audit
        with a hole is not graded)."""
        channel = self.audit_channel
        if channel is None:
            return {}
        await channel.wait_ended(10.0)
        audits = audits_from_streams(self.task, channel.connections)
        for name, audit in audits.items():
            if audit.get("truncated"):
                # a change the harness never got, a forbidden call among it: never graded
                raise AgentFault(
                    f"service {name}: the agent's calls went over the audit stream's cap of "
                    f"{format_bytes(channel.max_bytes)} or could not be recorded (its audit "
                    "has a hole)"
                )
        return audits

    async def put_transcript(self, text: str | None) -> None:
        """Re-grading and verify: a recorded transcript (chat.jsonl text) for the session path
        of the clean room, as the harness wrote it after the agent (None: no session file)."""
        self.transcript_text = text
        if text is not None:
            self.transcript = from_openclaw_entries(openclaw_entries_from_jsonl(text, strict=False))

    async def gt_in(self) -> None:
        """Phase 5, the clean room: a fresh sandbox from the same environment and warm snapshot
        the agent started from, holding the settled end state (the workspace folder), gt/, the
        transcript the harness wrote at the session path and the services restarted from the
        audits the harness recorded (graders may ``GET /<svc>/audit``, as upstream). Nothing of
        the agent's runs there and nothing it wrote outside the workspace is there. Raises
        SandboxError when it cannot start (an infrastructure error)."""
        self.mark("gt_inject")
        await self._stop_sandbox()
        if self.network is not None:
            self.network.agent_phase()  # grading runs under the agent's policy, as in a run
        self.verdict = await HarnessChannel(self.work / "verdict", VERDICT_DEST).open()
        env = self.network.grading_env() if self.network is not None else {}
        self.sandbox = box = await self._start_sandbox(
            [*self.grading_binds, self.verdict.bind], env, role="clean_room"
        )
        if self.network is not None:
            await self.network.attach_grading(box)
        if self.transcript_text is not None:
            await box.write_file(PATHS.transcript, self.transcript_text)
        await inject_gt(box, self.task)
        fixtures = {h.name: h.extra.get("fixtures") for h in self.service_handles}
        audits = self.audits if self.end_state is not None else None
        calls = sum(
            len(a.get("calls") or []) for a in (audits or {}).values() if isinstance(a, dict)
        )
        self.rebuilding_calls = calls
        try:
            await restart_services(
                box,
                self.task,
                audits=audits,
                fixtures={k: v for k, v in fixtures.items() if v is not None},
                fixture_files=self.fixture_files,
            )
        except SetupError as exc:
            if not calls:
                raise
            # the services started from the task's fixtures before the agent ran; rebuilt
            # from the calls the agent made they did not come up: what the agent did (20,000
            # calendar creates made the restore outlast the health check), its 0, not an
            # unscored setup error (helper-142)
            raise AgentFault(
                f"the task's services could not be rebuilt from the agent's {calls:,} recorded "
                f"calls for grading: {exc}"
            ) from None
        self.rebuilding_calls = 0

    async def grade(self) -> tuple[Score | None, Score | None, ProcessScore]:
        """Phase 6: the outcome score (+ the judge score when both ran) and process metrics,
        in the clean room (``plan.grader_s``), a judge proxy when the job has a gateway. Sets
        them on :attr:`result`, with a typed error for a failure (blame follows control: a
        grader that fails on the agent's end state is an agent error, scored 0; the judge's
        provider failing is infrastructure; a grader that cannot run at all is a grading
        error). As in the agent phase, the trial's clock runs meanwhile: time the grader's and
        the judges' requests wait for a place of the judge's provider's ``max_concurrency``
        (and the event loop's lateness) is a harness wait that moves the grader's limit and the
        phase's deadline later (:mod:`clawrig.waits`)."""
        self.mark("grading")
        services, task, config, result = self.services, self.task, self.config, self.result
        python = self.grader_stage.activate() if self.grader_stage else "python3"
        judge_model = _judge_model(task, services, self.name, self.run_index, self.paths)
        judged: list[Any] = []  # the judges' gateway leases: what grading spent is the trial's
        answer_fault: tuple[ErrorKind, str] | None = None
        if (lease := getattr(judge_model, "lease", None)) is not None:
            judged.append(lease)
        clock_token = self.clock.install()  # the in-process judges' waits are the trial's too
        try:
            async with (
                # waiting for a grading slot is the harness's time: the sandbox's stop moves too
                slot(services.grading_slots, "grading", self.clock),
                _judge_env(
                    self.box,
                    task,
                    config,
                    services,
                    self.name,
                    self.run_index,
                    self.paths,
                    self.clock,
                ) as proxy,
            ):
                if proxy is not None:
                    judged.append(proxy.lease)
                try:
                    with watch_loop(self.clock):  # and the harness's busy loop
                        score, judge_score, process = await _grade(
                            task,
                            config,
                            self.box,
                            self.transcript,
                            self.paths,
                            services,
                            python=python,
                            judge_env=proxy.env if proxy is not None else {},
                            judge=judge_model,
                            grader_s=self.plan.grader_s,
                            verdict=self.verdict,
                            clock=self.clock,
                        )
                except ModelRequestError as exc:
                    # the judge's provider refused a request carrying the agent's answer, after
                    # it answered others in this job (a content filter, an answer past its
                    # context): the agent's doing, its 0. Never answered: the judge's settings,
                    # which stop the job.
                    judge = judge_model if judge_model is not None else services.judge
                    endpoint, judge_lease = upstream_endpoint(judge), getattr(judge, "lease", None)
                    if exc.status is None or endpoint is None or _replay_miss(judge_lease):
                        raise  # a replay that diverged: a grading error (no provider to ask)
                    if await _answers_probe(exc, endpoint, lease=judge_lease):
                        # it answers the harness's plain request: it refused the agent's answer
                        raise AgentFault(
                            f"the judge's provider refused the agent's answer: {exc}"
                        ) from None
                    if not has_answered(endpoint):
                        raise  # never answered in this process: its settings, the job stops
                    raise _provider_broken(exc, endpoint, "the judge") from None
                judge_failures = (
                    (proxy.lease.upstream_errors, proxy.lease.refusals) if proxy else None
                )
                judge_fault = await _proxy_judge_fault(proxy, self.plan.grader_s) if proxy else None
                if score is not None and score.details.get("error_kind") == "infrastructure":
                    # the answer judge's provider failing with a 500 on the agent's answer
                    answer_fault = await _judge_500_fault(lease, task, self.transcript.final_text())
        finally:
            WaitClock.uninstall(clock_token)
            # the answer judge's and the grader's judge calls are what the trial spent too
            # (usage.json, the summary, the budget on --resume: they were in none, helper-144)
            for lease in judged:
                self.usage = self.usage.add(lease.usage)
        if judge_model is not services.judge and judge_model is not None:
            with contextlib.suppress(Exception):
                await judge_model.aclose()  # type: ignore[attr-defined]
        result.score, result.judge_score, result.process = score, judge_score, process
        if score is not None and score.error:
            blame = score.details.get("blame")
            kind = ErrorKind.GRADING
            if answer_fault is not None:  # (its provider fails on the agent's answer)
                kind, why = answer_fault
                result.score = score = score.model_copy(update={"error": f"{why}; {score.error}"})
            elif score.details.get("error_kind") == "infrastructure":
                kind = ErrorKind.INFRASTRUCTURE
            elif score.details.get("error_kind") == "agent":
                # the run ended on a model/API error (stopReason "error"): upstream marks it an
                # error, not a 0; it is the provider's failure, so it is retried. Only from a
                # transcript the harness trusts: OpenClaw's recorded histories lose the claim
                # (transcript_from_model_calls)
                kind = ErrorKind.INFRASTRUCTURE
            elif judge_fault is not None:  # the judge's provider (the gateway's record)
                kind, why = judge_fault
                result.score = score = score.model_copy(
                    update={"error": f"{why}; the grader: {score.error}"}
                )
            elif blame == "agent" and not (judge_failures and judge_failures[1]):
                kind = ErrorKind.AGENT
            result.error = TrialError(
                kind=kind,
                message=score.error or "",
                phase="grading",
                retryable=kind == ErrorKind.INFRASTRUCTURE,
            )
            if kind == ErrorKind.AGENT:
                # the grader failed on what the agent left: a 0 that counts, not an abstention
                result.score = score.model_copy(
                    update={
                        "score": 0.0,
                        "details": score.details | {"agent_error": score.error},
                    }
                )
        return score, judge_score, process

    async def grade_programmatic(self) -> Score:
        """Phase 6 for verify: the task's programmatic grader alone (its environment, the
        grader limit of the plan), no judge and no process metrics."""
        self.mark("grading")
        python = self.grader_stage.activate() if self.grader_stage else "python3"
        return await run_grader(
            self.box,
            self.task,
            timeout_s=self.plan.grader_s,
            env=grader_env(self.task),
            python=python,
            verdict=self.verdict,
        )

    async def collect_output(self) -> None:
        """The clean room stopped, then the end state's results folder into ``task_output/``
        (settled again, since graders write there too; size-capped)."""
        self.mark("results")
        await self._stop_sandbox()
        try:
            await in_thread(
                functools.partial(
                    settle,
                    self.workspace,
                    manifest_caps().over(self.initial),
                    keep_links=self.initial.links,
                    hash_files=False,
                )
            )
        except EndStateRejected as exc:
            self.log(f"task_output: left out ({exc})")
            return
        results = self.workspace / Path(PATHS.results).relative_to(PATHS.workspace)
        if results.is_dir() and not results.is_symlink():
            left_out = await in_thread(
                _copy_capped, results, self.paths.task_output, END_STATE_MAX_BYTES
            )
            if left_out:
                self.log(f"task_output: {len(left_out)} file(s) over the size cap left out")

    def write(self, *, attempt: int = 1, earlier: Usage | None = None) -> Path:
        """Phase 7 (after :meth:`close`): every file of the trial folder (agent.log ending with
        the services' ``log_line``), result.json last, then the atomic rename to
        ``<out_root>/<task_id>/<trial_id>``. ``attempt`` and ``earlier`` (what failed attempts
        of the same trial spent: ``retried_usage``) go into result.json here, usage.json holds
        this attempt's own usage: the folder is never rewritten after the rename. Returns the
        folder."""
        result = self.result
        if result.error is not None:
            self.log(
                f"trial ended with an error ({result.error.kind}) in phase {result.error.phase}: "
                f"{result.error.message}"
            )
        result.timings = {k: round(v, 6) for k, v in self.timings.items()}
        result.waits = HarnessWaits(
            **{k: round(v, 6) for k, v in self.clock.waits.model_dump().items()}
        )
        result.finished_at = dt.datetime.now(dt.UTC).isoformat()
        usage = self.usage.model_copy()
        usage.elapsed_time = round(sum(self.timings.values()), 6)
        result.usage = usage
        result.retried_usage = earlier if earlier is not None else Usage()
        result.attempts = attempt
        if self.task_dir is None:
            raise RuntimeError("Trial.write: the trial has no out_root to write to")
        if self.services.log_line:
            self.log(self.services.log_line)
        return _finish_folder(
            self.task,
            self.config,
            result,
            self.transcript,
            self.paths,
            self.task_dir / self.name,
            self.transcript_text,
        )

    # -- the whole lifecycle -------------------------------------------------------------------

    async def run(
        self, *, attempt: int = 1, earlier: Usage | None = None
    ) -> tuple[TrialResult, Path]:
        """Every phase in order with typed failures (module docs); returns (result, folder).

        Raises :class:`clawrig.errors.ModelRequestError` and UserError; every other failure is
        recorded in ``result.error``."""
        result = self.result
        self._deadline = asyncio.get_running_loop().time() + self.plan.trial_s
        try:
            await self._within("setup", self._set_up())
            await self._within("agent", self.run_agent())
            await self._within("kill", self.stop_agent())
            await self._within("gt_inject", self.gt_in())
            await self._within("grading", self.grade())
            await self._within("results", self.collect_output())
        except (ModelRequestError, UserError, asyncio.CancelledError):
            # a refusal that stops the job, or a cancel: not a finished trial, nothing of it
            # stays (a resumed job runs it again)
            await self.close()
            if self.task_dir is not None:  # a folder of the job's: its task's too, if empty
                # (what its model calls spent is kept, in _retried/: the budget counts it)
                job = JobPaths(self.task_dir.parent)
                why = EPISODE_STOPPED if job.is_rollouts() else INTERRUPTED
                if not set_aside_unfinished(self.paths.root, self.result, job.retried, why):
                    remove_unfinished(self.paths.root)
            else:
                remove_tree(self.paths.root)
            raise
        except Exception as exc:
            result.error = self._error_of(exc)
            if isinstance(exc, ProviderError) and self.phase == "agent":
                # the agent's model failed or refused it (an outage, retries spent, a
                # provider that serves nothing now, a first prompt it refuses): the loop's
                # stop says so, for either agent (helper-152: the native agent's was null,
                # OpenClaw's model_error), a refusal as model_error's does (helper-154)
                result.stop_reason = StopReason.PROVIDER_ERROR
                if not result.turns:  # the steps it took (helper-156: 0 was recorded)
                    _count_steps(result, self.transcript)
                if isinstance(exc, ProviderRefused) and exc.status is not None:
                    said = exc.detail or "refused"
                    result.stop_detail = f"HTTP {exc.status}: {said}"[:2000]
            if isinstance(exc, SandboxDied) and exc.out_of_memory:
                result.error.out_of_memory = True  # (verify reads it: not the message's text)
            if result.error.kind == ErrorKind.AGENT:
                result.score = Score(
                    score=0.0,
                    grader="harness",
                    details={"agent_error": result.error.message, "phase": self.phase},
                )
        finally:
            self._deadline = None
        try:
            await self.close()
        except Exception:  # noqa: BLE001 - nothing of the sandbox's stopping ends the job
            self.log(f"closing the trial: {traceback.format_exc()}")
        try:
            return result, self.write(attempt=attempt, earlier=earlier)
        except Exception as exc:  # e.g. the host's disk is full: this trial ends, not the job
            remove_tree(self.paths.root)
            result.error = TrialError(
                kind=ErrorKind.INFRASTRUCTURE,
                message=f"the trial folder could not be written: {type(exc).__name__}: {exc}",
                phase="write",
                retryable=True,
            )
            assert self.task_dir is not None
            return result, self.task_dir / self.name

    async def _set_up(self) -> None:
        await self.sandbox_up()
        await self.workspace_and_services()

    def _error_of(self, exc: Exception) -> TrialError:
        """The typed error of a failed phase (blame follows control): what the agent caused
        while it had the sandbox (it broke the sandbox, filled its disk, left an end state
        past the caps or too slow to collect) is an agent error; setup failures are setup
        errors; a grading deadline is a grading error; the rest is infrastructure, retried
        (a harness bug keeps its traceback in agent.log)."""
        phase = self.phase
        agents = phase in AGENT_PHASES or phase == "results"
        if isinstance(exc, SetupError):
            return TrialError(kind=ErrorKind.SETUP, message=str(exc), phase=phase)
        if isinstance(exc, BudgetExceeded):  # the job's spend cap (a trial's own cap is graded)
            return TrialError(kind=ErrorKind.BUDGET, message=str(exc), phase=phase)
        if isinstance(exc, AgentFault):
            return TrialError(kind=ErrorKind.AGENT, message=str(exc), phase=phase)
        if isinstance(exc, TrialDeadline):
            if agents:
                return TrialError(kind=ErrorKind.AGENT, message=str(exc), phase=phase)
            if phase == "gt_inject" and self.rebuilding_calls:
                # the services rebuilt from the agent's calls outlasted the phase (23,000
                # calendar creates: a setup error, unscored, helper-143): the agent's 0
                return TrialError(
                    kind=ErrorKind.AGENT,
                    message=f"{exc} while the task's services were rebuilt from the agent's "
                    f"{self.rebuilding_calls:,} recorded calls for grading",
                    phase=phase,
                )
            if phase == "grading":
                return TrialError(kind=ErrorKind.GRADING, message=str(exc), phase=phase)
            return TrialError(kind=ErrorKind.SETUP, message=str(exc), phase=phase)
        if isinstance(exc, SandboxDied) and exc.out_of_memory and phase == "gt_inject":
            # the clean room died for its memory limit while the harness put the agent's
            # transcript and end state in (helper-124: a 200 MiB transcript under 128 MiB was
            # retried three times and left unscored): what the agent made, its 0
            return TrialError(kind=ErrorKind.AGENT, message=str(exc), phase=phase)
        if (agents or phase == "grading") and isinstance(exc, SandboxDied):
            # The sandbox died while the agent ran or right after, before grading: the agent
            # broke it (killed or stopped its supervisor, exhausted it). An agent error that
            # counts against the model as 0, so breaking the sandbox is no way to abstain.
            # While grading, the clean room runs only the task's grader on the agent's data
            # and the programs of the agent's it runs: one of those killed or stopped its
            # supervisor (or exhausted it), the agent's doing too.
            return TrialError(kind=ErrorKind.AGENT, message=str(exc), phase=phase)
        if isinstance(exc, InfrastructureError):  # retried unless it says it would fail again
            return TrialError(
                kind=ErrorKind.INFRASTRUCTURE,
                message=str(exc),
                phase=phase,
                retryable=getattr(exc, "retryable", True),
            )
        self.log(traceback.format_exc())  # a harness bug: infrastructure, traceback kept
        return TrialError(
            kind=ErrorKind.INFRASTRUCTURE,
            message=f"{type(exc).__name__}: {exc}",
            phase=phase,
            retryable=True,
        )


JUDGED_MODES = ("judge", "exact", "both")
"""``--grader`` modes that grade the agent's answer against the task's reference answer (or,
for a judge, its rubric) instead of running the task's own checks."""


def grader_problem(task: Task, mode: str) -> str | None:
    """Why ``--grader mode`` cannot grade ``task`` (one line naming its file), else None: a
    judge or exact match needs a reference answer (or, for the judge, a task graded by a
    judge's rubric); a task with neither and no checks of its own has no grader at all."""
    if task.answer is not None or task.grader.kind == GraderKind.JUDGE:
        return None
    kind = task.grader.kind
    if mode in JUDGED_MODES:
        own = "its own checks" if kind != GraderKind.NONE else "nothing"
        lacks = (
            "no reference answer to match the agent's answer against"
            if mode == "exact"  # exact matching asks no judge
            else "no reference answer or rubric for the judge to grade against"
        )
        return (
            f"{task.source}: --grader {mode}: the task has {lacks} (it is graded by {own}: "
            "use --grader auto)"
        )
    if kind == GraderKind.NONE:
        return f"{task.source}: the task has no grader (no checks, answer or rubric)"
    return None


async def run_trial(
    task: Task,
    config: TrialConfig,
    out_root: Path,
    *,
    run_index: int = 0,
    services: TrialServices | None = None,
    job_id: str = "",
    attempt: int = 1,
    earlier: Usage | None = None,
) -> tuple[TrialResult, Path]:
    """Run one trial of ``task`` and write its folder under ``out_root/<task_id>/`` (a thin
    wrapper over :meth:`Trial.run`).

    ``attempt`` (1 + earlier attempts) and ``earlier`` (the usage of failed earlier attempts)
    are written into result.json before the folder's rename. Returns (result, folder). Raises
    :class:`clawrig.errors.ModelRequestError` (the provider refused a request: a user error that
    must stop the job) and UserError for bad settings; every other failure is recorded in
    ``result.error``.
    """
    trial = Trial(
        task, config, out_root=out_root, run_index=run_index, services=services, job_id=job_id
    )
    return await trial.run(attempt=attempt, earlier=earlier)


FIRST_REFUSALS_STOP = 3
"""Trials whose first request a model that never answered refused for its content (its probe
answered) after which the job starts no new trial (:func:`_refusal_of`: a model whose context
cannot hold the task and its tools would refuse them all)."""
PROBE_TIMEOUT_S = 60.0
"""Seconds the harness waits for a provider to answer its probe (:func:`_answers_probe`, each
of its two attempts): a probe left unanswered is the provider's outage (ProviderError), not a
trial held for the endpoint's whole request timeout."""
PROBE_TOTAL_S = 2 * PROBE_TIMEOUT_S + 10.0
"""Seconds the harness's probe may take in all (its two attempts and the wait between): a
stream kept alive without ending is an outage (ProviderError), not a trial held for hours."""
REFUSED_TRIAL_ENDS = "this trial ends, not scored"
"""How the message of a trial ended by a refusal of its request ends (:func:`_refusal_of`):
what follows for a job (no new trial, ``--resume``) is the job's to say, as the same trial
runs as an RL episode, where neither applies."""


def _count_steps(result: TrialResult, transcript: Transcript) -> None:
    """``result``'s turns and tool calls: the model's answers in ``transcript`` so far (the
    native agent's, when the agent stopped without its outcome)."""
    result.turns = len(transcript.steps)
    result.tool_calls = sum(len(m.tool_calls) for m in transcript.steps)


def _answered(transcript: Transcript, lease: GatewayLease | None) -> bool:
    """True when the agent's model answered one of the trial's requests: by the gateway's
    count of the trial's answered requests when it has a lease (OpenClaw's transcript is a
    file in its sandbox, which the agent can rewrite: a refusal after answers, graded, would
    pass for one before any, not scored), else by the harness's own transcript."""
    if lease is not None:
        return lease.usage.request_count > 0
    return bool(transcript.steps)


def _replay_miss(lease: Any) -> bool:
    """True when the lease's replay had no recorded reply for a request (the run diverged)."""
    return lease is not None and "replay_miss" in lease.refusals


async def _refusal_of(exc: ModelRequestError, lease: Any, model: Any) -> Exception:
    """What an agent request refused before the trial's first answer means for the job
    (README "Running a model"): ``exc`` itself (it stops the job: the model's settings, or a
    replay that diverged) when the model never answered a request in this process or the
    request was a replay miss, else a :class:`ProviderRefused` that ends only this trial (not
    scored, ``--resume`` runs it again). A refusal of the key, account or model
    (:data:`SETTINGS_REFUSALS`) is also noted (:func:`clawrig.llm.client.mark_refused`): the job
    then starts no new trial; any other is followed by the harness's plain request
    (:func:`_answers_probe`): refused too, the provider is broken (:func:`_provider_broken`:
    no new trial starts either)."""
    if _replay_miss(lease) and "replay_refused" in lease.refusals:
        return ModelRequestError(
            f"--replay: {exc.detail or exc}; the trials finished so far are kept (the recorded "
            "trial ended on that refusal: replay the job's other tasks with --suite)",
            status=exc.status,
            detail=exc.detail,
        )
    if _replay_miss(lease):  # the gateway's line alone (no "HTTP 404 from ..."), and what to do
        return ModelRequestError(
            f"--replay: {exc.detail or exc}; the trials finished so far are kept and "
            "`--resume` runs the others (a run diverges when the task changed since it was "
            "recorded, other options change what the agent is sent (--preamble, --agent, the "
            "time limit it is told: --timeout-multiplier), a tool's output differs between "
            "runs, or tool calls of one turn race on a service)",
            status=exc.status,
            detail=exc.detail,
        )
    endpoint = lease.endpoint if lease is not None else getattr(model, "endpoint", None)
    if exc.status is None or endpoint is None:
        return exc
    if not has_answered(endpoint):
        # the settings are in doubt: a refusal of the key, account or model, a server's
        # failure, or a refusal of the same request with a plain conversation (its tools and
        # settings kept) stops the job; that request answered, the server refused what this
        # trial's conversation held (a first prompt past the model's context): this trial only
        like = lease.last_request if lease is not None else None
        content = 400 <= exc.status < 500 and exc.status not in SETTINGS_REFUSALS
        if not content or like is None:
            return exc
        # (an outage: nothing judged, the refusal kept in view)
        again = await _judge_refusal(exc, endpoint, like=like, lease=lease)
        if again is not None:
            # a 4xx: the settings are refused; a 5xx the server said not to retry: it fails
            blame = "the settings" if (again.status or 0) < 500 else "the server fails it"
            return ModelRequestError(
                f"{exc} (and with a plain conversation, its tools and settings kept: "
                f"{again}: {blame})",
                status=exc.status,
                detail=exc.detail,
            )
        why = (
            "answered with a plain conversation, its tools and settings kept: the settings "
            "work, this trial's conversation was refused"
        )
        if (
            refused := note_first_refusal(endpoint)
        ) >= FIRST_REFUSALS_STOP:  # and it answered none: no prompt of the job fits
            said = f"HTTP {exc.status}" + (f": {exc.detail}" if exc.detail else "")
            mark_refused(
                endpoint,
                f"the first request of {refused} trials ({said}) and not one answered, while "
                "it answers a plain conversation with the same tools and settings",
                advice=f"{PROMPTS_REFUSED}: run them with a model of a larger context, as a "
                "new job (another -o)",
            )
        return ProviderRefused(
            f"{exc} ({why}; {REFUSED_TRIAL_ENDS})", status=exc.status, detail=exc.detail
        )
    if exc.status in SETTINGS_REFUSALS:  # the key, account or model: no trial can pass now
        mark_refused(endpoint, str(exc))
        why = "it answered earlier requests: the key, account or model is refused now"
    elif not await _answers_probe(exc, endpoint, lease=lease):
        return _provider_broken(exc, endpoint, "the model")
    else:
        why = (
            "it answered earlier requests and answers a plain one: this trial's request was "
            "refused, not the settings"
        )
    # what follows for the job (no new trial, --resume) is the job's to say: the same trial
    # runs as an RL episode, where neither applies
    return ProviderRefused(
        f"{exc} ({why}; {REFUSED_TRIAL_ENDS})", status=exc.status, detail=exc.detail
    )


def _provider_broken(
    exc: ModelRequestError, endpoint: ModelEndpoint | None, role: str
) -> Exception:
    """The error for a provider (``role``: "the model" or "the judge") that refused a request
    and then the harness's plain request too (:func:`_answers_probe`): it serves nothing now,
    whatever the trial held. Noted (:func:`clawrig.llm.client.mark_refused`: the job starts no
    new trial, ``provider_stopped``); this trial ends as an infrastructure error, not scored
    (``--resume`` runs it again)."""
    why = f"{exc} (and a plain request is refused too)"
    if endpoint is not None:  # (the job's stop line names the role)
        mark_refused(
            endpoint, why, advice="it had answered this job's requests: its message says why"
        )
    return ProviderRefused(
        f"{role}: {why}: it serves nothing now; this trial ends",
        status=exc.status,
        detail=exc.detail,
    )


async def _fails_again(
    endpoint: ModelEndpoint | None, like: dict[str, Any] | None, lease: GatewayLease | None
) -> bool:
    """True when ``like`` (a request a server failed with a 500 after every retry), sent once
    more unchanged (:func:`_probe_refusal` with its own conversation and no token limit added:
    helper-158, a failure while generating need not recur within 8 tokens), fails again with
    a server error: the failure follows the conversation, not a passing outage (which a
    request answered now was: False, as for any other failure)."""
    if endpoint is None or not isinstance(like, dict) or not isinstance(like.get("messages"), list):
        return False
    status: int | None = None
    try:
        again = await _probe_refusal(
            endpoint, like=like, lease=lease, messages=like["messages"], as_sent=True
        )
        status = again.status if again is not None else None
    except ProviderError as failed:
        status = failed.status if isinstance(failed, ProviderRetriesExhausted) else None
    return (status or 0) >= 500


async def _fails_on_content(failure: object, lease: GatewayLease) -> bool:
    """True when the 500 ``lease``'s last failed request met after its retries (``failure``:
    its error, or a line saying it) is that request's own doing: the provider answers the
    harness's plain request (:func:`_answers_probe`) and the request the server failed (the
    gateway's record of it, not the lease's last: a program's answered one was resent,
    helper-158), sent again unchanged, fails again (:func:`_fails_again`; answered now, it
    was an outage that has passed). False for a replay that diverged. Raises ProviderError
    when the plain request fails too (an outage, ``failure`` kept in its message). Used for
    the agent's model (:meth:`Trial.run_agent`) and the answer judge's
    (:func:`_judge_500_fault`)."""
    if _replay_miss(lease) or not await _answers_probe(failure, lease.endpoint, lease=lease):
        return False
    return await _fails_again(lease.endpoint, lease.upstream_failure_body, lease)


async def _judge_500_fault(
    lease: GatewayLease | None, task: Task, answer: str
) -> tuple[ErrorKind, str] | None:
    """(agent, why) when the answer judge's provider failed with a 500 after its retries on
    what the agent's ``answer`` (its final text) put in the request, else None (another
    failure, an outage, a request not the answer judge's: the caller's infrastructure). The
    agent's when the provider answers the harness's plain request, fails the same request
    again (:func:`_fails_on_content`), and answers the request made anew for ``task`` with
    :data:`NEUTRAL_ANSWER` in the answer's place (:func:`clawrig.grading.judge.
    build_judge_messages`: only the answer's section differs; helper-162: a judge failing
    every long request scored the honest "42" 0 by the first two alone; helper-163: a text
    replace missed a stripped answer and changed the prompt's own text too). helper-161: an
    answer the judge's provider fails on ended the trial unscored and retried, a free
    abstention for a wrong answer."""
    from clawrig.grading.judge import build_judge_messages

    if lease is None or lease.upstream_failure_status != 500:
        return None
    body = lease.upstream_failure_body
    if not isinstance(body, dict):
        return None
    made = [
        s
        for s in (False, True)
        if body.get("messages") == build_judge_messages(task, answer, strict=s)
    ]
    if not made:
        return None  # not a request of the answer judge's as this harness makes it
    messages = build_judge_messages(task, NEUTRAL_ANSWER, strict=made[0])
    said = lease.upstream_failure_detail or "server error"
    try:
        if not await _fails_on_content(f"the judge's provider: HTTP 500: {said}", lease):
            return None
        neutral = {**body, "messages": messages}
        if await _probe_refusal(
            lease.endpoint, like=neutral, lease=lease, messages=messages, as_sent=True
        ):
            return None  # refused without the answer too: not the answer's doing
    except ProviderError:
        return None  # the plain request, or the request without the answer, failed too
    return ErrorKind.AGENT, f"the judge's provider fails on the agent's answer (HTTP 500: {said})"


NEUTRAL_ANSWER = "(answer withheld)"
"""What stands for the agent's answer in the answer judge's request made anew to tell whether
its provider fails on the answer or on the rest of the request (:func:`_judge_500_fault`)."""


async def _answers_probe(
    refusal: object,
    endpoint: ModelEndpoint | None,
    *,
    like: dict[str, Any] | None = None,
    lease: GatewayLease | None = None,
) -> bool:
    """:func:`_judge_refusal` is None: the probe judging ``refusal`` was answered (never
    without an endpoint)."""
    return await _judge_refusal(refusal, endpoint, like=like, lease=lease) is None


async def _judge_refusal(
    refusal: object,
    endpoint: ModelEndpoint | None,
    *,
    like: dict[str, Any] | None = None,
    lease: GatewayLease | None = None,
) -> ModelRequestError | None:
    """:func:`_probe_refusal` asked to judge ``refusal`` (the refused request's error, or a
    line saying it): a :class:`ProviderError` the probe meets (an outage) keeps that refusal
    in its message (helper-154: after a refusal mid-trial, only the probe's own timeout was
    said, as if the agent's request had timed out)."""
    try:
        return await _probe_refusal(endpoint, like=like, lease=lease)
    except ProviderError as failed:
        raise ProviderError(
            f"{refusal} (and the plain request that judges it failed: {failed})"
        ) from None


async def _probe_refusal(
    endpoint: ModelEndpoint | None,
    *,
    like: dict[str, Any] | None = None,
    lease: GatewayLease | None = None,
    messages: list[dict[str, Any]] | None = None,
    as_sent: bool = False,
) -> ModelRequestError | None:
    """None when the provider at ``endpoint`` answers :data:`clawrig.llm.client.PROBE` now (the
    same model, key and base URL; retried on an outage): the harness's evidence that its
    refusal of another request was for that request's content (what the agent put in it), not
    the provider's settings. Asked after every such refusal, whether or not the provider
    answered earlier in this process. ``like``: the refused request's body (an OpenAI
    chat-completions request), whose fields but its messages the probe keeps (its tools,
    sampling settings, token limit and streaming, ``stream_options`` as the gateway sent them
    upstream, not the endpoint's token limit added: a setting the server refuses is refused
    again; without a limit of its own, 8 completion tokens), else up to 8 completion tokens
    and nothing more. Each of its two attempts waits at most :data:`PROBE_TIMEOUT_S` for a
    byte, the whole at most :data:`PROBE_TOTAL_S`; a reply is read up to
    :data:`clawrig.llm.client.PROBE_REPLY_BYTES` with the plain probe's 8 tokens (a server may
    ignore them), up to the request's own cap with its own limit. The probe's answer is not
    noted as the model answering (:attr:`OpenAIChatModel.notes_answers`). ``lease``: the
    trial's (or its judge's) gateway lease, which the answered probe's usage and cost are
    counted on (the trial's usage, the job's spend: :meth:`Gateway.count_probe`). Else the
    probe's refusal
    (a ModelRequestError without an endpoint too); raises ProviderError when it fails (an
    outage), recorded as a refusal is (:meth:`Gateway.record_unanswered_probe`: its status,
    or 0 where no server answered). ``messages``: the conversation to send instead of
    ``PROBE`` (the refused request's own, sent again: :func:`_fails_again`); ``as_sent``: no
    token limit added (the request's own, or the endpoint's, as it went)."""
    if endpoint is None:
        return ModelRequestError("no endpoint to ask")
    tools: list[Any] | None = None
    extra: dict[str, Any] | None = None
    limit: int | None = 8
    stream = False
    if like is not None:
        skip = ("model", "messages", "tools", "stream", "stream_options")
        extra = {k: v for k, v in like.items() if k not in skip}
        tools = like.get("tools") if isinstance(like.get("tools"), list) else None
        # the request's own token limit (in ``extra``), not the endpoint's added to it (the
        # gateway sent it upstream without); none: the plain probe's 8
        if "max_tokens" in like or "max_completion_tokens" in like:
            endpoint, limit = endpoint.model_copy(update={"max_tokens": None}), None
        elif as_sent:
            limit = None
        if stream := like.get("stream") is True:  # as the gateway streams it (_forward)
            options = like.get("stream_options")
            extra["stream_options"] = {
                **(options if isinstance(options, dict) else {}),
                "include_usage": True,
            }
    retry = RetryPolicy(attempts=2, max_s=5.0)
    messages = messages if messages is not None else PROBE
    request = {  # as recorded (the client adds the model and the endpoint's settings)
        **(extra or {}),
        "messages": messages,
        **({"tools": tools} if tools else {}),
        **({"max_tokens": limit} if limit is not None else {}),
        **({"stream": True} if stream else {}),
    }
    async with OpenAIChatModel(
        endpoint,
        retry=retry,
        stream=stream,
        timeout_s=PROBE_TIMEOUT_S,
        # the refused request's own token limit kept: its own reply cap (a streamed reasoning
        # reply within it can pass 1 MiB: helper-152), else a plain probe's
        max_reply_bytes=PROBE_REPLY_BYTES if limit is not None else MAX_REPLY_BYTES,
    ) as model:
        model.notes_answers = False  # the probe is not the model taking a trial's request
        try:
            async with asyncio.timeout(PROBE_TOTAL_S):  # a stream kept alive but never ending
                answer = await model.chat(messages, tools=tools, max_tokens=limit, extra=extra)
        except ModelRequestError as refused:
            if lease is not None:
                lease.gateway.record_unanswered_probe(lease, request, refused.status, str(refused))
            return refused
        except (ProviderError, TimeoutError) as failed:
            # failed after its retries (a 5xx, no reply): recorded too, with the server's
            # status where one answered (helper-157: only answered and refused ones were)
            if isinstance(failed, TimeoutError):
                failed = ProviderError(
                    f"{endpoint.name}: the harness's plain request had no whole answer within "
                    f"{PROBE_TOTAL_S:g} s"
                )
            if lease is not None:
                status = getattr(failed, "status", None)
                lease.gateway.record_unanswered_probe(lease, request, status, str(failed))
            raise failed from None
    if lease is not None:
        lease.gateway.count_probe(lease, answer, request)
    return None


async def _proxy_judge_fault(proxy: JudgeProxy, grader_s: float) -> tuple[ErrorKind, str] | None:
    """(kind, why) of a grader's failure when its judge calls through the proxy went wrong,
    from the gateway's record (the harness's evidence), else None: the judge's provider
    failing after retries, or silent past a stall (:func:`clawrig.llm.stalls.stall_limit_s`
    of the grader's ``grader_s`` limit) is infrastructure. A refusal of a grader's request
    (any status) is followed by the harness's plain request (:func:`_answers_probe`):
    answered, the grader got the refusal of what it sent (the agent's answer, or a request of
    the agent's program) and decides: a crash on it is the agent's; refused too, the judge is
    broken: infrastructure and no new trial starts (:func:`_provider_broken`). Raises
    :class:`ModelRequestError` when the judge refused both and never answered in this
    process: its settings, which stop the job."""
    lease = proxy.lease
    errors, refused = lease.upstream_errors, lease.upstream_refusals
    if errors:
        # (a 500 is not judged here: what of a grader's request is the agent's, the harness
        # cannot tell, and a judge failing every grader's request would score every trial 0:
        # helper-162)
        return ErrorKind.INFRASTRUCTURE, f"the judge's provider failed: {errors[-1]}"
    if lease.watch.stalled(grader_s):
        # the grading is over: the lease's requests still in flight (a program of the agent's
        # the grader ran may hold every place of the judge's max_concurrency with slow ones)
        # are cut, so their places go to the probe, which waits first in line for one
        lease.cut_upstream()
        if not await provider_answers(lease.endpoint, probe_s(grader_s), stall_limit_s(grader_s)):
            silent = lease.watch.silent_s()
            return ErrorKind.INFRASTRUCTURE, f"the judge's provider stalled ({silent:.0f} s silent)"
    if not refused:
        return None
    judged = f"the judge's provider refused a grader's request (HTTP {refused[-1]})"
    if await _answers_probe(judged, lease.endpoint, lease=lease):
        return ErrorKind.AGENT, (
            f"the judge's provider refused the agent's answer (HTTP {refused[-1]})"
        )
    name = lease.model_name or "no endpoint"
    if lease.endpoint is None or not has_answered(lease.endpoint):
        raise ModelRequestError(
            f"the judge ({name}) refused a grader's request with HTTP {refused[-1]} and "
            "answers no plain request either: check its settings (--judge, JUDGE_MODEL, its key)",
            status=refused[-1],
        )
    exc = ModelRequestError(
        f"{name} refused a grader's request with HTTP {refused[-1]}", status=refused[-1]
    )
    return ErrorKind.INFRASTRUCTURE, str(_provider_broken(exc, lease.endpoint, "the judge"))


@contextlib.asynccontextmanager
async def _judge_env(
    sandbox: Any,
    task: Task,
    config: TrialConfig,
    services: TrialServices,
    trial_id: str,
    run_index: int,
    folder: TrialPaths,
    clock: WaitClock | None = None,
) -> AsyncIterator[JudgeProxy | None]:
    """The judge proxy for a programmatic grader when the job has a gateway, a judge to answer
    (a judge model, or recorded replies) and the grader can call it
    (:func:`~clawrig.grading.judge_proxy.grader_may_call_judge`); None otherwise (no forwarder
    started). Its ``env`` holds the OPENROUTER_* / JUDGE_MODEL variables to give the grader."""
    programmatic = task.grader.kind in (GraderKind.PROGRAMMATIC, GraderKind.BOTH)
    programmatic = programmatic and config.grader in ("auto", "programmatic")
    gateway = services.gateway
    answers = gateway is not None and (
        upstream_endpoint(services.judge) is not None
        or services.judge_cache is not None
        or gateway.cache is not None
    )
    if gateway is None or not programmatic or not answers or not grader_may_call_judge(task):
        yield None
        return
    async with judge_proxy(
        sandbox,
        gateway,
        endpoint=upstream_endpoint(services.judge),
        trial_id=trial_id,
        log_path=folder.judge_chat,
        cache=services.judge_cache,
        task_id=task.id,
        run_index=run_index,
        clock=clock,  # its requests' waits for the provider's place: the trial's
    ) as proxy:
        yield proxy


def _judge_model(
    task: Task, services: TrialServices, trial_id: str, run_index: int, folder: TrialPaths
) -> ChatModel | None:
    """The answer/process judge, through the gateway when there is one (recorded in
    model_calls.jsonl, so a replayed job re-judges without a model server)."""
    endpoint = upstream_endpoint(services.judge)
    if services.gateway is None or endpoint is None:
        return services.judge
    lease = services.gateway.open_trial(
        endpoint,
        trial_id=trial_id,
        role="judge",
        task_id=task.id,
        run_index=run_index,
        record_path=folder.model_calls,
        cache=services.judge_cache,  # --judge-cache answers the answer judge too
    )
    return lease.chat_model()


async def _grade(
    task: Task,
    config: TrialConfig,
    sandbox: Any,
    transcript: Transcript,
    folder: TrialPaths,
    services: TrialServices,
    *,
    grader_s: float,
    python: str = "python3",
    judge_env: dict[str, str] | None = None,
    judge: ChatModel | None = None,
    verdict: HarnessChannel | None = None,
    clock: WaitClock | None = None,
) -> tuple[Score | None, Score | None, ProcessScore]:
    """Outcome score (+ judge score when both ran) and process metrics; the programmatic
    grader runs within ``grader_s`` seconds (the trial's :class:`TimeoutPlan`), moved later by
    the harness waits of ``clock`` meanwhile (:func:`clawrig.grading.programmatic.run_grader`)."""
    judge = judge if judge is not None else services.judge
    judge_log = folder.judge_chat
    mode = config.grader
    kind = task.grader.kind
    score: Score | None = None
    judge_score: Score | None = None
    if mode in ("auto", "programmatic") and kind in (GraderKind.PROGRAMMATIC, GraderKind.BOTH):
        score = await run_grader(
            sandbox,
            task,
            timeout_s=grader_s,
            env=grader_env(task) | (judge_env or {}),
            python=python,
            verdict=verdict,
            clock=clock,
        )
    elif task.answer is not None or kind == GraderKind.JUDGE:
        use_judge = mode in ("judge", "both") or (mode == "auto" and judge is not None)
        exact = None
        if mode in ("exact", "both", "auto"):  # off the event loop: the answer is the model's
            exact = await asyncio.to_thread(check_answer, task, transcript)
        if use_judge:
            if judge is None:
                raise UserError("--judge: no judge model configured (set --judge or JUDGE_MODEL)")
            judge_score = await judge_answer(
                task,
                transcript,
                judge,
                log_path=judge_log,
                repeats=config.judge_repeats,
            )
        if judge_score is not None and exact is not None and mode == "both":
            score = combine(judge_score, exact)
        else:
            score = judge_score or exact
            judge_score = None if score is judge_score else judge_score
    else:
        score = Score(grader="none", error=grader_problem(task, mode) or "the task has no grader")
    process = ProcessScore()
    if task.milestones or task.steps_num:
        value = score.score if score is not None and score.error is None else None
        metrics = await grade_process(
            task,
            transcript,
            value,
            method="judge" if judge is not None and mode != "exact" else "match",
            model=judge,
            log_path=folder.judge_process_chat,
        )
        process = ProcessScore.model_validate(metrics)
    return score, judge_score, process


def recorded_usage(folder: Path) -> tuple[Usage, int | None, str]:
    """(what the model calls recorded in a trial folder spent: its gateway record
    (:data:`TrialPaths.MODEL_CALLS`) and its judge logs (:data:`TrialPaths.JUDGE_LOGS`), a call
    in both counted once by its completion's id, replayed calls (``cached``) not at all;
    their run index; their trial id). Every whole line is read (a process killed mid-write
    leaves a cut last line); a line that is no call's record, or whose usage holds a negative
    or non-finite number (the file is the job folder's, which anyone may have edited), is
    skipped."""
    usage, run_index, trial_id = Usage(), None, ""
    gateway_ids: set[str] = set()  # (the gateway's records: a judge log's copy is not counted)
    files = [(TrialPaths(folder).model_calls, False)]
    files += [(folder / name, True) for name in TrialPaths.JUDGE_LOGS]
    for path, judge in files:
        for rec in jsonl_objects(path):
            if rec.get("cached"):
                continue
            response = rec["response"] if isinstance(rec.get("response"), dict) else {}
            raw = response.get("usage") if judge else rec.get("usage")
            cid = response.get("response_id" if judge else "id")
            cid = cid if isinstance(cid, str) and cid else None
            if not isinstance(raw, dict) or (judge and cid in gateway_ids):
                continue
            try:
                used = Usage.model_validate(raw)
            except (ValueError, RecursionError):
                continue
            numbers = [v for v in used.model_dump().values() if isinstance(v, int | float)]
            if any(not math.isfinite(v) or not 0 <= v < 1e12 for v in numbers):
                continue  # (a sum of such could be no number at all)
            if cid is not None and not judge:
                gateway_ids.add(cid)
            if isinstance(rec.get("run_index"), int) and not isinstance(rec["run_index"], bool):
                run_index = rec["run_index"]
            trial_id = str(rec.get("trial_id") or trial_id)
            usage = usage.add(used)
    return usage, run_index, trial_id


INTERRUPTED = "interrupted: the job stopped while this attempt ran (run again on resume)"
"""The error of an attempt cut by the job's stop (:func:`set_aside_unfinished`)."""
EPISODE_STOPPED = (
    "interrupted: the episode was stopped before it was graded (its server or trainer stopped, "
    "or its request was cancelled)"
)
"""The error of an RL episode's attempt cut short (an RL output folder: there is no resume;
helper-182)."""


def set_aside_unfinished(
    folder: Path, base: TrialResult, retried: Path, why: str = INTERRUPTED
) -> Usage | None:
    """Keep what an unfinished trial's attempt spent: when its folder (a job's ``.tmp-*``: a
    trial cancelled by Ctrl-C or SIGTERM, or left by a killed job) holds recorded model calls,
    it is moved to ``retried`` (the job's ``_retried/``) as an attempt: ``base`` (the trial's
    task, job and agent) with those calls' usage and an interrupted error, so the budget and
    the summary's totals count it (:func:`clawrig.runner.batch.recorded_spend`; before, the
    spend of the trials an interrupt cut was lost with their folders: a job stopped at
    "$0.30" of ``--budget-usd 0.30`` having spent $0.33, a red-team finding); ``why``: its
    error's message. Returns what the attempt spent, or None, moving nothing, when no call was
    recorded there (or it cannot be written, or ``retried`` is a link: never followed,
    :func:`move_to_retried`)."""
    usage, run_index, trial_id = recorded_usage(folder)
    if run_index is None or not (usage.request_count or usage.cost_usd):
        return None
    result = base.model_copy(
        update={
            "run_index": run_index,
            "trial_id": trial_id or base.trial_id or folder.name,
            "usage": usage,
            "score": None,
            "error": TrialError(
                kind=ErrorKind.INFRASTRUCTURE, message=why, phase="agent", retryable=True
            ),
        }
    )
    from clawrig.runner.batch import write_json_atomic

    try:
        # (renamed into place: a link or hard link planted as result.json in a killed
        # writer's folder is replaced, not written through: helper-183)
        write_json_atomic(TrialPaths(folder).result, result)
        # named as a finished attempt's, <task>__<trial> (helper-152, 153: it kept the .tmp-
        # folder's name), with its folder's unique part only when that name is taken
        paths, name = JobPaths(retried.parent), unfinished_trial_name(folder.name)
        if not name or os.path.lexists(paths.retried_trial(result.task_id, name)):
            name = folder.name.removeprefix(TMP_PREFIX)
        move_to_retried(folder, paths, result.task_id, name)
    except OSError:
        return None
    with contextlib.suppress(OSError):  # (its task's folder, when that was the only one)
        folder.parent.rmdir()
    return usage


def move_to_retried(folder: Path, paths: JobPaths, task_id: str, name: str) -> Path:
    """Move a trial attempt's ``folder`` into the job's ``_retried/`` as ``<task>__<name>``, or
    ``<task>__<name>-2`` ... when that name is taken by anything, a link included: never into
    nor through one (helper-184: a link planted at the name had ``--resume`` move a trial out
    of the job; a folder there hid the attempt inside it). Returns where it went. Raises
    OSError, also when ``_retried`` is a link."""
    if paths.retried.is_symlink():
        raise OSError(f"{paths.retried}: a link (attempts are not moved where it leads)")
    paths.retried.mkdir(parents=True, exist_ok=True)
    taken = target = paths.retried_trial(task_id, name)
    n = 2
    while os.path.lexists(target):
        target, n = taken.with_name(f"{taken.name}-{n}"), n + 1
    shutil.move(str(folder), str(target))  # (a name that is not there: a rename)
    return target


def remove_unfinished(folder: Path) -> None:
    """Remove a trial's unfinished ``<task>/.tmp-*`` ``folder`` in a job, and its task's folder
    when that is left empty (no other trial of the task there, alive or finished): a
    cancelled trial, or a job's sweep as it exits at once (:func:`clawrig.runner.batch.
    sweep_partial_trials`), leaves no empty task folders."""
    remove_tree(folder)
    with contextlib.suppress(OSError):  # another trial's folder is there
        folder.parent.rmdir()


def _unfinished_folder(task_dir: Path, name: str) -> Path:
    """A new ``.tmp-<name>-*`` folder in the job's ``task_dir`` (made when missing; made
    again when another process's cancelled trial removed it, empty, in between:
    :func:`remove_unfinished`). Raises OSError."""
    for _ in range(3):
        task_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            return _readable(Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{name}-", dir=task_dir)))
    return _readable(Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{name}-", dir=task_dir)))


def _readable(folder: Path) -> Path:
    """``folder`` (a new trial folder, mkdtemp's 0700) with the mode mkdir would give it, as
    its task folder and its files have (helper-135: trial folders were 0700, their files
    0644)."""
    os.chmod(folder, umask_mode(0o777))
    return folder


def _finish_folder(
    task: Task,
    config: TrialConfig,
    result: TrialResult,
    transcript: Transcript,
    paths: TrialPaths,
    final: Path,
    chat: str | None = None,
) -> Path:
    """Write every file of the trial folder ``paths`` (result.json last) and rename it to
    ``final``. ``chat``: the session file's text as the grader saw it (default: the transcript
    as OpenClaw JSONL)."""
    paths.chat.write_text(
        chat if chat is not None else dumps_openclaw_jsonl(transcript), encoding="utf-8"
    )
    for log in paths.judge_logs:
        log.touch()
    profile = task.tool_profile or config.tool_profile
    try:
        schema = _dialog_tool_schema(profile)
    except Exception:
        profile, schema = "", []
    # DialogFile's fields as its JSON dump holds them (both lists are JSON values already);
    # the schema's text is the same for every trial of a profile
    dialog = {"formatted_dialog": to_formatted_dialog(transcript), "tool_schema": schema}
    text = json_text_reusing(dialog, "tool_schema", key=f"tool_schema:{profile}")
    paths.dialog.write_text(text + "\n", encoding="utf-8")
    _write_json(paths.score, ScoreFile.of(result))
    _write_json(paths.process_score, result.process)
    _write_json(paths.usage, result.usage)
    _write_json(paths.result, result)
    for _ in range(100):
        try:
            os.rename(paths.root, final)  # never onto another trial's folder (ENOTEMPTY)
            return final
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        # another trial of the task took the name meanwhile (the same minute and 6 hex
        # digits: ~3% of 1,000 runs of a task in one minute); before, this folder was moved
        # into that one and lost from the job
        final = final.with_name(trial_folder_name(config.model))
        result.trial_id = final.name
        _write_json(paths.result, result)
    raise OSError(errno.EEXIST, "no free trial folder name", str(final))
