"""The default wait budgets (an org's, an API key's) travel to the queue's Redis hash of each
pool with the org's limits: whenever quotas/publish.py publishes an org in a pool (a change,
a rebuild after Redis lost its state), this writes the defaults beside them."""

import logging

import redis

from admission.engine.queue import QKEY, queue_key
from orgs.models import ApiKey, Organization
from quotas.events import limits_publishing
from quotas.limiter.connection import limiter_client

logger = logging.getLogger(__name__)


@limits_publishing.subscribe
def queue_defaults_publish(*, org_ids, pool_ids, **_) -> None:
    if not org_ids or not pool_ids:
        return
    orgs = dict(Organization.objects.filter(pk__in=org_ids)
                .values_list("pk", "queue_threshold_default_ms"))
    keys = list(ApiKey.objects.filter(org_id__in=org_ids)
                .values_list("pk", "queue_threshold_default_ms"))
    values = {f"o:{pk}": ms for pk, ms in orgs.items()} | {f"k:{pk}": ms for pk, ms in keys}
    present = {field: ms for field, ms in values.items() if ms is not None}
    absent = [field for field, ms in values.items() if ms is None]
    try:
        pipe = limiter_client(bulk=True).pipeline(transaction=False)
        for pool_id in pool_ids:
            defaults = queue_key(pool_id, QKEY.defaults)
            if present:
                pipe.hset(defaults, mapping=present)
            if absent:
                pipe.hdel(defaults, *absent)
        pipe.execute()
    except redis.RedisError as exc:  # the limits are published regardless; the next publish
        logger.warning("queue defaults not published: %s", exc)  # writes these again
