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

from bisect import bisect_left

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

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


class Histogram:
    """One label set's histogram: a count per bucket and a sum, no lock. The gateway observes
    and renders on its one event loop thread; prometheus_client's own Histogram takes a lock
    per bucket and per sum on every observation (six observations a request)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple):
        self.bounds, self.counts, self.sum = bounds, [0] * (len(bounds) + 1), 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # the first bucket with value <= le
        self.sum += value

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative, as the exposition format has them."""
        out, total = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            out.append((floatToGoString(bound), total))
        return out


class Counter:
    __slots__ = ("value",)

    def __init__(self):
        self.value = 0

    def inc(self) -> None:
        self.value += 1


class GatewayMetrics:
    # name -> (help, label names, buckets); the same families whatever was observed
    HISTOGRAMS = {
        "gen_ai_client_token_usage": ("Tokens used per request.",
                                      (*LABELS, "gen_ai_token_type"), TOKEN_BUCKETS),
        "gen_ai_server_time_to_first_token_seconds": (
            "Time to the first output token, as the client got it.", LABELS, TTFT_BUCKETS),
        "gen_ai_server_time_per_output_token_seconds": (
            "Time per output token after the first.", LABELS, TPOT_BUCKETS),
        "gen_ai_client_operation_duration_seconds": (
            "Whole request duration.", (*LABELS, "error_type"), DURATION_BUCKETS),
        "gen_ai_gateway_admission_duration_seconds": (
            "Sluice's authorize, from the call to its answer.", (), ADMISSION_BUCKETS),
    }
    COUNTERS = {
        "gen_ai_gateway_requests": ("Requests by outcome.", (*LABELS, "outcome")),
        "gen_ai_gateway_lease_refusals": ("Leases a heartbeat or a release refused (dropped).",
                                          ("kind", "code")),
    }

    def __init__(self):
        # name -> {label values: Histogram or Counter}
        self._series: dict[str, dict[tuple, Histogram | Counter]] = {
            name: {} for name in (*self.HISTOGRAMS, *self.COUNTERS)}
        self.admission = self._histogram("gen_ai_gateway_admission_duration_seconds", ())
        # (operation, model, outcome) -> its series; the label sets are few (models a pool
        # serves, a handful of outcomes).
        self._children: dict[tuple[str, str, str], tuple] = {}
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def _histogram(self, name: str, labels: tuple) -> Histogram:
        series = self._series[name]
        found = series.get(labels)
        if found is None:
            found = series[labels] = Histogram(self.HISTOGRAMS[name][2])
        return found

    def _counter(self, name: str, labels: tuple) -> Counter:
        series = self._series[name]
        found = series.get(labels)
        if found is None:
            found = series[labels] = Counter()
        return found

    def _children_of(self, operation: str, model: str, outcome: str) -> tuple:
        children = self._children.get((operation, model, outcome))
        if children is None:
            labels = (operation, model, PROVIDER)
            error = "" if outcome in ("completed", "cancelled") else outcome
            counted = (self._counter("gen_ai_gateway_requests", (*labels, outcome)),
                       self._histogram("gen_ai_client_operation_duration_seconds",
                                       (*labels, error)))
            served = () if outcome == "refused" else (
                self._histogram("gen_ai_client_token_usage", (*labels, "input")),
                self._histogram("gen_ai_client_token_usage", (*labels, "output")),
                self._histogram("gen_ai_server_time_to_first_token_seconds", labels),
                self._histogram("gen_ai_server_time_per_output_token_seconds", labels))
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
        self._counter("gen_ai_gateway_lease_refusals", (kind, code)).inc()

    def collect(self):
        """prometheus_client's Collector interface: the families, as the registry renders."""
        for name, (help_text, labels, _) in self.HISTOGRAMS.items():
            family = HistogramMetricFamily(name, help_text, labels=labels)
            for values, histogram in self._series[name].items():
                family.add_metric(list(values), histogram.buckets(), histogram.sum)
            yield family
        for name, (help_text, labels) in self.COUNTERS.items():
            family = CounterMetricFamily(name, help_text, labels=labels)
            for values, counter in self._series[name].items():
                family.add_metric(list(values), counter.value)
            yield family

    def exposition(self) -> tuple[bytes, bytes]:
        """The page and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST.encode()
