"""The RQ entry points (app/jobs.py) called as a worker calls them: by id, outside any request,
each opening its own database connection."""

import hashlib
import hmac
import importlib
import json
import re
import time
from datetime import timedelta
from pathlib import Path

from app import jobs
from app.db import database
from app.models import Call, Delivery, Function, FunctionInvocation
from app.services import events
from app.services import webhooks as webhook_service
from app.util import new_id, utcnow
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver
from tests.runtime.test_function_calls import SECRET, define, echo

APP = Path(__file__).resolve().parent.parent / "app"
JOB_NAME = re.compile(r"[\"'](app\.jobs\.[A-Za-z_]\w*)[\"']")


def job_names_in_app() -> set[str]:
    """Every job the services enqueue, by the dotted name RQ imports it by."""
    return {name for path in APP.rglob("*.py") for name in JOB_NAME.findall(path.read_text())}


def test_every_job_the_services_name_is_a_function_of_app_jobs():
    names = job_names_in_app()
    assert {"app.jobs.deliver_webhook", "app.jobs.invoke_function", "app.jobs.sweep"} <= names
    for name in names:
        module, _, function = name.rpartition(".")
        assert callable(getattr(importlib.import_module(module), function, None)), name


def due_delivery(tenant, url: str) -> Delivery:
    webhook = webhook_service.create_webhook(
        actor=ACTOR, tenant=tenant, url=url, events=["call.ended"], secret="whsec-jobs-0123456789"
    )
    event = events.record(tenant_id=tenant.id, type="call.ended", data={"callId": "call_1"})
    return Delivery.create(
        id=new_id("dlv"),
        tenant=tenant,
        webhook=webhook,
        event=event,
        next_attempt_at=utcnow() - timedelta(seconds=1),
    )


def test_deliver_webhook_sends_a_due_delivery_once(tenant):
    with Receiver() as receiver:
        delivery = due_delivery(tenant, receiver.url + "/hook")
        database.close()  # the job opens its own connection, as in a worker
        assert jobs.deliver_webhook(delivery.id) == "succeeded"
        assert jobs.deliver_webhook(delivery.id) is None  # settled: a repeat sends nothing
        assert len(receiver.requests) == 1
    assert Delivery.get_by_id(delivery.id).attempts == 1


def test_dispatch_deliveries_hands_the_tenants_due_deliveries_on(tenant):
    with Receiver() as receiver:
        first = due_delivery(tenant, receiver.url + "/one")
        database.close()
        assert jobs.dispatch_deliveries(tenant.id) == 1
        receiver.wait_for(1)  # inline: the dispatched job ran in this process
    assert Delivery.get_by_id(first.id).status == "succeeded"


def test_run_function_test_calls_the_endpoint_and_records_nothing(client, headers, agent_id):
    with Receiver(echo) as receiver:
        define(client, headers, agent_id, receiver.url + "/lookup")
        function = Function.get(Function.name == "lookup_order")
        invocation = {
            "id": new_id("fnc"),
            "tenant_id": function.tenant_id,
            "call_id": "call_test",
            "function_id": function.id,
            "function_name": "lookup_order",
            "parameters": {"orderId": "A-1"},
            "started": time.time(),
        }
        database.close()
        answer = jobs.run_function_test(invocation)
        [request] = receiver.requests
    assert answer["statusCode"] == 200 and answer["result"]["status"] == "shipped"
    assert json.loads(answer["result"]["echo"])["parameters"] == {"orderId": "A-1"}
    expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Service-Signature"] == "sha256=" + expected
    assert FunctionInvocation.select().count() == 0


def test_sweep_closes_a_call_whose_hold_lapsed(client, runtime_headers, did):
    started = client.post(
        "/internal/v1/calls", json={"did": did, "callerNumber": "+6281234567890"},
        headers=runtime_headers,
    ).json  # fmt: skip
    Call.update(reservation_expires_at=utcnow() - timedelta(seconds=1)).where(
        Call.id == started["id"]
    ).execute()
    database.close()
    jobs.sweep()
    closed = Call.get_by_id(started["id"])
    assert (closed.status, closed.hangup_reason, closed.billed_minutes) == (
        "failed",
        "runtime_lost",
        0,
    )


def test_a_delivery_to_a_refusing_endpoint_is_a_failed_attempt_of_that_delivery_only(tenant):
    with Receiver(lambda request: Answer(status=500)) as receiver:
        delivery = due_delivery(tenant, receiver.url + "/hook")
        database.close()
        assert jobs.deliver_webhook(delivery.id) == "pending"  # retried later
    refreshed = Delivery.get_by_id(delivery.id)
    assert (refreshed.attempts, refreshed.last_status_code) == (1, 500)
