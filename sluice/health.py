"""Load balancer probes: /healthz says the process is up, /readyz that its dependencies answer.

Both are public (a load balancer probes without credentials), so /readyz names a failing
dependency and nothing more: an exception's text carries host names, ports and user names.
The text goes to the log instead."""

import logging

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

logger = logging.getLogger(__name__)


@require_GET
@never_cache
def healthz(request):
    return JsonResponse({"status": "ok"})


def _check_postgres() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # any failure means "not ready"
        logger.warning("readyz: PostgreSQL does not answer", exc_info=True)
        return False
    return True


def _check_redis() -> bool:
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=0.5,
                                      socket_connect_timeout=0.5)
        client.ping()
    except Exception:
        logger.warning("readyz: Redis does not answer", exc_info=True)
        return False
    return True


@require_GET
@never_cache
def readyz(request):
    checks = {"postgres": _check_postgres(), "redis": _check_redis()}
    ready = all(checks.values())
    body = {
        "status": "ok" if ready else "unavailable",
        "checks": {name: ("ok" if ok else "unavailable") for name, ok in checks.items()},
    }
    return JsonResponse(body, status=200 if ready else 503)
