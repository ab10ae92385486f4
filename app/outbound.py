"""Outgoing HTTP to tenant URLs: SSRF guard on the connected address, timeouts, capped reads.

Webhook deliveries and function calls both go through send(). The guard works where
requests picks the connection for a request: the host is resolved, every address is vetted,
and the request goes to a vetted address, so a DNS answer that changes between a check and
the connect cannot reach an internal host. TLS still verifies the certificate and sends SNI
for the host name. Every request ends by a wall-clock deadline (Deadline), however slowly
the receiver sends its bytes.
"""

from __future__ import annotations

import heapq
import ipaddress
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any
from urllib.parse import urlsplit

import idna
import requests
from requests.adapters import HTTPAdapter
from urllib3 import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.connection import HTTPConnection, HTTPSConnection

MAX_URL_LENGTH = 2048
MAX_RESPONSE_BYTES = 64 * 1024
MAX_HOST_NAME_LENGTH = 253  # RFC 1035, written without the root's trailing dot
MAX_LABEL_LENGTH = 63
ACE_PREFIX = "xn--"  # of an internationalised label written in ASCII (an A-label)
DEFAULT_PORTS = {"http": 80, "https": 443}

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


class OutboundError(Exception):
    """Base of every error of an outgoing request."""


class UnsafeURL(OutboundError):
    """The URL is not allowed: scheme, user info, length, an invalid host or a blocked one."""


class BlockedAddress(UnsafeURL):
    """The host is, or resolves to, a private, loopback, link-local or reserved address."""


class OutboundTimeout(OutboundError):
    """The receiver did not connect or answer in time."""


class OutboundConnectionError(OutboundError):
    """The receiver could not be resolved or reached, or TLS failed."""


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


class Deadline:
    """A wall-clock limit on one request, enforced on the clock rather than per socket read.

    A socket timeout bounds each read, not the answer: a receiver that sends a byte just
    before each read times out would hold the request for as long as it likes. So once the
    time is up the process's deadline thread (Deadlines) shuts the socket of the connection
    in use (as urllib3's own HTTPResponse.shutdown does to interrupt a read from another
    thread); the blocked read then ends at once, whether it waits for the TLS handshake, the
    headers or the body.
    """

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.expired = False
        self.closed = False
        self.lock = threading.Lock()
        self.connection: HTTPConnection | None = None
        _deadlines.watch(self)

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def watch(self, connection: HTTPConnection) -> None:
        """The request now goes over this connection: it is the one cut off at the deadline."""
        with self.lock:
            if self.expired:
                raise OutboundTimeout("The receiver did not answer in time.")
            self.connection = connection

    def expire(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.expired = True
            sock = self.connection.sock if self.connection is not None else None
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # closed meanwhile: nothing left to interrupt

    def close(self) -> None:
        """The request is over: the deadline must not touch the connection any more (it may
        serve another request from the pool)."""
        with self.lock:
            self.closed = True
            self.connection = None


class Deadlines:
    """The deadlines of a process's requests, and the one thread that expires them in turn.

    One long-lived thread rather than a timer thread per request: starting a thread costs
    each request a hand-over between threads, which a busy process pays in latency. A
    closed deadline stays in the heap until its time and is then dropped. A forked child
    starts with none (the thread is not copied) and starts its own on first use.
    """

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.heap: list[tuple[float, int, Deadline]] = []
        self.order = itertools.count()
        self.thread: threading.Thread | None = None

    def watch(self, deadline: Deadline) -> None:
        with self.condition:
            if self.thread is None:
                self.thread = threading.Thread(target=self.run, name="deadlines", daemon=True)
                self.thread.start()
            heapq.heappush(self.heap, (deadline.at, next(self.order), deadline))
            if self.heap[0][2] is deadline:  # sooner than the thread waits for: wake it
                self.condition.notify()

    def run(self) -> None:
        while True:
            due: list[Deadline] = []
            with self.condition:
                now = time.monotonic()
                while self.heap and self.heap[0][0] <= now:
                    due.append(heapq.heappop(self.heap)[2])
                if not due:
                    self.condition.wait(self.heap[0][0] - now if self.heap else None)
            for deadline in due:
                deadline.expire()


_deadlines = Deadlines()


def _reset_deadlines() -> None:
    global _deadlines
    _deadlines = Deadlines()


os.register_at_fork(after_in_child=_reset_deadlines)


_current = threading.local()  # the Deadline of the request this thread is sending


def _watch(connection: HTTPConnection) -> None:
    deadline: Deadline | None = getattr(_current, "deadline", None)
    if deadline is not None:
        deadline.watch(connection)


class DeadlineConnection(HTTPConnection):
    """urllib3's connection, put under the sending thread's Deadline when it connects (before
    a TLS handshake) and when it sends a request (a kept-alive connection too)."""

    def connect(self) -> None:
        _watch(self)
        super().connect()

    def request(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        _watch(self)
        super().request(*args, **kwargs)


class DeadlineHTTPSConnection(HTTPSConnection):
    """DeadlineConnection over TLS."""

    def connect(self) -> None:
        _watch(self)
        super().connect()

    def request(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        _watch(self)
        super().request(*args, **kwargs)


class DeadlinePool(HTTPConnectionPool):
    ConnectionCls = DeadlineConnection


class DeadlineHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = DeadlineHTTPSConnection


class GuardedAdapter(HTTPAdapter):
    """A requests adapter that sends each request to an address the guard vetted.

    requests asks its adapter which connection pool a request goes to
    (build_connection_pool_key_attributes, the hook it documents for changing that): here
    the host is resolved, every address vetted, and the pool is the first address's, so an
    answer that changes after the check is never connected to. The host name still names
    the request (the Host header) and, over TLS, the server (SNI) and its certificate.
    """

    def __init__(self, guard: AddressGuard) -> None:
        self.guard = guard
        super().__init__(max_retries=0, pool_maxsize=20)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        """Pools of connections that keep to the sending thread's Deadline."""
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": DeadlinePool, "https": DeadlineHTTPSPool}

    def build_connection_pool_key_attributes(
        self, request: requests.PreparedRequest, verify: Any, cert: Any = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(
            request, verify, cert
        )
        host, scheme = host_params["host"], host_params["scheme"]
        address = self.guard.addresses(host, host_params["port"] or DEFAULT_PORTS[scheme])[0]
        host_params["host"] = f"[{address}]" if ":" in address else address
        if scheme == "https":
            pool_kwargs["server_hostname"] = host  # SNI, and the name the certificate must match
        return host_params, pool_kwargs

    def add_headers(self, request: requests.PreparedRequest, **kwargs: Any) -> None:
        """The Host header names the URL's host, not the address the pool connects to."""
        request.headers["Host"] = urlsplit(request.url).netloc

    def get_connection(self, url, proxies=None):  # type: ignore[no-untyped-def]
        # requests' deprecated way to a pool, which skips the hook above: never taken.
        raise OutboundError("Connections are only chosen through the address guard.")

    def proxy_manager_for(self, proxy, **proxy_kwargs):  # type: ignore[no-untyped-def]
        raise OutboundError("Outgoing requests never use a proxy.")


@dataclass
class Response:
    """What came back: status, headers, the first 64 KiB of the body, and how long it took."""

    status_code: int
    headers: dict[str, str]
    body: bytes
    duration_ms: int
    truncated: bool

    def text(self, limit: int | None = None) -> str:
        return self.body[:limit].decode("utf-8", errors="replace")


def require_safe_url(url: str, *, field: str) -> None:
    """ValidationFailed naming field unless url may be called (the rules of check_url)."""
    from flask import current_app

    from app.errors import ValidationFailed

    try:
        check_url(url, allow_private=bool(current_app.config["ALLOW_PRIVATE_URLS"]))
    except UnsafeURL as exc:
        raise ValidationFailed(f"Invalid value for {field}.", details={field: [str(exc)]}) from None


def user_agent() -> str:
    try:
        version = metadata.version("voice-agent-api")
    except metadata.PackageNotFoundError:
        version = "0"
    return f"VoiceAgentAPI/{version}"


class Sender:
    """One requests Session with the guard mounted, no proxies from the environment."""

    def __init__(self, *, allow_private: bool, resolver: Resolver = resolve, verify: Any = True):
        self.allow_private = allow_private
        self.guard = AddressGuard(allow_private=allow_private, resolver=resolver)
        self.session = requests.Session()
        self.session.trust_env = False  # HTTP(S)_PROXY, NO_PROXY and .netrc are ignored
        self.session.verify = verify
        self.session.headers["User-Agent"] = user_agent()
        adapter = GuardedAdapter(self.guard)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def send(
        self,
        method: str,
        url: str,
        *,
        timeout: tuple[float, float],
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> Response:
        """Send one request; any HTTP status is a Response, anything else an OutboundError.

        timeout: (seconds to connect, seconds for the whole exchange), both on the wall
        clock: connecting, sending, and receiving the headers and the body all end within
        the second however slowly the receiver sends its bytes (Deadline).
        """
        check_url(url, allow_private=self.allow_private)
        started = time.monotonic()
        connect, total = timeout
        deadline = _current.deadline = Deadline(total)
        try:
            response = self.session.request(
                method,
                url,
                data=body,
                headers=headers,
                params=params,
                # A socket timeout as long as the whole exchange: the Deadline cuts it shorter.
                timeout=(min(connect, total), total),
                allow_redirects=False,
                stream=True,
            )
            try:
                content, truncated = _read_capped(response)
            finally:
                response.close()
            if deadline.expired:  # an answer cut short by the deadline is no answer
                raise OutboundTimeout("The receiver took too long to send its answer.")
        except OutboundError:
            raise
        except (requests.RequestException, OSError) as exc:
            if deadline.expired:  # the read the Deadline interrupted failed
                raise OutboundTimeout("The receiver did not answer in time.") from exc
            if isinstance(exc, requests.Timeout):
                reason = _describe(exc, "The receiver did not answer in time.")
                raise OutboundTimeout(reason) from exc
            if "timed out" in str(exc).lower():
                raise OutboundTimeout("The receiver did not answer in time.") from exc
            raise OutboundConnectionError(_describe(exc, "The receiver is unreachable.")) from exc
        finally:
            deadline.close()
            _current.deadline = None
        return Response(
            status_code=response.status_code,
            headers=dict(response.headers),
            body=content,
            duration_ms=int((time.monotonic() - started) * 1000),
            truncated=truncated,
        )


def _read_capped(response: requests.Response) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_content(chunk_size=8192):
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_RESPONSE_BYTES:
            return b"".join(chunks)[:MAX_RESPONSE_BYTES], True
    return b"".join(chunks), False


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost error under requests' and urllib3's wrappers."""
    while True:
        inner = getattr(exc, "reason", None)  # urllib3's MaxRetryError
        if not isinstance(inner, BaseException) and exc.args:
            inner = exc.args[0]  # requests wraps urllib3's error as its first argument
        if not isinstance(inner, BaseException):
            inner = exc.__cause__
        if not isinstance(inner, BaseException) or inner is exc:
            return exc
        exc = inner


def _describe(exc: Exception, fallback: str) -> str:
    """A short reason for the delivery log, without urllib3's object reprs."""
    reason = _root_cause(exc)
    text = str(reason).strip()
    if "ssl" in type(reason).__name__.lower() or "certificate" in text.lower():
        return "TLS failed: " + text[:200]
    if isinstance(reason, socket.gaierror):
        return NO_PUBLIC_ADDRESS
    if isinstance(reason, ConnectionRefusedError):
        return "The connection was refused."
    return (text[:200] or fallback) if not text.startswith("<") else fallback


@cache
def sender(allow_private: bool) -> Sender:
    """The process's sender for a policy (one Session per process)."""
    return Sender(allow_private=allow_private)
