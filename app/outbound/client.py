"""The sender: webhook deliveries and function calls send their requests through it.

One requests Session per process and policy, with the guarded, deadline-bound adapter
mounted and no proxies; any HTTP status is an answer, of which only the first 64 KiB are
read, and anything else an OutboundError with a short reason for the delivery log.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any

import requests

from app.outbound.errors import OutboundConnectionError, OutboundError, OutboundTimeout
from app.outbound.policy import NO_PUBLIC_ADDRESS, AddressGuard, Resolver, check_url, resolve
from app.outbound.transport import Deadline, GuardedAdapter

MAX_RESPONSE_BYTES = 64 * 1024


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
        with Deadline(total) as deadline:
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
                reason = _describe(exc, "The receiver is unreachable.")
                raise OutboundConnectionError(reason) from exc
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
