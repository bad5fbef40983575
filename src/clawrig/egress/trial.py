"""A trial's way out of its sandbox: the egress proxy (setup policy, then the agent's) and the
model keys the agent's own programs get, which lead to the model gateway.

Keys (issue 13 item 5). Upstream WildClawBench gives the task's ``## Env`` variables to the agent
too, and agents or their skill scripts call LLMs with them (``OPENROUTER_API_KEY``,
``OPENROUTER_BASE_URL``, ``JUDGE_MODEL``). Here each model setting named in ``## Env`` gets a
value that leads to the gateway through the sandbox's forwarder: an ``*_API_KEY`` the trial's
lease token (a per-trial placeholder, revoked when the trial ends), an ``*_BASE_URL`` /
``*_API_BASE`` ``http://127.0.0.1:18199/v1``, a ``*_MODEL`` / ``*_MODEL_ID`` the model id the
gateway serves. Those calls are then counted in the trial's usage and cost, held to its budget,
recorded in model_calls.jsonl and replayable. No real key enters the sandbox; any other secret-
looking name (``*_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*PASSWORD*``) gets a placeholder, and the
rest take the host's value only when the user lets that name through by listing it in
``CLAWRIG_PASS_ENV`` (comma-separated): a task file is untrusted input, and ``## Env`` naming
``DATABASE_URL`` or ``GITHUB_PAT`` must not copy the host's values into a sandbox (issue 14).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from clawrig.egress.policy import NetworkPolicy, registry_env
from clawrig.egress.proxy import LOG_FILE, EgressProxy, proxy_env, start_egress_forwarder
from clawrig.sandbox.base import Bind, Forward, Sandbox

if TYPE_CHECKING:
    from clawrig.env.system import SetupNetwork
    from clawrig.llm.gateway import Gateway, GatewayLease

PLACEHOLDER_KEY = "clawrig-placeholder-key"
"""The value of a secret-looking variable that is not a model key (no real secret enters)."""
MODEL_PROVIDERS = (
    "OPENROUTER",
    "OPENAI",
    "JUDGE",
    "JUDGE_CUSTOM",
    "OPENCLAW_CUSTOM",
    "ANTHROPIC",
    "DEEPSEEK",
    "DASHSCOPE",
    "MOONSHOT",
    "GEMINI",
    "LLM",
    "MY_PROXY",
)
"""Prefixes of variables that configure an OpenAI-compatible model client."""
_MODEL_VAR = re.compile(
    r"^(?P<prefix>"
    + "|".join(MODEL_PROVIDERS)
    + r")_(?P<kind>API_KEY|BASE_URL|API_BASE|MODEL_ID|MODEL)$"
)
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD)", re.IGNORECASE)
PASS_ENV_VAR = "CLAWRIG_PASS_ENV"
"""The host environment variable listing (comma-separated) the names whose host values a task's
``## Env`` may pass into a sandbox (agent or grader). Nothing else from the host is passed."""


def stays_on_host(name: str) -> bool:
    """True for a variable that never leaves the harness's host (not even to a Ray node): a
    model setting (``<PROVIDER>_API_KEY``, ``_BASE_URL``, ``_MODEL`` ...) or a secret-looking
    name."""
    return bool(_MODEL_VAR.match(name) or _SECRET.search(name))


def host_value(name: str) -> str | None:
    """The host's value of ``name`` when the user lets it through (:data:`PASS_ENV_VAR`) and it
    is not secret-looking; None otherwise."""
    allowed = {n.strip() for n in os.environ.get(PASS_ENV_VAR, "").split(",") if n.strip()}
    if name not in allowed or _SECRET.search(name):
        return None
    return os.environ.get(name)


USER_INSTALL_ENV = {
    "PIP_BREAK_SYSTEM_PACKAGES": "1",
    "npm_config_prefix": "/root/.local",
    "PATH": "/root/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
}
"""Without a writable system (a read-only host /usr), where ``pip install`` and
``npm install -g`` put packages: pip falls back to its user scheme (``/root/.local``, which the
agent's ``python3`` imports from) once PEP 668's marker no longer stops it, and npm's global
prefix moves to ``/root/.local`` (its ``bin/`` first on PATH). ``apt-get install`` still needs a
writable system."""


def user_install_env() -> dict[str, str]:
    """:data:`USER_INSTALL_ENV`, keeping npm's global configuration file where this machine's
    npm has it (moving the prefix would move it too, and with it settings such as ``cafile``)."""
    env = dict(USER_INSTALL_ENV)
    for path in ("/usr/etc/npmrc", "/usr/local/etc/npmrc"):
        if Path(path).is_file():
            env["npm_config_globalconfig"] = path
            break
    return env


_SIBLING_BASE = {"OPENROUTER_API_KEY": "OPENROUTER_BASE_URL", "OPENAI_API_KEY": "OPENAI_BASE_URL"}


def model_setting(name: str) -> str | None:
    """``key``, ``base_url`` or ``model`` when ``name`` configures a model client
    (``OPENROUTER_API_KEY``, ``OPENAI_BASE_URL``, ``JUDGE_MODEL``, ``DEFAULT_MODEL`` ...), else
    None."""
    if name == "DEFAULT_MODEL":
        return "model"
    m = _MODEL_VAR.match(name)
    if m is None:
        return None
    kind = m["kind"]
    return (
        "key" if kind == "API_KEY" else "base_url" if kind in ("BASE_URL", "API_BASE") else "model"
    )


def agent_env(
    names: list[str], *, token: str | None, base_url: str, model_id: str
) -> dict[str, str]:
    """The values of a task's ``## Env`` ``names`` for the agent (rules in the module docs).

    ``token``: the trial's gateway token (None: no gateway lease, model keys get the
    placeholder and no base URL); ``base_url``: the gateway as the sandbox reaches it;
    ``model_id``: the model the gateway serves for these calls.
    """
    env: dict[str, str] = {}
    for name in names:
        kind = model_setting(name)
        if kind == "key":
            env[name] = token or PLACEHOLDER_KEY
            sibling = _SIBLING_BASE.get(name)
            if token and sibling:
                env.setdefault(sibling, base_url)
        elif kind == "base_url":
            if token:
                env[name] = base_url
        elif kind == "model":
            env[name] = model_id
        elif _SECRET.search(name):
            env[name] = PLACEHOLDER_KEY
        elif (value := host_value(name)) is not None:
            env[name] = value
    return env


@dataclass
class TrialNetwork:
    """One trial's egress proxy and agent-side model keys (see the module docs).

    ``proxy``: None on the ``local`` backend (host network, no isolation); ``env`` and
    ``binds``: add to the sandbox's config; after the sandbox starts, :meth:`attach`; after
    skills and warmup, :meth:`agent_phase`; at the end, :meth:`close`.
    """

    setup_policy: NetworkPolicy
    agent_policy: NetworkPolicy
    proxy: EgressProxy | None = None
    gateway: Gateway | None = None
    env: dict[str, str] = field(default_factory=dict)
    binds: list[Bind] = field(default_factory=list)
    _handles: list[Forward] = field(default_factory=list)

    @classmethod
    async def open(
        cls,
        *,
        folder: Path,
        sandbox_kind: str,
        setup: str = "registries",
        agent: str = "none",
        env_names: list[str] | None = None,
        gateway: Gateway | None = None,
        lease: GatewayLease | None = None,
        agent_forwards: bool = False,
    ) -> TrialNetwork:
        """Start the proxy (logging to ``folder/egress.jsonl``) and work out the agent's env.

        ``setup`` / ``agent``: the policies as ``--setup-network`` / ``--network`` spell them;
        ``env_names``: the task's ``## Env``; ``gateway`` + ``lease``: the trial's model lease
        whose token the agent's programs use; ``agent_forwards``: the agent starts the gateway
        forwarder itself (an agent that runs its own model client in the sandbox, e.g.
        OpenClaw), so the agent's programs use that one while the agent runs. Raises UserError
        for a bad policy.
        """
        from clawrig.llm.gateway import FORWARDER_PORT, GatewayLease

        net = cls(
            NetworkPolicy.parse(setup, option="--setup-network"),
            NetworkPolicy.parse(agent, option="--network"),
        )
        if sandbox_kind != "local":
            net.proxy = await EgressProxy(folder / LOG_FILE, net.setup_policy).start()
            net.binds += net.proxy.sandbox_binds()
            net.env |= proxy_env() | registry_env()
        else:  # no proxy: this machine's network, and its package indexes
            net.env |= registry_env(on_host=True)
        if env_names:
            keyed = lease is not None and gateway is not None
            model_id = ""
            if lease is not None and lease.endpoint is not None:
                model_id = lease.endpoint.model_id
            net.env |= agent_env(
                env_names,
                token=lease.token if keyed else None,  # type: ignore[union-attr]
                base_url=GatewayLease.sandbox_base_url(FORWARDER_PORT),
                model_id=model_id,
            )
            if keyed and any(model_setting(n) == "key" for n in env_names) and not agent_forwards:
                net.gateway = gateway  # reached through the trial's door (the runner binds it)
        return net

    async def attach(self, sandbox: Sandbox) -> None:
        """Start the in-sandbox forwarders (egress; the gateway's when the agent has keys)."""
        if self.proxy is not None and sandbox.backend != "local":
            self._handles.append(await start_egress_forwarder(sandbox, self.proxy))
        if self.gateway is not None:
            from clawrig.llm.gateway import start_forwarder

            self._handles.append((await start_forwarder(sandbox, self.gateway)).handle)

    def grading_env(self) -> dict[str, str]:
        """The clean room's environment: the egress proxy's settings only (none of the agent's
        model keys)."""
        return proxy_env() | registry_env() if self.proxy is not None else {}

    async def attach_grading(self, sandbox: Sandbox) -> None:
        """Start the egress forwarder in the clean room (not the agent's gateway forwarder)."""
        if self.proxy is not None and sandbox.backend != "local":
            self._handles.append(await start_egress_forwarder(sandbox, self.proxy))

    def sandbox_env(self, *, writable_system: bool) -> dict[str, str]:
        """The sandbox's environment: :attr:`env`, plus :func:`user_install_env` when its
        system cannot be written (the host's read-only /usr)."""
        if writable_system or self.proxy is None:
            return dict(self.env)
        return self.env | user_install_env()

    def setup_network(self) -> SetupNetwork | None:
        """The network of a sandbox that makes a warm snapshot for this trial (setup phase):
        this proxy (its setup policy, logged here), None without a proxy."""
        from clawrig.env.system import SetupNetwork

        proxy = self.proxy
        if proxy is None:
            return None

        async def attach(sandbox: Sandbox) -> None:
            self._handles.append(await start_egress_forwarder(sandbox, proxy))

        return SetupNetwork(
            env=proxy_env() | registry_env(), binds=proxy.sandbox_binds(), attach=attach
        )

    def agent_phase(self) -> None:
        """Setup is over: the agent's policy from now on."""
        if self.proxy is not None:
            self.proxy.policy = self.agent_policy
            self.proxy.phase = "agent"

    async def close(self) -> None:
        for handle in self._handles:
            with contextlib.suppress(Exception):
                await handle.stop()
        if self.proxy is not None:
            await self.proxy.stop()
