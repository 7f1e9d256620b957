"""Reads of recorded usage: the charts' series, the speed delivered, the usage per key and
per pool. Summed in PostgreSQL (date_bin, percentile_cont), one query each."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from django.db.models import Aggregate, Count, DateTimeField, F, FloatField, Func, Q, Sum, Value
from django.utils import timezone

from metering.models import UsageEvent, UsageHourly, UsageStatus
from quotas.models import CapacityPool

# date_bin needs an origin; buckets are aligned to the Unix epoch (so to whole UTC minutes/hours).
_BIN_ORIGIN = "1970-01-01T00:00:00Z"
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class UsagePoint:
    at: datetime
    tokens: int
    requests: int
    errors: int

    def tps(self, bucket_seconds: int) -> float:
        return self.tokens / bucket_seconds


def _bins(since: datetime, until: datetime, step: timedelta) -> list[datetime]:
    start = datetime.fromtimestamp(since.timestamp() // step.total_seconds()
                                   * step.total_seconds(), tz=UTC)
    return [start + i * step for i in range(int((until - start) / step) + 1)]


def _filled(rows, *, since: datetime, until: datetime, step: timedelta) -> list[UsagePoint]:
    """Every bucket of the window, empty ones as zero, so a quiet minute reads as a dip."""
    by_bucket = {row["bucket"]: row for row in rows}
    return [UsagePoint(at=b, tokens=by_bucket.get(b, {}).get("tokens") or 0,
                       requests=by_bucket.get(b, {}).get("requests") or 0,
                       errors=by_bucket.get(b, {}).get("errors") or 0)
            for b in _bins(since, until, step)]


# An error is a request that did not complete (failed, or cancelled by the client): the same
# rule as the hourly rollup's `errors`, so raw and rolled-up figures agree.
NOT_COMPLETED = ~Q(status=UsageStatus.COMPLETED)


def usage_tps_series(*, org, since: datetime, bucket_seconds: int = 60,
                     until: datetime | None = None) -> list[UsagePoint]:
    """Tokens (input + output, what the limiter meters), requests and errors per bucket of
    `bucket_seconds`, from the raw events: bucketed by PostgreSQL's date_bin in one query, by
    start time like the hourly rollup, which keeps it on the (org, started_at) index."""
    until = until or timezone.now()
    bucket = Func(Value(timedelta(seconds=bucket_seconds)), F("started_at"),
                  Value(datetime.fromisoformat(_BIN_ORIGIN)), function="date_bin",
                  output_field=DateTimeField())
    rows = (UsageEvent.objects.filter(org=org, started_at__gte=since, started_at__lte=until)
            .annotate(bucket=bucket).values("bucket").order_by()
            .annotate(tokens=Sum(F("input_tokens") + F("output_tokens")), requests=Count("id"),
                      errors=Count("id", filter=NOT_COMPLETED)))
    return _filled(rows, since=since, until=until, step=timedelta(seconds=bucket_seconds))


def usage_hourly_series(*, org, since: datetime, until: datetime | None = None
                        ) -> list[UsagePoint]:
    """The same per hour, from the hourly rollup (cheap over a day or more)."""
    until = until or timezone.now()
    rows = (UsageHourly.objects.filter(org=org, hour__gte=_bins(since, until, HOUR)[0],
                                       hour__lte=until)
            .values(bucket=F("hour")).order_by()
            .annotate(tokens=Sum(F("input_tokens") + F("output_tokens")),
                      requests=Sum("requests"), errors=Sum("errors")))
    return _filled(rows, since=since, until=until, step=HOUR)


@dataclass(frozen=True)
class KeyUsage:
    api_key_id: int | None
    name: str
    prefix: str
    requests: int
    errors: int
    input_tokens: int
    output_tokens: int
    avg_ttft_ms: int | None
    output_tps: float | None
    interrupted: int = 0  # of requests: billed from a lease's last progress


def usage_by_key(*, org, since: datetime) -> list[KeyUsage]:
    """Per API key since `since` (whole hours, from the rollup), busiest first, with the speed
    delivered: mean time to first token and output tokens/s while decoding."""
    rows = (UsageHourly.objects.filter(org=org, hour__gte=since)
            .values("api_key_id", "api_key__name", "api_key__lookup").order_by()
            .annotate(requests=Sum("requests"), errors=Sum("errors"), i=Sum("input_tokens"),
                      o=Sum("output_tokens"), ttft=Sum("ttft_ms_total"), n=Sum("ttft_count"),
                      decode=Sum("decode_ms_total"), interrupted=Sum("interrupted")))
    usage = [KeyUsage(api_key_id=r["api_key_id"], name=r["api_key__name"] or "(no key)",
                      prefix=r["api_key__lookup"] or "", requests=r["requests"],
                      errors=r["errors"], input_tokens=r["i"], output_tokens=r["o"],
                      avg_ttft_ms=round(r["ttft"] / r["n"]) if r["n"] else None,
                      output_tps=round(r["o"] * 1000 / r["decode"], 1) if r["decode"] else None,
                      interrupted=r["interrupted"])
             for r in rows]
    return sorted(usage, key=lambda k: -(k.input_tokens + k.output_tokens))


def usage_interrupted_requests(*, org, start: datetime, end: datetime) -> int:
    """Requests of the hours in [start, end) billed from a lease's last progress (their
    gateway died mid-stream), from the hourly rollups, as invoices rate them."""
    return UsageHourly.objects.filter(org=org, hour__gte=start, hour__lt=end).aggregate(
        n=Sum("interrupted"))["n"] or 0


def usage_tokens_by_pool(*, org, since: datetime) -> dict[int, int]:
    """Tokens used per pool in the hours from `since` (the hourly rollup is written in the same
    transaction as each usage batch, so it includes the current hour)."""
    rows = (UsageHourly.objects.filter(org=org, hour__gte=since).values("pool_id").order_by()
            .annotate(t=Sum(F("input_tokens") + F("output_tokens"))))
    return {row["pool_id"]: row["t"] or 0 for row in rows}


class Percentile(Aggregate):
    """PostgreSQL's percentile_cont: the value below which `fraction` of the rows fall,
    interpolated; NULLs are ignored."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, *, fraction: float, **extra):
        super().__init__(expression, fraction=float(fraction), **extra)


@dataclass(frozen=True)
class DeliveredSpeed:
    """What a group of requests got (a pool, an org in a pool, an API key...). `requests`
    counts every request and `tokens` every token; the speed figures describe the `measured`
    ones only: completed, with a first token. Output tokens/s is per request, so its slow
    tail is the 5th percentile (95% of requests were at least that fast)."""

    group: dict  # the grouping columns of this row, e.g. {"pool_id": 3, "org_id": 7}
    requests: int
    errors: int
    tokens: int
    measured: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    output_tps_p50: float | None
    output_tps_p5: float | None
    fast: int  # measured requests that kept the pool's promise (premium-eligible)
    interrupted: int = 0  # of errors: billed from a lease's last progress (the gateway died)
    # Requests admitted after waiting in the admission queue, and their waits (ms).
    waited: int = 0
    queued_p50_ms: float | None = None
    queued_p95_ms: float | None = None

    @property
    def fast_share(self) -> float | None:
        return self.fast / self.measured if self.measured else None


# The speed panels look at a recent window of raw events: percentiles cannot be rebuilt from
# the hourly rollups. Both bounds below are on purpose: `started_at` (with the org) walks the
# (org, started_at) index, and `finished_at` (always >= started_at, so the same rows) lets the
# all-orgs scan use the BRIN index on finished_at.
SPEED_WINDOW = timedelta(hours=1)


def delivered_speed(*, since: datetime, by: tuple[str, ...] = (), org=None,
                    until: datetime | None = None) -> list[DeliveredSpeed]:
    """Requests and the speed they were delivered at since `since`, one row per distinct
    value of the `by` columns ("pool_id", "org_id", "api_key_id"; () for one total row), in
    one query, busiest first."""
    until = until or timezone.now()
    events = UsageEvent.objects.filter(started_at__gte=since, finished_at__gte=since,
                                       started_at__lt=until)
    if org is not None:
        events = events.filter(org=org)
    measured = Q(status=UsageStatus.COMPLETED, ttft_ms__isnull=False)
    aggregates = {
        "requests": Count("id"), "errors": Count("id", filter=NOT_COMPLETED),
        "tokens": Sum(F("input_tokens") + F("output_tokens")),
        "measured": Count("id", filter=measured),
        "ttft_p50": Percentile("ttft_ms", fraction=0.5, filter=measured),
        "ttft_p95": Percentile("ttft_ms", fraction=0.95, filter=measured),
        "tps_p50": Percentile("output_tps", fraction=0.5, filter=measured),
        "tps_p5": Percentile("output_tps", fraction=0.05, filter=measured),
        "fast": Count("id", filter=measured & Q(premium_eligible=True)),
        "interrupted": Count("id", filter=Q(status=UsageStatus.INTERRUPTED)),
        "waited": Count("id", filter=Q(queued_ms__isnull=False)),
        "queued_p50": Percentile("queued_ms", fraction=0.5),
        "queued_p95": Percentile("queued_ms", fraction=0.95),
    }
    rows = ([events.aggregate(**aggregates)] if not by
            else events.values(*by).order_by().annotate(**aggregates))
    speeds = [DeliveredSpeed(
        group={column: row[column] for column in by}, requests=row["requests"],
        errors=row["errors"], tokens=row["tokens"] or 0, measured=row["measured"],
        ttft_p50_ms=row["ttft_p50"], ttft_p95_ms=row["ttft_p95"],
        output_tps_p50=row["tps_p50"], output_tps_p5=row["tps_p5"], fast=row["fast"],
        interrupted=row["interrupted"],
        waited=row["waited"], queued_p50_ms=row["queued_p50"], queued_p95_ms=row["queued_p95"],
    ) for row in rows]
    return sorted(speeds, key=lambda s: -s.tokens)


def _date_bin(bucket: timedelta, column: str, origin: datetime) -> Func:
    return Func(Value(bucket), F(column), Value(origin), function="date_bin",
                output_field=DateTimeField())


def _bucket_starts(since: datetime, until: datetime, bucket: timedelta) -> list[datetime]:
    """Each bucket's start from `since` (aligned on it, as _date_bin bins) before `until`."""
    return [since + bucket * i for i in range(int((until - since) / bucket) + 1)
            if since + bucket * i < until]


def pools_tps_series(*, since: datetime, bucket: timedelta, until: datetime | None = None
                     ) -> dict[int, list[tuple[datetime, float]]]:
    """Tokens/s (input + output, what the admission engine budgets) per pool, averaged over
    buckets of `bucket` from `since` (aligned on it) to `until`, every bucket present (zeros
    included). Summed in PostgreSQL with date_bin, one query: raw events for sub-hour buckets,
    the hourly rollups otherwise (their hours are whole, so buckets must be whole hours)."""
    until = until or timezone.now()
    if bucket < timedelta(hours=1):
        # By start time, like the rollups and the speed panels (delivered_speed), so the same
        # window gives the same tokens everywhere; finished_at (>= started_at) adds nothing but
        # lets the scan use its BRIN index.
        rows = UsageEvent.objects.filter(started_at__gte=since, started_at__lt=until,
                                         finished_at__gte=since)
        column = "started_at"
    else:
        rows = UsageHourly.objects.filter(hour__gte=since, hour__lt=until)
        column = "hour"
    sums = (rows.annotate(bucket=_date_bin(bucket, column, since))
            .values("pool_id", "bucket")
            .annotate(tokens=Sum(F("input_tokens") + F("output_tokens"))).order_by())
    tokens = {(row["pool_id"], row["bucket"]): row["tokens"] for row in sums}
    starts = _bucket_starts(since, until, bucket)
    seconds = bucket.total_seconds()
    return {pool.pk: [(start, tokens.get((pool.pk, start), 0) / seconds) for start in starts]
            for pool in CapacityPool.objects.only("pk")}


class WaitBucket(NamedTuple):
    start: datetime
    waited: int  # requests admitted after waiting in the admission queue
    p50_ms: float | None  # their wait (None: nobody waited)
    p95_ms: float | None


def pools_wait_series(*, since: datetime, bucket: timedelta, until: datetime | None = None
                      ) -> dict[int, list[WaitBucket]]:
    """Per pool that admitted anyone after a wait in the window: how many waited and their
    wait's p50 and p95, per bucket of `bucket` from `since` (aligned on it) to `until`, every
    bucket present. Raw events (percentiles cannot be rebuilt from rollups), one query, by
    start time like the speed panels."""
    until = until or timezone.now()
    rows = (UsageEvent.objects.filter(started_at__gte=since, started_at__lt=until,
                                      finished_at__gte=since, queued_ms__isnull=False)
            .annotate(bucket=_date_bin(bucket, "started_at", since))
            .values("pool_id", "bucket")
            .annotate(waited=Count("id"), p50=Percentile("queued_ms", fraction=0.5),
                      p95=Percentile("queued_ms", fraction=0.95)).order_by())
    found = {(row["pool_id"], row["bucket"]): row for row in rows}
    starts = _bucket_starts(since, until, bucket)
    series = {}
    for pool_id in sorted({pool_id for pool_id, _ in found}):
        series[pool_id] = [WaitBucket(start, row["waited"], row["p50"], row["p95"])
                           if (row := found.get((pool_id, start))) else
                           WaitBucket(start, 0, None, None) for start in starts]
    return series


def org_usage_buckets(*, org, since: datetime, bucket: timedelta,
                      until: datetime | None = None) -> list[dict]:
    """An org's usage across its pools and keys, from the hourly rollups, summed per bucket
    (whole hours, aligned on `since`) by date_bin in one query; every bucket present. Each row:
    start, requests, errors, tokens, output_tokens, avg_ttft_ms and output_tps (None when
    there was nothing to measure)."""
    until = until or timezone.now()
    sums = (UsageHourly.objects.filter(org=org, hour__gte=since, hour__lt=until)
            .annotate(bucket=_date_bin(bucket, "hour", since)).values("bucket")
            .annotate(requests=Sum("requests"), errors=Sum("errors"),
                      tokens=Sum(F("input_tokens") + F("output_tokens")),
                      output_tokens=Sum("output_tokens"), ttft_ms=Sum("ttft_ms_total"),
                      ttft_count=Sum("ttft_count"), decode_ms=Sum("decode_ms_total"))
            .order_by())
    by_start = {row.pop("bucket"): row for row in sums}
    empty = {"requests": 0, "errors": 0, "tokens": 0, "output_tokens": 0, "ttft_ms": 0,
             "ttft_count": 0, "decode_ms": 0}
    rows = []
    start = since
    while start < until:
        row = by_start.get(start, empty)
        rows.append({
            "start": start, "requests": row["requests"], "errors": row["errors"],
            "tokens": row["tokens"], "output_tokens": row["output_tokens"],
            "avg_ttft_ms": row["ttft_ms"] / row["ttft_count"] if row["ttft_count"] else None,
            "output_tps": row["output_tokens"] * 1000 / row["decode_ms"] if row["decode_ms"]
            else None,
        })
        start += bucket
    return rows
