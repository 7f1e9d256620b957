"""Read-only support staff can read the operator API but change nothing through it; operators
can. Mirrors the console's groups (console/permissions.py)."""

import pytest
from django.contrib.auth.models import Group, Permission
from rest_framework.test import APIClient

from console.permissions import groups_sync
from orgs.models import AuditEvent
from tests.factories import ApplicationFactory, PoolFactory, RolloutWaveFactory, UserFactory

pytestmark = pytest.mark.django_db


def staff_client(group: str) -> APIClient:
    groups_sync(group_model=Group, permission_model=Permission)
    user = UserFactory(is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def objects():
    pool = PoolFactory()
    return {"application": ApplicationFactory(), "wave": RolloutWaveFactory(pool=pool),
            "pool": pool}


def writes(o):
    return [
        (f"/api/v1/operator/applications/{o['application'].pk}/notes",
         {"body": "looks fine"}),
        (f"/api/v1/operator/waves/{o['wave'].pk}/open", {}),
        (f"/api/v1/operator/pools/{o['pool'].pk}/auto-admission", {"enabled": True}),
        ("/api/v1/operator/billing/invoices/close", {"month": "2026-10"}),
        # Refused before the invoice is looked up: no such invoice would otherwise be a 404.
        *((f"/api/v1/operator/billing/invoices/999999/{verb}", {"reason": "support tries"})
          for verb in ("void", "reissue", "late-usage")),
        ("/api/v1/pools/", {"model": "m", "region": "r", "capacity_tps": 1,
                            "guaranteeable_ratio": "1"}),
    ]


def test_support_staff_read_but_cannot_change(objects):
    client = staff_client("support")
    assert client.get("/api/v1/operator/applications").status_code == 200
    assert client.get("/api/v1/operator/waves").status_code == 200
    before = AuditEvent.objects.count()
    for url, body in writes(objects):
        response = client.post(url, body, format="json")
        assert response.status_code == 403, url
        assert response.json()["error"]["code"] == "operator_permission_required", url
    assert AuditEvent.objects.count() == before


def test_members_get_403_on_the_operator_api(two_orgs):
    a, _ = two_orgs
    for url in ["/api/v1/operator/applications", "/api/v1/operator/waves",
                "/api/v1/operator/billing/invoices"]:
        assert a.client.get(url).status_code == 403, url


def test_a_staff_password_session_without_totp_is_not_an_operator(operator):
    from django.test import Client

    from tests.factories import PASSWORD
    from tests.totp import console_client

    password_only = Client()
    response = password_only.post("/portal/login/", {"username": operator.username,
                                                     "password": PASSWORD})
    assert response.status_code == 302  # signed in to the portal, no second factor
    assert password_only.get("/api/v1/pools/").status_code == 403
    assert password_only.get("/api/v1/operator/applications").status_code == 403
    verified = console_client(operator)
    assert verified.get("/api/v1/pools/").status_code == 200
