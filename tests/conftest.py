"""Shared fixtures.

``scripted_server``: a factory that starts a :class:`clawrig.testing.scripted_server.ScriptedServer`
(a real OpenAI-compatible HTTP server on 127.0.0.1) and stops it after the test::

    from clawrig.testing.scripted_server import call, error, reply

    async def test_agent(scripted_server):
        srv = scripted_server([reply(tool_calls=[call("exec", {"command": "ls"})]), reply("done")])
        model = srv.chat_model()          # OpenAIChatModel on srv.base_url, test-sized backoff
        ...
        assert srv.requests[0]["tools"]   # every request body, in order

Arguments are those of ``ScriptedServer`` (``script``, ``responder=``, ``models=``).

`make test` runs the tests on two pytest-xdist workers (``--dist loadgroup``), one test at a
time to whichever worker is free, except that the tests sharing an expensive fixture run on one
worker so it is made once per run: a fixture of :data:`SHARED_ON_ONE_WORKER` or a module-scoped
fixture of a test module (:func:`_shared_group`). Two checks wrap every test session:

- ``sandbox`` marker: a test that starts a sandbox in this process must carry
  ``@pytest.mark.sandbox`` (or a module-level ``pytestmark``; tests using a fixture of
  :data:`SANDBOX_FIXTURES` get it), so ``-m "not sandbox"`` selects the tests that need no
  bubblewrap; an unmarked test that starts one fails with a message.
- leftovers: when the session ends, no sandbox process or cgroup of this session, nor a mount
  below its temp folder, may remain (:mod:`session_leftovers`); the check fails the run (exit
  status 1) when one does.
"""

from __future__ import annotations

import inspect
import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from clawrig.llm.client import forget_provider_limits, forget_upstreams
from clawrig.sandbox.client import SupervisedSandbox
from clawrig.testing.scripted_server import ScriptedServer

# Environments the tests build live in a cache of their own (kept between sessions), so what a
# developer built (e.g. wildclaw, which --env auto then picks) does not change what tests see.
if "CLAWRIG_ENV_CACHE_DIR" not in os.environ:
    from clawrig.sandbox.pyenv import cache_root

    os.environ["CLAWRIG_ENV_CACHE_DIR"] = str(cache_root() / "test-environments")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import session_leftovers  # noqa: E402  (tests/session_leftovers.py, importable by its test)

SANDBOX_FIXTURES = {"sandbox", "make_sandbox", "gw_sandbox"}
"""Fixtures (in tests/*/conftest.py) that start a sandbox: a test using one is marked."""


TESTS = Path(__file__).resolve().parent

SHARED_ON_ONE_WORKER = {
    "conftest.py::demo_oracle_job",  # `clawrig run suites/demo --agent oracle` (about 35 s)
    "ray/conftest.py::ray_cluster",  # two Ray nodes (about 25 s to start, then idle CPU)
    "view/conftest.py::jobs",  # three demo jobs for the viewer
    "view/conftest.py::browser",  # the viewer tests' one Chromium (closed after the last)
}
"""Fixtures (``<file under tests/>::<name>``) made once per worker process and kept (session
scope, or a cache of their folder): their tests run on one xdist worker, so each is made once
per run rather than once per worker."""


LOCAL_SANDBOX_GROUP = "local-sandbox"
"""The tests that start local sandboxes (a ``local`` case, or ``local`` in the test's name or
module): one worker. A local sandbox of root's links the machine's one /tmp_workspace, which
the local backend's lock keeps to one sandbox at a time, but tests that check the lock use a
lock of their own, and tests that run one as another user change who may link it: at once,
one test's sandbox took another's workspace (-n 3)."""


def _local_sandbox(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    params = [str(v) for v in callspec.params.values()] if callspec else []
    name = item.name.split("[")[0]
    return (
        any(v == "local" or v.startswith("local-") or v.endswith(":local") for v in params)
        or any(word in name for word in ("local_sandbox", "local_graders", "local_start"))
        or item.path.name == "test_local.py"
    )


def _shared_group(item: pytest.Item) -> set[str]:
    """The groups of ``item``: the name of each fixture of :data:`SHARED_ON_ONE_WORKER` it uses
    (directly or through another fixture), its module's path (below tests/) when it uses a
    module-scoped fixture defined under tests/, and :data:`LOCAL_SANDBOX_GROUP`."""
    info = getattr(item, "_fixtureinfo", None)
    groups: set[str] = {LOCAL_SANDBOX_GROUP} if _local_sandbox(item) else set()
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if not defs:
            continue
        fixturedef = defs[-1]  # the definition this item gets (the closest one)
        try:
            where = Path(inspect.getsourcefile(fixturedef.func) or "").resolve()
        except TypeError:  # a fixture of a C extension or a builtin: not ours
            continue
        if not where.is_relative_to(TESTS):
            continue
        if f"{where.relative_to(TESTS).as_posix()}::{name}" in SHARED_ON_ONE_WORKER:
            groups.add(name)
        elif fixturedef.scope == "module":
            groups.add(item.path.resolve().relative_to(TESTS).as_posix())
    return groups


BUILD_TIMEOUT_S = 1800
"""The time limit (s) of a test using ``base_rootfs`` or ``docker_image`` while the ``base``
environment or its Docker image is not built yet: the first such test builds it in its set-up
(mmdebstrap, minutes on 2 busy cores), which the 300 s of pyproject.toml would cut."""


def _base_unbuilt(docker: bool) -> bool:
    """True when the ``base`` environment's root file system (or, with ``docker``, its image in
    an engine that answers) is not in the tests' cache yet."""
    from clawrig.env.build import image_exists, image_name, rootfs_path
    from clawrig.env.spec import load_env_spec
    from clawrig.env.store import docker_available

    spec = load_env_spec("base")
    if rootfs_path(spec) is None:
        return True
    return docker and docker_available() and not image_exists(image_name(spec))


def _builds_base(item: pytest.Item) -> str | None:
    """``"docker"`` when ``item`` may ask for ``docker_image`` (it uses the fixture, or is a
    case on the docker backend, whose fixture asks for it), ``"rootfs"`` when it uses
    ``base_rootfs``, else None."""
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    if "docker_image" in names or (callspec and "docker" in callspec.params.values()):
        return "docker"
    return "rootfs" if "base_rootfs" in names else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks (its own hook)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    builds = {item: kind for item in items if (kind := _builds_base(item))}
    if builds and _base_unbuilt(docker="docker" in builds.values()):
        for item in builds:  # ahead of a test's own limit: the build comes first
            item.add_marker(pytest.mark.timeout(BUILD_TIMEOUT_S), append=False)
    # tests that share a group run on one worker; a test in two groups joins them (union-find)
    parent: dict[str, str] = {}

    def root(group: str) -> str:
        while parent.setdefault(group, group) != group:
            group = parent[group]
        return group

    of_item: dict[pytest.Item, set[str]] = {}
    for item in items:
        if SANDBOX_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.sandbox)
        groups = of_item[item] = _shared_group(item)
        for a, b in itertools.pairwise(sorted(groups)):
            parent[root(b)] = root(a)
    for item, groups in of_item.items():
        if groups:
            item.add_marker(pytest.mark.xdist_group(root(min(groups))))
            if getattr(config.option, "loadgroup", False):  # an xdist worker, --dist loadgroup
                _suffix_group(item, root(min(groups)))


def _suffix_group(item: pytest.Item, group: str) -> None:
    """Append ``@group`` to ``item``'s node id, where ``--dist loadgroup`` reads its group.

    xdist's own hook appends it by setting ``item._nodeid``, which pytest 9 no longer reads
    (the id lives in ``item._id``, a ``NodeId``): with xdist 3.8 on pytest 9 no test had a group
    and every test was scheduled alone. On pytest < 9 xdist's hook does it (no ``_id`` here)."""
    node_id = getattr(item, "_id", None)
    if node_id is not None and hasattr(type(node_id), "parse"):
        item._id = type(node_id).parse(f"{item.nodeid}@{group}")


@pytest.fixture(autouse=True)
def _fresh_model_server_records() -> None:
    """Each test starts with no record of which model servers answered, refused or could not
    be reached (process-wide, keyed by base URL): a test's scripted server that got an earlier
    test's port was taken for one that had answered, and a 401 ended its trial as a refusal
    after answers instead of stopping (test_unauthorised_model_stops_with_one_line, CI at
    3d39779). Nor of any provider's requests in flight (process-wide, keyed by provider name):
    a test's ``max_concurrency`` for a provider is not the next one's."""
    forget_upstreams()
    forget_provider_limits()


@pytest.fixture(autouse=True)
def _sandbox_marker_is_honest(request: pytest.FixtureRequest) -> Iterator[None]:
    before = SupervisedSandbox.starts
    yield
    started = SupervisedSandbox.starts - before
    if started and request.node.get_closest_marker("sandbox") is None:
        pytest.fail(
            f"{request.node.nodeid} started {started} sandbox(es) but is not marked "
            "@pytest.mark.sandbox (add it, or pytestmark = pytest.mark.sandbox to the module)",
            pytrace=False,
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The leftover-process check, once per session after every test and fixture ended."""
    if getattr(session.config, "workerinput", None) is not None:
        return  # an xdist worker: the controller's own session checks
    factory = getattr(session.config, "_tmp_path_factory", None)
    temp = getattr(factory, "_basetemp", None)  # None when no test asked for a temp folder
    problems = session_leftovers.wait_for_no_leftovers(temp=temp)
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = "sandbox leftovers after the tests: " + "; ".join(problems)
        if reporter is not None:
            reporter.write_line(text, red=True)
        else:  # pragma: no cover
            print(text, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def scripted_server() -> Iterator[Callable[..., ScriptedServer]]:
    """Factory: ``scripted_server(script=(), *, responder=None, models=...)`` -> started server."""
    servers: list[ScriptedServer] = []

    def make(*args: Any, **kwargs: Any) -> ScriptedServer:
        server = ScriptedServer(*args, **kwargs).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def _skip_unless_root_tools() -> None:
    import os
    import shutil

    if os.geteuid() != 0:
        pytest.skip("building an environment needs root (mmdebstrap --mode=root)")
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap is not installed (make test installs it when root)")


@pytest.fixture(scope="session")
def base_rootfs() -> Any:
    """The shipped ``base`` environment's root file system (python3, pip, apt, procps), built
    once per machine into the cache (about two minutes the first time) and shared by tests."""
    _skip_unless_root_tools()
    from clawrig.env.build import ensure_rootfs
    from clawrig.env.spec import load_env_spec

    return ensure_rootfs(load_env_spec("base"))


@pytest.fixture(scope="session")
def docker_image(base_rootfs: Any) -> str:
    """The ``base`` environment imported into the local Docker engine (``docker import``, no
    registry), shared by every Docker test; skips with the reason when no engine answers."""
    from clawrig.env.build import ensure_image
    from clawrig.env.spec import load_env_spec
    from clawrig.env.store import docker_available

    if not docker_available():
        pytest.skip("no Docker engine answers here (make test starts dockerd when root)")
    return ensure_image(load_env_spec("base"))


DEMO = Path(__file__).resolve().parents[1] / "suites" / "demo"


@pytest.fixture(scope="session")
def demo_oracle_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``clawrig run suites/demo --agent oracle -o JOB`` run once per session, as a user runs
    it (the CLI in a subprocess); returns the job folder. Read it, do not change it."""
    import subprocess

    out = tmp_path_factory.mktemp("demo-oracle") / "job"
    clawrig = str(Path(sys.executable).with_name("clawrig"))
    r = subprocess.run(
        [clawrig, "run", str(DEMO), "--agent", "oracle", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out


@pytest.fixture
def provider() -> Iterator[Callable[[Callable[[BaseHTTPRequestHandler], None]], str]]:
    """``provider(handle)`` -> the base URL of a stdlib HTTP server on 127.0.0.1 whose POSTs
    ``handle`` answers by hand."""
    servers: list[ThreadingHTTPServer] = []

    def start(handle: Callable[[BaseHTTPRequestHandler], None]) -> str:
        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    handle(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: object) -> None:
                return None

        srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/v1"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()
