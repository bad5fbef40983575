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

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from clawrig.testing.scripted_server import ScriptedServer


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
