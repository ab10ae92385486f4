"""Webhook delivery: body, signatures, outcomes, the retry schedule and leases.

These run inline (jobs in-process after commit) against real HTTP receivers on 127.0.0.1.
"""

import base64
import hashlib
import hmac
import socket
import threading
import time
from datetime import timedelta

import pytest
from playhouse.test_utils import count_queries
from standardwebhooks.webhooks import Webhook as StandardWebhook

from app import jobs
from app.db import database
from app.models import Delivery, DeliveryAttempt, Event, Webhook
from app.outbound import client
from app.services import events
from app.services import webhooks as webhook_service
from app.services.deliveries import attempt as delivery_attempt
from app.services.deliveries import dispatch as delivery_dispatch
from app.services.deliveries import schedule as delivery_schedule
from app.services.deliveries import sweeper as delivery_sweeper
from app.services.deliveries import wire as delivery_wire
from app.util import isoformat, new_id, utcnow
from tests.helpers import ACTOR, captured_queries
from tests.receiver import Answer, Receiver

SECRET = "whsec-test-secret-0123456789"


def register(tenant, url, events=("call.ended",), secret=SECRET):
    return webhook_service.create_webhook(
        actor=ACTOR, tenant=tenant, url=url, events=list(events), secret=secret
    )


def emit(tenant, type="call.ended", data=None):
    with database.atomic():
        return events.emit(
            tenant_id=tenant.id, type=type, data=data or {"callId": "call_1", "durationSeconds": 7}
        )


def only_delivery():
    [delivery] = Delivery.select()
    return delivery


def new_delivery(tenant, webhook, **fields):
    event = events.record(tenant_id=tenant.id, type="call.ended", data={})
    return Delivery.create(id=new_id("dlv"), tenant=tenant, webhook=webhook, event=event, **fields)


def due_deliveries(tenant, webhook, count):
    earlier = utcnow() - timedelta(seconds=1)
    return [new_delivery(tenant, webhook, next_attempt_at=earlier) for _ in range(count)]


def make_due(delivery_id):
    Delivery.update(next_attempt_at=utcnow() - timedelta(seconds=1)).where(
        Delivery.id == delivery_id
    ).execute()


def test_delivery_body_and_headers_are_signed_both_ways(tenant):
    with Receiver() as receiver:
        webhook = register(tenant, receiver.url + "/hook")
        event = emit(tenant)
        [request] = receiver.requests
    delivery = only_delivery()
    assert request.method == "POST" and request.path == "/hook"
    assert request.json() == {
        "id": event.id,
        "event": "call.ended",
        "timestamp": isoformat(event.created_at),
        "data": {"callId": "call_1", "durationSeconds": 7},
    }
    headers = request.headers
    assert headers["Content-Type"] == "application/json"
    expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Service-Signature"], "sha256=" + expected)
    assert headers["X-Service-Event-Id"] == event.id == headers["webhook-id"]
    assert headers["X-Service-Delivery-Id"] == delivery.id
    assert headers["X-Service-Attempt"] == "1"
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 5
    key = base64.b64encode(SECRET.encode()).decode()
    assert StandardWebhook(key).verify(request.body, headers) == request.json()
    assert webhook.id == delivery.webhook_id


def test_standard_signature_fails_with_another_secret(tenant):
    with Receiver() as receiver:
        register(tenant, receiver.url)
        emit(tenant)
        [request] = receiver.requests
    with pytest.raises(Exception, match="signature"):
        StandardWebhook(base64.b64encode(b"another-secret-value").decode()).verify(
            request.body, request.headers
        )


def test_success_is_logged_and_settles_the_delivery(tenant):
    with Receiver(lambda request: Answer(204, body=b"")) as receiver:
        webhook = register(tenant, receiver.url)
        Webhook.update(failing_since=utcnow() - timedelta(days=1)).execute()
        emit(tenant)
    delivery = only_delivery()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("succeeded", 1, 204)
    assert delivery.completed_at is not None and delivery.lease_until is None
    [attempt] = DeliveryAttempt.select()
    assert (attempt.number, attempt.status_code, attempt.error) == (1, 204, None)
    assert attempt.duration_ms >= 0
    assert Webhook.get_by_id(webhook.id).failing_since is None


def test_failure_is_retried_after_five_seconds_with_jitter(tenant):
    with Receiver(lambda request: Answer(500, body=b"boom")) as receiver:
        webhook = register(tenant, receiver.url)
        before = utcnow()
        emit(tenant)
    delivery = only_delivery()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, 500)
    delay = (delivery.next_attempt_at - before).total_seconds()
    assert 4.0 <= delay <= 6.5
    [attempt] = DeliveryAttempt.select()
    assert attempt.status_code == 500 and attempt.response_excerpt == "boom"
    assert attempt.error == "The receiver answered 500."
    assert Webhook.get_by_id(webhook.id).failing_since is not None


def test_receiver_that_recovers_gets_the_same_event_on_retry(app, tenant):
    app.config["WEBHOOK_RETRY_SCALE"] = 0.001
    answers = iter([Answer(503), Answer(500), Answer(200)])
    with Receiver(lambda request: next(answers)) as receiver:
        register(tenant, receiver.url)
        event = emit(tenant)
        while len(receiver.requests) < 3:
            time.sleep(0.02)
            delivery_sweeper.sweep()
    assert [r.headers["X-Service-Event-Id"] for r in receiver.requests] == [event.id] * 3
    assert [r.headers["X-Service-Attempt"] for r in receiver.requests] == ["1", "2", "3"]
    assert len({r.body for r in receiver.requests}) == 1
    delivery = only_delivery()
    assert (delivery.status, delivery.attempts) == ("succeeded", 3)
    log = [
        (a.number, a.status_code) for a in DeliveryAttempt.select().order_by(DeliveryAttempt.number)
    ]
    assert log == [(1, 503), (2, 500), (3, 200)]


def test_redirect_is_a_failure_and_not_followed(tenant):
    def answer(request):
        return Answer(301, headers={"Location": "/moved"}) if request.path == "/" else Answer()

    with Receiver(answer) as receiver:
        register(tenant, receiver.url + "/")
        emit(tenant)
        assert [request.path for request in receiver.requests] == ["/"]
    delivery = only_delivery()
    assert delivery.status == "pending" and delivery.last_status_code == 301
    assert "redirects are not followed" in delivery.last_error


def test_gone_disables_the_webhook_at_once(tenant):
    with Receiver(lambda request: Answer(410)) as receiver:
        webhook = register(tenant, receiver.url)
        waiting = new_delivery(tenant, webhook, next_attempt_at=utcnow() + timedelta(hours=1))
        emit(tenant)
    webhook = Webhook.get_by_id(webhook.id)
    assert not webhook.is_active and "410" in webhook.disabled_reason
    statuses = {d.id: d.status for d in Delivery.select()}
    assert set(statuses.values()) == {"failed"}
    assert Delivery.get_by_id(waiting.id).last_error == "The webhook was disabled."


def test_five_days_of_failures_disable_the_webhook(tenant):
    with Receiver(lambda request: Answer(500)) as receiver:
        webhook = register(tenant, receiver.url)
        Webhook.update(failing_since=utcnow() - timedelta(days=5, minutes=1)).execute()
        emit(tenant)
    webhook = Webhook.get_by_id(webhook.id)
    assert not webhook.is_active and webhook.disabled_reason == "Every delivery failed for 5 days."
    assert only_delivery().status == "failed"


def test_four_days_of_failures_keep_the_webhook(tenant):
    with Receiver(lambda request: Answer(500)) as receiver:
        webhook = register(tenant, receiver.url)
        Webhook.update(failing_since=utcnow() - timedelta(days=4)).execute()
        emit(tenant)
    assert Webhook.get_by_id(webhook.id).is_active
    assert only_delivery().status == "pending"


def test_eighth_failed_attempt_fails_the_delivery(tenant):
    with Receiver(lambda request: Answer(500)) as receiver:
        register(tenant, receiver.url)
        emit(tenant)
        delivery = only_delivery()
        Delivery.update(attempts=7).execute()
        make_due(delivery.id)
        assert delivery_attempt.deliver(delivery_id=delivery.id) == "failed"
        assert receiver.requests[-1].headers["X-Service-Attempt"] == "8"
    delivery = only_delivery()
    assert delivery.status == "failed" and delivery.next_attempt_at is None
    assert delivery.completed_at is not None


@pytest.mark.parametrize(
    "answer, low, high",
    [
        (Answer(429), 60, 60),  # throttled: at least a minute instead of 5 s
        (Answer(503, headers={"Retry-After": "8"}), 8, 8),  # honoured, below 2 × 5 s
        (Answer(503, headers={"Retry-After": "3600"}), 10, 10),  # capped at 2 × 5 s
        (Answer(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}), 4, 6),
    ],
)
def test_throttling_and_retry_after_set_the_next_delay(tenant, answer, low, high):
    with Receiver(lambda request: answer) as receiver:
        register(tenant, receiver.url)
        before = utcnow()
        emit(tenant)
    delay = (only_delivery().next_attempt_at - before).total_seconds()
    assert low - 0.1 <= delay <= high + 1.5


def test_timeout_waits_at_least_a_minute(app, tenant):
    app.config["WEBHOOK_TIMEOUT"] = 0.2
    with Receiver(lambda request: Answer(delay=0.6)) as receiver:
        register(tenant, receiver.url)
        before = utcnow()
        emit(tenant)
    delivery = only_delivery()
    assert delivery.last_status_code is None and "time" in delivery.last_error
    assert (delivery.next_attempt_at - before).total_seconds() >= 60


@pytest.mark.parametrize("attempt", range(1, 8))
def test_retry_delay_follows_the_schedule_with_jitter(app, attempt):
    scheduled = delivery_schedule.RETRY_DELAYS[attempt - 1]
    delays = [
        delivery_schedule.retry_delay(attempt, status_code=500, timed_out=False, retry_after=None)
        for _ in range(50)
    ]
    assert all(0.8 * scheduled <= delay <= 1.2 * scheduled for delay in delays)
    assert len(set(delays)) > 1
    assert sum(delivery_schedule.RETRY_DELAYS) / 3600 == pytest.approx(27.6, abs=0.1)


def test_claim_is_exclusive_until_the_lease_expires(app, tenant):
    delivery = new_delivery(tenant, register(tenant, "http://127.0.0.1:9/"))
    assert delivery_attempt.claim(delivery.id) is not None
    assert delivery_attempt.claim(delivery.id) is None
    Delivery.update(lease_until=utcnow() - timedelta(seconds=1)).execute()
    assert delivery_attempt.claim(delivery.id) is not None
    assert Delivery.get_by_id(delivery.id).attempts == 0  # claimed, never tried


def test_claim_skips_deliveries_not_yet_due_or_settled(app, tenant):
    webhook = register(tenant, "http://127.0.0.1:9/")
    later = new_delivery(tenant, webhook, next_attempt_at=utcnow() + timedelta(minutes=5))
    done = new_delivery(tenant, webhook, status="succeeded")
    assert delivery_attempt.claim(later.id) is None and delivery_attempt.claim(done.id) is None
    assert delivery_attempt.deliver(delivery_id=later.id) is None


def test_a_job_sends_its_own_delivery_and_hands_its_place_on(app, tenant):
    """A job attempts the delivery it was given; the tenant's other due deliveries are sent
    after it by the dispatch it hands its place to, each by a job of its own."""
    with Receiver() as receiver:
        batch = due_deliveries(tenant, register(tenant, receiver.url), 3)
        assert jobs.deliver_webhook(batch[1].id) == "succeeded"
        assert jobs.deliver_webhook(batch[1].id) is None  # a repeat finds it settled
        sent = [request.headers["X-Service-Delivery-Id"] for request in receiver.requests]
    assert sent[0] == batch[1].id and sorted(sent[1:]) == sorted([batch[0].id, batch[2].id])
    rows = {d.id: (d.status, d.attempts) for d in Delivery.select()}
    assert rows == {delivery.id: ("succeeded", 1) for delivery in batch}


def test_a_job_hands_its_place_on_counting_what_is_in_flight_once(app, tenant):
    """The place an attempt has just freed is counted under the dispatch's lock only, not
    first in a look without it: one count of the tenant's deliveries in flight for the
    hand-off, none for the dispatch after the next delivery (nothing is due by then)."""
    with Receiver() as receiver:
        first, second = due_deliveries(tenant, register(tenant, receiver.url), 2)
        with captured_queries() as statements:
            assert delivery_attempt.deliver(delivery_id=first.id) == "succeeded"
        assert len(receiver.requests) == 2
    assert Delivery.get_by_id(second.id).status == "succeeded"
    assert sum("COUNT(" in statement.sql for statement in statements) == 1


def test_a_job_attempts_only_the_delivery_dispatched_to_it(app, tenant):
    """A job whose delivery was dispatched again meanwhile (to another job) sends nothing."""
    with Receiver() as receiver:
        [delivery] = due_deliveries(tenant, register(tenant, receiver.url), 1)
        Delivery.update(job_id="job_other").execute()
        assert delivery_attempt.deliver(delivery_id=delivery.id, job_id="job_mine") is None
        assert receiver.requests == []
        assert delivery_attempt.deliver(delivery_id=delivery.id, job_id="job_other") == "succeeded"
    assert Delivery.get_by_id(delivery.id).job_id is None  # no job holds it any more


def test_a_delivery_whose_send_raises_is_its_failed_attempt_and_nobody_elses(
    app, tenant, other_tenant, monkeypatch
):
    """Whatever goes wrong with one delivery is recorded as its own failed attempt; a second
    tenant's delivery of the same moment arrives."""
    send = client.Sender.send

    def broken_for_one_receiver(self, method, url, **kwargs):
        if url.endswith("/broken"):
            raise RuntimeError("something nobody expected")
        return send(self, method, url, **kwargs)

    monkeypatch.setattr(client.Sender, "send", broken_for_one_receiver)
    with Receiver() as receiver:
        broken = register(tenant, receiver.url + "/broken")
        working = register(other_tenant, receiver.url + "/working")
        with database.atomic():  # both events in the same moment
            events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": "call_a"})
            events.emit(tenant_id=other_tenant.id, type="call.ended", data={"callId": "call_b"})
        assert [request.path for request in receiver.requests] == ["/working"]
    failed = Delivery.get(Delivery.webhook == broken.id)
    assert (failed.status, failed.attempts, failed.lease_until) == ("pending", 1, None)
    assert failed.last_error == "The request could not be made (RuntimeError)."
    assert failed.next_attempt_at > utcnow()  # retried on the schedule
    [attempt] = DeliveryAttempt.select().where(DeliveryAttempt.delivery == failed.id)
    assert (attempt.number, attempt.status_code) == (1, None)
    assert Delivery.get(Delivery.webhook == working.id).status == "succeeded"


def test_a_disabled_webhooks_delivery_fails_without_an_attempt(app, tenant):
    with Receiver() as receiver:
        webhook = register(tenant, receiver.url)
        [delivery] = due_deliveries(tenant, webhook, 1)
        Webhook.update(is_active=False).execute()
        assert delivery_attempt.deliver(delivery_id=delivery.id) == "failed"
        assert receiver.requests == []
    row = Delivery.get_by_id(delivery.id)
    assert (row.status, row.attempts, row.last_error) == ("failed", 0, "The webhook is disabled.")
    assert DeliveryAttempt.select().count() == 0


def test_an_outcome_is_not_written_over_the_job_that_took_the_delivery_over(app, tenant):
    """A failure comes back after the lease ran out and another job holds the delivery: that
    job's outcome is the one that counts."""
    with Receiver(lambda request: Answer(500)) as receiver:
        [delivery] = due_deliveries(tenant, register(tenant, receiver.url), 1)
        lease = delivery_attempt.claim(delivery.id)
        Delivery.update(lease_until=utcnow() - timedelta(seconds=1)).execute()
        assert delivery_attempt.claim(delivery.id) is not None  # another job takes it over
        row = Delivery.get_by_id(delivery.id)
        sent = delivery_attempt.send(row)
        assert delivery_attempt.record(row, lease, sent) is None
    assert Delivery.get_by_id(delivery.id).attempts == 0
    assert DeliveryAttempt.select().count() == 0


@pytest.mark.parametrize("outcome", ["timeout", "failure", "success"])
def test_a_webhook_deleted_while_its_attempt_is_in_flight_is_let_go(
    app, client, headers, tenant, caplog, outcome
):
    """The webhook (with its deliveries) is deleted through the API while an attempt is under
    way, in the slow lane or the fast: the attempt's outcome is written nowhere, without an
    error (a log line says why), and nothing else changes."""
    caplog.set_level("INFO", logger=delivery_attempt.__name__)
    answers = {"timeout": Answer(delay=1.0), "failure": Answer(500), "success": Answer(200)}
    app.config["WEBHOOK_TIMEOUT"] = 0.3
    with Receiver(lambda request: answers[outcome]) as receiver:
        webhook = register(tenant, receiver.url)
        lane = delivery_dispatch.SLOW_LANE if outcome == "timeout" else delivery_dispatch.FAST_LANE
        Webhook.update(lane=lane).execute()
        other = register(tenant, receiver.url + "/other")
        [delivery] = due_deliveries(tenant, webhook, 1)
        lease = delivery_attempt.claim(delivery.id)
        row = Delivery.get_by_id(delivery.id)
        sent = delivery_attempt.send(row)  # the attempt, under way
    assert sent.timed_out is (outcome == "timeout")
    deleted = client.delete(f"/api/v1/webhooks/{webhook.id}", headers=headers)
    assert deleted.status_code == 204
    assert delivery_attempt.record(row, lease, sent) is None
    assert not Delivery.select().exists() and not DeliveryAttempt.select().exists()
    assert [hook.id for hook in Webhook.select()] == [other.id]
    assert Webhook.get_by_id(other.id).consecutive_failures == 0
    assert not [record for record in caplog.records if record.exc_info]
    assert f"delivery {delivery.id} was deleted with its webhook" in caplog.text


@pytest.mark.postgres_only
def test_a_webhook_deleted_while_an_outcome_is_written_waits_for_it(app, tenant, monkeypatch):
    """The delete comes while an attempt's outcome is being written, which holds the webhook's
    row (its failure count) and is about to write the delivery's: the delete waits for the
    webhook's row before it touches the deliveries, so neither waits for the other in a
    circle (a deadlock, which PostgreSQL ends by failing one of them)."""
    with Receiver(lambda request: Answer(500)) as receiver:
        webhook = register(tenant, receiver.url)
        [delivery] = due_deliveries(tenant, webhook, 1)
        lease = delivery_attempt.claim(delivery.id)
        row = Delivery.get_by_id(delivery.id)
        sent = delivery_attempt.send(row)
    failures = []

    def delete() -> None:
        with app.app_context(), database.connection_context():
            try:
                webhook_service.delete_webhook(actor=ACTOR, tenant=tenant, webhook_id=webhook.id)
            except Exception as exc:
                failures.append(exc)

    deleter = threading.Thread(target=delete)
    settle = delivery_attempt._settle

    def settle_once_the_delete_came(*args, **kwargs):
        deleter.start()
        time.sleep(0.5)  # the delete goes as far as it can meanwhile
        return settle(*args, **kwargs)

    monkeypatch.setattr(delivery_attempt, "_settle", settle_once_the_delete_came)
    try:
        status = delivery_attempt.record(row, lease, sent)
    finally:
        deleter.join(timeout=30)
    assert failures == [] and status == "pending"
    assert not Webhook.select().exists()
    assert not Delivery.select().exists() and not DeliveryAttempt.select().exists()


def test_a_delivery_costs_the_same_statements_every_time(app, tenant):
    """Claim, read, write the outcome and the attempt, then the hand-off's dispatch (its
    count of what is in flight, and the next due delivery: none here)."""
    with Receiver() as receiver:
        batch = due_deliveries(tenant, register(tenant, receiver.url), 2)
        later = utcnow() + timedelta(minutes=5)
        Delivery.update(next_attempt_at=later).where(Delivery.id == batch[1].id).execute()
        counts = []
        for delivery in batch:
            make_due(delivery.id)
            with count_queries() as counter:
                delivery_attempt.deliver(delivery_id=delivery.id)
            counts.append(counter.count)
    assert counts[0] == counts[1] <= 8


def test_emit_creates_one_delivery_per_active_subscribed_webhook(tenant, other_tenant):
    with Receiver() as receiver:
        ended = register(tenant, receiver.url + "/a", events=["call.ended", "call.started"])
        register(tenant, receiver.url + "/b", events=["call.started"])
        paused = register(tenant, receiver.url + "/c", events=["call.ended"])
        webhook_service.update_webhook(
            actor=ACTOR, tenant=tenant, webhook_id=paused.id, is_active=False
        )
        register(other_tenant, receiver.url + "/d", events=["call.ended"])
        emit(tenant)
        assert [request.path for request in receiver.requests] == ["/a"]
    assert [d.webhook_id for d in Delivery.select()] == [ended.id]


def test_rolled_back_event_sends_nothing(tenant):
    with Receiver() as receiver:
        register(tenant, receiver.url)
        with pytest.raises(RuntimeError), database.atomic():
            events.emit(tenant_id=tenant.id, type="call.ended", data={})
            raise RuntimeError("the change failed")
        assert receiver.requests == []
    assert Delivery.select().count() == 0 and Event.select().count() == 0


@pytest.fixture
def private_urls_refused(app):
    app.config["ALLOW_PRIVATE_URLS"] = False


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1:{port}/",
        "https://10.0.0.1/",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]:{port}/",
        "https://[::ffff:127.0.0.1]:{port}/",
        "http://127.0.0.1:{port}/",
    ],
)
def test_delivery_refuses_blocked_addresses(tenant, private_urls_refused, url):
    with Receiver() as receiver:
        # Written directly: registration refuses these URLs (tests/resources/test_webhooks.py).
        webhook = Webhook.create(
            id=new_id("wh"),
            tenant=tenant,
            url=url.format(port=receiver.port),
            events=["call.ended"],
            secret=SECRET,
        )
        emit(tenant)
        assert receiver.requests == []
    delivery = only_delivery()
    assert delivery.status == "pending" and delivery.webhook_id == webhook.id
    assert delivery.last_status_code is None
    [attempt] = DeliveryAttempt.select()
    assert "private or reserved" in attempt.error or "https://" in attempt.error


def test_delivery_to_a_host_that_is_no_host_name_is_a_failed_attempt(tenant):
    # Written directly: registration refuses this URL (tests/resources/test_webhooks.py).
    Webhook.create(
        id=new_id("wh"), tenant=tenant, url="https://a..b/h", events=["call.ended"], secret=SECRET
    )
    emit(tenant)
    delivery = only_delivery()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, None)
    [attempt] = DeliveryAttempt.select()
    assert attempt.status_code is None and "not a valid host name" in attempt.error


def test_delivery_refuses_a_name_that_now_resolves_to_a_private_address(
    tenant, private_urls_refused, monkeypatch
):
    answers = {"hooks.example.com": "93.184.216.34"}

    def getaddrinfo(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    register(tenant, "https://hooks.example.com/in")  # public when registered
    answers["hooks.example.com"] = "169.254.169.254"  # the DNS answer changes
    emit(tenant)
    delivery = only_delivery()
    assert delivery.status == "pending"
    assert delivery.last_error == "The host name does not resolve to a public address."
    assert "169.254" not in delivery.last_error  # the tenant reads the delivery log


def test_deleting_a_webhook_removes_its_deliveries_and_log(tenant):
    with Receiver() as receiver:
        webhook = register(tenant, receiver.url)
        emit(tenant)
    webhook_service.delete_webhook(actor=ACTOR, tenant=tenant, webhook_id=webhook.id)
    assert Delivery.select().count() == 0 and DeliveryAttempt.select().count() == 0


def test_event_body_is_compact_utf8_json(app, tenant):
    data = {"transcriptSummary": "Terima kasih ✓"}
    event = events.record(tenant_id=tenant.id, type="call.transcript", data=data)
    body = delivery_wire.event_body(event)
    timestamp = isoformat(event.created_at)
    assert (
        body
        == (
            '{"id":"' + event.id + '","event":"call.transcript","timestamp":"' + timestamp + '",'
            '"data":{"transcriptSummary":"Terima kasih ✓"}}'
        ).encode()
    )
