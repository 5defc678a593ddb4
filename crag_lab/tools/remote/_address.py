"""The address guard: which hosts a remote tool may reach.

A target is refused when any address it resolves to is loopback, private, link-local, multicast,
reserved or unspecified (IPv6 forms that embed an IPv4 address are judged by that address too),
unless ``allow_private_networks`` is set or the host is in ``allowed_hosts``.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def normalise_host(host: str) -> str:
    """Lowercase a host name and write IP literals one canonical way (``[::1]`` -> ``::1``)."""
    host = host.strip().strip("[]").rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def address_kind(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public address (``"loopback"``, ``"private"``...), or ``None`` if it is.

    IPv6 forms that embed an IPv4 address (mapped, 6to4, Teredo, NAT64) are judged by that
    address too, so ``::ffff:127.0.0.1`` is loopback.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        embedded: list[ipaddress.IPv4Address] = []
        if ip.ipv4_mapped is not None:
            embedded.append(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            embedded.append(ip.sixtofour)
        if ip.teredo is not None:
            embedded.extend(ip.teredo)
        if ip in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        for inner in embedded:
            kind = address_kind(inner)
            if kind is not None:
                return kind
        if ip.ipv4_mapped is not None:
            return None
    checks = (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("non-global", not ip.is_global),
    )
    return next((kind for kind, hit in checks if hit), None)

