"""Settings, read from the environment (see .env.example for every variable).

Nothing set: the embedded laptop setup — SQLite under var/, an in-memory channel
layer, Celery tasks run by a worker inside the web process (no Redis needed).
Production: DATABASE_URL (PostgreSQL), REDIS_URL (Celery broker, results and
channels_redis), DJANGO_SECRET_KEY, ALLOWED_HOSTS, CSRF_TRUSTED_ORIGINS.
"""

from __future__ import annotations

import secrets
import warnings
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from tau2_env import config as tau2_config
from tau2site.env import envbool, envfloat, envint, envlist, envstr, load_env_file

BASE_DIR = Path(__file__).resolve().parent.parent
# A laptop's settings live in .env (from .env.example); the real environment wins.
ENV_FILE = load_env_file(BASE_DIR / ".env")
VAR_DIR = Path(envstr("TAU2_VAR_DIR") or BASE_DIR / "var")
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = envbool("DEBUG", False)


def _secret_key() -> str:
    key = envstr("DJANGO_SECRET_KEY")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set when DEBUG is off "
            '(python -c "import secrets; print(secrets.token_urlsafe(50))"). '
            "On a laptop: `cp .env.example .env` (DEBUG=true), as `make run` does."
        )
    # A laptop: one random key per checkout, kept so sessions survive restarts.
    path = VAR_DIR / "dev-secret-key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50), encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


SECRET_KEY = _secret_key()

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "apps.accounts",
    "social_django",
    "apps.tasks",
    "apps.runs",
    "apps.play",
    "apps.evaluations",
    "apps.races",
    "apps.agents",
    "apps.training",
    "apps.datasets",
    "apps.inference",
    "apps.connections",
    "apps.workers",
    "apps.notifications",
    "django_celery_beat",
    "apps.schedules",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # 400 for a NUL character in the path, the query string or a form field.
    "tau2site.middleware.RejectNulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "social_django.middleware.SocialAuthExceptionMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # After XFrameOptionsMiddleware, so it sees the response first (Space iframe framing).
    "tau2site.middleware.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, so its process_exception sees a view's error first: 503 for a database outage.
    "tau2site.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "tau2site.urls"
WSGI_APPLICATION = "tau2site.wsgi.application"
ASGI_APPLICATION = "tau2site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "tau2site.context_processors.catalogue",
                "apps.accounts.context_processors.account",
                "tau2site.context_processors.worker_liveness",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------------
DATABASE_URL = envstr("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL, conn_max_age=envint("DB_CONN_MAX_AGE", 0), conn_health_checks=True
        )
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "db.sqlite3",
            "OPTIONS": {
                # The embedded worker writes from threads while pages read: WAL lets
                # readers go on, IMMEDIATE makes writers queue instead of failing.
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: Celery and Channels ------------------------------------------------------------
REDIS_URL = envstr("REDIS_URL")

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # No client-side socket timeout. channels_redis's reads block at most 5 s
                # on the server (BZPOPMIN), so none is needed, and with one redis-py sends
                # every command through asyncio.wait_for, which on Python 3.11 can swallow
                # a cancellation (CPython gh-86296, fixed in 3.12): a consumer whose socket
                # closed was left polling Redis every 5 s for ever (seen as a test hanging
                # in teardown, 3 runs in 10). A dead Redis peer is still noticed: TCP
                # keepalive (redis-py's default: idle 30 s, 3 probes 5 s apart) breaks the
                # connection in about 45 s.
                "hosts": [{"address": REDIS_URL, "socket_timeout": None, "socket_keepalive": True}],
                "prefix": envstr("CHANNELS_PREFIX", "tau2"),
                # Every consumer of a web process shares one Redis key, and group_send
                # drops (logging at INFO only) what exceeds its capacity: the default of
                # 100 lost final status lines of busy pages at 100 live runs. Messages
                # still expire after 60 s, which bounds the key.
                "capacity": envint("TAU2_CHANNEL_CAPACITY", 5000, minimum=100),
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# kombu's in-memory transport ignores the host; naming one spares kombu's "No hostname" warning.
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
CELERY_RESULT_BACKEND = REDIS_URL or "cache+memory://"
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = envstr("CELERY_QUEUE", "tau2")
# Without a broker the web process runs a Celery worker in a thread (tau2site.embedded_worker).
TAU2_EMBEDDED_WORKER = envbool("TAU2_EMBEDDED_WORKER", CELERY_BROKER_URL.startswith("memory://"))
TAU2_EMBEDDED_WORKER_CONCURRENCY = envint("TAU2_EMBEDDED_WORKER_CONCURRENCY", 4, minimum=1)

# --- Worker liveness (apps.workers) ---------------------------------------------------------
# Each worker process writes its row every TAU2_WORKER_BEAT_SECONDS, to the database (so it
# goes on while Redis is away); a worker is alive while its last beat is at most
# TAU2_WORKER_ALIVE_SECONDS old (three beats unless set).
TAU2_WORKER_BEAT_SECONDS = envfloat("TAU2_WORKER_BEAT_SECONDS", 5.0, minimum=0.5)
TAU2_WORKER_ALIVE_SECONDS = envfloat(
    "TAU2_WORKER_ALIVE_SECONDS", 3 * TAU2_WORKER_BEAT_SECONDS, minimum=1.0
)
if TAU2_WORKER_ALIVE_SECONDS <= TAU2_WORKER_BEAT_SECONDS:
    raise ImproperlyConfigured("TAU2_WORKER_ALIVE_SECONDS must be longer than a beat")
# An orchestrator's probe of /health/workers asks over plain HTTP, by address.
SECURE_REDIRECT_EXEMPT = [r"^health/workers$"]

# --- τ²-bench --------------------------------------------------------------------------------
TAU2_DOMAIN = tau2_config.default_domain()  # the engine's own defaults, read by its reader
TAU2_SPLIT = tau2_config.default_split()
TAU2_EXPLORER_PAGE_SIZE = envint("TAU2_EXPLORER_PAGE_SIZE", 48, minimum=1)

# --- Runs (apps.runs) -------------------------------------------------------------------
TAU2_RUN_MAX_STEPS = envint("TAU2_RUN_MAX_STEPS", 200, minimum=1)
# A worker renews its lease on a run every third of this; a run whose lease ran out lost
# its worker and is resumed elsewhere by the reaper (beat, every TAU2_RUN_REAP_SECONDS).
TAU2_RUN_LEASE_SECONDS = envint("TAU2_RUN_LEASE_SECONDS", 60, minimum=3)
# An auto-review still "reviewing" this long after its worker claimed it lost that worker
# (its one reviewer call may take TAU2_LLM_TIMEOUT, retried twice for rate limits).
TAU2_AUTOREVIEW_LEASE_SECONDS = envint(
    "TAU2_AUTOREVIEW_LEASE_SECONDS",
    3 * int(tau2_config.llm_timeout()) + 60,
    minimum=10,
)
TAU2_RUN_REAP_SECONDS = envint("TAU2_RUN_REAP_SECONDS", 30, minimum=1)
# Runs of one person on their own endpoints (personal connections) going at once; more
# wait in the queue, asked again every TAU2_OWN_ENDPOINT_WAIT_SECONDS, so one member's
# slow server cannot hold every worker.
TAU2_OWN_ENDPOINT_RUNS_PER_PERSON = envint("TAU2_OWN_ENDPOINT_RUNS_PER_PERSON", 2, minimum=1)
TAU2_OWN_ENDPOINT_WAIT_SECONDS = envint("TAU2_OWN_ENDPOINT_WAIT_SECONDS", 5, minimum=1)
TAU2_RUN_MAX_ATTEMPTS = envint("TAU2_RUN_MAX_ATTEMPTS", 3, minimum=1)
# A rate limit, a provider's 5xx or a timeout: the hop is tried again this many times,
# after TAU2_RUN_BACKOFF_SECONDS × 2^attempt (± 50 % jitter, at most 2 minutes).
TAU2_RUN_TRANSIENT_RETRIES = envint("TAU2_RUN_TRANSIENT_RETRIES", 4, minimum=0)
TAU2_RUN_BACKOFF_SECONDS = envfloat("TAU2_RUN_BACKOFF_SECONDS", 2.0, minimum=0.0)

# --- Evaluations (apps.evaluations) ----------------------------------------------------
# Runs of evaluations in flight at once, for everyone and per person: kept below the
# workers' threads, so that a single run someone starts begins at once.
TAU2_EVAL_MAX_IN_FLIGHT = envint("TAU2_EVAL_MAX_IN_FLIGHT", 32, minimum=1)
TAU2_EVAL_PER_PERSON = envint("TAU2_EVAL_PER_PERSON", 16, minimum=1)
TAU2_EVAL_MAX_UPLOAD_BYTES = envint("TAU2_EVAL_MAX_UPLOAD_BYTES", 50 * 1024 * 1024, minimum=1024)
# Imports and submission checks run as jobs on the workers: at most this many of one
# person's wait or run at once (more is refused, saying so), and a job whose worker says
# nothing for this long (its lease; renewed as it works) lost it and is sent again.
TAU2_EVAL_JOBS_PER_PERSON = envint("TAU2_EVAL_JOBS_PER_PERSON", 2, minimum=1)
TAU2_EVAL_JOB_LEASE_SECONDS = envint("TAU2_EVAL_JOB_LEASE_SECONDS", 120, minimum=5)

# --- Static files -------------------------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)  # whitenoise warns on every request when it is missing
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if envbool("STATIC_MANIFEST", False)
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
# Serve straight from the source folders unless the image ran collectstatic.
WHITENOISE_USE_FINDERS = not envbool("STATIC_MANIFEST", False)
# whitenoise hands Django a file iterator, which Django's ASGI handler reads in a thread
# and warns about on the first static file of every process: expected, and harmless.
warnings.filterwarnings(
    "ignore", message="StreamingHttpResponse must consume synchronous iterators"
)

# --- Internationalisation -----------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = envstr("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- API ------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    # A studio key (Authorization: Bearer tau2s_…, scoped: read, or read and start), or
    # the session of a signed-in person: nobody has a password here (Hugging Face signs
    # people in), and HTTP Basic looked up any username it was sent — with a NUL in it, a
    # 500.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.agents.api_auth.StudioKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PAGINATION_CLASS": "apps.tasks.pagination.Pagination",  # limit at most 1,000
    "PAGE_SIZE": 100,
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "τ²-bench studio API",
    "DESCRIPTION": (
        "τ²-bench's domains and tasks, the agent models, and the team's evaluations with "
        "τ²'s metrics; with a studio key that may start, start an evaluation and pause, "
        "resume, stop or retry it."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Security -------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    # Behind a TLS-terminating proxy (a Space, a load balancer) that sets X-Forwarded-Proto.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", True)
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", False)
    # Preloading is a commitment for the whole domain; an operator opts in with
    # SECURE_HSTS_PRELOAD=true, so its reminder stays silent.
    SILENCED_SYSTEM_CHECKS = ["security.W021"]

# --- Sign-in (apps.accounts) ---------------------------------------------------------------
# Hugging Face OAuth / OpenID Connect. On a Space, HF injects OAUTH_CLIENT_ID,
# OAUTH_CLIENT_SECRET, OPENID_PROVIDER_URL and SPACE_HOST; elsewhere set
# SOCIAL_AUTH_HUGGINGFACE_KEY / _SECRET. Endpoints come from OPENID_PROVIDER_URL's discovery
# document, read at request time (tests point it at a local fake).
OPENID_PROVIDER_URL = envstr("OPENID_PROVIDER_URL", "https://huggingface.co").rstrip("/")
SPACE_HOST = envstr("SPACE_HOST")
SOCIAL_AUTH_HUGGINGFACE_KEY = envstr("OAUTH_CLIENT_ID") or envstr("SOCIAL_AUTH_HUGGINGFACE_KEY")
SOCIAL_AUTH_HUGGINGFACE_SECRET = envstr("OAUTH_CLIENT_SECRET") or envstr(
    "SOCIAL_AUTH_HUGGINGFACE_SECRET"
)
# true: sign-in also asks for write-repos and manage-repos, which pushing a dataset to the
# Hub on a person's own token needs (apps.datasets); the OAuth app must allow them.
TAU2_HF_SIGNIN_WRITE_REPOS = envbool("TAU2_HF_SIGNIN_WRITE_REPOS", False)
AUTHENTICATION_BACKENDS = [
    "apps.accounts.backends.HuggingFaceOAuth2",
    "django.contrib.auth.backends.ModelBackend",
]
SOCIAL_AUTH_PIPELINE = (
    "social_core.pipeline.social_auth.social_details",
    "social_core.pipeline.social_auth.social_names",
    "social_core.pipeline.social_auth.social_uid",
    "social_core.pipeline.social_auth.auth_allowed",
    "apps.accounts.pipeline.require_allowed_org",
    "social_core.pipeline.social_auth.social_user",
    "social_core.pipeline.user.get_username",
    "social_core.pipeline.user.create_user",
    "social_core.pipeline.social_auth.associate_user",
    "social_core.pipeline.social_auth.load_extra_data",
    # Moves the tokens into the encrypted vault and out of UserSocialAuth.extra_data.
    "apps.accounts.pipeline.store_tokens_in_vault",
    "social_core.pipeline.user.user_details",
)
SOCIAL_AUTH_URL_NAMESPACE = "social"
SOCIAL_AUTH_LOGIN_REDIRECT_URL = "/"
# Behind the TLS proxy the request is already https (SECURE_PROXY_SSL_HEADER); where the
# site forces https anyway, the callback URL given to HF is https whatever the proxy says.
SOCIAL_AUTH_REDIRECT_IS_HTTPS = not DEBUG and SECURE_SSL_REDIRECT
SOCIAL_AUTH_RAISE_EXCEPTIONS = False  # a failed sign-in is a page, not a traceback
SOCIAL_AUTH_REQUESTS_TIMEOUT = envint("TAU2_HF_OAUTH_TIMEOUT", 10, minimum=1)
LOGIN_URL = "accounts:signin"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"
if SPACE_HOST:
    # A Space is reached as https://<SPACE_HOST> through HF's TLS proxy.
    ALLOWED_HOSTS = [*ALLOWED_HOSTS, SPACE_HOST]
    CSRF_TRUSTED_ORIGINS = [*CSRF_TRUSTED_ORIGINS, f"https://{SPACE_HOST}"]

# Inside a Space the app is framed by huggingface.co: cookies must be SameSite=None; Secure
# and frame-ancestors must allow HF (tau2site.middleware) instead of X-Frame-Options.
TAU2_EMBED_IN_SPACE = envbool("TAU2_EMBED_IN_SPACE", bool(SPACE_HOST))
TAU2_FRAME_ANCESTORS = envlist(
    "TAU2_FRAME_ANCESTORS", ["https://huggingface.co", "https://*.hf.space"]
)
if TAU2_EMBED_IN_SPACE:
    SESSION_COOKIE_SAMESITE = "None"
    CSRF_COOKIE_SAMESITE = "None"
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True


def _vault_keys() -> list[str]:
    keys = envlist("TAU2_VAULT_KEYS")
    if keys:
        return keys
    if not DEBUG:
        raise ImproperlyConfigured(
            "TAU2_VAULT_KEYS must be set when DEBUG is off: it encrypts visitors' Hugging Face "
            'tokens (python -c "from cryptography.fernet import Fernet; '
            'print(Fernet.generate_key().decode())").'
        )
    # A laptop: one random key per checkout, kept so stored tokens survive restarts.
    from cryptography.fernet import Fernet

    path = VAR_DIR / "dev-vault-key"
    if not path.exists():
        path.write_text(Fernet.generate_key().decode(), encoding="utf-8")
        path.chmod(0o600)
    return [path.read_text(encoding="utf-8").strip()]


# Fernet keys, comma-separated: the first encrypts, all decrypt (rotate_vault_keys re-encrypts).
TAU2_VAULT_KEYS = _vault_keys()
TAU2_TOKEN_REFRESH_MARGIN = envint("TAU2_TOKEN_REFRESH_MARGIN", 300, minimum=0)  # seconds
TAU2_PUBLIC_RUNS = envbool("TAU2_PUBLIC_RUNS", False)
# Every signed-in member may label runs on the run page, not only staff.
TAU2_REVIEW_BY_MEMBERS = envbool("TAU2_REVIEW_BY_MEMBERS", False)
TAU2_ALLOWED_ORGS = envlist("TAU2_ALLOWED_ORGS")
# A sign-in without Hugging Face for laptops; refused (404) unless DEBUG is on too.
TAU2_DEV_LOGIN = envbool("TAU2_DEV_LOGIN", False)

# --- The agent faces (OpenEnv's API, /agent/mcp): tau2_env.gate.guard ---------------------------
# They answer ALLOWED_HOSTS only, refuse browser Origins other than the site's own and
# CSRF_TRUSTED_ORIGINS, read JSON bodies only, at most this large (and frames too).
# The faces serve only clients with a studio API key (tau2s_…): anonymous clients are
# refused and the server's own credential (HF_TOKEN) is never spent for them. On by
# default where a server credential is set and DEBUG is off: a server others can reach
# would otherwise spend it for anyone who asks.
# A studio key may be given its own cap of sessions at once when it is made (a trainer's
# batch: one session per generation), at most TAU2_SESSIONS_PER_KEY_MAX (default 256);
# keys without one share TAU2_SESSIONS_PER_CLIENT with their owner's other keys.
try:
    TAU2_AGENT_API_MAX_BODY_BYTES = tau2_config.agent_api_max_body_bytes()
    _SERVER_CREDENTIAL = tau2_config.provider_settings().server_credential is not None
    TAU2_SESSIONS_PER_CLIENT = tau2_config.sessions_per_client()
    TAU2_SESSIONS_PER_KEY_MAX = tau2_config.sessions_per_key_max()
except tau2_config.ConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from exc
TAU2_AGENT_API_REQUIRE_KEY = envbool("TAU2_AGENT_API_REQUIRE_KEY", _SERVER_CREDENTIAL and not DEBUG)


def _agents_url() -> str:
    """``TAU2_AGENTS_URL`` without its trailing slash ("" when unset); raises
    ``ImproperlyConfigured`` unless it is an http(s) URL with a host and no query."""
    value = (envstr("TAU2_AGENTS_URL") or "").strip().rstrip("/")
    parts = urlsplit(value)
    if value and (
        parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment
    ):
        raise ImproperlyConfigured(
            f"TAU2_AGENTS_URL must be an http(s) URL such as https://tau2.example.org, "
            f"got {value!r}"
        )
    return value


# The agents' public URL, which the connect page, its snippets and the keys page print.
# Blank: the site's own, as the request reached it — the front proxy (deploy/nginx) sends
# the agent faces' paths to openenv and the rest to web, so one address serves both.
TAU2_AGENTS_URL = _agents_url()

# --- Training sessions (apps.training) ---------------------------------------------------
# Training on a split one of the team's evaluations uses leaks training into the
# benchmark ("train on `train`, evaluate on `test`"): "warn" (default) says so on the
# session's page and in each such episode's opening; "refuse" refuses the reset.
TAU2_TRAINING_SPLIT_GUARD = (envstr("TAU2_TRAINING_SPLIT_GUARD", "warn") or "warn").lower()
if TAU2_TRAINING_SPLIT_GUARD not in ("warn", "refuse"):
    raise ImproperlyConfigured(
        f"TAU2_TRAINING_SPLIT_GUARD must be warn or refuse, got {TAU2_TRAINING_SPLIT_GUARD!r}"
    )

# --- Connections: models beyond Hugging Face's router (apps.connections) -----------------
# Each kind's API when a connection names no base URL of its own (tests point them at
# local scripted servers). An OpenAI-compatible endpoint always names its own.
TAU2_PROVIDER_URLS = {
    "openai": envstr("OPENAI_BASE_URL") or "https://api.openai.com/v1",
    "anthropic": envstr("ANTHROPIC_BASE_URL") or "https://api.anthropic.com",
    "gemini": envstr("GEMINI_BASE_URL") or "https://generativelanguage.googleapis.com",
    "mistral": envstr("MISTRAL_BASE_URL") or "https://api.mistral.ai/v1",
    "openrouter": envstr("OPENROUTER_BASE_URL") or "https://openrouter.ai/api/v1",
    "together": envstr("TOGETHER_BASE_URL") or "https://api.together.xyz/v1",
    "fireworks": envstr("FIREWORKS_BASE_URL") or "https://api.fireworks.ai/inference/v1",
}
# The customer models taubench.com's leaderboard uses: an evaluation whose customer is
# one of them, at the leaderboard's settings, is marked comparable (names as OpenAI's).
TAU2_LEADERBOARD_CUSTOMERS = envlist("TAU2_LEADERBOARD_CUSTOMERS", ["gpt-4.1", "gpt-5.2"])
# The τ² release taubench.com's current (not legacy) results run: only an evaluation on
# that release's task sets can be marked comparable; older ones are its "legacy" list.
TAU2_LEADERBOARD_TAU2_VERSION = envstr("TAU2_LEADERBOARD_TAU2_VERSION") or "1.0.1"
# Seconds a connection's Test (one tiny tool call) and its "Read models from the endpoint"
# wait for an answer, in the web request: the page never hangs longer.
TAU2_CONNECTION_TEST_TIMEOUT = envint("TAU2_CONNECTION_TEST_TIMEOUT", 15, minimum=1)
# Presses of a budgeted connection's Test each person may make in any hour (0: none): a
# Test's call is no run, so no budget counts it; this bounds what it spends instead.
TAU2_CONNECTION_TESTS_PER_HOUR = envint("TAU2_CONNECTION_TESTS_PER_HOUR", 10, minimum=0)

# Webhooks (apps.notifications). Seconds one delivery attempt may take, the whole answer
# included (the outbound policy's deadline): a slow receiver never holds a worker longer.
TAU2_WEBHOOK_TIMEOUT = envfloat("TAU2_WEBHOOK_TIMEOUT", 10.0, minimum=0.1)


# Seconds between a failed attempt and the next, in order; after the last, the delivery is
# marked failed. The default covers a receiver down for about 18 minutes.
def _webhook_backoff() -> list[float]:
    raw = envlist("TAU2_WEBHOOK_BACKOFF", ["10", "30", "60", "120", "300", "600"])
    try:
        seconds = [float(item) for item in raw]
    except ValueError:
        seconds = []
    if not seconds or any(s < 0 for s in seconds):
        raise ImproperlyConfigured(
            "TAU2_WEBHOOK_BACKOFF must be seconds between attempts, separated by commas "
            f"(e.g. 10,30,60,120,300), not {','.join(raw)!r}"
        )
    return seconds


TAU2_WEBHOOK_BACKOFF = _webhook_backoff()
# The studio's address as people open it, for links in notifications (the evaluation's
# page); empty: TAU2_AGENTS_URL, else https://SPACE_HOST, else http://localhost:8000.
TAU2_SITE_URL = (
    (envstr("TAU2_SITE_URL") or "").strip().rstrip("/")
    or TAU2_AGENTS_URL
    or (f"https://{SPACE_HOST}" if SPACE_HOST else "http://localhost:8000")
)

# --- Inference Providers catalogue (apps.inference) ---------------------------------------
# The agent models: copied from {TAU2_HF_ROUTER_URL}/models by Celery beat every
# TAU2_MODELS_REFRESH_SECONDS, and on demand (`manage.py refresh_models`, staff's Refresh).
TAU2_MODELS_REFRESH_SECONDS = envint("TAU2_MODELS_REFRESH_SECONDS", 3600, minimum=60)
TAU2_MODELS_TIMEOUT = envint("TAU2_MODELS_TIMEOUT", 15, minimum=1)  # seconds per router read
# Installed (unpriced, providers unknown) only when the router cannot be read and nothing
# is stored yet: well-known chat models that call tools.
TAU2_MODELS_FALLBACK = envlist(
    "TAU2_MODELS_FALLBACK",
    [
        "deepseek-ai/DeepSeek-V4.1-Flash",
        "deepseek-ai/DeepSeek-V3.1",
        "Qwen/Qwen3-235B-A22B-Instruct-2507",
        "meta-llama/Llama-3.3-70B-Instruct",
        "openai/gpt-oss-120b",
        "moonshotai/Kimi-K2-Instruct",
    ],
)
for _name in TAU2_MODELS_FALLBACK:
    if _name.count("/") != 1 or ":" in _name:
        raise ImproperlyConfigured(f"TAU2_MODELS_FALLBACK holds {_name!r}, not an org/model id")

# --- Celery beat: every periodic task, in one place ---------------------------------------
# Beat keeps its schedule in the database (django-celery-beat): the entries below are
# synced into it at beat's start, beside the evaluation schedules people make
# (apps.schedules). "expire_seconds" is that scheduler's name for a message's expiry.
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    # A reap or dispatch tick nobody took within a period is dropped (the next does the same
    # work): with no worker alive beat's ticks piled up, and a returning worker ran each.
    "runs-reap": {
        "task": "runs.reap",
        "schedule": float(TAU2_RUN_REAP_SECONDS),
        "options": {"expire_seconds": int(TAU2_RUN_REAP_SECONDS)},
    },
    # Imports and submission checks whose worker or message was lost: sent again, or failed.
    "evaluations-jobs-reap": {
        "task": "evaluations.jobs_reap",
        "schedule": float(TAU2_RUN_REAP_SECONDS),
        "options": {"expire_seconds": int(TAU2_RUN_REAP_SECONDS)},
    },
    # Start what evaluations may start (also done whenever one of their runs ends).
    "evaluations-dispatch": {
        "task": "evaluations.dispatch",
        "schedule": float(TAU2_RUN_REAP_SECONDS),
        "options": {"expire_seconds": int(TAU2_RUN_REAP_SECONDS)},
    },
    # Webhook deliveries whose worker or message was lost: sent again.
    "notifications-reap": {
        "task": "notifications.reap",
        "schedule": float(TAU2_RUN_REAP_SECONDS),
        "options": {"expire_seconds": int(TAU2_RUN_REAP_SECONDS)},
    },
    "inference-refresh-catalogue": {
        "task": "apps.inference.tasks.refresh_catalogue",
        "schedule": float(TAU2_MODELS_REFRESH_SECONDS),
        # A tick nobody took in time is dropped: the next one does the same work.
        "options": {"expire_seconds": int(TAU2_MODELS_REFRESH_SECONDS)},
    },
}

# --- Logging --------------------------------------------------------------------------------
LOG_LEVEL = envstr("LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"expected_forbidden": {"()": "tau2site.logfilters.ExpectedForbidden"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's own records once, on our console: its default adds a second console
        # handler under DEBUG, and every record was printed twice.
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # A refused visitor (403 from PermissionDenied) is one line, not a traceback.
        "django.request": {"filters": ["expected_forbidden"]},
        # litellm logs request payloads (and so keys) at DEBUG.
        "LiteLLM": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
    },
}
