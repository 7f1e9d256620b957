"""The engine's hot script call from an event loop: one pipelined connection per Redis server
and loop.

Why not redis-py's asyncio client: it sends one command per connection at a time, so a loop
with twenty decisions in flight needs twenty connections and twenty round trips' worth of
system calls. Here every script call of a turn of the loop is written in one `write`, and the
replies, which Redis sends in the order it received the commands, resolve the waiting futures
in that order (hiredis parses them). A reply that comes too late finds its future already
failed and is dropped, so the connection stays usable: order, not a request id, pairs them.

Where to connect, and how (TLS, a Unix socket, credentials, the database), is read off the
synchronous client's connection pool for the call's first key (connection.py): one URL, parsed
once, by redis-py. Failures go through the same circuit breaker as the threads' calls. What
this cannot do (follow a cluster redirection, load a script the server lost) it leaves to the
synchronous client, in a thread (`script_call`).

What else an event loop must not wait for (a pool rebuilt from PostgreSQL, a cache reloaded) runs
in the loop's default executor: `in_thread` waits for it, `background` does not. The server sets
that executor (quotas/hook/asgi.py).
"""

import asyncio
import logging
import ssl
import threading
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import hiredis
import redis
from redis.asyncio.connection import RedisSSLContext

from quotas.limiter.connection import (
    SlowReply,
    connection_pool_for,
    engine_config,
    hot_breaker_check,
    hot_call_answered,
    hot_call_failed,
    limiter_client,
    on_limiter_reset,
    script_run,
    script_sha,
)

logger = logging.getLogger(__name__)

# More calls waiting on one connection than this: Redis is not keeping up (or hangs), and the
# call fails at once instead of queueing behind the others.
MAX_WAITING = 10_000
# A deadline is checked this long after it passed, so that the loop reads its sockets first.
AFTER_POLL_SECONDS = 0.001
# Error replies that only the synchronous client can deal with.
_THREAD_ERRORS = ("NOSCRIPT", "MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")


async def in_thread(fn: Callable[..., Any], /, **kwargs) -> Any:
    """`fn(**kwargs)` in the running loop's default executor, awaited."""
    return await asyncio.get_running_loop().run_in_executor(None, partial(fn, **kwargs))


def _logged(future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.error("background work failed", exc_info=future.exception())


def background(fn: Callable[..., Any], /, **kwargs) -> None:
    """`fn(**kwargs)` in the running loop's default executor, not waited for: its failure is
    logged, never the caller's (not even when the threads are gone: a server stopping)."""
    try:
        future = asyncio.get_running_loop().run_in_executor(None, partial(fn, **kwargs))
    except RuntimeError as exc:
        logger.warning("background %s not started: %s", fn.__qualname__, exc)
        return
    future.add_done_callback(_logged)


class Claim:
    """Who schedules a refresh: `take(period)` is True the first time it sees `period` (what
    identifies the current period: the time it ends or began), so that one request of the many
    that find a cache stale schedules its refresh, not every one of them."""

    def __init__(self) -> None:
        self.period: object = None

    def take(self, period: object) -> bool:
        if self.period == period:
            return False
        self.period = period
        return True


class NeedsThread(Exception):
    """This call needs the synchronous client (a cluster redirection, or a script to load)."""


class _LinkLost(ConnectionError):
    pass


class _Link(asyncio.Protocol):
    """One connection to one Redis server, pipelined (see the module's docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.reader = hiredis.Reader(encoding="utf-8")
        # (future, deadline, sent at) of every call written and not yet answered, oldest first.
        self.waiting: deque[tuple[asyncio.Future, float, float]] = deque()
        self.expired = 0  # how many of the oldest have been failed for want of a reply
        self.watch: asyncio.TimerHandle | None = None  # the next check of the oldest deadline
        self.unsent: list[bytes] = []
        self.lost = False
        self.heard = loop.time()  # when Redis last sent anything on this link

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.heard = self.loop.time()
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            future = self.waiting.popleft()[0]
            if self.expired:  # this one timed out: its reply is dropped
                self.expired -= 1
            elif not future.done():  # else its caller went away
                if isinstance(reply, hiredis.ReplyError):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.watch is not None:
            self.watch.cancel()
        while self.waiting:
            future = self.waiting.popleft()[0]
            if not future.done():
                future.set_exception(_LinkLost(f"connection to Redis lost: {exc}"))

    def call(self, packed: bytes, timeout: float) -> asyncio.Future:
        """The future of `packed`'s reply; it fails with SlowReply after `timeout` seconds."""
        if self.lost:
            raise _LinkLost("connection to Redis lost")
        if len(self.waiting) >= MAX_WAITING:
            raise SlowReply(f"{len(self.waiting)} calls already wait for Redis")
        loop = self.loop
        future = loop.create_future()
        if not self.unsent:  # the first of this turn: write them all at its end
            loop.call_soon(self._write)
        self.unsent.append(packed)
        now = loop.time()
        deadline = now + timeout
        self.waiting.append((future, deadline, now))
        if self.watch is None:
            self.watch = loop.call_at(deadline, self._deadline_reached)
        return future

    def _deadline_reached(self) -> None:
        # Look once more after the loop has read its sockets: a loop busy past the deadline
        # has not, and a reply that came in time may be waiting there (uvloop runs timers
        # before it polls; a timer due a millisecond later runs after the poll).
        self.watch = self.loop.call_later(AFTER_POLL_SECONDS, self._expire)

    def _expire(self) -> None:
        """Fail the calls whose deadline has passed (one timer per link, not one per call:
        deadlines come in the order of the calls)."""
        self.watch = None
        now, waiting, at = self.loop.time() - AFTER_POLL_SECONDS, self.waiting, self.expired
        while at < len(waiting) and waiting[at][1] <= now:
            future, _, sent = waiting[at]
            if not future.done():
                # Silent: nothing came from Redis since this call was sent (it hangs); else
                # it answered others meanwhile and this reply is late behind a slow command.
                future.set_exception(SlowReply("no reply from Redis in time",
                                               silent=self.heard <= sent))
            at += 1
        self.expired = at
        if at < len(waiting):
            self.watch = self.loop.call_at(waiting[at][1], self._deadline_reached)

    def _write(self) -> None:
        data = b"".join(self.unsent)
        self.unsent.clear()
        if not self.lost:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


_lock = threading.Lock()
# (event loop, connection pool) -> its link, or the future of the link being connected.
_links: dict[tuple[asyncio.AbstractEventLoop, object], "_Link | asyncio.Future"] = {}


def _ssl_context(pool: redis.ConnectionPool) -> ssl.SSLContext:
    """The TLS settings of the synchronous client's connections, read off one it never opens."""
    conn = pool.connection_class(**pool.connection_kwargs)
    return RedisSSLContext(
        keyfile=conn.keyfile, certfile=conn.certfile, cert_reqs=conn.cert_reqs,
        ca_certs=conn.ca_certs, ca_data=conn.ca_data, ca_path=conn.ca_path,
        check_hostname=conn.check_hostname, min_version=conn.ssl_min_version,
        ciphers=conn.ssl_ciphers, password=conn.certificate_password).get()


async def _within(awaitable, timeout: float):
    """`awaitable`'s result, or TimeoutError once `timeout` has passed and the loop has read its
    sockets since (as _Link's deadlines: a loop busy with hundreds of requests when it connects,
    at start-up or after Redis restarted, must not give up a connection made in time)."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        await asyncio.sleep(AFTER_POLL_SECONDS)
    if not task.done():
        task.cancel()
        raise TimeoutError(f"no connection to Redis within {timeout}s")
    return task.result()


async def _connect(loop: asyncio.AbstractEventLoop, pool: redis.ConnectionPool) -> _Link:
    kwargs, config = pool.connection_kwargs, engine_config()
    if "path" in kwargs:
        connecting = loop.create_unix_connection(lambda: _Link(loop), kwargs["path"])
    else:
        secure = _ssl_context(pool) if issubclass(pool.connection_class,
                                                  redis.SSLConnection) else None
        connecting = loop.create_connection(lambda: _Link(loop), kwargs.get("host", "localhost"),
                                            kwargs.get("port", 6379), ssl=secure)
    # Not timeout_s alone: here the connection is made by the loop, whose next turn may come
    # after hundreds of queued requests (a refused connection fails at once whatever the
    # timeout; only a Redis that never answers costs the wait, and the breaker then opens).
    _, link = await _within(connecting, max(config.timeout_s, config.reply_timeout_s))
    hello = []
    if kwargs.get("password"):
        hello.append(("AUTH", *filter(None, (kwargs.get("username"), kwargs["password"]))))
    if kwargs.get("db"):
        hello.append(("SELECT", kwargs["db"]))
    try:
        for command in hello:  # their replies come before any call's: wait for them here
            await link.call(hiredis.pack_command(command), config.reply_timeout_s)
    except BaseException:
        link.close()
        raise
    return link


async def _link_connect(loop: asyncio.AbstractEventLoop, pool: redis.ConnectionPool) -> _Link:
    """The loop's link to `pool`'s server, connected (once, for every caller) if it has none."""
    key = (loop, pool)
    link = _links.get(key)
    if link is None or type(link) is _Link:  # none yet, or lost: connect
        link = loop.create_future()
        with _lock:
            for gone in [k for k in _links if k[0].is_closed()]:  # loops that ended (tests)
                del _links[gone]
            _links[key] = link
        try:
            connected = await _connect(loop, pool)
        except BaseException as exc:
            with _lock:
                _links.pop(key, None)
            link.set_exception(exc)
            link.exception()  # retrieved: the others waiting see it, nobody else needs to
            raise
        with _lock:
            _links[key] = connected
        link.set_result(connected)
        return connected
    return await asyncio.shield(link)


def _links_close() -> None:
    """Close every loop's links (limiter_reset): each on its own loop's thread."""
    with _lock:
        links = [link for link in _links.values() if type(link) is _Link]
        _links.clear()
    for link in links:
        if not link.loop.is_closed():
            link.loop.call_soon_threadsafe(link.close)


on_limiter_reset(_links_close)


async def script_run_async(name: str, *, keys: Sequence[str], args: Sequence):
    """The reply of script `name` (EVALSHA), as the threads' hot call would give it. Raises
    LimiterUnavailable (down, too slow, an error reply, the breaker open) or NeedsThread."""
    hot_breaker_check()
    loop = asyncio.get_running_loop()
    pool = connection_pool_for(limiter_client(), keys[0])
    try:
        link = _links.get((loop, pool))
        if type(link) is not _Link or link.lost:
            link = await _link_connect(loop, pool)
        reply = await link.call(
            hiredis.pack_command(("EVALSHA", script_sha(name), len(keys), *keys, *args)),
            engine_config().reply_timeout_s)
    except hiredis.ReplyError as exc:
        if str(exc).startswith(_THREAD_ERRORS):
            raise NeedsThread(str(exc)) from exc
        raise hot_call_failed(name, exc) from exc
    except (OSError, TimeoutError, SlowReply, redis.RedisError) as exc:  # _LinkLost included
        raise hot_call_failed(name, exc) from exc
    hot_call_answered()
    return reply


async def script_call(name: str, *, keys: Sequence[str], args: Sequence):
    """script_run_async, or the synchronous client in a thread for what only it can do."""
    try:
        return await script_run_async(name, keys=keys, args=args)
    except NeedsThread:
        return await in_thread(script_run, name=name, keys=keys, args=args)
