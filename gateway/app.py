"""The reference gateway's ASGI application (Starlette; served by uvicorn: `python -m gateway`).

POST /v1/chat/completions  admitted by Sluice's hook, forwarded to the pool's upstream,
                           streamed back (or not), metered, reported in batches
POST /v1/responses         the same admission and metering, passed through to the upstream
GET  /v1/models            the models the caller's organization may use
GET  /metrics              Prometheus (OpenTelemetry GenAI names, gateway/metrics.py)
GET  /healthz

Stateless: every decision is Sluice's, every count is in Sluice; run as many processes as the
traffic needs behind any load balancer.
"""

import contextlib
import os
import time
import uuid

import aiohttp
import httpx
import orjson
from sluice_client import AuthorizeResult, SluiceUnavailable
from sluice_client.aio import AsyncSluiceClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.attempt import Attempt, now
from gateway.config import GatewayConfig, Upstream
from gateway.errors import error_response
from gateway.estimate import chat_input_tokens, max_output_tokens, responses_input_tokens
from gateway.metrics import GatewayMetrics
from gateway.relay import StreamRelay
from gateway.spools import spool_claim

# Refusals that still mean "this org may use this model" (for /v1/models).
USABLE_REFUSALS = {"tps_exceeded", "concurrency_exceeded", "pool_capacity_exhausted",
                   "daily_quota_exhausted", "spend_cap_reached", "limiter_unavailable"}
# Sluice's body fields that are Sluice's business, not the upstream's.
SLUICE_FIELDS = ("service_tier",)
SERVICE_TIERS = {"auto", "default", "priority"}


class Gateway:
    def __init__(self, config: GatewayConfig, *,
                 sluice_transport: httpx.AsyncBaseTransport | None = None):
        self.config = config
        self.metrics = GatewayMetrics()
        self.sluice_transport = sluice_transport
        self.sluice: AsyncSluiceClient | None = None
        self.http: aiohttp.ClientSession | None = None
        self._models: tuple[float, list[str]] | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        spool, spool_lock = spool_claim(self.config.spool_path
                                        or os.path.join(".gateway", "usage.jsonl"))
        self.sluice = AsyncSluiceClient(self.config.sluice_url, token=self.config.gateway_token,
                                        spool_path=spool, transport=self.sluice_transport,
                                        flush_interval=self.config.usage_flush_interval,
                                        max_connections=200)
        await self.sluice.start()
        # One session per process, for every upstream. aiohttp, not httpx: httpx.AsyncClient
        # cost 1.1-3.4 ms of CPU per request against aiohttp's ~0.3 ms (bench/http_clients.py).
        timeout = self.config.upstream_timeout
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1_000, limit_per_host=0),
            # connect: waiting for a pooled connection, then opening one (connect_timeout);
            # sock_read: between two reads of the answer, as httpx's read timeout was.
            timeout=aiohttp.ClientTimeout(total=None, connect=timeout,
                                          sock_connect=self.config.connect_timeout,
                                          sock_read=timeout),
            read_bufsize=2 ** 18)  # a line of SSE (a whole response.completed) up to 512 KiB
        try:
            yield
        finally:
            await self.http.close()
            await self.sluice.close()  # flushes the usage still queued
            spool_lock.close()  # the next process to start may take this spool over

    # --- the endpoints -----------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        return await self._proxy(request, operation="chat", path="/chat/completions",
                                 estimate=chat_input_tokens)

    async def responses(self, request: Request) -> Response:
        return await self._proxy(request, operation="responses", path="/responses",
                                 estimate=responses_input_tokens)

    async def models(self, request: Request) -> Response:
        api_key = _bearer(request)
        if api_key is None:
            return _no_key()
        usable = []
        for model in await self._upstream_models():
            grant = await self._authorize_or_none(
                request_id=f"models_{uuid.uuid4().hex}", api_key=api_key, model=model,
                input_tokens=0, dry_run=True)
            if grant is None:
                return _sluice_down({"x-should-retry": "true"})
            if grant.error_code in ("invalid_api_key", "org_not_active", "payment_required"):
                return self._refusal(grant, {})
            if grant.allowed or grant.error_code in USABLE_REFUSALS:
                usable.append({"id": model, "object": "model", "created": 0,
                               "owned_by": "sluice"})
        return JSONResponse({"object": "list", "data": usable})

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "usage_pending": self.sluice.pending})

    # --- one attempt -------------------------------------------------------------------------
    async def _proxy(self, request: Request, *, operation: str, path: str,
                     estimate) -> Response:
        api_key = _bearer(request)
        if api_key is None:
            return _no_key()
        try:
            body = orjson.loads(await request.body())
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
        grant = await self._authorize_or_none(
            request_id=attempt.request_id, api_key=api_key, model=attempt.model,
            input_tokens=attempt.input_estimate, max_output_tokens=max_output_tokens(body),
            service_tier=body.get("service_tier"))
        if grant is None:
            self._observe(attempt, "refused")
            return _sluice_down({**ids, "x-should-retry": "true"})
        if not grant.allowed:
            self._observe(attempt, "refused")
            return self._refusal(grant, ids)
        attempt.grant = grant
        upstream = self.config.upstream_for(grant.pool or {})
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
        headers = {**{k: str(v) for k, v in (grant.headers or {}).items()}, **ids}
        try:
            response = await self._upstream_send(upstream, path, forwarded, attempt)
        except TimeoutError:  # aiohttp's timeouts are also ClientErrors: first
            return self._upstream_failed(attempt, 504, "upstream_timeout",
                                         "The upstream did not answer in time.", ids)
        except aiohttp.ClientError:
            return self._upstream_failed(attempt, 502, "upstream_unreachable",
                                         "The upstream could not be reached.", ids)
        if response.status != 200:
            return await self._upstream_refused(attempt, response, ids)
        if stream and response.headers.get("content-type", "").startswith("text/event-stream"):
            return StreamRelay(gateway=self, attempt=attempt, upstream=response,
                               client_wants_usage=client_wants_usage or operation != "chat",
                               headers=headers)
        return await self._whole(attempt, response, headers)

    async def _whole(self, attempt: Attempt, response: aiohttp.ClientResponse,
                     headers: dict) -> Response:
        try:
            raw = await response.read()
        except TimeoutError:
            return self._upstream_failed(attempt, 504, "upstream_timeout",
                                         "The upstream did not answer in time.", headers)
        except aiohttp.ClientError:
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
        if attempt.grant.service_tier:
            data["service_tier"] = attempt.grant.service_tier
        self.attempt_finish(attempt, status="completed", outcome="completed")
        return Response(orjson.dumps(data), headers=headers, media_type="application/json")

    async def _upstream_send(self, upstream: Upstream, path: str, body: dict,
                             attempt: Attempt) -> aiohttp.ClientResponse:
        """The upstream's answer once its headers are in; the body is the caller's to read,
        then to release (or close)."""
        headers = {"content-type": "application/json", "x-request-id": attempt.request_id}
        if upstream.api_key:
            headers["authorization"] = f"Bearer {upstream.api_key}"
        return await self.http.post(upstream.base_url + path, data=orjson.dumps(body),
                                    headers=headers)

    async def _upstream_refused(self, attempt: Attempt, response: aiohttp.ClientResponse,
                                ids: dict) -> Response:
        """The upstream answered an error: its 4xx reach the caller as they are (the request
        was bad), its 5xx become a 502. Either way nothing was served."""
        try:
            raw = await response.read()
        except (TimeoutError, aiohttp.ClientError):
            raw = b""
        finally:
            response.release()
        if response.status >= 500:
            return self._upstream_failed(
                attempt, 502, "upstream_error",
                f"The upstream failed (HTTP {response.status}).", ids)
        self.attempt_finish(attempt, status="failed", outcome="failed")
        return Response(raw, status_code=response.status, headers=ids,
                        media_type=response.headers.get("content-type", "application/json"))

    def _upstream_failed(self, attempt: Attempt, status: int, code: str, message: str,
                         headers: dict) -> Response:
        self.attempt_finish(attempt, status="failed", outcome=code.replace(
            "upstream_unreachable", "upstream_error").replace(
            "upstream_unconfigured", "upstream_error"))
        return error_response(status=status, message=message, code=code,
                              headers={"x-request-id": headers["x-request-id"],
                                       "x-should-retry": "true"})

    def attempt_finish(self, attempt: Attempt, *, status: str, outcome: str) -> None:
        """Queue the attempt's usage (never waits: batches leave in the background)."""
        finished = now()
        event = attempt.usage_event(status=status, finished_at=finished)
        if attempt.grant is not None:
            self.sluice.report_usage(event)
        self._observe(attempt, outcome, event=event)

    def _observe(self, attempt: Attempt, outcome: str, event=None) -> None:
        ttft = decode = None
        if attempt.first_token_clock is not None:
            ttft = attempt.first_token_clock - attempt.started_clock
            decode = time.perf_counter() - attempt.first_token_clock
        self.metrics.observe(operation=attempt.operation, model=attempt.model, outcome=outcome,
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

    @staticmethod
    def _refusal(grant: AuthorizeResult, ids: dict) -> Response:
        headers = {k: str(v) for k, v in (grant.headers or {}).items()}
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
            try:
                async with self.http.get(upstream.base_url + "/models",
                                         headers=headers) as response:
                    listed = orjson.loads(await response.read())
                found += [m["id"] for m in listed.get("data", []) if m.get("id") not in found]
            except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError, TypeError):
                continue
        self._models = (time.monotonic(), found)
        return found


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def _no_key() -> Response:
    return error_response(status=401, message="Missing API key: send Authorization: Bearer "
                                              "sk_... (your Sluice API key).",
                          code="invalid_api_key", headers={"x-should-retry": "false"})


def _sluice_down(headers: dict) -> Response:
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


def create_app(config: GatewayConfig | None = None, **kwargs) -> Starlette:
    gateway = Gateway(config or GatewayConfig.from_env(), **kwargs)
    app = Starlette(routes=[
        Route("/v1/chat/completions", gateway.chat_completions, methods=["POST"]),
        Route("/v1/responses", gateway.responses, methods=["POST"]),
        Route("/v1/models", gateway.models, methods=["GET"]),
        Route("/metrics", gateway.metrics.endpoint, methods=["GET"]),
        Route("/healthz", gateway.healthz, methods=["GET"]),
    ], lifespan=gateway.lifespan)
    app.state.gateway = gateway
    return app
