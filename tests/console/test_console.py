import re

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from orgs.models import AuditEvent, OrgStatus
from quotas.models import Allocation, CapacityPool
from tests.factories import (
    PASSWORD,
    AllocationFactory,
    MembershipFactory,
    OrganizationFactory,
    PoolFactory,
    UserFactory,
)
from tests.totp import totp_code, totp_code_from_secret, totp_device_for

pytestmark = pytest.mark.django_db


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_migration_creates_support_and_operator_groups():
    support = set(Group.objects.get(name="support").permissions.values_list("codename", flat=True))
    operator = set(Group.objects.get(name="operator").permissions.values_list("codename",
                                                                              flat=True))
    assert "view_organization" in support and "change_capacitypool" not in support
    assert support < operator
    assert {"change_organization", "change_capacitypool", "add_allocation",
            "change_allocation"} <= operator


def test_password_alone_does_not_open_the_console(operator_user):
    totp_device_for(operator_user)
    client = Client()
    response = client.post("/admin/login/", {"username": operator_user.username,
                                             "password": PASSWORD, "otp_token": "000000"})
    assert response.status_code == 200
    assert "That authentication code is not valid." in response.content.decode()
    assert client.get("/admin/").status_code == 302


def test_session_without_second_factor_is_sent_to_login(operator_user):
    client = Client()
    client.force_login(operator_user)  # e.g. signed in through the portal
    response = client.get("/admin/console/orgs/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_non_staff_cannot_sign_in_to_console(redis_client):
    user = UserFactory()
    response = Client().post("/admin/login/", {"username": user.username, "password": PASSWORD})
    assert "Please enter a correct" in response.content.decode()


def test_first_sign_in_enrolls_an_authenticator_with_a_qr_code(operator_user):
    client = Client()
    response = client.post("/admin/login/", {"username": operator_user.username,
                                             "password": PASSWORD}, follow=True)
    page = response.content.decode()
    assert response.redirect_chain[-1][0] == "/admin/2fa/enroll/"
    assert "<svg" in page and "<path" in page
    secret = re.search(r"data-totp-secret>([A-Z2-7=]+)<", page).group(1)
    response = client.post("/admin/2fa/enroll/", {"token": totp_code_from_secret(secret)})
    assert response.status_code == 302 and response["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200
    assert AuditEvent.objects.filter(action="operator.totp_enroll",
                                     actor=operator_user).count() == 1


def test_enrollment_is_closed_once_a_device_exists(operator_user):
    totp_device_for(operator_user)
    client = Client()
    client.force_login(operator_user)
    response = client.get("/admin/2fa/enroll/")
    assert response.status_code == 302 and response["Location"] == "/admin/login/"


def test_console_login_is_throttled(operator_user):
    device = totp_device_for(operator_user)
    client = Client()
    for _ in range(5):
        client.post("/admin/login/", {"username": operator_user.username, "password": "nope"})
    response = client.post("/admin/login/", {"username": operator_user.username,
                                              "password": PASSWORD,
                                              "otp_token": totp_code(device)})
    assert "Too many failed sign-in attempts" in response.content.decode()


def test_dashboard_shows_capacity_and_orgs_by_state(operator_console):
    pool = PoolFactory(capacity_tps=1000)
    AllocationFactory(pool=pool, guaranteed_tps=450, burst_tps=500)
    OrganizationFactory(status=OrgStatus.APPLIED)
    response = operator_console.get("/admin/")
    page = response.content.decode()
    assert f'data-pool="{pool.pk}"' in page
    assert '<div class="stat" data-field="guaranteed">450 <small>of 900 guaranteeable' in page
    assert "Free to guarantee</div><div class=\"stat\">450 <small>" in page
    # The live-use charts draw the guarantees (450), the guaranteeable limit (900, 90%) and
    # the capacity as lines.
    hour = response.context["pools"][0]["charts"][0].as_json()
    assert [(lim["name"], lim["value"]) for lim in hour["limits"]] == [
        ("Guaranteed", 450), ("Guaranteeable", 900), ("Capacity", 1000)]
    assert '<tr data-status-count="applied">' in page
    applied = page.split('<tr data-status-count="applied">')[1].split("</tr>")[0]
    assert '<td class="num">1</td>' in applied


def test_operator_moves_an_org_through_the_lifecycle(operator_console, operator_user):
    org = OrganizationFactory(status=OrgStatus.APPLIED)
    url = f"/admin/console/orgs/{org.pk}/lifecycle/"
    operator_console.post(url, {"action": "review_start"})
    response = operator_console.post(url, {"action": "approve", "reason": "voice, fits"},
                                     follow=True)
    org.refresh_from_db()
    assert org.status == OrgStatus.APPROVED
    assert any("is now approved" in m for m in _messages(response))
    event = AuditEvent.objects.get(org=org, action="org.approve")
    assert event.actor == operator_user and event.reason == "voice, fits"


def test_illegal_transition_shows_the_error_and_changes_nothing(operator_console):
    org = OrganizationFactory(status=OrgStatus.APPLIED)
    response = operator_console.post(f"/admin/console/orgs/{org.pk}/lifecycle/",
                                     {"action": "admit"}, follow=True)
    org.refresh_from_db()
    assert org.status == OrgStatus.APPLIED
    assert "Cannot admit an organization that is applied." in _messages(response)


def test_grant_beyond_capacity_shows_capacity_exhausted(operator_console):
    pool = PoolFactory(capacity_tps=1000)  # 900 guaranteeable
    AllocationFactory(pool=pool, guaranteed_tps=800, burst_tps=800)
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    response = operator_console.post(
        f"/admin/console/orgs/{org.pk}/allocations/grant/",
        {"pool": pool.pk, "guaranteed_tps": 200, "burst_tps": 300, "daily_tokens": 1000,
         "max_concurrency": 4})
    assert response.status_code == 422
    assert "cannot guarantee 200 more tokens/s: 100 of 900 guaranteeable tokens/s are free" \
        in response.content.decode()
    assert not Allocation.objects.filter(org=org).exists()


def test_operator_edits_an_allocation_within_capacity(operator_console):
    allocation = AllocationFactory(guaranteed_tps=100, burst_tps=200)
    response = operator_console.post(
        f"/admin/console/allocations/{allocation.pk}/",
        {"guaranteed_tps": 150, "burst_tps": 300, "daily_tokens": 10, "max_concurrency": 2})
    assert response.status_code == 302
    allocation.refresh_from_db()
    assert (allocation.guaranteed_tps, allocation.burst_tps) == (150, 300)


def test_capacity_below_guarantees_is_refused_with_its_message(operator_console):
    pool = PoolFactory(capacity_tps=1000)
    AllocationFactory(pool=pool, guaranteed_tps=800, burst_tps=800)
    response = operator_console.post(f"/admin/console/pools/{pool.pk}/capacity/",
                                     {"capacity_tps": 500})
    assert response.status_code == 422
    assert "Reduce allocations by 350 tokens/s first." in response.content.decode()
    pool.refresh_from_db()
    assert pool.capacity_tps == 1000


def test_operator_changes_pool_capacity(operator_console):
    pool = PoolFactory(capacity_tps=1000)
    response = operator_console.post(f"/admin/console/pools/{pool.pk}/capacity/",
                                     {"capacity_tps": 4000, "reason": "new machines"})
    assert response.status_code == 302
    assert CapacityPool.objects.get(pk=pool.pk).capacity_tps == 4000


def test_support_reads_but_cannot_change_capacity_lifecycle_or_allocations(support_console):
    pool = PoolFactory(capacity_tps=1000)
    allocation = AllocationFactory(pool=pool)
    org = allocation.org
    pools_page = support_console.get("/admin/console/pools/").content.decode()
    assert "Set capacity" not in pools_page
    org_page = support_console.get(f"/admin/console/orgs/{org.pk}/").content.decode()
    assert "Read-only" in org_page and "Grant an allocation" not in org_page
    denied = [
        support_console.post(f"/admin/console/pools/{pool.pk}/capacity/",
                             {"capacity_tps": 5000}),
        support_console.post(f"/admin/console/orgs/{org.pk}/lifecycle/", {"action": "suspend"}),
        support_console.post(f"/admin/console/orgs/{org.pk}/allocations/grant/",
                             {"pool": pool.pk, "guaranteed_tps": 1, "burst_tps": 1,
                              "daily_tokens": 1, "max_concurrency": 1}),
        support_console.post(f"/admin/console/allocations/{allocation.pk}/",
                             {"guaranteed_tps": 5, "burst_tps": 5, "daily_tokens": 1,
                              "max_concurrency": 1}),
        support_console.post(f"/admin/console/allocations/{allocation.pk}/end/"),
    ]
    assert [r.status_code for r in denied] == [403] * 5
    pool.refresh_from_db()
    org.refresh_from_db()
    assert pool.capacity_tps == 1000 and org.status == OrgStatus.ACTIVE


def test_audit_search_filters_by_action_prefix_and_org(operator_console):
    a, b = OrganizationFactory(status=OrgStatus.APPLIED), OrganizationFactory(
        status=OrgStatus.APPLIED)
    for org in (a, b):
        operator_console.post(f"/admin/console/orgs/{org.pk}/lifecycle/",
                              {"action": "review_start"})
    page = operator_console.get("/admin/console/audit/",
                                {"action": "org.", "org": a.pk}).content.decode()
    assert page.count('data-action="org.review_start"') == 1
    assert f'<span class="muted">{a.name}</span>' in page
    assert f'<span class="muted">{b.name}</span>' not in page


def _count_queries(django_assert_num_queries, client, url, expected):
    with django_assert_num_queries(expected):
        assert client.get(url).status_code == 200


@pytest.mark.parametrize("rows", [1, 8])
def test_list_pages_use_a_constant_number_of_queries(operator_console, django_assert_num_queries,
                                                     rows):
    for _ in range(rows):
        org = OrganizationFactory()
        allocation = AllocationFactory(org=org)
        MembershipFactory(org=org)
        operator_console.post(f"/admin/console/pools/{allocation.pool_id}/capacity/",
                              {"capacity_tps": 20_000})
    # Session, user, OTP device and the user's two permission reads, then the page's own:
    # count + page (lists), pools + summaries + two live-use series (sums + pools each)
    # (pools), and on the dashboard: summaries, orgs by state, two live-use series, queue
    # lengths, the queue waits, the speed board (pool speed, org speed, guarantees, org
    # names), the pools' promises, next wave, three billing counts;
    # org + allocations + keys + members + audit trail + the grant form's pools + quota
    # requests + usage buckets + speed + invoices + bookings not ended (org page).
    _count_queries(django_assert_num_queries, operator_console, "/admin/console/orgs/", 7)
    _count_queries(django_assert_num_queries, operator_console, "/admin/console/audit/", 7)
    _count_queries(django_assert_num_queries, operator_console, "/admin/console/pools/", 11)
    _count_queries(django_assert_num_queries, operator_console, "/admin/", 22)
    _count_queries(django_assert_num_queries, operator_console,
                   f"/admin/console/orgs/{org.pk}/", 16)
    _count_queries(django_assert_num_queries, operator_console,
                   "/admin/console/gateway-tokens/", 6)
    _count_queries(django_assert_num_queries, operator_console, "/admin/console/prices/", 7)


def test_the_default_admin_site_is_the_console():
    from django.contrib import admin

    from console.sites import ConsoleSite, console_site

    assert isinstance(admin.site, ConsoleSite)  # what @admin.register registers on
    assert console_site is admin.site


def test_audit_changes_lists_changed_fields_only():
    from console.templatetags.audit import audit_changes

    event = AuditEvent(before={"status": "applied", "suspension_reason": ""},
                       after={"status": "in_review", "suspension_reason": "", "note": "x"})
    assert audit_changes(event) == ["status: applied → in_review", "note: x"]
    assert audit_changes(AuditEvent(before={"role": "owner"})) == ["role: owner (removed)"]


def test_console_sign_out_returns_to_console_sign_in(operator_console):
    response = operator_console.post("/admin/logout/")
    assert response.status_code == 302 and response["Location"] == "/admin/login/"
