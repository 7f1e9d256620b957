"""The production application: Django's WSGI application (with authorize's fast path,
config/wsgi.py) behind an ASGI bridge that reads each request's whole body on the event loop
before a thread runs it (sluice/asgi_bridge.py), served by granian (config/serve.py)."""

from django.conf import settings

from config.wsgi import application as wsgi_application
from sluice.asgi_bridge import wsgi_app_as_asgi

# Django's own limits (DATA_UPLOAD_MAX_MEMORY_SIZE) answer bodies up to this size; past it,
# the bridge refuses without buffering more.
application = wsgi_app_as_asgi(wsgi_application, threads=settings.WEB_THREADS,
                               max_body=4 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
