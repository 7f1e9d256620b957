"""The admission queue on a real 3-node Redis Cluster (tests/private_redis.PrivateCluster):
every queue key carries its pool's hash tag, so join, pump and leave each run on the node of
that slot, and the waiters' subscription, on that node too, hears the pool's PUBLISHes (a
Cluster forwards them to every node)."""

import pytest
from redis.cluster import RedisCluster

from quotas.limiter.connection import limiter_reset

# The same tests, collected again in this module: here `redis_client` is the cluster's.
from tests.admission.test_queue import (  # noqa: F401
    test_a_retry_of_a_waiting_request_keeps_its_one_place,
    test_a_waiter_nobody_makes_room_for_is_refused_when_its_budget_ends,
    test_an_eta_beyond_the_budget_is_refused_up_front_and_nothing_waits,
    test_waiters_are_admitted_as_their_bucket_refills_first_come_first,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def redis_client(cluster, settings):
    """The cluster, emptied, and the engine pointed at it."""
    settings.LIMITER_REDIS_URL = cluster.url
    limiter_reset()
    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, decode_responses=True)
    client.flushdb()
    yield client
    client.close()
    limiter_reset()
