import asyncio

import pytest

from quotas.limiter.connection import limiter_reset
from tests.aio import LoopThread


@pytest.fixture
def queue_redis(redis_client):
    """A flushed Redis, fresh engine connections, the real clock."""
    limiter_reset()
    yield redis_client
    limiter_reset()


@pytest.fixture
def loop():
    thread = LoopThread()
    yield thread
    limiter_reset()
    thread.run(asyncio.sleep(0.01))
    thread.close()
