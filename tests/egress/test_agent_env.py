"""Which value each `## Env` name gets inside the agent's sandbox (no real key ever)."""

from __future__ import annotations

from clawrig.egress.trial import PASS_ENV_VAR, PLACEHOLDER_KEY, agent_env, model_setting

BASE = "http://127.0.0.1:18199/v1"


def test_model_settings_lead_to_the_gateway(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    monkeypatch.setenv("BRAVE_API_KEY", "brave-real")
    monkeypatch.setenv("REGION", "eu-west")
    names = ["OPENAI_API_KEY", "JUDGE_MODEL", "BRAVE_API_KEY", "GITHUB_TOKEN", "REGION", "UNSET"]
    env = agent_env(names, token="clawrig-tok", base_url=BASE, model_id="m-1")
    assert env == {
        "OPENAI_API_KEY": "clawrig-tok",
        "OPENAI_BASE_URL": BASE,  # the key alone would send the client to api.openai.com
        "JUDGE_MODEL": "m-1",
        "BRAVE_API_KEY": PLACEHOLDER_KEY,  # not a model key: a placeholder, never the real one
        "GITHUB_TOKEN": PLACEHOLDER_KEY,
    }
    # without a gateway lease: placeholders, and no base URL that leads nowhere
    env = agent_env(
        ["OPENROUTER_API_KEY", "OPENROUTER_BASE_URL"], token=None, base_url=BASE, model_id=""
    )
    assert env == {"OPENROUTER_API_KEY": PLACEHOLDER_KEY}


def test_model_setting_names():
    assert model_setting("OPENROUTER_API_KEY") == "key"
    assert model_setting("OPENROUTER_BASE_URL") == "base_url"
    assert model_setting("OPENAI_API_BASE") == "base_url"
    assert model_setting("JUDGE_CUSTOM_MODEL_ID") == "model"
    assert model_setting("DEFAULT_MODEL") == "model"
    assert model_setting("BRAVE_API_KEY") is None
    assert model_setting("OPENROUTER_KEY") is None


def test_host_values_only_for_names_the_user_lets_through(monkeypatch):
    # a task file is untrusted: its ## Env must not copy host values into a sandbox
    monkeypatch.setenv("DATABASE_URL", "postgres://admin:hunter2@db")
    monkeypatch.setenv("GITHUB_PAT", "ghp_real")
    monkeypatch.setenv("REGION", "eu-west")
    names = ["DATABASE_URL", "GITHUB_PAT", "REGION"]
    assert agent_env(names, token="t", base_url=BASE, model_id="m") == {}
    monkeypatch.setenv(PASS_ENV_VAR, "REGION")
    assert agent_env(names, token="t", base_url=BASE, model_id="m") == {"REGION": "eu-west"}
    # a secret-looking name never takes the host's value, even when listed
    monkeypatch.setenv("VAULT_SECRET", "s3cr3t")
    monkeypatch.setenv(PASS_ENV_VAR, "REGION,VAULT_SECRET")
    env = agent_env(["VAULT_SECRET"], token="t", base_url=BASE, model_id="m")
    assert env == {"VAULT_SECRET": PLACEHOLDER_KEY}
