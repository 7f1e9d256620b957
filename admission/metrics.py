"""Prometheus metrics of the admission queue (served with the hook's, /metrics). Waiting is per
process: with PROMETHEUS_MULTIPROC_DIR set, the page sums the workers' gauges."""

from prometheus_client import Counter, Gauge, Histogram

WAIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20)

QUEUE_WAITING = Gauge("sluice_queue_waiting", "Requests waiting in a pool's admission queue.",
                      ["pool"], multiprocess_mode="livesum")
QUEUE_WAIT_SECONDS = Histogram("sluice_queue_wait_seconds",
                               "How long requests waited, by pool and outcome (admitted, "
                               "queue_timeout, refused while waiting).",
                               ["pool", "outcome"], buckets=WAIT_BUCKETS)
QUEUE_OUTCOMES = Counter("sluice_queue_outcomes_total",
                         "Requests that could wait, by pool and what happened: admitted_now, "
                         "admitted_after_wait, expired (queue_timeout), refused_eta, full, "
                         "refused, left (client gone), unavailable.", ["pool", "outcome"])
