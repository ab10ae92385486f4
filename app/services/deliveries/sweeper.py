"""The sweeper: every due delivery that no live lease holds is dispatched again.

So is one whose job Redis lost: an enqueue lost to a Redis outage, or a worker killed
mid-job, only delays a delivery.
"""

from datetime import datetime, timedelta
from typing import cast

from flask import current_app

from app import queue
from app.models import Delivery
from app.services.deliveries.dispatch import FAST_LANE, dispatch, is_free
from app.util import utcnow

SWEEP_BATCH = 1000
LOST_AFTER_S = 2  # a job RQ does not hold this long after its dispatch was lost with Redis


def sweep(batch: int = SWEEP_BATCH) -> int:
    """Dispatch the due deliveries of every tenant that has some (at most `batch` tenants a
    run); how many were dispatched.

    First the deliveries in flight are checked against the queues. One whose job Redis no
    longer holds (it restarted empty) is free again at once: nothing was sending it. One
    whose lease ran out while its job still waits in the queue (the workers are busy) keeps
    its place: its lease is renewed, so it is not sent to the queue twice. Any other whose
    lease ran out (its worker died mid-attempt) is free again, and dispatched with the rest.
    """
    now = utcnow()
    _free_lost(now)
    _renew_queued(now)
    query = Delivery.select(Delivery.tenant).where(is_free(now)).distinct().limit(batch)
    tenants = cast(list[tuple[str]], list(query.tuples()))
    return sum(dispatch(tenant_id=tenant_id) for (tenant_id,) in tenants)


def _free_lost(now: datetime) -> None:
    # Dispatched at least LOST_AFTER ago: a job enqueued just after its dispatch committed is
    # not taken for lost.
    config = current_app.config
    dispatched_before = now + timedelta(seconds=config["WEBHOOK_LEASE_SECONDS"] - LOST_AFTER_S)
    held = cast(
        list[tuple[str, str]],
        list(
            Delivery.select(Delivery.id, Delivery.job_id)
            .where(
                (Delivery.status == "pending")
                & (Delivery.lease_until > now)
                & (Delivery.lease_until < dispatched_before)
                & Delivery.job_id.is_null(False)
            )
            .limit(SWEEP_BATCH)
            .tuples()
        ),
    )
    gone = queue.lost([job_id for _, job_id in held])
    if gone:
        Delivery.update(lease_until=None, job_id=None).where(
            Delivery.id.in_([delivery_id for delivery_id, job_id in held if job_id in gone])
            & Delivery.job_id.in_(list(gone))
        ).execute()


def _renew_queued(now: datetime) -> None:
    lapsed = list(
        Delivery.select(Delivery.id, Delivery.job_id, Delivery.lane)
        .where(
            (Delivery.status == "pending")
            & (Delivery.lease_until < now)
            & Delivery.job_id.is_null(False)
        )
        .limit(SWEEP_BATCH)
    )
    if not lapsed:
        return
    waiting: set[str] = set()
    for lane in {delivery.lane or FAST_LANE for delivery in lapsed}:
        in_queue = queue.waiting(lane)
        if in_queue is None:  # Redis does not answer: the jobs are as good as lost
            return
        waiting |= in_queue
    queued = [delivery.id for delivery in lapsed if delivery.job_id in waiting]
    if queued:
        lease_until = now + timedelta(seconds=current_app.config["WEBHOOK_LEASE_SECONDS"])
        Delivery.update(lease_until=lease_until).where(
            Delivery.id.in_(queued) & (Delivery.lease_until < now)
        ).execute()
