"""Jobs: deferred until their transaction commits, run by RQ or inline, awaited for a result."""

import logging
import socket
import time

import pytest
from rq import Queue

from app import queue
from app.db import database
from app.models import Tenant
from tests.receiver import Answer, Receiver

RAN: list[tuple[str, bool]] = []


def record_job(tenant_id: str) -> None:
    RAN.append((tenant_id, Tenant.select().where(Tenant.id == tenant_id).exists()))


def answer_job(value: str) -> dict[str, str]:
    return {"answer": value}


def failing_job() -> None:
    raise RuntimeError("a bug in a job")


def slow_job(seconds: float) -> str:
    time.sleep(seconds)
    return "late"


# Jobs are named by their dotted path, as the services name theirs.
RECORD_JOB, ANSWER_JOB = "tests.test_queue.record_job", "tests.test_queue.answer_job"
FAILING_JOB, SLOW_JOB = "tests.test_queue.failing_job", "tests.test_queue.slow_job"


@pytest.fixture(autouse=True)
def clear_ran():
    RAN.clear()


def test_deferred_job_runs_after_commit_and_sees_the_rows(app):
    with database.atomic():
        Tenant.create(id="ten_a", name="a")
        queue.defer("webhooks", RECORD_JOB, "ten_a")
        assert RAN == []
    assert RAN == [("ten_a", True)]


def test_rolled_back_transaction_runs_nothing(app):
    with pytest.raises(ValueError), database.atomic():
        Tenant.create(id="ten_b", name="b")
        queue.defer("webhooks", RECORD_JOB, "ten_b")
        raise ValueError("boom")
    assert RAN == []
    assert not Tenant.select().where(Tenant.id == "ten_b").exists()


def test_nested_transaction_defers_to_the_outermost(app):
    with database.atomic():
        with database.atomic():
            Tenant.create(id="ten_c", name="c")
            queue.defer("webhooks", RECORD_JOB, "ten_c")
        assert RAN == []
    assert RAN == [("ten_c", True)]


def test_a_failing_inline_job_is_logged_and_never_reaches_the_caller(app, caplog):
    with caplog.at_level(logging.ERROR), database.atomic():
        queue.defer("webhooks", FAILING_JOB)
    assert "job tests.test_queue.failing_job() failed" in caplog.text


def test_jobs_go_to_rq_as_functions_with_their_queues_options(app, redis_url, redis_client):
    app.config.update(QUEUE_MODE="rq", REDIS_URL=redis_url)
    with database.atomic():
        queue.defer("webhooks", RECORD_JOB, "ten_d", job_id="job-d")
    [job] = Queue("webhooks", connection=redis_client).jobs
    assert (job.id, job.func, job.args) == ("job-d", record_job, ("ten_d",))
    assert job.result_ttl == queue.JOB_OPTIONS["webhooks"]["result_ttl"] and RAN == []
    # RQ stops a delivery's job a second before its lease ends.
    assert job.timeout == app.config["WEBHOOK_LEASE_SECONDS"] - 1 == 19


def test_many_jobs_go_to_rq_after_commit_in_batches(app, redis_url, redis_client, monkeypatch):
    monkeypatch.setattr(queue, "ENQUEUE_BATCH", 2)
    app.config.update(QUEUE_MODE="rq", REDIS_URL=redis_url)
    calls = [((f"ten_{n}",), f"job-{n}") for n in range(5)]
    with database.atomic():
        queue.defer_many("webhooks", RECORD_JOB, calls)
        assert Queue("webhooks", connection=redis_client).count == 0
    jobs = Queue("webhooks", connection=redis_client).jobs
    assert [(job.id, job.func, job.args) for job in jobs] == [
        (job_id, record_job, args) for args, job_id in calls
    ]
    assert {job.timeout for job in jobs} == {queue.webhook_job_timeout(app.config)}


def test_many_jobs_run_inline_after_commit(app):
    with database.atomic():
        Tenant.create(id="ten_m", name="m")
        queue.defer_many(
            "webhooks",
            RECORD_JOB,
            [(("ten_m",), "job-1"), (("ten_x",), "job-2")],
        )
        assert RAN == []
    assert RAN == [("ten_m", True), ("ten_x", False)]


def test_enqueue_with_redis_unreachable_says_so_and_raises_nothing(app, caplog):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app.config.update(QUEUE_MODE="rq", REDIS_URL=f"redis://127.0.0.1:{port}/0")
    with caplog.at_level(logging.WARNING):
        assert queue.enqueue("webhooks", RECORD_JOB, "ten_e") is False
        assert queue.enqueue_many("webhooks", RECORD_JOB, [(("ten_e",), "job-e")]) is False
        assert queue.call("functions", ANSWER_JOB, "x", timeout=1) is None
    assert "could not enqueue tests.test_queue.record_job on webhooks" in caplog.text
    assert "could not run tests.test_queue.answer_job on functions" in caplog.text


def test_inline_call_runs_the_job_here(app):
    assert queue.call("functions", ANSWER_JOB, "here", timeout=5) == {"answer": "here"}


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
