"""The wall-clock deadline transport: a requests adapter whose connections end on the clock.

Every request ends by a wall-clock deadline (Deadline), however slowly the receiver sends its
bytes, and goes to an address the guard vetted (GuardedAdapter): TLS still verifies the
certificate and sends SNI for the host name.
"""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3 import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.connection import HTTPConnection, HTTPSConnection

from app.outbound.errors import OutboundError, OutboundTimeout
from app.outbound.policy import AddressGuard

DEFAULT_PORTS = {"http": 80, "https": 443}


class Deadline:
    """A wall-clock limit on one request, enforced on the clock rather than per socket read.

    A socket timeout bounds each read, not the answer: a receiver that sends a byte just
    before each read times out would hold the request for as long as it likes. So once the
    time is up the process's deadline thread (Deadlines) shuts the socket of the connection
    in use (as urllib3's own HTTPResponse.shutdown does to interrupt a read from another
    thread); the blocked read then ends at once, whether it waits for the TLS handshake, the
    headers or the body. It holds the requests the thread sends inside its with block.
    """

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.expired = False
        self.closed = False
        self.lock = threading.Lock()
        self.connection: HTTPConnection | None = None
        _deadlines.watch(self)

    def __enter__(self) -> Deadline:
        _current.deadline = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
        _current.deadline = None

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


class DeadlineHTTPSConnection(DeadlineConnection, HTTPSConnection):
    """DeadlineConnection over TLS: the same two methods come first, then urllib3's TLS
    connection's own."""


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
