"""Input (prefill) and output (decode) capacity apart. Pools declare both;
allocations guarantee and burst both; the ledger keeps both invariants; authorize debits both
all-or-nothing; cached input tokens cost no prefill capacity."""

from decimal import Decimal

import pytest
from django.db import connection

from quotas.limiter.engine import limiter_settle
from quotas.limiter.schema import Settlement
from quotas.models import Allocation
from quotas.publish import limiter_sync_pool
from quotas.selectors import pool_guaranteed_input_tps, pool_guaranteed_tps
from quotas.services import allocation_change, allocation_grant, pool_capacity_set
from sluice.errors import DomainError, Unprocessable
from tests.aio import limiter_authorize
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory
from tests.quotas.conftest import tenant_create, threads_race

pytestmark = pytest.mark.django_db


def prefill_pool(**kwargs):
    return PoolFactory(**{"capacity_tps": 10_000, "prefill_capacity_tps": 100_000,
                          "guaranteeable_ratio": Decimal("0.900"), **kwargs})


def authorize(t, request_id, *, input_tokens, max_output_tokens, **kwargs):
    return limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id=request_id,
                             input_tokens=input_tokens, max_output_tokens=max_output_tokens,
                             **kwargs)


# --- The capacity ledger ------------------------------------------------------------------------

def test_a_grant_in_a_prefill_pool_gets_input_tps_given_or_in_proportion():
    pool = prefill_pool()
    derived = allocation_grant(org=OrganizationFactory(), pool=pool, guaranteed_tps=100,
                               burst_tps=300, daily_tokens=1, max_concurrency=1, actor="test")
    assert (derived.guaranteed_input_tps, derived.burst_input_tps) == (1_000, 3_000)
    given = allocation_grant(org=OrganizationFactory(), pool=pool, guaranteed_tps=100,
                             burst_tps=100, guaranteed_input_tps=5_000, burst_input_tps=9_000,
                             daily_tokens=1, max_concurrency=1, actor="test")
    assert (given.guaranteed_input_tps, given.burst_input_tps) == (5_000, 9_000)


def test_input_limits_are_validated_against_the_pool():
    with pytest.raises(DomainError) as refused:
        allocation_grant(org=OrganizationFactory(), pool=PoolFactory(), guaranteed_tps=10,
                         burst_tps=10, guaranteed_input_tps=10, burst_input_tps=10,
                         daily_tokens=1, max_concurrency=1, actor="test")
    assert "guaranteed_input_tps" in refused.value.fields  # no prefill capacity declared
    with pytest.raises(DomainError) as refused:
        allocation_grant(org=OrganizationFactory(), pool=prefill_pool(), guaranteed_tps=10,
                         burst_tps=10, guaranteed_input_tps=10, burst_input_tps=200_000,
                         daily_tokens=1, max_concurrency=1, actor="test")
    assert "burst_input_tps" in refused.value.fields


def test_input_guarantees_never_exceed_the_guaranteeable_prefill():
    pool = prefill_pool()  # 90,000 input tokens/s guaranteeable
    allocation_grant(org=OrganizationFactory(), pool=pool, guaranteed_tps=10, burst_tps=10,
                     guaranteed_input_tps=80_000, burst_input_tps=80_000, daily_tokens=1,
                     max_concurrency=1, actor="test")
    with pytest.raises(Unprocessable) as refused:
        allocation_grant(org=OrganizationFactory(), pool=pool, guaranteed_tps=10, burst_tps=10,
                         guaranteed_input_tps=20_000, burst_input_tps=20_000, daily_tokens=1,
                         max_concurrency=1, actor="test")
    assert refused.value.code == "capacity_exhausted"
    assert refused.value.details == {"pool": pool.pk, "asked_tps": 20_000,
                                     "guaranteeable_tps": 90_000, "guaranteed_tps": 80_000,
                                     "free_tps": 10_000, "limit": "input"}
    with pytest.raises(Unprocessable) as refused:
        pool_capacity_set(pool=pool, capacity_tps=10_000, prefill_capacity_tps=50_000,
                          actor="test")
    assert refused.value.code == "capacity_below_guarantees"
    assert refused.value.details["limit"] == "input"


def test_declaring_a_prefill_capacity_derives_the_allocations_input(
        django_capture_on_commit_callbacks, limiter):
    pool = PoolFactory(capacity_tps=10_000)
    a = AllocationFactory(pool=pool, guaranteed_tps=1_000, burst_tps=2_000)
    with django_capture_on_commit_callbacks(execute=True):
        pool_capacity_set(pool=pool, capacity_tps=10_000, prefill_capacity_tps=40_000,
                          actor="test")
    a.refresh_from_db()
    assert (a.guaranteed_input_tps, a.burst_input_tps) == (4_000, 8_000)
    assert pool_guaranteed_input_tps(pool=pool) == 4_000
    with django_capture_on_commit_callbacks(execute=True):
        pool_capacity_set(pool=pool, capacity_tps=10_000, prefill_capacity_tps=None,
                          actor="test")
    a.refresh_from_db()
    assert (a.guaranteed_input_tps, a.burst_input_tps) == (None, None)


def test_changing_an_allocation_keeps_or_rederives_its_input():
    pool = prefill_pool()
    a = allocation_grant(org=OrganizationFactory(), pool=pool, guaranteed_tps=100,
                         burst_tps=100, daily_tokens=1, max_concurrency=1, actor="test")
    a = allocation_change(allocation=a, actor="test", guaranteed_input_tps=2_000,
                          burst_input_tps=4_000)
    a = allocation_change(allocation=a, actor="test", guaranteed_tps=200, burst_tps=200)
    assert (a.guaranteed_input_tps, a.burst_input_tps) == (2_000, 4_000)


GRANTERS = 50


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("binding", ["input", "output"])
def test_fifty_concurrent_grants_keep_both_invariants(binding):
    """The existing race, with both capacities: whichever binds, neither is overcommitted."""
    from rest_framework.test import APIClient

    from tests.factories import OperatorFactory

    # Guaranteeable: 9,000 output and 90,000 input tokens/s. Each grant asks 700 of the binding
    # one (12 fit) and 10 of the other (all 50 would fit).
    pool = prefill_pool()
    ask = ({"guaranteed_tps": 10, "burst_tps": 10, "guaranteed_input_tps": 7_000,
            "burst_input_tps": 7_000} if binding == "input" else
           {"guaranteed_tps": 700, "burst_tps": 700, "guaranteed_input_tps": 10,
            "burst_input_tps": 10})
    orgs = [OrganizationFactory() for _ in range(GRANTERS)]
    operator = OperatorFactory()
    codes: list = [None] * GRANTERS

    def grant(i: int) -> None:
        client = APIClient()
        client.force_authenticate(operator)
        try:
            codes[i] = client.post("/api/v1/allocations/", {
                "org": orgs[i].pk, "pool": pool.pk, "daily_tokens": 1_000,
                "max_concurrency": 10, **ask}, format="json").status_code
        finally:
            connection.close()

    threads_race(GRANTERS, grant)
    assert codes.count(201) == 12 and codes.count(422) == GRANTERS - 12
    assert Allocation.objects.filter(pool=pool).count() == 12
    assert pool_guaranteed_tps(pool=pool) <= pool.guaranteeable_tps
    assert pool_guaranteed_input_tps(pool=pool) <= pool.guaranteeable_input_tps


# --- Admission ----------------------------------------------------------------------------------

@pytest.fixture
def split(limiter):
    """100 output and 1,000 input tokens/s guaranteed (no burst): buckets of 1,000 and 10,000."""
    return tenant_create(pool=prefill_pool(output_estimate_default=4_096), guaranteed_tps=100,
                         burst_tps=100, guaranteed_input_tps=1_000, burst_input_tps=1_000,
                         daily_tokens=10**9, max_concurrency=1_000)


def test_input_and_output_are_debited_from_their_own_buckets(split):
    d = authorize(split, "r1", input_tokens=9_000, max_output_tokens=500)
    assert d.outcome == "allowed"
    assert (d.input_limit, d.input_remaining) == (10_000, 1_000)
    assert (d.output_limit, d.output_remaining) == (1_000, 500)
    # The combined tokens headers show the tighter: input has 10% left, output 50%.
    assert (d.tokens_limit, d.tokens_remaining) == (10_000, 1_000)


@pytest.mark.parametrize("input_tokens, output, limit", [(2_000, 10, "input"),
                                                          (10, 900, "output")])
def test_a_refusal_on_one_dimension_debits_neither(split, input_tokens, output, limit):
    assert authorize(split, "r1", input_tokens=9_000, max_output_tokens=500).allowed
    refused = authorize(split, "r2", input_tokens=input_tokens, max_output_tokens=output)
    assert (refused.outcome, refused.limit, refused.scope) == ("tps_exceeded", limit, "org")
    after = authorize(split, "r3", input_tokens=1, max_output_tokens=1)
    assert (after.input_remaining, after.output_remaining) == (999, 499)
    assert after.day_remaining == 10**9 - 9_500 - 2


def test_long_prompts_consume_prefill_not_decode(limiter):
    """100k-input, 500-output requests: the input bucket limits them, decode stays free."""
    pool = prefill_pool(prefill_capacity_tps=1_000_000, output_estimate_default=4_096)
    t = tenant_create(pool=pool, guaranteed_tps=1_000, burst_tps=1_000,
                      guaranteed_input_tps=20_000, burst_input_tps=20_000, daily_tokens=10**12,
                      max_concurrency=1_000)
    admitted = 0
    for n in range(5):
        d = authorize(t, f"long{n}", input_tokens=100_000, max_output_tokens=500)
        admitted += d.allowed
    assert admitted == 2  # 200,000 input tokens in the bucket
    assert d.limit == "input" and d.output_remaining == 10_000 - 2 * 500


def test_cached_input_tokens_go_back_to_the_input_bucket(split):
    assert authorize(split, "r1", input_tokens=8_000, max_output_tokens=100).allowed
    limiter_settle(pool_id=split.pool.pk, settlements=[Settlement(
        request_id="r1", org_id=split.org.pk, input_tokens=8_000, cached_input_tokens=6_000,
        output_tokens=100, api_key_id=split.key.pk)])
    after = authorize(split, "r2", input_tokens=0, max_output_tokens=1)
    assert after.input_remaining == 10_000 - 2_000  # only the uncached input used prefill
    assert after.day_remaining == 10**9 - 8_100 - 1  # the day counts every token


def test_a_pool_without_prefill_capacity_meters_input_with_output(limiter):
    t = tenant_create(guaranteed_tps=100, burst_tps=100, daily_tokens=10**6,
                      max_concurrency=10)
    d = authorize(t, "r1", input_tokens=700, max_output_tokens=100)
    assert (d.tokens_limit, d.tokens_remaining) == (1_000, 200)
    assert d.input_limit == 0  # no separate input headers: one bucket meters both
    assert authorize(t, "r2", input_tokens=300, max_output_tokens=1).limit == "output"


@pytest.mark.django_db(transaction=True)
def test_fifty_threads_never_admit_more_input_than_the_allocation(limiter, patient_redis):
    t = tenant_create(pool=prefill_pool(), guaranteed_tps=1_000, burst_tps=1_000,
                      guaranteed_input_tps=1_000, burst_input_tps=1_000, daily_tokens=10**12,
                      max_concurrency=10**6)
    limiter_sync_pool(pool_id=t.pool.pk)
    outcomes: list[str] = []

    def worker(i):
        d = authorize(t, f"w{i}", input_tokens=999, max_output_tokens=1)
        outcomes.append((d.outcome, d.limit))

    threads_race(50, worker)
    # The input bucket holds 10,000 tokens (1,000 tokens/s x 10 s): ten requests of 999.
    assert outcomes.count(("allowed", None)) == 10
    assert outcomes.count(("tps_exceeded", "input")) == 40
