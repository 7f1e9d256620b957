"""Prometheus metrics under the OpenTelemetry GenAI semantic conventions' names (dots become
underscores, the unit a suffix, as OpenTelemetry's Prometheus exporter writes them):

gen_ai_client_token_usage{gen_ai_token_type="input"|"output", ...}  tokens per request
gen_ai_server_time_to_first_token_seconds                           as the client got it
gen_ai_server_time_per_output_token_seconds                         after the first token
gen_ai_client_operation_duration_seconds{error_type}                whole request
gen_ai_gateway_requests_total{outcome}    completed, cancelled, failed, refused,
                                          upstream_error, upstream_timeout
gen_ai_gateway_admission_duration_seconds Sluice's authorize, as the gateway waited for it
gen_ai_gateway_lease_refusals_total{kind, code}  leases a heartbeat or release refused

gen_ai_request_model is a model some pool serves, else "other" (the client's model string is
any text). Each app has its own registry: N gateway processes are N scrape targets.
"""

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LABELS = ("gen_ai_operation_name", "gen_ai_request_model", "gen_ai_provider_name")
PROVIDER = "sluice"
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
ADMISSION_BUCKETS = (0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075,
                     0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)


class GatewayMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.tokens = Histogram("gen_ai_client_token_usage", "Tokens used per request.",
                                [*LABELS, "gen_ai_token_type"], buckets=TOKEN_BUCKETS,
                                registry=self.registry)
        self.ttft = Histogram("gen_ai_server_time_to_first_token_seconds",
                              "Time to the first output token, as the client got it.", LABELS,
                              buckets=TTFT_BUCKETS, registry=self.registry)
        self.tpot = Histogram("gen_ai_server_time_per_output_token_seconds",
                              "Time per output token after the first.", LABELS,
                              buckets=TPOT_BUCKETS, registry=self.registry)
        self.duration = Histogram("gen_ai_client_operation_duration_seconds",
                                  "Whole request duration.", [*LABELS, "error_type"],
                                  buckets=DURATION_BUCKETS, registry=self.registry)
        self.requests = Counter("gen_ai_gateway_requests", "Requests by outcome.",
                                [*LABELS, "outcome"], registry=self.registry)
        self.admission = Histogram("gen_ai_gateway_admission_duration_seconds",
                                   "Sluice's authorize, from the call to its answer.",
                                   buckets=ADMISSION_BUCKETS, registry=self.registry)
        self.lease_refusals = Counter("gen_ai_gateway_lease_refusals",
                                      "Leases a heartbeat or a release refused (dropped).",
                                      ["kind", "code"], registry=self.registry)

        # (operation, model, outcome) -> its children: labels() takes a lock and builds a key
        # on every call; the label sets are few (models a pool serves, a handful of outcomes).
        self._children: dict[tuple[str, str, str], tuple] = {}

    def _children_of(self, operation: str, model: str, outcome: str) -> tuple:
        children = self._children.get((operation, model, outcome))
        if children is None:
            labels = (operation, model, PROVIDER)
            error = "" if outcome in ("completed", "cancelled") else outcome
            counted = (self.requests.labels(*labels, outcome),
                       self.duration.labels(*labels, error))
            served = () if outcome == "refused" else (
                self.tokens.labels(*labels, "input"), self.tokens.labels(*labels, "output"),
                self.ttft.labels(*labels), self.tpot.labels(*labels))
            children = self._children[(operation, model, outcome)] = (*counted, *served)
        return children

    def observe(self, *, operation: str, model: str, outcome: str, duration_s: float,
                input_tokens: int = 0, output_tokens: int = 0, ttft_s: float | None = None,
                decode_s: float | None = None) -> None:
        children = self._children_of(operation, model, outcome)
        children[0].inc()
        children[1].observe(duration_s)
        if outcome == "refused":
            return
        tokens_in, tokens_out, ttft, tpot = children[2:]
        tokens_in.observe(input_tokens)
        tokens_out.observe(output_tokens)
        if ttft_s is not None:
            ttft.observe(ttft_s)
        if decode_s is not None and output_tokens > 1:
            tpot.observe(decode_s / (output_tokens - 1))

    def lease_refused(self, kind: str, lease_id: str, code: str) -> None:
        self.lease_refusals.labels(kind, code).inc()

    def exposition(self) -> tuple[bytes, bytes]:
        """The page and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST.encode()
