"""Where a job's trials run: the seam between the job's loop (:mod:`clawrig.runner.batch`:
scheduling order, retries, resume, budget, progress, summary) and the machines.

An executor runs one attempt of one trial and hands back ``(TrialResult, folder)`` with the
folder whole under ``<output>/<task_id>/`` on the driver, exactly as
:func:`clawrig.runner.trial.run_trial` does; everything else stays in the job's loop.

- ``local`` (:class:`LocalExecutor`, the default): :func:`~clawrig.runner.trial.run_trial` in
  this process; the job runs ``parallel`` trials at once. Needs no Ray.
- ``local`` with ``workers`` > 1 (:class:`clawrig.runner.executors.processes.ProcessExecutor`):
  ``run_trial`` in that many harness processes on this machine (``--workers``).
- ``ray`` (:class:`clawrig.runner.executors.ray.RayExecutor`): trials run on the nodes of a Ray
  cluster, ``slots_per_node`` at once per node (docs/ray.md). Imported only when chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from clawrig.runner.trial import TrialServices
    from clawrig.spec.job import JobConfig
    from clawrig.spec.task import Task
    from clawrig.spec.trial import TrialResult, Usage

from clawrig.choices import EXECUTORS

__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "create_executor", "provider_stop_line"]


class Executor(Protocol):
    """Runs trial attempts for one job (see the module docs).

    ``capacity``: trials the executor runs at once (None: the job's ``parallel``), known after
    :meth:`start`; ``on_capacity``: set by the job's loop, called with the slots the executor
    gains later (Ray nodes joining mid-job)."""

    capacity: int | None
    on_capacity: Callable[[int], None] | None
    in_process: bool
    """True when trials run in this process (its warm pool serves them)."""

    async def start(self) -> None:
        """Get ready before the first trial (e.g. join the cluster). Raises UserError."""

    async def run(
        self, task: Task, run_index: int, *, job_id: str, attempt: int, earlier: Usage
    ) -> tuple[TrialResult, Path]:
        """One attempt: ``attempt`` (1-based) and ``earlier`` (the usage of the trial's failed
        attempts) go into result.json. Returns (result, folder on the driver). Raises what
        :func:`~clawrig.runner.trial.run_trial` raises."""
        ...

    def provider_stop(self) -> str | None:
        """One line when the agent's or the judge's model server can serve no more requests,
        else None (:func:`provider_stop_line`, as the processes that ran the trials saw it)."""
        ...

    async def close(self) -> None:
        """Release what :meth:`start` took (idempotent)."""


def provider_stop_line(services: TrialServices) -> str | None:
    """One line when the agent's or the judge's model server can serve no more requests
    (:func:`clawrig.llm.client.provider_stop`, from what this process saw: it cannot be
    reached, or it refused the key, account or model after answering), else None."""
    from clawrig.grading.judge_proxy import upstream_endpoint
    from clawrig.llm.client import provider_stop, refusal_advice

    for role, model in (("model", services.model), ("judge", services.judge)):
        endpoint = upstream_endpoint(model) if model is not None else None
        if endpoint is not None and (why := provider_stop(endpoint)) is not None:
            key = endpoint.api_key_env or ""
            # the variable that sets the URL beside the key's (SCRIPTED_API_KEY: SCRIPTED_...)
            url = f"{key.removesuffix('_API_KEY')}_BASE_URL" if key.endswith("_API_KEY") else ""
            hint = refusal_advice(endpoint) or "check " + (
                "--judge / JUDGE_MODEL"
                if role == "judge"
                else f"-m, its key and {url or 'its base URL'}"
            )
            return f"the {role}'s server {why} ({hint})"
    return None


class LocalExecutor:
    """Every trial in this process (:func:`clawrig.runner.trial.run_trial`)."""

    capacity: int | None = None
    on_capacity: Callable[[int], None] | None = None
    in_process = True

    def __init__(self, job: JobConfig, services: TrialServices) -> None:
        self.job = job
        self.services = services

    async def start(self) -> None:
        return None

    async def run(
        self, task: Task, run_index: int, *, job_id: str, attempt: int, earlier: Usage
    ) -> tuple[TrialResult, Path]:
        from clawrig.runner.trial import run_trial

        return await run_trial(
            task,
            self.job.trial,
            self.job.output,
            run_index=run_index,
            services=self.services,
            job_id=job_id,
            attempt=attempt,
            earlier=earlier,
        )

    def provider_stop(self) -> str | None:
        return provider_stop_line(self.services)

    async def close(self) -> None:
        return None


def create_executor(job: JobConfig, tasks: list[Task], services: TrialServices) -> Executor:
    """The executor ``job.executor`` names (``ray`` imports Ray; UserError when it is not
    installed); ``local`` with ``job.workers`` > 1 (and ``parallel`` > 1) runs trials in
    worker processes too (:func:`~clawrig.runner.executors.processes.job_processes`)."""
    if job.executor == "ray":
        from clawrig.runner.executors.ray import RayExecutor

        return RayExecutor(job, tasks, services)
    from clawrig.runner.executors.processes import ProcessExecutor, job_processes

    if job_processes(job, tasks, services) > 1:
        return ProcessExecutor(job, tasks, services)
    return LocalExecutor(job, services)
