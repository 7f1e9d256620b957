"""Test settings: the same PostgreSQL and Redis engines as production (from DATABASE_URL and
REDIS_URL, which dev.py sets to the embedded servers when the machine has none)."""

import os

os.environ.setdefault("SLUICE_DEBUG", "0")
os.environ.setdefault("SLUICE_SECRET_KEY", "test-secret-key-not-for-production-" + "x" * 30)
# Production settings refuse to start without a mail server; tests keep emails in memory.
os.environ.setdefault("SLUICE_EMAIL_BACKEND", "django.core.mail.backends.locmem.EmailBackend")

from config.settings.base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
SECURE_COOKIES = False
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Tasks run in-process after commit, so tests see their effects without a worker.
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
# Serve static files from the finders; no collectstatic in tests.
WHITENOISE_AUTOREFRESH = True
# Webhook receivers in tests listen on loopback (live_server, local HTTP servers).
WEBHOOKS_ALLOW_PRIVATE = True
