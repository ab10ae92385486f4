"""The rate limiter against real processes: a Redis server that goes away and comes back, and
gunicorn workers sharing one count."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from redis import Redis

from app import create_app, ratelimit
from app.ratelimit import RateLimiter
from app.services import keys as key_service
from app.services import tenants as tenant_service
from tests.helpers import ACTOR
from tests.system.workers import ThrowawayRedis

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def throwaway_redis(tmp_path):
    """A redis-server of our own on a free port, which a test may stop."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is needed on PATH for the Redis fault tests")
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield url, process
    if process.poll() is None:
        process.kill()
        process.wait()


def test_api_keeps_serving_when_redis_goes_away(app_config, throwaway_redis, caplog):
    url, process = throwaway_redis
    app = create_app({**app_config, "REDIS_URL": url, "QUEUE_MODE": "inline"})
    with app.app_context():
        tenant = tenant_service.create_tenant(actor=ACTOR, name="resilient", plan="starter")
        headers = {"x-api-key": key_service.create_key(actor=ACTOR, tenant=tenant, name="k")[1]}
    client = app.test_client()
    assert client.get("/api/v1/agents", headers=headers).status_code == 200
    process.send_signal(signal.SIGKILL)
    process.wait()
    started = time.perf_counter()
    statuses = [client.get("/api/v1/agents", headers=headers).status_code for _ in range(20)]
    assert statuses == [200] * 20
    assert time.perf_counter() - started < 10
    warnings = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warnings) == 1


def test_redis_is_tried_again_a_few_seconds_after_it_failed(monkeypatch, caplog):
    monkeypatch.setattr(ratelimit, "RETRY_REDIS_AFTER_S", 0.5)
    server = ThrowawayRedis()
    server.start()
    try:
        limiter = RateLimiter(server.url)
        assert limiter.hit("tenant_back")[0] == 1
        server.stop()
        assert [limiter.hit("tenant_back")[0] for _ in range(2)] == [1, 2]  # in memory
        server.start()  # empty: it lost the count
        time.sleep(0.6)
        assert [limiter.hit("tenant_back")[0] for _ in range(2)] == [1, 2]
        assert Redis.from_url(server.url).get(ratelimit.KEY_PREFIX + "tenant_back") == b"2"
    finally:
        server.stop()
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1


@pytest.mark.slow
def test_gunicorn_workers_share_the_count(app_config, redis_client, redis_url, tmp_path):
    """Two gunicorn workers on one Redis: a starter burst of 80 gets exactly 60 through."""
    config = {**app_config, "REDIS_URL": redis_url}
    app = create_app(config)
    with app.app_context():
        tenant = tenant_service.create_tenant(actor=ACTOR, name="burst", plan="starter")
        headers = {"x-api-key": key_service.create_key(actor=ACTOR, tenant=tenant, name="k")[1]}
        business = tenant_service.create_tenant(actor=ACTOR, name="big", plan="business")
        business_headers = {
            "x-api-key": key_service.create_key(actor=ACTOR, tenant=business, name="k")[1]
        }
    port = free_port()
    access_log = tmp_path / "access.log"
    env = {
        **os.environ,
        "DATABASE_URL": config["DATABASE_URL"],
        "REDIS_URL": redis_url,
        "QUEUE_MODE": "inline",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-w",
            "2",
            "-b",
            f"127.0.0.1:{port}",
            "--access-logfile",
            str(access_log),
            "--access-logformat",
            "%(p)s %(s)s",
            "wsgi:app",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}/api/v1/agents"
        deadline = time.time() + 30
        # Until both workers have answered: one that is still booting leaves the burst to the
        # other, and the test would then prove nothing about sharing.
        while len(_worker_pids(access_log)) < 2:
            try:
                requests.get(
                    f"http://127.0.0.1:{port}/healthz", headers={"Connection": "close"}, timeout=1
                )
            except requests.RequestException:
                pass
            assert time.time() < deadline, "gunicorn did not start both workers"
            time.sleep(0.05)
        warm_up_lines = len(access_log.read_text().splitlines())
        statuses = []
        for _ in range(80):
            # A new connection each time, so both workers take requests.
            response = requests.get(base, headers={**headers, "Connection": "close"}, timeout=5)
            statuses.append(response.status_code)
            assert requests.get(base, headers=business_headers, timeout=5).status_code == 200
        assert statuses.count(200) == 60 and statuses.count(429) == 20
    finally:
        server.terminate()
        server.wait(timeout=10)
    burst_pids = _worker_pids(access_log, skip=warm_up_lines)
    assert len(burst_pids) == 2, "the requests should have been spread over both workers"


def _worker_pids(access_log: Path, skip: int = 0) -> set[str]:
    """The gunicorn worker pids in the access log (each line starts with the pid)."""
    if not access_log.exists():
        return set()
    return {line.split()[0] for line in access_log.read_text().splitlines()[skip:] if line}
