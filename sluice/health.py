"""Load balancer probes: /healthz says the process is up, /readyz that its dependencies answer."""

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET


@require_GET
@never_cache
def healthz(request):
    return JsonResponse({"status": "ok"})


def _check_postgres() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any failure means "not ready", reported by name
        return f"{type(exc).__name__}: {exc}"
    return None


def _check_redis() -> str | None:
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=0.5,
                                      socket_connect_timeout=0.5)
        client.ping()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@require_GET
@never_cache
def readyz(request):
    checks = {"postgres": _check_postgres(), "redis": _check_redis()}
    ready = all(error is None for error in checks.values())
    body = {
        "status": "ok" if ready else "unavailable",
        "checks": {name: ("ok" if err is None else err) for name, err in checks.items()},
    }
    return JsonResponse(body, status=200 if ready else 503)
