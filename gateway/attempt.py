"""One attempt of one request: its id, its grant, its clock, and the usage event it ends with.

Every HTTP request the gateway receives is a new attempt (the OpenAI SDKs retry with a new
request and no idempotency key): it gets its own request id, sent to Sluice, to the upstream
and back to the caller as `x-request-id`.
"""

import dataclasses
import random
import time
from datetime import UTC, datetime

from sluice_client import AuthorizeResult, UsageEvent


def request_id_new() -> str:
    # 128 random bits, as uuid4 has, without a getrandom() call per request: unique is all a
    # request id must be (each process seeds its generator from the OS at start).
    return f"req_{random.getrandbits(128):032x}"


def now() -> datetime:
    return datetime.now(UTC)


@dataclasses.dataclass
class Attempt:
    operation: str                  # "chat" or "responses"
    model: str
    input_estimate: int
    request_id: str = dataclasses.field(default_factory=request_id_new)
    started_at: datetime = dataclasses.field(default_factory=now)
    started_clock: float = dataclasses.field(default_factory=time.perf_counter)
    grant: AuthorizeResult | None = None
    first_token_at: datetime | None = None
    first_token_clock: float | None = None
    # Output tokens written to the client so far (one per output delta), as the stream goes:
    # the request's progress, and what it bills when the upstream's usage never comes.
    delivered_tokens: int = 0
    usage: dict | None = None       # the upstream's exact usage, when it gave it

    def first_token(self) -> None:
        if self.first_token_at is None:
            self.first_token_at, self.first_token_clock = now(), time.perf_counter()

    def usage_event(self, *, status: str, finished_at: datetime) -> UsageEvent:
        """What to report. `completed` with the upstream's usage counts that; otherwise the
        tokens delivered (a cancelled or broken stream bills what the client got). A request
        that failed before any output bills nothing: the reservation is only released."""
        input_tokens, output_tokens, cached = self.input_estimate, self.delivered_tokens, 0
        if self.usage:
            input_tokens = int(self.usage.get("prompt_tokens",
                                              self.usage.get("input_tokens", input_tokens)))
            details = (self.usage.get("prompt_tokens_details")
                       or self.usage.get("input_tokens_details") or {})
            cached = min(int(details.get("cached_tokens") or 0), input_tokens)
            if status == "completed":
                output_tokens = int(self.usage.get("completion_tokens",
                                                   self.usage.get("output_tokens", 0)))
        if status == "failed" and not output_tokens:
            input_tokens = cached = 0
        return UsageEvent(request_id=self.request_id,
                          reservation_id=self.grant.reservation_id if self.grant else None,
                          input_tokens=input_tokens, cached_input_tokens=cached,
                          output_tokens=output_tokens, status=status,
                          started_at=self.started_at, first_token_at=self.first_token_at,
                          finished_at=finished_at,
                          queued_ms=self.grant.queued_ms if self.grant else None)
