"""Spend caps at the service level: the selector the admission engine reads, the check, and the
alerts (once per threshold per month). The engine's Redis counter is fed by usage_cost_micros,
which prices like rating does (tests/billing/test_rating.py)."""

from datetime import UTC, datetime

import pytest
from django.core import mail

from billing.models import SpendAlert
from billing.rating import UsageRow
from billing.selectors import billing_spend_cap_micros, usage_batch_cost_micros
from billing.services import (
    SpendCapReached,
    discount_set,
    spend_alerts_evaluate,
    spend_cap_check,
    spend_cap_set,
)
from orgs.models import AuditEvent, Role
from sluice.errors import Unprocessable
from tests.billing.conftest import usage_add
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 20, 12, 30, tzinfo=UTC)
DOLLAR = 1_000_000


@pytest.fixture
def capped_org(operator):
    org = OrganizationFactory()
    MembershipFactory(org=org, role=Role.OWNER, user=UserFactory(username="boss@x.test"))
    spend_cap_set(org=org, cap_micros=100 * DOLLAR, thresholds=[50, 80, 100], actor=operator)
    return org


def test_cap_selector_defaults_to_zero_and_follows_the_setting(operator, capped_org):
    assert billing_spend_cap_micros(org=OrganizationFactory()) == 0
    assert billing_spend_cap_micros(org=capped_org) == 100 * DOLLAR
    assert billing_spend_cap_micros(org=capped_org.pk) == 100 * DOLLAR
    assert AuditEvent.objects.filter(action="billing.spend_cap_set", org=capped_org).exists()


@pytest.mark.parametrize("thresholds", [[], [0], [101], [50, 150]])
def test_bad_thresholds_are_refused(operator, capped_org, thresholds):
    with pytest.raises(Unprocessable):
        spend_cap_set(org=capped_org, cap_micros=1, thresholds=thresholds, actor=operator)
    assert billing_spend_cap_micros(org=capped_org) == 100 * DOLLAR


def test_cap_is_enforced_and_alerts_go_out_once_per_threshold(
        capped_org, pool, django_capture_on_commit_callbacks):
    hour = datetime(2026, 11, 3, 10, tzinfo=UTC)
    usage_add(org=capped_org, pool=pool, hour=hour, o=2_000_000)  # $60
    assert spend_cap_check(org=capped_org, now=NOW).cost_micros == 60 * DOLLAR
    with django_capture_on_commit_callbacks(execute=True):
        assert spend_alerts_evaluate(org=capped_org, now=NOW) == [50]
        assert spend_alerts_evaluate(org=capped_org, now=NOW) == []
    assert len(mail.outbox) == 1 and "50%" in mail.outbox[0].subject

    usage_add(org=capped_org, pool=pool, hour=hour.replace(hour=11), o=1_400_000)  # +$42
    with pytest.raises(SpendCapReached) as exc:
        spend_cap_check(org=capped_org, now=NOW)
    assert (exc.value.status, exc.value.code) == (403, "spend_cap_reached")
    assert exc.value.details["cost_micros"] == 102 * DOLLAR
    with django_capture_on_commit_callbacks(execute=True):
        assert spend_alerts_evaluate(org=capped_org, now=NOW) == [80, 100]
    assert [m.to for m in mail.outbox] == [["boss@x.test"]] * 3
    assert SpendAlert.objects.filter(org=capped_org).count() == 3


def test_next_month_starts_from_zero(capped_org, pool):
    usage_add(org=capped_org, pool=pool, hour=datetime(2026, 10, 31, 23, tzinfo=UTC),
              o=10_000_000)
    assert spend_cap_check(org=capped_org, now=NOW).cost_micros == 0


@pytest.mark.parametrize("discount_bps", [0, 1_234])
def test_ingestion_counter_adds_up_to_the_rated_month(capped_org, pool, premium_price, operator,
                                                      discount_bps):
    """Summing the per-batch cost over ingested batches lands on the month-to-date cost:
    exactly with whole-dollar prices per Mtok, else ahead by under a micro-dollar per batch."""
    discount_set(org=capped_org, discount_bps=discount_bps, actor=operator)
    batches = [(1_000, 333, 900, 300), (77_777, 12_345, 77_777, 0), (5, 5, 0, 5)]
    counter = 0
    for n, (i, o, pi, po) in enumerate(batches):
        hour = datetime(2026, 11, 3, n, tzinfo=UTC)
        usage_add(org=capped_org, pool=pool, hour=hour, i=i, o=o, pi=pi, po=po)
        counter += usage_batch_cost_micros(org_id=capped_org.pk,
                                           usage=[UsageRow(pool.pk, hour, i, o, pi, po)])
    rated = spend_cap_check(org=capped_org, now=NOW).cost_micros
    if discount_bps:
        assert 0 <= counter - rated < len(batches)
    else:
        assert counter == rated
