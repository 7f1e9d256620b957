"""One webhook POST, bounded in time and in what it reads.

- A total deadline (SLUICE_WEBHOOK_DEADLINE_SECONDS) covers everything: resolving the host,
  connecting, sending, the status line and headers, and the part of the body that is read.
  A per-read timeout alone lets an endpoint that sends a byte every few seconds hold a
  worker for ever; the deadline is enforced by the event loop around the whole exchange, so
  it ends the attempt at any await, wherever the endpoint stalls.
- Only the status matters: a 2xx body is not read at all; of another answer's body at most
  RESPONSE_EXCERPT_BYTES are read (for the delivery's error message), then the connection is
  dropped. A huge answer costs one read, a slow one at most the rest of the deadline.
- The SSRF guard: the host is resolved once, every address must be public
  (webhooks/addresses.py; SLUICE_WEBHOOKS_ALLOW_PRIVATE lifts this for development and
  tests), and the request goes to the checked address with the name as Host and TLS SNI, so
  a name cannot be re-pointed at an internal address between check and connection.
- Redirects are not followed.

Workers are synchronous (Celery's prefork): each POST runs on an event loop of its own, in a
thread of its own when the calling thread already runs one.
"""

import asyncio
import contextlib
import socket
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings

from webhooks.addresses import address_public

RESPONSE_EXCERPT_BYTES = 1024
# The excerpt's read ends this much before the deadline, which then never fires after a status.
EXCERPT_MARGIN_SECONDS = 0.1


class DeliveryFailed(Exception):
    pass


class DeliveryTooSlow(DeliveryFailed):
    """The endpoint did not answer within the deadline: it held a worker the whole time."""


@dataclass(frozen=True)
class Answer:
    status: int
    excerpt: str  # the body's first RESPONSE_EXCERPT_BYTES, for error messages


def _address_allowed(address: str) -> bool:
    return settings.WEBHOOKS_ALLOW_PRIVATE or address_public(address)


async def _pinned(url: str) -> tuple[str, str, str]:
    """(url with the checked address as host, Host header, SNI name)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port,
                                                             type=socket.SOCK_STREAM)
    except OSError as exc:
        raise DeliveryFailed(f"cannot resolve {host}: {exc}") from exc
    addresses = [info[4][0] for info in infos]
    if not addresses or not all(_address_allowed(a) for a in addresses):
        raise DeliveryFailed(f"{host} resolves to a private or reserved address")
    address = addresses[0]
    netloc = f"[{address}]" if ":" in address else address
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc)), parts.netloc.rpartition("@")[2], host


async def _excerpt_read(response: httpx.Response, excerpt: bytearray) -> None:
    """Into `excerpt`, so what came is kept when the read is cut short."""
    async for chunk in response.aiter_raw():
        excerpt += chunk
        if len(excerpt) >= RESPONSE_EXCERPT_BYTES:
            return  # leaving the request's block drops the connection: the rest is never read


async def _post(url: str, body: bytes, headers: dict[str, str], deadline: float,
                ends_at: float) -> Answer:
    target, host_header, sni = await _pinned(url)
    # The deadline bounds the whole; these only make each step fail early and say which.
    timeout = httpx.Timeout(deadline, connect=min(5.0, deadline))
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client, \
            client.stream("POST", target, content=body,
                          headers={**headers, "host": host_header},
                          extensions={"sni_hostname": sni}) as response:
        if 200 <= response.status_code < 300:
            return Answer(status=response.status_code, excerpt="")  # the body is not needed
        # A failure's body says why, if it comes in time: the status is known already, so a
        # slow body shortens the excerpt but does not make the answer too slow.
        excerpt = bytearray()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(ends_at - EXCERPT_MARGIN_SECONDS):
                await _excerpt_read(response, excerpt)
        return Answer(status=response.status_code,
                      excerpt=excerpt[:RESPONSE_EXCERPT_BYTES].decode(errors="replace"))


async def _bounded(url: str, body: bytes, headers: dict[str, str], deadline: float) -> Answer:
    ends_at = asyncio.get_running_loop().time() + deadline
    try:
        async with asyncio.timeout_at(ends_at):
            return await _post(url, body, headers, deadline, ends_at)
    except TimeoutError:
        raise DeliveryTooSlow(f"no complete answer within the {deadline:g} s deadline") \
            from None
    except httpx.TimeoutException as exc:
        raise DeliveryTooSlow(f"{type(exc).__name__}: {exc}") from exc
    except httpx.HTTPError as exc:
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from exc


def _run(coroutine: Coroutine) -> Answer:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def webhook_post(*, url: str, body: bytes, headers: dict[str, str]) -> Answer:
    """POST `body` to `url`; the answer's status and excerpt. DeliveryFailed when nothing
    answered (DeliveryTooSlow when not within the deadline)."""
    return _run(_bounded(url, body, headers, float(settings.WEBHOOK_DEADLINE_SECONDS)))
