"""Per-tenant rate limits: counts, headers, 429 body, plans, Redis sharing and fail-soft."""

import threading
import time

import pytest

from app import create_app, ratelimit
from app.ratelimit import RateLimiter, RedisCounters
from app.services import keys as key_service
from app.services import tenants as tenant_service
from tests.helpers import ACTOR, assert_error


def burst(client, headers, count, path="/api/v1/agents"):
    return [client.get(path, headers=headers) for _ in range(count)]


@pytest.fixture
def starter_headers(app):
    tenant = tenant_service.create_tenant(actor=ACTOR, name="small", plan="starter")
    return {"x-api-key": key_service.create_key(actor=ACTOR, tenant=tenant, name="k")[1]}


def test_starter_tenant_gets_exactly_60_then_429(client, starter_headers):
    responses = burst(client, starter_headers, 80)
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) == 60 and statuses.count(429) == 20
    assert statuses[:60] == [200] * 60
    first = responses[0]
    assert first.headers["X-RateLimit-Limit"] == "60"
    assert first.headers["X-RateLimit-Remaining"] == "59"
    assert "Retry-After" not in first.headers
    limited = responses[-1]
    error = assert_error(limited, 429, "rate_limited")
    assert "60 requests per minute" in error["message"]
    assert limited.headers["X-RateLimit-Remaining"] == "0"
    reset = int(limited.headers["X-RateLimit-Reset"])
    assert time.time() - 1 <= reset <= time.time() + 61
    assert 0 < int(limited.headers["Retry-After"]) <= 60


def test_limit_is_shared_by_all_keys_and_routes_of_a_tenant(app, client, starter_headers):
    tenant = tenant_service.find_tenant("small")
    second = {"x-api-key": key_service.create_key(actor=ACTOR, tenant=tenant, name="k2")[1]}
    burst(client, starter_headers, 30)
    burst(client, second, 30, path="/api/v1/phone-numbers")
    assert_error(client.get("/api/v1/agents", headers=second), 429, "rate_limited")


def test_business_tenant_is_unaffected_by_starter_burst(client, starter_headers, headers):
    burst(client, starter_headers, 70)
    response = client.get("/api/v1/agents", headers=headers)
    assert response.status_code == 200
    assert response.headers["X-RateLimit-Limit"] == "300"


def test_error_responses_carry_rate_headers_and_count(client, starter_headers):
    response = client.get("/api/v1/agents/agent_nope", headers=starter_headers)
    assert_error(response, 404, "not_found")
    assert response.headers["X-RateLimit-Remaining"] == "59"
    response = client.post("/api/v1/agents", json={}, headers=starter_headers)
    assert response.status_code == 422 and response.headers["X-RateLimit-Remaining"] == "58"


def test_bad_keys_count_for_nobody(client, starter_headers):
    for _ in range(70):
        assert client.get("/api/v1/agents", headers={"x-api-key": "dkl_wrong"}).status_code == 401
    response = client.get("/api/v1/agents", headers=starter_headers)
    assert response.headers["X-RateLimit-Remaining"] == "59"


def test_runtime_health_and_docs_are_not_limited(client, starter_headers, runtime_headers):
    for path in ("/healthz", "/api/v1/openapi.json"):
        for _ in range(70):
            response = client.get(path, headers=starter_headers)
        assert response.status_code == 200 and "X-RateLimit-Limit" not in response.headers


def test_plan_change_applies_without_restart(runner, client, starter_headers):
    burst(client, starter_headers, 60)
    assert client.get("/api/v1/agents", headers=starter_headers).status_code == 429
    result = runner.invoke(args=["tenants", "set-plan", "--tenant", "small", "business"])
    assert result.exit_code == 0
    response = client.get("/api/v1/agents", headers=starter_headers)
    assert response.status_code == 200 and response.headers["X-RateLimit-Limit"] == "300"


def test_enterprise_custom_limit(runner, client, starter_headers):
    runner.invoke(
        args=[
            "tenants",
            "set-plan",
            "--tenant",
            "small",
            "enterprise",
            "--rate-limit",
            "5",
            "--concurrent-calls",
            "50",
        ]
    )
    statuses = [r.status_code for r in burst(client, starter_headers, 7)]
    assert statuses == [200] * 5 + [429] * 2


def test_counters_in_redis_are_shared_between_app_instances(app_config, redis_client, redis_url):
    config = {**app_config, "REDIS_URL": redis_url, "QUEUE_MODE": "inline"}
    first, second = create_app(config), create_app(config)
    with first.app_context():
        tenant = tenant_service.create_tenant(actor=ACTOR, name="shared", plan="starter")
        headers = {"x-api-key": key_service.create_key(actor=ACTOR, tenant=tenant, name="k")[1]}
    statuses = []
    for i in range(80):
        instance = first if i % 2 else second
        statuses.append(instance.test_client().get("/api/v1/agents", headers=headers).status_code)
    assert statuses.count(200) == 60 and statuses.count(429) == 20
    assert any(b"voiceagent" in key for key in redis_client.keys("*"))


def test_enterprise_tenant_is_counted_one_request_at_a_time_in_redis(
    app_config, redis_client, redis_url
):
    """However high the limit, each request has its own count in Redis and in its headers."""
    app = create_app({**app_config, "REDIS_URL": redis_url, "QUEUE_MODE": "inline"})
    with app.app_context():
        tenant = tenant_service.create_tenant(
            actor=ACTOR, name="huge", plan="enterprise", rate_limit=100_000, concurrent_calls=100
        )
        headers = {"x-api-key": key_service.create_key(actor=ACTOR, tenant=tenant, name="k")[1]}
    client = app.test_client()
    remaining = [
        int(client.get("/api/v1/agents", headers=headers).headers["X-RateLimit-Remaining"])
        for _ in range(30)
    ]
    assert remaining == list(range(99_999, 99_969, -1))
    assert int(redis_client.get(ratelimit.KEY_PREFIX + tenant.id)) == 30


def test_redis_counts_on_after_a_killed_connection(redis_client, redis_url):
    """A Redis that closed the connection still counts each hit once: redis-py opens a new
    connection."""
    counters = RedisCounters(redis_url)
    key = "voiceagent:ratelimit:test"
    assert [counters.hit(key)[0] for _ in range(3)] == [1, 2, 3]
    redis_client.client_kill_filter(_type="normal", skipme=True)
    assert [counters.hit(key)[0] for _ in range(3)] == [4, 5, 6]
    assert int(redis_client.get(key)) == 6
    count, reset_at = counters.hit(key)
    assert count == 7 and 0 < reset_at - time.time() <= 60


def test_a_window_started_elsewhere_ends_when_it_does_there(redis_client, redis_url):
    """Another process's window: its end is read from Redis, and a key left without an
    expiry gets one, so it can never count on for ever."""
    redis_client.set("voiceagent:ratelimit:other", 5, px=30_000)
    count, reset_at = RedisCounters(redis_url).hit("voiceagent:ratelimit:other")
    assert count == 6 and 29 < reset_at - time.time() <= 30
    redis_client.set("voiceagent:ratelimit:stuck", 9)
    count, reset_at = RedisCounters(redis_url).hit("voiceagent:ratelimit:stuck")
    assert count == 10 and 59 < reset_at - time.time() <= 60
    assert 59_000 < redis_client.pttl("voiceagent:ratelimit:stuck") <= 60_000


def test_a_finished_window_starts_again_from_one(redis_client, redis_url, monkeypatch):
    monkeypatch.setattr(ratelimit, "WINDOW_MS", 300)
    counters = RedisCounters(redis_url)
    key = "voiceagent:ratelimit:window"
    assert [counters.hit(key)[0] for _ in range(3)] == [1, 2, 3]
    time.sleep(0.4)
    assert redis_client.get(key) is None
    assert [counters.hit(key)[0] for _ in range(3)] == [1, 2, 3]


def test_threads_hitting_one_tenant_at_once_each_get_their_own_count(redis_client, redis_url):
    """Many threads of one process count one tenant at once: no two hits share a count, and
    the count in Redis is the number of hits."""
    limiter = RateLimiter(redis_url)
    threads, hits = 8, 250
    start = threading.Barrier(threads)
    counts: list[int] = []

    def run():
        start.wait()
        counts.extend(limiter.hit("tenant_busy")[0] for _ in range(hits))

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(counts) == list(range(1, threads * hits + 1))
    assert int(redis_client.get(ratelimit.KEY_PREFIX + "tenant_busy")) == threads * hits
