"""The admission queue in the hook's authorize (quotas/hook/hook.py): what it awaits for a
decision that may wait. config/asgi.py hands it over (authorize_queue_set): the hook cannot
import this app (the house: quotas is below admission)."""

import asyncio

from admission.engine.waiting import QueueOutcome, queue_decide
from admission.metrics import QUEUE_OUTCOMES, QUEUE_WAIT_SECONDS, QUEUE_WAITING
from quotas.limiter.connection import LimiterUnavailable


def _outcome_name(outcome: QueueOutcome) -> str:
    code = outcome.decision.outcome
    if outcome.decision.allowed:
        return "admitted_now" if outcome.queued_ms is None else "admitted_after_wait"
    if code == "queue_timeout":
        return "expired"
    if code == "queue_full":
        return "full"
    if outcome.eta_ms is not None and outcome.queued_ms is None:
        return "refused_eta"
    return "refused"


async def hook_queue(*, gone, pool_id: int, **ask) -> QueueOutcome:
    """queue_decide for one authorize request on the loop; `gone()`: completes when its client
    goes away (quotas/hook/asgi.py's CLIENT_GONE), which ends the wait."""
    pool = str(pool_id)
    try:
        outcome = await queue_decide(pool_id=pool_id, gone=gone,
                                     on_wait=QUEUE_WAITING.labels(pool).inc, **ask)
    except LimiterUnavailable:
        QUEUE_OUTCOMES.labels(pool, "unavailable").inc()
        raise
    except asyncio.CancelledError:
        QUEUE_OUTCOMES.labels(pool, "left").inc()
        raise
    name = _outcome_name(outcome)
    QUEUE_OUTCOMES.labels(pool, name).inc()
    if outcome.queued_ms is not None:
        QUEUE_WAIT_SECONDS.labels(pool, outcome.decision.outcome).observe(
            outcome.queued_ms / 1000)
    return outcome
