"""The admin writes only through services: domain errors show on the form, nothing is saved."""

import pytest

from orgs.models import AuditEvent, Organization, OrgStatus
from quotas.models import Allocation
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory
from tests.totp import console_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(operator):
    return console_client(operator)


def test_admin_action_suspends_through_the_service(admin_client_):
    active, applied = OrganizationFactory(), OrganizationFactory(status=OrgStatus.APPLIED)
    response = admin_client_.post("/admin/orgs/organization/", {
        "action": "action_org_suspend", "_selected_action": [active.pk, applied.pk]},
        follow=True)
    assert response.status_code == 200
    active.refresh_from_db()
    applied.refresh_from_db()
    assert (active.status, applied.status) == (OrgStatus.SUSPENDED, OrgStatus.APPLIED)
    text = response.content.decode()
    assert "Suspended: 1." in text
    assert "Cannot suspend an organization that is applied" in text
    assert AuditEvent.objects.filter(action="org.suspend").count() == 1


def test_admin_add_org_goes_through_org_create(admin_client_):
    response = admin_client_.post("/admin/orgs/organization/add/",
                                  {"name": "Hooli", "slug": "hooli"})
    assert response.status_code == 302
    org = Organization.objects.get(slug="hooli")
    assert org.status == OrgStatus.APPLIED
    assert AuditEvent.objects.filter(action="org.create", org=org).exists()


def test_admin_grant_over_capacity_shows_the_error_and_writes_nothing(admin_client_):
    pool = PoolFactory(capacity_tps=1_000)
    AllocationFactory(pool=pool, guaranteed_tps=900, burst_tps=900)
    org = OrganizationFactory()
    response = admin_client_.post("/admin/quotas/allocation/add/", {
        "org": org.pk, "pool": pool.pk, "guaranteed_tps": 10, "burst_tps": 10,
        "daily_tokens": 100, "max_concurrency": 1})
    assert response.status_code == 200  # the form again, with the error
    assert "cannot guarantee 10 more tokens/s" in response.content.decode()
    assert not Allocation.objects.filter(org=org).exists()


def test_admin_grant_within_capacity(admin_client_):
    pool, org = PoolFactory(capacity_tps=1_000), OrganizationFactory()
    response = admin_client_.post("/admin/quotas/allocation/add/", {
        "org": org.pk, "pool": pool.pk, "guaranteed_tps": 10, "burst_tps": 20,
        "daily_tokens": 100, "max_concurrency": 1})
    assert response.status_code == 302
    assert Allocation.objects.get(org=org).burst_tps == 20
    assert AuditEvent.objects.filter(action="allocation.grant", org=org).exists()


def test_admin_lists_render(admin_client_):
    AllocationFactory()
    for url in ["/admin/orgs/organization/", "/admin/orgs/auditevent/", "/admin/orgs/apikey/",
                "/admin/quotas/allocation/", "/admin/quotas/capacitypool/",
                "/admin/orgs/membership/", "/admin/orgs/invitation/"]:
        assert admin_client_.get(url).status_code == 200, url
