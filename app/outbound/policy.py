"""The address policy: which URLs outgoing requests may go to, and which addresses they reach.

A URL is checked when it is registered and again before every request (check_url); the host
it names is resolved where requests picks the connection (AddressGuard, through the
transport's GuardedAdapter), and every address vetted, so a DNS answer that changes between a
check and the connect cannot reach an internal host (SSRF).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import idna
import requests

from app.outbound.errors import BlockedAddress, UnsafeURL

MAX_URL_LENGTH = 2048
MAX_HOST_NAME_LENGTH = 253  # RFC 1035, written without the root's trailing dot
MAX_LABEL_LENGTH = 63
ACE_PREFIX = "xn--"  # of an internationalised label written in ASCII (an A-label)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

# Named explicitly rather than trusting ipaddress.is_private alone, whose tables differ
# between Python patch releases.
BLOCKED_NETWORKS = tuple(
    ipaddress.ip_network(network)
    for network in (
        "0.0.0.0/8",  # "this network", includes the unspecified address
        "10.0.0.0/8",  # RFC 1918
        "100.64.0.0/10",  # carrier-grade NAT, often routes to internal workloads
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, includes the cloud metadata 169.254.169.254
        "172.16.0.0/12",  # RFC 1918
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",  # RFC 1918
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, includes broadcast
        "::/128",  # unspecified
        "::1/128",  # loopback
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments, includes Teredo 2001::/32
        "2001:db8::/32",  # documentation
        "fc00::/7",  # unique local addresses
        "fe80::/10",  # link-local
        "fec0::/10",  # deprecated site-local
        "ff00::/8",  # multicast
    )
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


# What a name that resolves to a blocked address and one that does not resolve both report.
NO_PUBLIC_ADDRESS = "The host name does not resolve to a public address."


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a 6to4, Teredo or NAT64 address leads to."""
    found = []
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    if address in NAT64:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def is_blocked(address: IPAddress) -> bool:
    """True for any address that is not plainly public and unicast."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None or address in IPV4_COMPATIBLE:
            return True  # IPv4 written as IPv6: no public receiver is reached this way
        if any(is_blocked(inner) for inner in embedded_ipv4(address)):
            return True
    flags = (
        address.is_private,
        address.is_loopback,
        address.is_link_local,
        address.is_multicast,
        address.is_reserved,
        address.is_unspecified,
    )
    return any(flags) or any(address in network for network in BLOCKED_NETWORKS)


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_loopback_name(host: str) -> bool:
    """localhost and the names under it, loopback by definition (RFC 6761): refused by name,
    which tells nothing about the service's resolver."""
    name = host.lower()
    return name == "localhost" or name.endswith(".localhost")


def canonical_host(host: str) -> str:
    """host as the guard resolves and vets it; UnsafeURL unless an IP address or a host name.

    IPv6 brackets and the root's trailing dot are dropped, so "localhost." is localhost and
    "127.0.0.1." is 127.0.0.1 (a resolver would take "127.0.0.1." for a name to ask DNS, whose
    answer need not be the address it reads as). A name is ASCII, as requests sends it (see
    target_host), with labels of 1 to 63 characters and at most 253 characters in all.
    """
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    name = host.removesuffix(".")
    if is_ip_literal(name):
        return name
    if not name.isascii():
        raise UnsafeURL("The URL's host is not a valid host name (it is not ASCII).")
    if len(name) > MAX_HOST_NAME_LENGTH:
        raise UnsafeURL(
            f"The URL's host is not a valid host name (over {MAX_HOST_NAME_LENGTH} characters)."
        )
    if not all(0 < len(label) <= MAX_LABEL_LENGTH for label in name.split(".")):
        raise UnsafeURL(
            "The URL's host is not a valid host name (a label is empty or over "
            f"{MAX_LABEL_LENGTH} characters)."
        )
    for label in name.split("."):
        if label.lower().startswith(ACE_PREFIX) and not is_decodable_a_label(label):
            raise UnsafeURL(
                f"The URL's host is not a valid host name ({label} is not a valid "
                "internationalised label)."
            )
    return name


def is_decodable_a_label(label: str) -> bool:
    """Whether an xn-- label decodes to a name, both by IDNA 2008 (the idna package, which
    urllib3 encodes names with) and by Python's own codec (which socket and ssl use): one
    that does not ("xn--", "xn--a") names no host either could ever send to."""
    try:
        idna.decode(label)
        label.lower().encode("ascii").decode("idna")
    except (idna.IDNAError, UnicodeError):
        return False
    return True


def target_host(url: str) -> str:
    """The host the sender resolves and vets for url; UnsafeURL when it could not send to it.

    requests prepares a URL with urllib3's parser, which decodes percent-escapes of unreserved
    characters (%31 is 1, %2e is .), lowers the case and encodes a non-ASCII label by IDNA 2008
    (refusing one that needs UTS 46 mapping first, such as full-width letters), and its adapter
    reads the host back from the prepared URL. The same two steps, by the same code, give the
    host here, so what is vetted at registration is what the sender connects to.
    """
    prepared = requests.PreparedRequest()
    try:
        prepared.prepare_url(url, None)
        host = urlsplit(str(prepared.url)).hostname
    except (requests.RequestException, ValueError) as exc:
        raise UnsafeURL(f"The URL's host is not a valid host name ({exc}).") from None
    if not host:
        raise UnsafeURL("The URL has no host.")
    return canonical_host(host)


def resolve(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for host (IPv4 and IPv6)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(
        dict.fromkeys(
            str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)
        )
    )


@dataclass(frozen=True)
class AddressGuard:
    """Resolves a host and refuses it when any of its addresses is blocked."""

    allow_private: bool = False
    resolver: Resolver = resolve

    def vet(self, host: str, addresses: Iterable[str]) -> None:
        if self.allow_private:
            return
        for address in addresses:
            if is_blocked(ipaddress.ip_address(address)):
                # A name's address is not told, nor whether it resolved at all: the answers
                # of the service's own resolver would map the internal network for whoever
                # registers names to try.
                if is_ip_literal(host):
                    raise BlockedAddress(f"{host} is a private or reserved address.")
                raise BlockedAddress(NO_PUBLIC_ADDRESS)

    def addresses(self, host: str, port: int) -> list[str]:
        """The vetted addresses of host; raises UnsafeURL (BlockedAddress) or socket.gaierror.

        Whatever else resolving raises (the resolver's UnicodeError for a name it cannot
        encode, a ValueError for an answer that is no address) is an UnsafeURL too, so the
        sender reports it as an outbound error like any other.
        """
        host = canonical_host(host)
        if is_loopback_name(host) and not self.allow_private:
            raise BlockedAddress(f"{host} is a private or reserved address.")
        try:
            found = [host] if is_ip_literal(host) else self.resolver(host, port)
            if not found:
                raise socket.gaierror(f"{host} has no address")
            self.vet(host, found)
        except ValueError as exc:
            raise UnsafeURL(f"{host} cannot be resolved to an address: {exc}.") from exc
        return found


def check_url(url: str, *, allow_private: bool) -> None:
    """Raise UnsafeURL unless url may receive requests (also used when it is registered).

    https only (http too when private URLs are allowed), no user info, at most 2,048
    characters, and a host the sender can send to (target_host: an IP address or a valid
    host name, however written) whatever the policy, and, unless private URLs are allowed, no
    blocked IP address. A host name is not resolved here: one that resolves to a blocked
    address and one that does not resolve are registered alike (answering differently would
    map the internal network), and the sender resolves and vets the name on every request.
    """
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeURL(f"The URL is longer than {MAX_URL_LENGTH} characters.")
    if any(char.isspace() or ord(char) < 32 for char in url):
        raise UnsafeURL("The URL must not contain spaces or control characters.")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise UnsafeURL(f"The URL is not valid: {exc}.") from None
    schemes = ("http", "https") if allow_private else ("https",)
    if parts.scheme.lower() not in schemes:
        raise UnsafeURL("The URL must start with " + " or ".join(f"{s}://" for s in schemes) + ".")
    if "@" in parts.netloc:
        raise UnsafeURL("The URL must not contain a user name or password.")
    if not parts.hostname:
        raise UnsafeURL("The URL has no host.")
    host = target_host(url)  # under any policy: no request could ever be sent otherwise
    if is_loopback_name(host) and not allow_private:
        raise BlockedAddress(f"{host} is a private or reserved address.")
    if is_ip_literal(host) and not allow_private:
        AddressGuard().vet(host, [host])


def require_safe_url(url: str, *, field: str) -> None:
    """ValidationFailed naming field unless url may be called (the rules of check_url)."""
    from flask import current_app

    from app.errors import ValidationFailed

    try:
        check_url(url, allow_private=bool(current_app.config["ALLOW_PRIVATE_URLS"]))
    except UnsafeURL as exc:
        raise ValidationFailed(f"Invalid value for {field}.", details={field: [str(exc)]}) from None
