"""Deferred jobs run only after their transaction commits."""

import pytest

from app import queue
from app.models import Tenant
from tests.receiver import Answer, Receiver

RAN: list[tuple[str, bool]] = []


def record_job(tenant_id: str) -> None:
    RAN.append((tenant_id, Tenant.select().where(Tenant.id == tenant_id).exists()))


@pytest.fixture(autouse=True)
def clear_ran():
    RAN.clear()


def test_deferred_job_runs_after_commit_and_sees_the_rows(app):
    with queue.transaction():
        Tenant.create(id="ten_a", name="a")
        queue.defer("webhooks", "tests.test_queue.record_job", "ten_a")
        assert RAN == []
    assert RAN == [("ten_a", True)]


def test_rolled_back_transaction_runs_nothing(app):
    with pytest.raises(ValueError), queue.transaction():
        Tenant.create(id="ten_b", name="b")
        queue.defer("webhooks", "tests.test_queue.record_job", "ten_b")
        raise ValueError("boom")
    assert RAN == []
    assert not Tenant.select().where(Tenant.id == "ten_b").exists()


def test_nested_transaction_defers_to_the_outermost(app):
    with queue.transaction():
        with queue.transaction():
            Tenant.create(id="ten_c", name="c")
            queue.defer("webhooks", "tests.test_queue.record_job", "ten_c")
        assert RAN == []
    assert RAN == [("ten_c", True)]


def test_defer_outside_transaction_is_a_bug(app):
    with pytest.raises(RuntimeError):
        queue.defer("webhooks", "tests.test_queue.record_job", "x")


def test_inline_mode_retries_from_the_in_process_sweeper(app, client, headers):
    """Without Redis, a failed delivery is retried by the web process's background thread."""
    app.config.update(SWEEP_INTERVAL=0.1, WEBHOOK_RETRY_SCALE=0.001)
    answers = iter([Answer(500), Answer(200)])
    with Receiver(lambda request: next(answers)) as receiver:
        webhook = client.post(
            "/api/v1/webhooks",
            json={"url": receiver.url, "events": ["call.ended"], "secret": "inline-secret-1234"},
            headers=headers,
        ).json
        client.post(f"/api/v1/webhooks/{webhook['id']}/test", headers=headers)
        first, second = receiver.wait_for(2)
    assert first.headers["X-Service-Event-Id"] == second.headers["X-Service-Event-Id"]
    assert second.headers["X-Service-Attempt"] == "2"


def test_dropping_waiting_jobs_without_redis_logs_and_goes_on(app, caplog):
    """Best effort: the jobs would only run for nothing, so an unreachable Redis is no error."""
    import logging
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app.config.update(QUEUE_MODE="rq", REDIS_URL=f"redis://127.0.0.1:{port}/0")
    app.extensions.pop("redis", None)
    with caplog.at_level(logging.WARNING):
        queue.drop_waiting("webhooks", ["delivery-dlv_1"], ["delivery:dlv_1"])
    assert "could not drop 1 waiting jobs from webhooks" in caplog.text
