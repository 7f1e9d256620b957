"""What settle gives back of a reservation's unused tokens, and where: each bucket gets back at
most what the request took from its level, in the reverse order of taking (authorize.lua's
plan: free, then guaranteed, then borrowed). Against real Redis, with the engine's clock frozen
(the scripts take `now` from the caller), so every level is exact.

The pool (1,000 tokens/s, headroom 100/s: a 1,000-token bucket) has two orgs: A (guaranteed
100/s, burst 50/s on top: buckets of 1,000 and 500 tokens) and B (800/s, no burst), which
only takes its share of the capacity. A request of A reserves exactly its input (no output)."""

import pytest

from quotas.limiter.connection import limiter_client
from quotas.limiter.engine import limiter_settle
from quotas.limiter.schema import KEY, LAYOUT, RESERVATION, Settlement, pool_key
from tests.aio import limiter_authorize
from tests.factories import PoolFactory
from tests.quotas.conftest import tenant_create, threads_race

pytestmark = pytest.mark.django_db

# The levels of a hash's packed field, as exact decimal strings: Redis turns a Lua number
# into an integer, and a missing level (nil) would end the list.
LEVELS = """local v = {cmsgpack.unpack(redis.call('HGET', KEYS[1], ARGV[1]))}
local out = {}
for i = 1, tonumber(ARGV[2]) do out[i] = v[i] and string.format('%.17g', v[i]) or '' end
return out"""


def levels(t, *, input: bool = False) -> tuple[float, float, float]:
    """A's guaranteed and burst levels and the pool's headroom level, as stored (of the
    output dimension, or of the input one)."""
    redis = limiter_client()
    org = redis.eval(LEVELS, 1, pool_key(t.pool.pk, KEY.org, t.org.pk), LAYOUT.levels, 4)
    pool = redis.eval(LEVELS, 1, pool_key(t.pool.pk, KEY.pool), LAYOUT.levels, 2)
    g, b, h = (org[2], org[3], pool[1]) if input else (org[0], org[1], pool[0])
    return float(g), float(b), float(h)


def authorize(t, request_id: str, cost: int):
    d = limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id=request_id,
                          input_tokens=cost, max_output_tokens=0)
    assert d.outcome == "allowed" and d.reserved_tokens == cost, d
    return d


def settle(t, request_id: str, used: int) -> None:
    assert limiter_settle(pool_id=t.pool.pk, settlements=[
        Settlement(request_id=request_id, org_id=t.org.pk, input_tokens=used)]) == 1


@pytest.fixture
def a(limiter, db):
    pool = PoolFactory(capacity_tps=1_000)
    tenant_create(pool=pool, guaranteed_tps=800, burst_tps=800, sync=False)
    return tenant_create(pool=pool, guaranteed_tps=100, burst_tps=150, daily_tokens=10**9,
                         max_concurrency=100)


@pytest.fixture
def overflowing(a, limiter_clock):
    """A's guaranteed bucket drains (1,000 tokens taken a second ago: 100 back since), while
    its burst and the pool's headroom sat full for that second: 50 and 100 tokens of refill
    their capacities cut off, which a request may take without depriving anyone."""
    authorize(a, "drain", 1_000)
    limiter_clock.advance(seconds=1)
    return a


def test_free_capacity_comes_back_only_to_the_levels_it_was_taken_from(overflowing):
    """r1 (100 tokens) takes the headroom's cut-off refill: 50 of it from the burst's own
    cut-off refill, 50 from the burst's level; nothing from the guaranteed bucket nor the
    headroom's level. r2 then borrows 300 from the burst and the headroom. r1, settled unused,
    gives the burst back its 50 and the headroom nothing: the cut-off refill it took was never
    anyone's, and giving it back would create capacity while r2 holds its share."""
    a = overflowing
    authorize(a, "r1", 100)
    assert levels(a) == (100, 450, 1_000)
    authorize(a, "r2", 400)  # 100 from the guaranteed bucket, 300 borrowed
    assert levels(a) == (0, 150, 700)

    settle(a, "r1", used=0)

    assert levels(a) == (0, 200, 700)
    settle(a, "r2", used=0)
    assert levels(a) == (100, 500, 1_000)  # as before r1 and r2, less what nobody owned


def test_borrowed_capacity_comes_back_to_the_burst_and_the_headroom(a):
    authorize(a, "first", 900)  # from the guaranteed bucket: 100 left
    before = levels(a)
    assert before == (100, 500, 1_000)
    authorize(a, "r1", 600)  # 100 from the guaranteed bucket, 500 borrowed
    assert levels(a) == (0, 0, 500)

    settle(a, "r1", used=0)

    assert levels(a) == before


# r1 (500 tokens) takes 100 free (50 of the burst's cut-off refill, 50 of its level), 100 from
# the guaranteed bucket, 300 borrowed: levels (0, 150, 700). What it did not use goes back to
# the borrowed part first, then the guaranteed one, then the burst's level; what it used counts
# against the cut-off refill first (nobody's), then the burst's level, and so on.
@pytest.mark.parametrize(("used", "after"), [
    (0, (100, 500, 1_000)),  # the 50 of nobody's refill is gone
    (50, (100, 500, 1_000)),
    (80, (100, 470, 1_000)),
    (100, (100, 450, 1_000)),
    (150, (50, 450, 1_000)),
    (200, (0, 450, 1_000)),
    (300, (0, 350, 900)),
    (500, (0, 150, 700)),
])
def test_unused_tokens_go_back_in_the_reverse_order_of_taking(overflowing, used, after):
    a = overflowing
    authorize(a, "r1", 500)
    assert levels(a) == (0, 150, 700)

    settle(a, "r1", used=used)

    assert levels(a) == after


def test_usage_beyond_the_reservation_is_a_debt_of_the_guaranteed_bucket(overflowing):
    a = overflowing
    authorize(a, "r1", 500)

    settle(a, "r1", used=750)

    assert levels(a) == (-250, 150, 700)


def test_a_reservation_recorded_before_its_parts_were_kept_apart_refunds_as_then(overflowing):
    """A record written before the refund followed the parts (a rolling deploy keeps them for
    hours) says only what came from the burst, free and borrowed together (`from_burst`): that
    much of what it did not use goes back to the burst and the headroom (within capacity), the
    rest to the guaranteed bucket."""
    a = overflowing
    authorize(a, "r1", 500)  # 100 free, 100 guaranteed, 300 borrowed: levels (0, 150, 700)
    record = pool_key(a.pool.pk, KEY.reservation, "r1")
    redis = limiter_client()
    redis.hdel(record, RESERVATION.taken)
    redis.hset(record, mapping={RESERVATION.from_burst: "400", RESERVATION.input_from_burst: "0"})

    settle(a, "r1", used=100)  # 400 back, all of it to the burst and the headroom

    assert levels(a) == (0, 500, 1_000)


def test_input_metered_apart_gets_back_its_own_parts(limiter, db, limiter_clock):
    """The same, ten times larger, in a pool that meters input apart (prefill 10,000 tokens/s,
    input headroom 1,000/s): A's input buckets hold 10,000 guaranteed and 5,000 burst tokens."""
    pool = PoolFactory(capacity_tps=1_000, prefill_capacity_tps=10_000)
    tenant_create(pool=pool, guaranteed_tps=800, burst_tps=800, guaranteed_input_tps=8_000,
                  burst_input_tps=8_000, sync=False)
    a = tenant_create(pool=pool, guaranteed_tps=100, burst_tps=150, guaranteed_input_tps=1_000,
                      burst_input_tps=1_500, daily_tokens=10**9, max_concurrency=100)
    authorize(a, "drain", 10_000)
    limiter_clock.advance(seconds=1)
    authorize(a, "r1", 5_000)  # 1,000 free (500 of the burst's level), 1,000 guaranteed, 3,000
    assert levels(a, input=True) == (0, 1_500, 7_000)

    settle(a, "r1", used=800)  # 4,200 back: 3,000 borrowed, 1,000 guaranteed, 200 burst

    assert levels(a, input=True) == (1_000, 4_700, 10_000)
    assert levels(a) == (1_000, 500, 1_000)  # no output reserved, none given back


def test_racing_requests_and_settlements_give_back_exactly_what_they_took(overflowing,
                                                                          patient_redis):
    """At one instant (the clock frozen), with the headroom's and the burst's cut-off refill
    taken by a request F and the guaranteed bucket drained by another (D, all used): six threads
    each authorize and settle (unused) five requests of 50 tokens, borrowed from the burst and
    the headroom, while one borrower H holds its 50 throughout and F is settled unused among
    them. Whatever the interleaving, every bucket ends where it was after H, less nothing: F
    took no level's tokens, so it gives none back."""
    a = overflowing
    authorize(a, "F", 50)  # the burst's cut-off refill alone (50 of the headroom's 100)
    authorize(a, "D", 100)  # the guaranteed bucket's 100
    settle(a, "D", used=100)
    authorize(a, "H", 50)  # borrowed
    held = levels(a)
    assert held == (0, 450, 950)

    done = []  # a thread's failure raises in the thread, not here: count what was done

    def worker(i: int) -> None:
        for n in range(5):
            authorize(a, f"t{i}-{n}", 50)
            if i == 0 and n == 2:
                settle(a, "F", used=0)
            settle(a, f"t{i}-{n}", used=0)
            done.append(n)

    threads_race(6, worker)

    assert len(done) == 30
    assert levels(a) == held
    settle(a, "H", used=0)
    assert levels(a) == (0, 500, 1_000)
