"""The demo's traffic, in one place: who sends how much, and what one request looks like. The
seed (seed_usage below) writes the past from it, and `manage.py demo_traffic` (run by
`dev.py run`) keeps sending it, so the charts continue where the history ends.

History: hourly rollups from the first day of last month up to the last hour, and raw events
for the last hour written through the same ingestion as the gateway hook (`usage_record`), so
the pages that read raw events (live use, delivered speed) and those that read rollups (days,
invoices) agree. Last month's invoices are closed. Idempotent: hours that have rollups are
kept, raw events are keyed by request id, invoices by (org, month).
"""

import hashlib
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from billing.models import PriceVersion
from billing.periods import month_before, month_of
from billing.services import invoice_close_month, price_version_create
from metering.models import UsageHourly
from metering.usage import usage_record
from orgs.models import ApiKey, Organization
from orgs.services import api_key_create
from quotas.hook.inputs import UsageInput
from quotas.hook.reservations import reservation_id_issue
from quotas.models import Allocation, AllocationStatus, CapacityPool

# slug -> requests per second on average (a light load: about 1.3 requests/s in all), and
# how often a request is delivered slower than the fast tier's promise. Harbor Health is the
# demo's slow tail: a quarter of its requests, so that its p5 falls below the pool's speed
# floor in any hour. At 12 % an hour of ~90 requests at night may hold under 6 % slow ones, and
# the p5 then lands between the slow and the fast values, above the floor (34 of 3,360 simulated
# windows, one week x 20 org ids; none at 25 %).
DEMO_TRAFFIC = {
    "acme-voice": (0.45, 0.01), "parrot-labs": (0.2, 0.01), "loopwise-agents": (0.15, 0.02),
    "cobalt-code": (0.12, 0.01), "tessellate": (0.1, 0.02), "harbor-health": (0.08, 0.25),
    "quillstream": (0.06, 0.01), "nimbus-support": (0.05, 0.03), "seed-vox": (0.04, 0.01),
    "seed-loop": (0.04, 0.01),
}
KEY_NAME = "Production app"  # the key the demo's history is attributed to
PRICE_NOTE = "Demo prices: list plus the fast-tier premium"
# $ per million tokens, as integer micro-dollars: list price and the fast-tier premium.
DEMO_PRICES = {"input_micros_per_mtok": 5_000_000, "output_micros_per_mtok": 30_000_000,
               "premium_input_micros_per_mtok": 1_250_000,
               "premium_output_micros_per_mtok": 7_500_000}
RAW_WINDOW = timedelta(hours=1)
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class DemoRequest:
    input_tokens: int
    output_tokens: int
    ttft_ms: int
    output_tps: float
    status: str

    @property
    def duration(self) -> timedelta:
        decode = self.output_tokens / self.output_tps if self.output_tps else 0
        return timedelta(milliseconds=self.ttft_ms) + timedelta(seconds=decode)


def demo_request(rng: random.Random, *, slow_share: float) -> DemoRequest:
    """One request: a prompt of about 1,500 tokens, an answer of about 400, a first token in
    about a quarter second and ~650 output tokens/s; `slow_share` of them miss the promise."""
    slow = rng.random() < slow_share
    roll = rng.random()
    status = "failed" if roll < 0.01 else "cancelled" if roll < 0.02 else "completed"
    return DemoRequest(
        input_tokens=max(50, int(rng.lognormvariate(math.log(1_400), 0.5))),
        output_tokens=max(1, int(rng.lognormvariate(math.log(380), 0.6))),
        ttft_ms=int(rng.uniform(1_800, 3_500) if slow and rng.random() < 0.5
                    else rng.lognormvariate(math.log(240), 0.35)),
        output_tps=rng.uniform(180, 290) if slow else rng.gauss(660, 60), status=status)


def diurnal(at: datetime) -> float:
    """Busier in the (UTC) afternoon and on weekdays: between about 0.3 and 1.5."""
    day = 0.75 if at.weekday() >= 5 else 1.0
    return day * (0.9 + 0.6 * math.sin((at.hour - 9) / 24 * 2 * math.pi))


def demo_orgs() -> list[tuple[Organization, Allocation, float, float]]:
    """The active demo orgs that send traffic, with their allocation and rates."""
    allocations = {a.org.slug: a for a in Allocation.objects.filter(
        status=AllocationStatus.ACTIVE, org__slug__in=DEMO_TRAFFIC,
        org__status="active").select_related("org", "pool")}
    return [(allocations[slug].org, allocations[slug], *DEMO_TRAFFIC[slug])
            for slug in DEMO_TRAFFIC if slug in allocations]


def _seeded(*parts) -> random.Random:
    return random.Random(hashlib.sha256(":".join(map(str, parts)).encode()).digest())


def seed_usage(*, pool: CapacityPool, operator, actor: str) -> None:
    now = timezone.now()
    start = month_before(month_of(now))
    _prices(pool=pool, start=datetime.combine(start, datetime.min.time(), tzinfo=UTC),
            operator=operator)
    # Raw events from the start of the hour an hour ago: whole hours of them.
    first_raw_hour = (now - RAW_WINDOW).replace(minute=0, second=0, microsecond=0)
    for org, allocation, rate, slow_share in demo_orgs():
        key = _key(org, actor)
        _rollups(org=org, allocation=allocation, key=key, rate=rate, slow_share=slow_share,
                 since=datetime.combine(start, datetime.min.time(), tzinfo=UTC),
                 until=first_raw_hour)
        _raw_events(org=org, allocation=allocation, key=key, rate=rate, slow_share=slow_share,
                    since=first_raw_hour, until=now)
        invoice_close_month(org=org, month=start, actor=operator, now=now)


def _prices(*, pool, start: datetime, operator) -> None:
    if PriceVersion.objects.filter(pool=pool, org=None).exists():
        return
    # Dated back to the start of the demo's history, as if set then (`now`): the service
    # refuses to rewrite history from today's point of view.
    price_version_create(pool=pool, effective_from=start, note=PRICE_NOTE, actor=operator,
                         now=start, **DEMO_PRICES)


def _key(org: Organization, actor: str) -> ApiKey:
    key = ApiKey.objects.filter(org=org, name=KEY_NAME, revoked_at__isnull=True).first()
    return key or api_key_create(org=org, name=KEY_NAME, actor=actor)[0]


# Requests drawn per day of history: their sums, scaled to an hour's count, make its rollup.
SAMPLE = 24


def _rollups(*, org, allocation, key, rate, slow_share, since, until) -> None:
    """One rollup row per hour without one: the hour's request count from the rate, its sums
    from the day's sample of simulated requests (drawing every one of a month's requests would
    take minutes)."""
    have = set(UsageHourly.objects.filter(org=org, pool=allocation.pool, hour__gte=since,
                                          hour__lt=until).values_list("hour", flat=True))
    rows, hour, samples = [], since, {}
    while hour < until:
        if hour not in have:
            day = hour.date()
            if day not in samples:
                day_rng = _seeded(org.pk, day.isoformat())
                samples[day] = [demo_request(day_rng, slow_share=slow_share)
                                for _ in range(SAMPLE)]
            hour_rng = _seeded(org.pk, hour.isoformat())
            count = int(rate * 3600 * diurnal(hour) * hour_rng.uniform(0.85, 1.15))
            rows.append(_rollup(org, allocation.pool, key, hour, count, samples[day],
                                speed=hour_rng.uniform(0.9, 1.1)))
        hour += HOUR
    UsageHourly.objects.bulk_create(rows, batch_size=2_000, ignore_conflicts=True)


def _rollup(org, pool, key, hour, count: int, sample: list[DemoRequest], *,
            speed: float) -> UsageHourly:
    """The sums the ingestion would have written for `count` requests like `sample`, a little
    faster or slower this hour (`speed`)."""
    scale = count / len(sample)

    def total(requests, value) -> int:
        return round(sum(value(r) for r in requests) * scale)

    timed = [r for r in sample if r.status != "failed"]
    fast = [r for r in sample if r.status == "completed"
            and r.ttft_ms <= pool.ttft_ceiling_ms and r.output_tps >= pool.speed_floor_output_tps]
    return UsageHourly(
        org=org, pool=pool, api_key=key, hour=hour, requests=count,
        errors=total(sample, lambda r: r.status != "completed"),
        input_tokens=total(sample, lambda r: r.input_tokens),
        output_tokens=total(sample, lambda r: r.output_tokens),
        premium_input_tokens=total(fast, lambda r: r.input_tokens),
        premium_output_tokens=total(fast, lambda r: r.output_tokens),
        ttft_ms_total=total(timed, lambda r: r.ttft_ms / speed),
        ttft_count=total(timed, lambda r: 1),
        decode_ms_total=total(timed, lambda r: r.output_tokens * 1000 / r.output_tps / speed))


def _raw_events(*, org, allocation, key, rate, slow_share, since, until) -> None:
    """The requests of the last hours, through the hook's ingestion. Arrivals are drawn minute
    by minute from a seed of (org, minute) and named by their time, so a later run draws the
    same ones again (recorded as duplicates) and only adds the minutes since."""
    events, minute = [], since
    while minute < until:
        rng = _seeded(org.pk, "raw", minute.isoformat())
        at = minute + timedelta(seconds=rng.expovariate(rate * diurnal(minute)))
        while at < minute + timedelta(minutes=1):
            request = demo_request(rng, slow_share=slow_share)
            if at + request.duration <= until:
                events.append(_event(org, allocation, key, at, request))
            at += timedelta(seconds=rng.expovariate(rate * diurnal(minute)))
        minute += timedelta(minutes=1)
    for batch in range(0, len(events), 1_000):
        usage_record(events=events[batch:batch + 1_000])


def _event(org, allocation, key, at: datetime, request: DemoRequest) -> UsageInput:
    request_id = f"demo-{org.pk}-{at:%Y%m%d%H%M%S%f}"
    return UsageInput(
        request_id=request_id, input_tokens=request.input_tokens,
        output_tokens=request.output_tokens, status=request.status, started_at=at,
        first_token_at=(None if request.status == "failed"
                        else at + timedelta(milliseconds=request.ttft_ms)),
        finished_at=at + request.duration,
        reservation_id=reservation_id_issue(pool_id=allocation.pool_id, org_id=org.pk,
                                            api_key_id=key.pk, request_id=request_id))
