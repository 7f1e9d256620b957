"""POST /api/gateway/v1/usage: what a gateway reports after each request, recorded by
metering/usage.py. Served beside authorize on the event loop (config/asgi.py), with the hook's
checks and error answers (the gateway token, the one error shape: quotas/hook/), which this
app sits above; the recording runs in one of the process's threads (it is a PostgreSQL
transaction)."""

from prometheus_client import Counter, Histogram

from metering.usage import usage_record
from quotas.hook.gateway_tokens import GatewayIdentity
from quotas.hook.hook import Answer, hook_handler
from quotas.hook.inputs import usage_input
from quotas.hook.metrics import LATENCY_BUCKETS
from sluice.errors import error_body

USAGE_EVENTS = Counter("sluice_usage_events_total", "Usage events by result.", ["result"])
USAGE_SECONDS = Histogram("sluice_usage_seconds", "Usage call handling time in the view.",
                          buckets=LATENCY_BUCKETS)


def usage_handle(body: object, gateway: GatewayIdentity) -> Answer:
    results = usage_record(events=usage_input(body))
    counts = {"recorded": 0, "duplicate": 0, "rejected": 0}
    out = []
    for r in results:
        counts[r.result] += 1
        item = {"request_id": r.request_id, "result": r.result}
        if r.error_code:
            item.update(error_body(code=r.error_code, message=r.error_message))
        out.append(item)
    for result, n in counts.items():
        if n:
            USAGE_EVENTS.labels(result).inc(n)
    return 200, {"results": out, "recorded": counts["recorded"],
                 "duplicates": counts["duplicate"], "rejected": counts["rejected"]}


usage = hook_handler(usage_handle, USAGE_SECONDS)
