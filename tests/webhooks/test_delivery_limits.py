"""Webhook delivery against endpoints that misbehave over real HTTP: one that trickles its
answer a byte at a time is cut at the delivery's total deadline; a huge answer is not read;
a slow endpoint holds one worker at most and other orgs' deliveries go on meanwhile; every
Celery task has time limits."""

import socket
import threading
from dataclasses import dataclass, field

import pytest
from django.db import connection
from django.utils import timezone

from tests.factories import OrganizationFactory
from tests.test_deploy_settings import production_env, run
from tests.webhooks.conftest import Receiver
from webhooks import tasks
from webhooks.delivery import (
    webhook_deliver,
    webhook_endpoint_deliver,
    webhooks_due_endpoints,
)
from webhooks.models import DeliveryStatus, EventType, WebhookDelivery, WebhookEvent
from webhooks.posting import RESPONSE_EXCERPT_BYTES
from webhooks.services import webhook_endpoint_create

pytestmark = pytest.mark.django_db(transaction=True)
DEADLINE = 2
LIVENESS_SECONDS = 30  # only to fail instead of hanging if an attempt never ends


@dataclass
class MisbehavingEndpoint:
    """A real HTTP server on 127.0.0.1 that reads the request, then answers as `behaviour`
    says, byte by byte if need be; it counts connections and the bytes it managed to send."""

    behaviour: str
    hold: threading.Event | None = None  # wait for this before answering
    connections: int = 0
    sent: int = 0
    closed: threading.Event = field(default_factory=threading.Event)

    def start(self) -> str:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hooks"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _read_request(self, conn) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        while len(body) < length:
            body += conn.recv(65536)

    def _send(self, conn, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def _answer(self, conn) -> None:
        try:
            self._read_request(conn)
            if self.hold is not None:
                self.hold.wait(LIVENESS_SECONDS)
            if self.behaviour == "trickle_head":
                for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" * 1000:
                    self._send(conn, bytes([byte]))
                    threading.Event().wait(0.3)
            elif self.behaviour.startswith("trickle_body_"):
                status = self.behaviour.removeprefix("trickle_body_")
                self._send(conn, f"HTTP/1.1 {status} X\r\nContent-Length: 100000\r\n\r\n"
                           .encode())
                for _ in range(100000):
                    self._send(conn, b"x")
                    threading.Event().wait(0.3)
            elif self.behaviour.startswith("huge_"):
                status = self.behaviour.removeprefix("huge_")
                self._send(conn, f"HTTP/1.1 {status} X\r\nContent-Length: {2**30}\r\n\r\n"
                           .encode())
                chunk = b"y" * 65536
                for _ in range(2**30 // len(chunk)):
                    self._send(conn, chunk)
        except OSError:
            pass  # the client hung up: what we wanted to see
        finally:
            conn.close()
            self.closed.set()

    def stop(self) -> None:
        self.sock.close()


@pytest.fixture
def short_deadline(settings):
    settings.WEBHOOK_DEADLINE_SECONDS = DEADLINE


def _owed(url: str, *, deliveries: int = 1, org=None):
    org = org or OrganizationFactory()
    endpoint, secret = webhook_endpoint_create(org=org, url=url,
                                               event_types=[EventType.ORG_ADMITTED],
                                               description="", actor="test")
    owed = []
    for n in range(deliveries):
        event = WebhookEvent.objects.create(org=org, type=EventType.ORG_ADMITTED,
                                            key=f"k{n}", data={"n": n})
        owed.append(WebhookDelivery.objects.create(event=event, endpoint=endpoint))
    return endpoint, secret, owed


def _in_thread(target) -> threading.Thread:
    def run_it():
        try:
            target()
        finally:
            connection.close()

    thread = threading.Thread(target=run_it)
    thread.start()
    return thread


def _finished(thread: threading.Thread) -> bool:
    thread.join(LIVENESS_SECONDS)
    return not thread.is_alive()


def test_an_answer_trickled_a_byte_at_a_time_is_cut_at_the_deadline(short_deadline):
    server = MisbehavingEndpoint("trickle_head")
    endpoint, _, (delivery,) = _owed(server.start())
    try:
        outcome = []
        assert _finished(_in_thread(lambda: outcome.append(
            webhook_deliver(delivery_id=delivery.pk))))
    finally:
        server.stop()
    delivery.refresh_from_db()
    assert outcome == [DeliveryStatus.PENDING]
    assert f"within the {DEADLINE} s deadline" in delivery.last_error
    assert server.closed.wait(5)  # we hung up; the server did not finish
    assert server.sent < len(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n") * 3
    endpoint.refresh_from_db()
    assert endpoint.busy_until > timezone.now()  # it rests before the next attempt


@pytest.mark.parametrize(("status", "outcome"), [("200", DeliveryStatus.DELIVERED),
                                                 ("500", DeliveryStatus.PENDING)])
def test_a_huge_answer_is_not_read(short_deadline, status, outcome):
    server = MisbehavingEndpoint(f"huge_{status}")
    _endpoint, _, (delivery,) = _owed(server.start())
    try:
        assert webhook_deliver(delivery_id=delivery.pk) == outcome
        assert server.closed.wait(10)
    finally:
        server.stop()
    delivery.refresh_from_db()
    assert server.sent < 16 * 2**20  # of 1 GiB: socket buffers' worth at most
    if status == "500":
        assert delivery.last_error == "HTTP 500: " + "y" * RESPONSE_EXCERPT_BYTES


@pytest.mark.parametrize(("status", "outcome"), [("204", DeliveryStatus.DELIVERED),
                                                 ("503", DeliveryStatus.PENDING)])
def test_a_slow_body_after_the_status_does_not_make_it_too_slow(short_deadline, status,
                                                                 outcome):
    server = MisbehavingEndpoint(f"trickle_body_{status}")
    endpoint, _, (delivery,) = _owed(server.start())
    try:
        assert webhook_deliver(delivery_id=delivery.pk) == outcome
    finally:
        server.stop()
    delivery.refresh_from_db()
    endpoint.refresh_from_db()
    assert endpoint.busy_until is None  # answered: no rest
    if status == "503":
        assert delivery.last_error.startswith("HTTP 503: x")  # what came in time
        assert len(delivery.last_error) < len("HTTP 503: ") + RESPONSE_EXCERPT_BYTES


def test_a_slow_endpoint_holds_one_worker_and_other_orgs_go_on(short_deadline):
    """Three workers at once: one on the slow endpoint, one on another org's, one that finds
    the slow endpoint taken. The slow endpoint answers only after the other org's receiver has
    its event, so the order of what happened shows nobody waited behind it."""
    others_received = threading.Event()
    slow = MisbehavingEndpoint("trickle_head", hold=others_received)
    slow_endpoint, _, owed = _owed(slow.start(), deliveries=3)
    fast = Receiver()
    fast.start()
    fast_endpoint, fast.secret, (fast_delivery,) = _owed(fast.url)
    happened, results = [], {}

    def deliver(name, endpoint):
        def work():
            results[name] = webhook_endpoint_deliver(endpoint_id=endpoint.pk)
            happened.append(name)
            if name == "fast":
                others_received.set()
        return work

    try:
        first = _in_thread(deliver("slow", slow_endpoint))
        while slow.connections == 0:  # the slow endpoint has a worker now
            threading.Event().wait(0.01)
        second = _in_thread(deliver("slow again", slow_endpoint))
        third = _in_thread(deliver("fast", fast_endpoint))
        assert all(_finished(t) for t in (first, second, third))
    finally:
        slow.stop()
        fast.stop()
    assert happened.index("fast") < happened.index("slow")
    assert results["slow again"].counts == {"endpoint_busy": 1}
    assert results["fast"].counts == {DeliveryStatus.DELIVERED: 1}
    assert fast.types() == ["organization.admitted"]
    # One connection, one attempt of its three deliveries; the other two wait for its rest.
    assert slow.connections == 1
    assert sum(WebhookDelivery.objects.filter(endpoint=slow_endpoint)
               .values_list("attempts", flat=True)) == 1
    assert results["slow"].counts == {DeliveryStatus.PENDING: 1}
    assert slow_endpoint.pk not in webhooks_due_endpoints()
    later = timezone.now() + timezone.timedelta(minutes=2)
    assert slow_endpoint.pk in webhooks_due_endpoints(now=later)


def test_a_turn_delivers_an_endpoints_burst_in_order():
    receiver = Receiver()
    receiver.start()
    endpoint, receiver.secret, owed = _owed(receiver.url, deliveries=5)
    try:
        turn = webhook_endpoint_deliver(endpoint_id=endpoint.pk)
    finally:
        receiver.stop()
    assert turn.counts == {DeliveryStatus.DELIVERED: 5} and not turn.more
    assert [e["data"]["n"] for e in receiver.received] == [0, 1, 2, 3, 4]


def test_every_webhook_task_has_time_limits_above_the_deadline(settings):
    for task in (tasks.webhook_deliver_task, tasks.webhook_endpoint_deliver_task,
                 tasks.webhooks_drain_task, tasks.waitlist_positions_task):
        assert task.soft_time_limit and task.time_limit > task.soft_time_limit, task.name
    assert tasks.webhook_deliver_task.soft_time_limit > settings.WEBHOOK_DEADLINE_SECONDS
    assert tasks.webhook_endpoint_deliver_task.soft_time_limit > \
        settings.WEBHOOK_DEADLINE_SECONDS + tasks.ENDPOINT_TURN_SECONDS


@pytest.mark.django_db
def test_the_deadline_setting_is_bounded():
    for bad in ("0", "61", "fast"):
        result = run(["-c", "import django; django.setup()"],
                     production_env(SLUICE_WEBHOOK_DEADLINE_SECONDS=bad))
        assert result.returncode != 0 and "SLUICE_WEBHOOK_DEADLINE_SECONDS" in result.stderr
    ok = run(["-c", "import django; django.setup(); from django.conf import settings; "
                    "print(settings.WEBHOOK_DEADLINE_SECONDS)"],
             production_env(SLUICE_WEBHOOK_DEADLINE_SECONDS="60"))
    assert ok.stdout.strip() == "60", ok.stderr
