"""The admission queue in the hook's authorize (quotas/hook): the `queue` the event-loop
runner (quotas/hook/asgi.py) calls for a decision that may wait. config/asgi.py hands it to
the hook, which cannot import this app (the house: quotas is below admission)."""

import asyncio
from collections.abc import Awaitable, Callable

from admission.engine.waiting import QueueOutcome, queue_decide
from admission.metrics import QUEUE_OUTCOMES, QUEUE_WAIT_SECONDS, QUEUE_WAITING
from quotas.limiter.connection import LimiterUnavailable


def _gone(receive: Callable[[], Awaitable[dict]]) -> Callable[[], Awaitable[None]]:
    """What completes when the HTTP client goes away (ASGI `http.disconnect`)."""
    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
    return gone


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


async def hook_queue(*, receive, in_thread, pool_id: int, **ask) -> QueueOutcome:
    """queue_decide for one authorize request on the loop; `receive`: the request's ASGI
    receive (its client's departure ends the wait)."""
    pool = str(pool_id)
    try:
        outcome = await queue_decide(pool_id=pool_id, gone=_gone(receive) if receive else None,
                                     in_thread=in_thread, on_wait=QUEUE_WAITING.labels(pool).inc,
                                     **ask)
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
