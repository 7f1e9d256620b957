"""Production settings from the environment: `check --deploy` is
clean, a short secret key and a missing or logging email backend stop the process at start-up.
Each case starts a real process with production settings (config.settings.base, debug off)."""

import os
import re
import secrets
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def production_env(**overrides: str | None) -> dict[str, str]:
    # Not DJANGO_ALLOW_ASYNC_UNSAFE either: the browser suite sets it in this process.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLUICE_")
           and k not in ("DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    env |= {
        "DJANGO_SETTINGS_MODULE": "config.settings.base",
        "SLUICE_DEBUG": "0",
        "SLUICE_SECRET_KEY": secrets.token_urlsafe(50),
        "SLUICE_ALLOWED_HOSTS": "sluice.example.com",
        "SLUICE_CSRF_TRUSTED_ORIGINS": "https://sluice.example.com",
        "SLUICE_PUBLIC_URL": "https://sluice.example.com",
        "SLUICE_EMAIL_HOST": "smtp.example.com",
        "SLUICE_SSL_REDIRECT": "1",
        "SLUICE_HSTS_SECONDS": "31536000",
        "SLUICE_HSTS_INCLUDE_SUBDOMAINS": "1",
        "SLUICE_HSTS_PRELOAD": "1",
        "SLUICE_TRUST_X_FORWARDED_PROTO": "1",
    }
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=ROOT, capture_output=True,  # noqa: S603
                          text=True, check=False, timeout=120)


def setting(name: str, env: dict[str, str]):
    result = run(["-c", "import django; django.setup(); from django.conf import settings; "
                        f"print(repr(settings.{name}))"], env)
    assert result.returncode == 0, result.stderr
    return eval(result.stdout.strip())  # noqa: S307 - the repr of a setting we printed


def test_check_deploy_is_clean_with_production_settings():
    result = run(["manage.py", "check", "--deploy"], production_env())
    assert result.returncode == 0, result.stdout + result.stderr
    issues = set(re.findall(r"\((\w+\.[CEWI]\d+)\)", result.stdout + result.stderr))
    # drf_spectacular.W001 are OpenAPI schema warnings (unresolved authenticators, duplicate
    # component names): the schema's own issue-10 item, not a deployment setting.
    assert issues - {"drf_spectacular.W001"} == set(), result.stdout + result.stderr


def test_behind_a_proxy_https_is_read_from_x_forwarded_proto():
    env = production_env()
    assert setting("SECURE_PROXY_SSL_HEADER", env) == ("HTTP_X_FORWARDED_PROTO", "https")
    assert setting("SECURE_HSTS_SECONDS", env) == 31536000
    assert setting("SECURE_SSL_REDIRECT", env) is True
    # Probes of the load balancer come over plain HTTP: never redirected.
    assert setting("SECURE_REDIRECT_EXEMPT", env) == [r"^healthz$", r"^readyz$"]
    direct = production_env(SLUICE_TRUST_X_FORWARDED_PROTO=None)
    assert setting("SECURE_PROXY_SSL_HEADER", direct) is None


def test_a_short_secret_key_is_refused():
    result = run(["-c", "import django; django.setup()"],
                 production_env(SLUICE_SECRET_KEY="change-me"))
    assert result.returncode != 0
    assert "SLUICE_SECRET_KEY" in result.stderr and "50" in result.stderr


def test_production_without_an_email_server_refuses_to_start():
    result = run(["-c", "import django; django.setup()"],
                 production_env(SLUICE_EMAIL_HOST=None))
    assert result.returncode != 0
    assert "SLUICE_EMAIL_HOST" in result.stderr


def test_production_defaults_to_smtp_from_the_environment():
    env = production_env()
    assert setting("EMAIL_BACKEND", env) == "django.core.mail.backends.smtp.EmailBackend"
    assert setting("EMAIL_HOST", env) == "smtp.example.com"


def test_production_refuses_backends_that_write_emails_to_the_log():
    for backend in ("django.core.mail.backends.console.EmailBackend",
                    "django.core.mail.backends.filebased.EmailBackend",
                    "config.devmail.EmailBackend"):
        result = run(["-c", "import django; django.setup()"],
                     production_env(SLUICE_EMAIL_BACKEND=backend))
        assert result.returncode != 0, backend
        assert "SLUICE_EMAIL_BACKEND" in result.stderr


def test_development_still_prints_emails():
    env = production_env(SLUICE_DEBUG="1", SLUICE_EMAIL_HOST=None, SLUICE_SECRET_KEY=None)
    assert setting("EMAIL_BACKEND", env) == "django.core.mail.backends.console.EmailBackend"


def test_a_postgresql_that_never_answers_fails_the_connection_instead_of_hanging():
    # A listener that completes TCP handshakes (the kernel does) and never says a word: a dead
    # server behind a live port. Without a connect timeout the child would wait for good (and
    # `run` give up after 120 s).
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        env = production_env(SLUICE_DB_CONNECT_TIMEOUT_SECONDS="1",
                             DATABASE_URL=f"postgres://sluice@127.0.0.1:{port}/sluice")
        result = run(["-c", "import django; django.setup(); from django.db import connection\n"
                            "try:\n    connection.ensure_connection()\n"
                            "except Exception as exc:\n    print(type(exc).__name__, exc)"], env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OperationalError"), result.stdout
    assert "timeout" in result.stdout.lower(), result.stdout


def test_a_connect_timeout_in_database_url_wins():
    env = production_env(DATABASE_URL=os.environ["DATABASE_URL"].split("?")[0]
                         + "?connect_timeout=9")
    assert setting("DATABASES['default']['OPTIONS']['connect_timeout']", env) in (9, "9")
    assert setting("DATABASES['default']['OPTIONS']['connect_timeout']", production_env()) == 5


def test_a_web_worker_imports_its_views_before_its_first_request():
    """The application module warms the URLconf: a fresh worker's first page does not pay for
    importing the admin, DRF and every view (~250 ms) while a person waits."""
    result = run(["-c", "import sys; import config.wsgi; "
                        "print(all(m in sys.modules for m in ('config.urls', 'portal.views.org', "
                        "'rest_framework.views', 'drf_spectacular.views')))"],
                 production_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


_LIFESPAN = """
import asyncio, gc
from config.asgi import application

async def lifespan():
    messages, sent = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]), []
    async def receive():
        return next(messages)
    async def send(message):
        sent.append((message["type"], gc.get_freeze_count()))
    await application({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    return sent

before = gc.get_freeze_count()
sent = asyncio.run(lifespan())
tracked = sum(len(gc.get_objects(generation)) for generation in range(3))
print(before, sent[0][0], sent[0][1], tracked, sent[1][0])
"""


def test_a_web_worker_freezes_what_it_built_before_serving():
    """At the server's lifespan startup each worker freezes its imports (Django, DRF, every
    view) out of the collector's way: a full collection scanned ~176,000 objects, ~100 ms of
    the event loop that decides authorize."""
    result = run(["-c", _LIFESPAN], production_env())
    assert result.returncode == 0, result.stderr
    before, started, frozen, tracked, stopped = result.stdout.split()
    assert (started, stopped) == ("lifespan.startup.complete", "lifespan.shutdown.complete")
    assert int(before) == 0  # importing the application freezes nothing: startup does
    # Frozen once startup completed: most of what the process had built, not a handful.
    assert int(frozen) > 50_000 and int(frozen) > 10 * int(tracked), (frozen, tracked)
