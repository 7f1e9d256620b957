"""AsyncSluiceClient: the asyncio twin of SluiceClient, for gateways on an event loop.

`authorize` is one HTTP call on a keep-alive connection pool (retried like the sync client's,
with the same request_id): one pool of connections per client (sluice_client/http1.py, a
small HTTP/1.1 client: httpx.AsyncClient cost 1.1-3.4 ms of CPU per call, aiohttp ~110 µs,
this one ~40 µs), opened by `start()` (or the first call) on the running loop and closed by
`close()`. A `transport`
(an httpx.AsyncBaseTransport, for tests and custom routing) makes the client use httpx instead.
`report_usage` only appends to an in-memory list and returns: a background task sends batches
of up to `batch_size` every `flush_interval` seconds (sooner when a batch is full), off every
request's critical path. Undeliverable batches go to the same disk spool as the sync client's
(fsynced JSON lines, replayed when Sluice answers again, rejected events to `<spool>.dead`);
disk writes run in a worker thread so the loop never blocks on them.

Once a call could not reach Sluice, the client's breaker (sluice_client/breaker.py) fails the
next calls at once (SluiceUnavailable, no I/O; usage goes to the spool) until a background
probe of Sluice's /healthz answers.
"""

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import orjson

from sluice_client.breaker import Breaker
from sluice_client.client import (
    MAX_BATCH,
    RETRYABLE_REJECTIONS,
    AuthorizeResult,
    SluiceUnavailable,
    UsageEvent,
    _is_decision,
    authorize_body,
)
from sluice_client.http1 import Http1Pool, HttpError, ReadTimeout, header_lines
from sluice_client.spool import Spool

logger = logging.getLogger("sluice_client")


@dataclass(frozen=True)
class Reply:
    """Sluice's answer, read whole (what AuthorizeResult.from_response and the usage results
    need of it, whichever HTTP client fetched it)."""
    status_code: int
    content: bytes

    def json(self):
        return orjson.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class AsyncSluiceClient:
    def __init__(self, base_url: str, *, token: str, spool_path: str, timeout: float = 2.0,
                 retries: int = 2, batch_size: int = 500, flush_interval: float = 0.5,
                 max_connections: int = 100, probe_interval: float = 0.25,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self.retries, self.batch_size = retries, min(batch_size, MAX_BATCH)
        self.flush_interval = flush_interval
        self.spool = Spool(spool_path)
        self._headers = {"Authorization": f"Bearer {token}",
                         "Content-Type": "application/json"}
        self._header_lines = header_lines(self._headers)  # the same on every call
        self._timeout, self._max_connections = timeout, max_connections
        self._pool: Http1Pool | None = None
        self._prefix = urlsplit(self.base_url).path  # Sluice served under a path
        self._http: httpx.AsyncClient | None = None
        if transport is not None:
            limits = httpx.Limits(max_connections=max_connections,
                                  max_keepalive_connections=max_connections)
            self._http = httpx.AsyncClient(timeout=timeout, transport=transport, limits=limits,
                                           headers=self._headers)
        self._pending: list[dict] = []
        self._full = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self._worker: asyncio.Task | None = None
        self._closing = False
        self.breaker = Breaker(probe=self._probe, probe_interval=probe_interval)

    async def start(self) -> None:
        """Open the connection pool and start the background sender (on the running loop)."""
        self._open()
        if self._worker is None:
            self._worker = asyncio.create_task(self._run(), name="sluice-usage")

    async def __aenter__(self) -> "AsyncSluiceClient":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- authorize ---------------------------------------------------------------------------

    async def authorize(self, *, request_id: str, api_key: str, model: str, input_tokens: int,
                        max_output_tokens: int | None = None, region: str | None = None,
                        dry_run: bool = False, service_tier: str | None = None,
                        read_timeout: float | None = None) -> AuthorizeResult:
        """`read_timeout`: how long Sluice may take to answer this call, when that may be
        longer than the client's timeout (a request that may wait in Sluice's admission queue:
        its wait budget plus the usual timeout). Such a call, once sent, is neither retried
        nor counted by the breaker when its answer is late: Sluice was reached, the request
        waited (see _post)."""
        body = authorize_body(request_id=request_id, api_key=api_key, model=model,
                              input_tokens=input_tokens, max_output_tokens=max_output_tokens,
                              region=region, dry_run=dry_run, service_tier=service_tier)
        return AuthorizeResult.from_response(
            await self._post("/api/gateway/v1/authorize", body, read_timeout=read_timeout))

    def _open(self) -> None:
        if self._http is None and self._pool is None:
            # httpx's single timeout: per connect, per read; none for the whole call.
            self._pool = Http1Pool(self.base_url, limit=self._max_connections,
                                   connect_timeout=self._timeout, read_timeout=self._timeout)

    async def _send(self, method: str, path: str, data: bytes = b"", *,
                    read_timeout: float | None = None) -> Reply:
        if self._http is not None:
            response = await self._http.request(
                method, self.base_url + path, content=data,
                timeout=httpx.Timeout(self._timeout, read=read_timeout or self._timeout))
            return Reply(response.status_code, response.content)
        self._open()
        response = await self._pool.request(method, self._prefix + path,
                                            headers=self._header_lines, body=data,
                                            read_timeout=read_timeout)
        try:
            return Reply(response.status, await response.read())
        finally:
            response.release()

    async def _probe(self) -> bool:
        """Does Sluice answer at all (any HTTP answer below 500)?"""
        try:
            return (await self._send("GET", "/healthz")).status_code < 500
        except (TimeoutError, httpx.TransportError, HttpError):
            return False

    async def _post(self, path: str, body: dict, *, read_timeout: float | None = None) -> Reply:
        """Sent with retries; after the last, the breaker hears that Sluice is unreachable.
        A call that declared its own `read_timeout` (one Sluice may hold, as its admission
        queue does) and got no answer in it is the exception: the request reached Sluice and
        waited there, which says nothing about Sluice being down; it is neither retried (it
        may still be waiting) nor counted as a failure."""
        if self.breaker.open:
            raise SluiceUnavailable("Sluice could not be reached a moment ago (probing)")
        last: Exception | None = None
        data = orjson.dumps(body)
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(min(0.05 * 2 ** attempt, 1.0))
            try:
                response = await self._send("POST", path, data, read_timeout=read_timeout)
            except (ReadTimeout, httpx.ReadTimeout) as exc:
                if read_timeout is not None:
                    raise SluiceUnavailable("Sluice held the call past its read timeout") \
                        from exc
                last = exc
                continue
            except (TimeoutError, httpx.TransportError, HttpError) as exc:
                last = exc
                continue
            if response.status_code < 500 or _is_decision(response):
                self.breaker.succeeded()
                return response
            last = SluiceUnavailable(f"HTTP {response.status_code}")
        self.breaker.failed()
        raise SluiceUnavailable(str(last)) from last

    # -- usage -------------------------------------------------------------------------------

    def report_usage(self, event: UsageEvent | dict) -> None:
        """Queue one event; never waits (safe to call from a response's cleanup)."""
        self._pending.append(event.as_json() if isinstance(event, UsageEvent) else dict(event))
        if len(self._pending) >= self.batch_size:
            self._full.set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def flush(self) -> None:
        """Send everything queued, then replay the spool."""
        async with self._send_lock:
            while self._pending:
                batch = self._pending[:self.batch_size]
                del self._pending[:self.batch_size]
                if not await self._deliver(batch):
                    await asyncio.to_thread(self.spool.append, batch)
            await self._replay()

    async def close(self) -> None:
        await self.breaker.stop()
        if self._worker is not None:
            # Asked to stop, not cancelled: Python 3.11's wait_for can swallow a cancellation
            # that arrives as the event fires, and the sender would then wait forever.
            self._closing = True
            self._full.set()
            await self._worker
            self._worker = None
        try:
            await self.flush()
        finally:
            if self._http is not None:
                await self._http.aclose()
            if self._pool is not None:
                await self._pool.close()
                self._pool = None

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), self.flush_interval)
            self._full.clear()
            if self._closing:
                return  # close() sends what is left
            try:
                await self.flush()
            except Exception:  # the sender must survive anything; the spool keeps the events
                logger.exception("sluice usage flush failed")

    async def _replay(self) -> None:
        spooled = await asyncio.to_thread(self.spool.take)
        if not spooled:
            return
        undelivered: list[dict] = []
        for i in range(0, len(spooled), self.batch_size):
            batch = spooled[i:i + self.batch_size]
            if undelivered or not await self._deliver(batch):
                undelivered.extend(batch)  # Sluice is down again: keep the rest for later
        await asyncio.to_thread(self.spool.append, undelivered)
        await asyncio.to_thread(self.spool.taken)

    async def _deliver(self, batch: list[dict]) -> bool:
        """True when Sluice answered for every event (even if some go to the dead file)."""
        try:
            response = await self._post("/api/gateway/v1/usage", {"events": batch})
        except SluiceUnavailable:
            return False
        if response.status_code == 400:
            logger.error("sluice refused a usage batch as malformed: %s", response.text)
            await asyncio.to_thread(self.spool.append, batch, dead=True)
            return True
        if response.status_code != 200:
            return False
        retry, dead = [], []
        for event, result in zip(batch, response.json()["results"], strict=True):
            if result["result"] == "rejected":
                code = result.get("error", {}).get("code")
                (retry if code in RETRYABLE_REJECTIONS else dead).append(event)
        await asyncio.to_thread(self.spool.append, retry)
        await asyncio.to_thread(self.spool.append, dead, dead=True)
        return True
