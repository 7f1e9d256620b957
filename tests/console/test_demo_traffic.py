"""The demo's traffic process sends what the seed wrote, through the real hook over HTTP."""

import random

import pytest

from console.management.commands import demo_traffic
from console.management.demo_usage import demo_request
from metering.models import UsageEvent
from orgs.models import OrgStatus
from quotas.hook.gateway_tokens import gateway_token_cache_clear
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_reset
from tests.factories import AllocationFactory, OrganizationFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_demo_request_is_authorized_and_reported_through_the_hook(served_url, settings,
                                                                    redis_client, tmp_path,
                                                                    monkeypatch):
    settings.PUBLIC_URL = served_url
    monkeypatch.setattr(demo_traffic, "CREDENTIALS", tmp_path / "demo-traffic.json")
    monkeypatch.setattr(demo_traffic, "STATE", tmp_path)
    org = OrganizationFactory(name="Acme Voice", slug="acme-voice", status=OrgStatus.ACTIVE)
    allocation = AllocationFactory(org=org, guaranteed_tps=12_000, burst_tps=24_000)
    credentials = demo_traffic._credentials()
    limiter_reset()
    gateway_token_cache_clear()
    pool_routes_reload()
    assert demo_traffic._credentials() == credentials  # kept, not made again
    assert (tmp_path / "demo-traffic.json").stat().st_mode & 0o077 == 0
    hook = demo_traffic.HookSender(served_url, credentials["gateway_token"])
    sender = demo_traffic.Sender(org_slug="acme-voice", api_key=credentials["keys"]["acme-voice"],
                                 model=allocation.pool.model, region=allocation.pool.region)
    request = demo_request(random.Random(7), slow_share=0)
    report = hook.start(sender, request, "demo-test-1")
    assert report is not None and report.finished_at > report.started_at
    hook.finish(report)
    hook.close()  # flushes the batch
    event = UsageEvent.objects.get(request_id="demo-test-1")
    assert (event.org_id, event.input_tokens, event.output_tokens) == (
        org.pk, request.input_tokens, request.output_tokens)


def test_a_demo_request_streams_through_the_reference_gateway(stack):
    """What `dev.py run` does: the traffic process sends real chat completions through the
    gateway, at the seeded request's speed; the gateway's usage reaches PostgreSQL."""
    from tests.gateway.conftest import wait_for

    out = demo_traffic.GatewaySender(stack.gateway.url)
    sender = demo_traffic.Sender(org_slug=stack.tenant.org.slug, api_key=stack.tenant.plaintext,
                                 model=stack.model, region=stack.tenant.pool.region)
    request = demo_request(random.Random(7), slow_share=0)
    request = type(request)(input_tokens=120, output_tokens=40, ttft_ms=30, output_tps=800.0,
                            status="completed")
    out.start(sender, request, "ignored: the gateway names each attempt")
    out.close()  # waits for the stream to end
    assert out.summary().startswith("demo traffic: 1 requests through the gateway, 0 refused")
    event = wait_for(lambda: UsageEvent.objects.filter(org=stack.tenant.org).first())
    assert event is not None and (event.status, event.output_tokens) == ("completed", 40)
    assert event.input_tokens > 100  # the upstream's count of the prompt, not an estimate
