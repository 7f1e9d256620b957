"""The ASGI bridge runs a WSGI application on whole requests: the body arrives in chunks (as a
slow client or a chunked request sends it) and the application sees it whole, with its
length; a big or streaming response is sent as the application yields it."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

from sluice.asgi_bridge import FIRST_BYTES, wsgi_app_as_asgi, wsgi_executor


def _echo(environ, start_response):
    body = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"]))
    start_response("201 Created", [("Content-Type", "text/plain"),
                                   ("X-Seen", environ["PATH_INFO"])])
    return [body.upper()]


def _stream(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    yield b"a" * FIRST_BYTES
    yield b"b"


def _call(app, messages, *, path="/x"):
    sent = []

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "query_string": b"",
             "headers": [(b"transfer-encoding", b"chunked")], "server": ("127.0.0.1", 80),
             "client": ("127.0.0.1", 5000), "scheme": "http", "http_version": "1.1"}
    application = wsgi_app_as_asgi(app, executor=wsgi_executor(2), max_body=100)
    # In a thread of its own: another test may have left an event loop running in this one.
    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, application(scope, receive, send)).result()
    return sent


def test_a_body_sent_in_chunks_reaches_the_application_whole():
    sent = _call(_echo, [{"type": "http.request", "body": b"ab", "more_body": True},
                         {"type": "http.request", "body": b"cd", "more_body": False}])
    assert sent[0]["status"] == 201 and (b"x-seen", b"/x") in sent[0]["headers"]
    assert b"".join(m.get("body", b"") for m in sent[1:]) == b"ABCD"


def test_a_streaming_response_is_sent_in_chunks():
    sent = _call(_stream, [{"type": "http.request", "body": b"", "more_body": False}])
    bodies = [m["body"] for m in sent[1:]]
    assert b"".join(bodies) == b"a" * FIRST_BYTES + b"b" and len(bodies) > 1
    assert sent[-1]["more_body"] is False


def test_a_body_over_the_limit_is_refused_without_running_the_application():
    sent = _call(_echo, [{"type": "http.request", "body": b"x" * 101, "more_body": True}])
    assert sent[0]["status"] == 413
