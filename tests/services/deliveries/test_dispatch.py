"""Fair dispatch: per-webhook and per-tenant places, waiting in the database, the hand-off,
and the slow lane.

The app runs in rq mode on a real Redis with no worker: what the dispatcher sent waits in
the queues for the test to see, and a job is run by calling it as a worker would.
"""

import threading
import time
from datetime import timedelta

import pytest
from rq import Queue

from app import jobs
from app.db import database
from app.models import Delivery, Event, Webhook
from app.services import events
from app.services import webhooks as webhook_service
from app.services.deliveries import dispatch as delivery_dispatch
from app.services.deliveries import sweeper as delivery_sweeper
from app.util import utcnow
from tests.helpers import ACTOR
from tests.receiver import Answer, Receiver

SECRET = "whsec-test-secret-0123456789"


@pytest.fixture
def app(app, redis_url, redis_client):
    app.config.update(QUEUE_MODE="rq", REDIS_URL=redis_url)
    return app


@pytest.fixture
def queues(redis_client):
    return {name: Queue(name, connection=redis_client) for name in delivery_dispatch.LANE_WORKERS}


def register(tenant, url="http://127.0.0.1:9/in"):
    return webhook_service.create_webhook(
        actor=ACTOR, tenant=tenant, url=url, events=["call.ended"], secret=SECRET
    )


def emit(tenant, count=1):
    with database.atomic():
        for number in range(count):
            events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": f"c{number}"})


def in_flight(**where):
    query = Delivery.select().where(Delivery.lease_until > utcnow())
    for field, value in where.items():
        query = query.where(getattr(Delivery, field) == value)
    return list(query)


def waiting_in_database(**where):
    query = Delivery.select().where(Delivery.lease_until.is_null() & Delivery.job_id.is_null())
    for field, value in where.items():
        query = query.where(getattr(Delivery, field) == value)
    return list(query)


def test_a_webhook_has_at_most_two_deliveries_in_flight(app, tenant, queues):
    webhook = register(tenant)
    emit(tenant, 5)
    sent = in_flight(webhook=webhook.id)
    assert len(sent) == 2 and len(waiting_in_database(webhook=webhook.id)) == 3
    assert queues["webhooks"].job_ids == [delivery.job_id for delivery in sent]
    assert {delivery.lane for delivery in sent} == {"webhooks"}


def test_a_tenant_has_at_most_half_the_workers_and_the_rest_wait_in_the_database(
    app, tenant, other_tenant, queues
):
    """Three webhooks of one tenant: two deliveries in flight in all (half of 4 workers);
    another tenant's event of the same moment is sent at once."""
    for _ in range(3):
        register(tenant)
    emit(tenant, 4)
    register(other_tenant)
    emit(other_tenant)
    assert len(in_flight(tenant=tenant.id)) == app.config["WEBHOOK_WORKERS"] // 2 == 2
    assert len(waiting_in_database(tenant=tenant.id)) == 3 * 4 - 2
    assert len(in_flight(tenant=other_tenant.id)) == 1
    # Only what may be sent waits in Redis: the tenant's two, of one event, in one job.
    assert queues["webhooks"].count == 2


def test_the_tenants_share_follows_the_settings(app, tenant):
    app.config.update(WEBHOOK_WORKERS=10, WEBHOOK_TENANT_SHARE=0.3, WEBHOOK_IN_FLIGHT_PER_WEBHOOK=5)
    for _ in range(2):
        register(tenant)
    emit(tenant, 5)
    assert len(in_flight()) == 3
    app.config.update(WEBHOOK_WORKERS=1)
    emit(tenant)
    assert len(in_flight()) == 3  # never below one place, and none freed yet


def test_a_finished_attempt_hands_its_place_to_the_next_delivery(app, tenant, queues):
    with Receiver() as receiver:
        webhook = register(tenant, receiver.url)
        emit(tenant, 3)
        first, second = sorted(in_flight(), key=lambda d: (d.next_attempt_at, d.id))
        [third] = waiting_in_database()
        assert jobs.deliver_webhook(first.id, first.job_id) == "succeeded"
    [now_in_flight] = in_flight(id=third.id)
    assert now_in_flight.webhook_id == webhook.id
    assert queues["webhooks"].job_ids[-1] == now_in_flight.job_id
    assert {d.id for d in in_flight()} == {second.id, third.id}


def test_a_job_sends_the_next_delivery_itself_while_no_other_job_waits(
    app, tenant, queues, redis_client
):
    """A backlog costs one job, not one a delivery: with no job waiting in its lane, the job
    that finished an attempt is handed the tenant's next delivery (written to it) and sends
    it too; the other delivery in flight keeps its own job."""
    with Receiver() as receiver:
        register(tenant, receiver.url)
        emit(tenant, 4)
        first, second = sorted(in_flight(), key=lambda d: (d.next_attempt_at, d.id))
        redis_client.delete(queues["webhooks"].key)  # both jobs taken by workers
        assert jobs.deliver_webhook(first.id, first.job_id) == "succeeded"
        assert len(receiver.requests) == 3
    assert queues["webhooks"].count == 0
    assert [d.id for d in in_flight()] == [second.id]
    assert Delivery.select().where(Delivery.status == "succeeded").count() == 3


def test_an_events_deliveries_to_several_webhooks_are_one_job_in_the_fast_lane(app, tenant, queues):
    """An event's deliveries to two webhooks: one job sends both, one after the other."""
    with Receiver() as crm, Receiver() as analytics:
        register(tenant, crm.url)
        register(tenant, analytics.url)
        emit(tenant)
        first, second = sorted(in_flight(), key=lambda d: (d.next_attempt_at, d.id))
        assert first.job_id == second.job_id
        [job] = queues["webhooks"].jobs
        assert job.id == first.job_id
        assert job.args == (first.id, first.job_id, [second.id])
        assert jobs.deliver_webhook(*job.args) == "succeeded"
        assert len(crm.requests) == len(analytics.requests) == 1
    assert Delivery.select().where(Delivery.status == "succeeded").count() == 2
    assert in_flight() == [] and queues["webhooks"].count == 1  # nothing more was enqueued


def test_a_job_out_of_time_frees_the_rest_of_its_event_for_other_jobs(app, tenant, queues):
    """A job whose time allows no other attempt after the first frees the event's other
    delivery, which is dispatched to a job of its own."""
    app.config.update(WEBHOOK_TIMEOUT=1, WEBHOOK_LEASE_SECONDS=4)  # no time for a second
    with Receiver() as receiver:
        register(tenant, receiver.url)
        register(tenant, receiver.url)
        emit(tenant)
        [job] = queues["webhooks"].jobs
        first_id, job_id, [second_id] = job.args
        assert jobs.deliver_webhook(*job.args) == "succeeded"
        assert len(receiver.requests) == 1
    [second] = in_flight()
    assert second.id == second_id and second.job_id not in (None, job_id)
    assert queues["webhooks"].job_ids[-1] == second.job_id


def test_the_slow_lane_sends_each_delivery_in_a_job_of_its_own(app, tenant, queues):
    """A slow webhook's delivery never waits behind another's attempt in the same job."""
    app.config.update(WEBHOOK_SLOW_WORKERS=4)  # two places for the tenant
    for _ in range(2):
        Webhook.update(lane=delivery_dispatch.SLOW_LANE).where(
            Webhook.id == register(tenant).id
        ).execute()
    emit(tenant)
    sent = in_flight()
    assert len(sent) == 2 and len({delivery.job_id for delivery in sent}) == 2
    assert sorted(queues["webhooks_slow"].job_ids) == sorted(d.job_id for d in sent)


def test_an_event_written_without_dispatch_is_dispatched_by_a_job_outside_a_request(
    app, tenant, queues
):
    """A function call's event: its job's transaction only writes the delivery; outside a
    request, dispatch_after_response leaves the dispatch to a job in the webhooks queue."""
    register(tenant)
    with database.atomic():
        events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": "c1"}, dispatch=False)
    assert in_flight() == [] and len(waiting_in_database()) == 1 and queues["webhooks"].jobs == []
    delivery_dispatch.dispatch_after_response(tenant.id)
    [job] = queues["webhooks"].jobs
    assert (job.func_name, job.args) == (delivery_dispatch.DISPATCH_JOB, (tenant.id,))
    assert jobs.dispatch_deliveries(*job.args) == 1
    [delivery] = in_flight()
    assert queues["webhooks"].job_ids[-1] == delivery.job_id


def test_a_dispatch_after_the_response_runs_in_the_web_process_once_it_is_sent(app, tenant, queues):
    """In a request, the dispatch runs once the response is sent (its close), in this
    process: no job for it."""
    register(tenant)
    with database.atomic():
        events.emit(tenant_id=tenant.id, type="call.ended", data={"callId": "c1"}, dispatch=False)

    @app.get("/test-after-response")
    def answer():
        delivery_dispatch.dispatch_after_response(tenant.id)
        return {"answered": True}

    response = app.test_client().get("/test-after-response")
    assert response.json == {"answered": True}
    assert in_flight() == [] and queues["webhooks"].jobs == []  # not before it is sent
    response.close()
    [delivery] = in_flight()
    [job] = queues["webhooks"].jobs
    assert (job.func_name, job.args[0]) == (delivery_dispatch.DELIVER_JOB, delivery.id)


def test_a_due_retry_waits_for_a_place_like_any_delivery(app, tenant):
    webhook = register(tenant)
    emit(tenant, 2)
    earlier = utcnow() - timedelta(seconds=1)
    Delivery.update(next_attempt_at=earlier).execute()
    retried = Delivery.create(
        id="dlv_retried", tenant=tenant, webhook=webhook, event=Delivery.get().event_id
    )
    assert delivery_sweeper.sweep() == 0  # the webhook's two places are taken
    assert retried.id not in {d.id for d in in_flight()}


def test_a_timeout_moves_the_webhook_to_the_slow_lane_and_an_answer_in_time_back(
    app, tenant, queues
):
    app.config.update(WEBHOOK_TIMEOUT=0.2)
    slow = True

    def answer(request):
        return Answer(delay=0.5 if slow else 0)

    with Receiver(answer) as receiver:
        webhook = register(tenant, receiver.url)
        emit(tenant)
        [delivery] = in_flight()
        assert jobs.deliver_webhook(delivery.id, delivery.job_id) == "pending"
        assert Webhook.get_by_id(webhook.id).lane == "webhooks_slow"
        emit(tenant)  # the next delivery goes in the slow lane
        [slow_one] = in_flight()
        assert slow_one.lane == "webhooks_slow"
        assert queues["webhooks_slow"].job_ids == [slow_one.job_id]
        slow = False
        assert jobs.deliver_webhook(slow_one.id, slow_one.job_id) == "succeeded"
    assert Webhook.get_by_id(webhook.id).lane == "webhooks"


def test_the_slow_lane_gives_a_tenant_half_of_its_workers(app, tenant):
    """Slow webhooks hold their tenant's slow-lane place (one of two workers), never its
    fast-lane places: its other webhooks' deliveries still go."""
    slow_hooks = [register(tenant) for _ in range(3)]
    Webhook.update(lane="webhooks_slow").where(
        Webhook.id.in_([hook.id for hook in slow_hooks])
    ).execute()
    fast_hook = register(tenant)
    emit(tenant)
    assert len(in_flight(lane="webhooks_slow")) == app.config["WEBHOOK_SLOW_WORKERS"] // 2 == 1
    assert [d.webhook_id for d in in_flight(lane="webhooks")] == [fast_hook.id]


def test_a_replay_of_one_tenant_delays_only_that_tenant(
    app, client, headers, tenant, other_tenant, queues
):
    webhook = register(tenant)
    with database.atomic():
        for _ in range(50):
            events.record(tenant_id=tenant.id, type="call.ended", data={})
    response = client.post(
        f"/api/v1/webhooks/{webhook.id}/replay",
        json={"since": "2000-01-01T00:00:00Z"},
        headers=headers,
    )
    assert response.status_code == 202 and response.json == {"replayed": 50}
    register(other_tenant)
    emit(other_tenant)
    assert len(in_flight(tenant=tenant.id)) == 2
    assert len(in_flight(tenant=other_tenant.id)) == 1
    assert queues["webhooks"].count == 3


def test_a_delivery_whose_job_redis_lost_is_sent_again_without_waiting_for_its_lease(
    app, tenant, queues, redis_client
):
    """Redis restarted empty: the sweep finds the job of a delivery in flight gone and
    dispatches it again at once, rather than once its lease runs out."""
    register(tenant)
    emit(tenant)
    [delivery] = in_flight()
    assert delivery_sweeper.sweep() == 0  # its job is there: nothing to do
    # Dispatched a few seconds ago, then Redis lost everything.
    lease = utcnow() + timedelta(seconds=app.config["WEBHOOK_LEASE_SECONDS"] - 3)
    Delivery.update(lease_until=lease).execute()
    redis_client.flushdb()
    assert delivery_sweeper.sweep() == 1
    [again] = in_flight()
    assert again.job_id != delivery.job_id and queues["webhooks"].job_ids == [again.job_id]


def test_a_delivery_just_dispatched_is_not_taken_for_lost(app, tenant, queues, redis_client):
    """A job is enqueued just after its dispatch commits: a sweep in between leaves it."""
    register(tenant)
    emit(tenant)
    redis_client.flushdb()  # as if the enqueue had not happened yet
    assert delivery_sweeper.sweep() == 0


def test_a_dispatch_that_fails_after_the_commit_leaves_the_delivery_to_the_sweeper(
    app, client, headers, tenant, queues, monkeypatch
):
    """The change is committed before its dispatch runs: a dispatch that fails then is no
    error of the request (no 500), and the delivery waits in the database for the sweeper."""

    def fail(tenant_id, keep):
        raise RuntimeError("the database went away")

    webhook = register(tenant)
    monkeypatch.setattr(delivery_dispatch, "dispatch_tenant", fail)
    response = client.post(f"/api/v1/webhooks/{webhook.id}/test", headers=headers)
    assert response.status_code == 202
    assert in_flight() == [] and len(waiting_in_database()) == 1
    monkeypatch.undo()
    assert delivery_sweeper.sweep() == 1
    [delivery] = in_flight()
    assert queues["webhooks"].job_ids == [delivery.job_id]


@pytest.mark.postgres_only
def test_an_event_does_not_wait_for_the_tenants_dispatch_lock(app, tenant, queues):
    """An event's transaction holds the tenant's row until it commits, so it does not wait
    for the tenant's dispatch lock held by another dispatch (a worker's, after an attempt):
    it commits at once, and its delivery is dispatched once it has."""
    register(tenant)
    holding, committed_meanwhile = threading.Event(), threading.Event()

    def hold_the_dispatch_lock() -> None:
        with app.app_context(), database.connection_context(), database.atomic():
            database.execute_sql(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                (delivery_dispatch.DISPATCH_LOCK_CLASS, tenant.id),
            )
            holding.set()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if Event.select().where(Event.tenant == tenant.id).exists():
                    committed_meanwhile.set()
                    break
                time.sleep(0.02)

    holder = threading.Thread(target=hold_the_dispatch_lock)
    holder.start()
    try:
        assert holding.wait(timeout=30)
        emit(tenant)  # its dispatch after the commit waits for the holder to finish
    finally:
        holder.join(timeout=30)
    assert committed_meanwhile.is_set()
    [sent] = in_flight()
    assert queues["webhooks"].job_ids == [sent.job_id]
