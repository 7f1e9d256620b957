"""The production application, served by granian (config/serve.py): Django's WSGI application
(with the hook's WSGI fast path, config/wsgi.py) behind an ASGI bridge that reads each
request's whole body on the event loop before a thread runs it (sluice/asgi_bridge.py), and in
front of it authorize, decided on the event loop itself (quotas/gateway/asgi.py)."""

from concurrent.futures import Executor

from django.conf import settings

from config.wsgi import application as wsgi_application
from quotas.gateway.asgi import gateway_on_loop
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
                              max_body=4 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    return gateway_on_loop(bridge, executor=executor)


application = asgi_application(wsgi_application)
