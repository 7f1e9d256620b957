import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
application = get_wsgi_application()

# Every URLconf and the views it names imported now, while the worker starts, and not by its
# first request (~250 ms: the admin, DRF, the schema, every app's views).
get_resolver().url_patterns  # noqa: B018 - the property imports them

# The hook (authorize before every inference request, usage after it) is served before Django's
# middleware stack.
from metering.api import leases  # noqa: E402
from metering.api.hook import usage_call  # noqa: E402
from quotas.hook.wsgi import hook_fast_path  # noqa: E402

application = hook_fast_path(application, usage_call=usage_call, calls={
    leases.HEARTBEAT_PATH: leases.lease_heartbeat_call,
    leases.RELEASE_PATH: leases.lease_release_call})
