"""Authorize reserves min(max_output_tokens, estimate), the estimate being the
p95 of the output lengths settle observed for the key (with enough history) or org in the pool;
settle debits any overshoot (the buckets may go negative) and refunds the rest."""

import pytest

from quotas.limiter.connection import limiter_client
from quotas.limiter.engine import ESTIMATE_MIN_SAMPLES, limiter_settle
from quotas.limiter.schema import KEY, Settlement, pool_key
from quotas.publish import limiter_sync_pool
from tests.aio import limiter_authorize
from tests.factories import PoolFactory
from tests.quotas.conftest import tenant_create, threads_race

pytestmark = pytest.mark.django_db


def authorize(t, request_id, *, input_tokens=10, max_output_tokens=32_000, api_key=None):
    return limiter_authorize(pool_id=t.pool.pk, api_key=api_key or t.plaintext,
                             request_id=request_id, input_tokens=input_tokens,
                             max_output_tokens=max_output_tokens)


def settle(t, request_id, *, input_tokens=10, output_tokens=500, completed=1, key_id=None):
    return limiter_settle(pool_id=t.pool.pk, settlements=[Settlement(
        request_id=request_id, org_id=t.org.pk, input_tokens=input_tokens,
        output_tokens=output_tokens, api_key_id=key_id or t.key.pk, completed=completed)])


def history(t, outputs, *, prefix="h", api_key=None, key_id=None):
    """Completed requests with these output lengths, authorized and settled one by one."""
    for n, output in enumerate(outputs):
        assert authorize(t, f"{prefix}{n}", api_key=api_key).allowed
        settle(t, f"{prefix}{n}", output_tokens=output, key_id=key_id)


@pytest.fixture
def roomy(limiter):
    """Limits no test here reaches, in a pool with a 2,000-token default and a floor of 100."""
    pool = PoolFactory(capacity_tps=10**8, output_estimate_default=2_000,
                       output_estimate_floor=100)
    return tenant_create(pool=pool, guaranteed_tps=10**7, burst_tps=10**7, daily_tokens=10**12,
                         max_concurrency=10**6)


def test_cold_start_reserves_the_pools_default_and_never_more_than_max_tokens(roomy):
    d = authorize(roomy, "r1", max_output_tokens=32_000)
    assert (d.reserved_input_tokens, d.reserved_output_tokens, d.reserved_tokens) == (
        10, 2_000, 2_010)
    assert authorize(roomy, "r2", max_output_tokens=300).reserved_output_tokens == 300
    assert authorize(roomy, "r3", max_output_tokens=None).reserved_output_tokens == 2_000


def test_the_estimate_becomes_the_p95_of_recent_outputs(roomy):
    # 19 requests are not yet enough history: still the pool's default.
    history(roomy, [500] * (ESTIMATE_MIN_SAMPLES - 1))
    assert authorize(roomy, "a").reserved_output_tokens == 2_000
    # Twenty outputs of 500 tokens: the p95 is 500, read as the top of its bucket (<= 9% more).
    history(roomy, [500], prefix="h-last")
    estimate = authorize(roomy, "b").reserved_output_tokens
    assert 500 <= estimate <= 500 * 1.0905
    assert authorize(roomy, "c", max_output_tokens=None).reserved_output_tokens == estimate
    assert authorize(roomy, "d", max_output_tokens=200).reserved_output_tokens == 200


def test_the_p95_follows_the_distribution_and_never_falls_below_the_floor(roomy):
    outputs = [100 + 10 * i for i in range(100)]  # 100 ... 1,090: the p95 is about 1,040
    history(roomy, outputs)
    estimate = authorize(roomy, "p").reserved_output_tokens
    assert 1_040 <= estimate <= 1_090 * 1.0905
    tiny = tenant_create(pool=roomy.pool, guaranteed_tps=10**6, burst_tps=10**6,
                         daily_tokens=10**12, max_concurrency=10**6)
    history(tiny, [3] * 30, prefix="tiny")
    assert authorize(tiny, "t").reserved_output_tokens == 100  # the pool's floor


def test_recent_outputs_count_more_than_old_ones(roomy):
    history(roomy, [4_000] * 200)
    assert authorize(roomy, "old").reserved_output_tokens >= 4_000
    # After six half-lives of short answers, the long ones weigh under 2% of the total.
    history(roomy, [200] * 800, prefix="new")
    assert authorize(roomy, "new").reserved_output_tokens <= 200 * 1.0905


def test_a_key_with_enough_history_has_its_own_estimate(roomy):
    from orgs.services.api_keys import api_key_create

    chatty, secret = api_key_create(org=roomy.org, name="chatty", actor="test")
    limiter_sync_pool(pool_id=roomy.pool.pk)
    history(roomy, [300] * ESTIMATE_MIN_SAMPLES)  # the org's first key: short answers
    history(roomy, [3_000] * 5, prefix="c", api_key=secret, key_id=chatty.pk)
    # Five samples are not enough for the new key: it gets the org's estimate, whose p95 now
    # falls among the new key's long answers (5 of 25), while the first key keeps its own.
    assert authorize(roomy, "k1", api_key=secret).reserved_output_tokens >= 3_000
    assert authorize(roomy, "f1").reserved_output_tokens <= 300 * 1.0905
    history(roomy, [3_000] * ESTIMATE_MIN_SAMPLES, prefix="c2", api_key=secret,
            key_id=chatty.pk)
    assert 3_000 <= authorize(roomy, "k2", api_key=secret).reserved_output_tokens \
        <= 3_000 * 1.0905


def test_only_completed_requests_teach_the_estimate(roomy):
    for n in range(30):
        authorize(roomy, f"f{n}")
        settle(roomy, f"f{n}", output_tokens=5, completed=0)  # failed or cancelled
    assert authorize(roomy, "x").reserved_output_tokens == 2_000


def test_overshoot_is_a_debt_the_refill_pays_never_forgiven(limiter, limiter_clock):
    pool = PoolFactory(output_estimate_default=100, output_estimate_floor=1)
    t = tenant_create(pool=pool, guaranteed_tps=100, burst_tps=100, daily_tokens=10**9,
                      max_concurrency=100)
    d = authorize(t, "r1", input_tokens=0, max_output_tokens=None)
    assert d.reserved_output_tokens == 100 and d.tokens_remaining == 900
    settle(t, "r1", input_tokens=0, output_tokens=2_100)  # 2,000 more than reserved
    after = authorize(t, "r2", input_tokens=0, max_output_tokens=1)
    # The bucket (900 left) owes 1,100: nothing remains, the next request waits for the refill.
    assert after.outcome == "tps_exceeded" and after.tokens_remaining == 0
    assert after.retry_after_ms == 11_010  # owes 1,100, needs 1: 1,101 tokens at 100/s
    assert after.day_remaining == 10**9 - 2_100
    limiter_clock.advance(seconds=11)  # 1,100 tokens refilled: the debt is paid, nothing more
    assert authorize(t, "r3", input_tokens=0, max_output_tokens=1).outcome == "tps_exceeded"
    limiter_clock.advance(milliseconds=10)
    assert authorize(t, "r4", input_tokens=0, max_output_tokens=1).outcome == "allowed"


def test_unused_reservation_is_refunded(limiter, limiter_clock):
    t = tenant_create(guaranteed_tps=100, burst_tps=100, daily_tokens=10**6,
                      max_concurrency=100)
    authorize(t, "r1", input_tokens=100, max_output_tokens=800)
    settle(t, "r1", input_tokens=100, output_tokens=50)
    d = authorize(t, "r2", input_tokens=0, max_output_tokens=1)
    assert d.tokens_remaining == 1_000 - 150 - 1
    assert d.day_remaining == 10**6 - 150 - 1


def test_histograms_stay_bounded(roomy):
    """One field per log-spaced bucket: lengths from 0 to 10M tokens fit in 188 fields."""
    lengths = [0, 1, 2, 3, 7, 10, 99, 500, 4_095, 32_000, 1_000_000, 10_000_000]
    history(roomy, lengths * 3)
    hist = limiter_client().hgetall(pool_key(roomy.pool.pk, KEY.histogram, roomy.org.pk))
    buckets = [f for f in hist if f.isdigit()]
    assert len(buckets) == len(set(lengths)) and max(map(int, buckets)) <= 187


@pytest.mark.django_db(transaction=True)
def test_fifty_threads_settling_at_once_lose_no_sample_and_no_token(limiter, patient_redis):
    pool = PoolFactory(capacity_tps=10**8)
    t = tenant_create(pool=pool, guaranteed_tps=10**7, burst_tps=10**7, daily_tokens=10**12,
                      max_concurrency=10**6)
    threads_n, each = 50, 10

    def worker(i):
        for n in range(each):
            rid = f"w{i}-{n}"
            assert authorize(t, rid, max_output_tokens=None).allowed
            settle(t, rid, output_tokens=100 + i)

    threads_race(threads_n, worker)
    hist = limiter_client().hgetall(pool_key(t.pool.pk, KEY.histogram, t.org.pk))
    assert int(hist["n"]) == threads_n * each
    used = sum(10 + 100 + i for i in range(threads_n)) * each
    assert authorize(t, "after", input_tokens=0, max_output_tokens=1).day_remaining == \
        10**12 - used - 1
    assert 100 + 47 <= authorize(t, "est", max_output_tokens=None).reserved_output_tokens \
        <= (100 + 49) * 1.0905
