"""worker.py for real: RQ on Redis, the sweeper thread, a worker killed mid-burst, Redis down.

Each test starts `python worker.py` processes on the test's database and a real Redis, and
real HTTP receivers on 127.0.0.1. Events are emitted with events.emit inside
database.atomic(), as the services that cause them do.
"""

import base64
import time
from datetime import timedelta

import pytest
from rq import Queue
from standardwebhooks.webhooks import Webhook as StandardWebhook
from standardwebhooks.webhooks import WebhookVerificationError

from app import queue, signing
from app.db import database
from app.models import Delivery, DeliveryAttempt, Webhook
from app.services import events
from app.services import webhooks as webhook_service
from app.services.deliveries import dispatch as delivery_dispatch
from app.util import new_id, utcnow
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver
from tests.system.workers import (
    WEBHOOK_SECRET,
    ThrowawayRedis,
    register_webhook,
    rq_config,
    wait_for_worker,
    wait_until,
)
from tests.test_queue import ANSWER_JOB, SLOW_JOB


@pytest.fixture
def app_config(app_config, redis_url, redis_client):
    return rq_config(app_config, redis_url)


def emit(tenant, type="call.ended", **data):
    with database.atomic():
        return events.emit(tenant_id=tenant.id, type=type, data={"callId": "call_1", **data})


def test_worker_delivers_signed_events(tenant, workers):
    with Receiver() as receiver:
        register_webhook(tenant, receiver.url, events=["call.started", "call.ended", "credits.low"])
        workers.start()
        sent = [
            emit(tenant, "call.started", phoneNumberId="pn_1"),
            emit(tenant, "call.ended", durationSeconds=30),
            emit(tenant, "call.answered"),  # not subscribed
            emit(tenant, "credits.low", balanceMinutes=3, threshold=10),
        ]
        requests = receiver.wait_for(3, timeout=20)
        time.sleep(0.3)  # nothing more arrives
    assert len(receiver.requests) == 3
    key = base64.b64encode(WEBHOOK_SECRET.encode()).decode()
    by_id = {request.headers["webhook-id"]: request for request in requests}
    assert set(by_id) == {sent[0].id, sent[1].id, sent[3].id}
    for request in requests:
        assert StandardWebhook(key).verify(request.body, request.headers)["id"] in by_id
    wait_until(
        lambda: {d.status for d in Delivery.select()} == {"succeeded"}, 10, "not settled", workers
    )


def test_worker_retries_until_the_receiver_recovers(tenant, workers):
    answers = iter([Answer(500), Answer(503, headers={"Retry-After": "1"}), Answer(200)])
    with Receiver(lambda request: next(answers)) as receiver:
        register_webhook(tenant, receiver.url)
        workers.start()
        event = emit(tenant)
        requests = receiver.wait_for(3, timeout=30)
    assert [r.headers["X-Service-Event-Id"] for r in requests] == [event.id] * 3
    assert [r.headers["X-Service-Attempt"] for r in requests] == ["1", "2", "3"]
    wait_until(lambda: Delivery.get().status == "succeeded", 10, "not settled", workers)


def test_a_broken_webhook_of_one_tenant_holds_up_no_other_tenants_events(
    tenant, other_tenant, workers
):
    """A host that can never be sent to (written before registration checked hosts) fails
    its own deliveries, with the reason, while another tenant's event of the same moment
    arrives."""
    with Receiver() as receiver:
        broken = Webhook.create(
            id=new_id("wh"),
            tenant=tenant,
            url="https://a..b/h",
            events=["call.ended"],
            secret=WEBHOOK_SECRET,
        )
        register_webhook(other_tenant, receiver.url)
        workers.start()
        with database.atomic():
            events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": "call_a"})
            arriving = events.emit(
                tenant_id=other_tenant.id, type="call.ended", data={"callId": "call_b"}
            )
        [request] = receiver.wait_for(1, timeout=10)
    assert request.headers["X-Service-Event-Id"] == arriving.id
    failed = Delivery.get(Delivery.webhook == broken.id)
    wait_until(
        lambda: Delivery.get(Delivery.event == arriving.id).status == "succeeded",
        10,
        "not settled",
        workers,
    )
    # Tried, and retried on the tests' shortened schedule.
    wait_until(lambda: Delivery.get_by_id(failed.id).attempts >= 1, 10, "not tried", workers)
    assert "not a valid host name" in Delivery.get_by_id(failed.id).last_error


def test_a_webhook_deleted_during_its_slow_lane_attempt_leaves_the_worker_no_traceback(
    client, headers, tenant, workers, redis_client
):
    """The webhook, in the slow lane, is deleted through the API while the worker waits on its
    receiver: the attempt times out and is let go with a log line, nothing else."""
    with Receiver(lambda request: Answer(delay=3)) as receiver:
        webhook = register_webhook(tenant, receiver.url)
        Webhook.update(lane=delivery_dispatch.SLOW_LANE).execute()
        workers.start(queues=("webhooks",))
        wait_for_worker(workers, redis_client, ("webhooks", "webhooks_slow"))
        emit(tenant)
        receiver.wait_for(1)
        assert client.delete(f"/api/v1/webhooks/{webhook.id}", headers=headers).status_code == 204

        def ended() -> bool:
            logs = workers.logs(tail=100_000)
            return "Traceback" in logs or "deleted with its webhook" in logs

        wait_until(ended, 10, "the attempt did not end", workers)
        time.sleep(0.5)  # anything the job does after
    logs = workers.logs(tail=100_000)
    assert "Traceback" not in logs, logs
    assert not Delivery.select().exists() and not DeliveryAttempt.select().exists()


def test_a_replay_reaches_the_receiver_through_the_worker(
    client, headers, tenant, other_tenant, workers
):
    """Events from before the webhook existed, replayed: one new delivery each, sent by a
    real worker with the event's own id and body, and listed with the event."""
    missed = [emit(tenant, durationSeconds=number) for number in range(5)]
    emit(tenant, "credits.low", balanceMinutes=3, threshold=10)  # not subscribed
    emit(other_tenant)  # not the tenant's
    with Receiver() as receiver:
        webhook = register_webhook(tenant, receiver.url)
        workers.start()
        since = missed[0].created_at.isoformat() + "Z"
        response = client.post(
            f"/api/v1/webhooks/{webhook.id}/replay", json={"since": since}, headers=headers
        )
        assert response.status_code == 202 and response.json == {"replayed": 5}
        requests = receiver.wait_for(5, timeout=20)
        time.sleep(0.3)  # nothing more arrives
    assert len(receiver.requests) == 5
    assert receiver.event_ids() == {event.id for event in missed}
    listed = client.get("/api/v1/events", headers=headers).json["events"]
    bodies = {request.headers["X-Service-Event-Id"]: request.json() for request in requests}
    assert [bodies[event["id"]] for event in listed if event["event"] == "call.ended"] == [
        event for event in listed if event["event"] == "call.ended"
    ]
    wait_until(
        lambda: (
            {d.status for d in Delivery.select().where(Delivery.tenant == tenant)} == {"succeeded"}
        ),
        10,
        "not settled",
        workers,
    )
    detail = client.get(f"/api/v1/events/{missed[0].id}", headers=headers).json
    [delivery] = detail["deliveries"]
    assert delivery["webhookId"] == webhook.id and delivery["status"] == "succeeded"


def record(name: str, seconds: float = 0) -> None:
    """A job for the queue test: appends its name to a Redis list, then sleeps."""
    queue.redis_connection().rpush("test:order", name)
    time.sleep(seconds)
    queue.redis_connection().rpush("test:order", name + " done")


def test_a_function_call_does_not_wait_for_the_webhook_job_in_hand(app, redis_client, workers):
    """One worker.py serving both queues runs a function job while a delivery job is busy."""
    Queue("webhooks", connection=redis_client).enqueue(record, "webhook", 3)
    workers.start()
    wait_until(lambda: redis_client.llen("test:order") == 1, 20, "webhook job not run", workers)
    queue.enqueue("functions", "tests.system.test_worker.record", "function")
    wait_until(lambda: redis_client.llen("test:order") == 4, 20, "jobs not run", workers)
    assert redis_client.lrange("test:order", 0, -1) == [
        b"webhook",
        b"function",
        b"function done",
        b"webhook done",
    ]


@pytest.mark.slow
def test_worker_killed_mid_burst_loses_nothing(tenant, workers):
    """SIGKILL in the middle of 500 events; a new worker and the sweeper deliver them all."""
    started = time.monotonic()
    with Receiver() as receiver:
        register_webhook(tenant, receiver.url)
        first = workers.start()
        sent = set()
        for number in range(500):
            sent.add(emit(tenant, durationSeconds=number).id)
            if number == 250:
                wait_until(lambda: len(receiver.requests) >= 50, 30, "no progress", workers)
                workers.kill(first)
        killed_at = len(receiver.event_ids())
        emitted = time.monotonic()
        assert killed_at < 500
        workers.start()
        wait_until(lambda: receiver.event_ids() >= sent, 90, "events missing", workers)
    assert receiver.event_ids() == sent
    wait_until(
        lambda: Delivery.select().where(Delivery.status != "succeeded").count() == 0,
        20,
        "deliveries not settled",
        workers,
    )
    print(
        f"500 events, worker killed after {killed_at}: {time.monotonic() - started:.1f}s "
        f"({emitted - started:.1f}s emitting)"
    )


@pytest.mark.slow
def test_worker_killed_mid_delivery_loses_nothing(tenant, workers):
    """SIGKILL while deliveries are on the wire: once their leases expire, they are sent
    again. An attempt counts once its outcome is written, so each counts one attempt."""
    with Receiver(lambda request: Answer(delay=0.5)) as receiver:
        register_webhook(tenant, receiver.url)
        sent = {emit(tenant, durationSeconds=number).id for number in range(30)}
        first = workers.start()
        receiver.wait_for(3, timeout=30)
        workers.kill(first)
        in_flight = Delivery.select().where(Delivery.lease_until.is_null(False)).count()
        assert in_flight >= 1  # taken and sent, their outcome never written
        workers.start()
        wait_until(lambda: receiver.event_ids() >= sent, 60, "events missing", workers)
    wait_until(
        lambda: {d.status for d in Delivery.select()} == {"succeeded"}, 20, "not settled", workers
    )
    assert {d.attempts for d in Delivery.select()} == {1}
    assert DeliveryAttempt.select().count() == 30


@pytest.fixture
def throwaway_redis():
    server = ThrowawayRedis()
    server.start()
    yield server
    server.stop()


@pytest.mark.slow
def test_redis_outage_during_a_burst_loses_nothing(app, tenant, workers, throwaway_redis):
    """Redis dies in the middle of 500 events and comes back empty: all are delivered."""
    app.config["REDIS_URL"] = throwaway_redis.url
    app.extensions.pop("redis", None)
    started = time.monotonic()
    with Receiver() as receiver:
        register_webhook(tenant, receiver.url)
        workers.start(throwaway_redis.url)
        sent = set()
        for number in range(500):
            if number == 200:
                wait_until(lambda: len(receiver.requests) >= 50, 30, "no progress", workers)
                throwaway_redis.stop()  # the queued jobs are lost with it
            if number == 350:
                time.sleep(1)
                throwaway_redis.start()
            sent.add(emit(tenant, durationSeconds=number).id)
        emitted = time.monotonic()
        wait_until(lambda: receiver.event_ids() >= sent, 90, "events missing", workers)
    assert receiver.event_ids() == sent
    print(
        f"500 events through a Redis outage: {time.monotonic() - started:.1f}s "
        f"({emitted - started:.1f}s emitting)"
    )


def standard_key(secret: str) -> str:
    """A secret as the standardwebhooks library takes it: base64 of its bytes."""
    return base64.b64encode(secret.encode()).decode()


def test_a_rotated_secret_signs_beside_the_new_one_until_its_overlap_ends(tenant, workers):
    """During the overlap each delivery verifies with either secret (standardwebhooks), the new
    one's signature first; once the stored expiry has passed, only with the new one."""
    with Receiver() as receiver:
        webhook = register_webhook(tenant, receiver.url)
        _, new = webhook_service.rotate_secret(
            actor=ACTOR, tenant=tenant, webhook_id=webhook.id, overlap_hours=1
        )
        workers.start()
        webhook_service.send_test(actor=ACTOR, tenant=tenant, webhook_id=webhook.id)
        (during,) = receiver.wait_for(1, timeout=20)
        # The overlap ends: its stored expiry moves into the past.
        Webhook.update(previous_secret_expires_at=utcnow() - timedelta(seconds=1)).where(
            Webhook.id == webhook.id
        ).execute()
        webhook_service.send_test(actor=ACTOR, tenant=tenant, webhook_id=webhook.id)
        after = receiver.wait_for(2, timeout=20)[1]
    old_key, new_key = standard_key(WEBHOOK_SECRET), standard_key(new)
    first, second = during.headers["webhook-signature"].split(" ")
    for key in (new_key, old_key):
        assert StandardWebhook(key).verify(during.body, during.headers)["event"] == "webhook.test"
    assert StandardWebhook(new_key).verify(
        during.body, {**during.headers, "webhook-signature": first}
    )
    assert StandardWebhook(old_key).verify(
        during.body, {**during.headers, "webhook-signature": second}
    )
    assert during.headers["X-Service-Signature"] == signing.sign(new, during.body)
    assert during.headers["X-Service-Signature-Previous"] == signing.sign(
        WEBHOOK_SECRET, during.body
    )
    assert StandardWebhook(new_key).verify(after.body, after.headers)
    with pytest.raises(WebhookVerificationError):
        StandardWebhook(old_key).verify(after.body, after.headers)
    assert " " not in after.headers["webhook-signature"]
    assert after.headers["X-Service-Signature"] == signing.sign(new, after.body)
    assert "X-Service-Signature-Previous" not in after.headers


def test_call_returns_what_the_job_returned(app, redis_url, redis_client, workers):
    from tests.system.workers import rq_config, wait_for_worker

    app.config.update(rq_config({}, redis_url))
    workers.start(queues=("functions",))
    wait_for_worker(workers, redis_client, ("functions",))
    assert queue.call("functions", ANSWER_JOB, "42", timeout=5) == {"answer": "42"}
    started = time.monotonic()
    assert queue.call("functions", SLOW_JOB, 3, timeout=1.5) is None  # not in time
    assert 1.4 < time.monotonic() - started < 2.0
