"""The production application: Django behind the gateway hook's ASGI entry
(quotas/gateway/asgi.py), served by granian (config/serve.py)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
django_application = get_asgi_application()

from quotas.gateway.asgi import gateway_asgi  # noqa: E402 - needs Django set up

application = gateway_asgi(django_application)
