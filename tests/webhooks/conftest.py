"""A webhook receiver for tests: a real HTTP server on 127.0.0.1 that verifies every delivery
with the `standardwebhooks` library, the way an organization's receiver would."""

import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.billing.conftest import pool, premium_price  # noqa: F401 - fixtures used here too


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Receiver:
    """Verifies signatures and timestamps (the library's five-minute tolerance) and drops
    ids it has processed, as docs/org-api.md tells receivers to."""

    port: int = field(default_factory=free_port)
    secret: str = ""
    status: int = 200
    received: list[dict] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    seen_ids: set[str] = field(default_factory=set)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def handle(self, headers: dict[str, str], body: bytes) -> int:
        try:
            payload = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError as exc:
            self.rejected.append(str(exc))
            return 400
        if headers["webhook-id"] in self.seen_ids:
            self.rejected.append("replayed id")
            return 200  # already processed: acknowledge, do nothing
        if self.status == 200:
            self.seen_ids.add(headers["webhook-id"])
            self.received.append({"id": headers["webhook-id"], **payload})
        return self.status

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["content-length"]))
                status = receiver.handle({k.lower(): v for k, v in self.headers.items()}, body)
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def types(self) -> list[str]:
        return [event["type"] for event in self.received]


@pytest.fixture
def receiver():
    server = Receiver()
    server.start()
    yield server
    server.stop()


def body_of(event) -> dict:
    from webhooks.delivery import webhook_body

    return json.loads(webhook_body(event))
