"""The model gateway: one OpenAI-compatible endpoint that every model call of a job goes through.

Whoever calls a model (clawrig's native agent, a real OpenClaw inside a sandbox, a grader
asking a judge), the request reaches this gateway, which

- identifies the *trial* from a per-trial token (``Authorization: Bearer <token>``, or the URL
  path ``/t/<token>/v1/...``): the token is all a sandbox ever sees, never a provider key;
- forwards the request to that trial's upstream (:class:`clawrig.llm.providers.ModelEndpoint`:
  base URL and the real key) with the body unchanged except ``model`` (the endpoint's model id),
  the endpoint's ``extra_body`` fields, and ``stream_options.include_usage`` on streams (so
  usage is always counted; the usage-only chunk is passed on only when the client asked);
- retries the upstream on 408/409/429/5xx and dropped connections before any byte reaches the
  client (exponential backoff with jitter, ``Retry-After`` honoured; :class:`RetryPolicy`);
- keeps the upstream provider's ``max_concurrency``: each attempt holds a place of the
  provider's requests in flight, one count per harness process with the harness's own requests
  (:func:`clawrig.llm.client.provider_semaphore`), the wait for it a harness wait of the
  lease's trial (its ``clock``); a request of the in-process agent holds its place already;
- counts tokens and cost per trial (:func:`clawrig.llm.client.usage_from_openai`: OpenClaw's
  token classes, the provider's ``usage.cost`` when sent, else the endpoint's prices);
- enforces the job's budget (USD) and per-trial caps (USD, tokens, requests): a request past a
  cap is refused with HTTP 402 and a one-line message;
- records every request and response, one JSON line per request in the trial's record file
  (:data:`RECORD_FILE`, shape in :meth:`Gateway._record`), or in the judge_chat.jsonl shape for
  judge proxies;
- answers from a recorded :class:`ResponseCache` (replay: the same request gets the recorded
  response; in ``only`` mode a request not in the cache is refused with HTTP 404 and a clear
  message, so a diverging replay stops instead of calling a model).

Serving: FastAPI + uvicorn in a background thread, on a unix socket that no sandbox sees (each
sandbox gets its own :class:`GatewayDoor`, a capped socket piped to it, bound read-only; inside,
the sandbox's supervisor forwards ``127.0.0.1:FORWARDER_PORT`` to it) and on
``127.0.0.1:<free port>`` for host-side clients (:meth:`GatewayLease.chat_model`). Routes:
``POST /v1/chat/completions`` (streaming SSE and plain JSON, tool calls, usage),
``GET /v1/models``, ``GET /healthz``; the same under ``/t/<token>``.

Usage::

    with Gateway(budget_usd=5.0) as gw:
        lease = gw.open_trial(endpoint, trial_id="t1", record_path=folder / RECORD_FILE)
        model = lease.chat_model()          # an OpenAIChatModel that goes through the gateway
        ...                                 # or, in a sandbox bound with a door's binds
        door = await GatewayDoor(gw).start()  # door.sandbox_binds() into the sandbox
        fwd = await start_forwarder(sandbox, gw)   # http://127.0.0.1:18199/v1, key lease.token
        gw.close_trial(lease); lease.usage  # per-trial Usage (tokens, USD, requests, retries)

Modules: :mod:`.server` (the Gateway and its HTTP app), :mod:`.lease` (a trial's lease and
chat model), :mod:`.replay` (the request key, the record reader, the replay cache), :mod:`.wire`
(completions, SSE), :mod:`.forwarder` (the in-sandbox forwarder), :mod:`.door` (a
sandbox's capped socket to the gateway), :mod:`.tokens`
(token capture for RL), :mod:`.tally` (a job's spend shared by its processes).
Every name below is importable from ``clawrig.llm.gateway``.
"""

from __future__ import annotations

from clawrig.llm.gateway.door import GatewayDoor
from clawrig.llm.gateway.forwarder import (
    FORWARDER_PORT,
    SANDBOX_GATEWAY_DIR,
    SOCKET_NAME,
    Forwarder,
    start_forwarder,
)
from clawrig.llm.gateway.lease import (
    CAP_REFUSALS,
    CAP_STOPS,
    JOB_BUDGET_REFUSAL,
    GatewayChatModel,
    GatewayLease,
    GatewayRefusal,
    placeholder_endpoint,
)
from clawrig.llm.gateway.replay import (
    JUDGE_KEY_MODEL,
    JUDGE_LOGS,
    KEY_EXCLUDED,
    RECORD_FILE,
    CacheMode,
    ResponseCache,
    read_records,
    record_key,
    recorded_agent_models,
    recorded_models,
    request_key,
)
from clawrig.llm.gateway.server import (
    Gateway,
    current_gateway,
    replay_gateway,
    replay_model,
    use_gateway,
)
from clawrig.llm.gateway.tally import SpendTally
from clawrig.llm.gateway.tokens import read_token_capture
from clawrig.llm.gateway.wire import completion_from_chunks, sse_from_completion

__all__ = [
    "SpendTally",
    "SOCKET_NAME",
    "CAP_REFUSALS",
    "CAP_STOPS",
    "JOB_BUDGET_REFUSAL",
    "KEY_EXCLUDED",
    "FORWARDER_PORT",
    "JUDGE_KEY_MODEL",
    "RECORD_FILE",
    "SANDBOX_GATEWAY_DIR",
    "CacheMode",
    "Forwarder",
    "Gateway",
    "GatewayDoor",
    "GatewayChatModel",
    "GatewayLease",
    "GatewayRefusal",
    "ResponseCache",
    "completion_from_chunks",
    "current_gateway",
    "placeholder_endpoint",
    "JUDGE_LOGS",
    "read_records",
    "record_key",
    "read_token_capture",
    "recorded_agent_models",
    "recorded_models",
    "replay_gateway",
    "replay_model",
    "request_key",
    "sse_from_completion",
    "start_forwarder",
    "use_gateway",
]
