"""GET /api/v1/orgs/<id>/costs: OpenAI's Costs API shape; a closed month's days add up to its
invoice to the cent."""

import random
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta

import httpx
import pytest
from rest_framework.test import APIClient

from billing.models import PriceVersion
from billing.periods import month_after, month_bounds
from billing.rating import total_cents
from billing.selectors import month_rated_lines
from billing.services import discount_set, invoice_close_month
from orgs.models import Role
from orgs.services import admin_key_create
from portal.models import VerifiedEmail
from tests.billing.conftest import usage_add
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory
from tests.openai_schemas import openai_validate

OCT = date(2026, 10, 1)
NOV_2 = datetime(2026, 11, 2, tzinfo=UTC)


def _ts(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())


def costs(client, org, **params) -> dict:
    response = client.get(f"/api/v1/orgs/{org.pk}/costs", params)
    assert response.status_code == 200, response.content
    body = response.json()
    openai_validate(body)
    return body


def cents(body: dict) -> dict[int, int]:
    """bucket start -> cents, from the dollar amounts."""
    found: dict[int, int] = defaultdict(int)
    for bucket in body["data"]:
        for result in bucket["results"]:
            assert result["amount"]["currency"] == "usd"
            found[bucket["start_time"]] += round(result["amount"]["value"] * 100)
    return found


def _october(org, pool):
    """Odd token counts on every day (amounts of fractions of a cent), a price change on the
    15th, tokens not delivered fast (speed credit) and a 7.5 % discount."""
    PriceVersion.objects.create(
        pool=pool, effective_from=datetime(2026, 10, 15, tzinfo=UTC),
        input_micros_per_mtok=4_500_000, output_micros_per_mtok=27_500_000,
        premium_input_micros_per_mtok=1_700_000, premium_output_micros_per_mtok=9_300_000)
    discount_set(org=org, discount_bps=750, actor="test")
    rng = random.Random(13)
    for day in range(1, 32):
        for hour in (3, 14, 23):
            i, o = rng.randint(1, 90_000), rng.randint(1, 40_000)
            usage_add(org=org, pool=pool, hour=datetime(2026, 10, day, hour, tzinfo=UTC),
                      i=i, o=o, pi=rng.randint(0, i), po=rng.randint(0, o))


@pytest.fixture
def reader(db):
    org = OrganizationFactory()
    owner = UserFactory()
    MembershipFactory(org=org, user=owner, role=Role.OWNER)
    client = APIClient()
    client.force_authenticate(owner)
    return org, client


def _owners_admin_key(org, name: str) -> str:
    """An admin key made by an owner of `org` (a key carries its creator's rights: money needs
    an owner's or a billing member's)."""
    owner = UserFactory()
    MembershipFactory(org=org, user=owner, role=Role.OWNER)
    VerifiedEmail.objects.create(user=owner, email=owner.email)
    return admin_key_create(org=org, name=name, actor=owner)[1]


@pytest.mark.django_db
def test_closed_month_days_add_up_to_the_invoice(reader, operator, pool, premium_price):
    org, client = reader
    _october(org, pool)
    invoice, _ = invoice_close_month(org=org, month=OCT, actor=operator, now=NOV_2)
    kinds = {line.kind for line in invoice.lines.all()}
    assert {"speed_credit", "discount"} <= kinds
    assert len({line.price_version_id for line in invoice.lines.all()} - {None}) == 2
    body = costs(client, org, start_time=_ts(OCT), end_time=_ts(date(2026, 11, 1)), limit=31)
    assert len(body["data"]) == 31 and not body["has_more"]
    assert sum(cents(body).values()) == invoice.total_cents
    by_item = costs(client, org, start_time=_ts(OCT), end_time=_ts(date(2026, 11, 1)),
                    limit=31, group_by=["line_item"])
    assert sum(cents(by_item).values()) == invoice.total_cents
    items: dict[str, int] = defaultdict(int)
    for bucket in by_item["data"]:
        for result in bucket["results"]:
            items[result["line_item"]] += round(result["amount"]["value"] * 100)
    lines: dict[str, int] = defaultdict(int)
    names = {"input": "input", "output": "output", "premium_input": "premium",
             "premium_output": "premium", "speed_credit": "speed credit"}
    for line in invoice.lines.all():
        lines[f"{pool.model}, {names[line.kind]}" if line.pool_id else "discounts"] += \
            line.amount_cents
    assert dict(items) == dict(lines)
    assert items["discounts"] < 0 and items[f"{pool.model}, speed credit"] < 0


@pytest.mark.django_db
def test_every_month_adds_up_whatever_the_page_boundaries(reader, pool, premium_price):
    org, client = reader
    rng = random.Random(7)
    discount_set(org=org, discount_bps=333, actor="test")
    start = datetime(2026, 8, 20, tzinfo=UTC)
    for n, offset in enumerate(rng.sample(range(24 * 70), 300)):
        hour = start + timedelta(hours=offset)
        i, o = rng.randint(1, 500_000), rng.randint(1, 200_000)
        usage_add(org=org, pool=pool, hour=hour, i=i, o=o, pi=rng.randint(0, i),
                  po=rng.randint(0, o), requests=n + 1)
    found: dict[int, int] = {}
    page = None
    while True:  # pages of 10 days that straddle month ends
        params = {"start_time": _ts(date(2026, 8, 25)), "end_time": _ts(date(2026, 11, 1)),
                  "limit": 10, **({"page": page} if page else {})}
        body = costs(client, org, **params)
        found |= cents(body)
        if not body["has_more"]:
            break
        page = body["next_page"]
    for month in (date(2026, 9, 1), date(2026, 10, 1)):
        _, end = month_bounds(month)
        month_cents = sum(c for ts, c in found.items() if _ts(month) <= ts < end.timestamp())
        assert month_cents == total_cents(month_rated_lines(org=org, month=month)), month
    assert month_after(OCT) == date(2026, 11, 1)


@pytest.mark.django_db
def test_costs_are_for_billing_readers_and_the_orgs_admin_key(reader, pool, premium_price):
    org, _ = reader
    other = OrganizationFactory()
    developer = UserFactory()
    MembershipFactory(org=org, user=developer, role=Role.DEVELOPER)
    client = APIClient()
    client.force_authenticate(developer)
    params = {"start_time": _ts(OCT), "end_time": _ts(date(2026, 10, 3))}
    assert client.get(f"/api/v1/orgs/{org.pk}/costs", params).status_code == 404
    secret = _owners_admin_key(org, "finance")
    keyed = APIClient()
    keyed.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert keyed.get(f"/api/v1/orgs/{org.pk}/costs", params).status_code == 200
    assert keyed.get(f"/api/v1/orgs/{other.pk}/costs", params).status_code == 404
    bad = keyed.get(f"/api/v1/orgs/{org.pk}/costs", {**params, "limit": 181})
    assert bad.status_code == 400 and "limit" in bad.json()["error"]["fields"]


@pytest.mark.django_db
def test_costs_cost_a_fixed_number_of_queries(reader, pool, premium_price,
                                              django_assert_num_queries):
    org, client = reader
    _october(org, pool)
    # membership, usage, booking charges, prices, discount, pool names
    with django_assert_num_queries(6):
        client.get(f"/api/v1/orgs/{org.pk}/costs",
                   {"start_time": _ts(date(2026, 9, 20)), "end_time": _ts(date(2026, 11, 1)),
                    "limit": 60, "group_by": ["line_item"]})


@pytest.mark.django_db(transaction=True)
def test_usage_and_costs_over_http_with_an_admin_key(live_server, pool, premium_price):
    org = OrganizationFactory()
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 3, 9, tzinfo=UTC), i=1_000_000,
              o=1_000_000, pi=500_000, po=800_000)
    secret = _owners_admin_key(org, "curl")
    headers = {"Authorization": f"Bearer {secret}"}
    window = {"start_time": _ts(date(2026, 10, 3)), "end_time": _ts(date(2026, 10, 4))}
    with httpx.Client(base_url=f"{live_server.url}/api/v1/orgs/{org.pk}",
                      headers=headers, timeout=10) as http:
        spent = http.get("/costs", params=window).json()
        used = http.get("/usage/completions",
                        params={**window, "bucket_width": "1h", "limit": 24}).json()
    openai_validate(spent)
    openai_validate(used)
    # $5 + $30 list, $2 + $10 premium, minus the premium on 0.5M input and 0.2M output
    assert spent["data"][0]["results"][0]["amount"] == {"value": 44.0, "currency": "usd"}
    assert [r["output_tokens"] for b in used["data"] for r in b["results"]] == [1_000_000]


@pytest.mark.django_db(transaction=True)
def test_openai_organization_paths_take_the_org_from_the_admin_key(live_server, pool,
                                                                   premium_price):
    org, other = OrganizationFactory(), OrganizationFactory()
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 3, 9, tzinfo=UTC), i=1_000_000,
              o=1_000_000, pi=500_000, po=800_000)
    usage_add(org=other, pool=pool, hour=datetime(2026, 10, 3, 9, tzinfo=UTC), i=7, o=7)
    secret = _owners_admin_key(org, "tools")
    window = {"start_time": _ts(date(2026, 10, 3)), "end_time": _ts(date(2026, 10, 4))}
    with httpx.Client(base_url=f"{live_server.url}/v1/organization", timeout=10) as http:
        auth = {"Authorization": f"Bearer {secret}"}
        spent = http.get("/costs", params=window, headers=auth).json()
        used = http.get("/usage/completions", headers=auth,
                        params={**window, "bucket_width": "1d"}).json()
        anonymous = http.get("/costs", params=window)
    openai_validate(spent)
    openai_validate(used)
    assert spent["data"][0]["results"][0]["amount"] == {"value": 44.0, "currency": "usd"}
    assert [r["output_tokens"] for b in used["data"] for r in b["results"]] == [1_000_000]
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "not_authenticated"
