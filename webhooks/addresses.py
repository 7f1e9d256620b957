"""Which addresses a webhook may be delivered to: public ones only (the SSRF guard).

`ipaddress.is_global` alone is not enough. An IPv6 address can carry an IPv4 address inside
it, and a network that translates or tunnels it reaches that IPv4 address: NAT64
(64:ff9b::/96), 6to4 (2002::/16) and IPv4-mapped (::ffff:0:0/96) addresses are judged by the
IPv4 address they embed. Some forms are refused whatever they carry: IPv4-compatible ::/96
(deprecated, and some stacks route it as the IPv4 address), site-local fec0::/10 (deprecated,
private in practice), local-use NAT64 64:ff9b:1::/48 and Teredo 2001::/32 (its IPv4 is
obfuscated, and nobody serves webhooks over it).
"""

import ipaddress

IPv4 = ipaddress.IPv4Address
IPv6 = ipaddress.IPv6Address

_ALWAYS_REFUSED = tuple(ipaddress.ip_network(n) for n in (
    "::/96", "fec0::/10", "64:ff9b:1::/48", "2001::/32"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(ip: IPv6) -> IPv4 | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return IPv4(int(ip) & 0xFFFFFFFF)
    return None


def address_public(address: str) -> bool:
    """Whether `address` (an IPv4 or IPv6 literal) is a public unicast address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # a scope id (fe80::1%eth0) is local
    if isinstance(ip, IPv6):
        if any(ip in network for network in _ALWAYS_REFUSED):
            return False
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            return embedded.is_global
    return ip.is_global and not ip.is_multicast
