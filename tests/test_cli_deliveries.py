"""flask deliveries sweep / list / retry: thin admin wrappers over the delivery service."""

from datetime import timedelta

from app.db import database
from app.models import Delivery
from app.services import events
from app.services import webhooks as webhook_service
from app.util import utcnow
from tests.receiver import Answer, Receiver


def setup_failing_delivery(tenant, receiver):
    webhook_service.create_webhook(
        tenant=tenant, url=receiver.url, events=["call.ended"], secret="cli-test-secret-value"
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


def test_deliveries_retry_sends_again(runner, tenant):
    answers = iter([Answer(500), Answer(200)])
    with Receiver(lambda request: next(answers)) as receiver:
        delivery = setup_failing_delivery(tenant, receiver)
        Delivery.update(status="failed").execute()
        result = runner.invoke(args=["deliveries", "retry", delivery.id])
        assert result.exit_code == 0, result.output
        assert delivery.id in result.output and "succeeded" in result.output
        assert len(receiver.requests) == 2


def test_deliveries_retry_unknown_fails_cleanly(runner):
    result = runner.invoke(args=["deliveries", "retry", "dlv_nope"])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: Delivery dlv_nope not found."
