"""Per-org billing settings: the account row, spend cap and alert thresholds, discount."""

from django.db import transaction

from billing.models import BillingAccount
from orgs.models import Organization
from orgs.services.audit import Actor, audit_record
from quotas.publish import limits_publish_org_later
from sluice.errors import Unprocessable
from sluice.transactions import nested_atomic

# The highest monthly cap: a billion dollars, in micro-dollars (the counters are 64-bit).
SPEND_CAP_MAX_MICROS = 10**15


def billing_account_for(*, org: Organization) -> BillingAccount:
    """The org's billing account, created on first need."""
    return BillingAccount.objects.get_or_create(org=org)[0]


@nested_atomic
def billing_account_lock(*, org: Organization) -> BillingAccount:
    return BillingAccount.objects.select_for_update().get(pk=billing_account_for(org=org).pk)


def _thresholds_valid(thresholds: list[int]) -> list[int]:
    cleaned = sorted(set(thresholds))
    if not cleaned or any(t < 1 or t > 100 for t in cleaned):
        raise Unprocessable("Alert thresholds are percentages of the cap between 1 and 100.",
                            code="invalid_thresholds", details={"thresholds": thresholds})
    return cleaned


@transaction.atomic(durable=True)
def spend_cap_set(*, org: Organization, cap_micros: int, thresholds: list[int],
                  actor: Actor) -> BillingAccount:
    """Set the monthly cap (0 = none). The admission engine re-reads it after the commit."""
    if not 0 <= cap_micros <= SPEND_CAP_MAX_MICROS:
        raise Unprocessable("The spend cap is between 0 (none) and 1,000,000,000 dollars.",
                            code="invalid_cap", fields={"spend_cap_micros": [
                                f"Between 0 and {SPEND_CAP_MAX_MICROS}."]})
    thresholds = _thresholds_valid(thresholds)
    account = billing_account_lock(org=org)
    before = {"spend_cap_micros": account.spend_cap_micros,
              "alert_thresholds": account.alert_thresholds}
    account.spend_cap_micros, account.alert_thresholds = cap_micros, thresholds
    account.save(update_fields=["spend_cap_micros", "alert_thresholds", "updated_at"])
    audit_record(actor=actor, action="billing.spend_cap_set", target=account, org=org,
                 before=before, after={"spend_cap_micros": cap_micros,
                                       "alert_thresholds": thresholds})
    limits_publish_org_later(org_id=org.pk)
    return account


@transaction.atomic(durable=True)
def discount_set(*, org: Organization, discount_bps: int, actor: Actor,
                 reason: str = "") -> BillingAccount:
    if not 0 <= discount_bps <= 10_000:
        raise Unprocessable("A discount is between 0 and 10000 basis points.",
                            code="invalid_discount")
    account = billing_account_lock(org=org)
    before = {"discount_bps": account.discount_bps}
    account.discount_bps = discount_bps
    account.save(update_fields=["discount_bps", "updated_at"])
    audit_record(actor=actor, action="billing.discount_set", target=account, org=org,
                 before=before, after={"discount_bps": discount_bps}, reason=reason)
    return account
