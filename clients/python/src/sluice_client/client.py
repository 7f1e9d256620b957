"""SluiceClient: authorize, report_usage with background batching, and a disk spool."""

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

import httpx

from sluice_client.leases import (
    ASK_AGAIN,
    HEARTBEAT_PATH,
    RELEASE_PATH,
    RELEASE_WINDOW,
    Lease,
    LeaseBook,
    process_id,
)
from sluice_client.spool import Spool

logger = logging.getLogger("sluice_client")
MAX_BATCH = 1000
# Rejections worth sending again later (Sluice could not attribute the event just then).
RETRYABLE_REJECTIONS = {"attribution_unavailable"}


class SluiceUnavailable(Exception):
    """Sluice could not be reached (after retries). `status_code`: the last HTTP status it
    answered, None when it did not answer at all."""

    def __init__(self, message: str, *, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True)
class AuthorizeResult:
    allowed: bool
    status_code: int
    reservation_id: str | None = None
    org: int | None = None
    reserved_tokens: int = 0
    headers: dict = field(default_factory=dict)
    error_code: str | None = None
    message: str | None = None
    retry_after_ms: int | None = None
    limiter: str = "redis"
    # The pool that serves the request ({"id", "model", "region", "tier"}): forward it there.
    pool: dict | None = None
    # The tier that serves it, "priority" (fast) or "default" (standard): return it to the
    # caller in the response's service_tier.
    service_tier: str | None = None
    reserved_input_tokens: int = 0
    reserved_output_tokens: int = 0
    # On refusals: False when sending the same request again cannot help soon (also the
    # x-should-retry header, to forward); which limit refused ("org" or "key") and, for TPS
    # and pool capacity, which tokens ran out ("input" or "output").
    retryable: bool | None = None
    scope: str | None = None
    limit: str | None = None
    # With the headers: the tokens/s refilling the bucket the x-ratelimit-*-tokens headers
    # describe (per-minute headers read 60 x this); None from a Sluice that does not say it.
    tokens_refill_tps: int | None = None
    # The lease an admitted request holds when the client asked for one (hook contract §1).
    lease: Lease | None = None
    # The admission queue (queue_threshold_ms): the budget the pool allowed, how long the
    # request waited (admitted or timed out), and on a refusal the ETA it was told.
    queue_budget_ms: int | None = None
    queued_ms: int | None = None
    queue_eta_ms: int | None = None

    @classmethod
    def from_response(cls, response: httpx.Response) -> "AuthorizeResult":
        body = response.json()
        error = body.get("error") or {}
        return cls(allowed=bool(body.get("allowed")), status_code=response.status_code,
                   reservation_id=body.get("reservation_id"), org=body.get("org"),
                   reserved_tokens=body.get("reserved_tokens", 0),
                   headers=body.get("headers", {}), error_code=error.get("code"),
                   message=error.get("message"), retry_after_ms=error.get("retry_after_ms"),
                   limiter=body.get("limiter", "redis"), pool=body.get("pool"),
                   service_tier=body.get("service_tier"),
                   reserved_input_tokens=body.get("reserved_input_tokens", 0),
                   reserved_output_tokens=body.get("reserved_output_tokens", 0),
                   retryable=error.get("retryable"), scope=error.get("scope"),
                   limit=error.get("limit"), tokens_refill_tps=body.get("tokens_refill_tps"),
                   lease=Lease.from_answer(body.get("lease")),
                   queue_budget_ms=body.get("queue_budget_ms"), queued_ms=body.get("queued_ms"),
                   queue_eta_ms=error.get("queue_eta_ms"))


@dataclass(frozen=True)
class UsageEvent:
    request_id: str
    input_tokens: int
    output_tokens: int
    status: str  # completed, failed, cancelled, interrupted (a dead gateway's, from its spool)
    started_at: datetime
    finished_at: datetime
    first_token_at: datetime | None = None
    reservation_id: str | None = None
    # Of input_tokens, those the upstream served from its prompt cache (OpenAI:
    # usage.prompt_tokens_details.cached_tokens).
    cached_input_tokens: int = 0
    # How long it waited in Sluice's admission queue (AuthorizeResult.queued_ms), if it did.
    queued_ms: int | None = None

    def as_json(self) -> dict:
        body = {"request_id": self.request_id, "input_tokens": self.input_tokens,
                "cached_input_tokens": self.cached_input_tokens,
                "output_tokens": self.output_tokens, "status": self.status,
                "started_at": self.started_at.isoformat(),
                "first_token_at": self.first_token_at.isoformat() if self.first_token_at
                else None,
                "finished_at": self.finished_at.isoformat()}
        if self.queued_ms is not None:
            body["queued_ms"] = self.queued_ms
        if self.reservation_id:
            body["reservation_id"] = self.reservation_id
        return body


def authorize_body(*, request_id: str, api_key: str, model: str, input_tokens: int,
                   max_output_tokens: int | None, region: str | None, dry_run: bool,
                   service_tier: str | None, lease: bool = False,
                   queue_threshold_ms: int | None = None) -> dict:
    """The authorize request's JSON (both clients): optional fields only when given."""
    body = {"request_id": request_id, "api_key": api_key, "model": model,
            "input_tokens": input_tokens, "dry_run": dry_run}
    if lease and not dry_run:
        body["lease"], body["gateway_process"] = True, process_id()
    if max_output_tokens is not None:
        body["max_output_tokens"] = max_output_tokens
    if region:
        body["region"] = region
    if service_tier:
        body["service_tier"] = service_tier
    if queue_threshold_ms is not None:
        body["queue_threshold_ms"] = queue_threshold_ms
    return body


def queue_read_timeout(timeout: float, queue_threshold_ms: object) -> float:
    """The read timeout of an authorize that may wait in Sluice's admission queue: the wait
    budget on top of the usual timeout, so that waiting is never taken for Sluice being down
    (the breaker counts only calls that got no answer)."""
    if type(queue_threshold_ms) is int and queue_threshold_ms > 0:
        return timeout + queue_threshold_ms / 1000
    return timeout


class SluiceClient:
    def __init__(self, base_url: str, *, token: str, spool_path: str, timeout: float = 2.0,
                 retries: int = 2, batch_size: int = 500, flush_interval: float = 1.0,
                 transport: httpx.BaseTransport | None = None, leases: bool = False,
                 heartbeat_interval: float | None = None,
                 release_window: float = RELEASE_WINDOW, on_lease_refused=None):
        """`leases`: ask for leases (hook contract §1; see sluice_client/leases.py).
        `heartbeat_interval`: seconds between heartbeats, None for the interval Sluice
        names. `on_lease_refused(kind, lease_id, code)`: called for each lease a heartbeat
        or release refused."""
        self.base_url = base_url.rstrip("/")
        self.retries, self.batch_size = retries, min(batch_size, MAX_BATCH)
        self.flush_interval = flush_interval
        self.spool = Spool(spool_path)
        self._timeout = timeout
        self._http = httpx.Client(timeout=timeout, transport=transport,
                                  headers={"Authorization": f"Bearer {token}"})
        self._queue: queue.Queue[dict] = queue.Queue()
        self._send_lock = threading.Lock()
        self._stop = threading.Event()
        self._split_budget = 0  # requests a split may still spend (_deliver_batch sets it)
        self._worker = threading.Thread(target=self._run, name="sluice-usage", daemon=True)
        self._worker.start()
        self.leases = LeaseBook(on_refused=on_lease_refused) if leases else None
        self._heartbeat_interval, self._release_window = heartbeat_interval, release_window
        self._lease_cv = threading.Condition()
        self._releases_taken = self._releases_done = 0  # release batches taken / answered
        self._release_urgent = False
        self._lease_threads: list[threading.Thread] = []

    # -- authorize ---------------------------------------------------------------------------

    def authorize(self, *, request_id: str, api_key: str, model: str, input_tokens: int,
                  max_output_tokens: int | None = None, region: str | None = None,
                  dry_run: bool = False, service_tier: str | None = None,
                  queue_threshold_ms: int | None = None) -> AuthorizeResult:
        """`max_output_tokens` None: Sluice reserves its output estimate alone. `service_tier`
        None: the server's default (auto: the key's default tier, else fast, spilling to
        standard); "priority" or "default" as the caller asked. `queue_threshold_ms`: how long
        the request may wait for capacity (0 or 50-20,000; None: the key's or org's default);
        the read timeout grows by it. A retry (same request_id) keeps its place in the queue."""
        lease = self.leases is not None and not dry_run
        body = authorize_body(request_id=request_id, api_key=api_key, model=model,
                              input_tokens=input_tokens, max_output_tokens=max_output_tokens,
                              region=region, dry_run=dry_run, service_tier=service_tier,
                              lease=lease, queue_threshold_ms=queue_threshold_ms)
        read = queue_read_timeout(self._timeout, queue_threshold_ms)
        timeout = (httpx.USE_CLIENT_DEFAULT if read == self._timeout
                   else httpx.Timeout(self._timeout, read=read))
        # Releases queued or on their way may free the slot this request needs: they leave at
        # once (no gathering). Near its concurrency limit (as the key's last answer said) the
        # request waits for them; a concurrency refusal is asked again once the releases
        # pending then are answered (a few times at most: streams keep ending meanwhile).
        # Nothing waits when no release is pending.
        pending = self._releases_pending() if lease else 0
        if pending and self.leases.near_limit(api_key):
            self._releases_sent(pending)
            pending = self._releases_pending()
        result = AuthorizeResult.from_response(
            self._post("/api/gateway/v1/authorize", body, timeout=timeout))
        for _ in range(ASK_AGAIN):
            if not pending or result.error_code != "concurrency_exceeded":
                break
            self._releases_sent(pending)
            self.leases.stats["authorize_asked_again"] += 1
            pending = self._releases_pending()
            result = AuthorizeResult.from_response(
                self._post("/api/gateway/v1/authorize", body, timeout=timeout))
        if lease:
            self.leases.answered_authorize(api_key, result)
        if lease and result.allowed and result.lease is not None:
            self.leases.hold(result.lease, bound=result.reserved_output_tokens)
            self._lease_threads_start()
        return result

    # -- leases ------------------------------------------------------------------------------

    def lease_progress(self, lease_id: str, delivered_output_tokens: int) -> None:
        """The request's output tokens delivered so far (the next heartbeat carries it)."""
        if self.leases is not None:
            self.leases.progress(lease_id, delivered_output_tokens)

    def release(self, lease_id: str, delivered_output_tokens: int | None = None) -> None:
        """The request's stream ended: stop renewing its lease and free its slot now (one
        call for the releases of the next few milliseconds). Never waits."""
        if self.leases is not None and self.leases.release(lease_id, delivered_output_tokens):
            with self._lease_cv:
                self._lease_cv.notify_all()

    def _lease_threads_start(self) -> None:
        if self._lease_threads:
            return
        with self._lease_cv:
            if self._lease_threads:
                return
            self._lease_threads = [
                threading.Thread(target=self._heartbeat_run, name="sluice-heartbeat",
                                 daemon=True),
                threading.Thread(target=self._release_run, name="sluice-release", daemon=True)]
            for t in self._lease_threads:
                t.start()

    def _heartbeat_run(self) -> None:
        book = self.leases
        while not self._stop.wait(self._heartbeat_interval or book.interval):
            try:
                self.heartbeat()
            except Exception:  # the heartbeat must survive anything
                logger.exception("sluice heartbeat failed")

    def heartbeat(self) -> None:
        """Renew every lease held now, with its progress: what the heartbeat thread does every
        interval (one call, or one per 1,000 leases). Refused leases are dropped."""
        book = self.leases
        bodies = book.renewals(process_id())
        if bodies:
            book.stats["heartbeats"] += 1
        for body in bodies:
            self._lease_call(HEARTBEAT_PATH, body, kind="heartbeat")

    def _lease_call(self, path: str, body: dict, *, kind: str) -> None:
        book = self.leases
        book.stats[f"{kind}_calls"] += 1
        try:
            response = self._post(path, body)
        except SluiceUnavailable as exc:
            book.stats[f"{kind}_failed"] += 1
            logger.warning("sluice lease %s failed: %s", kind, exc)
            return
        if response.status_code != 200:
            book.stats[f"{kind}_failed"] += 1
            logger.error("sluice refused a lease %s: HTTP %s %s", kind, response.status_code,
                         response.text[:200])
            return
        book.answered(response.json(), kind=kind)

    def _release_run(self) -> None:
        cv, book = self._lease_cv, self.leases
        while True:
            with cv:
                while not book.releasing and not self._stop.is_set():
                    cv.wait()
                if not book.releasing:
                    return  # closing, nothing left
                # Gather the releases of streams ending together, unless an authorize waits.
                deadline = time.monotonic() + self._release_window
                while not self._release_urgent and not self._stop.is_set() and (
                        left := deadline - time.monotonic()) > 0:
                    cv.wait(left)
                self._release_urgent = False
                bodies = book.releases_take(process_id())
                self._releases_taken += 1
                batch = self._releases_taken
            try:
                for body in bodies:
                    self._lease_call(RELEASE_PATH, body, kind="release")
            except Exception:
                logger.exception("sluice lease release failed")
            finally:
                with cv:
                    self._releases_done = batch
                    cv.notify_all()

    def _releases_pending(self) -> int:
        """The release batch that carries every release queued so far (0: none pending), sent
        at once."""
        if not self._lease_threads:
            return 0
        with self._lease_cv:
            target = self._releases_taken + (1 if self.leases.releasing else 0)
            if self._releases_done >= target:
                return 0
            if self.leases.releasing:
                self._release_urgent = True
                self._lease_cv.notify_all()
            return target

    def _releases_sent(self, target: int) -> None:
        """Until release batch `target` is answered (at most the calls' own timeout)."""
        with self._lease_cv:
            self._lease_cv.wait_for(
                lambda: self._releases_done >= target or self._stop.is_set(),
                timeout=(self._http.timeout.read or 5.0) * (self.retries + 1))

    def _post(self, path: str, body: dict, timeout: object = httpx.USE_CLIENT_DEFAULT
              ) -> httpx.Response:
        """POST, retrying network errors and 5xx with the same body (same request_id): the
        endpoints are idempotent. A 503 that is a decision (limiter_unavailable) is final."""
        last: Exception | None = None
        status_code = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(0.05 * 2 ** attempt, 1.0))
            try:
                response = self._http.post(self.base_url + path, json=body, timeout=timeout)
            except httpx.TransportError as exc:
                last, status_code = exc, None
                continue
            if response.status_code < 500 or _is_decision(response):
                return response
            status_code = response.status_code
            last = SluiceUnavailable(f"HTTP {response.status_code}", status_code=status_code)
        raise SluiceUnavailable(str(last), status_code=status_code) from last

    # -- usage -------------------------------------------------------------------------------

    def report_usage(self, event: UsageEvent | dict) -> None:
        """Queue the event. A lease the process still holds for it is released now."""
        body = event.as_json() if isinstance(event, UsageEvent) else dict(event)
        if self.leases is not None and body.get("reservation_id") in self.leases:
            self.release(body["reservation_id"])
        self._queue.put(body)

    def flush(self) -> None:
        """Send everything queued, then replay the spool. Returns when both were tried."""
        with self._send_lock:
            self._send_queued()
            self._replay()

    def close(self) -> None:
        self._stop.set()
        with self._lease_cv:
            self._lease_cv.notify_all()
        for t in [self._worker, *self._lease_threads]:
            t.join()
        if self.leases is not None:  # releases queued after the release thread left
            for body in self.leases.releases_take(process_id()):
                self._lease_call(RELEASE_PATH, body, kind="release")
        self.flush()
        self._http.close()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval):
            try:
                self.flush()
            except Exception:  # the worker must survive anything; the spool keeps the events
                logger.exception("sluice usage flush failed")

    def _drain(self) -> list[dict]:
        events = []
        while len(events) < self.batch_size:
            try:
                events.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return events

    @property
    def dead_letter_path(self) -> str:
        """Where the events Sluice refused for good go: JSON lines, each event with the
        `sluice_error` ({"code", "message"}) it was refused with."""
        return str(self.spool.dead)

    def _send_queued(self) -> None:
        while batch := self._drain():
            self._settle(self._deliver_batch(batch))

    def _replay(self) -> None:
        spooled = self.spool.take()
        if not spooled:
            return
        undelivered = []
        for i in range(0, len(spooled), self.batch_size):
            batch = spooled[i:i + self.batch_size]
            if undelivered:  # Sluice is down (or failing) again: keep the rest for later
                undelivered.extend(batch)
                continue
            outcome = self._deliver_batch(batch)
            self._settle(outcome, spool=False)
            if not outcome.answered:
                undelivered.extend(outcome.keep + outcome.suspects)
            else:
                undelivered.extend(outcome.keep)
        self.spool.append(undelivered)
        self.spool.taken()

    def _deliver_batch(self, batch: list[dict]) -> "_Outcome":
        self._split_budget = 2 * len(batch).bit_length() + 2
        return self._deliver(batch)

    def _settle(self, outcome: "_Outcome", *, spool: bool = True) -> None:
        """Spool what to send again; dead-letter the events Sluice failed on alone, but only
        when it answered other events meanwhile (else Sluice itself is failing: keep them)."""
        if outcome.answered:
            self._dead(outcome.suspects, {"code": "server_error", "message": "Sluice failed "
                                          "on this event alone (HTTP 500 after retries)."})
        if spool:
            self.spool.append(outcome.keep + ([] if outcome.answered else outcome.suspects))

    def _deliver(self, batch: list[dict]) -> "_Outcome":
        """Send a batch. What Sluice refuses for good, event by event, goes to the dead-letter
        file and never holds back the others: a 400 names its bad events, and a batch Sluice
        fails on (a 500 after retries, or too large) is split until what fails is alone."""
        try:
            response = self._post("/api/gateway/v1/usage", {"events": batch})
        except SluiceUnavailable as exc:
            if exc.status_code != 500:
                return _Outcome(keep=batch)  # unreachable, or a proxy says so (502, 503, 504)
            return self._split(batch)
        if response.status_code == 413:
            return self._split(batch)
        if response.status_code == 400:
            return self._refused(batch, response)
        if response.status_code != 200:
            return _Outcome(keep=batch)  # 401 (the gateway token), 429...: wait or a person
        retry = []
        for event, result in zip(batch, response.json()["results"], strict=True):
            if result["result"] == "rejected":
                error = result.get("error") or {}
                if error.get("code") in RETRYABLE_REJECTIONS:
                    retry.append(event)
                else:
                    self._dead([event], error)
        return _Outcome(keep=retry, answered=True)

    def _split(self, batch: list[dict]) -> "_Outcome":
        """Halves, until the events Sluice fails on are alone (`suspects`). Two halves that both
        fail whole are kept (Sluice may be failing on everything), and a split spends at most
        `_split_budget` requests: enough to find one bad event in a batch (two per halving),
        never a request per event when nothing passes."""
        if len(batch) == 1:
            return _Outcome(suspects=batch)
        if self._split_budget <= 0:
            return _Outcome(keep=batch)
        self._split_budget -= 2
        half = len(batch) // 2
        first, second = self._deliver(batch[:half]), self._deliver(batch[half:])
        if not (first.answered or second.answered):
            return _Outcome(keep=batch)
        return _Outcome(keep=first.keep + second.keep, suspects=first.suspects + second.suspects,
                        answered=True)

    def _refused(self, batch: list[dict], response: httpx.Response) -> "_Outcome":
        """A 400: the events it names go to the dead-letter file, the others again to Sluice.
        One it cannot place (the whole body refused) sends the batch there."""
        try:
            error = response.json()["error"]
        except (ValueError, KeyError, TypeError):
            error = {"code": "malformed_request", "message": response.text[:200]}
        named = (error.get("fields") or {}).get("events")
        bad = {int(i) for i in named if i.isdigit() and int(i) < len(batch)} \
            if isinstance(named, dict) else set()
        if not bad:
            self._dead(batch, error)
            return _Outcome(answered=True)
        for i in sorted(bad):
            self._dead([batch[i]], {"code": error.get("code"), "message": error.get("message"),
                                    "fields": named[str(i)]})
        rest = [e for i, e in enumerate(batch) if i not in bad]
        outcome = self._deliver(rest) if rest else _Outcome()
        return _Outcome(keep=outcome.keep, suspects=outcome.suspects, answered=True)

    def _dead(self, events: list[dict], error: dict) -> None:
        self.spool.append([{**e, "sluice_error": error} for e in events], dead=True)
        for e in events:
            logger.error("sluice refused usage event %s (%s): moved to %s", e.get("request_id"),
                         error.get("code"), self.spool.dead)


@dataclass
class _Outcome:
    """What became of a batch: events to send again later (`keep`), events Sluice failed on
    alone (`suspects`), and whether Sluice answered any of it (`answered`)."""
    keep: list = field(default_factory=list)
    suspects: list = field(default_factory=list)
    answered: bool = False


def _is_decision(response: httpx.Response) -> bool:
    try:
        return response.json().get("error", {}).get("code") == "limiter_unavailable"
    except ValueError:
        return False
