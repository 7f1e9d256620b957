"""What the admission queues hold now, read from Redis (the console's dashboard)."""

from dataclasses import dataclass

import redis

from admission.engine.queue import QKEY, queue_key
from quotas.limiter.connection import limiter_client
from quotas.limiter.schema import KEY


@dataclass(frozen=True)
class QueueNow:
    waiting: int  # requests
    tokens: int  # they would reserve
    orgs: int  # with requests waiting


def queues_now(pool_ids: list[int]) -> dict[int, QueueNow | None]:
    """Per pool: its queue now; None when Redis cannot say. One pipelined round trip (per
    Cluster node)."""
    try:
        pipe = limiter_client(bulk=True).pipeline(transaction=False)
        for pool_id in pool_ids:
            pipe.hmget(queue_key(pool_id, QKEY.meta), "n", "c")
            pipe.zcard(queue_key(pool_id, KEY.queue_orgs))
        replies = pipe.execute()
    except redis.RedisError:
        return dict.fromkeys(pool_ids)
    found = {}
    for i, pool_id in enumerate(pool_ids):
        (waiting, tokens), orgs = replies[2 * i], replies[2 * i + 1]
        found[pool_id] = QueueNow(max(int(waiting or 0), 0), max(int(tokens or 0), 0), orgs)
    return found
