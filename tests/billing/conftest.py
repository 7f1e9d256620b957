import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from billing.models import PriceVersion
from tests.factories import PoolFactory

API_KEY = "sk_test_sluice_local"
WEBHOOK_SECRET = "whsec_test_sluice"
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class StripeServer:
    """The local Stripe (devstripe/server.py) as a subprocess on 127.0.0.1."""

    data_dir: Path
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(  # noqa: S603 - our own module
            [sys.executable, "-m", "devstripe.server", "--port", str(self.port),
             "--data-dir", str(self.data_dir)], cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                httpx.get(f"{self.url}/_config/stats", timeout=0.5)
                return
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("the local Stripe server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def call(self, method: str, path: str, **kwargs) -> dict:
        response = httpx.request(method, f"{self.url}{path}", timeout=5,
                                 headers={"Authorization": f"Bearer {API_KEY}"}, **kwargs)
        response.raise_for_status()
        return response.json()

    def list(self, path: str, **params) -> list[dict]:
        return self.call("GET", path, params={"limit": 100, **params})["data"]


@pytest.fixture
def pool(db):
    return PoolFactory(model="frontier-fast", region="us-east")


@pytest.fixture
def premium_price(pool):
    """The pool's public prices since 2026-01: list price plus a $2/$10 per Mtok premium."""
    from datetime import UTC, datetime

    return PriceVersion.objects.create(
        pool=pool, effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        input_micros_per_mtok=5_000_000, output_micros_per_mtok=30_000_000,
        premium_input_micros_per_mtok=2_000_000, premium_output_micros_per_mtok=10_000_000)


def usage_add(*, org, pool, hour, i=0, o=0, pi=None, po=None, api_key=None, requests=1):
    """One hourly rollup row, as ingestion would leave it."""
    from metering.models import UsageHourly

    return UsageHourly.objects.create(
        org=org, pool=pool, api_key=api_key, hour=hour, requests=requests, input_tokens=i,
        output_tokens=o, premium_input_tokens=i if pi is None else pi,
        premium_output_tokens=o if po is None else po)
