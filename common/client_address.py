"""The address a request came from, trusting ``X-Forwarded-For`` only behind a configured proxy.

The login throttle and the API's anonymous rate limit key on the client's address. Without a proxy
in front that is ``REMOTE_ADDR``, and a client-sent ``X-Forwarded-For`` is ignored (anyone can write
one, so trusting it would let a guesser pick a fresh address for every attempt). Behind a reverse
proxy every request's ``REMOTE_ADDR`` is the proxy's, so ``CONCORD_TRUSTED_PROXIES`` lists the
proxies' networks (CIDRs). When ``REMOTE_ADDR`` is in one of them, ``X-Forwarded-For`` is read from
the right (each proxy appends the address it saw) past every trusted hop; the first address that is
not a trusted proxy is the client. A chain of proxies (load balancer, then nginx) is covered by
listing each one's network.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

MALFORMED = "malformed-x-forwarded-for"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=8)
def trusted_networks(cidrs: tuple[str, ...]) -> tuple[Network, ...]:
    """Parse ``CONCORD_TRUSTED_PROXIES`` ("10.0.0.0/8", "192.168.1.7", "::1"); a bad entry is fatal."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError as error:
            raise ImproperlyConfigured(
                f"CONCORD_TRUSTED_PROXIES: {cidr!r} is not an IP address or network ({error})"
            ) from None
    return tuple(networks)


def _parse(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address.strip())
    except ValueError:
        return None


def _is_trusted(address: str, networks: Iterable[Network]) -> bool:
    parsed = _parse(address)
    return parsed is not None and any(parsed in network for network in networks)


def client_address(request: HttpRequest) -> str:
    """The client's address: ``REMOTE_ADDR``, or behind a trusted proxy the nearest untrusted hop of
    ``X-Forwarded-For``. "unknown" when there is none. A malformed entry before the first untrusted
    hop gives ``MALFORMED``: a proxy never writes one, so a client did, and its attempts are counted
    under that one name (not under the proxy's address, which every client shares)."""
    remote = request.META.get("REMOTE_ADDR") or "unknown"
    networks = trusted_networks(tuple(settings.CONCORD_TRUSTED_PROXIES))
    if not networks or not _is_trusted(remote, networks):
        return remote
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    client = remote
    for hop in reversed([part.strip() for part in forwarded.split(",") if part.strip()]):
        if _parse(hop) is None:
            return MALFORMED
        client = hop
        if not _is_trusted(hop, networks):
            break
    return client
