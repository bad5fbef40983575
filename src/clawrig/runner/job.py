"""A job from its config: ``Job(config).run()`` is everything ``clawrig run`` does but render.

The job, in order (:meth:`Job.prepare`, then :meth:`Job.arun`):

1. env file: ``config.env_file`` (default ``./.env`` when present) fills unset environment
   variables (python-dotenv, ``override=False``), so graders and tools see them too;
2. tasks: the suite at ``config.suite_path`` (``root`` for WildClawBench workspaces),
   narrowed by ``suite`` ids and ``categories``;
3. models: the agent's model (``trial.model``, else the replayed job's, else
   ``DEFAULT_MODEL``) and the judge (``trial.judge``, else the replayed job's, else
   ``JUDGE_MODEL`` when the grader may use a judge, else for WildClawBench graders that call a
   judge upstream's default ``openrouter/openai/gpt-5.4`` when ``OPENROUTER_API_KEY`` is set),
   each from the environment and the env file;
4. the gateway every model call goes through (usage, the ``budget_usd`` cap, records,
   ``--replay``), the judge cache (``trial.judge_cache``), the web (``trial.web`` and the
   ``web_*`` options) and a note when pulled data drifted from its manifest;
5. preflight: :data:`clawrig.runner.preflight.CHECKS`, before any sandbox starts (option
   values are checked first of all, by :func:`~clawrig.runner.preflight.check_config`), then
   the notes of :data:`~clawrig.runner.preflight.NOTES`;
6. the environments the tasks run on (built when missing) and the agent's own preparation
   (e.g. installing the pinned OpenClaw);
7. the trials (:func:`clawrig.runner.batch.run_job`: scheduling, retries, resume, progress,
   summary), under the output folder's lock.

Python users get the same job as the CLI::

    from clawrig import Job, JobConfig, TrialConfig
    summary = Job(JobConfig(suite_path="suites/demo", output="out",
                            trial=TrialConfig(agent="oracle"))).run()

Errors: :class:`clawrig.errors.UserError` (one line; a
:class:`~clawrig.runner.preflight.PreflightError` holds one line per problem) for bad input,
found before any sandbox starts; :class:`clawrig.errors.ModelRequestError` when the provider
refuses a request mid-job.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clawrig.errors import InterruptedAfterJob, UserError
from clawrig.held_signals import HeldSignals
from clawrig.runner import batch
from clawrig.runner.batch import JobState, resumes_finished_job, select_tasks
from clawrig.runner.preflight import (
    NOTES,
    Check,
    PreflightError,
    check_config,
    run_preflight,
)
from clawrig.runner.trial import TrialServices
from clawrig.spec.job import JobConfig
from clawrig.spec.task import Task
from clawrig.spec.trial import TrialResult

JUDGE_GRADERS = ("auto", "judge", "both")
"""Grader modes that use a judge when the job has one (``auto``: for tasks graded by one)."""

UNSET_MODEL = ("", "none")
"""``trial.model`` values that mean "not given"."""


JOB_FILLED_SERVICES = frozenset({"environments"})
"""Fields of :class:`TrialServices` the job fills in every process itself (a memo), so a
``--workers`` worker needs none of the caller's."""


def prebuilt_services(services: TrialServices) -> list[str]:
    """The fields of ``services`` a caller set (not at their default; :data:`JOB_FILLED_SERVICES`
    aside), in their order: what a ``--workers`` worker, which builds its services from the job's
    config (:meth:`Job.worker_services`), would have to rebuild and cannot (a model, the web,
    hooks, a semaphore, a work folder ...)."""
    given = []
    for f in dataclasses.fields(services):
        if f.name in JOB_FILLED_SERVICES:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if getattr(services, f.name) != default:
            given.append(f.name)
    return given


def replayed_model(job_dir: Path) -> str | None:
    """The agent's model a ``--replay`` of ``job_dir`` without ``-m`` replays: the one whose
    calls it recorded (None: none recorded). Raises PreflightError when it recorded several
    models' (a folder of one job per model: one of them was picked, helper-203)."""
    from clawrig.llm.gateway import recorded_agent_models

    agents = sorted(recorded_agent_models(job_dir))
    if len(agents) > 1:
        raise PreflightError(
            [
                f"--replay: {job_dir} holds the recorded calls of several models' jobs "
                f"({', '.join(agents)}): give -m with the one to replay"
            ]
        )
    return agents[0] if agents else None


class Job:
    """One job: ``Job(config).run()`` -> the summary dict (``summary_<model>.json``).

    ``services``: pre-built models or gateway (e.g. a test's chat model); what is missing is
    resolved from the config. ``checks``: the preflight checks (default
    :data:`clawrig.runner.preflight.CHECKS`). ``on_note(line)``: one-line notes for the user
    (warnings, the agent's install steps, "already finished"); ``on_update(state, result)``:
    after every trial start and end (progress views).

    After :meth:`prepare`: ``tasks`` (the selected tasks), ``config`` (with the resolved model
    and judge names), ``services`` (models, gateway, judge cache).
    """

    def __init__(
        self,
        config: JobConfig,
        *,
        services: TrialServices | None = None,
        checks: list[Check] | None = None,
        on_note: Callable[[str], None] | None = None,
        on_update: Callable[[JobState, TrialResult | None], None] | None = None,
    ) -> None:
        self.requested = config
        self.config = config
        self.services = services or TrialServices()
        self.checks = checks
        self.on_note = on_note or (lambda line: None)
        self.on_update = on_update
        self.tasks: list[Task] = []
        self._prepared = False
        self._owns_gateway = False
        self._spend_dir: Path | None = None
        """The folder of the job's spend file this Job made (``--workers``), removed when the
        job ends."""

    # -- before any sandbox ------------------------------------------------------------------
    def prepare(self) -> Job:
        """Steps 1-6 of the module docs (idempotent). Raises UserError / PreflightError."""
        if self._prepared:
            return self
        cfg = self.requested
        if problems := check_config(cfg):
            raise PreflightError(problems)
        if cfg.workers > 1 and (given := prebuilt_services(self.services)):
            named = ", ".join(f"services.{name}" for name in given)
            raise UserError(
                f"workers: {named}: a Job given pre-built services runs its trials in this "
                "process (workers=1); a worker process builds its own from the config"
            )
        self._load_env(cfg.env_file)
        self.tasks = self._select(cfg)
        from clawrig.agents import create_agent

        agent = create_agent(cfg.trial.agent)
        if cfg.resume:
            cfg = self._check_resume(cfg, agent.needs_model)
        trial = cfg.trial.model_copy(update=self._resolve_models(cfg, agent.needs_model))
        self.config = cfg.model_copy(update={"trial": trial})
        self._gateway_and_cache()
        self._web_and_data()
        problems = run_preflight(self.tasks, self.config, self.checks)
        if problems:
            raise PreflightError(problems)
        for line in run_preflight(self.tasks, self.config, NOTES):
            self.on_note(f"note: {line}")
        self._note_workers()
        self._environments()
        if self.config.trial.sandbox == "local":
            from clawrig.sandbox.local import warn_once

            warn_once(self.on_note)
        agent.prepare(self.on_note)  # e.g. install the pinned OpenClaw once
        self._prepared = True
        return self

    def _note_workers(self) -> None:
        """A note when ``--workers`` asks for more processes than the job runs (never more
        than its trials at once: :func:`clawrig.runner.executors.processes.job_processes`)."""
        from clawrig.runner.executors.processes import job_processes

        cfg = self.config
        used = job_processes(cfg, self.tasks, self.services)
        if cfg.executor == "local" and used < cfg.workers:
            at_once = job_processes(cfg, self.tasks)
            why = (
                f"one for each trial at once at most (-p {cfg.parallel}, "
                f"{len(self.tasks) * cfg.runs} trial(s))"
                if used == at_once
                else "one for each request in flight its model's provider takes at most "
                "(max_concurrency)"
            )
            self.on_note(f"note: --workers {cfg.workers}: {used} harness process(es), {why}")

    @staticmethod
    def _load_env(env_file: Path | None) -> None:
        from dotenv import load_dotenv

        from clawrig.llm.providers import env_file_problem

        if env_file is not None and not env_file.is_file():
            raise UserError(f"--env-file: no such file: {env_file}")
        path = env_file or Path(".env")
        if path.is_file():
            try:
                problem = env_file_problem(path)
            except (OSError, UnicodeDecodeError) as exc:
                raise UserError(f"{path}: cannot read env file: {exc}") from None
            if problem:
                raise UserError(f"--env-file: {problem}" if env_file is not None else problem)
        load_dotenv(path, override=False)

    @staticmethod
    def _select(cfg: JobConfig) -> list[Task]:
        from clawrig.tasks.registry import load_tasks

        if not cfg.suite_path.exists():
            raise UserError(f"PATH: no such file or folder: {cfg.suite_path}")
        return load_tasks(
            cfg.suite_path,
            root=cfg.root,
            select=lambda tasks: select_tasks(tasks, cfg.suite, cfg.categories),
        )

    def _check_resume(self, cfg: JobConfig, needs_model: bool) -> JobConfig:
        """``--resume``: what the output folder holds is checked first of all, for the model
        the job will have (:meth:`_resume_model`): a resume that cannot continue it is refused
        in its one line (:func:`clawrig.runner.batch.resume_problem`), not behind a model's or
        the recording's complaint that follows from it. Returns ``cfg``, with the resumed
        job's runs per task when ``runs`` was not given (as ``-m`` is taken from the job).
        Raises PreflightError / UserError."""
        from clawrig.runner.batch import (
            job_runs,
            missing_trials,
            progress_path,
            read_job_summary,
            resume_problem,
        )

        model = self._resume_model(cfg, needs_model)
        if model and "runs" not in cfg.model_fields_set and (ran := job_runs(cfg.output, model)):
            cfg = cfg.model_copy(update={"runs": ran})
        if model and (problem := resume_problem(cfg, self.tasks, model)):
            raise PreflightError([problem])
        if model and not progress_path(cfg.output, model).exists():
            done = read_job_summary(cfg.output, model)
            if done and (gone := missing_trials(done, cfg.output)):
                self.on_note(
                    f"{len(gone)} trial folder(s) the job's summary lists are gone (e.g. "
                    f"{gone[0]}): they run again"
                )
        return cfg

    @staticmethod
    def _resume_model(cfg: JobConfig, needs_model: bool) -> str | None:
        """The model whose job ``--resume`` continues: ``-m``; for an agent that calls no
        model, the agent's name (what its job is named by); else the one ``--replay``'s
        recording called; else, when the output folder holds the job of one model only and
        that job ran this agent (:func:`clawrig.runner.batch.job_agent`), that model's; else
        None. Raises PreflightError when the folder holds jobs of several models (say which
        with ``-m``) or its only job ran another agent."""
        if cfg.trial.model not in UNSET_MODEL:
            return cfg.trial.model
        if cfg.replay is not None and needs_model:
            return replayed_model(cfg.replay)
        from clawrig.runner.batch import job_agent, other_jobs, progress_path, summary_path

        # an agent that calls no model: its job is named after it
        name = None if needs_model else cfg.trial.agent
        if name is not None and any(
            p(cfg.output, name).exists() for p in (progress_path, summary_path)
        ):
            return name
        jobs = other_jobs(cfg.output)
        if len(jobs) != 1:
            if len(jobs) > 1 and name is None:
                shown = ", ".join(f"{model} ({file})" for model, file in jobs[:4])
                why = (
                    f"--resume: {cfg.output} holds jobs of {shown}: give -m with the one to resume"
                )
                raise PreflightError([why])
            return name  # (none there, or several: the output check says which)
        model = jobs[0][0]
        ran = job_agent(cfg.output, model)  # None: files from before it was recorded
        if ran is not None and ran != cfg.trial.agent:
            raise PreflightError(
                [
                    f"--resume: {cfg.output} holds the job of {model} run by --agent {ran}, not "
                    f"--agent {cfg.trial.agent}: resume it with --agent {ran}, or choose another "
                    "--output"
                ]
            )
        return name if name is not None or ran is None else model

    def _resolve_models(self, cfg: JobConfig, needs_model: bool) -> dict[str, Any]:
        """The agent's and the judge's names and models (step 3); fills ``self.services``."""
        from clawrig.llm.providers import load_settings

        settings = load_settings(env_file=cfg.env_file)
        recorded: dict[str, str] = {}
        if cfg.replay is not None:
            from clawrig.llm.gateway import ResponseCache, recorded_models

            recorded = recorded_models(cfg.replay)
            if not recorded:  # no such folder or no records: said as such, not "no model"
                ResponseCache.from_job(cfg.replay)  # (raises UserError then)
        asked = None if cfg.trial.model in UNSET_MODEL else cfg.trial.model
        if asked is None and cfg.resume and cfg.replay is None and needs_model:
            asked = self._resume_model(cfg, needs_model)  # the only job there (its model)
        if asked is not None and resumes_finished_job(cfg, asked):
            return {"model": asked, "judge": cfg.trial.judge}  # nothing runs: none resolved
        svc = self.services
        if svc.model is not None:
            name = svc.model.name
        elif needs_model:
            if asked is None and cfg.replay is not None:
                asked = replayed_model(cfg.replay)
            wanted = asked or recorded.get("agent") or settings.get("DEFAULT_MODEL")
            svc.model = self._model(wanted, "agent", settings, cfg.replay)
            name = svc.model.name
        else:
            name = asked or cfg.trial.agent
        judge_name = cfg.trial.judge or recorded.get("judge")
        if judge_name is None and cfg.trial.grader in JUDGE_GRADERS:
            judge_name = settings.get("JUDGE_MODEL") or None
        if judge_name is None and cfg.trial.grader in JUDGE_GRADERS and cfg.replay is None:
            # WildClawBench graders that call a judge: upstream's default judge when its key
            # is configured (openai/gpt-5.4 through OpenRouter)
            from clawrig.runner.fidelity_checks import upstream_judge

            keys = {"OPENROUTER_API_KEY": settings.get("OPENROUTER_API_KEY") or ""}
            judge_name = upstream_judge(self.tasks, keys)
        if svc.judge is None and (cfg.trial.grader in ("judge", "both") or judge_name):
            svc.judge = self._model(judge_name, "judge", settings, cfg.replay)
        return {"model": name, "judge": svc.judge.name if svc.judge is not None else None}

    @staticmethod
    def _model(name: str | None, role: str, settings: Any, replay: Path | None) -> Any:
        """The model ``name`` for ``role``; with ``replay`` a name the settings cannot resolve
        (no base URL or key here) becomes a model only the replay gateway answers."""
        from clawrig.llm.client import get_model

        try:
            return get_model(name, settings, role=role)  # type: ignore[arg-type]
        except UserError as exc:
            if replay is None or not name:
                flag = "--judge" if role == "judge" else "--model"
                raise UserError(f"{flag}: {exc}") from None
            from clawrig.llm.gateway import replay_model

            return replay_model(name)

    def worker_services(
        self, tasks: list[Task], spend_file: Path | None, parallel: int
    ) -> TrialServices:
        """The services of a ``--workers`` worker process (:mod:`clawrig.runner.executors.
        processes`) for this job, whose config the driver prepared (models resolved, checks
        passed, environments built): the models, a gateway of its own that adds its spend to
        the job's ``spend_file`` (:class:`clawrig.llm.gateway.SpendTally`), the judge cache,
        the web, harness slots and a warm pool sized for ``parallel`` trials at once. Raises
        UserError as :meth:`prepare` does."""
        from clawrig.agents import create_agent
        from clawrig.sandbox.pool import WarmPool, warm_pool_wanted
        from clawrig.waits import harness_slots

        self.tasks = tasks
        cfg = self.config
        self._resolve_models(cfg, create_agent(cfg.trial.agent).needs_model)
        self._gateway_and_cache(spend_file)
        self._web_and_data()
        svc = self.services
        svc.sandbox_starts, svc.grading_slots = harness_slots()
        if cfg.trial.sandbox == "bwrap" and warm_pool_wanted():
            svc.pool = WarmPool(
                parallel=parallel, work_dir=svc.work_dir, foreground=svc.sandbox_starts
            )
        return svc

    def _gateway_and_cache(self, spend_file: Path | None = None) -> None:
        """The gateway and the judge cache (step 4). ``spend_file``: the job's shared
        :class:`~clawrig.llm.gateway.SpendTally` (a worker's; with ``--workers`` the driver
        makes one)."""
        from clawrig.llm.gateway import Gateway, ResponseCache, replay_gateway

        cfg, svc = self.config, self.services
        if svc.gateway is None:
            # with Ray, nodes reach the driver's gateway (the only holder of keys) at the
            # driver's cluster address (docs/ray.md)
            host = "127.0.0.1"
            if cfg.executor == "ray":
                from clawrig.runner.executors.ray import driver_host

                host = driver_host()
            share = batch.budget_share(cfg.budget_usd, cfg.parallel, len(self.tasks) * cfg.runs)
            if spend_file is None and cfg.workers > 1 and cfg.executor == "local":
                import atexit

                from clawrig.leftovers import owned_tempdir, remove_tree

                self._spend_dir = owned_tempdir("spend")
                atexit.register(remove_tree, self._spend_dir)  # a job that never ran
                spend_file = self._spend_dir / "spent_usd"
            options: dict[str, Any] = {
                "budget_usd": cfg.budget_usd,
                "budget_share_usd": share,
                "host": host,
                "spend_file": spend_file,
            }
            svc.gateway = (
                replay_gateway(cfg.replay, **options)
                if cfg.replay is not None
                else Gateway(**options)
            )
            self._owns_gateway = True
        if cfg.trial.judge_cache is not None and svc.judge_cache is None:
            if not cfg.trial.judge_cache.is_file():
                raise UserError(f"--judge-cache: no such file: {cfg.trial.judge_cache}")
            svc.judge_cache = ResponseCache.from_file(cfg.trial.judge_cache)

    def _web_and_data(self) -> None:
        """The job's web (``--web`` modes; a missing search key is a note) and, for data
        pulled by ``clawrig pull``, a note when it drifted from its manifest."""
        from clawrig.data.manifest import data_summary, drift_line
        from clawrig.web import WebService

        cfg, svc = self.config, self.services
        if cfg.trial.web == "replay" and cfg.web_dir is None and cfg.replay is not None:
            # the whole run from one folder: --replay JOB --web replay
            self.config = cfg = cfg.model_copy(update={"web_dir": cfg.replay})
        if svc.web is None:
            svc.web = WebService.for_job(cfg)
            if problem := svc.web.key_problem():
                self.on_note(f"note: {problem}")
        data = data_summary(cfg.suite_path, cfg.root)
        if data is not None and (line := drift_line(data)):
            self.on_note(f"note: {line}")

    def _environments(self) -> None:
        """Before any trial: build a named environment when missing (its progress lines are
        notes) and say in one line each where a format's environment is not built (see
        :mod:`clawrig.env.system`)."""
        from clawrig.env.system import resolve_environment

        trial = self.config.trial

        def progress(line: str) -> None:
            self.on_note(f"  {line}")

        for fmt in sorted({str(t.format) for t in self.tasks}):
            choice = resolve_environment(
                trial.sandbox, trial.environment, trial.image, fmt, progress
            )
            if choice.note:
                self.on_note(f"note: {choice.note}")
            if trial.sandbox == "bwrap" and choice.rootfs is None:
                # its sandboxes bind a copy of the host's /etc: made now, beside the rest of
                # the start-up, instead of when the first sandbox launches
                from clawrig.sandbox.bwrap import prefetch_host_etc

                prefetch_host_etc()

    # -- the trials --------------------------------------------------------------------------
    async def arun(self, held: HeldSignals | None = None) -> dict[str, Any]:
        """:meth:`prepare`, then run every trial not already done; returns the summary dict
        (``summary_<model>.json``; ``already_finished`` True when ``resume`` found the job
        finished and ran nothing). Raises :class:`clawrig.errors.InterruptedAfterJob` when a
        Ctrl-C or SIGTERM came after every trial had ended (held while the summary was written
        and the job's services stopped), in the main thread. ``held``: the caller's hold
        instead, which it releases and acts on itself (``clawrig run``: after its table, so
        a signal in the event loop's shutdown waits too: helper-227)."""
        own = held is None and threading.current_thread() is threading.main_thread()
        if own:
            held = HeldSignals()
        try:
            self.prepare()
            gateway = self.services.gateway
            owned = gateway if self._owns_gateway and gateway is not None else None
            with owned if owned is not None else contextlib.nullcontext():
                # the trials' model calls share one upstream client (and its connections)
                async with gateway.shared_upstream() if gateway else contextlib.nullcontext():
                    summary = await batch.run_job(
                        self.config,
                        self.tasks,
                        self.services,
                        on_update=self.on_update,
                        held=held,
                    )
        finally:
            if own and held is not None:
                held.release()
            if self._spend_dir is not None:  # the workers have exited (batch closed them)
                from clawrig.leftovers import remove_tree

                remove_tree(self._spend_dir)
        if own and held is not None and held.signum is not None:
            raise InterruptedAfterJob(summary, held.signum, self.config)
        if summary.get("already_finished"):
            self.on_note(
                f"{self.config.output} holds a finished job of {self.config.trial.model}: "
                "every trial is done, nothing to run"
            )
        return summary

    def run(self) -> dict[str, Any]:
        """:meth:`arun` in a new event loop (from async code, ``await job.arun()``)."""
        return asyncio.run(self.arun())


def run_job(config: JobConfig, **kwargs: Any) -> dict[str, Any]:
    """``Job(config, **kwargs).run()``: the public one-call job (``clawrig.run_job``), with the
    gateway, the budget, preflight and resume, exactly as ``clawrig run``. Returns the summary
    dict; raises as :class:`Job` does."""
    return Job(config, **kwargs).run()
