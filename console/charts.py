"""The console's charts, built from its selectors for the one chart component
(sluice/charts.py): a pool's use against its guarantees and capacity and its admission queue's
waits, an org's usage against its allocations and its pools' speed promise."""

from datetime import datetime, timedelta

from metering.selectors import WaitBucket
from sluice.charts import Limit, Series, TimeChart


def pool_use_charts(*, summary, live: dict) -> list[TimeChart]:
    """Tokens/s in the pool over the last hour (5-minute buckets, raw events) and the last 24
    hours (hourly rollups), against what is guaranteed, what may be guaranteed and capacity."""
    limits = [Limit("Guaranteed", summary.guaranteed_tps),
              Limit("Guaranteeable", summary.guaranteeable_tps),
              Limit("Capacity", summary.capacity_tps)]
    return [
        TimeChart(key=f"pool{summary.pool_id}-{key}", title=title, unit="tokens/s",
                  times=[start for start, _ in points], step_seconds=step,
                  series=[Series("Tokens/s", [round(tps, 1) for _, tps in points])],
                  limits=limits, decimals=1)
        for key, title, points, step in (
            ("hour", "Live use, last hour (5-minute averages)", live["hour"], 300),
            ("day", "Last 24 hours (hourly averages)", live["day"], 3600))
    ]


def pool_wait_charts(*, pool, waits: list[WaitBucket] | None, since: datetime) -> list[TimeChart]:
    """How long requests admitted after waiting in the pool's admission queue waited over the
    last hour (pools_wait_series' 5-minute buckets from `since`), p50 and p95, against the
    pool's longest wait: none for a pool without a queue where nobody waited."""
    if not waits and not pool.queue_max_wait_ms:
        return []
    if not waits:  # a queue nobody waited in: the hour's buckets, empty
        waits = [WaitBucket(since + timedelta(minutes=5 * i), 0, None, None) for i in range(12)]
    return [TimeChart(
        key=f"pool{pool.pk}-wait", title="Admission queue wait, last hour (5-minute p50, p95)",
        unit="ms", times=[w.start for w in waits], step_seconds=300,
        limits=[Limit("Longest wait", pool.queue_max_wait_ms)] if pool.queue_max_wait_ms
        else [],
        series=[Series("p50", [_rounded(w.p50_ms, 0) for w in waits]),
                Series("p95", [_rounded(w.p95_ms, 0) for w in waits], color="warn")])]


def org_usage_charts(*, rows: list[dict], allocations, bucket: timedelta) -> list[TimeChart]:
    """An org's usage per bucket (org_usage_buckets rows) against its allocations in force:
    tokens/s against the guarantees and burst ceilings, requests and errors, time to first
    token against the strictest ceiling, output speed against the highest floor."""
    times: list[datetime] = [row["start"] for row in rows]
    seconds = bucket.total_seconds()
    step = int(seconds)
    pools = [a.pool for a in allocations]
    tps_limits = [Limit("Guaranteed", sum(a.guaranteed_tps for a in allocations)),
                  Limit("Burst ceiling", sum(a.burst_tps for a in allocations))] \
        if allocations else []
    return [
        TimeChart(key="tokens", title="Tokens per second", unit="tokens/s", times=times,
                  step_seconds=step, decimals=1, limits=tps_limits,
                  series=[Series("Tokens/s", [round(r["tokens"] / seconds, 1) for r in rows])]),
        TimeChart(key="requests", title="Requests and errors", unit="requests", times=times,
                  step_seconds=step,
                  series=[Series("Requests", [r["requests"] for r in rows], bars=True,
                                 summary="total"),
                          Series("Errors", [r["errors"] for r in rows], color="bad", bars=True,
                                 summary="total")]),
        TimeChart(key="ttft", title="Time to first token (average)", unit="ms", times=times,
                  step_seconds=step,
                  limits=[Limit("Ceiling", min(p.ttft_ceiling_ms for p in pools))] if pools
                  else [],
                  series=[Series("TTFT", [_rounded(r["avg_ttft_ms"], 0) for r in rows],
                                 color="warn")]),
        TimeChart(key="output_tps", title="Output tokens/s while decoding", unit="tokens/s",
                  times=times, step_seconds=step, decimals=1,
                  limits=[Limit("Speed floor", max(p.speed_floor_output_tps for p in pools))]
                  if pools else [],
                  series=[Series("Output tokens/s", [_rounded(r["output_tps"], 1) for r in rows],
                                 color="ok")]),
    ]


def _rounded(value: float | None, places: int) -> float | None:
    return None if value is None else round(value, places)
