"""The production application, served by uvicorn (config/serve.py): the hook's routes answered
on the event loop (quotas/hook/asgi.py), and every other request to Django's WSGI application
behind a bridge that reads each request's whole body on the event loop before a thread runs it
(sluice/asgi_bridge.py). The `web` and `hook` processes of the Procfile serve this same
application."""

import gc

from django.conf import settings

from admission.hook import hook_queue
from config.wsgi import application as wsgi_application
from metering.api.hook import usage
from metering.api.leases import lease_heartbeat, lease_release, leases_ridden_release
from quotas.hook.asgi import hook_application, hook_threads, loop_threads_use
from quotas.hook.hook import (
    authorize,
    authorize_batch,
    authorize_queue_set,
    authorize_releases_set,
)
from sluice.asgi_bridge import wsgi_app_as_asgi

# Requests that may wait for capacity wait in the admission queue (admission/).
authorize_queue_set(hook_queue)
# Lease releases may ride on a batched authorize (metering/ applies them).
authorize_releases_set(leases_ridden_release)

# The hook: path -> async handler(authorization, body) -> (status, JSON-ready body).
HOOK_ROUTES = {
    "/api/gateway/v1/authorize": authorize,
    "/api/gateway/v1/authorize/batch": authorize_batch,
    "/api/gateway/v1/usage": usage,
    "/api/gateway/v1/leases/heartbeat": lease_heartbeat,
    "/api/gateway/v1/leases/release": lease_release,
}


def worker_ready() -> None:
    """A worker about to serve. Its loop's default executor becomes the process's threads
    (the hook's blocking work runs there, beside the bridge's requests).

    What it has built so far (Django, DRF, the URLconf and every view: ~176,000 objects the
    cyclic collector tracks) lives as long as it does: frozen, the collector's full collections
    do not scan it. Unfrozen, one took 96-121 ms, the worker's event loop (every authorize on
    it) waiting; the collector starts one when what survived since the last reaches a quarter
    of what it tracks: rare under steady load, certain as caches grow. Frozen, a full
    collection scans only what the worker made since (0.3 ms after 6,000 requests)."""
    loop_threads_use()
    gc.freeze()


# Django's own limits (DATA_UPLOAD_MAX_MEMORY_SIZE) answer bodies up to this size; past it,
# the bridge refuses without buffering more.
django_application = wsgi_app_as_asgi(
    wsgi_application, executor=hook_threads(),
    max_body=4 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE, on_startup=worker_ready)
application = hook_application(HOOK_ROUTES, django_application)
