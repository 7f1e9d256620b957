import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
application = get_wsgi_application()

# Authorize (the per-inference-request hook) is served before Django's middleware stack.
from quotas.gateway.wsgi import gateway_fast_path  # noqa: E402

application = gateway_fast_path(application)
