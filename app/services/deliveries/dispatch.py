"""Fair dispatch: a tenant's due deliveries go to their lanes' queues only while it has places.

The delivery row is the truth, and deliveries wait in the database, not in Redis. The
dispatcher sends a tenant's due deliveries to a queue only while it has places: at most
WEBHOOK_IN_FLIGHT_PER_WEBHOOK per webhook and a share of a lane's workers per tenant, counted
from the leases of the deliveries in flight; it runs in the transaction that made deliveries
(an event's), after each attempt (which hands its place on), and in the sweeper. A webhook
whose attempt timed out goes to the slow lane (its own queue and workers) until it answers
in time again.
"""

import logging
import threading
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

import peewee as pw
from flask import current_app

from app import queue
from app.db import database, is_sqlite, transaction
from app.models import Delivery, Webhook
from app.util import new_id, utcnow

DELIVER_JOB = "app.jobs.deliver_webhook"  # by name: the jobs module imports this one
DISPATCH_JOB = "app.jobs.dispatch_deliveries"
FAST_LANE, SLOW_LANE = "webhooks", "webhooks_slow"  # the RQ queues
LANE_WORKERS = {FAST_LANE: "WEBHOOK_WORKERS", SLOW_LANE: "WEBHOOK_SLOW_WORKERS"}
# The PostgreSQL advisory lock class under which one tenant's dispatches run one at a time
# (the second key is the tenant id's hash): any fixed number ("dispatch" in ASCII, 32 bits).
DISPATCH_LOCK_CLASS = 0x64697370

log = logging.getLogger(__name__)


def new_job_id() -> str:
    """An id for the RQ job that is to send a delivery, kept on its row: only that job may
    attempt it, and the sweeper asks RQ whether it still waits."""
    return new_id("job")


def defer_dispatch(tenant_id: str) -> None:
    """Dispatch the tenant's due deliveries once the current transaction commits.

    The change that made them is committed by then: a dispatch that fails (the database
    went away a moment) is logged and left to the sweeper, never the caller's error."""

    def dispatch_committed() -> None:
        try:
            dispatch(tenant_id=tenant_id)
        except Exception:
            log.exception("could not dispatch the deliveries of %s; the sweeper will", tenant_id)

    database.after_commit(dispatch_committed)


def tenant_places(lane: str) -> int:
    """How many of a tenant's deliveries may be in flight in a lane at once: its share of the
    lane's workers, at least one."""
    config = current_app.config
    return max(1, int(config[LANE_WORKERS[lane]] * config["WEBHOOK_TENANT_SHARE"]))


def dispatch_after_response(tenant_id: str) -> None:
    """Dispatch the tenant's due deliveries once the current request's response is sent (a
    function call's answer), in this process; outside a request, or in inline mode, by a
    job. Deliveries that a crash in that moment leaves undispatched wait for the sweeper."""
    queue.after_response(FAST_LANE, DISPATCH_JOB, tenant_id)


_dispatching = threading.local()


@dataclass(frozen=True)
class Keep:
    """A job that asks the dispatch to hand it one of the deliveries it takes, in its lane,
    to send next itself (job_id is written on the delivery, as a queued job's would be); the
    dispatch does so only while no other job waits in that lane."""

    job_id: str
    lane: str


@dataclass(frozen=True)
class Kept:
    """The delivery a dispatch handed to the job that asked (Keep), with its lease."""

    delivery_id: str
    lease_until: datetime


def dispatch(*, tenant_id: str) -> int:
    """Send the tenant's due deliveries to their lanes' queues while it has places; how many.

    A job that runs in this thread at once (inline mode outside a request) dispatches again
    when it ends: that call only notes the tenant, and the dispatch in hand goes on with it,
    so a backlog is worked through in a loop, not a recursion as deep as the backlog.
    """
    return dispatch_and_keep(tenant_id, None)[0]


def dispatch_and_keep(
    tenant_id: str, keep: Keep | None, *, freed: bool = False
) -> tuple[int, Kept | None]:
    """dispatch(), and the delivery handed to the job that asked for one (keep), which the
    count leaves out. freed: the caller has just freed one of the tenant's places (an
    attempt written), so the look for a free place is skipped."""
    waiting: set[str] | None = getattr(_dispatching, "tenants", None)
    if waiting is not None:
        waiting.add(tenant_id)
        return 0, None
    _dispatching.tenants = waiting = set()
    try:
        sent, kept = dispatch_tenant(tenant_id, keep, look=not freed)
        while waiting:
            sent += dispatch_tenant(waiting.pop(), None)[0]
    finally:
        _dispatching.tenants = None
    return sent, kept


def _lock_dispatch(tenant_id: str, *, wait: bool = True) -> bool:
    """One dispatch of a tenant at a time, so two cannot both see a place free and both take
    it; until the transaction ends. SQLite: the IMMEDIATE transaction serialises them
    already. wait=False: False at once when another transaction holds it."""
    if is_sqlite():
        return True
    take = pw.fn.pg_advisory_xact_lock if wait else pw.fn.pg_try_advisory_xact_lock
    cursor = database.execute(
        pw.Select(columns=[take(DISPATCH_LOCK_CLASS, pw.fn.hashtext(tenant_id))])
    )
    return wait or bool(cursor.fetchone()[0])


def dispatch_within(tenant_id: str) -> None:
    """Dispatch the tenant's due deliveries in the transaction that has just made some (an
    event's), so the change and their leases commit together: one write transaction, not a
    second one after the commit. Their jobs are enqueued once it commits.

    That transaction holds the tenant's row (its event seq) until it commits, so it does not
    wait for the tenant's dispatch lock: while another dispatch holds it (a worker's, after
    an attempt), the new deliveries are dispatched once this transaction commits instead."""
    with nullcontext() if database.in_transaction() else transaction():
        if _lock_dispatch(tenant_id, wait=False):
            _take_due(tenant_id, None, utcnow())
        else:
            defer_dispatch(tenant_id)


def dispatch_tenant(
    tenant_id: str, keep: Keep | None, *, look: bool = True
) -> tuple[int, Kept | None]:
    """One tenant's dispatch in a transaction of its own (_take_due): how many were enqueued,
    and the one handed to the job that asked (keep), if its lane has no job waiting."""
    per_webhook = current_app.config["WEBHOOK_IN_FLIGHT_PER_WEBHOOK"]
    now = utcnow()
    # A look first, without a lock: most dispatches find nothing due (each event's deliveries
    # were dispatched with it) and cost one read; a burst or a backlog that finds no place
    # free costs three, and no write transaction. After an attempt (not look), the place it
    # has just freed is most likely still free: the second and third reads would be made
    # again under the lock, so they are skipped.
    if not _any_due(tenant_id, now):
        return 0, None
    if look:
        by_webhook, room = _places(tenant_id, now)
        full = [webhook for webhook, count in by_webhook.items() if count >= per_webhook]
        if not any(places > 0 for places in room.values()) or not _next_due(
            tenant_id, now, room, full_webhooks=full
        ):
            return 0, None
    if keep is not None and not queue.idle(keep.lane):
        keep = None  # another job waits: the next delivery goes to the back of the queue
    with transaction():
        _lock_dispatch(tenant_id)
        return _take_due(tenant_id, keep, now)


def _take_due(tenant_id: str, keep: Keep | None, now: datetime) -> tuple[int, Kept | None]:
    """Under the tenant's dispatch lock: its deliveries in flight counted, then its oldest due
    ones taken while its webhooks and lanes have places; their jobs are enqueued once the
    transaction commits, but for the one handed to the job that asked (keep): how many were
    enqueued, and that one."""
    per_webhook = current_app.config["WEBHOOK_IN_FLIGHT_PER_WEBHOOK"]
    lease_until = now + timedelta(seconds=current_app.config["WEBHOOK_LEASE_SECONDS"])
    # The deliveries of each job to enqueue, by lane: in the fast lane, one job sends the
    # deliveries of one event to its several webhooks, one after the other.
    sent: dict[str, dict[str, list[str]]] = {FAST_LANE: {}, SLOW_LANE: {}}
    job_of_event: dict[str, str] = {}
    kept: Kept | None = None
    by_webhook, room = _places(tenant_id, now)
    while any(places > 0 for places in room.values()):
        full = [webhook for webhook, count in by_webhook.items() if count >= per_webhook]
        asked = sum(places for places in room.values() if places > 0)
        candidates = _next_due(tenant_id, now, room, full_webhooks=full)
        progress = skipped = False
        for delivery_id, webhook_id, event_id, lane in candidates:
            if room[lane] <= 0 or by_webhook.get(webhook_id, 0) >= per_webhook:
                skipped = True  # filled by an earlier candidate: the next query leaves it
                continue
            handed = keep if kept is None and keep is not None and keep.lane == lane else None
            joined = job_of_event.get(event_id) if lane == FAST_LANE else None
            job_id = handed.job_id if handed is not None else joined or new_job_id()
            taken = (
                Delivery.update(lease_until=lease_until, job_id=job_id, lane=lane)
                .where((Delivery.id == delivery_id) & is_free(now))
                .execute()
            )
            if taken:
                if handed is not None:
                    kept = Kept(delivery_id, lease_until)
                else:
                    sent[lane].setdefault(job_id, []).append(delivery_id)
                    if lane == FAST_LANE:
                        job_of_event[event_id] = job_id
                room[lane] -= 1
                by_webhook[webhook_id] = by_webhook.get(webhook_id, 0) + 1
            progress = True
        if not progress or (not skipped and len(candidates) < asked):
            break  # nothing else is due where a place is left
    for lane, jobs in sent.items():
        if jobs:
            calls = [
                ((first, job_id, *([rest] if rest else [])), job_id)
                for job_id, (first, *rest) in jobs.items()
            ]
            queue.defer_many(lane, DELIVER_JOB, calls)
    return sum(len(ids) for jobs in sent.values() for ids in jobs.values()), kept


def _places(tenant_id: str, now: datetime) -> tuple[dict[str, int], dict[str, int]]:
    """The tenant's deliveries in flight (a live lease) by webhook, and its places left in
    each lane."""
    by_webhook, by_lane = _in_flight(tenant_id, now)
    return by_webhook, {lane: tenant_places(lane) - count for lane, count in by_lane.items()}


def _in_flight(tenant_id: str, now: datetime) -> tuple[dict[str, int], dict[str, int]]:
    """The tenant's deliveries in flight (a live lease), counted by webhook and by lane."""
    rows = cast(
        list[tuple[str, str | None, int]],
        list(
            Delivery.select(Delivery.webhook, Delivery.lane, pw.fn.COUNT(Delivery.id))
            .where(
                (Delivery.status == "pending")
                & (Delivery.lease_until > now)
                & (Delivery.tenant == tenant_id)
            )
            .group_by(Delivery.webhook, Delivery.lane)
            .tuples()
        ),
    )
    by_webhook: dict[str, int] = {}
    by_lane = {FAST_LANE: 0, SLOW_LANE: 0}
    for webhook_id, lane, count in rows:
        by_webhook[webhook_id] = by_webhook.get(webhook_id, 0) + count
        by_lane[lane or FAST_LANE] += count
    return by_webhook, by_lane


def _any_due(tenant_id: str, now: datetime) -> bool:
    """Whether any of the tenant's deliveries is due and free: one read of the index."""
    return (
        Delivery.select(Delivery.id).where((Delivery.tenant == tenant_id) & is_free(now)).exists()
    )


def _next_due(
    tenant_id: str, now: datetime, room: dict[str, int], *, full_webhooks: list[str]
) -> list[tuple[str, str, str, str]]:
    """The tenant's oldest due, free deliveries (id, webhook id, event id, lane), as many as
    its lanes have places for, leaving out the webhooks with none left and the lanes that are
    full."""
    open_lanes = [lane for lane, places in room.items() if places > 0]
    query = (
        Delivery.select(Delivery.id, Delivery.webhook, Delivery.event, Webhook.lane)
        .join(Webhook)
        .where(
            (Delivery.tenant == tenant_id)
            & is_free(now)
            & Webhook.lane.in_(open_lanes)
            & Delivery.webhook.not_in(full_webhooks)
        )
        .order_by(Delivery.next_attempt_at, Delivery.id)
        .limit(sum(room[lane] for lane in open_lanes))
    )
    return cast(list[tuple[str, str, str, str]], list(query.tuples()))


def is_free(now: datetime) -> pw.Expression:
    """Pending, due, and not held by a live lease."""
    return (
        (Delivery.status == "pending")
        & (Delivery.next_attempt_at <= now)
        & (Delivery.lease_until.is_null() | (Delivery.lease_until < now))
    )
