"""manage.py demo_traffic: a light, steady stream of requests for the demo, so every chart
moves (`dev.py run` starts it as its `traffic` process).

Each demo org (console/management/demo_usage.py) sends requests at its rate, shaped like the
seeded history. With `--gateway-url` (what `dev.py run` passes) a request is a real streamed
OpenAI chat completion through the reference gateway with the org's API key, the simulated
model told the request's speed and time to first token; the gateway authorizes and reports
the usage by itself. Without it, a request goes through the gateway hook with the Python
client, as a gateway does it: authorize, wait while the answer would stream, report the usage.
"""

import heapq
import json
import logging
import random
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand

from console.management.demo_usage import DemoRequest, demo_orgs, demo_request, diurnal
from orgs.models import ApiKey
from orgs.services import api_key_create
from quotas.hook.gateway_tokens import gateway_token_create
from quotas.models import GatewayToken

# The gateway client is its own package (clients/python, httpx only); the demo runs it from
# source, like its tests.
sys.path.insert(0, str(Path(settings.BASE_DIR) / "clients" / "python" / "src"))
from sluice_client import SluiceClient, SluiceUnavailable, UsageEvent  # noqa: E402

logger = logging.getLogger(__name__)
ACTOR = "demo_traffic"
KEY_NAME = "Demo traffic"
STATE = Path(settings.BASE_DIR) / ".sluice"
CREDENTIALS = STATE / "demo-traffic.json"  # the secrets it created, shown only once (0600)
SUMMARY_SECONDS = 60


@dataclass(frozen=True)
class Sender:
    """One org's traffic: where its requests go and with which key."""

    org_slug: str
    api_key: str
    model: str
    region: str


class HookSender:
    """Through the gateway hook: authorize now, report the usage once the answer has
    streamed (its timestamps are then in the past, as a real gateway reports them)."""

    def __init__(self, base_url: str, gateway_token: str):
        self.client = SluiceClient(base_url, token=gateway_token,
                                   spool_path=str(STATE / "demo-traffic-spool.jsonl"))
        self.allowed = self.refused = 0

    def summary(self) -> str:
        """Counts since the last summary."""
        line = f"demo traffic: {self.allowed} requests sent, {self.refused} refused by the limiter"
        self.allowed = self.refused = 0
        return line

    def start(self, sender: Sender, request: DemoRequest, request_id: str):
        """Authorize; the report to send when the answer is done, or None when refused."""
        try:
            grant = self.client.authorize(
                request_id=request_id, api_key=sender.api_key, model=sender.model,
                region=sender.region, input_tokens=request.input_tokens,
                max_output_tokens=max(2 * request.output_tokens, 256))
        except SluiceUnavailable:
            logger.warning("Sluice is unreachable; skipping a request of %s", sender.org_slug)
            return None
        if not grant.allowed:
            self.refused += 1
            return None
        self.allowed += 1
        started = datetime.now(UTC)
        first = started + timedelta(milliseconds=request.ttft_ms)
        return UsageEvent(
            request_id=request_id, reservation_id=grant.reservation_id,
            input_tokens=request.input_tokens, output_tokens=request.output_tokens,
            status=request.status, started_at=started,
            first_token_at=None if request.status == "failed" else first,
            finished_at=started + request.duration)

    def finish(self, report: UsageEvent) -> None:
        self.client.report_usage(report)

    def close(self) -> None:
        self.client.close()


class GatewaySender:
    """Through the reference gateway: a streamed chat completion per request, read to its end
    in a thread of its own (answers take seconds); the gateway authorizes and reports."""

    def __init__(self, gateway_url: str):
        self.http = httpx.Client(base_url=f"{gateway_url}/v1",
                                 timeout=httpx.Timeout(120, connect=5))
        self.threads = ThreadPoolExecutor(max_workers=32, thread_name_prefix="demo-traffic")
        self.lock = threading.Lock()
        self.counts = {"sent": 0, "refused": 0, "failed": 0}

    def summary(self) -> str:
        """Counts since the last summary."""
        with self.lock:
            counts, self.counts = self.counts, dict.fromkeys(self.counts, 0)
        return (f"demo traffic: {counts['sent']} requests through the gateway, "
                f"{counts['refused']} refused by the limiter, {counts['failed']} failed")

    def start(self, sender: Sender, request: DemoRequest, request_id: str) -> None:
        """Send in the background; nothing to report afterwards (the gateway does)."""
        self.threads.submit(self._send, sender, request)

    def _send(self, sender: Sender, request: DemoRequest) -> None:
        # The simulated model answers at the request's speed, or fails like the seeded ones.
        sim = ({"fault": "error"} if request.status == "failed"
               else {"rate": request.output_tps, "ttft_ms": request.ttft_ms})
        body = {"model": sender.model, "stream": True, "max_tokens": request.output_tokens,
                "messages": [{"role": "user", "content": " ".join(["word"] * max(
                    request.input_tokens - 7, 1))}], "sim": sim}
        outcome = "sent"
        try:
            with self.http.stream("POST", "/chat/completions", json=body, headers={
                    "authorization": f"Bearer {sender.api_key}"}) as response:
                if response.status_code == 429:
                    outcome = "refused"
                elif response.status_code >= 400 and request.status != "failed":
                    outcome = "failed"
                for _ in response.iter_bytes():
                    pass
        except httpx.HTTPError as exc:
            logger.warning("demo request of %s failed: %s", sender.org_slug, exc)
            outcome = "failed"
        with self.lock:
            self.counts[outcome] += 1

    def finish(self, report) -> None:
        raise AssertionError("the gateway reports its own usage")

    def close(self) -> None:
        self.threads.shutdown(wait=True)
        self.http.close()


class Command(BaseCommand):
    help = "Send a light, steady stream of demo requests through the gateway hook."

    def add_arguments(self, parser):
        parser.add_argument("--base-url", default=settings.PUBLIC_URL)
        parser.add_argument("--gateway-url", default="",
                            help="Send OpenAI requests through this reference gateway "
                                 "instead of calling the hook directly.")
        parser.add_argument("--speed", type=float, default=1.0,
                            help="Multiply every org's request rate by this.")

    def handle(self, *args, base_url: str, gateway_url: str, speed: float, **options):
        # One summary line a minute, not a log line per HTTP call.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        _wait_until_up(base_url)
        credentials = _credentials()
        orgs = [(Sender(org_slug=org.slug, api_key=credentials["keys"][org.slug],
                        model=allocation.pool.model, region=allocation.pool.region),
                 rate * speed, slow)
                for org, allocation, rate, slow in demo_orgs()
                if org.slug in credentials["keys"]]
        if gateway_url:
            _wait_until_up(gateway_url)
        target = f"{gateway_url}/v1" if gateway_url else f"{base_url}/api/gateway/v1/"
        self.stdout.write(f"demo traffic: {len(orgs)} organizations, about "
                          f"{sum(rate for _, rate, _ in orgs):.1f} requests/s in all, "
                          f"through {target}")
        out = (GatewaySender(gateway_url) if gateway_url
               else HookSender(base_url, credentials["gateway_token"]))
        try:
            _loop(out, orgs)
        finally:
            out.close()


def _wait_until_up(base_url: str) -> None:
    while True:
        try:
            if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)


def _credentials() -> dict:
    """A gateway token and one API key per demo org, made once and kept in CREDENTIALS (the
    database keeps only their digests); made again when the database no longer knows them."""
    kept = json.loads(CREDENTIALS.read_text()) if CREDENTIALS.exists() else {}
    token = kept.get("gateway_token", "")
    if not GatewayToken.objects.filter(lookup=_lookup(token), revoked_at=None).exists():
        token = gateway_token_create(name=KEY_NAME, actor=ACTOR)[1]
    keys = {}
    for org, _, _, _ in demo_orgs():
        secret = kept.get("keys", {}).get(org.slug, "")
        if not ApiKey.objects.filter(org=org, lookup=_lookup(secret), revoked_at=None).exists():
            secret = api_key_create(org=org, name=KEY_NAME, actor=ACTOR)[1]
        keys[org.slug] = secret
    credentials = {"gateway_token": token, "keys": keys}
    CREDENTIALS.parent.mkdir(parents=True, exist_ok=True)
    CREDENTIALS.touch(mode=0o600)
    CREDENTIALS.write_text(json.dumps(credentials))
    return credentials


def _lookup(secret: str) -> str:
    """`gw_<lookup>_<secret>` / `sk_<lookup>_<secret>` -> lookup."""
    parts = secret.split("_")
    return parts[1] if len(parts) >= 3 else "-"


def _loop(hook: HookSender | GatewaySender, orgs: list[tuple[Sender, float, float]]) -> None:
    """Arrivals of each org (a Poisson process at its rate, busier in the afternoon) and the
    reports of requests in flight, in time order."""
    rng = random.Random()
    due: list = []  # (monotonic time, sequence, kind, payload)
    sequence = 0

    def push(at: float, kind: str, payload) -> None:
        nonlocal sequence
        sequence += 1
        heapq.heappush(due, (at, sequence, kind, payload))

    for index, (_, rate, _) in enumerate(orgs):
        push(time.monotonic() + rng.expovariate(rate), "arrive", index)
    push(time.monotonic() + SUMMARY_SECONDS, "summary", None)
    while due:
        at, _, kind, payload = heapq.heappop(due)
        time.sleep(max(0.0, at - time.monotonic()))
        if kind == "report":
            hook.finish(payload)
            continue
        if kind == "summary":
            print(hook.summary(), flush=True)
            push(time.monotonic() + SUMMARY_SECONDS, "summary", None)
            continue
        sender, rate, slow = orgs[payload]
        request = demo_request(rng, slow_share=slow)
        report = hook.start(sender, request, f"demo-{uuid.uuid4().hex}")
        if report is not None:
            push(time.monotonic() + request.duration.total_seconds(), "report", report)
        now = datetime.now(UTC)
        push(time.monotonic() + rng.expovariate(rate * diurnal(now)), "arrive", payload)
