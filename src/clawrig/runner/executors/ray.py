"""``--executor ray``: a job's trials on the nodes of a Ray cluster (design: docs/ray.md).

- The driver (the process that runs ``clawrig run``) keeps the job: the output folder, the
  progress file, resume, retries, the budget and the summary (:mod:`clawrig.runner.batch`,
  unchanged). This executor only runs trial attempts.
- One :class:`NodeWorker` Ray actor per alive node, pinned there by Ray's
  ``NodeAffinitySchedulingStrategy``; it runs up to ``slots`` trials at once (``--slots-per-node``,
  default the node's CPU count) with :func:`clawrig.runner.trial.run_trial`. Sandboxes stay on
  the node that started them. Ray places the actors, carries calls and results, and reports a
  lost node (``RayActorError``); the driver hands each attempt to a node with a free slot.
- Tasks data: the folder that holds the suite (every path its tasks name) is packed once
  (tar, at most :data:`SUITE_MAX_BYTES`) into Ray's object store; each node unpacks it once into
  ``<cache>/ray-suites/<sha256>/`` and loads the same tasks from there. Environments are
  resolved (built when missing) once per node, and warm snapshots are made by the node's own
  trials, once per node (:mod:`clawrig.env`).
- Keys: the driver's model gateway is the only holder of provider keys; it listens on the
  driver's cluster address. For every attempt the driver opens a lease per model (agent, judge)
  and sends the node only the lease token; the node's own gateway (no keys) forwards to the
  driver's, records the trial's ``model_calls.jsonl`` and enforces the trial's caps, while the
  driver's counts every USD and enforces the job's budget (a 402 from it is the node's budget
  refusal).
- Trial folders come back whole: the node packs the finished folder (its files' bytes) and
  returns it through the object store; the driver writes it into ``<task>/.tmp-*`` and renames
  it into place (the same atomic rename as a local trial).
- A node lost mid-trial: the attempt is run again on another node, with what the lost attempt
  spent (the driver's leases counted it) added to the trial's usage as an earlier attempt's;
  it is neither scored nor counted against ``max_attempts``. Every node lost:
  :class:`ClusterGone`, an infrastructure error, and the job starts no new trial
  (:meth:`RayExecutor.provider_stop`; the finished trials are kept, ``--resume`` continues).
- The driver records each attempt's calls in a ``.tmp-ray-*`` folder of the output until the
  trial's folder comes back: an attempt that does not come back is set aside in ``_retried/``
  with what it spent (:meth:`RayExecutor.run`)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import signal
import socket
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from clawrig.errors import InfrastructureError, SetupError, UserError
from clawrig.leftovers import remove_tree
from clawrig.runner.trial import TrialServices, _unfinished_folder, write_tree
from clawrig.sandbox.workspace import read_tree
from clawrig.sizes import format_bytes
from clawrig.spec.job import JobConfig, TrialConfig
from clawrig.spec.layout import (
    RETURNED_AS,
    TMP_PREFIX,
    JobPaths,
    TrialPaths,
    json_text,
    model_from_json_text,
    read_regular,
)
from clawrig.spec.task import Task
from clawrig.spec.trial import TrialResult, Usage

SUITE_MAX_BYTES = 1 << 30
"""The largest suite folder (bytes, files summed) shipped to nodes through Ray's object store."""

SUITE_CACHE = "ray-suites"
"""The folder under clawrig's cache (:func:`clawrig.sandbox.pyenv.cache_root`) where nodes keep
unpacked suites, one ``<sha256>/`` each."""

NODE_LOG_LINE = "ray: ran on node {node_id}"
"""The line a node appends to a trial's agent.log before sending the folder back."""

JOIN_POLL_S = 2.0
"""Seconds between two looks at the cluster's node table for nodes that joined mid-job."""

NODE_RETRY_ATTEMPTS = 2
"""Tries a node's gateway makes per request to the driver's (the driver's retries the
provider itself)."""

CLUSTER_GONE = (
    "--executor ray: no clawrig worker is left on the cluster (its nodes left, or their "
    "workers were killed or crashed: see the nodes' Ray logs); --resume continues on the "
    "nodes alive then"
)
"""The job's stop line when no node is left to run trials (:meth:`RayExecutor.provider_stop`)."""


class ClusterGone(InfrastructureError):
    """No node of the cluster is left to run a trial attempt: the attempt is an
    infrastructure error and the job starts no new trial (it said exit 2 with no summary, as
    for bad input: helper-141)."""


NODE_CLOSE_WAIT_S = 10.0
"""Seconds the driver gives its node workers to release their folders and mounts
(:meth:`NodeWorker.close`) before it ends them."""
LOST_REQUEST_WAIT_S = 120.0
"""How long, in seconds, the driver waits for the model requests a lost node left in flight
before it reads what the lost attempt spent (the provider answers them and bills them anyway);
a request still open then is missing from the trial's usage, never from the job's spend."""


RAY_AUTH_HINT = (
    "a cluster `ray start` started uses Ray's token authentication by default since Ray "
    "2.59, which every process joining it needs too: export RAY_AUTH_MODE=token before "
    "`clawrig run` and each `ray start`, with the cluster's token in ~/.ray/auth_token or "
    "RAY_AUTH_TOKEN (`ray get-auth-token`; docs/ray.md)"
)
"""What a failed join adds when this process did not use Ray's token authentication (a
process that does cannot run workers on a cluster that does not, so clawrig never turns it
on by itself: Ray reads the mode once, when it is loaded)."""


def import_ray() -> Any:
    """The ``ray`` module; UserError (one line) when it is not installed."""
    try:
        import ray
    except ImportError:
        raise UserError(
            "--executor ray: Ray is not installed (pip install 'clawrig[ray]')"
        ) from None
    return ray


def driver_host() -> str:
    """The address other nodes reach this machine at (Ray's own choice of this node's IP)."""
    ray = import_ray()
    return str(ray.util.get_node_ip_address())


def address_problem(address: str | None, timeout_s: float = 5.0) -> str | None:
    """One line when nothing accepts a TCP connection at a ``HOST:PORT`` address within
    ``timeout_s`` seconds (Ray itself would retry for minutes); None for a reachable one, for
    None (a local cluster), ``auto`` and ``ray://`` (Ray Client) addresses."""
    if not address or address == "auto" or "://" in address:
        return None
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return f"--ray-address: {address!r} is not HOST:PORT, auto or ray://HOST:PORT"
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        return f"--ray-address: no Ray cluster answers at {address} ({exc.strerror or exc})"
    return None


def node_environment(env_file: Path | None) -> dict[str, str]:
    """The job's environment variables its nodes get (Ray's ``runtime_env`` ``env_vars`` of
    the node workers): every name of the env file (``env_file``, default ``./.env`` when
    present), ``CLAWRIG_PASS_ENV`` and the names it lists, with this process's values (the
    job loaded the env file into it without overriding), except model settings and
    secret-looking names (:func:`clawrig.egress.trial.stays_on_host`: keys stay with the
    driver's gateway)."""
    from dotenv import dotenv_values

    from clawrig.egress.trial import PASS_ENV_VAR, stays_on_host

    path = env_file if env_file is not None else Path(".env")
    names = set(dotenv_values(path)) if path.is_file() else set()
    names |= {PASS_ENV_VAR} | {n.strip() for n in os.environ.get(PASS_ENV_VAR, "").split(",")}
    return {n: os.environ[n] for n in sorted(names) if n in os.environ and not stays_on_host(n)}


def config_problems(job: JobConfig) -> list[str]:
    """What ``--executor ray`` cannot run (one line each): a missing Ray, an address nothing
    answers at, ``--replay``, ``--web`` other than off. The options are checked first: Ray
    (seconds to import) and the address only when they are fine."""
    problems = []
    if job.replay is not None:
        problems.append("--replay: not supported with --executor ray (run it with local)")
    if job.trial.web not in ("off", ""):
        problems.append(
            f"--web {job.trial.web}: not supported with --executor ray (only --web off)"
        )
    if problems:
        return problems
    if problem := address_problem(job.ray_address):
        return [problem]
    try:
        import_ray()
    except UserError as exc:
        problems.append(str(exc))
    return problems


# -- the suite: packed once on the driver, unpacked once per node ------------------------------


@dataclass(frozen=True)
class SuitePack:
    """The folder ``base`` that holds every path of the job's tasks, packed: ``data`` (an
    uncompressed tar of it), ``digest`` (sha256 hex of ``data``), and ``suite_path`` /
    ``root`` relative to ``base``."""

    base: Path
    data: bytes
    digest: str
    suite_rel: str
    root_rel: str | None


def _task_paths(task: Task) -> list[Path]:
    ws = task.workspace
    paths = [task.source.path, ws.root, ws.exec_dir, ws.tmp_dir, ws.gt_dir]
    paths += [f.source for f in ws.files] + list(task.skills_dirs)
    return [Path(p).resolve() for p in paths if p is not None]


def pack_tree(base: Path, what: str) -> tuple[bytes, str]:
    """``base`` as an uncompressed tar and its sha256 hex. Raises UserError (naming ``what``,
    the folder and the limit) past :data:`SUITE_MAX_BYTES`."""
    size = 0
    for dirpath, _dirs, files in os.walk(base):
        for name in files:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(dirpath, name)).st_size
        if size > SUITE_MAX_BYTES:
            raise UserError(
                f"--executor ray: {what} {base} holds more than "
                f"{format_bytes(SUITE_MAX_BYTES)}, the most clawrig ships to Ray nodes; run a "
                "smaller --suite or --category selection"
            )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(base), arcname=".")
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def _common_base(paths: list[Path]) -> Path:
    base = Path(os.path.commonpath([str(p) for p in paths]))
    return base.parent if base.is_file() else base


def pack_suite(job: JobConfig, tasks: list[Task]) -> SuitePack:
    """Pack the folder holding ``job.suite_path``, ``job.root`` and every path the tasks name.
    Raises UserError (naming the folder and the limit) past :data:`SUITE_MAX_BYTES`."""
    suite = job.suite_path.resolve()
    paths = [suite] + ([job.root.resolve()] if job.root is not None else [])
    for task in tasks:
        paths += [p for p in _task_paths(task) if p.exists()]
    base = _common_base(paths)
    data, digest = pack_tree(base, "the suite's folder")
    return SuitePack(
        base=base,
        data=data,
        digest=digest,
        suite_rel=str(suite.relative_to(base)),
        root_rel=str(job.root.resolve().relative_to(base)) if job.root is not None else None,
    )


def _paths_in(value: Any) -> list[Path]:
    """Every :class:`Path` in a ``model_dump()`` (nested dicts, lists, tuples)."""
    if isinstance(value, Path):
        return [value]
    if isinstance(value, dict):
        return [p for v in value.values() for p in _paths_in(v)]
    if isinstance(value, list | tuple):
        return [p for v in value for p in _paths_in(v)]
    return []


def _map_paths(value: Any, fn: Any) -> Any:
    """``value`` (a ``model_dump()``) with every :class:`Path` replaced by ``fn(path)``."""
    if isinstance(value, Path):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_paths(v, fn) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_map_paths(v, fn) for v in value)
    return value


@dataclass(frozen=True)
class TaskPack:
    """A task given on its own (the RL episode API) for nodes: ``task_json`` (its paths made
    absolute), ``base`` (:func:`task_base`), ``data`` / ``digest`` (:func:`pack_tree` of
    ``base``)."""

    task_json: str
    base: str
    data: bytes
    digest: str


def task_base(task: Task) -> Path:
    """The folder holding every existing path ``task`` names (its file, workspace, gt,
    grader, skills): the same for every task of one suite folder. Raises UserError for a
    task that names none."""
    paths = [p.resolve() for p in _paths_in(task.model_dump()) if p.exists()]
    if not paths:
        raise UserError(f"task {task.id}: names no file to ship to Ray nodes")
    return _common_base(paths)


def pack_task(task: Task, packed: dict[Path, tuple[bytes, str]] | None = None) -> TaskPack:
    """``task`` for nodes; ``packed`` (base -> (data, digest)) keeps one pack per folder
    across calls. Raises UserError past :data:`SUITE_MAX_BYTES`."""
    base = task_base(task)
    cache = packed if packed is not None else {}
    if base not in cache:
        cache[base] = pack_tree(base, "the task's folder")
    data, digest = cache[base]
    absolute = Task.model_validate(_map_paths(task.model_dump(), Path.resolve))
    return TaskPack(absolute.model_dump_json(), str(base), data, digest)


def rebase_task(task_json: str, base: str, dest: Path) -> Task:
    """The task of a :class:`TaskPack` with every path under the driver's ``base`` moved to
    the same place under ``dest`` (a node's unpacked copy of ``base``)."""
    root = Path(base)

    def move(path: Path) -> Path:
        return dest / path.relative_to(root) if path.is_relative_to(root) else path

    task = Task.model_validate_json(task_json)
    return Task.model_validate(_map_paths(task.model_dump(), move))


def unpack_suite(data: bytes, digest: str, cache: Path) -> Path:
    """``<cache>/<digest>/``, unpacked from ``data`` by the first caller on this machine (a file
    lock keeps concurrent workers to one unpack). Raises ValueError when ``data`` does not match
    ``digest``."""
    dest = cache / digest
    done = cache / f"{digest}.done"
    if done.exists():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return dest
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"suite pack {digest[:12]}: corrupted in transfer")
        shutil.rmtree(dest, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="tar")
        done.touch()
    return dest


def pack_folder(folder: Path) -> tuple[list[str], dict[str, bytes]]:
    """A trial folder as (every sub-folder, relative; every regular file, relative path ->
    bytes): what :func:`unpack_trial` writes back (a trial folder holds no symlinks)."""
    dirs = sorted(os.path.relpath(dirpath, folder) for dirpath, _d, _f in os.walk(folder))
    return dirs, read_tree(folder)


def unpack_trial(
    packed: tuple[list[str], dict[str, bytes]], task_dir: Path, name: str, record: Path
) -> Path:
    """Write a trial folder packed by a node into ``record`` (the driver's ``.tmp-ray-*``
    record of the attempt's calls), name it there (:data:`RETURNED_AS`) and rename
    it to ``task_dir/<name>`` (whole or absent, as a local trial's). Returns the folder. Raises
    SetupError for a path that would leave the folder.

    Staged inside ``record`` so a driver killed at any point leaves one copy of the attempt's
    calls to count: half-written, only the record's (set aside by ``--resume``); renamed into
    place, only the trial's (the record, naming it, is removed). A staging folder of its own
    beside the record was set aside too, and the record after the rename (CI: a job's total
    above what its model received)."""
    dirs, files = packed
    task_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{name}-", dir=record))
    marker = record / RETURNED_AS
    try:
        for rel in dirs:
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise SetupError(f"path escapes the trial folder: {rel!r}")
            (tmp / rel).mkdir(parents=True, exist_ok=True)
        write_tree(tmp, files)
        marker.write_text(name, encoding="utf-8")
        final = task_dir / name
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        marker.unlink(missing_ok=True)
        raise
    return final


@contextlib.contextmanager
def keeping_signal_handlers(hold: bool) -> Iterator[None]:
    """Around ``ray.init``: the SIGINT and SIGTERM handlers in place before it are put back
    after it (Ray's puts ``sys.exit(15)`` on SIGTERM, and its core worker one of its own
    printing a C++ stack: helper-166 saw a SIGTERM ~1 s into a job exit 15 with that dump and
    no clawrig line, where the harness's handler makes it 143 with one). ``hold``: SIGTERM is
    also blocked meanwhile, and one that came is taken by the handler put back once it is
    unblocked (a SIGTERM inside ``ray.init`` ran Ray's exit in the middle of its core worker's
    start, which then aborted); only when ``ray.init`` starts no process (joining a running
    cluster), as a child would keep it blocked. SIGINT is never held (Ray leaves its handler
    alone): a Ctrl-C still stops a join that hangs. Outside the main thread (a program
    running a job in a thread of its own) nothing is done: Python sets handlers there only,
    and Ray sets none elsewhere."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signums = {signal.SIGINT, signal.SIGTERM}
    saved = {signum: signal.getsignal(signum) for signum in signums}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}) if hold else None
    try:
        yield
    finally:
        for signum, handler in saved.items():
            if handler is not None:  # (set again even when Python's record of it is
                signal.signal(signum, handler)  # unchanged: C code may have replaced it)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def settle_record(record: Path) -> bool:
    """A driver's record of an attempt's calls (a ``.tmp-*`` folder) found by ``--resume`` or
    a job's stop: True when it names a trial now in place (:func:`unpack_trial` got as far as
    the rename: its calls are that trial's, and the record is to be removed); else False,
    with what the driver was unpacking into it and its name file removed, so what is left is
    the attempt's calls, to be set aside. Any other ``.tmp-*`` folder: False, unchanged."""
    if _returned(record):
        return True
    for staged in record.glob(f"{TMP_PREFIX}*"):
        remove_tree(staged)
    with contextlib.suppress(OSError):
        (record / RETURNED_AS).unlink(missing_ok=True)
    return False


def _returned(record: Path) -> bool:
    """Whether ``record`` names (:data:`RETURNED_AS`, its first 4 KiB read: helper-166 made it
    3 GiB) a finished trial folder beside it: a real folder, not a link (helper-166: a link
    to another task's trial made a record's calls count nowhere), with a result.json file."""
    raw = read_regular(record / RETURNED_AS, 4096)  # (not a FIFO, not a link: helper-183)
    try:
        name = raw.decode("utf-8").strip() if raw is not None else ""
    except UnicodeDecodeError:
        return False
    if not name or "/" in name or name in (".", ".."):
        return False
    folder = record.parent / name
    try:  # (helper-167: a name past 255 bytes raised ENAMETOOLONG, and the record was dropped
        return (  # uncounted by the caller's suppress)
            not folder.is_symlink()
            and folder.is_dir()
            and (folder / TrialPaths.RESULT).is_file()
            and not (folder / TrialPaths.RESULT).is_symlink()
        )
    except (OSError, ValueError):
        return False


def remove_returned_record(record: Path) -> None:
    """Remove a driver's record of an attempt's calls whose trial is in place
    (:func:`unpack_trial`): its :data:`RETURNED_AS` last, so a driver killed midway leaves a
    record that still names the trial, which ``--resume`` removes (helper-166: ``rmtree``
    went in directory order, the name first, and a kill between the two left the calls
    without it: set aside, they counted twice)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(record):
            if entry.name == RETURNED_AS:
                continue
            if entry.is_dir(follow_symlinks=False):
                remove_tree(entry.path)
            else:
                os.unlink(entry.path)
    remove_tree(record)


# -- the node side ------------------------------------------------------------------------------


def _node_endpoint(endpoint: Any, gateway_url: str, token: str) -> Any:
    """``endpoint`` (name, model id, prices kept) reached through the driver's gateway with a
    lease ``token`` instead of the provider's URL and key. Its token server (vLLM / SGLang)
    stays: the node's gateway asks the driver's for the sampled token ids, the driver's asks
    the upstream and passes them back (the client asked), and the node's records them in the
    trial's ``model_calls.jsonl`` (``token_capture``)."""
    from clawrig.llm.gateway.tokens import capture_server

    return endpoint.model_copy(
        update={
            "base_url": f"{gateway_url}/v1",
            "api_key": SecretStr(token),
            "api_key_env": None,
            "extra_body": {},
            "headers": {},
            "server": capture_server(endpoint),
        }
    )


class NodeWorker:
    """The clawrig worker of one node (a Ray actor): the suite's tasks, a key-less gateway that
    forwards to the driver's, and trials run with :func:`clawrig.runner.trial.run_trial` into a
    node-local folder, returned packed."""

    def __init__(self, job_json: str) -> None:
        self.job = JobConfig.model_validate_json(job_json)
        self.tasks: dict[str, Task] = {}
        self.gateway: Any = None
        self.out: Path | None = None
        self.environments: dict[tuple[str, ...], Any] = {}
        self._agents: dict[str, asyncio.Task[None]] = {}
        self._packs: dict[str, Path] = {}

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    async def close(self) -> None:
        """Release what this worker made on its node before the driver ends it: its gateway,
        and every folder of this process with what is mounted below it (``ray.kill`` runs no
        exit handler: a worker on a cluster that outlives the job left a tmpfs mounted and its
        folders, helper-141)."""
        from clawrig.leftovers import release_own_mounts

        if self.gateway is not None:
            with contextlib.suppress(Exception):
                self.gateway.stop()
        await asyncio.to_thread(release_own_mounts, every_folder=True)

    async def prepare(
        self, suite: bytes | None, digest: str, suite_rel: str, root_rel: str | None
    ) -> str:
        """Start the node's gateway, prepare the agent and, for a job (``suite`` not None):
        unpack the suite (once per machine), load its tasks and resolve their environments
        (built when missing). Returns the node id."""
        from clawrig.env.system import resolve_environment
        from clawrig.leftovers import owned_tempdir
        from clawrig.llm.client import RetryPolicy
        from clawrig.llm.gateway import Gateway
        from clawrig.tasks.registry import load_tasks

        self.gateway = Gateway(retry=RetryPolicy(attempts=NODE_RETRY_ATTEMPTS)).start()
        self.out = owned_tempdir("ray-trials")
        if suite is not None:
            base = await self.unpack(suite, digest)
            root = base / root_rel if root_rel is not None else None
            loaded = await asyncio.to_thread(load_tasks, base / suite_rel, root=root)
            self.tasks = {t.id: t for t in loaded}
            trial = self.job.trial
            for fmt in sorted({str(t.format) for t in loaded}):
                await asyncio.to_thread(
                    resolve_environment, trial.sandbox, trial.environment, trial.image, fmt, None
                )
            await self._agent_ready(trial.agent)
        from clawrig.runner.heap import settle

        settle()  # the node's start-up objects live as long as the actor; trials follow
        return self.node_id()

    async def unpack(self, data: bytes, digest: str) -> Path:
        """Unpack a :func:`pack_tree` pack into ``<cache>/ray-suites/<digest>/`` (once per
        machine); returns the folder."""
        from clawrig.sandbox.pyenv import cache_root

        if digest not in self._packs:
            self._packs[digest] = await asyncio.to_thread(
                unpack_suite, data, digest, cache_root() / SUITE_CACHE
            )
        return self._packs[digest]

    async def _agent_ready(self, agent: str) -> None:
        """The agent's own preparation (e.g. installing OpenClaw), once per agent per node."""
        from clawrig.agents import create_agent

        if agent not in self._agents:
            prep = create_agent(agent).prepare
            self._agents[agent] = asyncio.ensure_future(asyncio.to_thread(prep, lambda line: None))
        await self._agents[agent]

    async def run(
        self,
        task: str | tuple[str, str, str],
        run_index: int,
        job_id: str,
        attempt: int,
        earlier: dict[str, Any],
        models: dict[str, Any],
        trial_json: str | None = None,
    ) -> tuple[str, str, tuple[list[str], dict[str, bytes]]]:
        """One attempt of a trial. ``task``: a task id of the job's suite, or (task JSON, the
        driver's base folder, pack digest) of a :class:`TaskPack` unpacked here before;
        ``models`` = {"gateway": the driver's gateway URL, "agent" / "judge": (endpoint JSON,
        lease token, stream) or None, "no_subagents": :attr:`TrialServices.no_subagents`};
        ``trial_json``: the trial's settings (default: the job's). Returns (result.json
        text, the trial folder's name, the folder packed by :func:`pack_folder`). Raises what
        ``run_trial`` raises."""
        from clawrig.llm.client import OpenAIChatModel
        from clawrig.llm.providers import ModelEndpoint
        from clawrig.runner.trial import run_trial
        from clawrig.spec.job import TrialConfig

        assert self.out is not None, "prepare() first"
        if isinstance(task, str):
            the_task = self.tasks[task]
        else:
            task_json, base, digest = task
            the_task = rebase_task(task_json, base, self._packs[digest])
        trial = TrialConfig.model_validate_json(trial_json) if trial_json else self.job.trial
        await self._agent_ready(trial.agent)
        chat: dict[str, Any] = {}
        for role in ("agent", "judge"):
            spec = models.get(role)
            if spec is not None:
                ep_json, token, stream = spec
                ep = _node_endpoint(
                    ModelEndpoint.model_validate_json(ep_json), models["gateway"], token
                )
                chat[role] = OpenAIChatModel(ep, stream=stream)
        services = TrialServices(
            model=chat.get("agent"),
            judge=chat.get("judge"),
            gateway=self.gateway,
            environments=self.environments,
            no_subagents=models.get("no_subagents"),
        )
        result, folder = await run_trial(
            the_task,
            trial,
            self.out,
            run_index=run_index,
            services=services,
            job_id=job_id,
            attempt=attempt,
            earlier=Usage.model_validate(earlier),
        )
        try:
            with open(TrialPaths(folder).agent_log, "a", encoding="utf-8") as log:
                log.write(NODE_LOG_LINE.format(node_id=self.node_id()) + "\n")
            packed = pack_folder(folder)
        finally:  # the node's copy goes while the folder travels (not on the trial's path)
            asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, folder, True)
        # json_text: a lone surrogate (an echoed byte that is not UTF-8) as its escape, which
        # model_dump_json refuses to write
        return json_text(result.model_dump(mode="json"), indent=None), folder.name, packed


# -- the driver side ----------------------------------------------------------------------------


@dataclass
class _Node:
    node_id: str
    actor: Any
    slots: int
    alive: bool = True
    packs: dict[str, asyncio.Future[Any]] = field(default_factory=dict)
    """Task packs (by digest) unpacked on the node, or being unpacked."""


class RayExecutor:
    """Runs a job's trial attempts on a Ray cluster (module docs). ``capacity`` = the slots of
    every node alive at :meth:`start`.

    ``tasks`` empty (the RL episode API, :class:`clawrig.rl.Rollouts`): no suite is shipped
    at start; each task given to :meth:`run` is shipped with its folder (:func:`pack_task`,
    once per folder per node)."""

    in_process = False

    def __init__(self, job: JobConfig, tasks: list[Task], services: TrialServices) -> None:
        self.job = job
        self.tasks = tasks
        self.services = services
        self.capacity: int | None = None
        self.nodes: list[_Node] = []
        self.lost_attempts = 0
        """Attempts lost with their node (run again elsewhere)."""
        self._free: asyncio.Queue[_Node | None] = asyncio.Queue()
        self._ray: Any = None
        self._owns_ray = False
        self.on_capacity: Callable[[int], None] | None = None
        """Told the slots of each node that joins after :meth:`start` (the job's loop grows
        its limit by them)."""
        self._suite_ids = {id(t) for t in tasks}
        self._known: set[str] = set()
        self._worker: Any = None
        self._suite_args: tuple[Any, ...] = ()
        self._runtime_env: dict[str, Any] | None = None
        self._watcher: asyncio.Future[None] | None = None
        self._task_packs: dict[Path, tuple[bytes, str]] = {}
        self._pack_refs: dict[str, Any] = {}

    async def start(self) -> None:
        """Join the cluster (``ray_address``, else ``$RAY_ADDRESS``; neither: a one-machine
        cluster of the job's own), ship the suite, start one worker per alive node and wait
        until each is ready. Raises UserError."""
        ray = self._ray = import_ray()
        if not ray.is_initialized():
            # "local", not None: given None, Ray joins any cluster already running on the
            # machine (/tmp/ray/ray_current_cluster: another job's, with that job's code)
            address = self.job.ray_address or os.environ.get("RAY_ADDRESS") or "local"
            try:
                with keeping_signal_handlers(hold=address != "local"):
                    ray.init(
                        address=address,
                        log_to_driver=False,
                        include_dashboard=False,
                        configure_logging=False,
                    )
            except (ConnectionError, ValueError, RuntimeError) as exc:
                said = f"--ray-address: cannot join the Ray cluster at {address}: {exc}"
                said = said.splitlines()[0]
                if address != "local" and os.environ.get("RAY_AUTH_MODE") != "token":
                    said += f" ({RAY_AUTH_HINT})"
                raise UserError(said) from None
            self._owns_ray = True
        gateway = self.services.gateway
        if gateway is None:
            raise UserError("--executor ray: the job has no model gateway")
        if self.tasks:
            pack = await asyncio.to_thread(pack_suite, self.job, self.tasks)
            suite = (ray.put(pack.data), pack.digest, pack.suite_rel, pack.root_rel)
        else:
            suite = (None, "", "", None)
        self._worker = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=10_000)(NodeWorker)
        self._suite_args = suite
        env = node_environment(self.job.env_file)
        self._runtime_env = {"env_vars": env} if env else None
        started = [self._launch(n) for n in ray.nodes() if n.get("Alive")]
        for node, ready in started:
            try:
                await ready
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError):
                # a node that died while starting, or one the cluster still lists alive after
                # it left (its pinned worker cannot be placed): the others run the job
                continue
            except ray.exceptions.RayTaskError as exc:
                raise _cause(exc) from None
            self._add(node)
        if not self.nodes:
            raise UserError("--executor ray: no node of the cluster could start a worker")
        self.capacity = sum(n.slots for n in self.nodes)
        self._watcher = asyncio.ensure_future(self._watch_joins())

    def _launch(self, info: dict[str, Any]) -> tuple[_Node, Any]:
        """Start the worker of the node ``info`` (an entry of ``ray.nodes()``), pinned there;
        returns the node and its ``prepare`` call."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node_id = info["NodeID"]
        self._known.add(node_id)
        cpus = int(info.get("Resources", {}).get("CPU", 1))
        slots = self.job.slots_per_node or max(1, cpus)
        actor = self._worker.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            runtime_env=self._runtime_env,
        ).remote(self.job.model_dump_json())
        return _Node(node_id, actor, slots), actor.prepare.remote(*self._suite_args)

    def _add(self, node: _Node) -> None:
        self.nodes.append(node)
        for _ in range(node.slots):
            self._free.put_nowait(node)

    async def _watch_joins(self) -> None:
        """Every :data:`JOIN_POLL_S` seconds, start a worker on each node that joined the
        cluster since; once it is ready its slots take trials (``capacity`` grows and
        ``on_capacity`` is told)."""
        ray = self._ray
        joining: set[asyncio.Future[None]] = set()
        while True:
            await asyncio.sleep(JOIN_POLL_S)
            try:
                found = await asyncio.to_thread(ray.nodes)
            except Exception:  # noqa: BLE001 - the cluster's table is unreachable: next poll
                continue
            for info in found:
                if info.get("Alive") and info["NodeID"] not in self._known:
                    fut = asyncio.ensure_future(self._join(*self._launch(info)))
                    joining.add(fut)
                    fut.add_done_callback(joining.discard)

    async def _join(self, node: _Node, ready: Any) -> None:
        ray = self._ray
        try:
            await ready
        except (
            ray.exceptions.RayActorError,
            ray.exceptions.ActorUnschedulableError,
            ray.exceptions.RayTaskError,
        ):
            return  # a node that cannot start a worker (or is gone already) takes no trials
        self._add(node)
        self.capacity = (self.capacity or 0) + node.slots
        if self.on_capacity is not None:
            self.on_capacity(node.slots)

    def _leases(
        self, task: Task, run_index: int, attempt: int, svc: TrialServices, record: Path
    ) -> dict[str, Any]:
        """The driver-side leases of one attempt (agent, judge), keyed by role, recording
        their calls in ``record`` (:meth:`run`'s spend folder)."""
        from clawrig.grading.judge_proxy import upstream_endpoint

        gateway = self.services.gateway
        assert gateway is not None
        out: dict[str, Any] = {}
        for role, model in (("agent", svc.model), ("judge", svc.judge)):
            endpoint = upstream_endpoint(model)
            if model is None or endpoint is None:
                continue
            out[role] = gateway.open_trial(
                endpoint,
                trial_id=f"{task.id}#{run_index}@{attempt}",
                role=role,
                task_id=task.id,
                run_index=run_index,
                cache=svc.judge_cache if role == "judge" else None,
                record_path=record,
            )
        return out

    async def _task_ref(self, node: _Node, task: Task) -> str | tuple[str, str, str]:
        """What the node's :meth:`NodeWorker.run` gets for ``task``: its id when it is one of
        the job's suite, else its :class:`TaskPack` (the pack unpacked on the node first,
        once per folder)."""
        if id(task) in self._suite_ids:
            return task.id
        pack = await asyncio.to_thread(pack_task, task, self._task_packs)
        if pack.digest not in self._pack_refs:
            self._pack_refs[pack.digest] = self._ray.put(pack.data)
        if pack.digest not in node.packs:
            ref = node.actor.unpack.remote(self._pack_refs[pack.digest], pack.digest)
            node.packs[pack.digest] = asyncio.ensure_future(_awaited(ref))
        await asyncio.shield(node.packs[pack.digest])
        return (pack.task_json, pack.base, pack.digest)

    async def run(
        self,
        task: Task,
        run_index: int,
        *,
        job_id: str,
        attempt: int,
        earlier: Usage,
        trial: TrialConfig | None = None,
        services: TrialServices | None = None,
    ) -> tuple[TrialResult, Path]:
        """One attempt on a node with a free slot (see :class:`Executor`). ``trial`` /
        ``services``: this attempt's settings and models instead of the job's (the RL episode
        API: each episode has its own sampling endpoint); their output folder stays
        ``job.output``."""
        ray, gateway = self._ray, self.services.gateway
        assert ray is not None and gateway is not None
        spend = await asyncio.to_thread(
            _unfinished_folder, JobPaths(self.job.output).task_dir(task.id), f"ray-r{run_index}"
        )
        # the driver's leases record every call of the attempt in ``spend`` too (its node lost
        # and run again on another: those attempts' calls as well) until the trial's folder
        # comes back
        try:
            svc = services or self.services
            trial_json = trial.model_dump_json() if trial is not None else None
            while True:
                node = await self._free.get()
                if node is None:
                    self._free.put_nowait(None)  # wake the next waiter too
                    raise ClusterGone(CLUSTER_GONE)
                if not node.alive:
                    continue
                leases: dict[str, Any] = {}
                ref = None
                try:
                    task_ref = await self._task_ref(node, task)
                    leases = self._leases(
                        task, run_index, attempt, svc, TrialPaths(spend).model_calls
                    )
                    models: dict[str, Any] = {
                        "gateway": gateway.host_url,
                        "no_subagents": svc.no_subagents,
                    }
                    for role, lease in leases.items():
                        model = svc.model if role == "agent" else svc.judge
                        models[role] = (
                            lease.endpoint.model_dump_json(),
                            lease.token,
                            bool(getattr(model, "stream", False)),
                        )
                    ref = node.actor.run.remote(
                        task_ref,
                        run_index,
                        job_id,
                        attempt,
                        earlier.model_dump(mode="json"),
                        models,
                        trial_json,
                    )
                    result_json, name, packed = await ref
                except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError):
                    # the node (or its worker, or the returned folder) is gone: what the attempt
                    # spent still counts, the attempt runs again elsewhere, neither scored nor
                    # counted as a failure
                    node.alive = False
                    self.lost_attempts += 1
                    for lease in leases.values():
                        gateway.close_trial(lease)  # no new requests; those in flight still bill
                    for lease in leases.values():
                        earlier = earlier.add(await gateway.settle(lease, LOST_REQUEST_WAIT_S))
                    if not any(n.alive for n in self.nodes):
                        self._free.put_nowait(None)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    self._free.put_nowait(node)
                    raise _cause(exc) from None
                except BaseException:  # cancelled (or the task could not be shipped)
                    if ref is not None:
                        with contextlib.suppress(Exception):
                            ray.cancel(ref)
                    self._free.put_nowait(node)
                    raise
                finally:
                    for lease in leases.values():
                        if not lease.closed:
                            gateway.close_trial(lease)
                self._free.put_nowait(node)
                result = model_from_json_text(TrialResult, result_json)
                task_dir = JobPaths(self.job.output).task_dir(task.id)
                folder = unpack_trial(packed, task_dir, name, spend)
                # the trial's own folder holds its calls now: the record goes with no await in
                # between, so a cancellation cannot set it aside half-removed
                remove_returned_record(spend)
                return result, folder
        except BaseException:
            # the attempt's calls as the driver's leases recorded them: kept in _retried/, so
            # the budget and the totals count them; the trial runs again on --resume (a
            # Ctrl-C, every node gone, a refusal that stops the job). Lost with the node's
            # folder before (helper-141). After a kill -9 of the driver, --resume sets the
            # folder aside.
            from clawrig.runner.batch import set_aside_killed
            from clawrig.runner.trial import EPISODE_STOPPED

            # (an RL output's episode has no resume: said as a local one's is)
            why = EPISODE_STOPPED if JobPaths(self.job.output).is_rollouts() else None
            set_aside_killed(spend, task, self.job, job_id, why)  # (a few files: not awaited,
            raise  # as the task may be cancelled again meanwhile)

    def provider_stop(self) -> str | None:
        """As the driver's gateway saw it (every model call goes through it), or
        :data:`CLUSTER_GONE` once no node is left: either way the job starts no new trial and
        ends with its summary (exit 1), the trials not run kept for ``--resume``."""
        from clawrig.runner.executors import provider_stop_line

        if self._ray is not None and not any(n.alive for n in self.nodes):
            return CLUSTER_GONE
        return provider_stop_line(self.services)

    async def close(self) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """End the node workers (and Ray, when :meth:`start` started it). Idempotent."""
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        ray = self._ray
        if ray is None:
            return
        closing = []
        for node in self.nodes:
            if node.alive:
                with contextlib.suppress(Exception):
                    closing.append(node.actor.close.remote())
        with contextlib.suppress(Exception):  # (a worker that does not answer is killed anyway)
            ray.get(closing, timeout=NODE_CLOSE_WAIT_S)
        for node in self.nodes:
            with contextlib.suppress(Exception):
                ray.kill(node.actor)
        self.nodes = []
        if self._owns_ray:
            ray.shutdown()
        self._ray = None


async def _awaited(ref: Any) -> Any:
    return await ref


def _cause(exc: Any) -> BaseException:
    """The exception a remote call raised (a UserError, ModelRequestError ...), unwrapped from
    Ray's ``RayTaskError``."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc
