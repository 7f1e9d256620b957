"""The production application, served by granian (config/serve.py): Django's WSGI application
(with the hook's WSGI fast path, config/wsgi.py) behind an ASGI bridge that reads each
request's whole body on the event loop before a thread runs it (sluice/asgi_bridge.py), and in
front of it authorize, decided on the event loop itself (quotas/hook/asgi.py)."""

import gc
from concurrent.futures import Executor

from django.conf import settings

from config.wsgi import application as wsgi_application
from metering.api import leases
from quotas.hook.asgi import hook_on_loop
from sluice.asgi_bridge import wsgi_app_as_asgi, wsgi_executor


def asgi_application(wsgi_app, *, executor: Executor | None = None):
    """`wsgi_app` served as production serves Sluice's (the benchmarks wrap theirs; tests give
    their own executor)."""
    # One pool of threads per process: the bridge's requests, and the few steps of authorize
    # that may block.
    executor = executor or wsgi_executor(settings.WEB_THREADS)
    # Django's own limits (DATA_UPLOAD_MAX_MEMORY_SIZE) answer bodies up to this size; past
    # it, the bridge refuses without buffering more.
    bridge = wsgi_app_as_asgi(wsgi_app, executor=executor,
                              max_body=4 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
                              on_startup=worker_ready)
    return hook_on_loop(bridge, executor=executor, routes={
        leases.HEARTBEAT_PATH: leases.lease_heartbeat_steps,
        leases.RELEASE_PATH: leases.lease_release_steps})


def worker_ready() -> None:
    """A worker about to serve. What it has built so far (Django, DRF, the URLconf and every
    view: ~176,000 objects the cyclic collector tracks) lives as long as it does: frozen, the
    collector's full collections do not scan it. Unfrozen, one took 96-121 ms, the worker's
    event loop (every authorize on it) waiting; the collector starts one when what survived
    since the last reaches a quarter of what it tracks: rare under steady load, certain as
    caches grow. Frozen, a full collection scans only what the worker made since (0.3 ms after
    6,000 requests)."""
    gc.freeze()


application = asgi_application(wsgi_application)
