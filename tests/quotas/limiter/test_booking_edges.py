"""A booking in the admission engine, against real Redis: from the window's first second to its
last the org is held to its allocation plus the booking, before and after to its allocation
alone, with no beat in between (the publish schedules the change, authorize makes it at the
instant), and the pool's headroom for bursts follows the same edges."""

from datetime import timedelta

import pytest

from quotas.bookings import BookingAsk, booking_create
from quotas.limiter.state import limiter_org_guarantee
from quotas.publish import limiter_sync_pool, limits_publish_orgs
from tests.aio import limiter_authorize
from tests.factories import PoolFactory
from tests.quotas.conftest import FROZEN_AT, tenant_create

pytestmark = pytest.mark.django_db

# The window: tomorrow 13:00-14:00 UTC (the limiter's clock is frozen around it).
START = FROZEN_AT + timedelta(hours=1)
END = START + timedelta(hours=1)


def take(t, request_id: str, tokens: int, **kwargs):
    """A request of exactly `tokens` (input, and one output token)."""
    return limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id=request_id,
                             input_tokens=tokens - 1, max_output_tokens=1, **kwargs)


def at(clock, moment) -> None:
    clock.freeze(moment)


def held_to(t, clock, moment, tokens: int, name: str) -> None:
    """At `moment` exactly `tokens` are left: one more is refused, then they are admitted."""
    at(clock, moment)
    assert take(t, f"{name}-over", tokens + 1).outcome == "tps_exceeded", name
    assert take(t, f"{name}-fit", tokens).outcome == "allowed", name


@pytest.fixture
def booked(limiter, limiter_clock):
    # 100 tokens/s guaranteed, no burst: a bucket of 1,000 (10 s). The booking adds 400: 500
    # tokens/s, a bucket of 5,000, and 50,000 more tokens a day, during the window.
    t = tenant_create(guaranteed_tps=100, burst_tps=100, daily_tokens=100_000,
                      max_concurrency=1_000, sync=False)
    booking_create(org=t.org, pool=t.pool, actor="test", ask=BookingAsk(
        starts_at=START, ends_at=END, output_tps=400, extra_daily_tokens=50_000))
    at(limiter_clock, START - timedelta(minutes=10))
    limiter_sync_pool(pool_id=t.pool.pk)  # published ahead of the window, as on booking
    return t


def test_one_second_before_the_start_the_allocation_one_second_after_the_sum(booked,
                                                                             limiter_clock):
    at(limiter_clock, START - timedelta(seconds=10))
    assert take(booked, "drain", 1_000).outcome == "allowed"  # the bucket is empty
    # 9 s at 100 tokens/s.
    held_to(booked, limiter_clock, START - timedelta(seconds=1), 900, "before")
    # 1 s at 100 up to the start, then 1 s at 500; the bucket may now hold 5,000.
    held_to(booked, limiter_clock, START + timedelta(seconds=1), 600, "after")
    held_to(booked, limiter_clock, START + timedelta(seconds=30), 5_000, "full")
    assert take(booked, "day", 1).day_limit == 150_000


def test_one_second_before_the_end_the_sum_one_second_after_the_allocation(booked,
                                                                           limiter_clock):
    at(limiter_clock, END - timedelta(seconds=10))
    assert take(booked, "drain", 5_000).outcome == "allowed"
    held_to(booked, limiter_clock, END - timedelta(seconds=1), 4_500, "before")
    held_to(booked, limiter_clock, END + timedelta(seconds=1), 600, "after")
    assert take(booked, "day", 1).day_limit == 100_000


def test_at_the_end_a_full_bucket_is_clipped_to_the_allocations_ceiling(booked, limiter_clock):
    at(limiter_clock, END - timedelta(seconds=1))
    assert take(booked, "inside", 5_000, dry_run=True).outcome == "allowed"  # full at 5,000
    held_to(booked, limiter_clock, END + timedelta(seconds=1), 1_000, "after")


def test_a_publish_just_after_the_start_still_meets_the_edge(booked, limiter_clock):
    """The beat republishes the org once the window began: the buckets of an org idle since
    before the start must still be refilled at the old rate up to the instant."""
    at(limiter_clock, START - timedelta(seconds=2))
    assert take(booked, "drain", 1_000).outcome == "allowed"
    at(limiter_clock, START + timedelta(seconds=3))
    limits_publish_orgs(org_ids=[booked.org.pk])
    # 2 s at 100, then 4 s at 500 (refilled from the start at the old rate, 6 s at 500 = 3,000).
    held_to(booked, limiter_clock, START + timedelta(seconds=4), 2_200, "after")


def test_the_effective_guarantee_the_queue_reads(booked, limiter_clock):
    def guarantee(moment):
        return limiter_org_guarantee(pool_id=booked.pool.pk, org_id=booked.org.pk, at=moment)

    assert guarantee(START - timedelta(seconds=1)).output_tps == 100
    assert guarantee(START).output_tps == 500
    assert guarantee(END - timedelta(milliseconds=1)).output_tps == 500
    assert guarantee(END).output_tps == 100


def test_the_pools_headroom_for_bursts_shrinks_at_the_start(limiter, limiter_clock):
    # 10,000 tokens/s; A and B hold 100 each; B may burst by 9,800 more. A books 8,000: from
    # the start the pool lends bursts 1,800 tokens/s (a bucket of 18,000), not 9,800.
    pool = PoolFactory(capacity_tps=10_000)
    a = tenant_create(pool=pool, guaranteed_tps=100, burst_tps=100, sync=False)
    b = tenant_create(pool=pool, guaranteed_tps=100, burst_tps=9_900, max_concurrency=100,
                      daily_tokens=10**9, sync=False)
    booking_create(org=a.org, pool=pool, actor="test", ask=BookingAsk(
        starts_at=START, ends_at=END, output_tps=8_000))
    at(limiter_clock, START - timedelta(minutes=10))
    limiter_sync_pool(pool_id=pool.pk)
    at(limiter_clock, START - timedelta(seconds=1))
    assert take(b, "before", 50_000).outcome == "allowed"  # borrowed from a 98,000 headroom
    at(limiter_clock, START + timedelta(seconds=1))
    # The headroom: 49,000 left, clipped to 18,000 at the start, 1,800 refilled since.
    assert take(b, "after-over", 25_000).outcome == "pool_capacity_exhausted"
    assert take(b, "after-fit", 15_000).outcome == "allowed"
