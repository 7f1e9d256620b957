"""Gateway tokens where authorize already reads: one Redis hash, digest -> "<id>:<name>".

quotas/publish.py writes the whole set from PostgreSQL (after a token is created or revoked,
and in every limiter_sync); each web process reads it again every fraction of a second
(quotas/hook/gateway_tokens.py). The hash always holds SYNCED_FIELD, so a flushed Redis (no hash)
is told apart from a set with no tokens. When the tokens were last used is kept beside it, for
limiter_sync to copy into PostgreSQL: the hot path writes nothing there.
"""

import uuid

import redis

from quotas.limiter.connection import LimiterUnavailable, limiter_client
from quotas.limiter.schema import SHARED_KEY, SYNCED_FIELD


def gateway_tokens_read() -> dict[str, str] | None:
    """digest -> entry of every usable token, or None when the set is not in Redis. Raises
    LimiterUnavailable."""
    try:
        tokens = limiter_client().hgetall(SHARED_KEY.gateway_tokens)
    except redis.RedisError as exc:
        raise LimiterUnavailable(str(exc)) from exc
    if tokens.pop(SYNCED_FIELD, None) is None:
        return None
    return tokens


def gateway_tokens_write(tokens: dict[str, str]) -> None:
    """Replace the set at once: written under a new name, then renamed over the old one (both
    names share the hash tag, so one Cluster slot). Raises LimiterUnavailable."""
    staging = f"{SHARED_KEY.gateway_tokens}:{uuid.uuid4().hex}"
    client = limiter_client(bulk=True)
    try:
        client.hset(staging, mapping={SYNCED_FIELD: "1", **tokens})
        client.rename(staging, SHARED_KEY.gateway_tokens)
    except redis.RedisError as exc:
        raise LimiterUnavailable(str(exc)) from exc


def gateway_tokens_used_record(used: dict[int, int]) -> None:
    """Token id -> when it was last used (epoch seconds). Raises LimiterUnavailable."""
    try:
        limiter_client().hset(SHARED_KEY.gateway_tokens_used,
                              mapping={str(k): v for k, v in used.items()})
    except redis.RedisError as exc:
        raise LimiterUnavailable(str(exc)) from exc


def gateway_tokens_used_read() -> dict[int, int]:
    """Token id -> last use (epoch seconds) as recorded by the web processes. Raises
    LimiterUnavailable."""
    try:
        used = limiter_client(bulk=True).hgetall(SHARED_KEY.gateway_tokens_used)
    except redis.RedisError as exc:
        raise LimiterUnavailable(str(exc)) from exc
    return {int(k): int(v) for k, v in used.items()}


def gateway_token_read(digest: str) -> str | None:
    """The entry of the token with this digest, in one round trip: for a token a process's copy
    of the set does not hold yet. Raises LimiterUnavailable."""
    try:
        return limiter_client().hget(SHARED_KEY.gateway_tokens, digest)
    except redis.RedisError as exc:
        raise LimiterUnavailable(str(exc)) from exc
