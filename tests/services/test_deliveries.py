"""Webhook delivery: body, signatures, outcomes, the retry schedule, leases and the sweeper.

These run inline (jobs in-process after commit) against real HTTP receivers on 127.0.0.1.
"""

import base64
import hashlib
import hmac
import socket
import time
from datetime import timedelta

import pytest
from playhouse.test_utils import count_queries
from standardwebhooks.webhooks import Webhook as StandardWebhook

from app import jobs, queue
from app.models import Delivery, DeliveryAttempt, Event, Webhook
from app.services import deliveries, events
from app.services import webhooks as webhook_service
from app.util import isoformat, new_id, utcnow
from tests.receiver import Answer, Receiver

SECRET = "whsec-test-secret-0123456789"


def register(tenant, url, events=("call.ended",), secret=SECRET):
    return webhook_service.create_webhook(
        tenant=tenant, url=url, events=list(events), secret=secret
    )


def emit(tenant, type="call.ended", data=None):
    with queue.transaction():
        return events.emit(
            tenant_id=tenant.id, type=type, data=data or {"callId": "call_1", "durationSeconds": 7}
        )


def only_delivery():
    [delivery] = Delivery.select()
    return delivery


def new_delivery(tenant, webhook, **fields):
    event = Event.create(id=new_id("evt"), tenant=tenant, type="call.ended", data={})
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
            deliveries.sweep()
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
        assert deliveries.attempt(delivery_id=delivery.id) == "failed"
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
    scheduled = deliveries.RETRY_DELAYS[attempt - 1]
    delays = [
        deliveries.retry_delay(attempt, status_code=500, timed_out=False, retry_after=None)
        for _ in range(50)
    ]
    assert all(0.8 * scheduled <= delay <= 1.2 * scheduled for delay in delays)
    assert len(set(delays)) > 1
    assert sum(deliveries.RETRY_DELAYS) / 3600 == pytest.approx(27.6, abs=0.1)


def test_claim_is_exclusive_until_the_lease_expires(app, tenant):
    delivery = new_delivery(tenant, register(tenant, "http://127.0.0.1:9/"))
    assert deliveries.claim(delivery.id) is not None
    assert deliveries.claim(delivery.id) is None
    Delivery.update(lease_until=utcnow() - timedelta(seconds=1)).execute()
    assert deliveries.claim(delivery.id) is not None
    assert Delivery.get_by_id(delivery.id).attempts == 2


def test_claim_skips_deliveries_not_yet_due_or_settled(app, tenant):
    webhook = register(tenant, "http://127.0.0.1:9/")
    later = new_delivery(tenant, webhook, next_attempt_at=utcnow() + timedelta(minutes=5))
    done = new_delivery(tenant, webhook, status="succeeded")
    assert deliveries.claim(later.id) is None and deliveries.claim(done.id) is None
    assert deliveries.attempt(delivery_id=later.id) is None


def test_claims_of_batches_never_overlap(app, tenant):
    batch = due_deliveries(tenant, register(tenant, "http://127.0.0.1:9/"), 5)
    first = deliveries.claim(limit=3)
    second = deliveries.claim(batch[0].id, limit=3)  # taken already: the two left instead
    assert len(first.ids) == 3 and len(second.ids) == 2
    assert set(first.ids) | set(second.ids) == {d.id for d in batch}
    assert deliveries.claim(limit=3) is None


def test_job_sends_other_due_deliveries_with_its_own(app, tenant):
    with Receiver() as receiver:
        webhook = register(tenant, receiver.url)
        batch = due_deliveries(tenant, webhook, 5)
        later = new_delivery(tenant, webhook, next_attempt_at=utcnow() + timedelta(minutes=5))
        [held] = due_deliveries(tenant, webhook, 1)
        Delivery.update(lease_until=utcnow() + timedelta(minutes=1)).where(
            Delivery.id == held.id
        ).execute()
        jobs.deliver_webhook(batch[2].id)
        sent = [request.headers["X-Service-Delivery-Id"] for request in receiver.requests]
        for delivery in batch:  # the jobs of the others find nothing left to do
            jobs.deliver_webhook(delivery.id)
        assert len(receiver.requests) == len(batch)
    assert sent[0] == batch[2].id and sorted(sent) == sorted(d.id for d in batch)
    assert {r.headers["X-Service-Attempt"] for r in receiver.requests} == {"1"}
    rows = {d.id: (d.status, d.attempts, d.lease_until) for d in Delivery.select()}
    assert all(rows[d.id] == ("succeeded", 1, None) for d in batch)
    assert rows[later.id][:2] == rows[held.id][:2] == ("pending", 0)
    log = [(a.delivery_id, a.number, a.status_code) for a in DeliveryAttempt.select()]
    assert sorted(log) == sorted((d.id, 1, 200) for d in batch)


def test_batch_costs_the_same_queries_whatever_its_size(app, tenant):
    def queries_for(count):
        with Receiver() as receiver:
            batch = due_deliveries(tenant, register(tenant, receiver.url), count)
            with count_queries() as counter:
                deliveries.attempt(delivery_id=batch[0].id, batch_size=50)
            assert len(receiver.requests) == count
        return counter.count

    assert queries_for(2) == queries_for(20)


def test_job_takes_batch_after_batch_while_a_backlog_lasts(app, tenant, monkeypatch):
    monkeypatch.setattr(deliveries, "BATCH_SIZE", 3)
    with Receiver() as receiver:
        batch = due_deliveries(tenant, register(tenant, receiver.url), 8)
        jobs.deliver_webhook(batch[0].id)
        assert len(receiver.requests) == 8
    assert {d.status for d in Delivery.select()} == {"succeeded"}


def test_batch_tries_a_failing_receiver_once_and_leaves_its_others_due(app, tenant):
    with Receiver(lambda request: Answer(500 if request.path == "/down" else 200)) as receiver:
        down = due_deliveries(tenant, register(tenant, receiver.url + "/down"), 3)
        up = due_deliveries(tenant, register(tenant, receiver.url + "/up"), 3)
        before = utcnow()
        assert deliveries.attempt(delivery_id=down[0].id, batch_size=50) == "pending"
        paths = [request.path for request in receiver.requests]
    assert paths[0] == "/down" and sorted(paths) == ["/down"] + ["/up"] * 3
    first = Delivery.get_by_id(down[0].id)
    assert first.attempts == 1 and first.next_attempt_at > before + timedelta(seconds=3)
    for delivery in down[1:]:  # released as they were: due, free, never attempted
        row = Delivery.get_by_id(delivery.id)
        assert (row.status, row.attempts, row.lease_until) == ("pending", 0, None)
        assert row.next_attempt_at < before
    assert {Delivery.get_by_id(d.id).status for d in up} == {"succeeded"}
    assert DeliveryAttempt.select().count() == 4


def test_gone_in_a_batch_fails_the_webhooks_other_deliveries_unsent(app, tenant):
    with Receiver(lambda request: Answer(410)) as receiver:
        webhook = register(tenant, receiver.url)
        batch = due_deliveries(tenant, webhook, 4)
        deliveries.attempt(delivery_id=batch[0].id, batch_size=50)
        assert len(receiver.requests) == 1
    assert not Webhook.get_by_id(webhook.id).is_active
    assert {(d.status, d.lease_until) for d in Delivery.select()} == {("failed", None)}
    assert [a.delivery_id for a in DeliveryAttempt.select()] == [batch[0].id]


def test_batch_stops_sending_after_its_time_and_releases_the_rest(app, tenant, monkeypatch):
    monkeypatch.setattr(deliveries, "BATCH_SECONDS", 0.3)
    with Receiver(lambda request: Answer(delay=0.2)) as receiver:
        batch = due_deliveries(tenant, register(tenant, receiver.url), 6)
        statuses = deliveries.attempt_batch(batch[0].id, limit=50)
        sent = {request.headers["X-Service-Delivery-Id"] for request in receiver.requests}
    assert 1 <= len(sent) <= 3 and batch[0].id in sent
    assert statuses == {d.id: "succeeded" if d.id in sent else None for d in batch}
    for delivery in batch:
        row = Delivery.get_by_id(delivery.id)
        if delivery.id not in sent:
            assert (row.status, row.attempts, row.lease_until) == ("pending", 0, None)


def test_lease_that_covers_one_attempt_only_takes_one_delivery(app, tenant):
    app.config["WEBHOOK_LEASE_SECONDS"] = 5  # an attempt may take 3 s + 10 s
    with Receiver() as receiver:
        batch = due_deliveries(tenant, register(tenant, receiver.url), 3)
        jobs.deliver_webhook(batch[1].id)
        sent = [request.headers["X-Service-Delivery-Id"] for request in receiver.requests]
    assert sent == [batch[1].id]
    assert [Delivery.get_by_id(d.id).attempts for d in batch] == [0, 1, 0]


def test_sweeper_sends_due_deliveries_and_skips_leased_ones(app, tenant):
    with Receiver() as receiver:
        webhook = register(tenant, receiver.url)
        earlier = utcnow() - timedelta(minutes=2)
        due = new_delivery(tenant, webhook, created_at=earlier)
        leased = new_delivery(
            tenant, webhook, created_at=earlier, lease_until=utcnow() + timedelta(minutes=1)
        )
        assert deliveries.sweep() == 1
        assert [r.headers["X-Service-Delivery-Id"] for r in receiver.requests] == [due.id]
    assert Delivery.get_by_id(due.id).status == "succeeded"
    assert Delivery.get_by_id(leased.id).status == "pending"


def test_sweeper_leaves_a_fresh_delivery_to_its_queued_job(app, tenant):
    new_delivery(tenant, register(tenant, "http://127.0.0.1:9/"))
    assert deliveries.sweep() == 0
    app.config["WEBHOOK_LEASE_SECONDS"] = 0
    assert deliveries.sweep() == 1


def test_sweeper_enqueues_a_backlog_once_until_its_job_starts(app, tenant, redis_url, redis_client):
    """A delivery whose job still waits is not enqueued again every lease period."""
    from rq import Queue

    app.config.update(QUEUE_MODE="rq", REDIS_URL=redis_url, WEBHOOK_LEASE_SECONDS=1)
    webhook = register(tenant, "http://127.0.0.1:9/")
    delivery = new_delivery(tenant, webhook, created_at=utcnow() - timedelta(minutes=2))
    waiting = Queue("webhooks", connection=redis_client)
    assert deliveries.sweep() == 1
    time.sleep(1.1)  # a lease period later the job still waits: no duplicate
    deliveries.sweep()
    assert waiting.count == 1
    waiting.remove(waiting.job_ids[0])  # a worker takes the job ...
    deliveries.attempt(delivery_id=delivery.id)  # ... and runs it: refused, rescheduled
    make_due(delivery.id)
    Delivery.update(lease_until=None).where(Delivery.id == delivery.id).execute()
    deliveries.sweep()
    assert waiting.count == 1  # the retry is enqueued


def test_a_batch_drops_the_waiting_jobs_of_the_deliveries_it_sent(
    app, tenant, redis_url, redis_client
):
    """A backlog sent in one batch leaves no job behind to run for nothing; a job a batch did
    not send stays."""
    from rq import Queue
    from rq.job import Job

    app.config.update(QUEUE_MODE="rq", REDIS_URL=redis_url)
    waiting = Queue("webhooks", connection=redis_client)
    with Receiver() as receiver:
        webhook = register(tenant, receiver.url)
        with queue.transaction():
            backlog = [delivery.id for delivery in due_deliveries(tenant, webhook, 5)]
            for delivery_id in backlog:
                deliveries.defer_job(delivery_id)
        later = new_delivery(tenant, webhook, next_attempt_at=utcnow() + timedelta(hours=1))
        queue.enqueue("webhooks", deliveries.JOB, later.id, job_id=deliveries.job_id(later.id))
        assert waiting.count == 6
        job = Job.fetch(waiting.job_ids[0], connection=redis_client)
        waiting.remove(job)  # as a worker takes it
        job.perform()  # the first job sends the whole backlog in one batch
        assert len(receiver.requests) == 5
    assert waiting.job_ids == [deliveries.job_id(later.id)]  # not due: not sent, still waits
    assert not any(redis_client.exists(Job.key_for(deliveries.job_id(i))) for i in backlog[1:])


def test_emit_creates_one_delivery_per_active_subscribed_webhook(tenant, other_tenant):
    with Receiver() as receiver:
        ended = register(tenant, receiver.url + "/a", events=["call.ended", "call.started"])
        register(tenant, receiver.url + "/b", events=["call.started"])
        paused = register(tenant, receiver.url + "/c", events=["call.ended"])
        webhook_service.update_webhook(tenant=tenant, webhook_id=paused.id, is_active=False)
        register(other_tenant, receiver.url + "/d", events=["call.ended"])
        emit(tenant)
        assert [request.path for request in receiver.requests] == ["/a"]
    assert [d.webhook_id for d in Delivery.select()] == [ended.id]


def test_rolled_back_event_sends_nothing(tenant):
    with Receiver() as receiver:
        register(tenant, receiver.url)
        with pytest.raises(RuntimeError), queue.transaction():
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
    assert "169.254.169.254" in delivery.last_error and "private" in delivery.last_error


def test_deleting_a_webhook_removes_its_deliveries_and_log(tenant):
    with Receiver() as receiver:
        webhook = register(tenant, receiver.url)
        emit(tenant)
    webhook_service.delete_webhook(tenant=tenant, webhook_id=webhook.id)
    assert Delivery.select().count() == 0 and DeliveryAttempt.select().count() == 0


def test_event_body_is_compact_utf8_json(app, tenant):
    data = {"transcriptSummary": "Terima kasih ✓"}
    event = Event.create(id="evt_x", tenant=tenant, type="call.transcript", data=data)
    body = deliveries.event_body(event)
    timestamp = isoformat(event.created_at)
    assert (
        body
        == (
            '{"id":"evt_x","event":"call.transcript","timestamp":"' + timestamp + '",'
            '"data":{"transcriptSummary":"Terima kasih ✓"}}'
        ).encode()
    )
