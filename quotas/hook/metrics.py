"""Prometheus metrics of the hook API, served at /metrics (usage's are metering/api/hook.py's).

Each web worker (config/serve.py) is a process: set PROMETHEUS_MULTIPROC_DIR (an empty
directory) and the page aggregates every worker's samples.
"""

import os

from django.http import HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 1)

DECISIONS = Counter("sluice_authorize_decisions_total",
                    "Authorize decisions by outcome and by the limiter that took them.",
                    ["outcome", "limiter"])
AUTHORIZE_SECONDS = Histogram("sluice_authorize_seconds", "Authorize handling time in the view.",
                              buckets=LATENCY_BUCKETS)
# A batch's whole call (each of its requests is observed in AUTHORIZE_SECONDS too).
AUTHORIZE_BATCH_SECONDS = Histogram("sluice_authorize_batch_seconds",
                                    "Batched authorize handling time, the whole batch.",
                                    buckets=LATENCY_BUCKETS)
LIMITER_ERRORS = Counter("sluice_limiter_unavailable_total",
                         "Calls that found Redis unreachable, by the pool's policy.", ["policy"])


def metrics_view(request):
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
