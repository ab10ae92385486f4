"""The sweeper: due deliveries that no job holds are dispatched again, leased ones are left."""

from datetime import timedelta

from app import queue
from app.models import Delivery
from app.services.deliveries import sweeper as delivery_sweeper
from app.util import utcnow
from tests.receiver import Receiver
from tests.services.deliveries.test_attempt import (
    due_deliveries,
    emit,
    new_delivery,
    only_delivery,
    register,
)


def test_sweeper_sends_due_deliveries_and_skips_leased_ones(app, tenant):
    with Receiver() as receiver:
        webhook = register(tenant, receiver.url)
        earlier = utcnow() - timedelta(minutes=2)
        due = new_delivery(tenant, webhook, created_at=earlier)
        leased = new_delivery(
            tenant, webhook, created_at=earlier, lease_until=utcnow() + timedelta(minutes=1)
        )
        assert delivery_sweeper.sweep() == 1
        assert [r.headers["X-Service-Delivery-Id"] for r in receiver.requests] == [due.id]
    assert Delivery.get_by_id(due.id).status == "succeeded"
    assert Delivery.get_by_id(leased.id).status == "pending"


def test_sweeper_keeps_a_delivery_whose_job_waits_and_dispatches_one_whose_job_is_lost(
    app, tenant, redis_url, redis_client
):
    """A dispatched delivery whose lease ran out while its job still waits in the queue keeps
    its job (its lease is renewed); one whose job Redis lost, or whose worker died before
    claiming it, is dispatched again to a new job."""
    from rq import Queue
    from rq.job import Job, JobStatus

    app.config.update(QUEUE_MODE="rq", REDIS_URL=redis_url)
    waiting = Queue("webhooks", connection=redis_client)
    with Receiver() as receiver:
        register(tenant, receiver.url)
        emit(tenant)  # dispatched: its job waits, no worker runs here
    delivery = only_delivery()
    assert waiting.job_ids == [delivery.job_id] and delivery.lease_until > utcnow()

    def lapse():
        Delivery.update(lease_until=utcnow() - timedelta(seconds=1)).execute()

    lapse()
    assert delivery_sweeper.sweep() == 0
    assert only_delivery().job_id == delivery.job_id and only_delivery().lease_until > utcnow()
    lapse()
    waiting.empty()  # Redis lost the job
    assert delivery_sweeper.sweep() == 1 and delivery_sweeper.sweep() == 0
    replacement = only_delivery().job_id
    assert replacement != delivery.job_id and waiting.job_ids == [replacement]
    job = Job.fetch(replacement, connection=redis_client)
    waiting.remove(job)  # a worker takes it and dies before claiming the delivery
    job.set_status(JobStatus.STARTED)
    lapse()
    assert delivery_sweeper.sweep() == 1
    assert waiting.job_ids == [only_delivery().job_id] != [replacement]


def test_sweeper_enqueues_a_due_delivery_that_never_had_a_job(app, tenant, redis_url):
    """A row from before deliveries named their job (job_id empty) is enqueued once."""
    app.config.update(QUEUE_MODE="rq", REDIS_URL=redis_url)
    with Receiver() as receiver:
        webhook = register(tenant, receiver.url)
        [delivery] = due_deliveries(tenant, webhook, 1)
    assert delivery.job_id is None
    assert delivery_sweeper.sweep() == 1 and delivery_sweeper.sweep() == 0
    assert queue.known(Delivery.get_by_id(delivery.id).job_id)
