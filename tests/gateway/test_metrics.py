"""The gateway's metrics page: Prometheus histograms and counters kept without locks, rendered
in the exposition format prometheus_client writes (cumulative buckets, `le` inclusive)."""

from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import GatewayMetrics


def samples(metrics: GatewayMetrics) -> dict:
    body, _ = metrics.exposition()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def test_histograms_count_each_value_in_the_first_bucket_it_fits_cumulatively():
    metrics = GatewayMetrics()
    for seconds in (0.0005, 0.001, 0.0011, 9.0):  # 0.001 is a bound: counted at le="0.001"
        metrics.admission.observe(seconds)
    found = samples(metrics)
    name = "gen_ai_gateway_admission_duration_seconds"
    assert found[(f"{name}_bucket", (("le", "0.0005"),))] == 1
    assert found[(f"{name}_bucket", (("le", "0.001"),))] == 2
    assert found[(f"{name}_bucket", (("le", "0.0015"),))] == 3
    assert found[(f"{name}_bucket", (("le", "2.5"),))] == 3
    assert found[(f"{name}_bucket", (("le", "+Inf"),))] == 4
    assert found[(f"{name}_count", ())] == 4
    assert abs(found[(f"{name}_sum", ())] - 9.0026) < 1e-9


def test_a_request_is_counted_under_its_labels_and_a_refusal_observes_no_tokens():
    metrics = GatewayMetrics()
    metrics.observe(operation="chat", model="m", outcome="completed", duration_s=0.5,
                    input_tokens=10, output_tokens=21, ttft_s=0.03, decode_s=0.2)
    metrics.observe(operation="chat", model="other", outcome="refused", duration_s=0.001)
    metrics.lease_refused("heartbeat", "lease_1", "lease_expired")
    found = samples(metrics)
    base = (("gen_ai_operation_name", "chat"), ("gen_ai_provider_name", "sluice"))
    served = tuple(sorted((*base, ("gen_ai_request_model", "m"))))
    refused = tuple(sorted((*base, ("gen_ai_request_model", "other"))))
    assert found[("gen_ai_gateway_requests_total",
                  tuple(sorted((*served, ("outcome", "completed")))))] == 1
    assert found[("gen_ai_gateway_requests_total",
                  tuple(sorted((*refused, ("outcome", "refused")))))] == 1
    assert found[("gen_ai_client_token_usage_sum",
                  tuple(sorted((*served, ("gen_ai_token_type", "output")))))] == 21
    assert found[("gen_ai_server_time_per_output_token_seconds_sum", served)] == 0.2 / 20
    assert found[("gen_ai_client_operation_duration_seconds_count",
                  tuple(sorted((*refused, ("error_type", "refused")))))] == 1
    assert not any(name == "gen_ai_client_token_usage_count" and dict(labels).get(
        "gen_ai_request_model") == "other" for name, labels in found)
    assert found[("gen_ai_gateway_lease_refusals_total",
                  (("code", "lease_expired"), ("kind", "heartbeat")))] == 1
