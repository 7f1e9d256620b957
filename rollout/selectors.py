from django.db.models import Case, QuerySet, When

from rollout.models import QuotaRequest, RolloutWave, WaveState
from sluice.errors import NotFound


def quota_requests_inbox(*, status: str = "pending") -> QuerySet[QuotaRequest]:
    """Oldest first: requests are answered in the order they came."""
    return (QuotaRequest.objects.filter(status=status).select_related("org", "pool")
            .order_by("created_at", "id"))


def org_quota_requests(*, org) -> QuerySet[QuotaRequest]:
    return QuotaRequest.objects.filter(org=org).select_related("pool")


def org_quota_request_get(*, org, request_id: int) -> QuotaRequest:
    quota_request = org_quota_requests(org=org).filter(pk=request_id).first()
    if quota_request is None:
        raise NotFound("No such quota request.")
    return quota_request


def waves_by_state() -> QuerySet[RolloutWave]:
    """Scheduled and open waves first (soonest opening first), then the closed ones."""
    return RolloutWave.objects.select_related("pool").order_by(
        Case(When(state=WaveState.CLOSED, then=1), default=0), "opens_at", "id")


def next_scheduled_wave() -> RolloutWave | None:
    return (RolloutWave.objects.filter(state=WaveState.SCHEDULED).select_related("pool")
            .order_by("opens_at", "id").first())
