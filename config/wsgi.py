"""Django's WSGI application. The production server serves it behind config/asgi.py (which
answers the hook itself); WSGI_APPLICATION names it for Django's own tools."""

import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
application = get_wsgi_application()

# Every URLconf and the views it names imported now, while the worker starts, and not by its
# first request (~250 ms: the admin, DRF, the schema, every app's views).
get_resolver().url_patterns  # noqa: B018 - the property imports them
