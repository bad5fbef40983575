"""The judge proxy: graders that call an LLM judge reach it through the model gateway, for the
grading phase only, and never see a key.

Upstream graders (WildClawBench and four-folder evaluators) that ask a judge read
``OPENROUTER_API_KEY``, ``OPENROUTER_BASE_URL`` and ``JUDGE_MODEL`` and call an
OpenAI-compatible chat-completions API (usually with the ``openai`` client). During grading,
:func:`judge_proxy` runs the gateway forwarder on the sandbox's loopback and gives the grader:

- ``OPENROUTER_BASE_URL`` = ``http://127.0.0.1:18199/v1`` (the forwarder -> the gateway's unix
  socket, bound read-only into the sandbox);
- ``OPENROUTER_API_KEY`` = a fresh per-grading token (a placeholder: the gateway maps it to the
  judge endpoint and its real key, which stay in the harness; it is revoked when grading ends);
- ``JUDGE_MODEL`` = the judge endpoint's model id (``clawrig-judge`` when none is configured).

Every judge request and reply is appended to the trial's ``judge_chat.jsonl`` (the record shape
of :mod:`clawrig.grading.judge`, plus the whole request and completion; see
:meth:`clawrig.llm.gateway.Gateway._judge_record`). A response cache
(:class:`clawrig.llm.gateway.ResponseCache`, e.g. ``ResponseCache.from_file(--judge-cache)``)
keyed by the request (messages, temperature and every other field but the model and stream
options) answers repeats, so re-grading is reproducible and free; new replies are appended to
the cache file. Without a judge endpoint, a request the cache does not hold gets HTTP 503 with
a one-line reason, so the grader fails and the trial gets a grading error, never a silent 0.

The agent cannot reach the proxy: it starts after every agent process is killed
(``sandbox.kill_all()``), with a token that did not exist before, and stops (token revoked,
forwarder killed) when grading ends.

Usage (runner)::

    async with judge_proxy(sandbox, gateway, endpoint=judge_endpoint, trial_id=name,
                           log_path=TrialPaths(folder).judge_chat, cache=judge_cache) as proxy:
        score = await run_grader(sandbox, task, env=grader_env(task) | proxy.env)
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from clawrig.llm.gateway import (
    FORWARDER_PORT,
    JUDGE_KEY_MODEL,
    Forwarder,
    Gateway,
    GatewayLease,
    ResponseCache,
    start_forwarder,
)
from clawrig.llm.providers import ModelEndpoint
from clawrig.sandbox.base import Sandbox
from clawrig.spec.task import Task
from clawrig.spec.trial import Usage
from clawrig.waits import WaitClock

__all__ = [
    "NO_JUDGE_MODEL",
    "JudgeProxy",
    "grader_may_call_judge",
    "judge_proxy",
    "upstream_endpoint",
]

NO_JUDGE_MODEL = "clawrig-judge"
"""``JUDGE_MODEL`` given to graders when no judge endpoint is configured (cache only)."""


@dataclass
class JudgeProxy:
    """A running judge proxy: ``env`` for the grader, the gateway ``lease`` (its ``usage``
    counts the judge's tokens and USD), the in-sandbox ``forwarder``."""

    env: dict[str, str]
    lease: GatewayLease
    forwarder: Forwarder

    @property
    def usage(self) -> Usage:
        return self.lease.usage


def upstream_endpoint(model: object) -> ModelEndpoint | None:
    """The provider endpoint behind a chat model: an :class:`OpenAIChatModel`'s endpoint, or
    for a model that already goes through a gateway lease, the lease's upstream; else None."""
    lease = getattr(model, "lease", None)
    if isinstance(lease, GatewayLease):
        return lease.endpoint
    endpoint = getattr(model, "endpoint", None)
    return endpoint if isinstance(endpoint, ModelEndpoint) else None


_REACHES_JUDGE = re.compile(
    r"environ|getenv|subprocess|multiprocessing|\bos\.(system|popen|exec|spawn|posix_spawn)"
    r"|\bpty\b|litellm|openrouter|judge",
    re.IGNORECASE,
)
"""What a grader's source must mention to find the judge proxy: it reads its environment
(``OPENROUTER_BASE_URL`` and the token are only there), runs another program that inherits it,
or uses a client library that reads those variables by itself."""


def grader_may_call_judge(task: Task) -> bool:
    """True when ``task``'s programmatic grader can reach a judge: the task reader found it
    calling one (``metadata["grader_uses_judge"]``), its ``## Env`` names a model setting
    (``OPENROUTER_API_KEY``, ``JUDGE_MODEL`` ...; :func:`clawrig.egress.trial.model_setting`),
    or its source mentions one of :data:`_REACHES_JUDGE`'s words. A grader that does none of
    these can learn neither the proxy's address nor its token, so grading it needs no proxy
    (no in-sandbox forwarder started and stopped per trial)."""
    from clawrig.egress.trial import model_setting

    if task.metadata.get("grader_uses_judge"):
        return True
    if any(model_setting(name) is not None for name in task.env):
        return True
    return bool(task.grader.source and _REACHES_JUDGE.search(task.grader.source))


@asynccontextmanager
async def judge_proxy(
    sandbox: Sandbox,
    gateway: Gateway,
    *,
    endpoint: ModelEndpoint | None,
    trial_id: str,
    log_path: Path | None,
    cache: ResponseCache | Path | None = None,
    task_id: str | None = None,
    run_index: int = 0,
    port: int = FORWARDER_PORT,
    clock: WaitClock | None = None,
) -> AsyncIterator[JudgeProxy]:
    """Run the judge proxy in ``sandbox`` for the body of the ``async with``.

    ``sandbox`` must have been created with ``gateway.sandbox_binds()``; ``endpoint``: the
    judge (None: answer from ``cache`` only); ``log_path``: the trial's judge_chat.jsonl
    (appended to); ``cache``: a :class:`ResponseCache` or the path of a cache file (read, and
    appended to with new replies; None: the gateway's cache and mode, e.g. a replay
    gateway's); ``task_id``/``run_index``: the cache scope; ``port``: the forwarder's port
    inside the sandbox; ``clock``: the trial's :class:`clawrig.waits.WaitClock`, charged with the
    time the grader's requests wait for a place of the judge's provider's ``max_concurrency``
    (a harness wait). Raises :class:`clawrig.errors.SandboxError` when the forwarder cannot
    start.
    """
    if isinstance(cache, Path | str):
        cache = ResponseCache.from_file(Path(cache))
    lease = gateway.open_trial(
        endpoint,
        trial_id=trial_id,
        role="judge",
        task_id=task_id,
        run_index=run_index,
        record_path=log_path,
        record_format="judge",
        cache=cache,  # None: the gateway's own (a replay gateway's records)
        key_model=JUDGE_KEY_MODEL,
        clock=clock,
    )
    try:
        forwarder = await start_forwarder(sandbox, gateway, port=port)
        try:
            env = {
                "OPENROUTER_API_KEY": lease.token,
                "OPENROUTER_BASE_URL": forwarder.base_url,
                "JUDGE_MODEL": endpoint.model_id if endpoint is not None else NO_JUDGE_MODEL,
            }
            yield JudgeProxy(env=env, lease=lease, forwarder=forwarder)
        finally:
            await forwarder.stop()
    finally:
        gateway.close_trial(lease)
