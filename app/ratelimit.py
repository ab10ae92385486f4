"""Per-tenant rate limits (SPEC.md section 8): one fixed one-minute window per tenant, shared by
all its keys and all tenant API routes.

Counters live in Redis when REDIS_URL is set, so every process and host shares them; one Lua
script increments the counter, starts the window and reads its remaining time in a single
round trip (for tenants allowed thousands of requests a minute, one round trip takes a block
of counts: RedisCounters). Without Redis they live in this process's memory. If Redis stops
answering, each process keeps serving with its in-memory counters (logged at most once a
minute) and goes back to Redis a few seconds later.

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

# Adds ARGV[2] to the count; returns the new count, the milliseconds left in the window and
# when the window ends by Redis's clock (Unix ms), the same for every hit of a window.
HIT_SCRIPT = """
local count = redis.call('INCRBY', KEYS[1], ARGV[2])
if count == tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]); ttl = tonumber(ARGV[1]) end
local now = redis.call('TIME')
return {count, ttl, now[1] * 1000 + math.floor(now[2] / 1000) + ttl}
"""

# A tenant whose limit is in the thousands takes its counts from Redis in blocks: one count
# per LEASE_PER_LIMIT of its limit, at most LEASE_MAX (see RedisCounters).
LEASE_PER_LIMIT = 1_000
LEASE_MAX = 16
# Two answers whose windows end within this of each other (by Redis's clock) are of one
# window: a window's end is fixed when it starts, and the next one ends a minute later.
SAME_WINDOW_MS = 1_000


def lease_size(limit: int) -> int:
    """How many counts a process takes from Redis at once for a tenant with this limit."""
    return max(1, min(LEASE_MAX, limit // LEASE_PER_LIMIT))


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


class Lease:
    """The counts of one tenant's window this process took from Redis and has not handed
    out yet: blocks of [next, last], in the order taken."""

    __slots__ = ("window", "reset_at", "last", "blocks")

    def __init__(self, window: int, reset_at: float) -> None:
        self.window = window  # when the window ends by Redis's clock (Unix ms): its identity
        self.reset_at = reset_at  # the same by this process's clock, as early as seen
        self.last = 0  # the highest count Redis returned to this process in the window
        self.blocks: list[list[int]] = []

    def take(self) -> int:
        block = self.blocks[0]
        count = block[0]
        if count == block[1]:
            del self.blocks[0]
        else:
            block[0] = count + 1
        return count


class RedisCounters:
    """Fixed windows in Redis, shared by every process: one round trip per hit, or per block.

    Tenants whose limit is below 2,000 a minute are counted one request at a time. Above
    that, while the window is less than half used, a process adds a block of counts at once
    (lease_size: 2 at 2,000 a minute, up to 16 at 16,000) and hands them to its next
    requests in order, so most requests of a busy tenant cost no round trip: on GET /agents
    under gunicorn, a round trip a request cost 12 % of the throughput. The limit
    still holds exactly, since every request has a count of its own; what a block changes:
    - counts a process took but had no request for are spent, so a tenant can be refused up
      to (processes x (block - 1)) requests early, under 0.1 % of its limit per process,
      and only if blocks were left unused;
    - X-RateLimit-Remaining reads lower by the counts other processes hold unused.
    From half the window on, every request is counted in Redis on its own again.

    Each thread keeps a connection of its own and sends the script's EVALSHA on it directly,
    packed once per tenant and block size: redis-py's command path (pool checkout, retry
    wrapper, script object, packing) cost as much CPU as the rest of the hit. An error on
    that connection drops it, and the hit goes through the client, which loads the script
    into a Redis that lost it, reconnects and retries, or fails as before (RateLimiter then
    counts in memory).
    """

    def __init__(self, url: str) -> None:
        self._client = Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
        self._script = self._client.register_script(HIT_SCRIPT)
        self._held = threading.local()
        self._commands: dict[tuple[str, int], list[bytes]] = {}  # (key, n) -> EVALSHA, packed
        self._leases: dict[str, Lease] = {}
        self._lock = threading.Lock()

    def hit(self, key: str, limit: int) -> tuple[int, float]:
        size = lease_size(limit)
        if size == 1:
            count, reset_at, _ = self._add(key, 1)
            return count, reset_at
        now = time.time()
        with self._lock:
            lease = self._leases.get(key)
            if lease is not None and now >= lease.reset_at:
                lease = None  # the window ended: its count in Redis starts again
            elif lease is not None and lease.blocks:
                return lease.take(), lease.reset_at
        # The first hit of a window in this process (the count unknown) and, from half the
        # limit on, every hit is counted on its own.
        if lease is None or lease.last + size > limit // 2:
            size = 1
        last, reset_at, window = self._add(key, size)
        with self._lock:
            lease = self._leases.get(key)
            # Windows are told apart by Redis's clock, which the answer carries: a reply this
            # process read late (a busy machine) puts reset_at late, not the window.
            if lease is None or window > lease.window + SAME_WINDOW_MS:  # a newer window
                if len(self._leases) >= 10_000:
                    self._leases.clear()
                lease = self._leases[key] = Lease(window, reset_at)
            if window >= lease.window - SAME_WINDOW_MS:  # not a late answer of the one before
                lease.reset_at = min(lease.reset_at, reset_at)
                lease.last = max(lease.last, last)
                if size > 1:
                    lease.blocks.append([last - size + 2, last])
        return last - size + 1, reset_at

    def _add(self, key: str, size: int) -> tuple[int, float, int]:
        """Add size to the key's count: the new count, when its window ends by this
        process's clock, and when it ends by Redis's (Unix ms)."""
        connection = getattr(self._held, "connection", None)
        if connection is not None and connection.pid == os.getpid():
            try:
                command = self._commands.get((key, size))
                if command is None:
                    if len(self._commands) >= 10_000:
                        self._commands.clear()
                    command = self._commands[key, size] = connection.pack_command(
                        "EVALSHA", self._script.sha, 1, key, WINDOW_MS, size
                    )
                connection.send_packed_command(command, check_health=False)
                count, ttl_ms, window = connection.read_response()
                return int(count), time.time() + int(ttl_ms) / 1000, int(window)
            except (RedisError, OSError):
                connection.disconnect()
        self._held.connection = None
        count, ttl_ms, window = self._script(keys=[key], args=[WINDOW_MS, size])
        self._held.connection = self._client.connection_pool.make_connection()
        return int(count), time.time() + int(ttl_ms) / 1000, int(window)


class RateLimiter:
    def __init__(self, redis_url: str | None) -> None:
        self.memory = MemoryCounters()
        self.redis = RedisCounters(redis_url) if redis_url else None
        self._redis_down_until = 0.0
        self._last_warning = 0.0

    def hit(self, tenant_id: str, limit: int) -> tuple[int, float]:
        """This request's count in its tenant's window, and when the window ends."""
        key = KEY_PREFIX + tenant_id
        if self.redis is not None and time.monotonic() >= self._redis_down_until:
            try:
                return self.redis.hit(key, limit)
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
    app, context = current_app._get_current_object(), g._get_current_object()  # type: ignore[attr-defined]
    if not getattr(app.blueprints.get(request.blueprint or ""), "rate_limited", False):
        return
    tenant = getattr(context, "tenant", None)
    if tenant is None or not app.config["RATELIMIT_ENABLED"]:
        return
    limiter: RateLimiter = app.extensions["rate_limiter"]
    limit = tenant_service.rate_limit_of(tenant)
    count, reset_at = limiter.hit(tenant.id, limit)
    usage = Usage(limit=limit, count=count, reset_at=reset_at)
    context.rate_usage = usage
    if usage.count > usage.limit:
        retry_after = max(1, math.ceil(usage.reset_at - time.time()))
        raise RateLimited(
            f"Rate limit of {usage.limit} requests per minute exceeded; "
            f"retry in {retry_after} seconds.",
            headers={"Retry-After": str(retry_after)},
        )


def add_rate_limit_headers(response: Response) -> Response:
    usage: Usage | None = g.get("rate_usage")
    if usage is not None:  # only this hook sets them: added without looking for them first
        headers = response.headers
        headers.add("X-RateLimit-Limit", str(usage.limit))
        headers.add("X-RateLimit-Remaining", str(usage.remaining))
        headers.add("X-RateLimit-Reset", str(math.ceil(usage.reset_at)))
    return response


def init_app(app: Flask) -> None:
    """Register after the authentication hook, so g.tenant is known when counting."""
    app.extensions["rate_limiter"] = RateLimiter(app.config.get("REDIS_URL"))
    app.before_request(check_rate_limit)
    app.after_request(add_rate_limit_headers)
