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
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from clawrig.testing.scripted_server import ScriptedServer

# Environments the tests build live in a cache of their own (kept between sessions), so what a
# developer built (e.g. wildclaw, which --env auto then picks) does not change what tests see.
if "CLAWRIG_ENV_CACHE_DIR" not in os.environ:
    from clawrig.sandbox.pyenv import cache_root

    os.environ["CLAWRIG_ENV_CACHE_DIR"] = str(cache_root() / "test-environments")


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
