"""HarnessOps settings: one module, two modes, all from the environment.

HARNESSOPS_MODE=embedded (default, `make run`): SQLite, in-memory channel layer,
Celery tasks run in-process, the offline model. DEBUG (tracebacks in the browser)
is off unless DJANGO_DEBUG=1 is set; production never turns it on. Setting DATABASE_URL / REDIS_URL
switches those parts to PostgreSQL / Redis (tests in CI do this).

HARNESSOPS_MODE=production: every external service must be named explicitly,
DEBUG is off and the deploy checks pass (`manage.py check --deploy`).
"""

import json
import secrets
from pathlib import Path

import dj_database_url

from console.env import env

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env("HARNESSOPS_VAR_DIR", str(BASE_DIR / "var")))

MODE = env("HARNESSOPS_MODE", "embedded")
if MODE not in {"embedded", "production"}:
    raise ValueError(f"HARNESSOPS_MODE must be embedded or production, not {MODE!r}")
PRODUCTION = MODE == "production"


def _embedded_secret_key() -> str:
    """A per-checkout key kept in var/, so sessions survive restarts of `make run`."""
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()


if PRODUCTION:
    SECRET_KEY = env("DJANGO_SECRET_KEY")
    DEBUG = False
    ALLOWED_HOSTS = env("DJANGO_ALLOWED_HOSTS", cast=list)
    CSRF_TRUSTED_ORIGINS = env("DJANGO_CSRF_TRUSTED_ORIGINS", [], cast=list)
else:
    SECRET_KEY = env("DJANGO_SECRET_KEY", None) or _embedded_secret_key()
    # Debug pages show tracebacks and settings to whoever triggers an error: only when asked for.
    DEBUG = env("DJANGO_DEBUG", False, cast=bool)
    ALLOWED_HOSTS = env("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"], cast=list)
    CSRF_TRUSTED_ORIGINS = env("DJANGO_CSRF_TRUSTED_ORIGINS", [], cast=list)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "channels",
    "ninja",
    "workspaces",
    "console",
    "harness",
    "serving",
    "evaluation",
    "evaluation.evolution.apps.EvolutionConfig",
    "training",
]

MIDDLEWARE = [
    "console.health.HealthCheckMiddleware",  # first: container probes reach it over plain HTTP on 127.0.0.1
    "console.metrics.MetricsMiddleware",  # a scrape too: Prometheus reaches the web containers by their address
    # console.middleware.*: Django's own, as subclasses that stay on the event loop under ASGI unless a hook does I/O;
    # security, CSRF and clickjacking stay Django's (`check --deploy` finds those by path)
    "django.middleware.security.SecurityMiddleware",
    "console.static_files.StaticFilesMiddleware",  # WhiteNoise: static files from the ASGI server itself
    "console.middleware.SessionMiddleware",
    "console.middleware.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "console.middleware.AuthenticationMiddleware",
    "console.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"

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
                "console.context.workspaces",
            ],
        },
    },
]

# Databases: DATABASE_URL wins; production requires it.
DATABASES = {"default": dj_database_url.parse(
    env("DATABASE_URL") if PRODUCTION else env("DATABASE_URL", f"sqlite:///{VAR_DIR / 'harnessops.sqlite3'}"))}
# PostgreSQL connections come from a pool (psycopg_pool through Django's "pool" option). Under ASGI each request
# runs its sync code in a thread of its own, so Django's per-thread connections, CONN_MAX_AGE or not, would open a
# new PostgreSQL connection for every request: about 10 ms of a reply's wall time (benchmarks/reply_path.py --asgi).
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env("DATABASE_POOL", True, cast=bool):
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1, "max_size": env("DATABASE_POOL_MAX_SIZE", 16, cast=int), "timeout": 10}
    # With the pool, Django's health checks make psycopg_pool try a connection idle in the pool (one empty round
    # trip) before a request gets it: after PostgreSQL restarts each dead one is replaced instead of failing a
    # request (tests/serving/test_fault_postgres.py).
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DATABASES["default"].setdefault("TEST", {})
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis: broker for Celery and the channel layer. Without it (embedded) tasks run
# in-process and websockets use the in-memory layer.
REDIS_URL = env("REDIS_URL") if PRODUCTION else env("REDIS_URL", None)
# A consumer waits for its next event with a blocking BZPOPMIN of channels-redis's `brpop_timeout` (5 s);
# redis-py 8 gives every socket read a 5 s timeout by default, so an idle consumer's wait raced its own
# read timeout, lost under load, and the consumer died (the websocket closed with 1011). The read
# timeout must outlast the blocking wait.
CHANNEL_LAYER_READ_TIMEOUT_S = 30
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                    "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": CHANNEL_LAYER_READ_TIMEOUT_S}]}}
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_TASK_ROUTES = {"evaluation.*": {"queue": "cpu"}, "evolution.*": {"queue": "cpu"}, "training.*": {"queue": "gpu"}}
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Jobs are acknowledged when they finish (acks_late). The broker hands an unacknowledged job back after
# this many seconds: that is how a dead worker's job resumes elsewhere. Redis cannot tell a dead worker from
# a busy one, so a job running longer is handed back too: long jobs (eval runs, up to their 6 h time limit)
# hold a single-flight lock (workspaces/jobs.py) and a second delivery steps aside. Short acks_late tasks
# (evaluation.judge_live_trace, 300 s) must stay under this timeout.
# Idle workers look for handed-back jobs every HARNESSOPS_BROKER_RESTORE_INTERVAL_S (kombu's default
# sweep is ten times its interval, ~100 s; throttle 1 makes the interval the period).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env("HARNESSOPS_BROKER_VISIBILITY_TIMEOUT_S", 3600, cast=int),
    "unacked_restore_interval": env("HARNESSOPS_BROKER_RESTORE_INTERVAL_S", 60, cast=int),
    "unacked_restore_throttle": 1,
}

# Cache: per-key rate limits. Redis when available, so limits hold across processes.
if REDIS_URL:
    # Timeouts: a blackholed Redis answers within seconds (serving/admission.py: replies then degrade), not after
    # the OS's TCP timeout.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                          "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 2.0}}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Model backends (serving/backends). `local` is the offline SmolLM2 model; `openai` any
# OpenAI-compatible server such as vLLM; `scripted` is for tests and refused in production.
MODEL_BACKEND = env("HARNESSOPS_MODEL_BACKEND", "openai" if PRODUCTION else "local")
# A GGUF for the `local` backend; unset: the embedded trained default if built (make run), else base SmolLM2.
LOCAL_MODEL = env("HARNESSOPS_LOCAL_MODEL", None)
# The model behind the evolution proposer harness (a backend name, e.g. openai); empty: offline rules only.
EVOLUTION_PROPOSER = env("HARNESSOPS_EVOLUTION_PROPOSER", "")
# Overrides of the regression gate an evolution round's candidate must pass on the gate split (JSON object, e.g.
# {"min_cases": 20}); the rule is validated like any comparison's, and stored with each round's comparison.
EVOLUTION_GATE: dict = json.loads(env("HARNESSOPS_EVOLUTION_GATE", "{}"))
OPENAI_BASE_URL = env("HARNESSOPS_OPENAI_BASE_URL", None)
OPENAI_MODEL = env("HARNESSOPS_OPENAI_MODEL", "Qwen/Qwen3-8B")
OPENAI_API_KEY = env("HARNESSOPS_OPENAI_API_KEY", None)
OPENAI_TIMEOUT_S = env("HARNESSOPS_OPENAI_TIMEOUT_S", 30.0, cast=float)
# A scripted backend replays these steps for every turn (tests, benchmarks); JSON list of steps.
SCRIPTED_STEPS: list = json.loads(env("HARNESSOPS_SCRIPTED_STEPS", "[]"))
SCRIPTED_DELAY_S = env("HARNESSOPS_SCRIPTED_DELAY_S", 0.0, cast=float)  # emulated model latency

# Training (training/): checkpoints, adapters, metrics and resolved configs live under this directory,
# which every worker that trains or serves a checkpoint must see (a shared volume in production).
TRAINING_ARTIFACTS_DIR = Path(env("HARNESSOPS_TRAINING_ARTIFACTS_DIR", str(VAR_DIR / "training")))
# A worker holds a running job by a heartbeat; a redelivered copy of the task (the broker's visibility
# timeout passed during a long job) waits while the heartbeat is younger than this, and takes over
# (resuming from the last checkpoint) once it is older: the holder died.
TRAINING_LEASE_S = env("HARNESSOPS_TRAINING_LEASE_S", 120.0, cast=float)
# How a worker runs a job's pipeline: unset (the default, CPU workers) in its own process; a JSON object
# of `training.launch.LaunchConfig` fields (e.g. {"gpus_per_node": 8} or {"deepspeed": "zero3"}) through
# `accelerate launch` with that topology (GPU workers; docs/training.md).
def _json_object(raw: str) -> dict:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


TRAINING_LAUNCH: dict | None = env("HARNESSOPS_TRAINING_LAUNCH", None, cast=_json_object)

# Platform reply API limits.
REPLY_RATE_PER_MINUTE = env("HARNESSOPS_REPLY_RATE_PER_MINUTE", 600, cast=int)
REPLY_MAX_BODY_BYTES = env("HARNESSOPS_REPLY_MAX_BODY_BYTES", 256 * 1024, cast=int)
# Webhooks (workspaces.webhooks): a CA bundle to trust besides the system's (an internal CA), the waits (s)
# before the 2nd, 3rd, … attempt of a failed delivery, and the Celery queue deliveries run on.
WEBHOOK_CA_BUNDLE = env("HARNESSOPS_WEBHOOK_CA_BUNDLE", None)
WEBHOOK_BACKOFF_S = tuple(float(s) for s in env("HARNESSOPS_WEBHOOK_BACKOFF_S", "10,60,300,1800").split(","))
WEBHOOK_QUEUE = env("HARNESSOPS_WEBHOOK_QUEUE", "cpu")
# Judge models by name (OpenAI-compatible endpoints) the Agent-as-a-Judge votes with; JSON object
# name → {base_url, model, api_key_env?, timeout_s?} (evaluation/judges/judge_models.py).
JUDGE_MODELS: dict = json.loads(env("HARNESSOPS_JUDGE_MODELS", "{}"))
# Which judge models a plain "harness" judge (and the live-traffic judge) votes with; empty: the run's backend.
JUDGE_DEFAULT: list = env("HARNESSOPS_JUDGE_DEFAULT", [], cast=list)
# Share of experiment replies scored by the live-traffic judge (the Agent-as-a-Judge), 0..1.
LIVE_JUDGE_RATE = env("HARNESSOPS_LIVE_JUDGE_RATE", 0.1, cast=float)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# collectstatic's target: production images collect into it; the embedded mode serves from the apps.
STATIC_ROOT = env("DJANGO_STATIC_ROOT", str(BASE_DIR / "staticfiles") if PRODUCTION else None)
# Without collectstatic (embedded mode, tests) WhiteNoise serves straight from the app folders.
WHITENOISE_USE_FINDERS = not PRODUCTION
# Front-end packages come from npm (package.json, `npm ci` in `make install`), served as published under
# static/vendor/<package>/; the code editor is bundled from npm packages into static_build/ at install time.
NODE_MODULES = BASE_DIR / "node_modules"
STATICFILES_DIRS = [
    ("vendor/htmx.org", NODE_MODULES / "htmx.org" / "dist"),
    ("vendor/chart.js", NODE_MODULES / "chart.js" / "dist"),
    ("vendor/chartjs-chart-matrix", NODE_MODULES / "chartjs-chart-matrix" / "dist"),
    ("build", BASE_DIR / "static_build"),
]

# Limits that keep bad input from becoming half-written state.
DATA_UPLOAD_MAX_MEMORY_SIZE = env("HARNESSOPS_MAX_UPLOAD_BYTES", 5 * 1024 * 1024, cast=int)
HARNESS_ZIP_MAX_BYTES = env("HARNESSOPS_HARNESS_ZIP_MAX_BYTES", 2 * 1024 * 1024, cast=int)

if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env("DJANGO_SECURE_SSL_REDIRECT", True, cast=bool)
    SECURE_HSTS_SECONDS = env("DJANGO_SECURE_HSTS_SECONDS", 31536000, cast=int)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env("HARNESSOPS_LOG_LEVEL", "INFO")},
    # httpx logs every request at INFO: a line per model call, tool call and judge call would drown ours.
    "loggers": {"httpx": {"level": "WARNING"}},
}
