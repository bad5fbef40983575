"""One trial's lifecycle: sandbox up, setup, agent, agent processes killed, gt in, grading,
results down; each phase timed. The trial folder is written to a temporary name and renamed,
so it is either whole or absent (the unit of resume).

Folder: ``<output>/<task_id>/<model>_<YYYYmmdd_HHMM>_<6 hex>/`` with score.json,
process_score.json, usage.json, agent.log, chat.jsonl, judge_chat.jsonl,
judge_process_chat.jsonl, formatted_dialog.json, task_output/ (the end state's results folder),
end_state/ (every workspace file the agent created or changed) and result.json (DataClawBench's
layout, formats.md section 3, plus result.json and end_state/).

Failures are typed (shared/DESIGN.md): setup errors and grading errors are recorded;
infrastructure errors (sandbox died, provider down after retries) are marked retryable and
never scored; a refused model request (:class:`clawrig.errors.ModelRequestError`) propagates
to stop the job with one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import os
import secrets
import shutil
import stat
import tempfile
import time
import traceback
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrig import __version__
from clawrig.agents import Agent, AgentContext, AgentLimits, create_agent
from clawrig.agents.preamble import preamble_for
from clawrig.egress.trial import TrialNetwork
from clawrig.env.system import SetupNetwork, prepare_system, resolve_environment
from clawrig.errors import (
    InfrastructureError,
    ModelRequestError,
    SandboxDied,
    SetupError,
    UserError,
)
from clawrig.grading.answers import check_answer, combine
from clawrig.grading.judge import judge_answer
from clawrig.grading.judge_proxy import judge_proxy, upstream_endpoint
from clawrig.grading.process import grade_process
from clawrig.grading.programmatic import run_grader
from clawrig.leftovers import owned_tempdir
from clawrig.llm.base import ChatModel
from clawrig.llm.gateway import RECORD_FILE, Gateway, GatewayRefusal, ResponseCache
from clawrig.sandbox import Limits, SandboxConfig, create_sandbox
from clawrig.sandbox.paths import PATHS
from clawrig.sandbox.pyenv import GradingEnvStage, ensure_env
from clawrig.sandbox.workspace import (
    inject_gt,
    install_skills,
    materialise_workspace,
    run_warmup,
)
from clawrig.services import restart_services, save_audits, service_binds, start_services
from clawrig.spec.job import TrialConfig, model_slug
from clawrig.spec.task import GraderKind, Task
from clawrig.spec.transcript import Transcript
from clawrig.spec.trial import ErrorKind, Score, StopReason, TrialError, TrialResult, Usage
from clawrig.tools.base import ToolContext, WebPolicy
from clawrig.transcript import dumps_openclaw_jsonl, to_formatted_dialog
from clawrig.web.service import WebService, web_session

END_STATE_MAX_BYTES = 64 * 1024 * 1024
AGENT_PHASES = ("agent", "kill", "collect", "gt_inject")
"""Phases in which a dead sandbox is the agent's doing (it had the sandbox to itself)."""
_CAP_STOPS = {
    "budget": StopReason.COST_BUDGET,
    "cost_budget": StopReason.COST_BUDGET,
    "token_budget": StopReason.TOKEN_BUDGET,
    "max_requests": StopReason.MAX_TURNS,
}


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


def trial_folder_name(model: str, when: dt.datetime | None = None) -> str:
    """``<model>_<YYYYmmdd_HHMM>_<6 hex>`` (DataClawBench's per-run folder name)."""
    when = when or dt.datetime.now()
    return f"{model_slug(model)}_{when:%Y%m%d_%H%M}_{secrets.token_hex(3)}"


def _manifest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every regular file under ``root`` (symlinks not followed)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
                if not stat.S_ISREG(st.st_mode):
                    continue
                h = hashlib.sha256()
                fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as fh:
                    for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                        h.update(chunk)
                out[os.path.relpath(full, root)] = h.hexdigest()
            except OSError:
                continue
    return out


def _copy_changed(ws: Path, before: dict[str, str], dest: Path) -> list[str]:
    """Copy files the agent created or changed (not gt/) into ``dest``; return their paths.
    Initial files that are gone are listed in ``<dest>_deleted.json``."""
    after = _manifest(ws)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _write_json(dest.parent / f"{dest.name}_deleted.json", sorted(set(before) - set(after)))
    changed = sorted(
        rel
        for rel, digest in after.items()
        if before.get(rel) != digest and not rel.startswith("gt" + os.sep)
    )
    total = 0
    kept = []
    for rel in changed:
        src = ws / rel
        try:
            size = os.lstat(src).st_size
        except OSError:
            continue
        if total + size > END_STATE_MAX_BYTES:
            continue
        total += size
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh, open(target, "wb") as out:
            shutil.copyfileobj(fh, out)
        kept.append(rel)
    return kept


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, ensure_ascii=False, indent=2, default=str) + "\n")


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
    """Environment for graders: the task's Env names with values from the host (.env loaded by
    the CLI), plus placeholders so graders that read judge settings do not crash with a
    KeyError when they are unset (peers.md pain point 15). Real keys are never passed."""
    env: dict[str, str] = {}
    for name in task.env:
        if name.endswith("_API_KEY"):
            env[name] = "clawrig-placeholder-key"
        elif name in os.environ:
            env[name] = os.environ[name]
    env.setdefault("OPENROUTER_API_KEY", "clawrig-placeholder-key")
    env.setdefault("OPENROUTER_BASE_URL", "http://127.0.0.1:9/v1")
    env.setdefault("JUDGE_MODEL", "clawrig-judge-unavailable")
    return env


async def run_trial(
    task: Task,
    config: TrialConfig,
    out_root: Path,
    *,
    run_index: int = 0,
    services: TrialServices | None = None,
    job_id: str = "",
) -> tuple[TrialResult, Path]:
    """Run one trial of ``task`` and write its folder under ``out_root/<task_id>/``.

    Returns (result, folder). Raises :class:`clawrig.errors.ModelRequestError` (the provider
    refused a request: a user error that must stop the job) and UserError for bad settings;
    every other failure is recorded in ``result.error``.
    """
    services = services or TrialServices()
    started = dt.datetime.now(dt.UTC)
    name = trial_folder_name(config.model, started.astimezone())
    task_dir = out_root / task.id
    task_dir.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=task_dir))
    work = owned_tempdir("trial", services.work_dir)
    os.chmod(work, 0o755)
    ws = work / "workspace"
    timings: dict[str, float] = {}
    result = TrialResult(
        task_id=task.id,
        category=task.category,
        run_index=run_index,
        trial_id=name,
        job_id=job_id,
        task_source=str(suite_root_of(task)),
        model=config.model,
        agent=config.agent,
        sandbox=config.sandbox,
        config_hash=config.config_hash(),
        versions={"clawrig": __version__},
        started_at=started.isoformat(),
    )
    agent_log = tmp_dir / "agent.log"
    agent_log.touch()
    transcript = Transcript()
    usage = Usage()
    sandbox = None
    grader_stage: GradingEnvStage | None = None
    network: TrialNetwork | None = None
    lease: Any = None
    agent: Agent | None = None
    phase = "setup"
    t_phase = time.monotonic()

    def mark(next_phase: str) -> None:
        nonlocal phase, t_phase
        now = time.monotonic()
        timings[phase] = timings.get(phase, 0.0) + now - t_phase
        phase, t_phase = next_phase, now

    try:
        agent = create_agent(config.agent)
        if agent.needs_model and services.model is None:
            raise UserError(f"--model: the {agent.name} agent needs a model")
        if services.gateway is not None and agent.uses_gateway:
            agent.gateway = services.gateway  # agents that run their own client (openclaw)
        materialise_workspace(task, ws)
        before = await asyncio.to_thread(_manifest, ws)
        mark("sandbox_start")
        limits = Limits(
            memory_bytes=config.memory_mb * 1024**2,
            max_processes=config.max_processes,
            command_timeout_s=max(task.timeout_seconds * config.timeout_multiplier, 1.0),
            call_timeout_s=config.call_timeout_s,
        )
        needs = agent.sandbox_needs(task)
        model = services.model
        if services.gateway is not None and (endpoint := upstream_endpoint(model)) is not None:
            # one lease per trial: the agent's calls and those its programs make with the
            # task's model keys (TrialNetwork) are counted, capped and recorded together
            lease = services.gateway.open_trial(
                endpoint,
                trial_id=name,
                task_id=task.id,
                run_index=run_index,
                record_path=tmp_dir / RECORD_FILE,
                max_cost_usd=config.max_cost_usd_per_trial,
                max_tokens=config.max_tokens_per_trial,
            )
        network = await TrialNetwork.open(
            folder=tmp_dir,
            sandbox_kind=config.sandbox,
            setup=config.setup_network,
            agent=config.network,
            env_names=task.env,
            gateway=services.gateway,
            lease=lease,
            agent_forwards=agent.uses_gateway,
        )
        binds = list(needs.binds)
        binds += network.binds
        binds += await service_binds(task)  # the services environment, read-only
        if services.gateway is not None:  # the judge proxy (and OpenClaw) reach it inside
            taken = {b.dest for b in binds}
            binds += [b for b in services.gateway.sandbox_binds() if b.dest not in taken]
        if task.grader.requirements and task.grader.source and config.sandbox == "bwrap":
            # grader environment: an empty folder now, filled only after the agent is gone
            grader_stage = GradingEnvStage(
                await asyncio.to_thread(ensure_env, task.grader.requirements)
            )
            binds.append(grader_stage.bind)
        mark("warm")  # the environment and the task's warm snapshot (made once, then reused)
        system = await prepare_system(
            resolve_environment(config.sandbox, config.environment, config.image, str(task.format)),
            task.warmup,
            sandbox=config.sandbox,
            snapshots=config.warm_snapshots,
            setup_network=services.setup_network or network.setup_network(),
        )
        result.versions["environment"] = system.choice.environment
        if system.warm is not None:
            result.versions["warm_snapshot"] = system.warm.key
        mark("sandbox_start")
        sandbox = create_sandbox(
            config.sandbox,
            SandboxConfig(
                workspace_dir=ws,
                limits=limits,
                binds=binds,
                env=network.sandbox_env(writable_system=system.writable_root) | dict(needs.env),
                **system.sandbox_fields(),  # type: ignore[arg-type]
            ),
        )
        async with services.sandbox_starts or contextlib.nullcontext():
            await sandbox.start()
        if sandbox.root_is_host_root:
            # the sandbox's root is the host's root: no other host user may reach its files
            # (a setuid program the agent made, gt/ once injected)
            os.chmod(work, 0o700)
        mark("setup")
        await network.attach(sandbox)
        service_handles = await start_services(sandbox, task)
        for note in await install_skills(sandbox, task):
            with open(agent_log, "a", encoding="utf-8") as fh:
                fh.write(f"setup: {note}\n")
        await run_warmup(sandbox, system.warmup)  # what the warm snapshot does not hold
        network.agent_phase()
        mark("agent")
        from clawrig.tools.catalog import Toolset

        tool_ctx = ToolContext(
            sandbox=sandbox,
            exec_timeout_s=limits.command_timeout_s,
            web=WebPolicy(mode=config.web if task.web_allowed else "off"),
            web_backend=web_session(services.web, config.web, task, run_index, tmp_dir, out_root),
            output_bytes=limits.output_bytes,
        )
        toolset = Toolset(task.tool_profile or config.tool_profile)
        agent_time = task.timeout_seconds * config.timeout_multiplier
        if lease is not None:
            model = lease.chat_model(stream=getattr(services.model, "stream", False))
        ctx = AgentContext(
            task=task,
            sandbox=sandbox,
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
            transcript=transcript,
            log_path=agent_log,
        )
        ctx.log(f"task {task.id} run {run_index} agent {agent.name} model {config.model}")
        try:
            outcome = await asyncio.wait_for(agent.run(ctx), timeout=agent_time)
            result.stop_reason = outcome.stop_reason
            result.turns, result.tool_calls = outcome.turns, outcome.tool_calls
        except TimeoutError:
            result.stop_reason = StopReason.TIME_LIMIT
            result.turns = len(transcript.steps)
            result.tool_calls = sum(len(m.tool_calls) for m in transcript.steps)
            ctx.log(f"agent stopped: time limit of {agent_time:g} s")
        except GatewayRefusal as exc:  # a cap of the job or the trial: graded as it stands
            result.stop_reason = _CAP_STOPS.get(exc.kind, StopReason.COST_BUDGET)
            result.turns = len(transcript.steps)
            result.tool_calls = sum(len(m.tool_calls) for m in transcript.steps)
            ctx.log(f"agent stopped: {exc}")
        finally:
            with contextlib.suppress(Exception):
                await toolset.aclose(tool_ctx)
            usage = ctx.usage
            if lease is not None and lease.usage.request_count > usage.request_count:
                # the gateway also served calls the agent's programs made with the task's
                # model keys (a skill script): the lease counted every one
                usage = lease.usage
            if lease is not None:
                services.gateway.close_trial(lease)  # type: ignore[union-attr]
                with contextlib.suppress(Exception):
                    await model.aclose()  # type: ignore[union-attr]
            for key, sub in ctx.subagent_transcripts.items():
                sub_dir = tmp_dir / "subagents"
                sub_dir.mkdir(exist_ok=True)
                safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
                (sub_dir / f"{safe}.jsonl").write_text(dumps_openclaw_jsonl(sub))
        mark("kill")
        for service, status in (await save_audits(sandbox, task, service_handles)).items():
            if status != "saved":
                ctx.log(f"service {service}: {status}")
        await sandbox.kill_all()
        mark("collect")
        # undo what the agent may have done to lock the harness out: permissions taken away,
        # a FIFO or a link where the transcript goes
        await sandbox.exec(["chmod", "-R", "u+rwX", PATHS.workspace, PATHS.home])
        if agent.raw_transcript is None:  # OpenClaw keeps its own file
            await sandbox.exec(["rm", "-f", PATHS.transcript])
            await sandbox.write_file(PATHS.transcript, dumps_openclaw_jsonl(transcript))
        changed = await asyncio.to_thread(_copy_changed, ws, before, tmp_dir / "end_state")
        ctx.log(f"end state: {len(changed)} file(s) created or changed")
        mark("gt_inject")
        await inject_gt(sandbox, task)
        await restart_services(sandbox, task)  # graders may GET /<svc>/audit, as upstream
        mark("grading")
        python = grader_stage.activate() if grader_stage else "python3"
        judge_model = _judge_model(task, services, name, run_index, tmp_dir)
        async with (
            services.grading_slots or contextlib.nullcontext(),
            _judge_env(sandbox, task, config, services, name, run_index, tmp_dir) as judge_env,
        ):
            score, judge_score, process = await _grade(
                task,
                config,
                sandbox,
                transcript,
                tmp_dir,
                services,
                python=python,
                judge_env=judge_env,
                judge=judge_model,
            )
        if judge_model is not services.judge and judge_model is not None:
            with contextlib.suppress(Exception):
                await judge_model.aclose()  # type: ignore[union-attr]
        result.score, result.judge_score, result.process = score, judge_score, process
        if score is not None and score.error:
            kind = (
                ErrorKind.INFRASTRUCTURE
                if score.details.get("error_kind") == "infrastructure"
                else ErrorKind.GRADING
            )
            if score.details.get("error_kind") == "agent":
                # the run ended on a model/API error (stopReason "error"): upstream marks it an
                # error, not a 0; it is the provider's failure, so it is retried
                kind = ErrorKind.INFRASTRUCTURE
            result.error = TrialError(
                kind=kind,
                message=score.error,
                phase="grading",
                retryable=kind == ErrorKind.INFRASTRUCTURE,
            )
        mark("results")
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            left_out = await sandbox.get_dir(
                PATHS.results, tmp_dir / "task_output", max_bytes=END_STATE_MAX_BYTES
            )
            if left_out:
                with open(agent_log, "a", encoding="utf-8") as fh:
                    fh.write(f"task_output: {len(left_out)} file(s) over the size cap left out\n")
    except (ModelRequestError, UserError):
        raise
    except SetupError as exc:
        result.error = TrialError(kind=ErrorKind.SETUP, message=str(exc), phase=phase)
    except SandboxDied as exc:
        if phase in AGENT_PHASES:
            # The sandbox died while the agent ran or right after, before grading: the agent
            # broke it (killed or stopped its supervisor, exhausted it). An agent error that
            # counts against the model as 0, so breaking the sandbox is no way to abstain.
            result.error = TrialError(kind=ErrorKind.AGENT, message=str(exc), phase=phase)
            result.score = Score(
                score=0.0, grader="harness", details={"agent_error": str(exc), "phase": phase}
            )
        else:
            result.error = TrialError(
                kind=ErrorKind.INFRASTRUCTURE, message=str(exc), phase=phase, retryable=True
            )
    except InfrastructureError as exc:  # retried unless it says it would fail again
        result.error = TrialError(
            kind=ErrorKind.INFRASTRUCTURE,
            message=str(exc),
            phase=phase,
            retryable=getattr(exc, "retryable", True),
        )
    except asyncio.CancelledError:
        result.error = TrialError(kind=ErrorKind.CANCELLED, message="cancelled", phase=phase)
        raise
    except Exception as exc:  # a harness bug: infrastructure, with the traceback kept
        with open(agent_log, "a", encoding="utf-8") as fh:
            fh.write(traceback.format_exc())
        result.error = TrialError(
            kind=ErrorKind.INFRASTRUCTURE,
            message=f"{type(exc).__name__}: {exc}",
            phase=phase,
            retryable=True,
        )
    finally:
        mark("stop")
        if sandbox is not None:
            with contextlib.suppress(Exception):
                await sandbox.stop()
        if network is not None:
            with contextlib.suppress(Exception):
                await network.close()
        if lease is not None and not lease.closed:
            services.gateway.close_trial(lease)  # type: ignore[union-attr]
        timings[phase] = timings.get(phase, 0.0) + time.monotonic() - t_phase
        shutil.rmtree(work, ignore_errors=True)
        if grader_stage is not None:
            grader_stage.cleanup()
    if result.error is not None:
        with open(agent_log, "a", encoding="utf-8") as fh:
            fh.write(
                f"trial ended with a {result.error.kind} error in phase {result.error.phase}: "
                f"{result.error.message}\n"
            )
    result.timings = {k: round(v, 6) for k, v in timings.items()}
    result.finished_at = dt.datetime.now(dt.UTC).isoformat()
    usage.elapsed_time = round(sum(timings.values()), 6)
    result.usage = usage
    raw = agent.raw_transcript if agent is not None else None
    folder = _finish_folder(task, config, result, transcript, tmp_dir, task_dir / name, raw)
    return result, folder


@contextlib.asynccontextmanager
async def _judge_env(
    sandbox: Any,
    task: Task,
    config: TrialConfig,
    services: TrialServices,
    trial_id: str,
    run_index: int,
    folder: Path,
) -> AsyncIterator[dict[str, str]]:
    """The judge proxy for a programmatic grader when the job has a gateway: yields the
    OPENROUTER_* / JUDGE_MODEL variables to give the grader ({} otherwise)."""
    programmatic = task.grader.kind in (GraderKind.PROGRAMMATIC, GraderKind.BOTH)
    programmatic = programmatic and config.grader in ("auto", "programmatic")
    if services.gateway is None or not programmatic:
        yield {}
        return
    async with judge_proxy(
        sandbox,
        services.gateway,
        endpoint=upstream_endpoint(services.judge),
        trial_id=trial_id,
        log_path=folder / "judge_chat.jsonl",
        cache=services.judge_cache,
        task_id=task.id,
        run_index=run_index,
    ) as proxy:
        yield proxy.env


def _judge_model(
    task: Task, services: TrialServices, trial_id: str, run_index: int, folder: Path
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
        record_path=folder / RECORD_FILE,
        cache=services.judge_cache,  # --judge-cache answers the answer judge too
    )
    return lease.chat_model()


async def _grade(
    task: Task,
    config: TrialConfig,
    sandbox: Any,
    transcript: Transcript,
    folder: Path,
    services: TrialServices,
    *,
    python: str = "python3",
    judge_env: dict[str, str] | None = None,
    judge: ChatModel | None = None,
) -> tuple[Score | None, Score | None, dict[str, Any]]:
    """Outcome score (+ judge score when both ran) and process metrics."""
    judge = judge if judge is not None else services.judge
    judge_log = folder / "judge_chat.jsonl"
    mode = config.grader
    kind = task.grader.kind
    score: Score | None = None
    judge_score: Score | None = None
    if mode in ("auto", "programmatic") and kind in (GraderKind.PROGRAMMATIC, GraderKind.BOTH):
        score = await run_grader(
            sandbox,
            task,
            timeout_s=task.grader.timeout_seconds * config.timeout_multiplier,
            env=grader_env(task) | (judge_env or {}),
            python=python,
        )
    elif task.answer is not None or kind == GraderKind.JUDGE:
        use_judge = mode in ("judge", "both") or (mode == "auto" and judge is not None)
        exact = check_answer(task, transcript) if mode in ("exact", "both", "auto") else None
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
        score = Score(grader="none", error="the task has no grader")
    process: dict[str, Any] = {}
    if task.milestones or task.steps_num:
        value = score.score if score is not None and score.error is None else None
        process = await grade_process(
            task,
            transcript,
            value,
            method="judge" if judge is not None and mode != "exact" else "match",
            model=judge,
            log_path=folder / "judge_process_chat.jsonl",
        )
    return score, judge_score, process


def _finish_folder(
    task: Task,
    config: TrialConfig,
    result: TrialResult,
    transcript: Transcript,
    tmp_dir: Path,
    final: Path,
    raw_transcript: str | None = None,
) -> Path:
    chat = raw_transcript if raw_transcript is not None else dumps_openclaw_jsonl(transcript)
    (tmp_dir / "chat.jsonl").write_text(chat, encoding="utf-8")
    for name in ("judge_chat.jsonl", "judge_process_chat.jsonl"):
        (tmp_dir / name).touch()
    try:
        from clawrig.tools.catalog import tool_schema

        schema = tool_schema(task.tool_profile or config.tool_profile)
    except Exception:
        schema = []
    _write_json(
        tmp_dir / "formatted_dialog.json",
        {"formatted_dialog": to_formatted_dialog(transcript), "tool_schema": schema},
    )
    score = result.score
    _write_json(
        tmp_dir / "score.json",
        {
            "task_id": task.id,
            "category": task.category,
            "score": score.score if score else None,
            "max_score": score.max_score if score else 1.0,
            "subscores": score.subscores if score else {},
            "grader": score.grader if score else None,
            "error": score.error if score else (result.error.message if result.error else None),
            "judge": result.judge_score.model_dump(mode="json") if result.judge_score else None,
        },
    )
    _write_json(tmp_dir / "process_score.json", result.process)
    _write_json(
        tmp_dir / "usage.json",
        result.usage.model_dump(mode="json", exclude={"retries"})
        | {"retries": result.usage.retries},
    )
    _write_json(tmp_dir / "result.json", result.model_dump(mode="json"))
    os.replace(tmp_dir, final) if not final.exists() else shutil.move(str(tmp_dir), str(final))
    return final
