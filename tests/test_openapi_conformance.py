"""The OpenAPI schema tells the truth: Schemathesis (its pytest integration) sends what the schema
describes, valid and invalid, to the live test server over HTTP, with each kind of credential,
and checks every answer: no 5xx, and every status code, content type, header and body as
documented.

Bounded so the suite stays fast and repeatable: a fixed seed, EXAMPLES generated cases per
operation (plus the schema's own examples), no shrinking, no deadline. One test item per
credential (its operations run as subtests), so the live server's database is set up and
flushed once per credential, not once per operation.

Path parameters are pinned to objects that exist (the credential's own org, its pool, key,
allocation, application, wave, ...): random ids would only ever meet 404s.

Checks: the schema's truth about answers. Not enabled: `positive_data_acceptance` (a
schema-valid body naming a pool that does not exist is rightly a 400: existence is not a
schema property), `negative_data_rejection` (run by hand: it found the lenient `limit` /
`offset` and form booleans, fixed; what it still reports is DRF reading an empty query value as
absent and trimming whitespace before `maxLength`), and the checks that are not about the schema
(`ignored_auth`, `unsupported_method`, `use_after_free`, ...).
"""

from dataclasses import dataclass
from datetime import date, timedelta

import pytest
import schemathesis
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from billing.models import (
    Invoice,
    InvoiceLine,
    InvoiceStatus,
    LineKind,
    OutboxKind,
    OutboxMessage,
    OutboxStatus,
)
from billing.services import booking_confirm
from orgs.models import Role
from orgs.services import admin_key_create, api_key_create
from orgs.services.operator_tokens import operator_token_create
from portal.models import VerifiedEmail
from quotas.bookings import BookingAsk
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_reset
from quotas.publish import limiter_sync_pool
from rollout.models import QuotaRequest
from tests.factories import (
    AllocationFactory,
    ApplicationFactory,
    MembershipFactory,
    OperatorFactory,
    OrganizationFactory,
    PoolFactory,
    RolloutWaveFactory,
    UserFactory,
)
from tests.server import sluice_server

SEED = 20261130
EXAMPLES = 5
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
CSRF_SECRET = "c" * 32  # an unmasked CSRF secret: the cookie and the header carry the same one


@dataclass
class World:
    url: str
    parameters: dict
    operations: list
    operator: dict
    org_session: dict
    admin_key: dict
    gateway: dict


def _billing_records(org, pool) -> tuple[Invoice, OutboxMessage]:
    """What the operator billing API lists, with the fields that are often empty left empty
    (an invoice that replaces and supplements nothing, a dead letter without an invoice): a
    world without them only ever showed empty lists, and nulls the schema denied went
    unseen."""
    invoice = Invoice.objects.create(
        org=org, period_start=date(2026, 10, 1), period_end=date(2026, 11, 1),
        number="SLU-ACME-2026-10", status=InvoiceStatus.OPEN, total_cents=4_400)
    InvoiceLine.objects.create(invoice=invoice, position=1, kind=LineKind.DISCOUNT,
                               description="Launch discount", amount_cents=-100)
    InvoiceLine.objects.create(invoice=invoice, position=2, kind=LineKind.OUTPUT, pool=pool,
                               description="fast-70b, output", quantity_tokens=10**6,
                               unit_micros_per_mtok=30_000_000, amount_cents=4_500)
    dead = OutboxMessage.objects.create(kind=OutboxKind.CUSTOMER_SYNC, org=org,
                                        status=OutboxStatus.DEAD, attempts=8,
                                        last_error="stripe was down")
    return invoice, dead


@pytest.fixture
def world(live_server, redis_client, stripe) -> World:
    limiter_reset()
    gateway_token_cache_clear()
    pool = PoolFactory(model="fast-70b")
    org = OrganizationFactory(name="Acme", slug="acme")
    owner = UserFactory(username="owner@acme.test", email="owner@acme.test")
    member = MembershipFactory(org=org, user=owner, role=Role.OWNER)
    MembershipFactory(org=org, role=Role.DEVELOPER)
    allocation = AllocationFactory(org=org, pool=pool)
    key, _ = api_key_create(org=org, name="app", actor="test")
    # An owner's key: it may read costs too (a key carries its creator's rights).
    VerifiedEmail.objects.create(user=owner, email=owner.email)
    _, admin_secret = admin_key_create(org=org, name="tools", actor=owner)
    application = ApplicationFactory(org=OrganizationFactory(name="Applicant"))
    wave = RolloutWaveFactory(pool=pool)
    quota_request = QuotaRequest.objects.create(
        org=org, pool=pool, guaranteed_tps=2_000, burst_tps=3_000, daily_tokens=10**8,
        max_concurrency=30, reason="launch")
    invoice, dead_letter = _billing_records(org, pool)
    start = (timezone.now() + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    booking = booking_confirm(org=org, pool=pool, actor="test", ask=BookingAsk(
        starts_at=start, ends_at=start + timedelta(hours=2), output_tps=100))
    _, op_secret = operator_token_create(user=OperatorFactory(), name="fuzz", actor="test")
    _, gw_secret = gateway_token_create(name="fuzz", actor="test")
    limiter_sync_pool(pool_id=pool.pk)
    pool_routes_reload()
    browser = Client()
    browser.force_login(owner)
    yield World(
        url=live_server.url,
        parameters={"org_id": org.pk, "pool_id": pool.pk, "allocation_id": allocation.pk,
                    "key_id": key.pk, "member_id": member.pk, "slug": org.slug,
                    "invoice_id": invoice.pk, "message_id": dead_letter.pk,
                    "booking_id": booking.pk,
                    "path.request_id": quota_request.pk},
        # `{id}` names an application, a wave or a pool depending on the path.
        operations=[
            {"include-path-regex": "^/api/v1/operator/applications/", "parameters":
                {"id": application.pk}},
            {"include-path-regex": "^/api/v1/operator/waves/", "parameters": {"id": wave.pk}},
            {"include-path-regex": "^/api/v1/operator/pools/", "parameters": {"id": pool.pk}},
        ],
        operator={"Authorization": f"Bearer {op_secret}"},
        org_session={"Cookie": f"sessionid={browser.cookies['sessionid'].value}; "
                               f"csrftoken={CSRF_SECRET}", "X-CSRFToken": CSRF_SECRET},
        admin_key={"Authorization": f"Bearer {admin_secret}"},
        gateway={"Authorization": f"Bearer {gw_secret}"},
    )
    limiter_reset()


def _schema_config(world) -> schemathesis.Config:
    return schemathesis.Config.from_dict({
        "seed": SEED,
        "generation": {"max-examples": EXAMPLES, "no-shrink": True,
                       "with-security-parameters": False},
        "phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}},
        "parameters": world.parameters,
        "operations": world.operations,
    })


@pytest.fixture
def api_schema(world):
    return schemathesis.openapi.from_url(f"{world.url}/api/schema/?format=json",
                                         config=_schema_config(world))


@pytest.fixture
def served_api_schema(world):
    """The schema, its operations called on the production server (the hook is answered on
    its event loop, not by the live test server's Django), on the same database."""
    with sluice_server() as (base, _):
        yield schemathesis.openapi.from_url(f"{base}/api/schema/?format=json",
                                            config=_schema_config(world))


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request):
    """Schemathesis 4.32.5's lazy schemas read `item._nodeid`, which pytest 9.2 renamed
    (`item._id`): give the attribute back (Schemathesis only renames the node for its reports)."""
    request.node._nodeid = request.node.nodeid


def _call_and_validate(case, headers: dict) -> None:
    response = case.call(headers=headers)
    checks = CHECKS
    case.validate_response(response, checks=checks, headers=headers)


_settings = settings(deadline=None, derandomize=True, database=None,
                     suppress_health_check=list(HealthCheck))
schema = schemathesis.pytest.from_fixture("api_schema")

# Operators: every /api/v1 and OpenAI-path operation.
operator_schema = schema.include(path_regex=r"^/(api/v1|v1)/")
# An org's owner in the portal's session (cookie + CSRF): every operation on its own org.
org_schema = schema.include(
    path_regex=r"^/api/v1/(orgs/\{org_id\}/|org/\{slug\}/|allocations/|invitations/)")
# The org's admin key: the operations that declare it (usage, costs, API keys, the org).
admin_key_schema = schema.include(
    path_regex=r"^/(api/v1/orgs/\{org_id\}/(\Z|api-keys/|usage/|costs)|v1/organization/)")
# A gateway: the hook, on the production server.
gateway_schema = schemathesis.pytest.from_fixture("served_api_schema").include(
    path_regex=r"^/api/gateway/v1/")


@operator_schema.parametrize()
@_settings
def test_operator_answers_are_documented(case, world):
    _call_and_validate(case, world.operator)


@org_schema.parametrize()
@_settings
def test_org_member_answers_are_documented(case, world):
    _call_and_validate(case, world.org_session)


@admin_key_schema.parametrize()
@_settings
def test_admin_key_answers_are_documented(case, world):
    _call_and_validate(case, world.admin_key)


@gateway_schema.parametrize()
@_settings
def test_gateway_answers_are_documented(case, world):
    _call_and_validate(case, world.gateway)
