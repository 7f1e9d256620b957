"""The reference gateway over real HTTP: Sluice's served application (tests/hook.py, with real
PostgreSQL and Redis), the simulated upstream and the gateway served by uvicorn in threads (the
gateway with its own connection protocol, gateway/server.py, as `python -m gateway` serves it),
driven by the official `openai` SDK."""

import time
from dataclasses import dataclass

import httpx
import openai
import pytest

from gateway.app import create_app
from gateway.config import GatewayConfig, Upstream
from gateway.server import PROTOCOL
from gateway.serving import ServerThread
from gateway.sim import SimConfig
from gateway.sim import create_app as sim_app
from metering.models import UsageEvent
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_reset
from tests.quotas.conftest import Tenant, tenant_create

UPSTREAM_SECRET = "sim-upstream-secret"  # noqa: S105 - the simulated upstream's


@dataclass
class Stack:
    tenant: Tenant
    sluice_url: str
    gateway_token: str
    sim: ServerThread
    gateway: ServerThread

    @property
    def model(self) -> str:
        return self.tenant.pool.model

    @property
    def app(self):
        """The gateway application itself (its caches and pools, for white-box checks)."""
        return self.gateway.server.config.app

    def client(self, *, api_key: str | None = None, **kwargs) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.url + "/v1",
                             api_key=api_key or self.tenant.plaintext, **kwargs)

    def async_client(self, **kwargs) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.gateway.url + "/v1",
                                  api_key=self.tenant.plaintext, **kwargs)

    def sim_log(self) -> list[dict]:
        return httpx.get(self.sim.url + "/sim/requests").json()["data"]

    def sim_entry(self, request_id: str, *, until=lambda e: True) -> dict:
        return wait_for(lambda: next((e for e in self.sim_log()
                                      if e["request_id"] == request_id and until(e)), None))


def wait_for(probe, *, timeout: float = 20.0):
    """Poll until probe() is truthy (usage leaves the gateway in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def stored_event(request_id: str) -> UsageEvent:
    event = wait_for(lambda: UsageEvent.objects.filter(request_id=request_id).first())
    assert event is not None, f"no usage recorded for {request_id}"
    return event


def sluice_stack(*, sluice_url: str, tmp_path, limits: dict, sim_config: SimConfig | None = None,
                 upstream_timeout: float = 2.0, max_body_bytes: int | None = None,
                 upstream_api_key: str = UPSTREAM_SECRET, http: str = PROTOCOL):
    limiter_reset()
    gateway_token_cache_clear()
    tenant = tenant_create(**limits)
    pool_routes_reload()
    _, token = gateway_token_create(name="reference gateway", actor="test")
    config = sim_config or SimConfig()
    config.models, config.api_key = (tenant.pool.model,), UPSTREAM_SECRET
    sim = ServerThread(sim_app(config)).start()
    gateway = ServerThread(create_app(GatewayConfig(
        sluice_url=sluice_url, gateway_token=token,
        upstreams={"*": Upstream(sim.url + "/v1", upstream_api_key)},
        spool_path=str(tmp_path / "usage.jsonl"), upstream_timeout=upstream_timeout,
        usage_flush_interval=0.05,
        **({"max_body_bytes": max_body_bytes} if max_body_bytes else {}))),
        http=http).start()
    return Stack(tenant=tenant, sluice_url=sluice_url, gateway_token=token, sim=sim,
                 gateway=gateway)


@pytest.fixture
def stack_factory(served_url, redis_client, tmp_path):
    made: list[Stack] = []

    def make(**kwargs) -> Stack:
        made.append(sluice_stack(sluice_url=served_url, tmp_path=tmp_path, **kwargs))
        return made[-1]

    yield make
    for s in made:
        s.gateway.stop()
        s.sim.stop()
    limiter_reset()


STACK_LIMITS = {"guaranteed_tps": 5_000, "burst_tps": 5_000, "daily_tokens": 10**7,
                "max_concurrency": 20}


@pytest.fixture
def stack(stack_factory) -> Stack:
    return stack_factory(limits=STACK_LIMITS)
