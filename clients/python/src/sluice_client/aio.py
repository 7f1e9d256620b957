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

With `leases=True` (hook contract §1, sluice_client/leases.py) `authorize` asks for a lease, one
background task renews every lease the client holds in one heartbeat call per interval, and
another sends `release(...)`s, gathered over a few milliseconds, at once.
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
    queue_read_timeout,
)
from sluice_client.http1 import Http1Pool, HttpError, ReadTimeout, header_lines
from sluice_client.leases import (
    ASK_AGAIN,
    HEARTBEAT_PATH,
    MAX_PER_CALL,
    RELEASE_PATH,
    RELEASE_WINDOW,
    LeaseBook,
    process_id,
)
from sluice_client.spool import Spool

logger = logging.getLogger("sluice_client")


def _resolve(future: asyncio.Future, value) -> None:
    if not future.done():  # a caller that left (cancelled) is answered no more
        future.set_result(value)


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


@dataclass(frozen=True)
class ParsedReply:
    """One request's answer inside a batched authorize's answer (decoded with the batch)."""
    status_code: int
    body: object

    def json(self):
        return self.body


AUTHORIZE_PATH = "/api/gateway/v1/authorize"
AUTHORIZE_BATCH_PATH = "/api/gateway/v1/authorize/batch"
AUTHORIZE_BATCH_MAX = 100  # Sluice's bound (quotas/hook/inputs.py)


class AsyncSluiceClient:
    def __init__(self, base_url: str, *, token: str, spool_path: str, timeout: float = 2.0,
                 retries: int = 2, batch_size: int = 500, flush_interval: float = 0.5,
                 max_connections: int = 100, probe_interval: float = 0.25,
                 transport: httpx.AsyncBaseTransport | None = None, leases: bool = False,
                 heartbeat_interval: float | None = None,
                 release_window: float = RELEASE_WINDOW, on_lease_refused=None,
                 on_usage_handled=None):
        """`leases`, `heartbeat_interval`, `release_window`, `on_lease_refused`: as the sync
        client's. `on_usage_handled(events)`: called once a batch of usage events is no longer
        only in memory (Sluice answered for it, or it is in the spool)."""
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
        self.on_usage_handled = on_usage_handled
        self.leases = LeaseBook(on_refused=on_lease_refused) if leases else None
        self._heartbeat_interval, self._release_window = heartbeat_interval, release_window
        self._lease_tasks: list[asyncio.Task] = []
        self._release_wake = asyncio.Event()
        self._release_urgent = asyncio.Event()
        self._releases_answered = asyncio.Event()
        self._releases_taken = self._releases_done = 0  # release batches taken / answered
        self._leases_closing = False
        # Authorizes asked in this turn of the loop, sent together at its end; whether Sluice
        # has /authorize/batch (None: not known yet; False: a Sluice from before it).
        self._authorizing: list[tuple[dict, asyncio.Future]] = []
        self._authorize_calls = 0  # authorize calls in flight (alone or batched)
        self._batches: bool | None = None
        self._batch_tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        """Open the connection pool and start the background sender (on the running loop)."""
        self._open()
        if self._worker is None:
            self._worker = asyncio.create_task(self._run(), name="sluice-usage")
        if self.leases is not None and not self._lease_tasks:
            self._lease_tasks = [
                asyncio.create_task(self._heartbeat_run(), name="sluice-heartbeat"),
                asyncio.create_task(self._release_run(), name="sluice-release")]

    async def __aenter__(self) -> "AsyncSluiceClient":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- authorize ---------------------------------------------------------------------------

    async def authorize(self, *, request_id: str, api_key: str, model: str, input_tokens: int,
                        max_output_tokens: int | None = None, region: str | None = None,
                        dry_run: bool = False, service_tier: str | None = None,
                        read_timeout: float | None = None,
                        queue_threshold_ms: int | None = None) -> AuthorizeResult:
        """`read_timeout`: how long Sluice may take to answer this call, when that may be
        longer than the client's timeout (a request that may wait in Sluice's admission queue:
        its wait budget plus the usual timeout). Such a call, once sent, is neither retried
        nor counted by the breaker when its answer is late: Sluice was reached, the request
        waited (see _post). `queue_threshold_ms`: how long the request may wait in Sluice's
        admission queue (0 or 50-20,000; None: the key's or org's default); without a
        `read_timeout`, the call's grows by it."""
        lease = self.leases is not None and not dry_run
        body = authorize_body(request_id=request_id, api_key=api_key, model=model,
                              input_tokens=input_tokens, max_output_tokens=max_output_tokens,
                              region=region, dry_run=dry_run, service_tier=service_tier,
                              lease=lease, queue_threshold_ms=queue_threshold_ms)
        if read_timeout is None and queue_threshold_ms:
            read_timeout = queue_read_timeout(self._timeout, queue_threshold_ms)
        # Releases queued or on their way may free the slot this request needs. Queued ones
        # ride with it when it leaves in a batch (applied first: _authorize_send). Near its
        # concurrency limit (as the key's last answer said) the request waits for them to be
        # answered first; a concurrency refusal is asked again once the releases pending then
        # are answered (a few times at most: streams keep ending meanwhile). Nothing waits
        # when no release is pending.
        pending = self._releases_pending() if lease else 0
        if pending and self.leases.near_limit(api_key):
            await self._releases_sent(pending)
            pending = self._releases_pending()
        result = AuthorizeResult.from_response(await self._authorize_call(body, read_timeout))
        for _ in range(ASK_AGAIN):
            if not pending or result.error_code != "concurrency_exceeded":
                break
            await self._releases_sent(pending)
            self.leases.stats["authorize_asked_again"] += 1
            pending = self._releases_pending()
            result = AuthorizeResult.from_response(
                await self._authorize_call(body, read_timeout))
        if lease:
            self.leases.answered_authorize(api_key, result)
        if lease and result.allowed and result.lease is not None:
            self.leases.hold(result.lease, bound=result.reserved_output_tokens)
        return result

    async def _authorize_call(self, body: dict, read_timeout: float | None):
        """Sluice's answer to one authorize body. While authorize calls are in flight (under
        load), the authorizes asked in one turn of the event loop leave together at its end:
        one alone as POST /authorize, several as one POST /authorize/batch (its HTTP exchange,
        most of an authorize's cost on both sides, shared; nothing waits for company). When
        none is (idle), it leaves at once. One that may wait in the admission queue (its own
        `read_timeout`) goes alone: it would hold the others' answers."""
        if read_timeout is not None or self._batches is False:
            return await self._post(AUTHORIZE_PATH, body, read_timeout=read_timeout)
        if not self._authorizing and not self._authorize_calls:
            # Nothing in flight, nothing gathered: idle, as at light load. Sent now, from
            # this task: waiting for the turn's end would only add a hop to its latency.
            self._authorize_calls += 1
            try:
                return await self._post(AUTHORIZE_PATH, body)
            finally:
                self._authorize_calls -= 1
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._authorizing.append((body, future))
        if len(self._authorizing) == 1:
            loop.call_soon(self._authorize_flush)
        return await future

    def _authorize_flush(self) -> None:
        asked, self._authorizing = self._authorizing, []
        for i in range(0, len(asked), AUTHORIZE_BATCH_MAX):
            # Its own task: a caller cancelled (its client left) must not cancel the others'.
            task = asyncio.get_running_loop().create_task(
                self._authorize_send(asked[i:i + AUTHORIZE_BATCH_MAX]))
            self._batch_tasks.add(task)
            task.add_done_callback(self._batch_tasks.discard)

    async def _authorize_send(self, asked: list[tuple[dict, asyncio.Future]]) -> None:
        riding = None  # lease releases sent with the batch, until Sluice answers for them
        self._authorize_calls += 1
        try:
            if len(asked) == 1 or self._batches is False:
                await asyncio.gather(*(self._authorize_alone(body, future)
                                       for body, future in asked))
                return
            payload = {"requests": [body for body, _ in asked]}
            # Releases ride on a batch (under load), never turn a lone authorize into one:
            # Sluice applies them first, a round trip to Redis the lone request would wait.
            riding = self._releases_ride() if self._batches else None
            if riding is not None:
                payload["releases"] = riding[0]
            reply = await self._post(AUTHORIZE_BATCH_PATH, payload)
            if reply.status_code == 404 and not self._batches:  # a Sluice from before batches
                self._batches = False
                await asyncio.gather(*(self._authorize_alone(body, future)
                                       for body, future in asked))
            elif reply.status_code == 200:
                self._batches = True
                try:
                    whole = reply.json()
                    answers = [ParsedReply(int(result["status"]), result["body"])
                               for result in whole["results"]]
                except (ValueError, TypeError, KeyError) as exc:
                    raise SluiceUnavailable("Sluice's batched answer is malformed") from exc
                if len(answers) != len(asked):
                    raise SluiceUnavailable("Sluice's batched answer is malformed")
                if riding is not None:
                    self._releases_rode(whole.get("releases"), *riding)
                    riding = None
                for (_, future), answer in zip(asked, answers, strict=True):
                    _resolve(future, answer)
            else:  # refused whole (the gateway token): that is every request's answer
                for _, future in asked:
                    _resolve(future, reply)
        except Exception as exc:
            for _, future in asked:
                if not future.done():
                    future.set_exception(exc)
        finally:
            self._authorize_calls -= 1
            if riding is not None:  # the releases did not reach Sluice: queued again
                self._releases_rode(None, *riding)
            for _, future in asked:
                future.cancel()  # (a no-op for those answered)

    def _releases_ride(self) -> tuple[dict, int] | None:
        """The queued lease releases, to ride on an authorize batch (one body's worth at
        most; more leave with the release task), and the release batch they make."""
        book = self.leases
        if book is None or not book.releasing or book.releasing_count > MAX_PER_CALL:
            return None
        bodies = book.releases_take(process_id())
        self._releases_taken += 1
        book.stats["release_rides"] += 1
        return bodies[0], self._releases_taken

    def _releases_rode(self, answer, body: dict, batch: int) -> None:
        """A ride's end: Sluice's answer to the releases (None: they did not arrive, and are
        queued again for the release task)."""
        if isinstance(answer, dict) and answer.get("status") == 200:
            self.leases.answered(answer.get("body"), kind="release")
        else:
            self.leases.releases_return(body)
            self._release_wake.set()
        self._releases_answer(batch)

    async def _authorize_alone(self, body: dict, future: asyncio.Future) -> None:
        try:
            _resolve(future, await self._post(AUTHORIZE_PATH, body))
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)

    # -- leases ------------------------------------------------------------------------------

    def lease_progress(self, lease_id: str, delivered_output_tokens: int) -> None:
        """The request's output tokens delivered so far (the next heartbeat carries it)."""
        if self.leases is not None:
            self.leases.progress(lease_id, delivered_output_tokens)

    def release(self, lease_id: str, delivered_output_tokens: int | None = None) -> None:
        """The request's stream ended: stop renewing its lease and free its slot now (one
        call for the releases of the next few milliseconds). Never waits."""
        if self.leases is not None and self.leases.release(lease_id, delivered_output_tokens):
            self._release_wake.set()

    def _releases_pending(self) -> int:
        """The release batch that carries every release queued so far (0: none pending)."""
        target = self._releases_taken + (1 if self.leases.releasing else 0)
        return 0 if self._releases_done >= target else target

    async def _releases_sent(self, target: int) -> None:
        """Until release batch `target` is answered (at most the calls' own timeout); the
        releases still queued leave at once."""
        if self.leases.releasing:
            self._release_urgent.set()
            self._release_wake.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._timeout * (self.retries + 1)):
                while self._releases_done < target and self._lease_tasks:
                    answered = self._releases_answered
                    await answered.wait()

    async def _heartbeat_run(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval or self.leases.interval)
            try:
                await self.heartbeat()
            except Exception:  # the heartbeat must survive anything
                logger.exception("sluice heartbeat failed")

    async def heartbeat(self) -> None:
        """Renew every lease held now, with its progress: what the background task does every
        interval (one call, or one per 1,000 leases). Refused leases are dropped."""
        bodies = self.leases.renewals(process_id())
        if bodies:
            self.leases.stats["heartbeats"] += 1
        for body in bodies:
            await self._lease_call(HEARTBEAT_PATH, body, kind="heartbeat")

    async def _release_run(self) -> None:
        book = self.leases
        while True:
            if not book.releasing:
                if self._leases_closing:
                    return
                self._release_urgent.clear()
                await self._release_wake.wait()
                self._release_wake.clear()
                continue
            if not self._release_urgent.is_set():  # gather the streams ending together
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._release_window):
                        await self._release_urgent.wait()
            self._release_urgent.clear()
            await self._releases_send()

    async def _releases_send(self) -> None:
        bodies = self.leases.releases_take(process_id())
        self._releases_taken += 1
        batch = self._releases_taken
        try:
            for body in bodies:
                await self._lease_call(RELEASE_PATH, body, kind="release")
        except Exception:
            logger.exception("sluice lease release failed")
        finally:
            self._releases_answer(batch)

    def _releases_answer(self, batch: int) -> None:
        """Release batch `batch` is answered (or will not be): who waits for it goes on."""
        self._releases_done = max(self._releases_done, batch)
        answered, self._releases_answered = self._releases_answered, asyncio.Event()
        answered.set()

    async def _lease_call(self, path: str, body: dict, *, kind: str) -> None:
        book = self.leases
        data = orjson.dumps(body)
        book.stats[f"{kind}_calls"] += 1
        book.stats[f"{kind}_bytes_sent"] += len(data)
        try:
            response = await self._post(path, data)
        except SluiceUnavailable as exc:
            book.stats[f"{kind}_failed"] += 1
            logger.warning("sluice lease %s failed: %s", kind, exc)
            return
        book.stats[f"{kind}_bytes_received"] += len(response.content)
        if response.status_code != 200:
            book.stats[f"{kind}_failed"] += 1
            logger.error("sluice refused a lease %s: HTTP %s %s", kind, response.status_code,
                         response.text[:200])
            return
        book.answered(response.json(), kind=kind)

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

    async def _post(self, path: str, body: dict | bytes, *,
                    read_timeout: float | None = None) -> Reply:
        """Sent with retries; after the last, the breaker hears that Sluice is unreachable.
        A call that declared its own `read_timeout` (one Sluice may hold, as its admission
        queue does) and got no answer in it is the exception: the request reached Sluice and
        waited there, which says nothing about Sluice being down; it is neither retried (it
        may still be waiting) nor counted as a failure."""
        if self.breaker.open:
            raise SluiceUnavailable("Sluice could not be reached a moment ago (probing)")
        last: Exception | None = None
        data = body if isinstance(body, bytes) else orjson.dumps(body)
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
        """Queue one event; never waits (safe to call from a response's cleanup). A lease the
        client still holds for it is released now."""
        body = event.as_json() if isinstance(event, UsageEvent) else dict(event)
        if self.leases is not None and body.get("reservation_id") in self.leases:
            self.release(body["reservation_id"])
        self._pending.append(body)
        if len(self._pending) >= self.batch_size:
            self._full.set()

    def flush_soon(self) -> None:
        """Wake the background sender now (it sends what is queued, then replays the spool)."""
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
                if self.on_usage_handled is not None:
                    self.on_usage_handled(batch)
            await self._replay()

    async def close(self) -> None:
        if self._lease_tasks:
            heartbeat, releaser = self._lease_tasks
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            # The release task sends what is queued, then stops.
            self._leases_closing = True
            self._release_urgent.set()
            self._release_wake.set()
            await releaser
            self._lease_tasks = []
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
        if retry:  # (a thread hop for nothing is the common case's cost otherwise)
            await asyncio.to_thread(self.spool.append, retry)
        if dead:
            await asyncio.to_thread(self.spool.append, dead, dead=True)
        return True
