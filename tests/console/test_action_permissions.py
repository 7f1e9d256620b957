"""Read-only support staff change nothing through list-page actions.

The test walks every action of every ModelAdmin registered on the console, so an action added
later is covered without touching this file; a model that gains an action needs a row in
`one_row_of_each` (the test says which)."""

import re
from datetime import UTC, date, datetime, timedelta

import pytest
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from billing.models import OutboxMessage, OutboxStatus, StripeEvent
from billing.services import booking_confirm, invoice_close_month
from orgs.models import AuditEvent, OrgStatus, Role
from orgs.services import api_key_create, invitation_create
from orgs.services.operator_tokens import operator_token_create
from quotas.bookings import BookingAsk
from quotas.hook.gateway_tokens import gateway_token_create
from quotas.models import Booking
from quotas.services import allocation_grant
from rollout.quota_requests import quota_request_create
from tests.billing.conftest import usage_add
from tests.factories import (
    ApplicationFactory,
    MembershipFactory,
    OperatorFactory,
    OrganizationFactory,
    PoolFactory,
    RolloutWaveFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def one_row_of_each(redis_client):
    """A row each action could change: an active org with a key, an invitation, an allocation
    and a quota request; an application; a wave; a token of each kind; an issued invoice; a
    dead letter; a failed Stripe event."""
    actor = "test"
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    pool = PoolFactory(capacity_tps=10_000)
    MembershipFactory(org=org, role=Role.OWNER)
    api_key_create(org=org, name="k", actor=actor)
    invitation_create(org=org, email="new@example.com", role=Role.DEVELOPER, actor=actor)
    allocation_grant(org=org, pool=pool, guaranteed_tps=10, burst_tps=20, daily_tokens=1_000,
                     max_concurrency=2, actor=actor)
    quota_request_create(org=org, pool=pool, guaranteed_tps=20, burst_tps=40,
                         daily_tokens=2_000, max_concurrency=2, reason="more", actor=actor)
    ApplicationFactory()
    RolloutWaveFactory(pool=pool)
    operator_token_create(user=OperatorFactory(), name="t", actor=actor)
    gateway_token_create(name="gw", actor=actor)
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 5, tzinfo=UTC), i=10_000_000)
    invoice, _ = invoice_close_month(org=org, month=date(2026, 10, 1), actor=actor,
                                     now=datetime(2026, 11, 2, tzinfo=UTC))
    OutboxMessage.objects.create(kind="customer_sync", org=org, status=OutboxStatus.DEAD)
    StripeEvent.objects.create(event_id="evt_1", type="invoice.paid", payload={},
                               status="failed", error="unknown invoice")
    start = (datetime.now(UTC) + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    booking_confirm(org=org, pool=pool, actor=actor, ask=BookingAsk(
        starts_at=start, ends_at=start + timedelta(hours=1), output_tps=10))


def every_action():
    for model, model_admin in admin.site._registry.items():
        for _func, name, _description in model_admin._get_base_actions():
            yield model, name


def rows(model) -> list[dict]:
    return list(model._default_manager.order_by("pk").values())


def test_support_staff_cannot_run_any_action(support_console, one_row_of_each):
    audit_before = AuditEvent.objects.count()
    walked = 0
    for model, name in every_action():
        before = rows(model)
        if name != "delete_selected":
            assert before, f"one_row_of_each needs a {model._meta.label} for its '{name}'"
        opts = model._meta
        url = f"/admin/{opts.app_label}/{opts.model_name}/"
        # "apply" and a reason: the actions with an intermediate form apply at once.
        response = support_console.post(url, {
            "action": name, ACTION_CHECKBOX_NAME: [row["id"] for row in before] or ["0"],
            "apply": "1", "reason": "support tries", "score": "5"})
        assert response.status_code == 403, f"{opts.label}.{name}"
        assert rows(model) == before, f"{opts.label}.{name} changed rows"
        walked += 1
    assert AuditEvent.objects.count() == audit_before
    assert walked >= 20  # every registered ModelAdmin's actions, not an empty loop


def test_support_staff_are_offered_no_action(support_console):
    for model, _name in every_action():
        opts = model._meta
        page = support_console.get(f"/admin/{opts.app_label}/{opts.model_name}/")
        if page.status_code == 200:  # auth/otp admins: support may not even read them
            assert 'name="action"' not in page.content.decode(), opts.label


def test_operators_still_run_the_actions_they_hold(operator_console, one_row_of_each):
    """The check is the change permission, not "superuser": an operator voids an invoice,
    re-processes a Stripe event, closes a wave."""
    from billing.models import Invoice, InvoiceStatus
    from rollout.models import RolloutWave, WaveState

    invoice = Invoice.objects.get()
    response = operator_console.post("/admin/billing/invoice/", {
        "action": "void", ACTION_CHECKBOX_NAME: [invoice.pk]})
    assert response.status_code == 302
    assert Invoice.objects.get(pk=invoice.pk).status == InvoiceStatus.VOID
    wave = RolloutWave.objects.get()
    operator_console.post("/admin/rollout/rolloutwave/", {
        "action": "close", ACTION_CHECKBOX_NAME: [wave.pk]})
    assert RolloutWave.objects.get(pk=wave.pk).state != WaveState.SCHEDULED


def console_urls():
    """Every page of the console's own (ConsoleSite.get_urls), with ids of existing rows."""
    from django.urls import reverse

    from billing.models import Invoice
    from console.views.rollout import APPLICATION_OPS
    from orgs.models import Organization
    from quotas.models import Allocation, CapacityPool, GatewayToken
    from rollout.models import Application, QuotaRequest, RolloutWave

    ids = {"org_id": Organization.objects.first().pk,
           "allocation_id": Allocation.objects.first().pk,
           "pool_id": CapacityPool.objects.first().pk,
           "application_id": Application.objects.first().pk,
           "wave_id": RolloutWave.objects.first().pk,
           "request_id": QuotaRequest.objects.first().pk,
           "invoice_id": Invoice.objects.first().pk,
           "token_id": GatewayToken.objects.first().pk,
           "message_id": OutboxMessage.objects.first().pk,
           "event_id": StripeEvent.objects.first().pk,
           "booking_id": Booking.objects.first().pk}
    slugs = {"op": list(APPLICATION_OPS), "decision": ["approve", "deny"]}
    for pattern in admin.site.get_urls():
        name = getattr(pattern, "name", None) or ""
        if not name.startswith("console_"):
            continue
        kwargs = {k: ids[k] for k in pattern.pattern.converters if k in ids}
        slug = next((k for k in pattern.pattern.converters if k in slugs), None)
        for value in slugs[slug] if slug else [None]:
            yield reverse(f"admin:{name}", kwargs={**kwargs, **({slug: value} if slug else {})})


def test_support_staff_cannot_press_any_console_button(support_console, one_row_of_each):
    """Every console URL POSTed by support: a 403, or (a page that only reads) the page itself;
    never a redirect after a change, and no audit event."""
    audit_before = AuditEvent.objects.count()
    walked = 0
    for url in console_urls():
        response = support_console.post(url, {"reason": "support tries", "score": "5",
                                              "decision": "approve", "status": "suspended",
                                              "capacity_tps": "1", "enabled": "on"})
        if response.status_code != 403:
            assert response.status_code == 200, url
            assert support_console.get(url).status_code == 200, url
        walked += 1
    assert AuditEvent.objects.count() == audit_before
    assert walked >= 25


def api_writes():
    """Every REST endpoint that writes (POST/PUT/PATCH/DELETE), with ids of existing rows."""
    from django.urls import get_resolver
    from django.urls.resolvers import URLResolver

    from billing.models import Invoice
    from orgs.models import ApiKey, Invitation, Membership, Organization
    from quotas.models import Allocation, CapacityPool
    from rollout.models import Application, QuotaRequest, RolloutWave

    org = Organization.objects.filter(status=OrgStatus.ACTIVE).first()
    ids = {"org_id": org.pk, "slug": org.slug, "member_id": Membership.objects.first(),
           "invitation_id": Invitation.objects.first(), "key_id": ApiKey.objects.first(),
           "pool_id": CapacityPool.objects.first(), "allocation_id": Allocation.objects.first(),
           "request_id": QuotaRequest.objects.first(), "invoice_id": Invoice.objects.first(),
           "message_id": OutboxMessage.objects.first(), "event_pk": StripeEvent.objects.first(),
           "booking_id": Booking.objects.first()}
    ids = {k: getattr(v, "pk", v) for k, v in ids.items()}
    by_route = {"applications": Application, "waves": RolloutWave, "pools": CapacityPool}

    def walk(patterns, prefix):
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            else:
                yield prefix + str(p.pattern), p

    for route, pattern in walk(get_resolver().url_patterns, "/"):
        view = getattr(pattern.callback, "cls", None)
        if view is None or not route.startswith("/api/v1/"):
            continue
        values = dict(ids)
        if "pk" in pattern.pattern.converters:  # /operator/<what>/<pk>/...
            what = next(k for k in by_route if f"/{k}/" in route)
            values["pk"] = by_route[what].objects.first().pk
        url = re.sub(r"<\w+:(\w+)>", lambda m, v=values: str(v[m[1]]), route)
        for method in ("post", "put", "patch", "delete"):
            if hasattr(view, method):
                yield method, url


def test_support_staff_cannot_write_through_the_api(support_user, one_row_of_each):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(support_user)
    audit_before = AuditEvent.objects.count()
    walked = 0
    for method, url in api_writes():
        response = getattr(client, method)(url, {"reason": "support tries"}, format="json")
        if url != "/api/v1/invitations/accept/":  # a signed-in user's own act, not an operator's
            assert response.status_code in (403, 404), f"{method} {url}"
        walked += 1
    assert AuditEvent.objects.count() == audit_before
    assert walked >= 30
