"""The ASGI bridge runs a WSGI application on whole requests: the body arrives in chunks (as a
slow client or a chunked request sends it) and the application sees it whole, with its
length; a body whose Content-Length is in is not asked for again; a big or streaming response
is sent as the application yields it."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from sluice.asgi_bridge import (
    FIRST_BYTES,
    BodyTooLarge,
    body_receive,
    content_length,
    wsgi_app_as_asgi,
    wsgi_executor,
)


def _echo(environ, start_response):
    body = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"]))
    start_response("201 Created", [("Content-Type", "text/plain"),
                                   ("X-Seen", environ["PATH_INFO"])])
    return [body.upper()]


def _stream(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    yield b"a" * FIRST_BYTES
    yield b"b"


def _call(app, messages, *, path="/x", headers=((b"transfer-encoding", b"chunked"),)):
    sent = []

    async def receive():
        return messages.pop(0)  # IndexError: asked once more than the body needed

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "query_string": b"",
             "headers": list(headers), "server": ("127.0.0.1", 80),
             "client": ("127.0.0.1", 5000), "scheme": "http", "http_version": "1.1"}
    application = wsgi_app_as_asgi(app, executor=wsgi_executor(2), max_body=100)
    _run(application(scope, receive, send))
    return sent


def _run(coroutine):
    # In a thread of its own: another test may have left an event loop running in this one.
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


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


def _received(messages, limit=100, length=None):
    calls = []

    async def receive():
        calls.append(1)
        return messages.pop(0)

    headers = [] if length is None else [(b"content-length", str(length).encode())]
    return _run(body_receive({"headers": headers}, receive, limit)), len(calls)


def test_a_body_whose_declared_length_is_in_is_not_asked_for_again():
    # A server may mark a body's end only on one more receive() (ASGI allows it; granian does).
    chunks = [{"type": "http.request", "body": b"ab", "more_body": True},
              {"type": "http.request", "body": b"cd", "more_body": True},
              {"type": "http.request", "body": b"", "more_body": False}]
    assert _received(list(chunks), length=4) == (b"abcd", 2)
    assert _received(list(chunks), length=None) == (b"abcd", 3)  # chunked: read to its end
    assert _received([{"type": "http.request", "body": b"", "more_body": False}],
                     length=0) == (b"", 1)
    with pytest.raises(BodyTooLarge):
        _received([{"type": "http.request", "body": b"x" * 101, "more_body": True}], length=101)


def test_the_declared_length_is_read_off_the_headers():
    assert content_length([(b"host", b"a"), (b"content-length", b"17")]) == 17
    assert content_length([(b"transfer-encoding", b"chunked")]) is None
    assert content_length([(b"content-length", b"3"), (b"transfer-encoding", b"chunked")]) is None
    assert content_length([(b"content-length", b"-1")]) is None
    assert content_length([(b"content-length", b"1e3")]) is None


def test_the_bridge_reads_a_body_by_its_declared_length():
    sent = _call(_echo, [{"type": "http.request", "body": b"abcd", "more_body": True}],
                 headers=[(b"content-length", b"4")])
    assert sent[0]["status"] == 201
    assert b"".join(m.get("body", b"") for m in sent[1:]) == b"ABCD"


def test_the_lifespan_startup_runs_on_startup_once_before_it_completes():
    started, sent = [], []
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append((message["type"], len(started)))

    application = wsgi_app_as_asgi(_echo, executor=wsgi_executor(1), max_body=100,
                                   on_startup=lambda: started.append(1))
    _run(application({"type": "lifespan"}, receive, send))
    assert sent == [("lifespan.startup.complete", 1), ("lifespan.shutdown.complete", 1)]
