"""``--workers N`` (N > 1): a job's trials in N harness processes on this machine: the driver
and N - 1 worker processes.

Why: one harness process runs its trials' event loop, model gateway and sandbox bookkeeping on
one interpreter lock, so it uses at most one core however many trials run at once (issue 19:
500 latency-bound trials on 2 cores took 62 s in one process, 47 s split over two). With
workers the job's trials share every core.

- The driver (the process that runs ``clawrig run``) keeps the job, exactly as with the local
  executor: the output folder, progress, resume, retries, the budget and the summary
  (:mod:`clawrig.runner.batch`), and runs trials itself as worker 0 (in its own event loop,
  with its own warm pool, as :class:`~clawrig.runner.executors.LocalExecutor`). Each attempt
  goes to the process with the fewest attempts in flight.
- A worker is ``python -P -m clawrig.runner.executors.processes FD``, started in its own session
  (Ctrl-C reaches the driver only; the driver cancels) and talking to the driver over a unix
  socket pair: each message is a 4-byte big-endian length and a pickle (:func:`_send`). It loads
  the job's models, gateway (with the keys: it is the harness, on the same machine), judge
  cache and web from the driver's prepared config (:meth:`clawrig.runner.job.Job.worker_services`),
  keeps its own warm pool (its share of ``parallel``) and runs
  :func:`clawrig.runner.trial.run_trial` into the job's output folder, as the driver would.
- The job's budget: every process's gateway adds its upstream spend to one
  :class:`clawrig.llm.gateway.SpendTally` file, so the budget is the job's, not a worker's.
- A worker that exits mid-job fails its attempts in flight as infrastructure errors (retried
  in the other processes, like a trial whose sandbox died; one whose folder it renamed before
  it could report is that attempt's result, :mod:`clawrig.runner.batch` finds it on disk) and
  takes no more; the driver runs on with what is left (itself at least). A driver that dies
  leaves its workers an end of file: they cancel their trials, clean up and exit. An attempt
  the job cancels (an interrupt) is the worker's to end until it says it did
  (``cancelled``): a worker killed before that (stopped or stuck) has its folder's spend set
  aside by the driver as a dead worker's attempts' is.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import math
import os
import pickle
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawrig.errors import AttemptLost, InfrastructureError, UserError
from clawrig.runner.heap import settle

if TYPE_CHECKING:
    from clawrig.runner.trial import TrialServices
    from clawrig.spec.job import JobConfig
    from clawrig.spec.task import Task
    from clawrig.spec.trial import TrialResult, Usage

__all__ = [
    "WORKER_LOG_LINE",
    "ProcessExecutor",
    "harness_processes",
    "job_processes",
    "worker_parallel",
]

_HEADER = struct.Struct(">I")
WORKER_LOG_LINE = "clawrig: ran in harness worker {index} (pid {pid})"
"""The last line of the agent.log of a trial a harness process ran (``TrialServices.log_line``:
written before the trial folder's rename, never into a finished folder)."""
LISTENER_GRACE_S = 30.0
"""Seconds :meth:`ProcessExecutor.close` lets the listener of a worker that has exited finish
(setting aside what a killed worker left) before it is cut short."""
STOP_GRACE_S = 30.0
"""Seconds :meth:`ProcessExecutor.close` waits for a worker to cancel its trials, clean up and
exit before it is killed."""
HUNG_AFTER_S = 120.0
"""Seconds of silence after which the driver takes a worker for hung (stopped, or its event
loop stuck) and kills it: its attempts in flight are lost as when it dies, set aside and run
again elsewhere. A worker says it is alive every :func:`heartbeat_s` (its event loop's own
timer), so only a worker whose loop has not run for that long is silent. The environment's
``CLAWRIG_WORKER_HUNG_S`` replaces it (:func:`hung_after_s`)."""


HUNG_MIN_S = 2.0
"""The least ``CLAWRIG_WORKER_HUNG_S`` taken: a worker's loop pauses ~0.5 s as a trial starts
(helper-147: 0.5 killed a healthy worker)."""
START_LIMIT_S = 60.0
"""Seconds a worker may take to say it is ready (its models, gateway and warm pool made; at
least :func:`hung_after_s`): past that it is killed and the job refused as for a worker that
could not start (one stuck before it was ready hung the job: helper-147)."""


def hung_after_s() -> float:
    """:data:`HUNG_AFTER_S`, or ``CLAWRIG_WORKER_HUNG_S`` when it is a finite number of
    seconds >= :data:`HUNG_MIN_S`."""
    with contextlib.suppress(ValueError):
        value = float(os.environ.get("CLAWRIG_WORKER_HUNG_S", ""))
        if math.isfinite(value) and value >= HUNG_MIN_S:
            return value
    return HUNG_AFTER_S


def heartbeat_s() -> float:
    """Seconds between a worker's "alive" messages: a quarter of :func:`hung_after_s`, at most
    5 s."""
    return min(5.0, hung_after_s() / 4)


def harness_processes(parallel: int, workers: int) -> int:
    """Harness processes a ``-p parallel --workers workers`` job runs: ``workers``, but never
    more than trials run at once (a process with no trial of its own only costs its start)."""
    return max(1, min(workers, parallel))


def job_processes(job: JobConfig, tasks: list[Task], services: TrialServices | None = None) -> int:
    """The harness processes ``job`` runs: :func:`harness_processes` of its trials at once
    (``parallel``, at most its ``tasks`` x ``runs`` when ``tasks`` are given), and at most the
    requests in flight its model's provider takes (``max_concurrency`` of ``services.model``'s
    endpoint): each process holds a share of those (:func:`clawrig.llm.client.
    share_concurrency`), at least one."""
    at_once = min(job.parallel, len(tasks) * job.runs) if tasks else job.parallel
    processes = harness_processes(at_once, job.workers)
    model = services.model if services is not None else None
    endpoint = getattr(model, "upstream", None) or getattr(model, "endpoint", None)
    limit = getattr(endpoint, "max_concurrency", None)
    return max(1, min(processes, limit)) if limit else processes


def worker_parallel(parallel: int, processes: int) -> int:
    """Trials at once in one of the ``processes`` harness processes of a ``-p parallel`` job
    (its warm pool's size): the share of the busiest, rounded up."""
    return max(1, -(-parallel // max(1, processes)))


def _send(writer: asyncio.StreamWriter, message: tuple[Any, ...]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_HEADER.pack(len(data)) + data)


async def _receive(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    """The next message, or None at the end of the stream."""
    try:
        (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
        message: tuple[Any, ...] = pickle.loads(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return message


def _portable(exc: BaseException) -> BaseException:
    """``exc`` when it survives pickling, else the same kind of clawrig error with its text
    (a UserError stays a UserError: it stops the job in the driver too)."""
    with contextlib.suppress(Exception):
        pickle.loads(pickle.dumps(exc))
        return exc
    text = str(exc) or type(exc).__name__
    return UserError(text) if isinstance(exc, UserError) else InfrastructureError(text)


def _worker_line(index: int) -> str:
    """:data:`WORKER_LOG_LINE` of harness process ``index`` (this process)."""
    return WORKER_LOG_LINE.format(index=index, pid=os.getpid())


# -- the driver side ----------------------------------------------------------------------------


async def _exit_code(proc: subprocess.Popen[bytes]) -> int:
    """``proc``'s exit status once it exited, waited for in a thread: the driver's event loop
    runs its trials meanwhile (a worker may take its time past closing its socket: its exit
    clean-up releases mounts and removes folders)."""
    return await asyncio.get_running_loop().run_in_executor(None, proc.wait)


async def _gone(proc: subprocess.Popen[bytes]) -> str:
    """Why a worker that closed its socket before it was ready is gone: ``exited (CODE)``, or,
    when it has not exited within :data:`STOP_GRACE_S`, that it hangs (the start's clean-up,
    :meth:`ProcessExecutor.close`, kills it)."""
    try:
        return f"exited ({await asyncio.wait_for(_exit_code(proc), STOP_GRACE_S)})"
    except TimeoutError:
        return f"closed its connection and had not exited {STOP_GRACE_S:g} s later"


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    pending: dict[int, asyncio.Future[tuple[TrialResult, Path]]] = field(default_factory=dict)
    attempts: dict[int, tuple[str, int, str]] = field(default_factory=dict)
    """Attempt id -> (task id, run index, job id) of each attempt it runs."""
    cancelling: dict[int, tuple[str, int, str]] = field(default_factory=dict)
    """The attempts the job cancelled (an interrupt) that the worker has not yet said it ended
    (as :attr:`attempts`): a worker killed meanwhile (stopped, stuck) left their folders, whose
    spend is set aside as a dead worker's attempts' is (helper-147)."""
    alive: bool = True
    listener: asyncio.Task[None] | None = None
    heard: float = 0.0
    """When (the event loop's clock) the driver last heard from it."""
    hung: float | None = None
    """The seconds of silence after which the driver killed it as hung; None: not."""

    def name(self) -> str:
        return f"harness worker {self.index} (pid {self.proc.pid})"


class ProcessExecutor:
    """Trial attempts in this process and ``job.workers - 1`` worker processes (module
    docs)."""

    capacity: int | None = None
    on_capacity: Any = None
    in_process = True
    """This process runs its share (its warm pool serves them)."""

    def __init__(self, job: JobConfig, tasks: list[Task], services: TrialServices) -> None:
        from clawrig.runner.executors import LocalExecutor

        self.job = job
        self.tasks = tasks
        self.services = services
        services.log_line = _worker_line(0)
        self._local = LocalExecutor(job, services)
        self._local_pending = 0
        self._workers: list[_Worker] = []
        self._seq = 0
        self._provider_stop: str | None = None

    async def start(self) -> None:
        """Start the workers and wait until each has its models and gateway. Raises UserError
        when one cannot start (its one line)."""
        from clawrig.llm.client import share_answers, share_concurrency

        gateway = self.services.gateway
        spend = gateway.tally_path if gateway is not None else None
        share_answers(spend.parent if spend is not None else None)
        processes = job_processes(self.job, self.tasks, self.services)
        share_concurrency(0, processes)
        parallel = worker_parallel(self.job.parallel, processes)
        starts = [
            self._spawn(i, ("init", i, self.job, self.tasks, spend, parallel, processes))
            for i in range(1, processes)
        ]
        results = await asyncio.gather(*starts, return_exceptions=True)
        problems = [r for r in results if isinstance(r, BaseException)]
        if problems:
            await self.close()
            first = problems[0]
            raise first if isinstance(first, UserError) else UserError(f"--workers: {first}")

    async def _spawn(self, index: int, init: tuple[Any, ...]) -> None:
        mine, theirs = socket.socketpair()
        try:
            # -P: the worker's imports come from where the driver's do, not the current
            # folder `-m` would put first (a pickle.py or json.py there ran in the worker)
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", __name__, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=mine)
        worker = _Worker(index, proc, reader, writer, heard=asyncio.get_running_loop().time())
        self._workers.append(worker)
        _send(writer, init)
        limit = max(START_LIMIT_S, hung_after_s())
        try:
            reply = await asyncio.wait_for(_receive(reader), limit)
        except TimeoutError:
            worker.alive = False
            proc.kill()
            raise UserError(
                f"--workers: {worker.name()} could not start: not ready within {limit:g} s "
                "(stopped or stuck): killed"
            ) from None
        if reply is None or reply[0] != "ready":
            worker.alive = False
            why = reply[1] if reply is not None else await _gone(proc)
            raise UserError(f"--workers: {worker.name()} could not start: {why}")
        worker.listener = asyncio.get_running_loop().create_task(self._listen(worker))

    async def _watch(self, worker: _Worker) -> None:
        """Kill ``worker`` once it has said nothing for :func:`hung_after_s` (its listener then
        loses its attempts as for a worker that died). A wake-up of this task late by more
        than a beat means the driver's own loop was held up: the silence may be the driver's,
        so it counts from then."""
        every, limit = heartbeat_s(), hung_after_s()
        loop = asyncio.get_running_loop()
        due = loop.time() + every
        while worker.alive:
            await asyncio.sleep(every)
            now = loop.time()
            if now - due > every:
                worker.heard = now
            due = now + every
            if worker.alive and now - worker.heard > limit:
                worker.hung = limit
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
                return

    async def _listen(self, worker: _Worker) -> None:
        watch = asyncio.get_running_loop().create_task(self._watch(worker))
        try:
            await self._messages(worker)
        finally:
            watch.cancel()

    async def _messages(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        while (message := await _receive(worker.reader)) is not None:
            worker.heard = loop.time()
            kind, attempt_id, *rest = message
            if kind == "alive":
                continue
            worker.cancelling.pop(attempt_id, None)  # it said this attempt ended
            if kind == "cancelled":  # (its folder set aside by the worker itself)
                continue
            if kind == "done" or kind == "error":
                payload, stop = rest[0], rest[-1]
                if stop is not None and self._provider_stop is None:
                    self._provider_stop = stop
                future = worker.pending.pop(attempt_id, None)
                if future is None or future.done():
                    # an attempt the job cancelled (interrupted): a trial finished meanwhile
                    # is counted from its folder once the workers ended (runner/batch.py)
                    continue
                if kind == "done":
                    future.set_result((payload, rest[1]))
                else:
                    future.set_exception(payload)
        worker.alive = False
        code = await _exit_code(worker.proc)
        why = f"{worker.name()} exited (code {code}) during the trial"
        if worker.hung is not None:
            why = (
                f"{worker.name()} said nothing for {worker.hung:g} s (stopped or stuck) and "
                "was killed during the trial"
            )
        # its trials' half-written folders set aside with what their model calls spent, before
        # they are run again (the job's last sweep removed them: their spend counted nowhere,
        # nor in the budget on --resume; helper-136)
        cut = [worker.attempts[a] for a in worker.pending if a in worker.attempts]
        cut += worker.cancelling.values()  # cancelled by an interrupt, not ended by the worker
        worker.cancelling.clear()
        spent = await asyncio.get_running_loop().run_in_executor(None, self._set_aside, cut, why)
        for attempt_id, future in worker.pending.items():
            if not future.done():
                # what the lost attempt spent goes with it into the trial's record: its next
                # attempt's retried_usage (it said 0: helper-141)
                where = worker.attempts.get(attempt_id)
                future.set_exception(AttemptLost(why, spent.get(where[:2]) if where else None))
        worker.pending.clear()
        if code != 0:  # killed or crashed: what its sandboxes left (a clean exit removed it)
            from clawrig.leftovers import sweep_dead_again

            await asyncio.get_running_loop().run_in_executor(None, sweep_dead_again)

    async def run(
        self, task: Task, run_index: int, *, job_id: str, attempt: int, earlier: Usage
    ) -> tuple[TrialResult, Path]:
        alive = [w for w in self._workers if w.alive]
        worker = min(alive, key=lambda w: len(w.pending), default=None)
        if worker is None or self._local_pending <= len(worker.pending):
            self._local_pending += 1
            try:
                result, folder = await self._local.run(
                    task, run_index, job_id=job_id, attempt=attempt, earlier=earlier
                )
            finally:
                self._local_pending -= 1
            return result, folder
        self._seq += 1
        attempt_id = self._seq
        future: asyncio.Future[tuple[TrialResult, Path]] = (
            asyncio.get_running_loop().create_future()
        )
        worker.pending[attempt_id] = future
        worker.attempts[attempt_id] = (task.id, run_index, job_id)
        _send(worker.writer, ("run", attempt_id, task.id, run_index, job_id, attempt, earlier))
        try:
            return await future
        except asyncio.CancelledError:
            if worker.alive and not worker.writer.is_closing():
                _send(worker.writer, ("cancel", attempt_id))
                # until it says the attempt ended: killed first, it left the folder (_messages)
                worker.cancelling[attempt_id] = worker.attempts[attempt_id]
            raise
        finally:
            worker.pending.pop(attempt_id, None)
            worker.attempts.pop(attempt_id, None)

    def _set_aside(self, cut: list[tuple[str, int, str]], why: str) -> dict[tuple[str, int], Usage]:
        """For each (task id, run index, job id) a dead worker was running: its ``.tmp-*``
        trial folder (the one whose recorded model calls are of that run) set aside in
        ``_retried/`` with what they spent (:func:`clawrig.runner.batch.set_aside_killed`),
        ``why`` its error. A folder with no recorded call is left to the job's sweep. Returns
        what each set-aside attempt spent, by (task id, run index)."""
        from clawrig.runner.batch import set_aside_killed
        from clawrig.runner.trial import recorded_usage
        from clawrig.spec.layout import TMP_PREFIX
        from clawrig.spec.trial import Usage

        by_id = {t.id: t for t in self.tasks}
        spent: dict[tuple[str, int], Usage] = {}
        for task_id, run_index, job_id in cut:
            task = by_id.get(task_id)
            if task is None:
                continue
            for tmp in (self.job.output / task_id).glob(f"{TMP_PREFIX}*"):
                with contextlib.suppress(OSError, ValueError):
                    if recorded_usage(tmp)[1] == run_index:
                        used = set_aside_killed(tmp, task, self.job, job_id, why)
                        if used is not None:
                            key = (task_id, run_index)
                            spent[key] = spent.get(key, Usage()).add(used)
        return spent

    def provider_stop(self) -> str | None:
        """One line when a model server can serve no more requests, as this process saw it or
        a worker reported it first (:func:`clawrig.runner.executors.provider_stop_line` in
        that worker), else None."""
        return self._local.provider_stop() or self._provider_stop

    async def close(self) -> None:
        """Ask every worker to stop (it cancels its trials and cleans up), wait up to
        :data:`STOP_GRACE_S` for each, then kill what is left. Idempotent."""
        for worker in self._workers:
            if not worker.writer.is_closing():
                with contextlib.suppress(ConnectionError, RuntimeError):
                    _send(worker.writer, ("stop",))
                    worker.writer.write_eof()
        from clawrig.llm.client import share_answers, share_concurrency

        share_answers(None)
        share_concurrency(0, 1)
        try:
            for worker in self._workers:
                await self._wait_or_kill(worker)
                if worker.listener is not None:
                    # the worker is gone: its socket's end ends the listener, which first sets
                    # aside what a killed worker left (_messages); cut short if it does not
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(worker.listener), LISTENER_GRACE_S)
                    worker.listener.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await worker.listener
                worker.writer.close()
        finally:
            # cut short (a second Ctrl-C): none left behind, nor a thread waiting on one
            self.kill_now()
        if any(w.proc.returncode not in (0, None) for w in self._workers):
            from clawrig.leftovers import sweep_dead_again  # what a killed one left

            await asyncio.get_running_loop().run_in_executor(None, sweep_dead_again)
        self._workers.clear()

    async def _wait_or_kill(self, worker: _Worker) -> None:
        """Wait up to :data:`STOP_GRACE_S` for ``worker`` to clean up and exit; kill it at once
        when it has said nothing for two beats (stopped or stuck: no clean-up to wait for),
        and when the grace runs out."""
        loop = asyncio.get_running_loop()
        end = loop.time() + STOP_GRACE_S
        exited = asyncio.ensure_future(_exit_code(worker.proc))
        while not exited.done():
            now = loop.time()
            if now >= end or now - worker.heard > 2 * heartbeat_s():
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
                break
            await asyncio.wait([exited], timeout=min(1.0, end - now))
        await exited

    def kill_now(self) -> None:
        """SIGKILL every worker still running (the driver is leaving at once: a second Ctrl-C,
        the interrupt's grace run out): a worker is in a session of its own and would outlive
        it, stopped or stuck; what a killed one leaves is swept by
        :func:`clawrig.leftovers.sweep_dead_again`."""
        for worker in self._workers:
            if worker.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
        for worker in self._workers:  # reaped: a sweep takes only dead processes' folders
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.proc.wait(timeout=2)


# -- the worker side ----------------------------------------------------------------------------


async def _serve(sock: socket.socket) -> None:
    from clawrig.runner.executors import provider_stop_line
    from clawrig.runner.job import Job
    from clawrig.runner.trial import run_trial

    reader, writer = await asyncio.open_unix_connection(sock=sock)
    init = await _receive(reader)
    if init is None or init[0] != "init":
        # (CI181: a driver stopped by SIGTERM while this worker started sent its "stop"
        # before any "init": unpacked as one, it printed a traceback into the driver's
        # terminal) nothing was started: nothing to stop
        return
    _, index, job_config, tasks, spend, parallel, processes = init
    from clawrig.llm.client import share_answers, share_concurrency

    share_answers(spend.parent if spend is not None else None)
    share_concurrency(index, processes)
    try:
        job = Job(job_config)
        services = job.worker_services(tasks, spend, parallel)
        services.log_line = _worker_line(index)
    except Exception as exc:  # noqa: BLE001 - the driver says it in one line
        _send(writer, ("fail", str(exc) if isinstance(exc, UserError) else repr(exc)))
        await writer.drain()
        return
    by_id = {t.id: t for t in tasks}
    settle()  # what exists now lives as long as the worker (clawrig.runner.heap)
    running: dict[int, asyncio.Task[tuple[TrialResult, Path]]] = {}

    def report(attempt_id: int, done: asyncio.Task[tuple[TrialResult, Path]]) -> None:
        running.pop(attempt_id, None)
        if writer.is_closing():
            return
        if done.cancelled():  # its folder set aside (or removed): nothing left to the driver
            _send(writer, ("cancelled", attempt_id))
            return
        stop = provider_stop_line(services)
        if (exc := done.exception()) is not None:
            _send(writer, ("error", attempt_id, _portable(exc), stop))
        else:
            result, folder = done.result()
            _send(writer, ("done", attempt_id, result, folder, stop))

    async def beat() -> None:  # the driver takes a silent worker for hung (HUNG_AFTER_S)
        every = heartbeat_s()
        while not writer.is_closing():
            await asyncio.sleep(every)
            _send(writer, ("alive", 0))

    gateway = services.gateway
    assert gateway is not None
    with gateway:
        async with gateway.shared_upstream():
            _send(writer, ("ready",))
            alive = asyncio.create_task(beat())
            try:
                while (message := await _receive(reader)) is not None and message[0] != "stop":
                    if message[0] == "run":
                        _, attempt_id, task_id, run_index, job_id, attempt, earlier = message
                        trial = asyncio.create_task(
                            run_trial(
                                by_id[task_id],
                                job.config.trial,
                                job.config.output,
                                run_index=run_index,
                                services=services,
                                job_id=job_id,
                                attempt=attempt,
                                earlier=earlier,
                            )
                        )
                        running[attempt_id] = trial
                        trial.add_done_callback(functools.partial(report, attempt_id))
                    elif message[0] == "cancel" and (cancelled := running.get(message[1])):
                        cancelled.cancel()
            finally:
                alive.cancel()
                for trial in list(running.values()):
                    # not one the driver cancelled already: a second cancel interrupts its
                    # clean-up (the folder set aside with its spend: helper-152)
                    if not trial.cancelling():
                        trial.cancel()
                await asyncio.gather(*running.values(), return_exceptions=True)
                if services.pool is not None:
                    await services.pool.close()
                with contextlib.suppress(ConnectionError):
                    await writer.drain()


def main(argv: list[str]) -> int:
    """A worker's process: ``python -P -m clawrig.runner.executors.processes FD``."""
    sock = socket.socket(fileno=int(argv[1]))
    sock.set_inheritable(False)  # passed in inheritable: no program this worker starts gets it
    asyncio.run(_serve(sock))
    return 0


if __name__ == "__main__":
    gc.disable()  # until the job's objects are frozen (as the CLI does)
    sys.exit(main(sys.argv))
