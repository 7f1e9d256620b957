"""A simulated OpenAI-compatible fast upstream: `python -m gateway.sim --port 9100`.

It answers `POST /v1/chat/completions` (streaming and not), `POST /v1/responses` (text output,
whole or as events; the fault switches apply to chat completions) and `GET /v1/models` the way an
OpenAI-compatible inference server does, at a configurable speed: after the time to first
token (`--ttft-ms`, 20 by default) it produces output at `--rate` tokens/s (750 by default),
one token per SSE chunk (chunks are written in bursts every `--tick-ms`, 10 by default, so
200 concurrent streams stay cheap; `--tick-ms 0` writes each token as it falls due). It
honours `max_tokens` / `max_completion_tokens` and `stream_options.include_usage`. Without
`max_tokens` a reply has `--output-tokens` tokens.

Usage is exact for the simulated model: `prompt_tokens` is the number of whitespace-separated
words in the messages' text plus 3 per message (plus 3 for the reply's priming), so it differs
from the gateway's estimate, which settle corrects.

Fault switches, each one request's (a `sim` object in the JSON body, which OpenAI SDKs send
with `extra_body={"sim": {...}}` and the gateway passes on) or every request's (the
`--fault` flag, or `PUT /sim/config` with the same JSON object; `{}` resets it):

- `{"fault": "stall"}`: answer nothing, hold the connection open (a streaming request with
  `"after_tokens": N` stalls after N tokens instead).
- `{"fault": "error"}`: answer 500 with an OpenAI error body (`"status": 503` picks another).
- `{"fault": "disconnect", "after_tokens": N}`: stream N tokens, then drop the connection
  without ending the stream (the default N is 5).
- `{"fault": "slow"}`: produce at `--slow-rate` tokens/s (20 by default), below any fast
  pool's speed floor; `"rate": R` / `"ttft_ms": T` set speed and time to first token directly.
- `{"tokens": N}`: stop after N output tokens (finish_reason still "length"), below max_tokens.

The server keeps a log of the last 1,000 requests for tests and benchmarks:
`GET /sim/requests` lists `{"request_id", "model", "stream", "authorization", "started",
"finished", "tokens_sent", "outcome"}` (`outcome`: completed, client_closed, stalled,
error, disconnected), `request_id` being the `x-request-id` header the caller sent.
With `--api-key` (or `SIM_API_KEY`), requests without `Authorization: Bearer <it>` get 401.
"""

from gateway.sim.app import SimConfig, create_app

__all__ = ["SimConfig", "create_app"]
