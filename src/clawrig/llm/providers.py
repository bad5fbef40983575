"""Provider settings and model-name resolution: ``provider/model`` -> :class:`ModelEndpoint`.

Settings come from three places (later ones win for the same variable):

1. a providers YAML file (:func:`load_settings`'s ``providers_file``, else
   ``$CLAWRIG_PROVIDERS_FILE``, else ``./providers.yaml`` when it exists);
2. a ``.env`` file (``--env-file FILE``, else ``./.env`` when it exists), read with
   python-dotenv;
3. the process environment (overrides the .env file, as python-dotenv's ``load_dotenv`` does).

Environment variables, exactly as DataClawBench users write them in .env:

==============================  ==========================================================
``DEFAULT_MODEL``               the model under test, e.g. ``openrouter/openai/gpt-4.1``
``OPENROUTER_API_KEY``          key for ``openrouter/...`` models (required for them)
``OPENROUTER_BASE_URL``         default ``https://openrouter.ai/api/v1``
``OPENAI_API_KEY``              key for ``openai/...`` models; ``OPENAI_BASE_URL`` optional
``OPENCLAW_CUSTOM_BASE_URL``    any OpenAI-compatible API (vLLM, SGLang, Ollama ...)
``OPENCLAW_CUSTOM_API_KEY``     its key (optional: local servers often need none)
``OPENCLAW_CUSTOM_MODEL_ID``    the model id sent to that API
``JUDGE_MODEL``                 the judge model name
``JUDGE_CUSTOM_BASE_URL``       a separate endpoint for the judge (+ ``JUDGE_CUSTOM_API_KEY``,
                                ``JUDGE_CUSTOM_MODEL_ID``)
``<NAME>_BASE_URL``             makes ``<name>/<model>`` a provider (e.g. ``SCRIPTED_BASE_URL``
                                for ``scripted/demo``, ``VLLM_BASE_URL`` for ``vllm/...``);
                                ``<NAME>_API_KEY`` optional
==============================  ==========================================================

Prices (US dollars per 1M tokens, see :mod:`clawrig.llm.pricing`):

- ``MODEL_COST_INPUT``, ``MODEL_COST_OUTPUT``, ``MODEL_COST_CACHE_READ``,
  ``MODEL_COST_CACHE_WRITE``: prices of the model under test (any model resolved with
  ``role="agent"``); ``JUDGE_COST_INPUT`` ... ``JUDGE_COST_CACHE_WRITE`` likewise for the judge.
- Per model, whatever the role: ``MODEL_COST_<CLASS>__<MODEL_KEY>`` where ``MODEL_KEY`` is the
  model name upper-cased with every run of non-alphanumerics turned into ``_`` (see
  :func:`model_env_key`), e.g. ``MODEL_COST_INPUT__OPENROUTER_ANTHROPIC_CLAUDE_OPUS_4_5=5``.
  Per-model variables win over the YAML file's prices, which win over the role-wide ones; each
  price class is merged separately.

How a model name is resolved (:func:`resolve_model`):

- ``openrouter/<id>``, ``openai/<id>``: the built-in providers, ``<id>`` sent as the model id.
- ``custom/<id>``: the ``OPENCLAW_CUSTOM_*`` endpoint (``custom`` alone sends
  ``OPENCLAW_CUSTOM_MODEL_ID``). With ``role="judge"`` and ``JUDGE_CUSTOM_BASE_URL`` set,
  ``custom/...`` goes to the ``JUDGE_CUSTOM_*`` endpoint instead (``judge_custom/<id>`` always).
- DataClawBench style: a name whose first part is no known provider but which equals
  ``OPENCLAW_CUSTOM_MODEL_ID`` or ``DEFAULT_MODEL`` (judge: ``JUDGE_CUSTOM_MODEL_ID`` or
  ``JUDGE_MODEL``) while the matching ``*_CUSTOM_BASE_URL`` is set goes to that custom endpoint,
  sending ``*_CUSTOM_MODEL_ID`` (or the name itself) as the model id.
- ``<name>/<id>`` where ``name`` is a provider of the YAML file, or ``<NAME>_BASE_URL`` is set.

Providers YAML (validated with pydantic; errors name the file and the field)::

    providers:
      vllm:                                  # model names vllm/<id>
        base_url: http://127.0.0.1:8000/v1
        api_key_env: VLLM_API_KEY            # optional: env var holding the key
        max_concurrency: 8                   # requests in flight to this provider
        context_window: 131072               # tokens (default for its models)
        max_tokens: 8192                     # completion tokens per request
        server: vllm                         # vllm | sglang: record sampled token ids
        models:
          Qwen/Qwen3-32B:
            prices: {input: 0.1, output: 0.3, cache_read: 0.01, cache_write: 0}
            context_window: 32768
      openrouter:                            # add prices/limits to a built-in provider
        max_concurrency: 16
        models:
          anthropic/claude-opus-4.5:
            prices: {input: 5, output: 25, cache_read: 0.5, cache_write: 6.25}
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from dotenv import dotenv_values
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from clawrig.errors import UserError, first_invalid
from clawrig.llm.pricing import Prices

__all__ = [
    "BUILTIN_PROVIDERS",
    "ModelConfig",
    "ModelEndpoint",
    "ProviderConfig",
    "ProvidersFile",
    "Role",
    "Settings",
    "load_providers_file",
    "load_settings",
    "model_env_key",
    "require_http_url",
    "resolve_model",
]

Role = Literal["agent", "judge"]

PRICE_FIELDS = ("input", "output", "cache_read", "cache_write")


class ModelConfig(BaseModel):
    """Per-model settings in the providers YAML. ``id``: the model id sent to the API (default:
    the YAML key); ``prices`` USD per 1M tokens; limits in tokens."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    prices: Prices = Field(default_factory=Prices)
    context_window: int | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)


class ProviderConfig(BaseModel):
    """One provider. The base URL is ``base_url`` or the value of ``base_url_env``; the key the
    value of ``api_key_env``; ``model_id_env`` names a variable holding the id to send when the
    model name gives none. ``max_concurrency``: requests in flight per provider (None =
    unlimited), whoever sends them: the harness's own and the model gateway's
    (:func:`clawrig.llm.client.provider_semaphore`). ``timeout_s``: seconds per request.
    ``extra_body``: fields added to every request body. ``server``: the inference server
    behind it (``vllm`` / ``sglang``; default: the provider's name when it is one of those),
    for the gateway's token capture."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    base_url_env: str | None = None
    api_key_env: str | None = None
    api_key_required: bool = False
    model_id_env: str | None = None
    max_concurrency: int | None = Field(default=None, gt=0)
    context_window: int | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    timeout_s: float | None = Field(default=None, gt=0)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    server: Literal["vllm", "sglang"] | None = None
    models: dict[str, ModelConfig] = Field(default_factory=dict)


class ProvidersFile(BaseModel):
    """The providers YAML document: ``providers: {name: ProviderConfig}``."""

    model_config = ConfigDict(extra="forbid")

    providers: dict[str, ProviderConfig] = Field(default_factory=dict)


BUILTIN_PROVIDERS: dict[str, ProviderConfig] = {
    "openrouter": ProviderConfig(
        base_url="https://openrouter.ai/api/v1",
        base_url_env="OPENROUTER_BASE_URL",
        api_key_env="OPENROUTER_API_KEY",
        api_key_required=True,
        # OpenRouter reports the request's cost in usage.cost when asked.
        extra_body={"usage": {"include": True}},
    ),
    "openai": ProviderConfig(
        base_url="https://api.openai.com/v1",
        base_url_env="OPENAI_BASE_URL",
        api_key_env="OPENAI_API_KEY",
        api_key_required=True,
    ),
    "custom": ProviderConfig(
        base_url_env="OPENCLAW_CUSTOM_BASE_URL",
        api_key_env="OPENCLAW_CUSTOM_API_KEY",
        model_id_env="OPENCLAW_CUSTOM_MODEL_ID",
    ),
    "judge_custom": ProviderConfig(
        base_url_env="JUDGE_CUSTOM_BASE_URL",
        api_key_env="JUDGE_CUSTOM_API_KEY",
        model_id_env="JUDGE_CUSTOM_MODEL_ID",
    ),
}
"""Providers known without any file (see module docs)."""

NO_KEY = "EMPTY"
"""API key sent to providers that need none (the openai SDK insists on a non-empty key)."""


class ModelEndpoint(BaseModel):
    """Everything needed to call one model.

    ``name``: as the user wrote it; ``provider``: the provider's name; ``model_id``: sent as
    ``model`` in requests; ``api_key`` is a SecretStr (never shown by repr/str);
    ``api_key_env`` the variable it came from (for error hints); ``prices`` USD per 1M tokens;
    ``context_window`` / ``max_tokens`` in tokens; ``max_concurrency`` requests in flight per
    provider; ``timeout_s`` seconds per request; ``server``: ``vllm`` / ``sglang`` when that
    server is behind it (token capture, :mod:`clawrig.llm.gateway.tokens`).
    """

    name: str
    provider: str
    model_id: str
    base_url: str
    api_key: SecretStr | None = None
    api_key_env: str | None = None
    prices: Prices = Field(default_factory=Prices)
    context_window: int | None = None
    max_tokens: int | None = None
    max_concurrency: int | None = None
    timeout_s: float | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    server: Literal["vllm", "sglang"] | None = None


class Settings(BaseModel):
    """Loaded settings: the merged variables (``env``), where the .env came from, and the
    provider table (built-ins merged with the YAML file)."""

    env: dict[str, str] = Field(default_factory=dict, repr=False)  # holds keys: never shown
    env_file: Path | None = None
    env_file_vars: set[str] = Field(default_factory=set, repr=False)
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    providers_file: Path | None = None

    @property
    def default_model(self) -> str | None:
        """``DEFAULT_MODEL`` (the model under test), or None."""
        return self.get("DEFAULT_MODEL")

    @property
    def judge_model(self) -> str | None:
        """``JUDGE_MODEL``, or None."""
        return self.get("JUDGE_MODEL")

    def get(self, var: str) -> str | None:
        """A variable's value, or None when unset or empty."""
        value = self.env.get(var)
        return value if value else None

    def where(self, var: str) -> str:
        """Where ``var`` was set, for error messages: the .env path or 'environment'."""
        if var in self.env_file_vars and self.env_file is not None:
            return str(self.env_file)
        return "environment"

    def hint(self, var: str) -> str:
        """'set VAR in the environment or in <.env>' for a missing variable."""
        where = f" or in {self.env_file}" if self.env_file else " or in .env"
        return f"set {var} in the environment{where}"


def require_http_url(url: str, what: str) -> str:
    """``url`` when it is an ``http://`` or ``https://`` URL with a host, else
    :class:`UserError` ``"<what>: not an http(s) URL: '<url>'"`` (one line; ``what`` names the
    flag, field or variable it came from). The one check every model base URL passes (a
    provider's, an RL trainer's): an unusable URL (no scheme or host, port 0 or past 65535, a
    NUL or control character, which urlsplit keeps or drops and the transport refuses) is
    refused before any sandbox starts rather than failing each request with a transport
    error."""
    from urllib.parse import urlsplit

    from clawrig.tasks.safety import has_control

    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        ok = ok and (parts.port is None or parts.port > 0) and not has_control(url)
    except ValueError:  # e.g. an unclosed [ in the host, a port past 65535 or not a number
        ok = False
    if not ok:
        raise UserError(f"{what}: not an http(s) URL: {url!r}")
    return url


def model_env_key(name: str) -> str:
    """The suffix used in per-model env variables: upper case, non-alphanumeric runs -> ``_``.

    ``openrouter/anthropic/claude-opus-4.5`` -> ``OPENROUTER_ANTHROPIC_CLAUDE_OPUS_4_5``.
    """
    return re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_")


def load_providers_file(path: Path | str) -> ProvidersFile:
    """Read and validate a providers YAML file.

    Raises UserError with one line naming the file and the field (or the YAML line).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{p}: cannot read providers file: {exc.strerror or exc}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{loc}: invalid YAML: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError(f"{p}: (root): expected a mapping with a 'providers' key")
    try:
        return ProvidersFile.model_validate(raw)
    except ValidationError as exc:
        field, what = first_invalid(exc, "(root)")
        raise UserError(f"{p}: {field}: {what}") from None


def _merge_provider(base: ProviderConfig, over: ProviderConfig) -> ProviderConfig:
    data = base.model_dump()
    for key in over.model_fields_set:
        value = getattr(over, key)
        if key == "models":
            data["models"] = {**base.models, **value}
        elif key in ("extra_body", "headers"):
            data[key] = {**getattr(base, key), **value}
        else:
            data[key] = value.model_dump() if isinstance(value, BaseModel) else value
    return ProviderConfig.model_validate(data)


_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
"""A .env key: an environment variable's name (POSIX's, with the ``.`` and ``-`` some use)."""


def env_file_problem(path: Path) -> str | None:
    """The first line of a .env file that is not ``KEY=VALUE`` (python-dotenv's own parser:
    comments, blank lines, ``export KEY=VALUE`` and a bare ``KEY`` are fine), as
    ``FILE:LINE: not KEY=VALUE``, or None. python-dotenv itself only logs a warning per read
    and skips the line, so a key on it would silently be missing.
    Raises OSError / UnicodeDecodeError when the file cannot be read."""
    from dotenv.parser import parse_stream

    with open(path, encoding="utf-8") as fh:
        for binding in parse_stream(fh):
            # (a bare word the parser takes for a KEY without a value, e.g. ``{bad``: no name)
            bad_key = binding.key is not None and not _ENV_KEY.fullmatch(binding.key)
            if binding.error or bad_key:
                text = binding.original.string
                # the parser counts blank lines before a statement into the statement
                skipped = text[: len(text) - len(text.lstrip())].count("\n")
                return f"{path}:{binding.original.line + skipped}: not KEY=VALUE"
    return None


def load_settings(
    env_file: Path | str | None = None,
    providers_file: Path | str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
) -> Settings:
    """Load settings from a .env file, a providers YAML file and the environment.

    ``env_file`` / ``providers_file``: explicit paths (must exist); when None, ``./.env`` and
    (``$CLAWRIG_PROVIDERS_FILE`` or ``./providers.yaml``) are used if present. ``environ``
    defaults to ``os.environ`` and overrides the .env file. ``cwd`` is where the defaults are
    looked for (default: the current directory). Nothing is written to ``os.environ``.

    Raises UserError (one line, naming the file and field) on unreadable or invalid files.
    """
    base = Path(cwd) if cwd is not None else Path.cwd()
    proc_env = dict(os.environ if environ is None else environ)

    env_path: Path | None
    if env_file is not None:
        env_path = Path(env_file)
        if not env_path.is_file():
            raise UserError(f"--env-file: no such file: {env_path}")
    else:
        env_path = base / ".env" if (base / ".env").is_file() else None
    file_vars: dict[str, str] = {}
    if env_path is not None:
        try:
            if problem := env_file_problem(env_path):
                raise UserError(f"--env-file: {problem}" if env_file is not None else problem)
            file_vars = {k: v for k, v in dotenv_values(env_path).items() if v is not None}
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{env_path}: cannot read env file: {exc}") from None
    merged = {**file_vars, **proc_env}

    prov_path: Path | None
    if providers_file is not None:
        prov_path = Path(providers_file)
    elif merged.get("CLAWRIG_PROVIDERS_FILE"):
        prov_path = Path(merged["CLAWRIG_PROVIDERS_FILE"])
    else:
        prov_path = base / "providers.yaml" if (base / "providers.yaml").is_file() else None
    providers = dict(BUILTIN_PROVIDERS)
    if prov_path is not None:
        doc = load_providers_file(prov_path)
        for name, cfg in doc.providers.items():
            providers[name] = _merge_provider(providers[name], cfg) if name in providers else cfg

    return Settings(
        env=merged,
        env_file=env_path,
        env_file_vars={k for k in file_vars if k not in proc_env},
        providers=providers,
        providers_file=prov_path,
    )


def _env_price(settings: Settings, prefix: str, suffix: str = "") -> Prices:
    values: dict[str, float] = {}
    for field in PRICE_FIELDS:
        var = f"{prefix}_{field.upper()}{suffix}"
        raw = settings.get(var)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            raise UserError(
                f"{settings.where(var)}: {var}: not a number: {raw!r} (USD per 1M tokens)"
            ) from None
        if value < 0:
            raise UserError(f"{settings.where(var)}: {var}: must be >= 0, got {raw!r}")
        values[field] = value
    return Prices(**values)


def _custom_route(name: str, settings: Settings, role: Role) -> str | None:
    """The custom provider a DataClawBench-style bare model name maps to, if any."""
    candidates: list[tuple[str, str, str]] = []
    if role == "judge":
        candidates.append(("judge_custom", "JUDGE_CUSTOM_MODEL_ID", "JUDGE_MODEL"))
    candidates.append(("custom", "OPENCLAW_CUSTOM_MODEL_ID", "DEFAULT_MODEL"))
    for provider, id_var, model_var in candidates:
        cfg = settings.providers.get(provider)
        if cfg is None or not cfg.base_url_env or not settings.get(cfg.base_url_env):
            continue
        if name in (settings.get(id_var), settings.get(model_var)):
            return provider
    return None


def _generic_provider(provider: str, settings: Settings) -> ProviderConfig | None:
    stem = model_env_key(provider)
    if stem and settings.get(f"{stem}_BASE_URL"):
        return ProviderConfig(base_url_env=f"{stem}_BASE_URL", api_key_env=f"{stem}_API_KEY")
    return None


def _env_providers(settings: Settings) -> list[str]:
    """The providers a ``<NAME>_BASE_URL`` variable with a value makes (``scripted`` for
    ``SCRIPTED_BASE_URL``), other than the variables the configured providers read."""
    taken = {cfg.base_url_env for cfg in settings.providers.values()}
    return [
        var.removesuffix("_BASE_URL").lower()
        for var in settings.env
        if var.endswith("_BASE_URL") and var not in taken and settings.get(var)
    ]


def resolve_model(name: str | None, settings: Settings, *, role: Role = "agent") -> ModelEndpoint:
    """Turn a model name into a callable endpoint (rules in the module docs).

    ``name``: ``provider/model`` as the user wrote it; None or empty uses ``DEFAULT_MODEL``
    (``JUDGE_MODEL`` for ``role="judge"``). Raises :class:`clawrig.errors.UserError` with one
    line when the name has no provider, the provider is unknown, or its base URL or required
    key is missing.
    """
    default_var = "JUDGE_MODEL" if role == "judge" else "DEFAULT_MODEL"
    name = (name or "").strip() or (settings.get(default_var) or "")
    if not name:
        custom = "JUDGE_CUSTOM" if role == "judge" else "OPENCLAW_CUSTOM"
        example = "openrouter/anthropic/claude-opus-4.5"
        if settings.get(f"{custom}_BASE_URL"):  # the custom endpoint is set up: name it
            example = f"custom/{settings.get(f'{custom}_MODEL_ID') or 'MODEL'}"
        raise UserError(
            f"no model given: pass provider/model (e.g. {example}) or {settings.hint(default_var)}"
        )

    prefix, slash, rest = name.partition("/")
    provider: str | None = None
    cfg: ProviderConfig | None = None
    model_key = rest
    bare = False  # a DataClawBench-style name routed to a custom endpoint as a whole
    known = settings.providers.get(prefix)
    if known is not None and (slash or known.model_id_env):
        provider, cfg = prefix, known
        if role == "judge" and provider == "custom" and settings.get("JUDGE_CUSTOM_BASE_URL"):
            provider, cfg = "judge_custom", settings.providers["judge_custom"]
    elif (routed := _custom_route(name, settings, role)) is not None:
        provider, cfg, model_key, bare = routed, settings.providers[routed], "", True
    elif slash and (generic := _generic_provider(prefix, settings)) is not None:
        provider, cfg = prefix, generic
    elif not slash:
        raise UserError(
            f"model name {name!r} has no provider: write provider/model, "
            f"e.g. openrouter/{name} or custom/{name}"
        )
    if provider is None or cfg is None:
        names = ", ".join(sorted({*settings.providers, *_env_providers(settings)}))
        raise UserError(
            f"unknown provider {prefix!r} in model name {name!r}: known providers are {names} "
            f"(or add it to providers.yaml, or set {model_env_key(prefix)}_BASE_URL)"
        )

    model_cfg = cfg.models.get(model_key) if model_key else None
    if model_cfg is not None and model_cfg.id:
        model_id = model_cfg.id
    elif model_key:
        model_id = model_key
    else:
        model_id = (cfg.model_id_env and settings.get(cfg.model_id_env)) or ""
        if not model_id and bare:
            model_id = name
        if model_cfg is None and model_id:
            model_cfg = cfg.models.get(model_id)
    if not model_id:
        need = f" or {settings.hint(cfg.model_id_env)}" if cfg.model_id_env else ""
        raise UserError(f"model name {name!r} has no model after {prefix + '/'!r}{need}")

    from_env = cfg.base_url_env if cfg.base_url_env and settings.get(cfg.base_url_env) else None
    base_url = (from_env and settings.get(from_env)) or cfg.base_url
    if not base_url:
        var = cfg.base_url_env or "base_url"
        raise UserError(f"model {name!r} needs the {provider} base URL: {settings.hint(var)}")
    where = f"from {from_env}" if from_env else f"the {provider} provider's base_url"
    require_http_url(base_url, f"model {name!r}: base URL ({where})")

    key = settings.get(cfg.api_key_env) if cfg.api_key_env else None
    if key is None and cfg.api_key_required:
        raise UserError(f"model {name!r} needs an API key: {settings.hint(cfg.api_key_env or '')}")
    from clawrig.tasks.safety import unsendable_in_header

    if key is not None and (bad := unsendable_in_header(key)):  # (the key is not shown)
        raise UserError(f"model {name!r}: its API key ({cfg.api_key_env}) holds {bad}")

    role_prefix = "JUDGE_COST" if role == "judge" else "MODEL_COST"
    prices = (
        _env_price(settings, role_prefix)
        .merged(model_cfg.prices if model_cfg else None)
        .merged(_env_price(settings, "MODEL_COST", f"__{model_env_key(name)}"))
    )
    return ModelEndpoint(
        name=name,
        provider=provider,
        model_id=model_id,
        base_url=base_url.rstrip("/"),
        api_key=SecretStr(key if key is not None else NO_KEY),
        api_key_env=cfg.api_key_env,
        prices=prices,
        context_window=(model_cfg.context_window if model_cfg else None) or cfg.context_window,
        max_tokens=(model_cfg.max_tokens if model_cfg else None) or cfg.max_tokens,
        max_concurrency=cfg.max_concurrency,
        timeout_s=cfg.timeout_s,
        extra_body=dict(cfg.extra_body),
        headers=dict(cfg.headers),
        server=cfg.server,
    )
