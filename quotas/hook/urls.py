"""The hook's authorize URL. config/urls.py serves it under /api/gateway/v1/ beside metering's
usage and leases (metering/api/hook.py, metering/api/leases.py)."""

from django.urls import path

from quotas.hook import schema, views

urlpatterns = [
    path("authorize", schema.documented_by(schema.AuthorizeSchema)(views.authorize),
         name="authorize"),
]
