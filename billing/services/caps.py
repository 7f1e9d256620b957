"""Spend caps: the month-to-date cost against the org's cap, and the threshold alerts.

Real-time refusal happens in the admission engine (a Redis month counter fed with
`billing.rating.usage_cost_micros` at ingestion, compared with `billing_spend_cap_micros`).
This module is the database side of the same rule: the authoritative month-to-date cost from
rating, the check services can call, and the alert emails."""

from dataclasses import dataclass
from datetime import date, datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.events import spend_threshold_crossed
from billing.models import BillingAccount, SpendAlert
from billing.notify import spend_alert_email_queue
from billing.periods import month_of
from billing.selectors import month_to_date_micros_by_org
from orgs.models import Organization, OrgStatus
from sluice.errors import PermissionDenied


class SpendCapReached(PermissionDenied):
    code = "spend_cap_reached"


@dataclass(frozen=True)
class SpendStatus:
    month: date
    cap_micros: int  # 0: no cap
    cost_micros: int

    @property
    def reached(self) -> bool:
        return self.cap_micros > 0 and self.cost_micros >= self.cap_micros

    @property
    def percent(self) -> int:
        return self.cost_micros * 100 // self.cap_micros if self.cap_micros else 0


def month_to_date_micros(*, org: Organization, now: datetime) -> int:
    return month_to_date_micros_by_org(org_ids={org.pk}, now=now)[org.pk]


def spend_status(*, org: Organization, now: datetime | None = None) -> SpendStatus:
    now = now or timezone.now()
    account = BillingAccount.objects.filter(org=org).first()
    return SpendStatus(month=month_of(now),
                       cap_micros=account.spend_cap_micros if account else 0,
                       cost_micros=month_to_date_micros(org=org, now=now))


def spend_cap_check(*, org: Organization, now: datetime | None = None) -> SpendStatus:
    """Raise SpendCapReached (403 spend_cap_reached) once the month's cost reaches the cap."""
    status = spend_status(org=org, now=now)
    if status.reached:
        raise SpendCapReached(
            "The organization's monthly spend cap is reached.",
            details={"cap_micros": status.cap_micros, "cost_micros": status.cost_micros,
                     "month": status.month.isoformat()})
    return status


def _money(micros: int) -> str:
    return f"${micros / 1_000_000:,.2f}"


@transaction.atomic(durable=True)
def spend_alerts_evaluate(*, org: Organization, now: datetime | None = None) -> list[int]:
    """Record and email each threshold the month's cost has crossed, once per month: the
    unique constraint on (org, month, threshold) is the "once"."""
    status = spend_status(org=org, now=now)
    if not status.cap_micros:
        return []
    account = BillingAccount.objects.get(org=org)
    sent = []
    for threshold in sorted(account.alert_thresholds):
        if status.percent < threshold:
            break
        try:
            with transaction.atomic():
                SpendAlert.objects.create(org=org, month=status.month,
                                          threshold_pct=threshold,
                                          cost_micros=status.cost_micros)
        except IntegrityError:
            continue  # already told this month
        spend_alert_email_queue(org_id=org.pk, month=status.month.strftime("%Y%m"),
                                threshold=threshold, cost_micros=status.cost_micros,
                                cap_micros=status.cap_micros)
        spend_threshold_crossed.emit(org_id=org.pk, month=status.month, threshold=threshold,
                                     cost_micros=status.cost_micros,
                                     cap_micros=status.cap_micros)
        sent.append(threshold)
    return sent


def spend_alerts_evaluate_all(*, now: datetime | None = None) -> int:
    """Beat: every active org with a cap."""
    orgs = Organization.objects.filter(status=OrgStatus.ACTIVE,
                                       billing_account__spend_cap_micros__gt=0)
    return sum(len(spend_alerts_evaluate(org=org, now=now)) for org in orgs)
