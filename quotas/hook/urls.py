"""The hook's authorize and lease URLs. config/urls.py serves them under /api/gateway/v1/
beside metering's usage (metering/api/hook.py)."""

from django.urls import path

from quotas.hook import schema, views

urlpatterns = [
    path("authorize", schema.documented_by(schema.AuthorizeSchema)(views.authorize),
         name="authorize"),
    path("leases/heartbeat", schema.documented_by(schema.LeaseHeartbeatSchema)(
        views.lease_heartbeat), name="lease_heartbeat"),
    path("leases/release", schema.documented_by(schema.LeaseReleaseSchema)(
        views.lease_release), name="lease_release"),
]
