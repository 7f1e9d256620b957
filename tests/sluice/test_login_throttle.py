import pytest

from sluice import login_throttle
from sluice.login_throttle import (
    MAX_FAILURES,
    login_failure_record,
    login_failures_clear,
    login_lock_status,
)


def test_lock_after_max_failures_and_only_for_that_ip(redis_client):
    for _ in range(MAX_FAILURES):
        login_failure_record(username="Ada@Voice.test", ip="10.0.0.1")
    lock = login_lock_status(username="ada@voice.test", ip="10.0.0.1")
    assert lock.locked and 0 < lock.retry_after_seconds <= login_throttle.WINDOW_SECONDS
    assert not login_lock_status(username="ada@voice.test", ip="10.0.0.2").locked
    login_failures_clear(username="ada@voice.test", ip="10.0.0.1")
    assert not login_lock_status(username="ada@voice.test", ip="10.0.0.1").locked


def test_counter_expires_with_its_window(redis_client):
    login_failure_record(username="ada@voice.test", ip="10.0.0.1")
    (key,) = redis_client.keys("login-failures:*")
    assert 0 < redis_client.ttl(key) <= login_throttle.WINDOW_SECONDS
    assert b"ada" not in key  # usernames are hashed


@pytest.fixture
def unreachable_redis(settings, monkeypatch):
    # A real connection to a port nothing listens on, not a mock.
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    monkeypatch.setattr(login_throttle, "_client", None)
    yield
    login_throttle._client = None


def test_redis_outage_fails_open(unreachable_redis):
    assert login_failure_record(username="ada@voice.test", ip="10.0.0.1") == 0
    assert not login_lock_status(username="ada@voice.test", ip="10.0.0.1").locked


def test_password_spraying_locks_the_ip_across_usernames(redis_client):
    """One password tried against many accounts from one address: each
    (username, IP) pair stays under its limit, the address as a whole does not."""
    for n in range(login_throttle.IP_MAX_FAILURES):
        assert not login_lock_status(username=f"user{n}@voice.test", ip="10.0.0.9").locked
        login_failure_record(username=f"user{n}@voice.test", ip="10.0.0.9")
    lock = login_lock_status(username="somebody-new@voice.test", ip="10.0.0.9")
    assert lock.locked and 0 < lock.retry_after_seconds <= login_throttle.WINDOW_SECONDS
    assert not login_lock_status(username="somebody-new@voice.test", ip="10.0.0.10").locked
    # A success on one account does not reset the address's count.
    login_failures_clear(username="user0@voice.test", ip="10.0.0.9")
    assert login_lock_status(username="user0@voice.test", ip="10.0.0.9").locked
    assert not any(b"10.0.0.9" in key for key in redis_client.keys("*"))  # hashed too
