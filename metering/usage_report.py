"""The Usage API's numbers (OpenAI's GET /v1/organization/usage/completions, and what only
Sluice knows), per time bucket and group.

Where each number comes from, and why:
- `1m` buckets: tokens and requests from the raw usage events (`UsageEvent`, index on
  org + started_at); there is no finer rollup than the hour.
- `1h` and `1d` buckets: tokens and requests from the hourly rollups, the rows invoices rate,
  so the Usage and Costs APIs and the invoice count the same tokens. Days older than the
  hourly retention are one row each (metering/retention.py): a `1d` bucket is as exact as ever,
  a `1h` bucket over such a day holds the whole day in its first hour.
- Time to first token and output tokens/s p50/p95 from the raw events at every width: a
  percentile cannot be added up from rollups. Exact (percentile_cont), at the cost of reading
  the page's events of the org; a page is at most a day of minutes, a week of hours or 31 days.
  Raw events are kept for the raw retention (90 days by default): older buckets have tokens
  and requests from the rollups, and no percentiles (null), nor `1m` figures.
- Refusals by code from `RefusalMinute` (metering/refusals.py), drained from Redis every minute:
  the last two minutes are not there yet.
A request belongs to the bucket of its `started_at`, like the rollups.
"""

from dataclasses import dataclass
from datetime import UTC

from django.db.models import Count, Q, Sum
from django.db.models.functions import Trunc

from metering.models import RefusalMinute, UsageEvent, UsageHourly, UsageStatus
from metering.selectors import Percentile
from orgs.models import Organization
from quotas.models import Tier
from sluice.time_buckets import BucketPage

# OpenAI's service_tier names for the tiers of our pools.
SERVICE_TIERS = {Tier.FAST: "priority", Tier.STANDARD: "default"}
GROUP_FIELDS = {"api_key_id": "api_key_id", "model": "pool__model", "service_tier": "pool__tier"}
_TRUNC = {"1m": "minute", "1h": "hour", "1d": "day"}


@dataclass(frozen=True)
class UsageQuery:
    org: Organization
    page: BucketPage
    group_by: tuple[str, ...] = ()
    api_key_ids: tuple[int, ...] = ()
    models: tuple[str, ...] = ()


def _scoped(queryset, q: UsageQuery, time_field: str):
    queryset = queryset.filter(org=q.org, **{f"{time_field}__gte": q.page.start,
                                             f"{time_field}__lt": q.page.end})
    if q.api_key_ids:
        queryset = queryset.filter(api_key_id__in=q.api_key_ids)
    if q.models:
        queryset = queryset.filter(pool__model__in=q.models)
    dims = [GROUP_FIELDS[g] for g in q.group_by]
    return (queryset.annotate(bucket=Trunc(time_field, _TRUNC[q.page.width], tzinfo=UTC))
            .values("bucket", *dims).order_by())


def _key(row: dict, q: UsageQuery) -> tuple:
    return (int(row["bucket"].timestamp()), *(row[GROUP_FIELDS[g]] for g in q.group_by))


def _totals(q: UsageQuery) -> dict[tuple, dict]:
    if q.page.width == "1m":
        rows = _scoped(UsageEvent.objects, q, "started_at").annotate(
            requests=Count("id"), input=Sum("input_tokens"), output=Sum("output_tokens"),
            interrupted=Count("id", filter=Q(status=UsageStatus.INTERRUPTED)),
            premium_input=Sum("input_tokens", filter=Q(premium_eligible=True), default=0),
            premium_output=Sum("output_tokens", filter=Q(premium_eligible=True), default=0))
    else:
        rows = _scoped(UsageHourly.objects, q, "hour").annotate(
            requests=Sum("requests"), input=Sum("input_tokens"), output=Sum("output_tokens"),
            interrupted=Sum("interrupted"),
            premium_input=Sum("premium_input_tokens"), premium_output=Sum("premium_output_tokens"))
    return {_key(r, q): r for r in rows}


def _speeds(q: UsageQuery) -> dict[tuple, dict]:
    rows = _scoped(UsageEvent.objects, q, "started_at").annotate(
        ttft_p50=Percentile("ttft_ms", fraction=0.5),
        ttft_p95=Percentile("ttft_ms", fraction=0.95),
        tps_p50=Percentile("output_tps", fraction=0.5),
        tps_p95=Percentile("output_tps", fraction=0.95),
        waited=Count("id", filter=Q(queued_ms__isnull=False)),
        queued_p50=Percentile("queued_ms", fraction=0.5),
        queued_p95=Percentile("queued_ms", fraction=0.95))
    return {_key(r, q): r for r in rows}


def _refusals(q: UsageQuery) -> dict[tuple, dict[str, int]]:
    found: dict[tuple, dict[str, int]] = {}
    for r in _scoped(RefusalMinute.objects, q, "minute").annotate(n=Sum("count")).values(
            "bucket", *(GROUP_FIELDS[g] for g in q.group_by), "code", "n"):
        found.setdefault(_key(r, q), {})[r["code"]] = r["n"]
    return found


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _result(key: tuple, q: UsageQuery, totals: dict | None, speeds: dict | None,
            refusals: dict[str, int]) -> dict:
    group = dict(zip(q.group_by, key[1:], strict=True))
    totals, speeds = totals or {}, speeds or {}
    key_id, tier = group.get("api_key_id"), group.get("service_tier")
    return {
        "object": "organization.usage.completions.result",
        "input_tokens": totals.get("input") or 0,
        "output_tokens": totals.get("output") or 0,
        "num_model_requests": totals.get("requests") or 0,
        "project_id": None, "user_id": None, "batch": None,
        "api_key_id": str(key_id) if key_id is not None else None,
        "model": group.get("model"),
        "service_tier": SERVICE_TIERS.get(tier) if tier else None,
        "sluice": {
            "premium_eligible_input_tokens": totals.get("premium_input") or 0,
            "premium_eligible_output_tokens": totals.get("premium_output") or 0,
            "interrupted_requests": totals.get("interrupted") or 0,
            "ttft_ms": {"p50": _rounded(speeds.get("ttft_p50"), 1),
                        "p95": _rounded(speeds.get("ttft_p95"), 1)},
            "output_tokens_per_second": {"p50": _rounded(speeds.get("tps_p50"), 1),
                                         "p95": _rounded(speeds.get("tps_p95"), 1)},
            "queued_requests": speeds.get("waited") or 0,
            "queued_ms": {"p50": _rounded(speeds.get("queued_p50"), 1),
                          "p95": _rounded(speeds.get("queued_p95"), 1)},
            "refusals": dict(sorted(refusals.items())),
        },
    }


def usage_completions(*, query: UsageQuery) -> dict[int, list[dict]]:
    """Bucket start (unix seconds) -> results, one per group that used or was refused anything.
    Three queries (two for 1m buckets would do, but one shape of code is worth a query)."""
    totals, speeds, refusals = _totals(query), _speeds(query), _refusals(query)
    buckets: dict[int, list[dict]] = {}
    for key in sorted(totals.keys() | refusals.keys(), key=repr):
        buckets.setdefault(key[0], []).append(
            _result(key, query, totals.get(key), speeds.get(key), refusals.get(key, {})))
    return buckets
