"""Console pages: the speed panels (with their query counts), gateway tokens, the price book's
"in force", invoices, the vetting queue's and score's words."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import PriceVersion
from metering.models import UsageEvent
from orgs.models import OrgStatus
from quotas.models import GatewayToken
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory
from tests.waitlist import approved_application

pytestmark = pytest.mark.django_db


def _traffic(org, pool, *, n: int, ttft_ms=250, output_tps=650.0):
    now = timezone.now()
    for i in range(n):
        started = now - timedelta(minutes=5 + i)
        UsageEvent.objects.create(
            request_id=uuid.uuid4().hex, org=org, pool=pool, status="completed",
            input_tokens=1_000, output_tokens=500, started_at=started,
            first_token_at=started + timedelta(milliseconds=ttft_ms),
            finished_at=started + timedelta(seconds=1), ttft_ms=ttft_ms, output_tps=output_tps,
            premium_eligible=output_tps >= pool.speed_floor_output_tps)


@pytest.mark.parametrize("orgs", [1, 4])
def test_speed_panels_read_a_fixed_number_of_queries(operator_console, django_assert_num_queries,
                                                     orgs):
    pool = PoolFactory(capacity_tps=100_000)
    for i in range(orgs):
        org = OrganizationFactory(status=OrgStatus.ACTIVE)
        AllocationFactory(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=2_000)
        _traffic(org, pool, n=3, output_tps=650.0 if i else 200.0)
    operator_console.get("/admin/")
    # Session, user, device, the two permission reads, and the dashboard's 17: summaries,
    # orgs by state, live use (2 x 2), queue lengths, queue waits, speed board (4), pools,
    # next wave, billing counts (3).
    with django_assert_num_queries(22):
        page = operator_console.get("/admin/").content.decode()
    assert page.count("data-speed-org=") == orgs
    assert 'class="below-floor">200.0' in page  # the slow org's output speed, flagged
    # The org page: its own speed per pool against its guarantee (and the bookings a
    # suspension would break).
    with django_assert_num_queries(17):
        org_page = operator_console.get(f"/admin/console/orgs/{org.pk}/")
    row = org_page.content.decode().split("data-speed-pool=")[1].split("</tr>")[0]
    assert '<td class="num">3</td>' in row and "<span>250</span> / <span>250 ms</span>" in row


def test_gateway_tokens_are_created_shown_once_and_revoked(operator_console, support_console):
    created = operator_console.post("/admin/console/gateway-tokens/new/", {"name": "edge 1"})
    assert created.status_code == 201
    token = GatewayToken.objects.get(name="edge 1")
    secret = created.context["created"]["secret"]
    assert secret.startswith(f"gw_{token.lookup}_") and secret in created.content.decode()
    assert secret not in operator_console.get("/admin/console/gateway-tokens/").content.decode()
    assert support_console.post(f"/admin/console/gateway-tokens/{token.pk}/revoke/"
                                ).status_code == 403
    revoked = operator_console.post(f"/admin/console/gateway-tokens/{token.pk}/revoke/",
                                    follow=True)
    assert revoked.redirect_chain[-1][0] == "/admin/console/gateway-tokens/#tokens"
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert "refused within 10 seconds" in revoked.content.decode()


def test_price_book_marks_the_version_in_force(operator_console):
    pool = PoolFactory()
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    old, current, later = (PriceVersion.objects.create(
        pool=pool, effective_from=now + delta, input_micros_per_mtok=5_000_000,
        output_micros_per_mtok=30_000_000) for delta in (
        timedelta(days=-60), timedelta(days=-1), timedelta(days=3)))
    page = operator_console.get("/admin/console/prices/").content.decode()
    for version, state in ((old, "superseded"), (current, "in force"), (later, "scheduled")):
        assert f'data-price-version="{version.pk}" data-state="{state}"' in page


def test_application_page_says_what_the_demand_fit_is_measured_against(operator_console,
                                                                        operator_user):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    app = approved_application(operator_user, pool, "Fit Co")
    page = operator_console.get(f"/admin/console/applications/{app.pk}/").content.decode()
    assert "Measured against" in page and str(pool) in page


def test_vetting_queue_names_organizations_without_an_application(operator_console):
    OrganizationFactory(status=OrgStatus.APPLIED)
    page = operator_console.get("/admin/console/applications/").content.decode()
    assert "1 organization without an application" in page
