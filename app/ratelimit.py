"""Per-tenant rate limits (SPEC.md section 8): one fixed one-minute window per tenant, shared by
all its keys and all tenant API routes.

Counters live in Redis when REDIS_URL is set, so every process and host shares them; one Lua
script increments the counter, starts the window and reads its remaining time in a single
round trip. Without Redis they live in this process's memory. If Redis stops answering, each
process keeps serving with its in-memory counters (logged at most once a minute) and goes back
to Redis a few seconds later.

Flask-Limiter was measured first: its three Redis round trips and per-request limit
resolution cost more than the 10 % throughput budget on the cheapest endpoint.
"""

import logging
import math
import os
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

# Returns the count after this hit and the milliseconds left in the window.
HIT_SCRIPT = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]); ttl = tonumber(ARGV[1]) end
return {count, ttl}
"""


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
    """Fixed windows in Redis, shared by every process: one round trip per hit.

    Each thread keeps a connection of its own and sends the script's EVALSHA on it directly:
    redis-py's command path (pool checkout, retry wrapper, script object) cost as much CPU
    as the rest of the hit. An error on that connection drops it, and the hit goes through
    the client, which loads the script into a Redis that lost it, reconnects and retries,
    or fails as before (RateLimiter then counts in memory).
    """

    def __init__(self, url: str) -> None:
        self._client = Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
        self._script = self._client.register_script(HIT_SCRIPT)
        self._held = threading.local()

    def hit(self, key: str) -> tuple[int, float]:
        connection = getattr(self._held, "connection", None)
        if connection is not None and connection.pid == os.getpid():
            try:
                connection.send_command("EVALSHA", self._script.sha, 1, key, WINDOW_MS)
                count, ttl_ms = connection.read_response()
                return int(count), time.time() + int(ttl_ms) / 1000
            except (RedisError, OSError):
                connection.disconnect()
        self._held.connection = None
        count, ttl_ms = self._script(keys=[key], args=[WINDOW_MS])
        self._held.connection = self._client.connection_pool.make_connection()
        return int(count), time.time() + int(ttl_ms) / 1000


class RateLimiter:
    def __init__(self, redis_url: str | None) -> None:
        self.memory = MemoryCounters()
        self.redis = RedisCounters(redis_url) if redis_url else None
        self._redis_down_until = 0.0
        self._last_warning = 0.0

    def hit(self, tenant_id: str) -> tuple[int, float]:
        key = KEY_PREFIX + tenant_id
        if self.redis is not None and time.monotonic() >= self._redis_down_until:
            try:
                return self.redis.hit(key)
            except RedisError as exc:
                self._redis_down_until = time.monotonic() + RETRY_REDIS_AFTER_S
                if time.monotonic() - self._last_warning >= LOG_EVERY_S or not self._last_warning:
                    self._last_warning = time.monotonic()
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
    count, reset_at = limiter.hit(tenant.id)
    usage = Usage(limit=tenant_service.rate_limit_of(tenant), count=count, reset_at=reset_at)
    g.rate_usage = usage
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
