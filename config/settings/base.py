"""Sluice settings. Everything deployment-specific comes from environment variables
(docs/configuration.md lists them); there is no local_settings file. Unknown SLUICE_* variables
are refused."""

from pathlib import Path

import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured
from kombu import Queue

from config.env import (
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_networks,
    env_rate,
    env_reject_unknown,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent

KNOWN_ENV = {
    "SLUICE_DEBUG",
    "SLUICE_SECRET_KEY",
    "SLUICE_ALLOWED_HOSTS",
    "SLUICE_CSRF_TRUSTED_ORIGINS",
    "SLUICE_PORT",
    "SLUICE_WEB_CONCURRENCY",
    "SLUICE_WEB_THREADS",
    "SLUICE_EMAIL_BACKEND",
    "SLUICE_DEFAULT_FROM_EMAIL",
    "SLUICE_EMAIL_HOST",
    "SLUICE_EMAIL_PORT",
    "SLUICE_EMAIL_HOST_USER",
    "SLUICE_EMAIL_HOST_PASSWORD",
    "SLUICE_EMAIL_USE_TLS",
    "SLUICE_INVITATION_TTL_HOURS",
    "SLUICE_RESERVATION_TTL_SECONDS",
    "SLUICE_REDIS_TIMEOUT_MS",
    "SLUICE_REDIS_REPLY_TIMEOUT_MS",
    "SLUICE_LIMITER_REDIS_URL",
    "SLUICE_FAIL_OPEN_PROCESSES",
    "SLUICE_QUEUE_POOL_CAP",
    "SLUICE_QUEUE_ORG_CAP",
    "SLUICE_PUBLIC_URL",
    "SLUICE_STRIPE_API_BASE",
    "SLUICE_STRIPE_WEBHOOK_SECRET",
    "SLUICE_DUNNING_GRACE_DAYS",
    "SLUICE_SECURE_COOKIES",
    "SLUICE_SSL_REDIRECT",
    "SLUICE_HSTS_SECONDS",
    "SLUICE_HSTS_INCLUDE_SUBDOMAINS",
    "SLUICE_HSTS_PRELOAD",
    "SLUICE_TRUST_X_FORWARDED_PROTO",
    "SLUICE_LOG_LEVEL",
    "SLUICE_REAPPLY_COOLING_OFF_DAYS",
    "SLUICE_ADMIN_KEY_RATE_PER_MINUTE",
    "SLUICE_WEBHOOKS_ALLOW_PRIVATE",
    "SLUICE_USAGE_RAW_RETENTION_DAYS",
    "SLUICE_USAGE_HOURLY_RETENTION_DAYS",
    "SLUICE_DB_CONNECT_TIMEOUT_SECONDS",
    "SLUICE_SECRET_KEY_FALLBACKS",
    "SLUICE_TRUSTED_PROXIES",
    "SLUICE_SIGNUP_RATE",
    "SLUICE_PASSWORD_RESET_RATE",
    "SLUICE_INVITATION_RATE",
    "SLUICE_WEBHOOK_DEADLINE_SECONDS",
}
env_reject_unknown("SLUICE_", KNOWN_ENV)

DEBUG = env_bool("SLUICE_DEBUG", False)
# Required in production; only a development server may fall back to a throwaway key.
SECRET_KEY = env_str("SLUICE_SECRET_KEY", "dev-only-insecure-key") if DEBUG else env_str(
    "SLUICE_SECRET_KEY"
)
# Django's own bar (security.W009): a short key signs sessions and reset links guessably.
if not DEBUG and (len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5):
    raise ImproperlyConfigured(
        "SLUICE_SECRET_KEY must be at least 50 characters with at least 5 different ones, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'.")
# Earlier keys, while a rotation completes: sessions, password-reset links and sealed secrets
# (sluice/sealing.py, until `manage.py secrets_reseal`) made under them are still honoured.
SECRET_KEY_FALLBACKS = env_list("SLUICE_SECRET_KEY_FALLBACKS", [])

ALLOWED_HOSTS = env_list("SLUICE_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("SLUICE_CSRF_TRUSTED_ORIGINS", [])
PUBLIC_URL = env_str("SLUICE_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    # The admin app with the console site (TOTP-verified operators) as its default site, so
    # every `admin.site.register` lands on the console.
    "console.apps.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "sluice",
    "orgs",
    "quotas",
    "admission",
    "metering",
    "rollout",
    "billing",
    "webhooks",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "portal",
    "console",
]

MIDDLEWARE = [
    # First: everything after it reads the client's address from REMOTE_ADDR.
    "sluice.client_address.ClientAddressMiddleware",
    "sluice.error_responses.ApiNotFoundMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_otp.middleware.OTPMiddleware",
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
            ],
        },
    },
]

# PostgreSQL only: the same SQL runs in development, tests and production.
DATABASES = {"default": dj_database_url.parse(env_str("DATABASE_URL"), conn_max_age=60)}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL.")
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# A PostgreSQL that never answers (a dead host, a black-holed route) fails a new connection in
# this many seconds, not the operating system's minutes; a connect_timeout in DATABASE_URL wins.
DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
    "connect_timeout", env_int("SLUICE_DB_CONNECT_TIMEOUT_SECONDS", 5, minimum=1))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Threads per web process that run requests once their bodies are in (sluice/asgi_bridge.py).
WEB_THREADS = env_int("SLUICE_WEB_THREADS", 8, minimum=1)

REDIS_URL = env_str("REDIS_URL")
# The admission engine's Redis when set apart from REDIS_URL (empty: REDIS_URL). It may be a
# Redis Cluster (redis+cluster://host:port), which the cache and the Celery broker cannot use.
LIMITER_REDIS_URL = env_str("SLUICE_LIMITER_REDIS_URL", "")
# Short timeouts: authorize must never hang on a dead Redis (see quotas/limiter). Connecting
# may take the first; a reply, the second (a busy machine's slow reply is not an outage).
REDIS_TIMEOUT_SECONDS = env_int("SLUICE_REDIS_TIMEOUT_MS", 50, minimum=1) / 1000
REDIS_REPLY_TIMEOUT_SECONDS = env_int("SLUICE_REDIS_REPLY_TIMEOUT_MS", 250, minimum=1) / 1000
# Failing open, the web processes share each org's guaranteed rate by the count of them they
# saw in Redis; one that never saw it (started during the outage) assumes this many.
FAIL_OPEN_PROCESSES = env_int("SLUICE_FAIL_OPEN_PROCESSES",
                              env_int("SLUICE_WEB_CONCURRENCY", 2, minimum=1), minimum=1)
# The admission queue (admission/): requests waiting at most per pool, and per org in a pool;
# beyond them a request that would wait is refused queue_full.
SLUICE_QUEUE_POOL_CAP = env_int("SLUICE_QUEUE_POOL_CAP", 10_000, minimum=1)
SLUICE_QUEUE_ORG_CAP = env_int("SLUICE_QUEUE_ORG_CAP", 1_000, minimum=1)

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "sluice-cache",
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / ".sluice" / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

SECURE_COOKIES = env_bool("SLUICE_SECURE_COOKIES", not DEBUG)
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# HTTPS. Opt-in, because both outlive a mistake: a redirect breaks plain-HTTP callers (a
# gateway on the internal network), and browsers remember HSTS for its whole max-age.
SECURE_SSL_REDIRECT = env_bool("SLUICE_SSL_REDIRECT", False)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]  # load balancers probe over plain HTTP
SECURE_HSTS_SECONDS = env_int("SLUICE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SLUICE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SLUICE_HSTS_PRELOAD", False)
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto (and strips it from clients):
# request.is_secure() and the SSL redirect then see the client's scheme, not the proxy's http.
SECURE_PROXY_SSL_HEADER = (("HTTP_X_FORWARDED_PROTO", "https")
                           if env_bool("SLUICE_TRUST_X_FORWARDED_PROTO", False) else None)
# The load balancers in front of the web processes (addresses or networks): X-Forwarded-For is
# read only from them (sluice/client_address.py). Empty: the peer is the client.
TRUSTED_PROXIES = env_networks("SLUICE_TRUSTED_PROXIES", [])

# Emails carry secrets (password reset links, invitation tokens): in production they go to a
# mail server, never to the log. The console backend (prints them) is for development only.
_LOGGING_EMAIL_BACKENDS = {"django.core.mail.backends.console.EmailBackend",
                           "django.core.mail.backends.filebased.EmailBackend",
                           "config.devmail.EmailBackend"}
_SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_BACKEND = env_str("SLUICE_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend"
                        if DEBUG else _SMTP_BACKEND)
if not DEBUG and EMAIL_BACKEND in _LOGGING_EMAIL_BACKENDS:
    raise ImproperlyConfigured(f"SLUICE_EMAIL_BACKEND={EMAIL_BACKEND} writes emails (reset "
                               "links, invitation tokens) where logs go; not in production.")
DEFAULT_FROM_EMAIL = env_str("SLUICE_DEFAULT_FROM_EMAIL", "Sluice <no-reply@sluice.dev>")
# SMTP in production needs its server named: no silent "localhost" that may not exist.
EMAIL_HOST = env_str("SLUICE_EMAIL_HOST") if not DEBUG and EMAIL_BACKEND == _SMTP_BACKEND \
    else env_str("SLUICE_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("SLUICE_EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("SLUICE_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("SLUICE_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("SLUICE_EMAIL_USE_TLS", False)
# Where the file backends (config.devmail for `dev.py run`) keep whole emails.
EMAIL_FILE_PATH = BASE_DIR / ".sluice" / "emails"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "orgs.auth.OperatorTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "sluice.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "sluice.error_responses.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "UNAUTHENTICATED_USER": None,
    # Per admin key (orgs.auth.AdminKeyRateThrottle), counted in the Redis cache.
    "DEFAULT_THROTTLE_RATES": {
        "admin_key": f"{env_int('SLUICE_ADMIN_KEY_RATE_PER_MINUTE', 300, minimum=1)}/min",
    },
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Sluice API",
    "DESCRIPTION": "Waitlist, quotas, admission and billing for the fast inference tier.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}
SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"] = {
    "ApplicationStateEnum": "rollout.models.ApplicationState",
    "WaveStateEnum": "rollout.models.WaveState",
    "DecisionEnum": "rollout.models.Decision",
}
SPECTACULAR_SETTINGS.setdefault("ENUM_NAME_OVERRIDES", {}).update({
    "InvoiceStatusEnum": "billing.models.InvoiceStatus",
    "OutboxStatusEnum": "billing.models.OutboxStatus",
    "StripeEventStatusEnum": "billing.models.StripeEventStatus",
    # Names for choice sets that several fields share (else drf-spectacular hashes them).
    "ServiceTierEnum": "orgs.models.ServiceTier",
    "ServedServiceTierEnum": ["priority", "default"],
    "PoolTierEnum": "quotas.models.Tier",
    "BucketObjectEnum": ["bucket"],
    "PageObjectEnum": ["page"],
    "ShouldRetryEnum": ["true", "false"],
})

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A Redis failover demotes the broker the worker is blocked on (BRPOP answers "UNBLOCKED ...
# master -> replica", then writes answer READONLY): channel errors, which Celery treats as
# unrecoverable and exits on. Retried like a lost connection instead, for as long as it takes
# (the default gives up after 100 attempts): a worker outlives the broker's outage.
CELERY_BROKER_CHANNEL_ERROR_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# What a task prints (the console email backend prints whole emails) goes to the worker's
# output as it is: Celery's default logs every printed line as a WARNING.
CELERY_WORKER_REDIRECT_STDOUTS = False
# Queues: one per kind of work, so a slow kind never holds up another (docs/deploying.md,
# "Celery queues"). A worker without -Q consumes them all (dev.py run); production runs one per
# queue.
CELERY_TASK_QUEUES = [Queue(name) for name in
                      ("limits", "email", "billing", "webhooks", "maintenance")]
CELERY_TASK_DEFAULT_QUEUE = "maintenance"
CELERY_TASK_ROUTES = {
    # The hot path's publish: Redis must learn a suspension or a new key within a second.
    "quotas.tasks.limits_publish_org": {"queue": "limits"},
    "quotas.tasks.limits_publish_pool": {"queue": "limits"},
    "quotas.tasks.gateway_tokens_publish_task": {"queue": "limits"},
    # Expired leases hold bucket shares until swept: within seconds, not behind daily jobs.
    "metering.tasks.leases_sweep": {"queue": "limits"},
    "sluice.tasks.*": {"queue": "email"},
    "billing.tasks.*": {"queue": "billing"},
    "webhooks.tasks.*": {"queue": "webhooks"},
    "quotas.tasks.*": {"queue": "maintenance"},
    "metering.tasks.*": {"queue": "maintenance"},
    "rollout.tasks.*": {"queue": "maintenance"},
}
CELERY_BEAT_SCHEDULE: dict = {}
# Repairs limiter state whose publish was lost while Redis (and so the broker) was down.
CELERY_BEAT_SCHEDULE["limiter-sync"] = {"task": "quotas.tasks.limiter_sync", "schedule": 300.0}
CELERY_BEAT_SCHEDULE["allocations-expire"] = {
    "task": "quotas.tasks.allocations_expire", "schedule": 60.0,
}
# Bookings whose window began or ended: their state, webhooks, the next change the limiter
# switches to (it switches at the edge itself: this only records it).
CELERY_BEAT_SCHEDULE["bookings-advance"] = {
    "task": "quotas.tasks.bookings_advance", "schedule": 60.0,
}
# Emails whose delivery task was lost (broker down at commit) or that wait for a retry.
CELERY_BEAT_SCHEDULE["emails-drain"] = {"task": "sluice.tasks.emails_drain", "schedule": 60.0}
# The gateway hook's refusal counters (Redis) into PostgreSQL, for the Usage API.
CELERY_BEAT_SCHEDULE["refusals-drain"] = {"task": "metering.tasks.refusals_drain",
                                          "schedule": 60.0}
# Leases not renewed (a dead gateway's streams): billed from their last progress, their slots
# and bucket shares freed, within 5 s of expiry (metering/leases.py).
CELERY_BEAT_SCHEDULE["leases-sweep"] = {"task": "metering.tasks.leases_sweep", "schedule": 1.0}
CELERY_BEAT_SCHEDULE["waves-advance"] = {
    "task": "rollout.tasks.waves_advance", "schedule": 60.0,
}
CELERY_BEAT_SCHEDULE |= {
    # Billing: close last month at 00:15 UTC on the 1st (late usage reports have settled).
    "billing-close-month": {"task": "billing.tasks.invoices_close_previous_month_task",
                            "schedule": crontab(minute=15, hour=0, day_of_month=1)},
    # Then the usage of earlier, paid months reported since their close, on supplements.
    "billing-late-usage": {"task": "billing.tasks.invoices_bill_late_usage_task",
                           "schedule": crontab(minute=45, hour=0, day_of_month=1)},
    "billing-outbox-drain": {"task": "billing.tasks.outbox_drain_task", "schedule": 60.0},
    "billing-dunning-enforce": {"task": "billing.tasks.dunning_enforce_task",
                                "schedule": crontab(minute=5)},
    "billing-spend-alerts": {"task": "billing.tasks.spend_alerts_task", "schedule": 300.0},
    # Webhooks whose delivery task was lost, or that wait for a retry; waitlist positions.
    "webhooks-drain": {"task": "webhooks.tasks.webhooks_drain_task", "schedule": 60.0},
    "webhooks-waitlist-positions": {"task": "webhooks.tasks.waitlist_positions_task",
                                    "schedule": 300.0},
}

CELERY_BEAT_SCHEDULE |= {
    # Usage storage (metering/retention.py): partitions made ahead, old months dropped once
    # invoiced, old hours summed into days. Quiet hours, after the monthly close.
    "usage-partitions": {"task": "metering.tasks.usage_partitions_maintain",
                         "schedule": crontab(minute=40, hour=1)},
    "usage-rollups-compact": {"task": "metering.tasks.usage_rollups_compact",
                              "schedule": crontab(minute=10, hour=2)},
}
# Raw usage events are kept this long (whole months: a month goes once all of it is older),
# then dropped; reports older than this are refused. Hourly rollups are summed per day after
# USAGE_HOURLY_RETENTION_DAYS: at least 35, so hour-by-hour readers (charts of up to 7 days,
# this month's spend, today's quota) only ever read hours.
USAGE_RAW_RETENTION_DAYS = env_int("SLUICE_USAGE_RAW_RETENTION_DAYS", 90, minimum=31)
USAGE_HOURLY_RETENTION_DAYS = env_int("SLUICE_USAGE_HOURLY_RETENTION_DAYS", 400, minimum=35)

INVITATION_TTL_HOURS = env_int("SLUICE_INVITATION_TTL_HOURS", 72, minimum=1)
# Forms anyone may send, per client address (sluice/rate_limits.py), and invitations per
# organization (orgs.services.members): each bounds the emails a stranger can make Sluice send.
SIGNUP_RATE = env_rate("SLUICE_SIGNUP_RATE", "10/hour")
PASSWORD_RESET_RATE = env_rate("SLUICE_PASSWORD_RESET_RATE", "10/hour")
INVITATION_RATE = env_rate("SLUICE_INVITATION_RATE", "50/day")
RESERVATION_TTL_SECONDS = env_int("SLUICE_RESERVATION_TTL_SECONDS", 600, minimum=1)
# Days a rejected organization waits before it may apply again (0: at once).
REAPPLY_COOLING_OFF_DAYS = env_int("SLUICE_REAPPLY_COOLING_OFF_DAYS", 30, minimum=0)
# Development only: webhook endpoints on http:// and on private or loopback addresses.
WEBHOOKS_ALLOW_PRIVATE = env_bool("SLUICE_WEBHOOKS_ALLOW_PRIVATE", False)
# The whole of one webhook delivery attempt (resolve, connect, send, the answer's head):
# at most a minute, below the delivery's two-minute lease (webhooks/delivery.py).
WEBHOOK_DEADLINE_SECONDS = env_int("SLUICE_WEBHOOK_DEADLINE_SECONDS", 15, minimum=1)
if WEBHOOK_DEADLINE_SECONDS > 60:
    raise ImproperlyConfigured("SLUICE_WEBHOOK_DEADLINE_SECONDS must be at most 60.")
DUNNING_GRACE_DAYS = env_int("SLUICE_DUNNING_GRACE_DAYS", 7, minimum=0)
STRIPE_API_KEY = env_str("STRIPE_API_KEY", "")
STRIPE_API_BASE = env_str("SLUICE_STRIPE_API_BASE", "https://api.stripe.com")
STRIPE_WEBHOOK_SECRET = env_str("SLUICE_STRIPE_WEBHOOK_SECRET", "")
WEB_CONCURRENCY = env_int("SLUICE_WEB_CONCURRENCY", 2, minimum=1)
LOG_LEVEL = env_choice("SLUICE_LOG_LEVEL", "INFO", {"DEBUG", "INFO", "WARNING", "ERROR"})

LOGIN_URL = "/portal/login/"
LOGIN_REDIRECT_URL = "/portal/"
LOGOUT_REDIRECT_URL = "/portal/login/"
OTP_TOTP_ISSUER = "Sluice"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}
