"""The production ASGI application with bench/wsgi_ceiling.py's empty JSON endpoint
(/bench/empty) at the WSGI layer where authorize is served: the ceiling of this server and
load generator for a request that does no work. Benchmarks only."""

from django.conf import settings

from bench.wsgi_ceiling import application as wsgi_application
from sluice.asgi_bridge import wsgi_app_as_asgi

application = wsgi_app_as_asgi(wsgi_application, threads=settings.WEB_THREADS,
                               max_body=4 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
