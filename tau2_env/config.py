"""Settings of the engine and the OpenEnv server, read from ``os.environ`` when asked.

The one reader of settings for the whole project: :func:`env_value` (every variable
may also be given as a file, ``NAME_FILE``, as Docker and Kubernetes secrets are);
Django's settings (``tau2site/env.py``) read through it too. Nothing is frozen at
import: every function reads the environment when called, so a test (or a long-lived
worker whose environment changes) sees the current values. An episode reads its
settings once, when it is created, and keeps them.

Secrets are returned inside :class:`ProviderSettings`, whose ``repr`` never shows them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DEFAULT_AGENT_API_MAX_BODY_BYTES",
    "DEFAULT_HF_ROUTER_URL",
    "DEFAULT_MODELS",
    "PROVIDERS",
    "ConfigError",
    "ProviderSettings",
    "agent_api_max_body_bytes",
    "allowed_hosts",
    "default_domain",
    "default_split",
    "embeddings_cache_dir",
    "env_value",
    "hf_router_url",
    "llm_max_reply_bytes",
    "llm_timeout",
    "max_concurrent_envs",
    "nl_judge_mode",
    "operator_endpoints",
    "outbound_allow",
    "provider_settings",
    "scoring_concurrency",
    "session_idle_seconds",
    "sessions_per_client",
    "sessions_per_key_max",
    "slots_lease_seconds",
    "slots_url",
    "trusted_origins",
]

PROVIDERS = ("hf", "openai", "anthropic")
DEFAULT_MODELS = {
    "hf": "deepseek-ai/DeepSeek-V4.1-Flash",
    "openai": "gpt-4.1",
    "anthropic": "claude-sonnet-4-5",
}
DEFAULT_HF_ROUTER_URL = "https://router.huggingface.co/v1"
# τ²'s own limit of tool errors in a conversation (``tau2.config.DEFAULT_MAX_ERRORS``,
# which ``tau2 run --max-errors`` defaults to), here without importing τ²: Django's
# models default to it. tests/runs/test_run_settings.py checks the two agree.
DEFAULT_MAX_ERRORS = 10
# τ²'s own step limit (``tau2.config.DEFAULT_MAX_STEPS``, ``tau2 run --max-steps``'s
# default), likewise: every run, race and evaluation defaults to it (apps.runs.defaults).
DEFAULT_MAX_STEPS = 200
# The largest body or WebSocket frame the agent faces read: far above any reset, step or
# JSON-RPC call (tool arguments stop at 64 KB, tau2_env.gate.arguments), far below memory.
DEFAULT_AGENT_API_MAX_BODY_BYTES = 1024 * 1024
# The largest answer a model endpoint may send (TAU2_LLM_MAX_REPLY_BYTES).
DEFAULT_LLM_MAX_REPLY_BYTES = 8 * 1024 * 1024
# The variable holding each provider's server-side credential.
CREDENTIAL_VARS = {"hf": "HF_TOKEN", "openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


class ConfigError(ValueError):
    """A setting has a value we cannot use; the message names the variable."""


@dataclass(frozen=True)
class ProviderSettings:
    """The customer's (and judge's) provider as the server is configured.

    ``server_credential`` is the server's own key for that provider, or ``None``.
    ``base_url`` is where requests go (``None``: the provider's public endpoint).
    """

    provider: str
    model: str
    base_url: str | None
    server_credential: str | None = field(repr=False, default=None)

    @property
    def credential_var(self) -> str:
        return CREDENTIAL_VARS[self.provider]


def env_value(name: str) -> str | None:
    """The variable's value, else the content of the file named by ``NAME_FILE``
    (stripped), else ``None``. An empty value counts as unset. Raises
    :class:`ConfigError` when ``NAME_FILE`` names a file that cannot be read."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    return None


def _env(name: str) -> str | None:
    """The variable's value (or file) stripped, or ``None`` when unset or blank."""
    value = env_value(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _env_int(name: str, default: int, *, minimum: int = 1) -> int:
    raw = _env(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def provider_settings() -> ProviderSettings:
    """The provider named by ``TAU2_USER_PROVIDER`` (default ``hf``) with its model and key.

    Raises :class:`ConfigError` for an unknown provider.
    """
    provider = (_env("TAU2_USER_PROVIDER") or "hf").lower()
    if provider not in PROVIDERS:
        raise ConfigError(
            f"TAU2_USER_PROVIDER must be one of {', '.join(PROVIDERS)}, got {provider!r}"
        )
    model = _env("TAU2_USER_MODEL") or DEFAULT_MODELS[provider]
    base_url: str | None
    if provider == "hf":
        base_url = (_env("TAU2_HF_ROUTER_URL") or DEFAULT_HF_ROUTER_URL).rstrip("/")
    elif provider == "openai":
        base_url = _env("OPENAI_BASE_URL")
    else:
        base_url = _env("ANTHROPIC_BASE_URL")
    return ProviderSettings(
        provider=provider,
        model=model,
        base_url=base_url,
        server_credential=_env(CREDENTIAL_VARS[provider]),
    )


def hf_router_url() -> str:
    """The Hugging Face router's OpenAI-compatible base URL (``TAU2_HF_ROUTER_URL``)."""
    return (_env("TAU2_HF_ROUTER_URL") or DEFAULT_HF_ROUTER_URL).rstrip("/")


def llm_direct() -> bool:
    """Whether chat calls to OpenAI-style endpoints go out by the direct path
    (``TAU2_LLM_DIRECT``, default on; ``off``/``false``/``0`` sends every call through
    litellm). The direct path sends the bytes litellm would, checked against litellm's
    own first request of each kind of call (:mod:`tau2_env.llm.compat`), for less CPU."""
    raw = (_env("TAU2_LLM_DIRECT") or "on").lower()
    if raw in ("on", "true", "1", "yes"):
        return True
    if raw in ("off", "false", "0", "no"):
        return False
    raise ConfigError(f"TAU2_LLM_DIRECT must be on or off, got {raw!r}")


def _env_seconds(name: str, default: float, *, zero: bool) -> float:
    """``name`` as seconds (``default`` when unset); 0 allowed only when ``zero``."""
    raw = _env(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value < 0 or (value == 0 and not zero):
        raise ConfigError(f"{name} must be {'0 or more' if zero else 'positive'}, got {raw!r}")
    return value


def llm_timeout() -> float:
    """Seconds one LLM request may take (``TAU2_LLM_TIMEOUT``, default 120)."""
    return _env_seconds("TAU2_LLM_TIMEOUT", 120.0, zero=False)


def llm_retry_after_max() -> float:
    """The longest wait (seconds) a provider's ``Retry-After`` may impose between two
    attempts of a call (``TAU2_LLM_RETRY_AFTER_MAX``, default 60)."""
    return _env_seconds("TAU2_LLM_RETRY_AFTER_MAX", 60.0, zero=True)


def llm_retry_after_run_max() -> float:
    """The longest (seconds) one episode — a run — may spend in all waiting on providers'
    ``Retry-After`` over its calls (``TAU2_LLM_RETRY_AFTER_RUN_MAX``, default 600): each
    wait is bounded by :func:`llm_retry_after_max`, their sum by this."""
    return _env_seconds("TAU2_LLM_RETRY_AFTER_RUN_MAX", 600.0, zero=True)


def llm_max_reply_bytes() -> int:
    """The largest answer a model endpoint may send, decompressed, in bytes
    (``TAU2_LLM_MAX_REPLY_BYTES``, default 8 MiB: a chat completion is a few KiB)."""
    return _env_int("TAU2_LLM_MAX_REPLY_BYTES", DEFAULT_LLM_MAX_REPLY_BYTES, minimum=1024)


def embeddings_cache_dir() -> Path:
    """Where a knowledge domain's embeddings of its documents are kept, one folder per
    connection model (``TAU2_EMBEDDINGS_CACHE_DIR``, default ``<TAU2_VAR_DIR>/embeddings``,
    ``./var/embeddings``): computed once per connection model, then read by every run."""
    given = _env("TAU2_EMBEDDINGS_CACHE_DIR")
    if given:
        return Path(given)
    var = _env("TAU2_VAR_DIR")
    root = Path(var) if var else Path(__file__).resolve().parent.parent / "var"
    return root / "embeddings"


def outbound_allow() -> str:
    """The networks (``127.0.0.0/8``, ``::1``) and host names that model endpoints people
    type may reach although they are not global addresses, comma-separated
    (``TAU2_OUTBOUND_ALLOW``, default none): see :mod:`tau2_env.llm.outbound`."""
    return _env("TAU2_OUTBOUND_ALLOW") or ""


def operator_endpoints() -> tuple[str, ...]:
    """The endpoints the operator set (the router's, OpenAI's, Anthropic's): their hosts
    are the operator's choice, always reachable."""
    return tuple(
        url
        for url in (
            hf_router_url(),
            _env("OPENAI_BASE_URL"),
            _env("ANTHROPIC_BASE_URL"),
        )
        if url
    )


def default_domain() -> str:
    """``TAU2_DOMAIN``, default ``airline``."""
    return _env("TAU2_DOMAIN") or "airline"


def default_split() -> str:
    """``TAU2_SPLIT``, default ``test``."""
    return _env("TAU2_SPLIT") or "test"


def max_concurrent_envs() -> int:
    """``MAX_CONCURRENT_ENVS``, default 64: OpenEnv sessions at once, and LLM worker threads."""
    return _env_int("MAX_CONCURRENT_ENVS", 64)


def sessions_per_client() -> int:
    """``TAU2_SESSIONS_PER_CLIENT``, default 16: open OpenEnv and MCP sessions one client
    (one token or key, else one address) may hold at once."""
    return _env_int("TAU2_SESSIONS_PER_CLIENT", 16)


def sessions_per_key_max() -> int:
    """``TAU2_SESSIONS_PER_KEY_MAX``, default 256: the most sessions a studio key may be
    given as its own cap when it is made (a trainer's batch of generations opens one
    session each). A key without a cap holds ``TAU2_SESSIONS_PER_CLIENT`` with its
    owner's other keys; every cap stays below ``MAX_CONCURRENT_ENVS``."""
    return _env_int("TAU2_SESSIONS_PER_KEY_MAX", 256)


def session_idle_seconds() -> int:
    """``TAU2_SESSION_IDLE_SECONDS``, default 300: an OpenEnv or MCP session that waits
    this long for its client is closed and frees its slot."""
    return _env_int("TAU2_SESSION_IDLE_SECONDS", 300)


SLOTS_URL_SCHEMES = ("redis://", "rediss://", "unix://")


def slots_url() -> str | None:
    """``TAU2_SLOTS_URL``: the Redis holding the ledger of open OpenEnv and MCP sessions
    that every host of a deployment shares (``redis://…``, ``rediss://…``, ``unix://…``),
    so a client's cap counts its sessions on all of them; ``None`` when unset (the
    processes of one router share a SQLite file, :mod:`tau2_env.gate.shared_slots`).
    Raises :class:`ConfigError` for any other kind of URL."""
    url = _env("TAU2_SLOTS_URL")
    if url is not None and not url.startswith(SLOTS_URL_SCHEMES):
        raise ConfigError(
            "TAU2_SLOTS_URL must be a Redis URL (redis://, rediss:// or unix://), "
            f"got {url.split('://', 1)[0]!r}"
        )
    return url


def slots_lease_seconds() -> int:
    """``TAU2_SLOTS_LEASE_SECONDS``, default 30: how long a session counts in the shared
    ledger after its process last renewed it (every third of it): a host that dies stops
    counting within this time."""
    return _env_int("TAU2_SLOTS_LEASE_SECONDS", 30, minimum=3)


def scoring_concurrency() -> int:
    """``TAU2_SCORING_CONCURRENCY``, default 2: conversations of one process scored at once.

    Scoring is CPU-bound Python; 64 threads scoring together under the GIL spend several
    times the CPU of the same work one or two at a time (seen: 25 ms each alone, ~100 ms
    each 64 at once). The others wait their turn, which finishes all of them sooner.
    """
    return _env_int("TAU2_SCORING_CONCURRENCY", 2)


def nl_judge_mode() -> str:
    """``TAU2_NL_JUDGE``: when τ²'s natural-language judge runs.

    ``basis`` (default) runs it only for tasks whose reward basis includes NL assertions,
    exactly as ``tau2 run`` scores (no base task of airline/retail/telecom has one).
    ``always`` also runs it for tasks that list NL assertions; their verdicts are then
    reported in ``reward_info.nl_assertions`` without changing the reward.
    """
    mode = (_env("TAU2_NL_JUDGE") or "basis").lower()
    if mode not in ("basis", "always"):
        raise ConfigError(f"TAU2_NL_JUDGE must be 'basis' or 'always', got {mode!r}")
    return mode


def _env_list(name: str) -> list[str] | None:
    """A comma-separated list (blanks dropped), or ``None`` when unset."""
    raw = _env(name)
    if raw is None:
        return None
    return [item.strip() for item in raw.split(",") if item.strip()]


def allowed_hosts() -> list[str]:
    """``ALLOWED_HOSTS`` (as Django reads it: ``example.org``, ``.example.org`` for its
    subdomains too, ``*``), default the loopback names: the hosts the standalone agent
    faces answer (``tau2_env.gate.guard``)."""
    return _env_list("ALLOWED_HOSTS") or ["localhost", "127.0.0.1", "[::1]"]


def trusted_origins() -> list[str]:
    """``CSRF_TRUSTED_ORIGINS``: the browser origins besides the site's own that the
    standalone agent faces accept (``https://tau2.example.org``, ``https://*.hf.space``)."""
    return _env_list("CSRF_TRUSTED_ORIGINS") or []


def agent_api_max_body_bytes() -> int:
    """``TAU2_AGENT_API_MAX_BODY_BYTES``, default 1 MiB: the largest HTTP body or
    WebSocket frame the agent faces read (larger: 413, or an error frame)."""
    return _env_int("TAU2_AGENT_API_MAX_BODY_BYTES", DEFAULT_AGENT_API_MAX_BODY_BYTES, minimum=1024)
