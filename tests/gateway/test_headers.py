"""The per-minute rate-limit headers (Cerebras' names) mapped from the hook's answer."""

import pytest

from gateway.config import ConfigError, GatewayConfig
from gateway.headers import answer_headers, duration_seconds

HOOK = {"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "250",
        "x-ratelimit-reset-tokens": "7.5s", "x-ratelimit-limit-requests": "4"}


def test_the_minute_headers_come_from_the_bucket_and_its_refill_rate():
    headers = answer_headers(HOOK, 100)
    assert {k: v for k, v in headers.items() if k.endswith("-minute")} == {
        "x-ratelimit-limit-tokens-minute": "6000",
        "x-ratelimit-remaining-tokens-minute": "250",
        "x-ratelimit-reset-tokens-minute": "7.5"}
    assert {k: headers[k] for k in HOOK} == HOOK  # OpenAI's as the hook built them


def test_a_sluice_that_does_not_say_the_refill_rate_gets_openais_headers_alone():
    assert answer_headers(HOOK, None) == HOOK
    assert answer_headers({}, 100) == {}


@pytest.mark.parametrize(("text", "seconds"), [
    ("20ms", 0.02), ("0ms", 0.0), ("1s", 1.0), ("1.2s", 1.2), ("6m0s", 360.0),
    ("1h2m3s", 3723.0), ("", None), ("soon", None)])
def test_the_hooks_durations_read_as_seconds(text, seconds):
    assert duration_seconds(text) == seconds


ENV = {"GATEWAY_UPSTREAM_URL": "http://127.0.0.1:9/v1", "SLUICE_URL": "http://127.0.0.1:8",
       "SLUICE_GATEWAY_TOKEN": "gw_x"}


@pytest.mark.parametrize(("raw", "seconds"), [(None, 0.01), ("0", 0.0), ("25", 0.025)])
def test_stream_coalescing_is_configured_in_ms_and_0_turns_it_off(raw, seconds):
    env = {**ENV, **({"GATEWAY_STREAM_COALESCE_MS": raw} if raw is not None else {})}
    assert GatewayConfig.from_env(env).stream_coalesce_seconds == seconds


@pytest.mark.parametrize("raw", ["-1", "fast", "1001"])
def test_a_bad_coalescing_setting_fails_at_start(raw):
    with pytest.raises(ConfigError):
        GatewayConfig.from_env({**ENV, "GATEWAY_STREAM_COALESCE_MS": raw})
