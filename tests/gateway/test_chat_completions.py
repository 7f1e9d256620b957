"""Completions through the reference gateway with the official SDK: text arrives, the usage
Sluice records is the upstream's, headers reach the SDK."""

import pytest

from gateway.sim.app import prompt_tokens_count
from quotas.hook.routing import pool_routes_reload
from quotas.publish import limiter_sync_pool
from tests.aio import run_async
from tests.factories import AllocationFactory, PoolFactory
from tests.gateway.conftest import UPSTREAM_SECRET, stored_event

pytestmark = pytest.mark.django_db(transaction=True)
MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say something about sluices, please."}]
UPSTREAM_PROMPT_TOKENS = prompt_tokens_count({"messages": MESSAGES})


def test_non_streaming_sync_records_the_upstreams_usage(stack):
    raw = stack.client().chat.completions.with_raw_response.create(
        model=stack.model, messages=MESSAGES, max_tokens=12)
    completion = raw.parse()
    request_id = raw.headers["x-request-id"]
    assert completion.choices[0].message.content.startswith("Tokens flow")
    assert completion.service_tier == "priority"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (
        UPSTREAM_PROMPT_TOKENS, 12)
    assert raw.headers["x-ratelimit-limit-tokens"] == "50000"
    assert "x-ratelimit-remaining-tokens" in raw.headers
    assert "x-ratelimit-remaining-tokens-day" in raw.headers
    # Cerebras' names beside OpenAI's: the bucket holds 10 s of its refill rate (5,000 tok/s).
    assert raw.headers["x-ratelimit-limit-tokens-minute"] == "300000"
    assert raw.headers["x-ratelimit-remaining-tokens-minute"] == \
        raw.headers["x-ratelimit-remaining-tokens"]
    assert 0 <= float(raw.headers["x-ratelimit-reset-tokens-minute"]) <= 10
    assert not any(name.endswith("requests-day") for name in raw.headers)
    event = stored_event(request_id)
    assert (event.input_tokens, event.output_tokens, event.status) == (
        UPSTREAM_PROMPT_TOKENS, 12, "completed")
    assert event.org_id == stack.tenant.org.pk and event.first_token_at is not None
    upstream = stack.sim_entry(request_id)
    # The upstream sees the pool's secret, never the organization's key.
    assert upstream["authorization"] == f"Bearer {UPSTREAM_SECRET}"


def test_streaming_without_include_usage_sends_no_usage_chunk(stack):
    raw = stack.client().chat.completions.with_raw_response.create(
        model=stack.model, messages=MESSAGES, max_tokens=40, stream=True)
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Tokens flow") and len(text.split()) == 40
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)  # the usage chunk (no choices) was held back
    event = stored_event(raw.headers["x-request-id"])
    assert (event.input_tokens, event.output_tokens, event.status) == (
        UPSTREAM_PROMPT_TOKENS, 40, "completed")
    assert event.ttft_ms is not None and event.output_tps is not None


def test_streaming_with_include_usage_async(stack):
    async def run():
        client = stack.async_client()
        raw = await client.chat.completions.with_raw_response.create(
            model=stack.model, messages=MESSAGES, max_completion_tokens=30, stream=True,
            stream_options={"include_usage": True})
        chunks = [c async for c in raw.parse()]
        await client.close()
        return raw.headers, chunks

    headers, chunks = run_async(run())
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and chunks[-1].usage is not None and not chunks[-1].choices
    assert (usage[0].prompt_tokens, usage[0].completion_tokens) == (UPSTREAM_PROMPT_TOKENS, 30)
    # Every chunk names the tier that served it, as OpenAI's do (the simulator names none).
    assert {c.service_tier for c in chunks} == {"priority"}
    assert "x-ratelimit-limit-requests" in headers
    event = stored_event(headers["x-request-id"])
    assert (event.input_tokens, event.output_tokens) == (UPSTREAM_PROMPT_TOKENS, 30)


def test_non_streaming_async(stack):
    async def run():
        async with stack.async_client() as client:
            return await client.chat.completions.with_raw_response.create(
                model=stack.model, messages=MESSAGES, max_tokens=5)

    raw = run_async(run())
    assert raw.parse().choices[0].message.content
    event = stored_event(raw.headers["x-request-id"])
    assert (event.input_tokens, event.output_tokens) == (UPSTREAM_PROMPT_TOKENS, 5)


def test_each_attempt_has_its_own_request_id(stack):
    client = stack.client()
    ids = {client.chat.completions.with_raw_response.create(
        model=stack.model, messages=MESSAGES, max_tokens=1).headers["x-request-id"]
        for _ in range(3)}
    assert len(ids) == 3


def test_responses_are_admitted_and_metered_too(stack):
    client = stack.client(max_retries=0)
    raw = client.responses.with_raw_response.create(model=stack.model, input="Hello there",
                                                    max_output_tokens=9)
    response = raw.parse()
    assert response.output_text.startswith("Tokens flow")
    event = stored_event(raw.headers["x-request-id"])
    assert (event.input_tokens, event.output_tokens, event.status) == (
        response.usage.input_tokens, 9, "completed")

    raw = client.responses.with_raw_response.create(model=stack.model, input="Hello there",
                                                    max_output_tokens=12, stream=True)
    events = list(raw.parse())
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == 12 and events[-1].type == "response.completed"
    assert events[0].response.service_tier == events[-1].response.service_tier == "priority"
    event = stored_event(raw.headers["x-request-id"])
    assert (event.output_tokens, event.status) == (12, "completed")
    assert event.first_token_at is not None


def test_a_stream_served_on_the_standard_tier_says_so(stack):
    """The org holds a standard allocation beside its fast one; a request that asks for the
    `default` tier streams from the standard pool, and every chunk says `default`."""
    fast = stack.tenant.pool
    standard = PoolFactory(model=fast.model, region=fast.region, tier="standard")
    AllocationFactory(org=stack.tenant.org, pool=standard, guaranteed_tps=5_000,
                      burst_tps=5_000, daily_tokens=10**7, max_concurrency=20)
    limiter_sync_pool(pool_id=standard.pk)
    pool_routes_reload()
    raw = stack.client().chat.completions.with_raw_response.create(
        model=stack.model, messages=MESSAGES, max_tokens=20, stream=True,
        service_tier="default", stream_options={"include_usage": True})
    chunks = list(raw.parse())
    assert len(chunks) > 20 and {c.service_tier for c in chunks} == {"default"}
    event = stored_event(raw.headers["x-request-id"])
    assert (event.pool_id, event.output_tokens) == (standard.pk, 20)
