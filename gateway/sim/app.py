"""The simulated upstream's ASGI application (see the package docstring for its switches)."""

import asyncio
import collections
import dataclasses
import time
import uuid

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

WORDS = ("Tokens ", "flow ", "through ", "the ", "sluice ", "at ", "wafer ", "scale ",
         "speed, ", "one ", "after ", "another. ")
FAULTS = ("stall", "error", "disconnect", "slow")
LOG_SIZE = 1_000


@dataclasses.dataclass
class SimConfig:
    rate: float = 750.0            # output tokens/s
    ttft_ms: float = 20.0          # time to first token
    tick_ms: float = 10.0          # how often a stream writes the tokens due so far
    output_tokens: int = 64        # reply length when the request sets no max_tokens
    slow_rate: float = 20.0        # the "slow" fault's rate
    models: tuple[str, ...] = ("gpt-5.6-sol",)
    api_key: str = ""              # required bearer, if set
    fault: dict = dataclasses.field(default_factory=dict)  # applied to every request


class SimError(Exception):
    pass


def prompt_tokens_count(body: dict) -> int:
    """The simulated model's exact count (see the package docstring)."""
    count = 3
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        count += 3 + len(str(content or "").split())
    return count


def _chunk(base: dict, delta: dict, finish_reason=None, usage=None) -> bytes:
    choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    payload = {**base, "choices": choices if usage is None else []}
    if usage is not None or base.get("_usage_null"):
        payload["usage"] = usage
    payload.pop("_usage_null", None)
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class Simulator:
    def __init__(self, config: SimConfig):
        self.config = config
        self.log: collections.OrderedDict[str, dict] = collections.OrderedDict()

    # --- bookkeeping -------------------------------------------------------------------------
    def _record(self, request: Request, body: dict) -> dict:
        entry = {"request_id": request.headers.get("x-request-id") or uuid.uuid4().hex,
                 "model": body.get("model"), "stream": bool(body.get("stream")),
                 "authorization": request.headers.get("authorization", ""),
                 "started": time.time(), "finished": None, "tokens_sent": 0,
                 "outcome": "running"}
        key = f"{entry['request_id']}#{uuid.uuid4().hex[:6]}"
        self.log[key] = entry
        while len(self.log) > LOG_SIZE:
            self.log.popitem(last=False)
        return entry

    @staticmethod
    def _finish(entry: dict, outcome: str) -> None:
        if entry["finished"] is None:
            entry["finished"], entry["outcome"] = time.time(), outcome

    # --- the plan of one request -------------------------------------------------------------
    def _plan(self, body: dict) -> dict:
        fault = dict(self.config.fault)
        if isinstance(body.get("sim"), dict):
            fault.update(body["sim"])
        kind = fault.get("fault")
        if kind is not None and kind not in FAULTS:
            raise SimError(f"sim.fault must be one of {', '.join(FAULTS)}")
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        rate = float(fault.get("rate") or (self.config.slow_rate if kind == "slow"
                                           else self.config.rate))
        return {
            "fault": kind,
            "after_tokens": int(fault.get("after_tokens", 5 if kind == "disconnect" else 0)),
            "status": int(fault.get("status", 500)),
            "rate": max(rate, 0.001),
            "ttft": float(fault.get("ttft_ms", self.config.ttft_ms)) / 1000,
            "tokens": min(int(fault["tokens"]), int(limit or fault["tokens"]))
            if "tokens" in fault else int(limit) if limit else self.config.output_tokens,
        }

    def _unauthorized(self, request: Request) -> Response | None:
        """The 401 of a request without the configured bearer (None: let it in)."""
        if self.config.api_key and request.headers.get("authorization") != (
                f"Bearer {self.config.api_key}"):
            return _error(401, "Incorrect API key provided.", "invalid_request_error",
                          "invalid_api_key")
        return None

    async def _generate_whole(self, entry: dict, plan: dict, request: Request) -> bool:
        """Take as long as generating the whole answer would; a caller that leaves first stops
        it (as a server stops generating for a closed connection) and is recorded as gone.
        False when the caller left."""
        async def caller_gone() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        generating = asyncio.ensure_future(asyncio.sleep(
            plan["ttft"] + max(plan["tokens"] - 1, 0) / plan["rate"]))
        watching = asyncio.ensure_future(caller_gone())
        try:
            await asyncio.wait({generating, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            generating.cancel()
            watching.cancel()
        if not generating.done() or generating.cancelled():
            self._finish(entry, "client_closed")
            return False
        entry["tokens_sent"] = plan["tokens"]
        self._finish(entry, "completed")
        return True

    # --- endpoints ---------------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        if (refused := self._unauthorized(request)) is not None:
            return refused
        try:
            body = orjson.loads(await request.body())
            plan = self._plan(body)
        except (orjson.JSONDecodeError, SimError, TypeError, ValueError) as exc:
            return _error(400, f"Bad request: {exc}", "invalid_request_error", None)
        entry = self._record(request, body)
        if plan["fault"] == "error":
            self._finish(entry, "error")
            return _error(plan["status"], "The simulated upstream failed.", "server_error", None)
        if plan["fault"] == "stall" and not (entry["stream"] and plan["after_tokens"]):
            try:
                await asyncio.Event().wait()  # until the caller gives up
            finally:
                self._finish(entry, "stalled")
        usage = {"prompt_tokens": prompt_tokens_count(body), "completion_tokens": plan["tokens"],
                 "total_tokens": prompt_tokens_count(body) + plan["tokens"],
                 "prompt_tokens_details": {"cached_tokens": 0}}
        base = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model") or self.config.models[0],
                "system_fingerprint": "fp_sim"}
        if not entry["stream"]:
            return await self._whole(entry, plan, base, usage, request)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(self._stream(entry, plan, base, usage, include_usage),
                                 media_type="text/event-stream",
                                 headers={"cache-control": "no-cache"})

    async def _whole(self, entry: dict, plan: dict, base: dict, usage: dict,
                     request: Request) -> Response:
        if not await self._generate_whole(entry, plan, request):
            return Response(status_code=204)  # nobody reads it
        text = "".join(WORDS[i % len(WORDS)] for i in range(plan["tokens"]))
        return JSONResponse({
            **base, "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                                                 "refusal": None},
                         "logprobs": None,
                         "finish_reason": "length" if plan["tokens"] else "stop"}],
            "usage": usage, "service_tier": "default"})

    async def _stream(self, entry, plan, base, usage, include_usage):
        if include_usage:
            base = {**base, "_usage_null": True}
        total, rate, tick = plan["tokens"], plan["rate"], self.config.tick_ms / 1000
        stop_at = plan["after_tokens"] if plan["fault"] in ("stall", "disconnect") else None
        try:
            yield _chunk(base, {"role": "assistant", "content": ""})
            await asyncio.sleep(plan["ttft"])
            first = time.perf_counter()
            sent = 0
            while sent < total:
                due = min(total, int((time.perf_counter() - first) * rate) + 1)
                if stop_at is not None:
                    due = min(due, stop_at)
                if due > sent:
                    yield b"".join(_chunk(base, {"content": WORDS[i % len(WORDS)]})
                                   for i in range(sent, due))
                    sent = entry["tokens_sent"] = due
                if stop_at is not None and sent >= stop_at:
                    if plan["fault"] == "disconnect":
                        self._finish(entry, "disconnected")
                        raise ConnectionAbortedError("simulated disconnect mid-stream")
                    self._finish(entry, "stalled")
                    await asyncio.Event().wait()
                # Until the next tick, or the next token (the one of index `sent`, due at
                # sent / rate) if that comes later: a fast stream writes what fell due in one
                # burst per tick, as a batching server does.
                await asyncio.sleep(max(tick, sent / rate - (time.perf_counter() - first)))
            tail = _chunk(base, {}, finish_reason="length" if total else "stop")
            if include_usage:
                tail += _chunk(base, {}, usage=usage)
            yield tail + b"data: [DONE]\n\n"
            self._finish(entry, "completed")
        finally:
            self._finish(entry, "client_closed")

    async def responses(self, request: Request) -> Response:
        """POST /v1/responses: the Responses API's text output, whole or as events."""
        if (refused := self._unauthorized(request)) is not None:
            return refused
        try:
            body = orjson.loads(await request.body())
            given = body.get("input")
            messages = ([{"content": given}] if isinstance(given, str)
                        else [m for m in given or [] if isinstance(m, dict)])
            plan = self._plan({**body, "max_tokens": body.get("max_output_tokens")})
        except (orjson.JSONDecodeError, SimError, TypeError, ValueError, AttributeError) as exc:
            return _error(400, f"Bad request: {exc}", "invalid_request_error", None)
        entry = self._record(request, body)
        prompt = prompt_tokens_count({"messages": messages})
        usage = {"input_tokens": prompt, "output_tokens": plan["tokens"],
                 "total_tokens": prompt + plan["tokens"],
                 "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens_details": {"reasoning_tokens": 0}}
        text = "".join(WORDS[i % len(WORDS)] for i in range(plan["tokens"]))
        whole = {"id": f"resp_{uuid.uuid4().hex[:24]}", "object": "response",
                 "created_at": int(time.time()), "status": "completed",
                 "model": body.get("model") or self.config.models[0],
                 "output": [{"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}",
                             "status": "completed", "role": "assistant",
                             "content": [{"type": "output_text", "text": text,
                                          "annotations": []}]}],
                 "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                 "usage": usage}
        if not entry["stream"]:
            if not await self._generate_whole(entry, plan, request):
                return Response(status_code=204)  # nobody reads it
            return JSONResponse(whole)
        return StreamingResponse(self._response_events(entry, plan, whole),
                                 media_type="text/event-stream")

    async def _response_events(self, entry: dict, plan: dict, whole: dict):
        def event(kind: str, sequence: int, **data) -> bytes:
            payload = orjson.dumps({"type": kind, "sequence_number": sequence, **data})
            return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"

        item = whole["output"][0]["id"]
        try:
            yield event("response.created", 0, response={**whole, "status": "in_progress",
                                                         "output": [], "usage": None})
            await asyncio.sleep(plan["ttft"])
            for i in range(plan["tokens"]):
                yield event("response.output_text.delta", i + 1, item_id=item, output_index=0,
                            content_index=0, delta=WORDS[i % len(WORDS)])
                entry["tokens_sent"] = i + 1
                await asyncio.sleep(1 / plan["rate"])
            yield event("response.completed", plan["tokens"] + 1, response=whole)
            self._finish(entry, "completed")
        finally:
            self._finish(entry, "client_closed")

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "sim"}
            for m in self.config.models]})

    async def requests_log(self, request: Request) -> Response:
        return JSONResponse({"data": list(self.log.values())})

    async def set_config(self, request: Request) -> Response:
        try:
            fault = orjson.loads(await request.body() or b"{}")
            if not isinstance(fault, dict) or fault.get("fault") not in (None, *FAULTS):
                raise SimError("expected {} or {\"fault\": ...}")
        except (orjson.JSONDecodeError, SimError) as exc:
            return _error(400, str(exc), "invalid_request_error", None)
        self.config.fault = fault
        return JSONResponse({"fault": fault})


def _error(status: int, message: str, kind: str, code) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None,
                                   "code": code}}, status_code=status)


def create_app(config: SimConfig | None = None) -> Starlette:
    sim = Simulator(config or SimConfig())
    app = Starlette(routes=[
        Route("/v1/chat/completions", sim.chat_completions, methods=["POST"]),
        Route("/v1/responses", sim.responses, methods=["POST"]),
        Route("/v1/models", sim.models, methods=["GET"]),
        Route("/sim/requests", sim.requests_log, methods=["GET"]),
        Route("/sim/config", sim.set_config, methods=["PUT"]),
    ])
    app.state.sim = sim
    return app
