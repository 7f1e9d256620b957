"""The client's address, behind the load balancers the deployment trusts.

A request's peer (REMOTE_ADDR) is the client only when nothing stands in between. Behind a load
balancer it is the balancer, and every client would share one address: the sign-in throttle
would lock everyone out together. `X-Forwarded-For` names the client, but anyone can send the
header, so it is read only when the peer is one of SLUICE_TRUSTED_PROXIES, and only as far as
trusted hops reach: walking the list from the right (the hop nearest to us), the first address
that is not a trusted proxy is the client. Each trusted proxy appends the address it got the
request from, so that address was written by a proxy we trust; whatever a client put further
left is never reached. A malformed entry stops the walk at the last trusted hop.

ClientAddressMiddleware, first in MIDDLEWARE, rewrites REMOTE_ADDR to the client (the peer is
kept in META["SLUICE_PEER_ADDR"]), so everything after it (the sign-in throttle, rate limits,
logs) reads one answer.
"""

import ipaddress
import logging
from functools import lru_cache

from django.conf import settings

logger = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry) for entry in entries)


def _trusted(address: Address, networks: tuple[Network, ...]) -> bool:
    return any(address.version == network.version and address in network
               for network in networks)


def _parse(hop: str) -> Address | None:
    """An address as proxies write it: `a.b.c.d`, `a.b.c.d:port`, `v6`, `[v6]` or `[v6]:port`."""
    hop = hop.strip()
    if hop.startswith("["):
        hop = hop[1:].partition("]")[0]
    elif hop.count(":") == 1:
        hop = hop.partition(":")[0]
    try:
        return ipaddress.ip_address(hop)
    except ValueError:
        return None


def client_address(*, peer: str, forwarded_for: str, trusted: tuple[str, ...]) -> str:
    """The client's address: `peer`, or the rightmost untrusted hop of `forwarded_for` when
    `peer` is a trusted proxy."""
    networks = _networks(trusted)
    nearest = _parse(peer)
    if nearest is None or not networks or not _trusted(nearest, networks):
        return peer
    for hop in reversed([h for h in forwarded_for.split(",") if h.strip()]):
        address = _parse(hop)
        if address is None:
            break
        if not _trusted(address, networks):
            return str(address)
        nearest = address
    return str(nearest)


def request_client_address(request) -> str:
    """The client's address of a request that went through ClientAddressMiddleware."""
    return request.META.get("REMOTE_ADDR", "") if request is not None else ""


_warned = False


def _warn_untrusted_forwarder(peer: str) -> None:
    """A private peer that forwards for someone is almost surely our own load balancer: say
    once per process how to trust it, since until then every client shares its address."""
    global _warned
    address = _parse(peer)
    if not _warned and address is not None and address.is_private and not address.is_loopback:
        _warned = True
        logger.warning("X-Forwarded-For from %s, which is not in SLUICE_TRUSTED_PROXIES: the "
                       "header is ignored and clients are seen as %s. If it is your load "
                       "balancer, add it to SLUICE_TRUSTED_PROXIES.", peer, peer)


class ClientAddressMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        peer = request.META.get("REMOTE_ADDR", "")
        forwarded_for = request.META.get("HTTP_X_FORWARDED_FOR", "")
        if forwarded_for:
            client = client_address(peer=peer, forwarded_for=forwarded_for,
                                    trusted=settings.TRUSTED_PROXIES)
            if client != peer:
                request.META["SLUICE_PEER_ADDR"] = peer
                request.META["REMOTE_ADDR"] = client
            elif not settings.TRUSTED_PROXIES:
                _warn_untrusted_forwarder(peer)
        return self.get_response(request)
