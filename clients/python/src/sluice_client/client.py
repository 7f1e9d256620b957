"""SluiceClient: authorize, report_usage with background batching, and a disk spool."""

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

import httpx

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
                   limit=error.get("limit"), tokens_refill_tps=body.get("tokens_refill_tps"))


@dataclass(frozen=True)
class UsageEvent:
    request_id: str
    input_tokens: int
    output_tokens: int
    status: str  # completed, failed, cancelled
    started_at: datetime
    finished_at: datetime
    first_token_at: datetime | None = None
    reservation_id: str | None = None
    # Of input_tokens, those the upstream served from its prompt cache (OpenAI:
    # usage.prompt_tokens_details.cached_tokens).
    cached_input_tokens: int = 0

    def as_json(self) -> dict:
        body = {"request_id": self.request_id, "input_tokens": self.input_tokens,
                "cached_input_tokens": self.cached_input_tokens,
                "output_tokens": self.output_tokens, "status": self.status,
                "started_at": self.started_at.isoformat(),
                "first_token_at": self.first_token_at.isoformat() if self.first_token_at
                else None,
                "finished_at": self.finished_at.isoformat()}
        if self.reservation_id:
            body["reservation_id"] = self.reservation_id
        return body


def authorize_body(*, request_id: str, api_key: str, model: str, input_tokens: int,
                   max_output_tokens: int | None, region: str | None, dry_run: bool,
                   service_tier: str | None) -> dict:
    """The authorize request's JSON (both clients): optional fields only when given."""
    body = {"request_id": request_id, "api_key": api_key, "model": model,
            "input_tokens": input_tokens, "dry_run": dry_run}
    if max_output_tokens is not None:
        body["max_output_tokens"] = max_output_tokens
    if region:
        body["region"] = region
    if service_tier:
        body["service_tier"] = service_tier
    return body


class SluiceClient:
    def __init__(self, base_url: str, *, token: str, spool_path: str, timeout: float = 2.0,
                 retries: int = 2, batch_size: int = 500, flush_interval: float = 1.0,
                 transport: httpx.BaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self.retries, self.batch_size = retries, min(batch_size, MAX_BATCH)
        self.flush_interval = flush_interval
        self.spool = Spool(spool_path)
        self._http = httpx.Client(timeout=timeout, transport=transport,
                                  headers={"Authorization": f"Bearer {token}"})
        self._queue: queue.Queue[dict] = queue.Queue()
        self._send_lock = threading.Lock()
        self._stop = threading.Event()
        self._split_budget = 0  # requests a split may still spend (_deliver_batch sets it)
        self._worker = threading.Thread(target=self._run, name="sluice-usage", daemon=True)
        self._worker.start()

    # -- authorize ---------------------------------------------------------------------------

    def authorize(self, *, request_id: str, api_key: str, model: str, input_tokens: int,
                  max_output_tokens: int | None = None, region: str | None = None,
                  dry_run: bool = False, service_tier: str | None = None) -> AuthorizeResult:
        """`max_output_tokens` None: Sluice reserves its output estimate alone. `service_tier`
        None: the server's default (auto: the key's default tier, else fast, spilling to
        standard); "priority" or "default" as the caller asked."""
        body = authorize_body(request_id=request_id, api_key=api_key, model=model,
                              input_tokens=input_tokens, max_output_tokens=max_output_tokens,
                              region=region, dry_run=dry_run, service_tier=service_tier)
        return AuthorizeResult.from_response(self._post("/api/gateway/v1/authorize", body))

    def _post(self, path: str, body: dict) -> httpx.Response:
        """POST, retrying network errors and 5xx with the same body (same request_id): the
        endpoints are idempotent. A 503 that is a decision (limiter_unavailable) is final."""
        last: Exception | None = None
        status_code = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(0.05 * 2 ** attempt, 1.0))
            try:
                response = self._http.post(self.base_url + path, json=body)
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
        self._queue.put(event.as_json() if isinstance(event, UsageEvent) else dict(event))

    def flush(self) -> None:
        """Send everything queued, then replay the spool. Returns when both were tried."""
        with self._send_lock:
            self._send_queued()
            self._replay()

    def close(self) -> None:
        self._stop.set()
        self._worker.join()
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
