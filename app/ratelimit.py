"""Per-tenant rate limits (SPEC.md section 8): a fixed one-minute window per tenant, in Redis."""

import logging
import math
import threading
import time
from dataclasses import dataclass

from flask import Flask, Response, current_app, g, request
from redis import Redis, RedisError

from app.errors import RateLimited
from app.services import tenants as tenant_service

log = logging.getLogger(__name__)

WINDOW_MS = 60_000
KEY_PREFIX = "voiceagent:ratelimit:"
RETRY_REDIS_AFTER_S = 5.0
LOG_EVERY_S = 60.0


@dataclass
class Usage:
    limit: int
    count: int
    reset_at: float  # Unix seconds when the window ends

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.count)


class MemoryCounters:
    """Fixed windows in this process (no Redis, or Redis unreachable)."""

    def __init__(self) -> None:
        self._windows: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def hit(self, key: str) -> tuple[int, float]:
        now = time.time()
        with self._lock:
            count, reset_at = self._windows.get(key, (0, 0.0))
            if reset_at <= now:
                count, reset_at = 0, now + WINDOW_MS / 1000
                if len(self._windows) > 10_000:  # drop finished windows now and then
                    self._windows = {k: v for k, v in self._windows.items() if v[1] > now}
            self._windows[key] = (count + 1, reset_at)
        return count + 1, reset_at


class RedisCounters:
    """Fixed windows in Redis, shared by every process and host.

    A hit is one INCR: every request gets a count of its own, so the limit holds exactly
    across processes. The first hit of a window starts its expiry; when the window ends is
    read (PTTL) once per window by each process and kept, so every later hit is that one
    command. A key found without an expiry (set by hand, or an expiry lost between the two
    commands) gets one then.
    """

    def __init__(self, url: str) -> None:
        self.client = Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
        self.resets: dict[str, float] = {}  # key -> when its window ends (Unix seconds)

    def hit(self, key: str) -> tuple[int, float]:
        count = int(self.client.incr(key))
        now = time.time()
        reset_at = self.resets.get(key)
        if count == 1 or reset_at is None or reset_at <= now:
            reset_at = self.window_end(key, count, now)
        return count, reset_at

    def window_end(self, key: str, count: int, now: float) -> float:
        """When the key's window ends, starting its expiry if it has none; kept for later."""
        ttl_ms = -1 if count == 1 else int(self.client.pttl(key))
        if ttl_ms < 0:
            self.client.pexpire(key, WINDOW_MS)
            ttl_ms = WINDOW_MS
        if len(self.resets) > 10_000:  # drop finished windows now and then
            self.resets = {k: at for k, at in self.resets.items() if at > now}
        reset_at = self.resets[key] = now + ttl_ms / 1000
        return reset_at


class RateLimiter:
    """Counts in Redis when REDIS_URL is set, else in this process.

    If Redis stops answering, the process counts in memory (a warning at most once a
    minute) and tries Redis again RETRY_REDIS_AFTER_S later, so an outage never fails a
    request and never makes each request wait for a connect timeout.
    """

    def __init__(self, redis_url: str | None) -> None:
        self.memory = MemoryCounters()
        self.redis = RedisCounters(redis_url) if redis_url else None
        self._redis_down_until = 0.0
        self._last_warning: float | None = None

    def hit(self, tenant_id: str) -> tuple[int, float]:
        """This request's count in its tenant's window, and when the window ends."""
        key = KEY_PREFIX + tenant_id
        if self.redis is not None and time.monotonic() >= self._redis_down_until:
            try:
                return self.redis.hit(key)
            except RedisError as exc:
                now = time.monotonic()
                self._redis_down_until = now + RETRY_REDIS_AFTER_S
                if self._last_warning is None or now - self._last_warning >= LOG_EVERY_S:
                    self._last_warning = now
                    log.warning(
                        "rate-limit counters unreachable in Redis (%s); counting in this "
                        "process until it answers",
                        type(exc).__name__,
                    )
        return self.memory.hit(key)


def check_rate_limit() -> None:
    """before_request (after authentication): count the request against its tenant's window."""
    if not getattr(current_app.blueprints.get(request.blueprint or ""), "rate_limited", False):
        return
    tenant = g.get("tenant")
    if tenant is None or not current_app.config["RATELIMIT_ENABLED"]:
        return
    limiter: RateLimiter = current_app.extensions["rate_limiter"]
    limit = tenant_service.rate_limit_of(tenant)  # read per request: a plan change applies
    count, reset_at = limiter.hit(tenant.id)
    usage = g.rate_usage = Usage(limit=limit, count=count, reset_at=reset_at)
    if usage.count > usage.limit:
        retry_after = max(1, math.ceil(usage.reset_at - time.time()))
        raise RateLimited(
            f"Rate limit of {usage.limit} requests per minute exceeded; "
            f"retry in {retry_after} seconds.",
            headers={"Retry-After": str(retry_after)},
        )


def add_rate_limit_headers(response: Response) -> Response:
    usage: Usage | None = g.get("rate_usage")
    if usage is not None:
        response.headers["X-RateLimit-Limit"] = str(usage.limit)
        response.headers["X-RateLimit-Remaining"] = str(usage.remaining)
        response.headers["X-RateLimit-Reset"] = str(math.ceil(usage.reset_at))
    return response


def init_app(app: Flask) -> None:
    """Register after the authentication hook, so g.tenant is known when counting."""
    app.extensions["rate_limiter"] = RateLimiter(app.config.get("REDIS_URL"))
    app.before_request(check_rate_limit)
    app.after_request(add_rate_limit_headers)
