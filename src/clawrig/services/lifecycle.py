"""Mock services inside a trial's sandbox: start, wait for health, save audits, serve graders.

Lifecycle (issue 4), one process per service, on the sandbox's own loopback (each sandbox has
its own network namespace, so parallel trials use the same port numbers without meeting):

1. before the sandbox starts: ``binds += await service_binds(task)`` binds the services
   environment (FastAPI + uvicorn, :data:`SERVICES_REQUIREMENTS`, built once by
   :func:`clawrig.sandbox.pyenv.ensure_env`) read-only at ``/opt/clawrig-env/<key>``;
2. after the sandbox starts, before the warmup and the agent: :func:`start_services` copies the
   service code to ``/run/clawrig/services/`` (the built-in services' package as
   ``clawrig.services.mock`` under empty parent packages, and the module file of each
   entry-point kind the task uses, :mod:`clawrig.services.kinds`), starts each service with a
   configuration file that it deletes once read (fixtures are gone before the agent starts)
   and waits until every health check answers;
   a service that exits or stays unhealthy is a :class:`clawrig.errors.SetupError` carrying its
   log;
3. while the agent runs, each built-in service streams its audit's growth to the harness over
   a channel sealed before the agent started (``start_services(audit=...)``): a reset the agent
   calls is recorded and erases nothing, and no file swap or later call can take back what the
   harness already holds (:func:`audits_from_streams`); a command service's audit is fetched
   from the service when the agent has finished (:func:`fetch_audits`, from the process clawrig
   started: a port served by another process is refused); the harness writes both to
   ``/tmp_workspace/.services/<name>/audit.json`` of the settled end state. (:func:`save_audits`
   does the fetch and the write inside a sandbox, for callers without a trial);
4. after every process is killed and gt/ is injected, before grading:
   :func:`restart_services` restarts each service from its saved audit (built-in services rebuild
   their end state by replaying the successful calls, and serve the saved audit verbatim, with
   faults off; a command service is replaced by a standard-library server of its saved audit),
   so graders written the upstream way (``GET http://localhost:<port>/<svc>/audit``) work;
5. :func:`stop_services` (or stopping the sandbox) ends them.

Built-in kinds and ports: gmail 9100, calendar 9101, contacts 9103, slack 9110; other kinds come
from the ``clawrig.services`` entry points (:mod:`clawrig.services.kinds`). A service with a
``command`` instead of a kind is started with ``/bin/sh -c command`` in /tmp_workspace (its port
in ``CLAWRIG_SERVICE_PORT``, its JSON configuration in the file ``CLAWRIG_SERVICE_CONFIG``
names, removed once the service is healthy); its audit is read from
``GET /<kind or name>/audit`` when it has one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrig.errors import SetupError
from clawrig.sandbox.base import Bind, ProcessHandle, Sandbox, oom_note
from clawrig.sandbox.channel import Connection, HarnessChannel
from clawrig.sandbox.paths import PATHS
from clawrig.sandbox.pyenv import ENV_MOUNT, ensure_env, env_bind, env_key, env_python
from clawrig.services.declare import fixture_files
from clawrig.services.kinds import SERVICE_KINDS, service_target
from clawrig.services.mock.core import AUDIT_KEYS
from clawrig.spec.layout import json_text
from clawrig.spec.task import ServiceSpec, Task

SERVICES_REQUIREMENTS: tuple[str, ...] = ("fastapi==0.165.0", "uvicorn==0.54.0")
"""The services environment (pinned: every machine serves the same API)."""

CODE_DIR = f"{PATHS.run}/services"
"""Where the service code is copied inside the sandbox (``sys.path`` of the service processes:
package ``clawrig.services.mock`` and the entry-point kinds' modules)."""
MOCK_PACKAGE = "clawrig.services.mock"

HEALTH_TIMEOUT_S = 60.0
"""How long :func:`start_services` waits for every health check, seconds."""
RESTORE_TIMEOUT_S = 120.0
"""Seconds a service rebuilt for grading (:func:`restart_services`) has to answer its health
check: it replays every call the agent made first, so more than a fresh start's."""

MOCK_SOURCE = Path(__file__).resolve().parent / "mock"

_WAIT = r"""
import json, sys, time, urllib.request
targets = json.loads(sys.argv[1])
deadline = time.monotonic() + float(sys.argv[2])
pending = {t[0]: t for t in targets}
while pending:
    if time.monotonic() > deadline:  # before a probe: a time limit past is past (a service
        # up before its first probe came up in a limit of 1 ms, a test's flake under load)
        print(json.dumps({"name": sorted(pending)[0], "why": "timeout"}))
        sys.exit(4)
    for name, pid, port, path in list(pending.values()):
        try:
            with open("/proc/%d/stat" % pid) as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            state = "X"
        if state in ("Z", "X"):
            print(json.dumps({"name": name, "why": "exited"}))
            sys.exit(3)
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=2) as r:
                if r.status < 400:
                    del pending[name]
        except Exception:
            pass
    if pending:
        time.sleep(0.05)
"""

_FETCH = r"""
import json, os, sys, urllib.request
pid, port, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def listening_inodes(port):
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh)
                for line in fh:
                    f = line.split()
                    if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "0A":
                        out.add(f[9])
        except OSError:
            pass
    return out

def family(pid):
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name) as fh:
                    parents[int(name)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, frontier = {pid}, {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
        out |= frontier
    return out

def owned(pid, inodes):
    for member in family(pid):
        try:
            fds = os.listdir("/proc/%d/fd" % member)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%d/fd/%s" % (member, fd))
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return True
    return False

if pid > 0 and not owned(pid, listening_inodes(port)):
    print(json.dumps({"error": "port %d is not served by the process clawrig started" % port}))
    sys.exit(0)
try:
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=30) as r:
        body = r.read().decode("utf-8", "replace")
        print(json.dumps({"status": r.status, "body": body}))
except urllib.error.HTTPError as exc:
    print(json.dumps({"status": exc.code, "body": exc.read().decode("utf-8", "replace")}))
except Exception as exc:
    print(json.dumps({"error": "%s: %s" % (type(exc).__name__, exc)}))
"""


@dataclass
class ServiceHandle:
    """A running service: its spec, its process, and how it was started."""

    spec: ServiceSpec
    process: ProcessHandle
    mode: str = "live"
    """``live`` (the agent's service), ``restored`` (built-in, rebuilt from the saved audit) or
    ``audit-replay`` (a command service replaced by a server of its saved audit)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name


def is_builtin(spec: ServiceSpec) -> bool:
    """True for a service of a registered kind (built-in or an entry point's), run by
    clawrig's service server; False for a ``command`` service."""
    return spec.command is None and spec.kind in SERVICE_KINDS


def needs_services_env(task: Task) -> bool:
    """True when the task has a service of a registered kind (which runs on the services
    environment)."""
    return any(is_builtin(s) for s in task.services)


def docker_refusal(tasks: Iterable[Task]) -> str | None:
    """The line that refuses ``--sandbox docker`` for tasks that use the built-in mock
    services (:func:`start_services` cannot start them there: their environment is built for
    the host's python3), naming them; None when none does."""
    using = [t.id for t in tasks if needs_services_env(t)]
    if not using:
        return None
    shown = ", ".join(using[:5]) + (", ..." if len(using) > 5 else "")
    return (
        f"--sandbox docker: {len(using)} task(s) use clawrig's built-in mock services "
        f"({shown}), which need --sandbox bwrap (or local): their Python environment is "
        "built for the host's /usr/bin/python3"
    )


def services_env(cache_dir: Path | None = None) -> Path:
    """Host folder of the services environment (built on first use; blocking)."""
    return ensure_env(SERVICES_REQUIREMENTS, cache_dir=cache_dir)


async def service_binds(task: Task, *, cache_dir: Path | None = None) -> list[Bind]:
    """Binds the task's services need in ``SandboxConfig.binds`` (empty without a built-in
    service). Builds the services environment on first use (pip, in a thread). Raises
    SetupError when it cannot be built."""
    if not needs_services_env(task):
        return []
    env = await asyncio.to_thread(services_env, cache_dir)
    return [env_bind(env)[0]]


def services_python(sandbox: Sandbox, *, cache_dir: Path | None = None) -> str:
    """The services interpreter as the sandbox sees it: ``/opt/clawrig-env/<key>/bin/python3``,
    or the host path under the ``local`` backend (which runs host paths)."""
    if sandbox.backend == "local":
        return str(env_python(services_env(cache_dir)))
    return f"{ENV_MOUNT}/{env_key(SERVICES_REQUIREMENTS)}/bin/python3"


def audit_path(spec: ServiceSpec) -> str:
    """``/<kind>/audit``, or ``/<name>/audit`` for a command service without a kind."""
    return f"/{spec.kind or spec.name}/audit"


def audit_file(spec: ServiceSpec) -> str:
    """Where the saved audit lives in the end state."""
    return f"{PATHS.services_state}/{spec.name}/audit.json"


def _code_files(task: Task) -> dict[str, bytes]:
    """The service code a task needs, relative path under :data:`CODE_DIR` -> bytes: the
    built-in package as ``clawrig/services/mock/`` (empty ``__init__.py`` for its parents, so
    clawrig itself is not imported) and each entry-point kind's module file, its parent
    packages likewise empty."""
    files: dict[str, bytes] = {}

    def put(module: str, source: bytes, *, package: bool = False) -> None:
        parts = module.split(".")
        for i in range(1, len(parts)):
            files.setdefault("/".join(parts[:i]) + "/__init__.py", b"")
        files["/".join(parts) + ("/__init__.py" if package else ".py")] = source

    for path in sorted(MOCK_SOURCE.glob("*.py")):
        name = path.stem
        put(
            MOCK_PACKAGE if name == "__init__" else f"{MOCK_PACKAGE}.{name}",
            path.read_bytes(),
            package=name == "__init__",
        )
    for spec in task.services:
        if is_builtin(spec):
            module, _, source = service_target(str(spec.kind))
            if not module.startswith(MOCK_PACKAGE + "."):
                put(module, source.read_bytes())
    return files


async def _install_code(sandbox: Sandbox, task: Task) -> str:
    """Copy the service code into the sandbox; return its ``sys.path`` entry."""
    for rel, data in _code_files(task).items():
        await sandbox.write_file(f"{CODE_DIR}/{rel}", data)
    return sandbox.path_seen_by_commands(CODE_DIR)


def _target(spec: ServiceSpec) -> str | None:
    """``module:Class`` of a registered kind's service (what the service process imports)."""
    if not is_builtin(spec):
        return None
    module, name, _ = service_target(str(spec.kind))
    return f"{module}:{name}"


def _launcher(code_dir: str, module: str) -> str:
    return (
        f"import sys; sys.path.insert(0, {code_dir!r}); "
        f"from {MOCK_PACKAGE}.{module} import main; main()"
    )


def _fixture_path(name: str) -> str:
    """The sandbox path of a fixture file ``name`` (a relative name is under /tmp_workspace)."""
    return name if name.startswith("/") else f"{PATHS.workspace}/{name}"


def read_fixture_files(task: Task, workspace: Path) -> dict[str, bytes | None]:
    """The fixture files of ``task``'s services that are in its workspace, read from the host
    folder ``workspace`` holding the task's *initial* files: sandbox path -> bytes (None: not
    there, or a link out of the folder). Re-grading and verify pass them to
    :func:`restart_services`, so a grader's services start from the fixtures a live trial's
    started from, not from what the agent left in those files. Files outside the workspace are
    not read (the clean room has them as the environment made them)."""
    out: dict[str, bytes | None] = {}
    for spec in task.services:
        for path in map(_fixture_path, fixture_files(spec)):
            rel = posixpath.normpath(path)
            if not rel.startswith(PATHS.workspace + "/"):
                continue
            try:  # (a link loop: RuntimeError on Python 3.11)
                host = (workspace / rel[len(PATHS.workspace) + 1 :]).resolve()
                inside = host.is_relative_to(workspace.resolve())
                out[path] = host.read_bytes() if inside and host.is_file() else None
            except (OSError, RuntimeError):
                out[path] = None
    return out


def has_fixture_files(task: Task) -> bool:
    """Whether a service of ``task`` takes fixtures from files (:func:`fixture_files`)."""
    return any(fixture_files(spec) for spec in task.services)


async def _resolve_fixtures(
    sandbox: Sandbox, spec: ServiceSpec, files: Mapping[str, bytes | None] | None = None
) -> dict[str, Any]:
    """Inline fixtures, with ``$file`` and string values naming ``.json`` files read from the
    workspace (paths relative to /tmp_workspace), or from ``files`` (sandbox path -> bytes,
    :func:`read_fixture_files`) for the paths it holds. Raises SetupError naming the file."""
    out: dict[str, Any] = {}
    items = dict(spec.fixtures)
    base = items.pop("$file", None)
    if base is not None:
        loaded = await _read_json(sandbox, spec, str(base), files)
        if not isinstance(loaded, dict):
            raise SetupError(f"service {spec.name}: fixtures file {base} must hold a JSON object")
        out.update(loaded)
    for key, value in items.items():
        if isinstance(value, str) and value.endswith(".json") and key != "now":
            value = await _read_json(sandbox, spec, value, files)
        out[key] = value
    return out


async def _read_json(
    sandbox: Sandbox, spec: ServiceSpec, rel: str, files: Mapping[str, bytes | None] | None
) -> Any:
    path = _fixture_path(rel)
    try:
        if files is not None and path in files:
            data = files[path]
            if data is None:
                raise FileNotFoundError(path)
            return json.loads(data)
        return json.loads(await sandbox.read_file(path))
    except FileNotFoundError:
        raise SetupError(f"service {spec.name}: fixtures file not found: {path}") from None
    except IsADirectoryError:  # the task's fault (a folder), not the harness's: not retried
        raise SetupError(f"service {spec.name}: fixtures file {path} is a folder") from None
    except ValueError as exc:
        raise SetupError(
            f"service {spec.name}: fixtures file {path}: invalid JSON ({exc})"
        ) from None


def _config_file(spec: ServiceSpec) -> str:
    return f"{CODE_DIR}/config/{spec.name}.json"


async def _spawn(
    sandbox: Sandbox,
    spec: ServiceSpec,
    python: str | None,
    code: str | None,
    config: dict[str, Any],
    module: str = "server",
) -> ProcessHandle:
    """Start one service. Its configuration goes to a file that the service deletes once read
    (and :func:`_wait_healthy` removes in any case), so fixtures are gone before the agent
    starts."""
    await sandbox.write_file(_config_file(spec), json_text(config, indent=None), mode=0o600)
    path = sandbox.path_seen_by_commands(_config_file(spec))
    env = {
        "PYTHONUNBUFFERED": "1",
        "CLAWRIG_SERVICE_PORT": str(spec.port),
        "CLAWRIG_SERVICE_CONFIG": path,
    }
    if spec.command is not None and module == "server":
        return await sandbox.spawn(spec.command, cwd=PATHS.workspace, env=env)
    assert code is not None
    interpreter = python if module == "server" and python is not None else "python3"
    argv = [interpreter, "-I", "-c", _launcher(code, module), path]
    return await sandbox.spawn(argv, cwd=PATHS.workspace, env=env)


async def _wait_healthy(sandbox: Sandbox, handles: list[ServiceHandle], timeout_s: float) -> None:
    targets = [
        [h.name, getattr(h.process, "pid", 0), h.spec.port, h.spec.health_path] for h in handles
    ]
    r = await sandbox.exec(
        ["python3", "-I", "-c", _WAIT, json.dumps(targets), str(timeout_s)],
        timeout_s=timeout_s + 30,
    )
    await sandbox.exec(["rm", "-rf", sandbox.path_seen_by_commands(f"{CODE_DIR}/config")])
    if r.exit_code == 0:
        return
    try:
        info = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        info = {"name": handles[0].name, "why": f"health check failed: {r.stderr.strip()[-300:]}"}
    failed = next((h for h in handles if h.name == info.get("name")), handles[0])
    log = ""
    with contextlib.suppress(Exception):
        log, _ = await failed.process.read_log()
    await stop_services(handles)
    spec = failed.spec
    what = f"{spec.kind or 'command'} service {spec.name!r} on port {spec.port}"
    if info.get("why") == "exited":
        reason = "exited before answering its health check"
    elif info.get("why") == "timeout":
        reason = f"did not answer GET {spec.health_path} within {timeout_s:g} s"
    else:
        reason = str(info.get("why"))
    if note := oom_note(sandbox):  # (helper-124: at 64 MiB)
        reason += f" ({note})"
    # The console shows a message's first line: it ends with the log's last line (where a
    # crash says why), not a dangling "its log:" (helper-126, CI134).
    tail = log.strip()[-4000:]
    said = f"its log ends: {tail.splitlines()[-1].strip()}\n{tail}" if tail else "its log is empty"
    raise SetupError(f"{what} {reason}; {said}")


async def start_services(
    sandbox: Sandbox,
    task: Task,
    *,
    python: str | None = None,
    timeout_s: float = HEALTH_TIMEOUT_S,
    audit: HarnessChannel | None = None,
) -> list[ServiceHandle]:
    """Start every service of ``task`` in ``sandbox`` and wait until all are healthy.

    ``audit``: an open harness channel bound into ``sandbox``: each built-in service streams
    its audit's growth on it (:class:`clawrig.services.mock.server.AuditStream`); it is sealed
    once every service is healthy, before anything else runs, so only the services hold a
    connection (:func:`audits_from_streams` reads them back).

    ``python`` is the services interpreter inside the sandbox (default
    :func:`services_python`; its environment must be bound, see :func:`service_binds`).
    Returns the handles (empty when the task has no service). Raises SetupError (with the
    failing service's log) when a service exits or does not answer its health check within
    ``timeout_s`` seconds; the services already started are stopped first.
    """
    if not task.services:
        return []
    code: str | None = None
    if needs_services_env(task):
        if sandbox.backend == "docker":
            raise SetupError(
                f"task {task.id}: built-in services need the bwrap (or local) sandbox: their "
                "Python environment is built for the host's /usr/bin/python3"
            )
        python = python or services_python(sandbox)
        probe = await sandbox.exec(["test", "-x", python])
        if probe.exit_code != 0:
            raise SetupError(
                f"task {task.id}: the services environment is not in the sandbox ({python}): "
                "add clawrig.services.service_binds(task) to SandboxConfig.binds"
            )
        code = await _install_code(sandbox, task)
    handles: list[ServiceHandle] = []
    try:
        for spec in task.services:
            config = {
                "kind": spec.kind,
                "target": _target(spec),
                "name": spec.name,
                "port": spec.port,
                "fixtures": await _resolve_fixtures(sandbox, spec),
                "faults": spec.faults,
                "restore": None,
            }
            if audit is not None and is_builtin(spec):
                config["audit_socket"] = audit.path_in(sandbox)
            proc = await _spawn(sandbox, spec, python, code, config)
            handles.append(
                ServiceHandle(spec=spec, process=proc, extra={"fixtures": config["fixtures"]})
            )
    except BaseException:
        await stop_services(handles)
        raise
    try:
        await _wait_healthy(sandbox, handles, timeout_s)
    finally:
        if audit is not None:
            audit.seal()
    return handles


def audits_from_streams(task: Task, connections: list[Connection]) -> dict[str, dict[str, Any]]:
    """Service name -> its audit as the harness received it (built-in services that streamed,
    :func:`start_services`): every item the service ever appended to a list of its audit, in
    order, and the last value of every other key; a ``POST /<kind>/reset`` the agent called is
    itself a call (``"reset": true``) and erases nothing. ``truncated`` is set when a stream
    went over its byte cap or holds a change that could not be read (an audit with a hole).
    Services are matched by the name in their hello line."""
    specs = {s.name: s for s in task.services if is_builtin(s)}
    out: dict[str, dict[str, Any]] = {}
    for conn in connections:
        events = []
        hole = False  # a change the harness could not read: the audit is not whole
        for line in conn.lines:
            try:
                events.append(json.loads(line))
            except (ValueError, RecursionError):
                hole = True
        hello = events[0] if events and isinstance(events[0], dict) else {}
        spec = specs.get(str(hello.get("hello")))
        if spec is None or spec.name in out:
            continue
        kind = str(hello.get("kind") or spec.kind or spec.name)
        audit: dict[str, Any] = {"service": kind, "now": hello.get("now")}
        audit.update({key: [] for key in AUDIT_KEYS})
        for event in events[1:]:
            if not isinstance(event, dict) or "unrecorded" in event:
                hole = True
                continue
            if event.get("reset"):
                audit.setdefault("calls", []).append(
                    {
                        "method": "POST",
                        "endpoint": f"/{kind}/reset",
                        "request_body": None,
                        "status": 200,
                        "fault": False,
                        "latency_s": 0.0,
                        "reset": True,
                    }
                )
            for key, items in (event.get("append") or {}).items():
                if isinstance(items, list):
                    current = audit.get(key)
                    audit[key] = (current if isinstance(current, list) else []) + items
            for key, value in (event.get("set") or {}).items():
                audit[key] = value
        for seq, call in enumerate(audit.get("calls") or [], 1):
            if isinstance(call, dict):
                call["seq"] = seq
        if conn.overflow or hole:
            audit["truncated"] = True
        out[spec.name] = audit
    return out


async def _fetch(sandbox: Sandbox, port: int, path: str, pid: int = 0) -> tuple[int, str]:
    """GET ``http://127.0.0.1:<port><path>`` from inside the sandbox. With ``pid``, the port
    must be served by that process. Returns (status, body); raises SetupError on failure."""
    r = await sandbox.exec(["python3", "-I", "-c", _FETCH, str(pid), str(port), path], timeout_s=60)
    try:
        info = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise SetupError(f"GET {path} on port {port} failed: {r.stderr.strip()[-300:]}") from None
    if "error" in info:
        raise SetupError(f"GET {path} on port {port}: {info['error']}")
    return int(info["status"]), str(info["body"])


async def fetch_audits(
    sandbox: Sandbox,
    task: Task,
    handles: list[ServiceHandle] | None = None,
    *,
    builtin: bool = True,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Each service's audit, fetched with ``GET /<svc>/audit`` from the running service (with
    ``handles``: only from the process clawrig started). ``builtin`` False: command services
    only (built-in ones stream theirs to the harness). Returns (``{name: audit}``,
    ``{name: "saved" | why not}``)."""
    audits: dict[str, Any] = {}
    out: dict[str, str] = {}
    pids = {h.name: getattr(h.process, "pid", 0) for h in handles or []}
    for spec in task.services:
        if not builtin and is_builtin(spec):
            continue
        try:
            status, body = await _fetch(
                sandbox, spec.port, audit_path(spec), pids.get(spec.name, 0)
            )
            if status != 200:
                raise SetupError(f"GET {audit_path(spec)} answered {status}")
            audits[spec.name] = json.loads(body)
        except (SetupError, ValueError, RecursionError) as exc:
            out[spec.name] = f"no audit: {exc}"
            continue
        out[spec.name] = "saved"
    return audits, out


async def save_audits(
    sandbox: Sandbox, task: Task, handles: list[ServiceHandle] | None = None
) -> dict[str, str]:
    """Write each service's audit to ``/tmp_workspace/.services/<name>/audit.json``.

    Call it when the agent has finished and before its processes are killed. The folder is
    removed first (nothing the agent wrote there survives). With ``handles`` (from
    :func:`start_services`) the port must still be served by the process clawrig started (or
    one of its children): an agent that replaced a service gets no audit. Returns
    ``{name: "saved" | why not}``; a service without an audit is left without a file
    (its graders then find none), never a harness failure.
    """
    if not task.services:
        return {}
    await sandbox.exec(["rm", "-rf", PATHS.services_state])
    audits, out = await fetch_audits(sandbox, task, handles)
    for spec in task.services:
        if spec.name in audits:
            await sandbox.write_file(audit_file(spec), audit_text(audits[spec.name]))
    return out


AUDIT_INDENT_MAX_BYTES = 256 * 1024
"""An audit whose compact JSON is larger is saved compact (:func:`audit_text`)."""


def audit_text(audit: Any) -> str:
    """A saved audit file's text (``audit.json``; always UTF-8-encodable: the agent's strings
    in it may hold lone surrogates, :func:`clawrig.spec.layout.json_text`): indented by 2, as
    the sample sets' golden workspaces have it, when its compact text is at most
    :data:`AUDIT_INDENT_MAX_BYTES`, else compact. The agent decides how deep its requests'
    JSON nests, and indented text grows with the depth (a 14 MB request 58 lists deep made a
    593 MB audit.json, 1.3 GB of the harness's memory); compact it stays the size of what the
    service recorded, and indented at most ~65x the cap (64 levels, the services' limit)."""
    compact = json_text(audit, indent=None)
    if len(compact) > AUDIT_INDENT_MAX_BYTES:
        return compact + "\n"
    return json_text(audit) + "\n"


async def restart_services(
    sandbox: Sandbox,
    task: Task,
    *,
    python: str | None = None,
    timeout_s: float | None = None,
    audits: dict[str, Any] | None = None,
    fixtures: dict[str, Any] | None = None,
    fixture_files: Mapping[str, bytes | None] | None = None,
) -> list[ServiceHandle]:
    """Start the services again from their saved audits, for graders (after gt/ injection).

    ``audits``: name -> audit as the harness holds it (default: the saved ``audit.json``
    files in the workspace); ``fixtures``: name -> the fixtures the service started with
    (default: read again from the task's files: ``fixture_files``, :func:`read_fixture_files`,
    else the workspace).

    A built-in service rebuilds its end state from the fixtures and the saved audit's
    successful calls and serves that audit verbatim (faults off); a command service is replaced
    by a standard-library server of its saved audit (:mod:`clawrig.services.mock.replay`). A
    service without a saved audit starts from its fixtures (built-in) or is not restarted.
    Raises SetupError like :func:`start_services`.
    """
    if not task.services:
        return []
    timeout_s = RESTORE_TIMEOUT_S if timeout_s is None else timeout_s
    code = await _install_code(sandbox, task)
    if needs_services_env(task):
        python = python or services_python(sandbox)
    handles: list[ServiceHandle] = []
    try:
        for spec in task.services:
            saved: Any = None
            if audits is not None:
                saved = audits.get(spec.name)
            else:
                with contextlib.suppress(FileNotFoundError, ValueError, RecursionError):
                    saved = json.loads(await sandbox.read_file(audit_file(spec)))
            if is_builtin(spec):
                held = (fixtures or {}).get(spec.name)
                if held is None:
                    held = await _resolve_fixtures(sandbox, spec, fixture_files)
                config = {
                    "kind": spec.kind,
                    "target": _target(spec),
                    "name": spec.name,
                    "port": spec.port,
                    "fixtures": held,
                    "faults": spec.faults,
                    "restore": saved,
                }
                proc = await _spawn(sandbox, spec, python, code, config)
                handles.append(ServiceHandle(spec=spec, process=proc, mode="restored"))
            elif saved is not None:
                config = {
                    "port": spec.port,
                    "audit_path": audit_path(spec),
                    "health_path": spec.health_path,
                    "audit": saved,
                }
                proc = await _spawn(sandbox, spec, None, code, config, module="replay")
                handles.append(ServiceHandle(spec=spec, process=proc, mode="audit-replay"))
    except BaseException:
        await stop_services(handles)
        raise
    if handles:
        await _wait_healthy(sandbox, handles, timeout_s)
    return handles


async def stop_services(handles: list[ServiceHandle]) -> None:
    """Kill every service process (errors ignored: the sandbox may be gone). Idempotent."""
    for h in handles:
        with contextlib.suppress(Exception):
            await h.process.kill()


def default_port(kind: str) -> int | None:
    """The port of a registered kind when a task gives none (None for an unknown kind)."""
    from clawrig.services.kinds import service_class

    return service_class(kind).default_port if kind in SERVICE_KINDS else None
