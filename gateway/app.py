"""The reference gateway's ASGI application (plain ASGI; served by uvicorn: `python -m gateway`).

POST /v1/chat/completions  admitted by Sluice's hook, forwarded to the pool's upstream,
                           streamed back (or not), metered, reported in batches
POST /v1/responses         the same admission and metering, passed through to the upstream
GET  /v1/models            the models the caller's organization may use
GET  /metrics              Prometheus (OpenTelemetry GenAI names, gateway/metrics.py)
GET  /healthz

Every other path or method answers 404 / 405 in OpenAI's error shape. Stateless: every
decision is Sluice's, every count is in Sluice; run as many processes as the traffic needs
behind any load balancer.

A request is checked in the order that costs the least to refuse: the key's presence from the
headers, a key Sluice refused a moment ago, the body's declared length (413), then the body
read under the same limit. A body larger than `KEY_CHECK_BODY_BYTES` (or of unknown length)
from a key this process has not seen admitted is read only after Sluice has said the key is
good (the dry run /v1/models makes, cached per key), so an invalid key never makes the
gateway read a large body.
"""

import asyncio
import hashlib
import logging
import os
import time
import uuid
from urllib.parse import urlsplit

import httpx
import orjson
from sluice_client import AuthorizeResult, SluiceUnavailable
from sluice_client.aio import AsyncSluiceClient
from sluice_client.http1 import Http1Pool, HttpError, Response, header_lines

from gateway.asgi import Answer, BodyTooLarge, ClientGone, ClientWatched, Request, json_answer
from gateway.attempt import Attempt, now
from gateway.config import GatewayConfig, Upstream
from gateway.errors import error_response
from gateway.estimate import chat_input_tokens, max_output_tokens, responses_input_tokens
from gateway.headers import answer_headers
from gateway.leases import GatewayLeases
from gateway.metrics import GatewayMetrics
from gateway.relay import StreamRelay, Ticker
from gateway.spools import spool_claim

# Refusals that still mean "this org may use this model" (for /v1/models).
USABLE_REFUSALS = {"tps_exceeded", "concurrency_exceeded", "pool_capacity_exhausted",
                   "daily_quota_exhausted", "spend_cap_reached", "limiter_unavailable"}
# Refusals about the key or its organization. `invalid_api_key` may also mean "this key has
# no access to this pool": it condemns a key only when every model refuses it.
KEY_REFUSALS = {"invalid_api_key", "org_not_active", "payment_required"}
ORG_REFUSALS = {"org_not_active", "payment_required"}
# How long a verdict about a key holds (its models, admitted, refused): a refused key is
# refused again without its body being read, an admitted key's large bodies are read.
KEY_VERDICT_SECONDS = 5.0
KEY_VERDICTS_MAX = 50_000
# Bodies up to this size are read before Sluice has seen the key (the common case costs no
# extra round trip); larger ones only from keys Sluice admitted.
KEY_CHECK_BODY_BYTES = 256 * 1024
# Sluice's body fields that are Sluice's business, not the upstream's.
SLUICE_FIELDS = ("service_tier",)
SERVICE_TIERS = {"auto", "default", "priority"}
OTHER_MODEL = "other"  # the metrics' model label for a model no pool serves
# The upstream's answers that refuse the gateway's own credential (the caller's key never
# reaches the upstream): the operator's problem, never passed to the caller as theirs.
UPSTREAM_AUTH_REFUSALS = (401, 403)
# At most one log line per upstream in this many seconds about its refused credential.
UPSTREAM_AUTH_LOG_SECONDS = 60.0
# The metrics' outcome of each failure code (a few labels, not one per code).
FAILURE_OUTCOMES = {"upstream_unreachable": "upstream_error",
                    "upstream_unconfigured": "upstream_error",
                    "upstream_auth_failed": "upstream_error"}

logger = logging.getLogger("gateway")


def key_digest(api_key: str) -> bytes:
    """What the per-key caches hold instead of the key itself."""
    return hashlib.blake2b(api_key.encode(), digest_size=16).digest()


class KeyVerdicts:
    """Per key, for a few seconds: the models /v1/models lists (or the refusal it got), and
    whether the key was admitted (its large bodies may be read) or refused."""

    def __init__(self, *, seconds: float = KEY_VERDICT_SECONDS):
        self.seconds = seconds
        self._admitted: dict[bytes, float] = {}
        self._refused: dict[bytes, tuple[float, AuthorizeResult]] = {}
        self._models: dict[bytes, tuple[float, list[str] | AuthorizeResult]] = {}

    def admitted(self, digest: bytes) -> bool:
        return self._admitted.get(digest, 0.0) > time.monotonic()

    def refusal(self, digest: bytes) -> AuthorizeResult | None:
        found = self._refused.get(digest)
        return found[1] if found and found[0] > time.monotonic() else None

    def models(self, digest: bytes) -> list[str] | AuthorizeResult | None:
        found = self._models.get(digest)
        return found[1] if found and found[0] > time.monotonic() else None

    def note(self, digest: bytes, grant: AuthorizeResult) -> None:
        """What one of Sluice's answers (about one model) says about the key."""
        if grant.error_code in ORG_REFUSALS:
            self.note_refused(digest, grant)
        elif grant.error_code not in KEY_REFUSALS and not self.admitted(digest):
            self._put(self._admitted, digest, None)

    def note_refused(self, digest: bytes, grant: AuthorizeResult) -> None:
        self._put(self._refused, digest, grant)

    def note_models(self, digest: bytes, verdict: list[str] | AuthorizeResult) -> None:
        self._put(self._models, digest, verdict)

    def _put(self, table: dict, digest: bytes, value) -> None:
        if len(table) >= KEY_VERDICTS_MAX:
            table.clear()  # bounded by clearing: a verdict is only a few seconds' shortcut
        expires = time.monotonic() + self.seconds
        table[digest] = expires if value is None else (expires, value)


class Gateway:
    def __init__(self, config: GatewayConfig, *,
                 sluice_transport: httpx.AsyncBaseTransport | None = None):
        self.config = config
        self.metrics = GatewayMetrics()
        self.sluice_transport = sluice_transport
        self.sluice: AsyncSluiceClient | None = None
        self._upstream_pools: dict[str, Http1Pool] = {}
        # per upstream: its pool, base path and encoded header lines
        self._upstream_routes: dict[Upstream, tuple[Http1Pool, str, bytes]] = {}
        self._auth_logged: dict[str, float] = {}  # upstream URL -> when its refusal was logged
        self._pool_upstreams: dict[tuple, Upstream | None] = {}  # Sluice's pool -> upstream
        self.keys = KeyVerdicts()
        self._models: tuple[float, list[str]] | None = None
        self.served_models: set[str] = set()  # the models pools were seen serving
        # Admitted attempts not finished yet, by request id: what a heartbeat renewing their
        # reservations would carry (each one's progress is its delivered_tokens).
        self.in_flight: dict[str, Attempt] = {}
        self.leases = GatewayLeases(self, interval=config.progress_interval) if config.leases \
            else None
        self._spool_lock = None
        self.ticker = (Ticker(config.stream_coalesce_seconds)
                       if config.stream_coalesce_seconds else None)
        self.routes = {
            "/v1/chat/completions": ("POST", self.chat_completions),
            "/v1/responses": ("POST", self.responses),
            "/v1/models": ("GET", self.models),
            "/metrics": ("GET", self.metrics_page),
            "/healthz": ("GET", self.healthz),
        }

    # --- ASGI --------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            request = Request(scope, receive)
            answer = await self.dispatch(request)
            if answer is not None:  # None: the client left, nobody to answer
                await answer(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def dispatch(self, request: Request):
        route = self.routes.get(request.path)
        if route is None:
            return error_response(status=404, code="unknown_url",
                                  message=f"Unknown request URL: {request.method} "
                                          f"{request.path}.",
                                  headers=_unread_body_headers(request))
        if request.method != route[0]:
            return error_response(status=405, code="method_not_allowed",
                                  message=f"{request.path} takes {route[0]}, not "
                                          f"{request.method}.",
                                  headers={"allow": route[0], **_unread_body_headers(request)})
        return await route[1](request)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        spool, self._spool_lock = spool_claim(self.config.spool_path
                                              or os.path.join(".gateway", "usage.jsonl"))
        leases = self.leases
        recovered = leases.start(spool) if leases else 0
        self.sluice = AsyncSluiceClient(
            self.config.sluice_url, token=self.config.gateway_token, spool_path=spool,
            transport=self.sluice_transport, flush_interval=self.config.usage_flush_interval,
            max_connections=200, leases=leases is not None,
            on_lease_refused=self.metrics.lease_refused if leases else None,
            on_usage_handled=leases.usage_handled if leases else None)
        await self.sluice.start()
        if recovered:
            self.sluice.flush_soon()  # a dead process's requests: bill them, free their slots

    def _upstream_pool(self, base_url: str) -> tuple[Http1Pool, str]:
        """The keep-alive pool of an upstream's origin, and its base path. The same small
        HTTP/1.1 client as the Sluice client's: aiohttp's cost ~110 µs of CPU per call, this
        one ~40 µs."""
        parts = urlsplit(base_url)
        origin = f"{parts.scheme}://{parts.netloc}"
        pool = self._upstream_pools.get(origin)
        if pool is None:
            # connect: waiting for a free connection, then opening one; read: between two
            # reads of the answer (a stream's tokens), not the whole answer.
            pool = self._upstream_pools[origin] = Http1Pool(
                origin, limit=1_000, connect_timeout=self.config.connect_timeout,
                read_timeout=self.config.upstream_timeout)
        return pool, parts.path

    async def shutdown(self) -> None:
        try:
            for pool in self._upstream_pools.values():
                await pool.close()
            if self.leases:
                await self.leases.stop()
            await self.sluice.close()  # flushes the usage still queued
            if self.leases:
                self.leases.close()
        finally:
            self._spool_lock.close()  # the next process to start may take this spool over

    # --- the endpoints -----------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Answer | StreamRelay | None:
        return await self._proxy(request, operation="chat", path="/chat/completions",
                                 estimate=chat_input_tokens)

    async def responses(self, request: Request) -> Answer | StreamRelay | None:
        return await self._proxy(request, operation="responses", path="/responses",
                                 estimate=responses_input_tokens)

    async def models(self, request: Request) -> Answer:
        api_key = _bearer(request)
        if api_key is None:
            return _no_key()
        verdict = await self._key_models(api_key)
        if verdict is None:
            return _sluice_down({"x-should-retry": "true"})
        if isinstance(verdict, AuthorizeResult):
            return self._refusal(verdict, {})
        return json_answer({"object": "list", "data": [
            {"id": model, "object": "model", "created": 0, "owned_by": "sluice"}
            for model in verdict]})

    async def healthz(self, request: Request) -> Answer:
        return json_answer({"status": "ok", "usage_pending": self.sluice.pending})

    async def metrics_page(self, request: Request) -> Answer:
        body, media_type = self.metrics.exposition()
        return Answer(body, media_type=media_type)

    # --- one attempt -------------------------------------------------------------------------
    async def _proxy(self, request: Request, *, operation: str, path: str,
                     estimate) -> Answer | StreamRelay | None:
        api_key = _bearer(request)
        if api_key is None:
            return _no_key(_unread_body_headers(request))
        digest = key_digest(api_key)
        refused = self.keys.refusal(digest)
        if refused is not None:
            return self._refusal(refused, _unread_body_headers(request))
        try:
            declared = request.declared_length()
            if declared is not None and declared > self.config.max_body_bytes:
                raise BodyTooLarge
            if (declared is None or declared > KEY_CHECK_BODY_BYTES) and not (
                    self.keys.admitted(digest)):
                verdict = await self._key_models(api_key)
                if isinstance(verdict, AuthorizeResult):
                    return self._refusal(verdict, _unread_body_headers(request))
                if verdict is None:
                    return _sluice_down({"x-should-retry": "true",
                                         **_unread_body_headers(request)})
            raw = await request.body(limit=self.config.max_body_bytes)
        except BodyTooLarge:
            return _too_large(self.config.max_body_bytes)
        except ClientGone:
            return None
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return error_response(status=400, message="The body is not valid JSON.",
                                  code="invalid_json")
        problem = _body_problem(body)
        if problem:
            return error_response(status=400, message=problem[1], code="invalid_value",
                                  param=problem[0])
        attempt = Attempt(operation=operation, model=body["model"],
                          input_estimate=estimate(body))
        ids = {"x-request-id": attempt.request_id}
        asked = time.perf_counter()
        grant = await self._authorize_or_none(
            request_id=attempt.request_id, api_key=api_key, model=attempt.model,
            input_tokens=attempt.input_estimate, max_output_tokens=max_output_tokens(body),
            service_tier=body.get("service_tier"),
            queue_threshold_ms=_queue_threshold(request.headers.get("queue_threshold")))
        self.metrics.admission.observe(time.perf_counter() - asked)
        if grant is None:
            self._observe(attempt, "refused")
            return _sluice_down({**ids, "x-should-retry": "true"})
        self.keys.note(digest, grant)
        if not grant.allowed:
            self._observe(attempt, "refused")
            return self._refusal(grant, ids)
        attempt.grant = grant
        self.in_flight[attempt.request_id] = attempt
        if self.leases:
            self.leases.admitted(attempt)
        if grant.pool and grant.pool.get("model"):
            self.served_models.add(grant.pool["model"])
        upstream = self._upstream_of(grant.pool or {})
        if upstream is None:
            return self._upstream_failed(attempt, 502, "upstream_unconfigured",
                                         "No upstream is configured for this pool.", ids)
        forwarded = {k: v for k, v in body.items() if k not in SLUICE_FIELDS}
        stream = bool(body.get("stream"))
        client_wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if stream and operation == "chat":
            # Always ask for the usage chunk: settle needs the exact counts.
            forwarded["stream_options"] = {**(body.get("stream_options") or {}),
                                           "include_usage": True}
        headers = {**answer_headers(grant.headers or {}, grant.tokens_refill_tps), **ids}
        async with ClientWatched(request.scope, request.receive) as watch:
            try:
                response = await self._upstream_send(upstream, path, forwarded, attempt)
                if stream and response.status == 200 and response.headers.get(
                        "content-type", "").startswith("text/event-stream"):
                    return StreamRelay(gateway=self, attempt=attempt, upstream=response,
                                       client_wants_usage=client_wants_usage
                                       or operation != "chat", headers=headers)
                if response.status != 200:
                    return await self._upstream_refused(attempt, upstream, response, ids)
                return await self._whole(attempt, response, headers)
            except TimeoutError:
                return self._upstream_failed(attempt, 504, "upstream_timeout",
                                             "The upstream did not answer in time.", ids)
            except HttpError:
                return self._upstream_failed(attempt, 502, "upstream_unreachable",
                                             "The upstream could not be reached.", ids)
            except asyncio.CancelledError:
                if not watch.gone:
                    raise
                # The client left before its answer: the upstream request was cancelled
                # with this task (its connection closed); nothing reached the client.
                self.attempt_finish(attempt, status="cancelled", outcome="cancelled")
                return None

    async def _whole(self, attempt: Attempt, response: Response,
                     headers: dict) -> Answer:
        try:
            raw = await response.read()
        except TimeoutError:
            return self._upstream_failed(attempt, 504, "upstream_timeout",
                                         "The upstream did not answer in time.", headers)
        except HttpError:
            return self._upstream_failed(attempt, 502, "upstream_error",
                                         "The upstream broke the connection.", headers)
        finally:
            response.release()
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return self._upstream_failed(attempt, 502, "upstream_error",
                                         "The upstream's answer is not JSON.", headers)
        # A whole answer reaches the client at once: its first token comes with its last.
        attempt.first_token()
        attempt.usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
        if attempt.usage is None:
            attempt.delivered_tokens = 0
        if attempt.grant.service_tier and data.get("service_tier") != attempt.grant.service_tier:
            data["service_tier"] = attempt.grant.service_tier
            raw = orjson.dumps(data)
        self.attempt_finish(attempt, status="completed", outcome="completed")
        return Answer(raw, headers=headers)

    def _upstream_of(self, pool: dict) -> Upstream | None:
        """The upstream of Sluice's pool (GatewayConfig.upstream_for), looked up once per
        pool."""
        key = (pool.get("id"), pool.get("model"), pool.get("region"), pool.get("tier"))
        try:
            return self._pool_upstreams[key]
        except KeyError:
            if len(self._pool_upstreams) >= KEY_VERDICTS_MAX:
                self._pool_upstreams.clear()  # pools are few: only odd answers fill it
            found = self._pool_upstreams[key] = self.config.upstream_for(pool)
            return found

    async def _upstream_send(self, upstream: Upstream, path: str, body: dict,
                             attempt: Attempt) -> Response:
        """The upstream's answer once its headers are in; the body is the caller's to read,
        then to release (or close)."""
        route = self._upstream_routes.get(upstream)
        if route is None:  # the same on every request to this upstream: made once
            headers = {"content-type": "application/json"}
            if upstream.api_key:
                headers["authorization"] = f"Bearer {upstream.api_key}"
            route = self._upstream_routes[upstream] = (
                *self._upstream_pool(upstream.base_url), header_lines(headers))
        pool, base, lines = route
        return await pool.request(
            "POST", base + path, body=orjson.dumps(body),
            headers=lines + b"x-request-id: " + attempt.request_id.encode() + b"\r\n")

    async def _upstream_refused(self, attempt: Attempt, upstream: Upstream,
                                response: Response, ids: dict) -> Answer:
        """The upstream answered an error: its 4xx reach the caller as they are (the request
        was bad), its 5xx become a 502, and so does its refusal of the gateway's credential.
        Either way nothing was served."""
        try:
            raw = await response.read()
        except (TimeoutError, HttpError):
            raw = b""
        finally:
            response.release()
        if response.status in UPSTREAM_AUTH_REFUSALS:
            self._upstream_auth_log(upstream, response.status, raw)
            return self._upstream_failed(
                attempt, 502, "upstream_auth_failed",
                f"The upstream refused this gateway's own credential (HTTP "
                f"{response.status}); the gateway's operator must fix it.", ids, retry=False)
        if response.status >= 500:
            return self._upstream_failed(
                attempt, 502, "upstream_error",
                f"The upstream failed (HTTP {response.status}).", ids)
        self.attempt_finish(attempt, status="failed", outcome="failed")
        return Answer(raw, status=response.status, headers=ids,
                      media_type=response.headers.get("content-type",
                                                      "application/json").encode("latin-1"))

    def _upstream_failed(self, attempt: Attempt, status: int, code: str, message: str,
                         headers: dict, *, retry: bool = True) -> Answer:
        self.attempt_finish(attempt, status="failed", outcome=FAILURE_OUTCOMES.get(code, code))
        return error_response(status=status, message=message, code=code,
                              headers={"x-request-id": headers["x-request-id"],
                                       "x-should-retry": "true" if retry else "false"})

    def _upstream_auth_log(self, upstream: Upstream, status: int, raw: bytes) -> None:
        """Tell the operator, once a minute per upstream: every request fails until fixed."""
        at = time.monotonic()
        if at - self._auth_logged.get(upstream.base_url, -UPSTREAM_AUTH_LOG_SECONDS) < (
                UPSTREAM_AUTH_LOG_SECONDS):
            return
        self._auth_logged[upstream.base_url] = at
        logger.error("the upstream %s refused the gateway's credential (HTTP %s: %s); set "
                     "GATEWAY_UPSTREAM_API_KEY (or the api_key in GATEWAY_UPSTREAMS) to a key "
                     "it accepts%s", upstream.base_url, status,
                     raw[:200].decode("utf-8", "replace"),
                     "" if upstream.api_key else " (none is set)")

    def attempt_finish(self, attempt: Attempt, *, status: str, outcome: str) -> None:
        """Queue the attempt's usage (never waits: batches leave in the background)."""
        finished = now()
        self.in_flight.pop(attempt.request_id, None)
        event = attempt.usage_event(status=status, finished_at=finished)
        if attempt.grant is not None:
            body = event.as_json()  # once, for the usage batch and the progress file
            if self.leases:
                self.leases.finished(attempt, body)
            self.sluice.report_usage(body)
        self._observe(attempt, outcome, event=event)

    def stream_sending(self, attempt: Attempt, delivered: int) -> None:
        """The relay is about to write a stream's bytes, `delivered` tokens with them."""
        if self.leases:
            self.leases.sending(attempt, delivered)

    def stream_ending(self, attempt: Attempt, delivered: int) -> None:
        """The relay is about to write a stream's last bytes (done, or an upstream error)."""
        if self.leases:
            self.leases.ending(attempt, delivered)

    def _observe(self, attempt: Attempt, outcome: str, event=None) -> None:
        ttft = decode = None
        if attempt.first_token_clock is not None:
            ttft = attempt.first_token_clock - attempt.started_clock
            decode = time.perf_counter() - attempt.first_token_clock
        # The client's model string is any text: a label only when a pool serves it, so the
        # metrics' cardinality is the fleet's, not the callers'.
        model = attempt.model if attempt.model in self.served_models else OTHER_MODEL
        self.metrics.observe(operation=attempt.operation, model=model, outcome=outcome,
                             duration_s=time.perf_counter() - attempt.started_clock,
                             input_tokens=event.input_tokens if event else 0,
                             output_tokens=event.output_tokens if event else 0,
                             ttft_s=ttft, decode_s=decode)

    # --- Sluice ------------------------------------------------------------------------------
    async def _authorize_or_none(self, **kwargs) -> AuthorizeResult | None:
        if self.config.region:
            kwargs["region"] = self.config.region
        try:
            return await self.sluice.authorize(**kwargs)
        except SluiceUnavailable:
            # Fail closed: without Sluice nobody is metered, and the fast tier is scarce.
            return None

    async def _key_models(self, api_key: str) -> list[str] | AuthorizeResult | None:
        """The models the key's organization may use (one dry-run authorize per model the
        upstreams serve), or the refusal that says the key may use none; None when Sluice
        cannot be reached. Cached per key for KEY_VERDICT_SECONDS."""
        digest = key_digest(api_key)
        known = self.keys.models(digest)
        if known is not None:
            return known
        usable: list[str] = []
        unknown_key: AuthorizeResult | None = None
        for model in await self._upstream_models():
            grant = await self._authorize_or_none(
                request_id=f"models_{uuid.uuid4().hex}", api_key=api_key, model=model,
                input_tokens=0, dry_run=True)
            if grant is None:
                return None
            self.keys.note(digest, grant)
            if grant.error_code in ORG_REFUSALS:
                self.keys.note_models(digest, grant)
                return grant
            if grant.error_code == "invalid_api_key":
                unknown_key = unknown_key or grant
            elif grant.allowed or grant.error_code in USABLE_REFUSALS:
                usable.append(model)
        if not usable and unknown_key is not None:
            self.keys.note_refused(digest, unknown_key)
            self.keys.note_models(digest, unknown_key)
            return unknown_key
        self.keys.note_models(digest, usable)
        return usable

    @staticmethod
    def _refusal(grant: AuthorizeResult, ids: dict) -> Answer:
        headers = answer_headers(grant.headers or {}, grant.tokens_refill_tps)
        if grant.retryable is False:
            headers["x-should-retry"] = "false"
        status, code = grant.status_code, grant.error_code
        if code == "invalid_gateway_token":  # our misconfiguration, not the caller's fault
            status, code = 502, "gateway_misconfigured"
        return error_response(status=status, message=grant.message or "Refused.", code=code,
                              headers={**headers, **ids})

    async def _upstream_models(self) -> list[str]:
        """The models the upstreams serve (asked once a minute)."""
        if self._models and time.monotonic() - self._models[0] < 60:
            return self._models[1]
        found: list[str] = []
        for upstream in {u.base_url: u for u in self.config.upstreams.values()}.values():
            headers = {"authorization": f"Bearer {upstream.api_key}"} if upstream.api_key else {}
            pool, base = self._upstream_pool(upstream.base_url)
            try:
                response = await pool.request("GET", base + "/models", headers=headers)
                try:
                    listed = orjson.loads(await response.read())
                finally:
                    response.release()
                found += [m["id"] for m in listed.get("data", []) if m.get("id") not in found]
            except (TimeoutError, HttpError, ValueError, AttributeError, TypeError):
                continue
        self._models = (time.monotonic(), found)
        self.served_models.update(found)
        return found


def _queue_threshold(header: str | None) -> int | str | None:
    """Cerebras' `queue_threshold` request header (ms) as authorize's queue_threshold_ms:
    Sluice checks it (a value it refuses answers 400 invalid_queue_threshold)."""
    if header is None:
        return None
    text = header.strip()
    return int(text) if text.isdigit() and len(text) <= 9 else text


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def _unread_body_headers(request: Request) -> dict:
    """An answer given before the body was read closes the connection: reading (and
    discarding) the rest of a body nobody wants would cost what the early answer saved."""
    if request.headers.get("content-length", "0") == "0" and (
            "transfer-encoding" not in request.headers):
        return {}
    return {"connection": "close"}


def _no_key(headers: dict | None = None) -> Answer:
    return error_response(status=401, message="Missing API key: send Authorization: Bearer "
                                              "sk_... (your Sluice API key).",
                          code="invalid_api_key",
                          headers={"x-should-retry": "false", **(headers or {})})


def _too_large(limit: int) -> Answer:
    return error_response(status=413, code="request_too_large",
                          message=f"The request body is larger than this gateway accepts "
                                  f"({limit:,} bytes).",
                          headers={"x-should-retry": "false", "connection": "close"})


def _sluice_down(headers: dict) -> Answer:
    return error_response(status=503, message="Sluice, which admits requests, cannot be "
                                              "reached; try again shortly.",
                          code="admission_unavailable",
                          headers={**headers, "retry-after": "1", "retry-after-ms": "1000"})


def _body_problem(body) -> tuple[str | None, str] | None:
    if not isinstance(body, dict):
        return None, "The body must be a JSON object."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model", "model is required."
    tier = body.get("service_tier")
    if tier is not None and tier not in SERVICE_TIERS:
        return "service_tier", "service_tier must be auto, default or priority."
    return None


def create_app(config: GatewayConfig | None = None, **kwargs) -> Gateway:
    return Gateway(config or GatewayConfig.from_env(), **kwargs)
