"""Every environment variable the project reads, in one table: the configuration page of
the docs and ``.env.production.example`` are both made from it.

    python -m tau2site.settings_table --markdown > docs/configuration.md
    python -m tau2site.settings_table --env-production > .env.production.example

``tests/test_settings_table.py`` checks that both committed files are what this module
makes, and that every name the code reads (``envint("TAU2_…")``, ``config._env(…)``,
``os.environ.get(…)`` in ``tau2site``, ``tau2_env`` and ``apps``) has a row here: a new
setting without a row fails the suite. Importing this module imports nothing of Django.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

# Where a variable is set, which decides where it is listed.
SERVER = "server"  # the product's processes read it: .env on the server
COMPOSE = "compose"  # docker-compose.yml reads it (processes, passwords): .env on the server
CLIENT = "client"  # a trainer's machine (TRL's environment class), never the server's .env
INTERNAL = "internal"  # the product sets it for its own child processes: never set by hand
SYSTEM = "system"  # read as every program reads it (TLS, τ²'s data): set only to change that


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, its default as a person reads it, what it
    means (Markdown), the value ``.env.production.example`` gives it (``None``: listed
    commented out, with its default) and the comment there."""

    name: str
    default: str
    meaning: str
    production: str | None = ""
    note: str = ""
    section: str = ""
    scope: str = SERVER


@dataclass(frozen=True)
class Section:
    title: str
    intro: str
    settings: tuple[Setting, ...]


def _rows(section: str, *settings: Setting) -> tuple[Setting, ...]:
    return tuple(
        Setting(**{**s.__dict__, "section": section}) if not s.section else s for s in settings
    )


S = Setting

SECTIONS: tuple[Section, ...] = (
    Section(
        "Django",
        "",
        _rows(
            "Django",
            S(
                "DEBUG",
                "`false` (the laptop's `.env` sets `true`)",
                "Never on in production. On: a secret key and a vault key kept under `var/`, "
                "localhost as allowed host, no HTTPS redirect.",
                "false",
                "never true in production",
            ),
            S(
                "TAU2_ENV_FILE",
                "`.env` of the checkout",
                "The settings file read at start; empty: none. The environment wins over it.",
                None,
                "another settings file than .env; empty: none",
            ),
            S(
                "DJANGO_SECRET_KEY",
                "— (required when `DEBUG` is off)",
                "With `DEBUG` on, a random key is kept in `var/`.",
                "",
                "required when DEBUG is off (or DJANGO_SECRET_KEY_FILE)",
            ),
            S(
                "ALLOWED_HOSTS",
                "localhost names when `DEBUG` is on",
                "Comma-separated; the pages' and the agent faces' hosts "
                "([Security](security.md#security)).",
                "tau2.example.org",
                "comma-separated",
            ),
            S(
                "CSRF_TRUSTED_ORIGINS",
                "—",
                "e.g. `https://tau2.example.org`: browser origins besides the site's own that "
                "forms and the agent faces accept.",
                "https://tau2.example.org",
            ),
            S(
                "SECURE_SSL_REDIRECT",
                "`true` when `DEBUG` is off",
                "Production only; the app expects a TLS proxy that sets `X-Forwarded-Proto`.",
                "true",
                "behind a TLS proxy that sets X-Forwarded-Proto",
            ),
            S("SESSION_COOKIE_SECURE", "`true` when `DEBUG` is off", "Production only.", "true"),
            S("CSRF_COOKIE_SECURE", "`true` when `DEBUG` is off", "Production only.", "true"),
            S(
                "SECURE_HSTS_SECONDS",
                "`31536000` (one year) when `DEBUG` is off",
                "Production only: `Strict-Transport-Security`'s max-age.",
                "31536000",
            ),
            S(
                "SECURE_HSTS_INCLUDE_SUBDOMAINS",
                "`true` when `DEBUG` is off",
                "Production only: HSTS covers the subdomains too.",
                "true",
            ),
            S(
                "SECURE_HSTS_PRELOAD",
                "`false`",
                "Production only: ask to be on the browsers' HSTS preload list.",
                "false",
            ),
            S(
                "STATIC_MANIFEST",
                "`false`",
                "`true` once `collectstatic` ran (the Docker image does).",
                "false",
                "true once `collectstatic` has run (the Docker image does)",
            ),
            S("LOG_LEVEL", "`INFO`", "The root logger's level.", "INFO"),
            S("TIME_ZONE", "`UTC`", "Django's `TIME_ZONE`.", "UTC"),
            S(
                "TAU2_VAR_DIR",
                "`./var`",
                "Where the laptop keeps its SQLite database, secret key and vault key.",
                "",
                "default ./var (SQLite database, laptop secret key)",
            ),
        ),
    ),
    Section(
        "Services",
        "",
        _rows(
            "Services",
            S(
                "DATABASE_URL",
                "SQLite at `var/db.sqlite3`",
                "`postgres://user:pass@host:5432/tau2` in production.",
                "",
                "postgres://user:pass@host:5432/tau2 ; unset = SQLite",
            ),
            S(
                "DB_CONN_MAX_AGE",
                "`0`",
                "Seconds a database connection is kept for the next request (Django's "
                "`CONN_MAX_AGE`), health-checked before reuse.",
                "0",
            ),
            S(
                "REDIS_URL",
                "—",
                "Celery broker and results, and channels_redis. Unset: in-memory layer and an "
                "in-process worker.",
                "",
                "redis://host:6379/0 ; Celery broker/results + channels_redis",
            ),
            S(
                "CHANNELS_PREFIX",
                "`tau2`",
                "The prefix of channels_redis's keys (several sites on one Redis).",
                "tau2",
            ),
            S(
                "TAU2_CHANNEL_CAPACITY",
                "`5000`",
                "Live-page messages waiting per web process before channels_redis drops them "
                "(its default, 100, lost final status lines at 100 live runs).",
                "5000",
                "pending live-page messages per web process before Redis drops them",
            ),
            S("CELERY_QUEUE", "`tau2`", "The Celery queue runs and jobs are sent to.", "tau2"),
            S(
                "TAU2_EMBEDDED_WORKER",
                "`true` when `REDIS_URL` is unset",
                "Run a Celery worker thread inside the web process.",
                "",
                "default: true when REDIS_URL is unset",
            ),
            S(
                "TAU2_EMBEDDED_WORKER_CONCURRENCY",
                "`4`",
                "Threads of the embedded worker.",
                "4",
            ),
        ),
    ),
    Section(
        "τ²-bench",
        "",
        _rows(
            "τ²-bench",
            S(
                "TAU2_DOMAIN",
                "`airline`",
                "Default domain of the explorer and of OpenEnv's `reset()`.",
                "airline",
                "default domain of the explorer and of OpenEnv's reset()",
            ),
            S("TAU2_SPLIT", "`test`", "Default split, likewise.", "test", "default split"),
            S("TAU2_EXPLORER_PAGE_SIZE", "`48`", "Task cards per explorer page.", "48"),
            S(
                "TAU2_NL_JUDGE",
                "`basis`",
                "`basis`: τ²'s NL judge only when a task's reward basis needs it (as "
                "`tau2 run`); `always`: also report NL assertions.",
                "basis",
            ),
            S(
                "TAU2_SCORING_CONCURRENCY",
                "`2`",
                "Conversations one process scores at once (CPU-bound: 64 threads scoring "
                "together cost several times the CPU of the same work two at a time).",
                "2",
                "conversations one process scores at once",
            ),
        ),
    ),
    Section(
        "The simulated customer and the judge",
        "The engine's and the OpenEnv API's customer when a run or a client names none.",
        _rows(
            "The simulated customer and the judge",
            S(
                "TAU2_USER_PROVIDER",
                "`hf`",
                "The simulated customer's (and judge's) provider: `hf`, `openai`, `anthropic`.",
                "hf",
                "hf | openai | anthropic",
            ),
            S(
                "TAU2_USER_MODEL",
                "per provider",
                "`deepseek-ai/DeepSeek-V4.1-Flash`, `gpt-4.1`, `claude-sonnet-4-5`.",
                "",
                "default per provider: deepseek-ai/DeepSeek-V4.1-Flash, gpt-4.1, claude-sonnet-4-5",
            ),
            S(
                "TAU2_HF_ROUTER_URL",
                "`https://router.huggingface.co/v1`",
                "Hugging Face Inference Providers router.",
                "https://router.huggingface.co/v1",
            ),
            S(
                "HF_TOKEN",
                "—",
                "Server-side credential for OpenEnv clients that bring none (see "
                "[Studio API keys](agents.md#studio-api-keys-and-agent-runs)).",
                "",
                "server fallback for OpenEnv clients that pass no hf_token",
            ),
            S("OPENAI_API_KEY", "—", "The `openai` customer's server-side credential.", ""),
            S(
                "OPENAI_BASE_URL",
                "`https://api.openai.com/v1`",
                "OpenAI's API (tests point it at a local fake); also connections of that kind "
                "without a base URL of their own.",
                "",
            ),
            S("ANTHROPIC_API_KEY", "—", "The `anthropic` customer's server-side credential.", ""),
            S(
                "ANTHROPIC_BASE_URL",
                "`https://api.anthropic.com`",
                "Anthropic's API, likewise.",
                "",
            ),
            S(
                "TAU2_LLM_TIMEOUT",
                "`120`",
                "Seconds one LLM request may take: connecting, each read and the whole answer.",
                "120",
                "seconds per LLM call: connecting, each read and the whole answer",
            ),
            S(
                "TAU2_LLM_RETRY_AFTER_MAX",
                "`60`",
                "The longest a model call waits before its next attempt when the provider "
                "answers 429 or 503 with `Retry-After`; a provider that asks for longer ends "
                "the call, saying so.",
                None,
                "seconds a provider's Retry-After may make a call wait (default 60)",
            ),
            S(
                "TAU2_LLM_RETRY_AFTER_RUN_MAX",
                "`600`",
                "The longest one run waits in all on providers' `Retry-After` (each wait at "
                "most `TAU2_LLM_RETRY_AFTER_MAX`); a call whose wait would go past it ends the "
                "run's call, saying so.",
                None,
                "seconds a run may wait in all on providers' Retry-After (default 600)",
            ),
            S(
                "TAU2_LLM_MAX_REPLY_BYTES",
                "`8388608` (8 MiB)",
                "The largest answer (decompressed) a model endpoint may send; past it the call "
                "fails.",
                "8388608",
                "the largest answer (decompressed) a model endpoint may send",
            ),
            S(
                "TAU2_EMBEDDINGS_CACHE_DIR",
                "`<TAU2_VAR_DIR>/embeddings`",
                "Where banking_knowledge's embeddings of its documents are kept, one folder "
                "per connection model: computed by the first run on it, read by the later "
                "ones.",
                "",
                "default <TAU2_VAR_DIR>/embeddings",
            ),
            S(
                "TAU2_OUTBOUND_ALLOW",
                "(none)",
                "Networks and host names connections may reach besides public addresses "
                "(`127.0.0.0/8,::1,localhost` on a laptop). See "
                "[Security](security.md#security).",
                "",
                "networks/hosts (10.0.0.0/8, my-vllm) connections may reach besides public "
                "addresses",
            ),
            S(
                "TAU2_LLM_DIRECT",
                "`on`",
                "Chat calls to OpenAI-style endpoints (the router, OpenAI, OpenAI-compatible "
                "servers) go out by the direct path: litellm's exact bytes, about a tenth of its "
                "CPU ([The direct path for LLM calls]"
                "(operations.md#the-direct-path-for-llm-calls)); "
                "`off` sends every call through litellm.",
                None,
                "litellm's exact requests without its CPU; off: every call through litellm",
            ),
        ),
    ),
    Section(
        "Connections",
        "Models beyond the router (`apps.connections`; keys live in the vault). Each kind's "
        "API when a connection names no base URL (OpenAI's and Anthropic's above).",
        _rows(
            "Connections",
            S(
                "GEMINI_BASE_URL",
                "`https://generativelanguage.googleapis.com`",
                "Google Gemini's API.",
                "",
            ),
            S("MISTRAL_BASE_URL", "`https://api.mistral.ai/v1`", "Mistral's API.", ""),
            S("OPENROUTER_BASE_URL", "`https://openrouter.ai/api/v1`", "OpenRouter's API.", ""),
            S("TOGETHER_BASE_URL", "`https://api.together.xyz/v1`", "Together's API.", ""),
            S(
                "FIREWORKS_BASE_URL",
                "`https://api.fireworks.ai/inference/v1`",
                "Fireworks' API.",
                "",
            ),
            S(
                "TAU2_CONNECTION_TEST_TIMEOUT",
                "`15`",
                "Seconds a connection's **Test** may wait for its one request (the whole answer).",
                "15",
                "seconds the connection page's Test may wait",
            ),
            S(
                "TAU2_CONNECTION_TESTS_PER_HOUR",
                "`10`",
                "Presses of a budgeted connection's Test each person may make in any hour "
                "(`0`: none).",
                "10",
            ),
            S(
                "TAU2_LEADERBOARD_CUSTOMERS",
                "`gpt-4.1,gpt-5.2`",
                "Customer models that make an evaluation comparable to taubench.com "
                "([Connections](providers.md#any-model-any-provider-connections)).",
                "gpt-4.1,gpt-5.2",
                "customers that make a number comparable to taubench.com",
            ),
            S(
                "TAU2_LEADERBOARD_TAU2_VERSION",
                "`1.0.1`",
                "The τ² release taubench.com's current results run on: only evaluations on "
                "that release's task sets are marked comparable; others are said to be its "
                "legacy list ([Connections](providers.md#any-model-any-provider-connections)).",
                "1.0.1",
            ),
            S(
                "TAU2_OWN_ENDPOINT_RUNS_PER_PERSON",
                "`2`",
                "Runs of one person on their own endpoints (personal connections) going at "
                "once; the others wait in the queue.",
                "2",
            ),
            S(
                "TAU2_OWN_ENDPOINT_WAIT_SECONDS",
                "`5`",
                "How often a run waiting for one of those places is asked again.",
                "5",
            ),
        ),
    ),
    Section(
        "Notifications",
        "Webhooks of evaluations' events (`apps.notifications`; see "
        "[Notifications](notifications.md)). Their URLs and secrets live in the vault.",
        _rows(
            "Notifications",
            S(
                "TAU2_WEBHOOK_TIMEOUT",
                "`10`",
                "Seconds one delivery attempt may take, the whole answer included: a slow "
                "or hanging receiver never holds a worker longer.",
                "10",
                "seconds per webhook delivery attempt",
            ),
            S(
                "TAU2_WEBHOOK_BACKOFF",
                "`10,30,60,120,300,600`",
                "Seconds between a failed attempt and the next, in order; after the last "
                "the delivery is marked failed.",
                "10,30,60,120,300,600",
                "waits between webhook attempts, then failed",
            ),
            S(
                "TAU2_SITE_URL",
                "`TAU2_AGENTS_URL`, else `https://SPACE_HOST`, else `http://localhost:8000`",
                "The studio's address as people open it, for the links in notifications.",
                None,
            ),
        ),
    ),
    Section(
        "Agent models",
        "The Inference Providers catalogue (`apps.inference`).",
        _rows(
            "Agent models",
            S(
                "TAU2_MODELS_REFRESH_SECONDS",
                "`3600`",
                "How often Celery beat re-reads the router's model catalogue.",
                "3600",
                "how often beat re-reads {TAU2_HF_ROUTER_URL}/models",
            ),
            S(
                "TAU2_MODELS_TIMEOUT",
                "`15`",
                "Seconds one read of `{TAU2_HF_ROUTER_URL}/models` may take.",
                "15",
                "seconds per read of the router's catalogue",
            ),
            S(
                "TAU2_MODELS_FALLBACK",
                "six well-known tool-calling models",
                "Comma-separated `org/model` ids installed (unpriced) only when the router "
                "cannot be read and no catalogue is stored.",
                "",
                "org/model,... installed (unpriced) only if the router fails and nothing is stored",
            ),
        ),
    ),
    Section(
        "Sign-in with Hugging Face",
        "`apps.accounts`; see [Sign-in](security.md#sign-in-tokens-and-who-may-do-what).",
        _rows(
            "Sign-in with Hugging Face",
            S(
                "OAUTH_CLIENT_ID",
                "—",
                "Injected on a Space. Elsewhere `SOCIAL_AUTH_HUGGINGFACE_KEY`.",
                "",
                "injected on a Space; elsewhere SOCIAL_AUTH_HUGGINGFACE_KEY",
            ),
            S(
                "OAUTH_CLIENT_SECRET",
                "—",
                "Injected on a Space. Elsewhere `SOCIAL_AUTH_HUGGINGFACE_SECRET`.",
                "",
                "injected on a Space; elsewhere SOCIAL_AUTH_HUGGINGFACE_SECRET",
            ),
            S("SOCIAL_AUTH_HUGGINGFACE_KEY", "—", "The OAuth app's client id.", ""),
            S("SOCIAL_AUTH_HUGGINGFACE_SECRET", "—", "The OAuth app's client secret.", ""),
            S(
                "OPENID_PROVIDER_URL",
                "`https://huggingface.co`",
                "Endpoints come from its `/.well-known/openid-configuration`.",
                "https://huggingface.co",
            ),
            S(
                "SPACE_HOST",
                "—",
                "Set by a Space: callback host, allowed host, trusted origin, embedding.",
                "",
                "set by a Space (e.g. someone-tau2.hf.space)",
            ),
            S(
                "TAU2_EMBED_IN_SPACE",
                "`true` when `SPACE_HOST` is set",
                "Cross-site cookies and `frame-ancestors` for the Space iframe.",
                "",
                "default: true when SPACE_HOST is set",
            ),
            S(
                "TAU2_FRAME_ANCESTORS",
                "`https://huggingface.co,https://*.hf.space`",
                "Who may frame the app when embedded.",
                "https://huggingface.co,https://*.hf.space",
            ),
            S(
                "TAU2_VAULT_KEYS",
                "— (required when `DEBUG` is off)",
                "Comma-separated Fernet keys; the first encrypts. With `DEBUG` on, a random key "
                "is kept in `var/`.",
                "",
                "required when DEBUG is off: Fernet keys, comma-separated, first encrypts",
            ),
            S(
                "TAU2_TOKEN_REFRESH_MARGIN",
                "`300`",
                "Seconds before expiry at which the vault refreshes a token.",
                "300",
                "seconds",
            ),
            S(
                "TAU2_HF_OAUTH_TIMEOUT",
                "`10`",
                "Seconds per call to Hugging Face's OAuth endpoints.",
                "10",
                "seconds",
            ),
            S(
                "TAU2_PUBLIC_RUNS",
                "`false`",
                "`true`: anonymous visitors see the team's runs read-only.",
                "false",
                "true: anonymous visitors see runs read-only",
            ),
            S(
                "TAU2_REVIEW_BY_MEMBERS",
                "`false`",
                "`true`: every signed-in member may label runs, not only staff.",
                "false",
            ),
            S(
                "TAU2_ALLOWED_ORGS",
                "— (anyone)",
                "Comma-separated HF organisation handles whose members may sign in.",
                "",
                "comma-separated HF organisation handles; empty = anyone",
            ),
            S(
                "TAU2_DEV_LOGIN",
                "`false`",
                "A developer sign-in without HF at `/accounts/dev-login/`, only when `DEBUG` is "
                "on too. It has no HF token.",
                "false",
                "developer sign-in without HF; needs DEBUG=true too",
            ),
            S(
                "TAU2_HF_SIGNIN_WRITE_REPOS",
                "`false`",
                "`true`: sign-in also asks for `write-repos` and `manage-repos`, which pushing a "
                "dataset to the Hub on the person's own token needs.",
                "false",
                "true: sign-in also asks for write-repos/manage-repos (dataset pushes)",
            ),
            S(
                "TAU2_HF_HUB_URL",
                "`https://huggingface.co`",
                "The Hub: `/api/whoami-v2` for the agent faces' token checks, and dataset pushes.",
                "",
            ),
        ),
    ),
    Section(
        "The agent faces: OpenEnv and MCP",
        "See [Agents](agents.md) and [Security](security.md#security).",
        _rows(
            "The agent faces: OpenEnv and MCP",
            S(
                "TAU2_AGENT_API_REQUIRE_KEY",
                "`true` when `DEBUG` is off and the server has a credential of its own "
                "(`HF_TOKEN`, or the `TAU2_USER_PROVIDER`'s key); else `false`",
                "`true`: the OpenEnv and MCP faces serve only clients with a studio API key "
                "(see [Studio API keys](agents.md#studio-api-keys-and-agent-runs)).",
                "true",
                "OpenEnv/MCP clients need a studio API key; HF_TOKEN never spent for anonymous "
                "ones",
            ),
            S(
                "TAU2_AGENTS_URL",
                "the site's own URL, as the request reached it",
                "The agents' public URL, printed by `/agents/`, its snippets and the keys page "
                "(`https://agents.example.org`). Blank behind the front proxy, which routes "
                "the agent faces on the site's own address "
                "([The front proxy](operations.md#the-front-proxy)).",
                "",
                "blank: the site's own URL (the front proxy routes the agent faces)",
            ),
            S(
                "TAU2_AGENT_API_MAX_BODY_BYTES",
                "1 MiB",
                "The largest HTTP body or WebSocket frame the agent faces read (at least 1024).",
                "1048576",
            ),
            S(
                "MAX_CONCURRENT_ENVS",
                "`64`",
                "OpenEnv and MCP sessions at once (per process).",
                "64",
                "OpenEnv WebSocket sessions at once",
            ),
            S(
                "TAU2_SESSIONS_PER_CLIENT",
                "`16`",
                "Open sessions one client (person, token or address) may hold.",
                "16",
            ),
            S(
                "TAU2_SESSIONS_PER_ADDRESS",
                "`TAU2_SESSIONS_PER_CLIENT`",
                "Open sessions a client with neither key nor token may hold, per address "
                "(never above `TAU2_SESSIONS_PER_CLIENT`).",
                "",
            ),
            S(
                "TAU2_SESSION_IDLE_SECONDS",
                "`300`",
                "Seconds an OpenEnv or MCP session may wait for its client before it is closed.",
                "300",
            ),
            S(
                "TAU2_SESSIONS_PER_KEY_MAX",
                "`256`",
                "The most sessions a studio key may be given as its own cap when it is made (a "
                "trainer's batch: one session per generation); every cap stays below "
                "`MAX_CONCURRENT_ENVS`.",
                "256",
                "the largest own cap of sessions at once a studio key may be made with",
            ),
            S(
                "TAU2_SLOTS_URL",
                "— (each host counts its own)",
                "The Redis where every host's OpenEnv processes count open sessions, so a "
                "person's or a key's cap holds across hosts (`redis://…`, `rediss://…`); "
                "`docker-compose.yml` sets it to the deployment's Redis. Unset: the processes "
                "behind one router share a SQLite file, with no network in the session path "
                "([Several OpenEnv processes](operations.md#several-openenv-processes)).",
                "",
                "redis://host:6379/0 (compose sets it) ; caps across hosts",
            ),
            S(
                "TAU2_SLOTS_LEASE_SECONDS",
                "`30`",
                "With `TAU2_SLOTS_URL`: how long a session counts after its process last renewed "
                "it (every third of it), so the sessions of a host that dies stop counting within "
                "this time.",
                "30",
            ),
            S(
                "TAU2_CREDENTIALS_CHECK_SECONDS",
                "`2`",
                "How often the credentials of every open session are asked again (revoked "
                "keys, signed-out people): a refused session is closed with the reason.",
                "2",
            ),
            S(
                "TAU2_HF_TOKEN_CHECK",
                "`true`",
                "Ask the Hub whose a Hugging Face token is (`/api/whoami-v2`), so one account's "
                "tokens share its cap.",
                "true",
            ),
            S(
                "TAU2_HF_TOKEN_CHECK_TIMEOUT",
                "`10`",
                "Seconds that question may take.",
                "10",
            ),
            S(
                "TAU2_HF_TOKEN_CHECK_SECONDS",
                "`600`",
                "How long its answer is kept.",
                "600",
            ),
            S(
                "TAU2_ROUTER_TRUSTED_PROXIES",
                "(none)",
                "IPs and CIDRs of the TLS proxy in front of "
                "`python -m tau2_env.gate.session_router`, whose "
                "`X-Forwarded-For` and `X-Forwarded-Proto` it believes (`--trusted-proxies`); "
                "from anyone else it sets both from the connection. Never `*`. Compose sets "
                "it to its proxy's fixed address (`TAU2_NETWORK`).",
                None,
                "the TLS proxy's IPs or CIDRs, without compose's proxy",
            ),
            S(
                "TAU2_TRAINING_SPLIT_GUARD",
                "`warn`",
                "`warn`: an episode of a training session on a split one of the team's "
                "evaluations uses (or a split holding its task, e.g. `base`) carries one warning "
                "line in its opening and the session's page says so; `refuse`: such a reset is "
                "refused in words (403 over HTTP, an error frame on `/ws`). Anything else stops "
                "the start-up.",
                "warn",
                "warn | refuse: training on a split one of the team's evaluations uses",
            ),
        ),
    ),
    Section(
        "Runs",
        "`apps.runs` and `apps.workers`; see "
        "[What needs which process](operations.md#what-needs-which-process).",
        _rows(
            "Runs",
            S(
                "TAU2_RUN_MAX_STEPS",
                "`200`",
                "The highest step limit a run may ask for.",
                "200",
                "the highest step limit a run may ask for",
            ),
            S(
                "TAU2_RUN_LEASE_SECONDS",
                "`60`",
                "A worker's lease on a run, renewed every third of it.",
                "60",
                "a worker's hold on a run, renewed every third of it",
            ),
            S(
                "TAU2_RUN_REAP_SECONDS",
                "`30`",
                "How often beat re-queues runs whose worker vanished.",
                "30",
                "beat: how often runs whose worker vanished are re-queued",
            ),
            S(
                "TAU2_RUN_MAX_ATTEMPTS",
                "`3`",
                "How many lost workers before the run fails with the reason.",
                "3",
                "workers lost before a run fails with the reason",
            ),
            S(
                "TAU2_AUTOREVIEW_LEASE_SECONDS",
                "3 × `TAU2_LLM_TIMEOUT` + 60",
                "An auto-review still reviewing this long after its worker claimed it is queued "
                "again (once), then failed in words.",
                "",
            ),
            S(
                "TAU2_WORKER_BEAT_SECONDS",
                "`5`",
                "How often each worker writes its liveness row.",
                "5",
                "how often each worker writes its liveness row",
            ),
            S(
                "TAU2_WORKER_ALIVE_SECONDS",
                "three beats",
                "How old a worker's last beat may be for it to count as alive "
                "(`/health/workers`, the live pages' banner).",
                "15",
                "a worker with no beat for this long is gone (/health/workers, banner)",
            ),
            S(
                "TAU2_RUN_TRANSIENT_RETRIES",
                "`4`",
                "A hop whose LLM call hit a rate limit, a provider 5xx, a timeout or a lost "
                "connection (after the call's own 3 attempts, each told on the run page) is "
                "tried again this many times; 401/402/403/404 never are.",
                "4",
                "a rate-limited/5xx/timed-out hop is tried again this often",
            ),
            S(
                "TAU2_RUN_BACKOFF_SECONDS",
                "`2`",
                "… after `BACKOFF × 2^attempt` seconds ± 50 % jitter (at most 2 minutes).",
                "2",
                "… after BACKOFF × 2^attempt s, ± 50 % jitter",
            ),
        ),
    ),
    Section(
        "Evaluations",
        "`apps.evaluations`.",
        _rows(
            "Evaluations",
            S(
                "TAU2_EVAL_MAX_IN_FLIGHT",
                "`32`",
                "Evaluation runs handed to the workers at once, in all (fair: the person with "
                "the fewest in flight goes next). Keep it below the workers' threads, so that a "
                "single run starts at once.",
                "32",
                "evaluation runs at once, in all (keep below worker threads)",
            ),
            S("TAU2_EVAL_PER_PERSON", "`16`", "… and per person.", "16", "… and per person"),
            S(
                "TAU2_EVAL_MAX_UPLOAD_BYTES",
                "50 MiB",
                "The largest `tau2 run` results file an import accepts.",
                "52428800",
            ),
            S(
                "TAU2_EVAL_JOBS_PER_PERSON",
                "`2`",
                "Imports and submission checks (jobs on the workers) of one person waiting or "
                "running at once; more is refused, saying so.",
                "2",
            ),
            S(
                "TAU2_EVAL_JOB_LEASE_SECONDS",
                "`120`",
                "A job whose worker says nothing for this long (its lease, renewed as it "
                "works) lost it and is sent again.",
                "120",
            ),
        ),
    ),
    Section(
        "Processes (docker compose)",
        "Read by `docker-compose.yml`, not by the code; see "
        "[Several processes](operations.md#several-processes).",
        _rows(
            "Processes (docker compose)",
            S(
                "POSTGRES_PASSWORD",
                "— (required)",
                "The compose PostgreSQL's password.",
                "",
                "required by docker compose",
                scope=COMPOSE,
            ),
            S(
                "WEB_CONCURRENCY",
                "`2` in compose",
                "uvicorn processes of `web` (about one per core).",
                "2",
                scope=COMPOSE,
            ),
            S(
                "TAU2_OPENENV_PROCESSES",
                "`2` in compose",
                "OpenEnv processes `python -m tau2_env.gate.session_router` runs behind one port "
                "([Several OpenEnv processes](operations.md#several-openenv-processes)).",
                "2",
                scope=COMPOSE,
            ),
            S(
                "TAU2_WORKER_PROCESSES",
                "`2`",
                "Celery worker containers (about one per core).",
                "2",
                scope=COMPOSE,
            ),
            S("TAU2_WORKER_THREADS", "`8`", "Threads of each worker.", "8", scope=COMPOSE),
            S(
                "FORWARDED_ALLOW_IPS",
                "loopback; in compose, the proxy's address",
                "uvicorn's: the proxies whose `X-Forwarded-For` the web process believes; never "
                "`*`. Compose sets it to its proxy's fixed address (`TAU2_NETWORK`), whatever "
                "`.env` says.",
                None,
                "the TLS proxy's IPs or CIDRs, without compose's proxy",
                scope=COMPOSE,
            ),
            S(
                "TAU2_PROXY_HTTP_PORT",
                "`80`",
                "The host port of the front proxy's plain HTTP "
                "([The front proxy](operations.md#the-front-proxy)); with a certificate it "
                "redirects to HTTPS.",
                None,
                scope=COMPOSE,
            ),
            S(
                "TAU2_PROXY_HTTPS_PORT",
                "`443`",
                "The host port of the front proxy's HTTPS (served when `TAU2_TLS_CERTS` holds a "
                "certificate).",
                None,
                scope=COMPOSE,
            ),
            S(
                "TAU2_TLS_CERTS",
                "`./var/certs`",
                "The host directory mounted as the proxy's certificates: `fullchain.pem` and "
                "`privkey.pem` (PEM, the chain first). Without them the proxy serves plain HTTP.",
                None,
                "a directory with fullchain.pem and privkey.pem",
                scope=COMPOSE,
            ),
            S(
                "TAU2_PROXY_MAX_BODY",
                "`64m`",
                "The largest request body of a page at the proxy (nginx's size: evaluation "
                "uploads are `TAU2_EVAL_MAX_UPLOAD_BYTES`, 50 MiB).",
                None,
                scope=COMPOSE,
            ),
            S(
                "TAU2_PROXY_AGENT_MAX_BODY",
                "`2m`",
                "The largest request body of an agent face at the proxy (at least "
                "`TAU2_AGENT_API_MAX_BODY_BYTES`, which the faces check themselves).",
                None,
                scope=COMPOSE,
            ),
            S(
                "TAU2_PROXY_TIMEOUT",
                "`3600`",
                "Seconds an agent face's answer or an open socket may stay silent at the proxy "
                "(a customer's turn waits on the LLM, its timeouts and retries).",
                None,
                scope=COMPOSE,
            ),
            S(
                "TAU2_NETWORK",
                "`10.89.0`",
                "The first three numbers of compose's network (a /24): the proxy is `.2`, the "
                "only address web and openenv believe forwarded headers from.",
                None,
                "another /24 if 10.89.0.0/24 is taken where compose runs",
                scope=COMPOSE,
            ),
        ),
    ),
    Section(
        "Not for the server's .env",
        "Set elsewhere, listed so that every name the code reads is here.",
        _rows(
            "Not for the server's .env",
            S(
                "TAU2_URL",
                "—",
                "A trainer's machine: the server TRL's environment class talks to "
                "([Train with TRL](training.md#train-with-trl)).",
                None,
                scope=CLIENT,
            ),
            S(
                "TAU2_API_KEY",
                "—",
                "A trainer's machine: the studio key (`tau2s_…`) its episodes play with.",
                None,
                scope=CLIENT,
            ),
            S(
                "TAU2_TRAINING_SESSION",
                "—",
                "A trainer's machine: the training session its episodes are grouped in.",
                None,
                scope=CLIENT,
            ),
            S(
                "TAU2_SLOTS_LEDGER",
                "set by the router",
                "The SQLite ledger of open sessions that `tau2_env.gate.session_router` gives "
                "its processes (`TAU2_SLOTS_URL` wins over it); never set by hand.",
                None,
                scope=INTERNAL,
            ),
            S(
                "SSL_CERT_FILE",
                "the system's",
                "A CA bundle for the direct path's TLS (as OpenSSL reads it), e.g. a private "
                "CA for your own endpoints.",
                None,
                scope=SYSTEM,
            ),
            S(
                "SSL_CERT_DIR",
                "the system's",
                "A directory of CA certificates, likewise.",
                None,
                scope=SYSTEM,
            ),
            S(
                "TAU2_DATA_DIR",
                "the installed τ²'s data",
                "τ²'s own: its data directory, for upstream τ²-bench "
                "([PyPI build or upstream](operations.md#2-bench-pypi-build-or-upstream)).",
                None,
                scope=SYSTEM,
            ),
        ),
    ),
)

SETTINGS: tuple[Setting, ...] = tuple(s for section in SECTIONS for s in section.settings)

# Read by the code but not a setting of the product: the operating system's, and what
# tau2-gate (tau2_env/faces/ci_gate.py) reads on a CI runner, not on the server
# (docs/ci.md): the studio key it sends, and what GitHub Actions sets.
NOT_SETTINGS = frozenset({"PATH", "TAU2_STUDIO_KEY", "GITHUB_RUN_ID", "GITHUB_STEP_SUMMARY"})

CONFIGURATION_INTRO = """\
# Configuration

<!-- Made by `python -m tau2site.settings_table --markdown`: edit tau2site/settings_table.py. -->

Everything is read from the environment, and from `.env` when there is one (the environment
wins). `.env.example` is a laptop's file (`make run` copies it); `.env.production.example`
lists every variable with production values (made from the same table as this page). Secrets
can also be given as files: `NAME_FILE=/run/secrets/name`. Booleans accept only true/false
(and 1/0, yes/no, on/off); anything else stops the server with a message.

`python manage.py check --deploy` is clean with production settings (a test checks it).
"""

ENV_PRODUCTION_INTRO = """\
# Production: every variable the project reads. Copy to `.env` on the server (docker compose
# reads it) or set them in the environment; a variable set in the environment wins over .env.
# For a laptop, use .env.example instead (`make run` copies it to .env on its first run).
# Secrets can also be given as files: NAME_FILE=/run/secrets/name.
# Made by `python -m tau2site.settings_table --env-production`: edit tau2site/settings_table.py.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """The configuration page: the introduction, then one table per section."""
    out = [CONFIGURATION_INTRO]
    for section in SECTIONS:
        out.append(f"\n## {section.title}\n")
        if section.intro:
            out.append(f"\n{section.intro}\n")
        out.append("\n| Variable | Default | Production | What it does |\n|---|---|---|---|\n")
        for s in section.settings:
            production = (
                "(not set)" if s.production is None else f"`{s.production}`" if s.production else ""
            )
            out.append(f"| `{s.name}` | {_cell(s.default)} | {production} | {_cell(s.meaning)} |\n")
    return "".join(out)


def env_production() -> str:
    """``.env.production.example``: every server and compose setting, with its production
    value (empty: none, or the default) and the comment; a setting the production file
    leaves alone is a commented line."""
    out = [ENV_PRODUCTION_INTRO]
    for section in SECTIONS:
        rows = [s for s in section.settings if s.scope in (SERVER, COMPOSE)]
        if not rows:
            continue
        out.append(f"\n# --- {section.title} " + "-" * max(3, 84 - len(section.title)) + "\n")
        for s in rows:
            line = f"# {s.name}=" if s.production is None else f"{s.name}={s.production}"
            if s.note:
                line = f"{line.ljust(32)} # {s.note}"
            out.append(line + "\n")
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--markdown", action="store_true", help="docs/configuration.md")
    which.add_argument("--env-production", action="store_true", help=".env.production.example")
    args = parser.parse_args(argv)
    sys.stdout.write(markdown() if args.markdown else env_production())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
