"""Waiting in the admission queue on an event loop: no thread and no polling of Redis per
waiter (the queue itself: queue.py, queue.lua).

The wake-up. Each event loop (a hook worker) holds one Redis pub/sub connection, subscribed to
the channel of every pool it has waiters in (plain SUBSCRIBE: Redis 6.2 has no sharded pub/sub,
and a Cluster forwards every PUBLISH to every node, so one connection to any node hears every
pool). A waiter costs a future in a dict and one timer (its deadline); a pool costs, per loop,
one timer at the instant its next waiter may fit (a bucket refills: the pump's `next_at`) and
at most one pump in flight. What wakes a pump: that timer; a settle that refunded tokens or
freed slots (settle.lua publishes, only while the pool has waiters); a pump in another process
(its message carries the next instant). Each pump publishes whom it admitted, with their
decisions: every process resolves its own waiters from the message, so a pump in one process
admits waiters of all of them. Per freed capacity: one message per pool to every subscribed
process, and one pump script call per process with waiters in that pool.

Redis failure: the subscription lost (Redis down or restarted: the queue's state went with
it) or a script call failing resolves every waiter of the loop at once with
LimiterUnavailable, which the hook answers by the pool's failure policy.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple

import hiredis
import redis

from admission.engine.queue import (
    SPEED_FLOOR_TPS,
    TTFT_CEILING_MS,
    Joined,
    decision_decode,
    message_decode,
    pool_channel,
    queue_call,
    queue_key,
    reply_decode,
)
from quotas.limiter.aio import _ssl_context, in_thread, script_call
from quotas.limiter.clock import clock
from quotas.limiter.connection import (
    LimiterUnavailable,
    connection_pool_for,
    engine_config,
    limiter_client,
    on_limiter_reset,
)
from quotas.limiter.engine import limiter_settle
from quotas.limiter.schema import KEY, UNSYNCED, Decision, Settlement

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueConfig:
    pool_cap: int = 10_000  # waiters per pool at most
    org_cap: int = 1_000  # waiters per org and pool at most
    pump_max: int = 64  # decisions one pump makes at most


_config = QueueConfig()


def queue_configure(config: QueueConfig) -> None:
    global _config
    _config = config


class QueueOutcome(NamedTuple):
    """What a request that may wait got. `decision`: admitted (allowed, duplicate), or refused:
    by authorize (no wait asked, or a refusal no wait cures), with the refusal's own code and
    retry = ETA when the ETA exceeds the budget, `queue_full`, or `queue_timeout`."""
    decision: Decision
    budget_ms: int = 0  # the budget used (the pool's maximum clamps it)
    eta_ms: int | None = None  # the ETA told: refused up front, or queued
    queued_ms: int | None = None  # it waited: for how long (admitted or timed out)


class _Pool:
    __slots__ = ("waiters", "timer", "timer_at", "pumping", "again")

    def __init__(self) -> None:
        self.waiters: dict[str, asyncio.Future] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0
        self.pumping = False
        self.again = False


class _Subscriber(asyncio.Protocol):
    """The loop's pub/sub connection: messages to `on_message`, its loss to `on_lost`."""

    def __init__(self, watch: "_Watch") -> None:
        self.watch = watch
        self.reader = hiredis.Reader(encoding="utf-8")
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            if isinstance(reply, hiredis.ReplyError):  # AUTH refused: as good as down
                logger.warning("queue: the subscription failed: %s", reply)
                self.transport.close()
                return
            if type(reply) is list and reply[0] == "message":
                self.watch.on_message(reply[1], reply[2])
            elif type(reply) is list and reply[0] == "subscribe":
                self.watch.on_subscribed(reply[1])

    def connection_lost(self, exc: Exception | None) -> None:
        self.watch.on_lost(self, exc)

    def subscribe(self, channel: str) -> None:
        self.transport.write(hiredis.pack_command(("SUBSCRIBE", channel)))


class _Watch:
    """One event loop's waiters, pools and subscription."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pools: dict[int, _Pool] = {}
        # channel -> confirmed (a future: done once Redis confirmed the subscription)
        self.channels: dict[str, asyncio.Future] = {}
        self.subscriber: _Subscriber | None = None
        self.connecting: asyncio.Future | None = None

    # The subscription.

    async def subscribed(self, pool_id: int) -> None:
        """Subscribed to the pool's channel (connected first if need be), Redis's confirmation
        in: then no message about a waiter that joins after this can be missed."""
        if self.subscriber is None:
            if self.connecting is None:
                self.connecting = asyncio.ensure_future(self._connect(pool_id))
            connecting = self.connecting
            try:
                subscriber = await asyncio.shield(connecting)
            except Exception as exc:
                raise LimiterUnavailable(f"queue subscription: {exc}") from exc
            finally:
                if self.connecting is connecting and connecting.done():
                    self.connecting = None
            if self.subscriber is None:
                self.subscriber = subscriber
        channel = pool_channel(pool_id)
        confirmed = self.channels.get(channel)
        if confirmed is None:
            confirmed = self.channels[channel] = self.loop.create_future()
            self.subscriber.subscribe(channel)
        if not confirmed.done():
            try:
                await asyncio.wait_for(asyncio.shield(confirmed),
                                       max(engine_config().reply_timeout_s, 1.0))
            except (TimeoutError, LimiterUnavailable) as exc:
                raise LimiterUnavailable(f"queue subscription: {exc}") from exc

    async def _connect(self, pool_id: int) -> _Subscriber:
        pool = connection_pool_for(limiter_client(), queue_key(pool_id, KEY.queue_orgs))
        kwargs, config = pool.connection_kwargs, engine_config()
        if "path" in kwargs:
            connecting = self.loop.create_unix_connection(lambda: _Subscriber(self),
                                                          kwargs["path"])
        else:
            secure = _ssl_context(pool) if issubclass(pool.connection_class,
                                                      redis.SSLConnection) else None
            connecting = self.loop.create_connection(
                lambda: _Subscriber(self), kwargs.get("host", "localhost"),
                kwargs.get("port", 6379), ssl=secure)
        _, subscriber = await asyncio.wait_for(
            connecting, max(config.timeout_s, config.reply_timeout_s))
        if kwargs.get("password"):
            subscriber.transport.write(hiredis.pack_command(
                ("AUTH", *filter(None, (kwargs.get("username"), kwargs["password"])))))
        return subscriber

    def on_lost(self, subscriber: _Subscriber, exc: Exception | None) -> None:
        """Redis went away (or restarted, and the queue with it): every waiter of this loop is
        answered now, by its pool's failure policy."""
        if subscriber is not self.subscriber:
            return
        self.subscriber = None
        lost = LimiterUnavailable(f"queue subscription lost: {exc}")
        for confirmed in self.channels.values():
            if not confirmed.done():
                confirmed.set_exception(lost)
                confirmed.exception()
        self.channels.clear()
        for pool in self.pools.values():
            for future in pool.waiters.values():
                if not future.done():
                    future.set_exception(lost)
            if pool.timer is not None:
                pool.timer.cancel()
                pool.timer = None

    def close(self) -> None:
        if self.subscriber is not None and self.subscriber.transport is not None:
            self.subscriber.transport.close()

    # Messages and pumps.

    def on_subscribed(self, channel: str) -> None:
        confirmed = self.channels.get(channel)
        if confirmed is not None and not confirmed.done():
            confirmed.set_result(None)

    def on_message(self, channel: str, data: str) -> None:
        pool_id = _pool_of_channel(channel)
        pool = self.pools.get(pool_id)
        if pool is None or not pool.waiters:
            return
        message = message_decode(data)
        if "freed" in message:
            self.pump_soon(pool_id)
        else:
            self.resolve(pool_id, message)

    def resolve(self, pool_id: int, message: dict) -> None:
        """A pump's outcome: this loop's waiters it admitted or refused are answered; the next
        instant someone may fit is timed."""
        pool = self.pools.get(pool_id)
        if pool is None:
            return
        for outcomes in (message.get("a"), message.get("r")):
            for rid, decision in (outcomes or {}).items():
                future = pool.waiters.get(rid)
                if future is not None and not future.done():
                    future.set_result(decision_decode(decision))
        for rid in message.get("x") or ():
            future = pool.waiters.get(rid)
            if future is not None and not future.done():
                future.set_result(Decision("queue_timeout"))
        if message.get("n"):
            self.pump_at(pool_id, int(message["n"]))

    def pump_at(self, pool_id: int, at_ms: int) -> None:
        """One timer per pool: the earliest instant asked for."""
        pool = self.pools.get(pool_id)
        if pool is None or not pool.waiters:
            return
        if pool.timer is not None:
            if pool.timer_at <= at_ms:
                return
            pool.timer.cancel()
        pool.timer_at = at_ms
        delay = max(0.0, (at_ms - clock.now_ms()) / 1000)
        pool.timer = self.loop.call_later(delay, self._timer_fired, pool_id)

    def _timer_fired(self, pool_id: int) -> None:
        pool = self.pools.get(pool_id)
        if pool is not None:
            pool.timer = None
        self.pump_soon(pool_id)

    def pump_soon(self, pool_id: int) -> None:
        pool = self.pools.get(pool_id)
        if pool is None or not pool.waiters:
            return
        if pool.pumping:  # one in flight per pool: it runs once more after
            pool.again = True
            return
        pool.pumping = True
        self.loop.create_task(self._pump(pool_id))

    async def _pump(self, pool_id: int) -> None:
        pool = self.pools[pool_id]
        try:
            while True:
                pool.again = False
                reply = await self.call(queue_call(
                    "pump", pool_id=pool_id, digest="", request_id="", pump_max=_config.pump_max,
                    now_ms=clock.now_ms()))
                if reply.message:
                    self.resolve(pool_id, reply.message)
                if not pool.again:
                    break
        except LimiterUnavailable as exc:
            for future in pool.waiters.values():
                if not future.done():
                    future.set_exception(exc)
        except Exception:
            logger.exception("queue: a pump of pool %s failed", pool_id)
        finally:
            pool.pumping = False

    async def call(self, step) -> Joined:
        return reply_decode(await script_call(step.name, keys=step.keys, args=step.args))


def _pool_of_channel(channel: str) -> int | None:
    """"{p12}:queue" -> 12."""
    if channel.startswith("{p"):
        end = channel.find("}")
        if end > 2 and channel[2:end].isdigit():
            return int(channel[2:end])
    return None


_watches: dict[asyncio.AbstractEventLoop, _Watch] = {}


def _watch() -> _Watch:
    loop = asyncio.get_running_loop()
    watch = _watches.get(loop)
    if watch is None:
        for gone in [lp for lp in _watches if lp.is_closed()]:  # loops that ended (tests)
            del _watches[gone]
        watch = _watches[loop] = _Watch(loop)
    return watch


def _watches_close() -> None:
    for loop, watch in list(_watches.items()):
        if not loop.is_closed():
            loop.call_soon_threadsafe(watch.close)
    _watches.clear()


on_limiter_reset(_watches_close)


async def queue_decide(*, pool_id: int, digest: str, request_id: str, input_tokens: int,
                       max_output_tokens: int | None, tier: str, key_tier: str, pool_tier: str,
                       budget_ms: int, max_wait_ms: int, lease_owner: str = "",
                       lease_id: str = "", lease_for: str = "", lease_ttl_ms: int = 0,
                       speed_floor_tps: int = SPEED_FLOOR_TPS,
                       ttft_ceiling_ms: int = TTFT_CEILING_MS,
                       gone: Callable[[], Awaitable] | None = None,
                       on_wait: Callable[[int], object] | None = None) -> QueueOutcome:
    """Decide a request that may wait (budget_ms: what it asked, -1 for its key's or org's
    default; the pool's `max_wait_ms` clamps it): admitted now, refused now, or waiting until
    admitted or its budget ends. `gone()`: completes when the client goes away (the waiter then
    leaves at once). `on_wait(1)` when it starts to wait, `on_wait(-1)` when that ends (a
    gauge). `speed_floor_tps`, `ttft_ceiling_ms`: the pool's promise, which a concurrency
    shortfall's ETA counts on. Raises LimiterUnavailable (the pool's failure policy answers)."""
    watch = _watch()
    await watch.subscribed(pool_id)
    ask = {"pool_id": pool_id, "digest": digest, "request_id": request_id,
           "input_tokens": input_tokens, "max_output_tokens": max_output_tokens, "tier": tier,
           "key_tier": key_tier, "pool_tier": pool_tier, "lease_owner": lease_owner,
           "lease_id": lease_id, "lease_for": lease_for, "lease_ttl_ms": lease_ttl_ms,
           "speed_floor_tps": speed_floor_tps, "ttft_ceiling_ms": ttft_ceiling_ms}
    joined = await _join(watch, ask, budget_ms=budget_ms, max_wait_ms=max_wait_ms)
    if joined.state in ("decided", "done"):
        return QueueOutcome(joined.decision, budget_ms=joined.budget_ms)
    if joined.state == "refused":  # the ETA exceeds the budget: the refusal's own code
        eta = joined.eta_ms if joined.eta_ms >= 0 else None
        decision = joined.decision._replace(retry_after_ms=eta or joined.decision.retry_after_ms)
        return QueueOutcome(decision, budget_ms=joined.budget_ms, eta_ms=eta)
    if joined.state == "full":
        return QueueOutcome(joined.decision._replace(outcome="queue_full"),
                            budget_ms=joined.budget_ms, eta_ms=joined.eta_ms)
    return await _wait(watch, ask, joined, gone, on_wait)


async def _join(watch: _Watch, ask: dict, *, budget_ms: int, max_wait_ms: int) -> Joined:
    step = queue_call("join", **ask, budget_ms=budget_ms, max_wait_ms=max_wait_ms,
                      pool_cap=_config.pool_cap, org_cap=_config.org_cap,
                      pump_max=_config.pump_max, now_ms=clock.now_ms())
    joined = await watch.call(step)
    if joined.decision is not None and joined.decision.outcome == UNSYNCED:
        rebuild = engine_config().pool_rebuild  # Redis lost the pool: rebuilt, asked again
        if rebuild is not None:
            await in_thread(rebuild, pool_id=ask["pool_id"])
            joined = await watch.call(step._replace(args=step.args._replace(
                now_ms=clock.now_ms())))
        if joined.decision is not None and joined.decision.outcome == UNSYNCED:
            joined = joined._replace(decision=Decision("invalid_api_key"))
    return joined


async def _wait(watch: _Watch, ask: dict, joined: Joined,
                gone: Callable[[], Awaitable] | None,
                on_wait: Callable[[int], object] | None = None) -> QueueOutcome:
    pool_id, rid = ask["pool_id"], ask["request_id"]
    loop = watch.loop
    pool = watch.pools.get(pool_id)
    if pool is None:
        pool = watch.pools[pool_id] = _Pool()
    future = pool.waiters.get(rid)
    if future is None or future.done():
        future = pool.waiters[rid] = loop.create_future()
    started = time.monotonic()
    # The budget's end: the waiter leaves (or learns it was admitted just before).
    deadline = loop.call_later(max(joined.budget_ms, 0) / 1000, _deadline_reached, watch,
                               ask, future)
    if joined.message:
        watch.resolve(pool_id, joined.message)
    if joined.next_at:
        watch.pump_at(pool_id, joined.next_at)
    gone_task = asyncio.ensure_future(gone()) if gone is not None else None
    if on_wait is not None:
        on_wait(1)
    try:
        if gone_task is None:
            decision = await future
        else:
            await asyncio.wait({future, gone_task}, return_when=asyncio.FIRST_COMPLETED)
            if not future.done():  # the client went away first
                raise asyncio.CancelledError
            decision = future.result()
    except asyncio.CancelledError:
        # The client went away (or the server stops): leave the queue now; an admission that
        # raced the departure is given back at once (settled at zero).
        await asyncio.shield(_leave_departed(watch, ask))
        raise
    finally:
        if on_wait is not None:
            on_wait(-1)
        deadline.cancel()
        if gone_task is not None and not gone_task.done():
            gone_task.cancel()
        if pool.waiters.get(rid) is future:
            del pool.waiters[rid]
        if not pool.waiters and pool.timer is not None:
            pool.timer.cancel()
            pool.timer = None
    if decision.org_id is None and joined.decision is not None:  # queue_timeout: whose
        decision = decision._replace(org_id=joined.decision.org_id,
                                     api_key_id=joined.decision.api_key_id)
    return QueueOutcome(decision, budget_ms=joined.budget_ms, eta_ms=joined.eta_ms,
                        queued_ms=round((time.monotonic() - started) * 1000))


def _deadline_reached(watch: _Watch, ask: dict, future: asyncio.Future) -> None:
    if not future.done():
        watch.loop.create_task(_leave_at_deadline(watch, ask, future))


async def _leave_at_deadline(watch: _Watch, ask: dict, future: asyncio.Future) -> None:
    try:
        left = await watch.call(queue_call("leave", pool_id=ask["pool_id"], digest=ask["digest"],
                                           request_id=ask["request_id"], now_ms=clock.now_ms()))
    except LimiterUnavailable as exc:
        if not future.done():
            future.set_exception(exc)
        return
    if future.done():
        return
    if left.state == "done":  # admitted (or refused) just before its deadline
        future.set_result(left.decision)
    else:
        future.set_result(Decision("queue_timeout"))


async def _leave_departed(watch: _Watch, ask: dict) -> None:
    try:
        left = await watch.call(queue_call("leave", pool_id=ask["pool_id"], digest=ask["digest"],
                                           request_id=ask["request_id"], now_ms=clock.now_ms()))
        if left.state == "done" and left.decision is not None and left.decision.allowed:
            await in_thread(limiter_settle, pool_id=ask["pool_id"], settlements=[Settlement(
                request_id=ask["request_id"], org_id=left.decision.org_id, input_tokens=0,
                api_key_id=left.decision.api_key_id or 0)])
    except Exception:
        logger.exception("queue: a departed waiter could not leave pool %s", ask["pool_id"])
