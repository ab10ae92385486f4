"""flask deliveries sweep / list / retry: thin admin wrappers over the delivery service."""

import socket
from datetime import timedelta

from rq import Queue

from app.db import database
from app.models import Delivery, DeliveryAttempt
from app.services import events
from app.services import webhooks as webhook_service
from app.services.deliveries.schedule import MAX_ATTEMPTS
from app.util import isoformat, utcnow
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver


def setup_failing_delivery(tenant, receiver):
    webhook_service.create_webhook(
        actor=ACTOR,
        tenant=tenant,
        url=receiver.url,
        events=["call.ended"],
        secret="cli-test-secret-value",
    )
    with database.atomic():
        events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": "call_1"})
    return Delivery.get()


def test_deliveries_list_shows_status_and_filters(runner, tenant, other_tenant):
    with Receiver(lambda request: Answer(500)) as receiver:
        delivery = setup_failing_delivery(tenant, receiver)
    result = runner.invoke(args=["deliveries", "list", "--tenant", "acme", "--status", "pending"])
    assert result.exit_code == 0, result.output
    assert delivery.id in result.output and "call.ended" in result.output
    assert "attempts=1" in result.output and "last=500" in result.output
    assert "1 of 1 deliveries." in result.output
    empty = runner.invoke(args=["deliveries", "list", "--tenant", "globex"])
    assert empty.output.strip() == "0 of 0 deliveries."
    failed = runner.invoke(args=["deliveries", "list", "--status", "failed"])
    assert delivery.id not in failed.output


def test_deliveries_list_unknown_tenant_fails_cleanly(runner):
    result = runner.invoke(args=["deliveries", "list", "--tenant", "nobody"])
    assert result.exit_code == 1 and "nobody" in result.output


def test_deliveries_sweep_sends_due_deliveries(runner, tenant):
    answers = iter([Answer(500), Answer(200)])
    with Receiver(lambda request: next(answers)) as receiver:
        delivery = setup_failing_delivery(tenant, receiver)
        Delivery.update(next_attempt_at=utcnow() - timedelta(seconds=1)).execute()
        result = runner.invoke(args=["deliveries", "sweep"])
        assert result.exit_code == 0 and result.output.strip() == "Enqueued 1 due deliveries."
        assert len(receiver.requests) == 2
    assert Delivery.get_by_id(delivery.id).status == "succeeded"


def test_deliveries_retry_sends_again_and_says_it_was_delivered(runner, tenant):
    answers = iter([Answer(500), Answer(200)])
    with Receiver(lambda request: next(answers)) as receiver:
        delivery = setup_failing_delivery(tenant, receiver)
        Delivery.update(status="failed").execute()
        result = runner.invoke(args=["deliveries", "retry", delivery.id])
        assert result.exit_code == 0, result.output
        assert len(receiver.requests) == 2
    attempt = DeliveryAttempt.get(DeliveryAttempt.number == 2)
    assert result.output.strip() == (
        f"Delivered {delivery.id} (HTTP 200 in {attempt.duration_ms} ms)."
    )
    assert Delivery.get_by_id(delivery.id).status == "succeeded"


def test_deliveries_retry_says_the_attempt_failed_and_when_the_next_is(runner, tenant):
    with Receiver(lambda request: Answer(500)) as receiver:
        delivery = setup_failing_delivery(tenant, receiver)
        result = runner.invoke(args=["deliveries", "retry", delivery.id])
    assert result.exit_code == 0, result.output
    after = Delivery.get_by_id(delivery.id)
    assert (after.status, after.attempts) == ("pending", 2)
    assert result.output.strip() == (
        f"Attempt 2 of {delivery.id} failed: The receiver answered 500. "
        f"Next attempt at {isoformat(after.next_attempt_at)}."
    )


def test_deliveries_retry_says_when_no_attempt_is_left(runner, tenant):
    with Receiver(lambda request: Answer(500)) as receiver:
        delivery = setup_failing_delivery(tenant, receiver)
        Delivery.update(status="failed", attempts=MAX_ATTEMPTS - 1).execute()
        result = runner.invoke(args=["deliveries", "retry", delivery.id])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        f"Attempt {MAX_ATTEMPTS} of {delivery.id} failed: The receiver answered 500. "
        "No attempts are left: it has failed."
    )


def test_deliveries_retry_of_a_delivery_another_job_holds_says_so(runner, tenant):
    with Receiver(lambda request: Answer(500)) as receiver:
        delivery = setup_failing_delivery(tenant, receiver)
        Delivery.update(lease_until=utcnow() + timedelta(seconds=30)).execute()
        result = runner.invoke(args=["deliveries", "retry", delivery.id])
        assert len(receiver.requests) == 1
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        f"Another process is attempting {delivery.id} now; flask deliveries list shows the outcome."
    )


def test_deliveries_retry_in_rq_mode_says_it_is_queued(
    app, runner, tenant, redis_url, redis_client
):
    with Receiver(lambda request: Answer(500)) as receiver:
        delivery = setup_failing_delivery(tenant, receiver)
    app.config.update(QUEUE_MODE="rq", REDIS_URL=redis_url)
    result = runner.invoke(args=["deliveries", "retry", delivery.id])
    assert result.exit_code == 0, result.output
    job_id = Delivery.get_by_id(delivery.id).job_id
    assert result.output.strip() == (
        f"Queued {delivery.id} for another attempt (job {job_id}): worker.py webhooks sends "
        "it, and flask deliveries list shows the outcome."
    )
    assert Queue("webhooks", connection=redis_client).job_ids == [job_id]


def test_deliveries_retry_in_rq_mode_when_the_tenant_has_no_place_says_it_waits(
    app, runner, tenant, redis_url, redis_client
):
    """Its webhook has as many deliveries in flight as it may: the retried one waits in the
    database for a place, whatever job it named before (here one long gone)."""
    with Receiver(lambda request: Answer(500)) as receiver:
        delivery = setup_failing_delivery(tenant, receiver)
        Delivery.update(status="failed", job_id="job_gone").execute()
        app.config.update(QUEUE_MODE="rq", REDIS_URL=redis_url)
        with database.atomic():
            for number in range(2):
                events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": f"c{number}"})
    result = runner.invoke(args=["deliveries", "retry", delivery.id])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        f"{delivery.id} is due now and waits for a place: its webhook or tenant has as many "
        "deliveries in flight as it may. worker.py webhooks sends it when one frees, and "
        "flask deliveries list shows the outcome."
    )
    retried = Delivery.get_by_id(delivery.id)
    assert (retried.status, retried.job_id, retried.lease_until) == ("pending", None, None)
    assert len(Queue("webhooks", connection=redis_client).job_ids) == 2  # the other two


def test_deliveries_retry_in_rq_mode_without_redis_says_it_is_not_queued(app, runner, tenant):
    with Receiver(lambda request: Answer(500)) as receiver:
        delivery = setup_failing_delivery(tenant, receiver)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app.config.update(QUEUE_MODE="rq", REDIS_URL=f"redis://127.0.0.1:{port}/0")
    result = runner.invoke(args=["deliveries", "retry", delivery.id])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"Error: Could not queue {delivery.id}: Redis does not answer. It is due now, and the "
        "sweeper of worker.py webhooks sends it once Redis answers."
    )
    assert Delivery.get_by_id(delivery.id).status == "pending"


def test_deliveries_retry_unknown_fails_cleanly(runner):
    result = runner.invoke(args=["deliveries", "retry", "dlv_nope"])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: Delivery dlv_nope not found."
