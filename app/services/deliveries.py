"""Webhook deliveries: fair dispatch, signed attempts, the retry schedule, the log, the sweeper.

The delivery row is the truth, and deliveries wait in the database, not in Redis. The
dispatcher sends a tenant's due deliveries to a queue only while it has places: at most
WEBHOOK_IN_FLIGHT_PER_WEBHOOK per webhook and a share of a lane's workers per tenant, counted
from the leases of the deliveries in flight; it runs in the transaction that made deliveries
(an event's), after each attempt (which hands its place on), and in the sweeper. A webhook
whose attempt timed out goes to the slow lane (its own queue and workers) until it answers
in time again.

A job sends the delivery it was dispatched to (in the fast lane, an event's deliveries to
several webhooks are dispatched to one job, which sends them in turn: RQ's own work for a job
is the same whatever it sends), by the dispatch's lease while that outlasts an attempt
(else it renews the lease with a conditional UPDATE first), without holding a transaction
(the attempt ends on the clock, well within the lease), then writes the attempt
and its outcome in one transaction (success, the next attempt time, or failure for good).
While no other job waits in its lane, the dispatch after the attempt hands it the tenant's
next due delivery to send too. Whatever goes wrong with one delivery is recorded as its
failed attempt and touches no other. The sweeper dispatches every due delivery that no live
lease holds, and again one whose job Redis lost, so an enqueue lost to a Redis outage or a
worker killed mid-job only delays it.
"""

import email.utils
import json
import logging
import random
import threading
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import peewee as pw
from flask import current_app

from app import metrics, queue, signing
from app.db import database, is_sqlite, transaction, unit_of_work
from app.errors import Conflict, NotFound
from app.models import Delivery, DeliveryAttempt, Event, Tenant, Webhook
from app.outbound import client
from app.outbound.errors import OutboundError, OutboundTimeout
from app.services import audit
from app.services.audit import Actor
from app.services.pages import Page, paginate
from app.util import isoformat, new_id, utcnow

# Svix's schedule: the delay after attempt 1, 2, … 7; 8 attempts in all, about 28 hours.
RETRY_DELAYS = (5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 10 * 3600)
MAX_ATTEMPTS = len(RETRY_DELAYS) + 1
JITTER = 0.2
THROTTLED_MIN_DELAY = 60  # after a 429 or a timeout
DISABLE_AFTER = timedelta(days=5)  # of failures in a row
EXCERPT_BYTES = 2048
SWEEP_BATCH = 1000
STATUSES = ("pending", "succeeded", "failed")
DELIVER_JOB = "app.jobs.deliver_webhook"  # by name: the jobs module imports this one
DISPATCH_JOB = "app.jobs.dispatch_deliveries"
FAST_LANE, SLOW_LANE = "webhooks", "webhooks_slow"  # the RQ queues
LANE_WORKERS = {FAST_LANE: "WEBHOOK_WORKERS", SLOW_LANE: "WEBHOOK_SLOW_WORKERS"}
# The PostgreSQL advisory lock class under which one tenant's dispatches run one at a time
# (the second key is the tenant id's hash): any fixed number ("dispatch" in ASCII, 32 bits).
DISPATCH_LOCK_CLASS = 0x64697370
LOST_AFTER_S = 2  # a job RQ does not hold this long after its dispatch was lost with Redis

log = logging.getLogger(__name__)


def event_payload(event: Event) -> dict[str, Any]:
    """The event as every delivery's body and the event log (GET /events) show it."""
    return {
        "id": event.id,
        "event": event.type,
        "timestamp": isoformat(event.created_at),
        "data": event.data,
    }


def event_body(event: Event) -> bytes:
    """The JSON body: the same bytes on every attempt."""
    return json.dumps(event_payload(event), separators=(",", ":"), ensure_ascii=False).encode()


def request_headers(
    *,
    secret: str,
    event_id: str,
    delivery_id: str,
    attempt: int,
    body: bytes,
    timestamp: int,
    previous_secret: str | None = None,
) -> dict[str, str]:
    """An attempt's headers. While a rotated secret overlaps (previous_secret), webhook-signature
    holds a signature by each secret, the new one's first, as Standard Webhooks allows, and
    X-Service-Signature-Previous the old one's; X-Service-Signature is the new one's."""
    keys = signing.keys(secret, previous_secret)
    return {
        "Content-Type": "application/json",
        **signing.signature_headers(keys, body),
        "X-Service-Event-Id": event_id,
        "X-Service-Delivery-Id": delivery_id,
        "X-Service-Attempt": str(attempt),
        **signing.standard_headers(keys, message_id=event_id, timestamp=timestamp, body=body),
    }


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def retry_delay(
    attempt: int, *, status_code: int | None, timed_out: bool, retry_after: float | None
) -> float:
    """Seconds before the attempt after `attempt` (1-based), jittered and scaled."""
    scheduled = RETRY_DELAYS[attempt - 1]
    delay = scheduled * random.uniform(1 - JITTER, 1 + JITTER)
    if status_code == 429 or timed_out:
        delay = max(delay, THROTTLED_MIN_DELAY)
    if retry_after is not None:
        delay = max(delay, min(retry_after, 2 * scheduled))
    return delay * current_app.config["WEBHOOK_RETRY_SCALE"]


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
    return _dispatch(tenant_id, None)[0]


def _dispatch(tenant_id: str, keep: Keep | None, *, freed: bool = False) -> tuple[int, Kept | None]:
    """dispatch(), and the delivery handed to the job that asked for one (keep), which the
    count leaves out. freed: the caller has just freed one of the tenant's places (an
    attempt written), so the look for a free place is skipped."""
    waiting: set[str] | None = getattr(_dispatching, "tenants", None)
    if waiting is not None:
        waiting.add(tenant_id)
        return 0, None
    _dispatching.tenants = waiting = set()
    try:
        sent, kept = _dispatch_tenant(tenant_id, keep, look=not freed)
        while waiting:
            sent += _dispatch_tenant(waiting.pop(), None)[0]
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


def _dispatch_tenant(
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
                .where((Delivery.id == delivery_id) & _free(now))
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
    return Delivery.select(Delivery.id).where((Delivery.tenant == tenant_id) & _free(now)).exists()


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
            & _free(now)
            & Webhook.lane.in_(open_lanes)
            & Delivery.webhook.not_in(full_webhooks)
        )
        .order_by(Delivery.next_attempt_at, Delivery.id)
        .limit(sum(room[lane] for lane in open_lanes))
    )
    return cast(list[tuple[str, str, str, str]], list(query.tuples()))


@dataclass
class Sent:
    """What one attempt came to, before it is written."""

    attempted_at: datetime
    duration_ms: int
    status_code: int | None = None
    error: str | None = None
    timed_out: bool = False
    retry_after: float | None = None
    excerpt: str | None = None


def _free(now: datetime) -> pw.Expression:
    """Pending, due, and not held by a live lease."""
    return (
        (Delivery.status == "pending")
        & (Delivery.next_attempt_at <= now)
        & (Delivery.lease_until.is_null() | (Delivery.lease_until < now))
    )


def claim(delivery_id: str, job_id: str | None = None) -> datetime | None:
    """Renew the delivery's lease for an attempt by the job it was dispatched to (job_id), if
    it is pending and due; when the lease ends, or None.

    One conditional UPDATE: of several jobs claiming at once, exactly one gets the row. A job
    keeps its delivery even when it waited in the queue past the dispatch's lease, as long as
    nobody dispatched the delivery again meanwhile (which gives it another job id). Without a
    job_id (a call from the CLI or a test), a due delivery that no lease holds is claimed.
    """
    now = utcnow()
    lease_until = now + timedelta(seconds=current_app.config["WEBHOOK_LEASE_SECONDS"])
    if job_id is None:
        condition = _free(now)
    else:
        condition = (
            (Delivery.job_id == job_id)
            & (Delivery.status == "pending")
            & (Delivery.next_attempt_at <= now)
        )
    taken = (
        Delivery.update(lease_until=lease_until, updated_at=now)
        .where((Delivery.id == delivery_id) & condition)
        .execute()
    )
    return lease_until if taken else None


def deliver(*, delivery_id: str, job_id: str | None = None, then: Sequence[str] = ()) -> str | None:
    """Attempt a delivery if it is due and this job's (job_id) to send, then hand its place to
    the tenant's next due delivery: its status after, or None when this job did not attempt it
    (not due, dispatched to another job, settled or deleted). then: the deliveries of the same
    event to other webhooks, dispatched to this job too, attempted after it in turn; those
    the job's time no longer allows are freed and dispatched again.

    While no other job waits in its lane and its time allows another attempt, the job sends
    the next one itself (the dispatch hands it over, written to this job), so a tenant's
    backlog costs one job, not one a delivery; as soon as another job waits, the next goes to
    the back of the queue, and every tenant keeps its turn.
    """
    ends_by = time.monotonic() + _chain_seconds()
    ids = [delivery_id, *then]
    first: str | None = None
    kept: Kept | None = None
    tenant_id: str | None = None  # once one was attempted
    for index, next_id in enumerate(ids):
        if tenant_id is not None and time.monotonic() >= ends_by:
            _release(ids[index:], job_id, tenant_id)  # time ran out after an attempt
            break
        delivery, lease_until = _take(next_id, job_id)
        if delivery is None or lease_until is None:
            continue
        tenant_id = delivery.tenant_id
        last = index == len(ids) - 1
        status, kept = _attempt_and_hand_on(delivery, lease_until, job_id, ends_by, keep=last)
        if index == 0:
            first = status
    while kept is not None:
        delivery = _claimed(kept.delivery_id)
        if delivery is None:  # deleted with its webhook meanwhile
            break
        kept = _attempt_and_hand_on(delivery, kept.lease_until, job_id, ends_by)[1]
    return first


def _release(delivery_ids: list[str], job_id: str | None, tenant_id: str) -> None:
    """Free the tenant's deliveries that this job was to send but has no time left for, and
    dispatch them again (to other jobs)."""
    Delivery.update(lease_until=None, job_id=None).where(
        Delivery.id.in_(delivery_ids) & (Delivery.job_id == job_id) & (Delivery.status == "pending")
    ).execute()
    dispatch(tenant_id=tenant_id)


def _attempt_and_hand_on(
    delivery: Delivery,
    lease_until: datetime,
    job_id: str | None,
    ends_by: float,
    *,
    keep: bool = True,
) -> tuple[str | None, Kept | None]:
    """Attempt the delivery, then dispatch the tenant's next ones: its status, and the one
    handed to this job to send next (if it asks (keep), only while no job waits in its lane,
    and it has time)."""
    try:
        status = _attempt(delivery, lease_until)
    except BaseException:
        dispatch(tenant_id=delivery.tenant_id)
        raise
    asked = None
    if keep and job_id is not None and time.monotonic() < ends_by:
        asked = Keep(job_id, delivery.lane or FAST_LANE)
    return status, _dispatch(delivery.tenant_id, asked, freed=status is not None)[1]


def _take(delivery_id: str, job_id: str | None) -> tuple[Delivery | None, datetime | None]:
    """The delivery, and the lease this job holds it by for its attempt (None when it may not
    attempt it). The dispatch's lease serves as it is while it outlasts an attempt; else it is
    renewed (claim), and the row read again."""
    delivery = _claimed(delivery_id)
    if delivery is None:
        return None, None
    now = utcnow()
    config = current_app.config
    if (
        job_id is not None
        and delivery.job_id == job_id
        and delivery.status == "pending"
        and delivery.next_attempt_at is not None
        and delivery.next_attempt_at <= now
        and delivery.lease_until is not None
        and delivery.lease_until - now >= timedelta(seconds=config["WEBHOOK_TIMEOUT"] + 2)
    ):
        return delivery, delivery.lease_until
    lease_until = claim(delivery_id, job_id)
    if lease_until is None:
        return None, None
    return _claimed(delivery_id), lease_until


def _chain_seconds() -> float:
    """How long after its start a job may still begin another attempt: RQ stops the job a
    second before the lease ends (webhook_job_timeout), and an attempt may take the whole
    timeout, and a moment to be written."""
    config = current_app.config
    return queue.webhook_job_timeout(config) - config["WEBHOOK_TIMEOUT"] - 2


def _claimed(delivery_id: str) -> Delivery | None:
    """A delivery with its event and webhook, as an attempt needs them: one read."""
    return (
        Delivery.select(
            Delivery.id,
            Delivery.tenant,
            Delivery.attempts,
            Delivery.lane,
            Delivery.status,
            Delivery.job_id,
            Delivery.lease_until,
            Delivery.next_attempt_at,
            Event.id,
            Event.type,
            Event.data,
            Event.created_at,
            Webhook.id,
            Webhook.url,
            Webhook.secret,
            Webhook.previous_secret,
            Webhook.previous_secret_expires_at,
            Webhook.is_active,
            Webhook.failing_since,
            Webhook.lane,
        )
        .join(Event)
        .switch(Delivery)
        .join(Webhook)
        .where(Delivery.id == delivery_id)
        .first()
    )


def _attempt(delivery: Delivery, lease_until: datetime) -> str | None:
    if not delivery.webhook.is_active:
        disabled = "The webhook is disabled."
        _settle(delivery, lease_until, attempted=False, status="failed", error=disabled)
        return "failed"
    sent = send(delivery)
    status = record(delivery, lease_until, sent)
    label = {"succeeded": "success", "pending": "retry"}.get(status or "", "failed")
    metrics.WEBHOOK_ATTEMPTS.labels(label, str(delivery.attempts + 1)).inc()
    if status == "succeeded":
        metrics.WEBHOOK_LAG.observe((utcnow() - delivery.event.created_at).total_seconds())
    return status


def send(delivery: Delivery) -> Sent:
    """Make one signed attempt of a claimed delivery (no database work). Never raises: any
    error is the attempt's failure."""
    config = current_app.config
    attempted_at = utcnow()
    started = time.monotonic()
    try:
        body = event_body(delivery.event)
        headers = request_headers(
            secret=delivery.webhook.secret,
            event_id=delivery.event.id,
            delivery_id=delivery.id,
            attempt=delivery.attempts + 1,
            body=body,
            timestamp=int(time.time()),
            previous_secret=delivery.webhook.previous_secret_in_use(),
        )
        response = client.sender(bool(config["ALLOW_PRIVATE_URLS"])).send(
            "POST",
            delivery.webhook.url,
            body=body,
            headers=headers,
            timeout=(config["WEBHOOK_CONNECT_TIMEOUT"], config["WEBHOOK_TIMEOUT"]),
        )
    except OutboundError as exc:
        return Sent(
            attempted_at,
            duration_ms=int((time.monotonic() - started) * 1000),
            error=str(exc),
            timed_out=isinstance(exc, OutboundTimeout),
        )
    except Exception as exc:  # a fault of this delivery's alone: logged, and retried
        log.exception("delivery %s failed", delivery.id)
        return Sent(
            attempted_at,
            duration_ms=int((time.monotonic() - started) * 1000),
            error=f"The request could not be made ({type(exc).__name__}).",
        )
    ok = 200 <= response.status_code < 300
    return Sent(
        attempted_at,
        duration_ms=response.duration_ms,
        status_code=response.status_code,
        error=None if ok else _status_error(response.status_code),
        retry_after=None if ok else parse_retry_after(response.headers.get("Retry-After")),
        excerpt=response.text(EXCERPT_BYTES),
    )


def record(delivery: Delivery, lease_until: datetime, sent: Sent) -> str | None:
    """Write the attempt and its outcome in one transaction; the delivery's status after, or
    None when another job took the delivery over meanwhile (its outcome counts)."""
    now = utcnow()
    with transaction():
        _change_lane(delivery, sent)
        if sent.error is None:
            if delivery.webhook.failing_since is not None:  # a success ends a run of failures
                Webhook.update(failing_since=None, consecutive_failures=0).where(
                    (Webhook.id == delivery.webhook_id) & Webhook.failing_since.is_null(False)
                ).execute()
            # A success is written whoever holds the lease now: the receiver has it.
            status: str | None = "succeeded"
            written = _settle(
                delivery, None, attempted=True, status="succeeded", status_code=sent.status_code
            )
        else:
            status, next_attempt_at = _failure(delivery, sent, now=now)
            written = _settle(
                delivery,
                lease_until,
                attempted=True,
                status=status,
                status_code=sent.status_code,
                error=sent.error,
                next_attempt_at=next_attempt_at,
            )
        if not written:
            return None
        DeliveryAttempt.create(
            delivery=delivery.id,
            number=delivery.attempts + 1,
            attempted_at=sent.attempted_at,
            duration_ms=sent.duration_ms,
            status_code=sent.status_code,
            error=sent.error,
            response_excerpt=sent.excerpt,
        )
    return status


def _change_lane(delivery: Delivery, sent: Sent) -> None:
    """A timeout moves the webhook to the slow lane; an answer in time (any status) moves it
    back. A refused connection or a bad host says nothing about its speed."""
    webhook = delivery.webhook
    if sent.timed_out and webhook.lane != SLOW_LANE:
        lane = SLOW_LANE
    elif sent.status_code is not None and webhook.lane != FAST_LANE:
        lane = FAST_LANE
    else:
        return
    Webhook.update(lane=lane).where(Webhook.id == webhook.id).execute()
    webhook.lane = lane


def _status_error(status_code: int) -> str:
    if 300 <= status_code < 400:
        return f"The receiver answered {status_code}; redirects are not followed."
    return f"The receiver answered {status_code}."


def _failure(delivery: Delivery, sent: Sent, *, now: datetime) -> tuple[str, datetime | None]:
    """What a failed attempt leads to: its status and next attempt time. A 410, or failures
    for DISABLE_AFTER in a row, turn the webhook off."""
    webhook_id, status_code = delivery.webhook_id, sent.status_code
    Webhook.update(
        failing_since=pw.fn.COALESCE(Webhook.failing_since, now),
        consecutive_failures=Webhook.consecutive_failures + 1,
    ).where(Webhook.id == webhook_id).execute()
    webhook = Webhook.get_by_id(webhook_id)
    if status_code == 410:
        disable(webhook, reason="The receiver answered 410 Gone.")
    elif webhook.failing_since and now - webhook.failing_since >= DISABLE_AFTER:
        disable(webhook, reason="Every delivery failed for 5 days.")
    attempt = delivery.attempts + 1
    if status_code == 410 or attempt >= MAX_ATTEMPTS or not webhook.is_active:
        return "failed", None
    delay = retry_delay(
        attempt, status_code=status_code, timed_out=sent.timed_out, retry_after=sent.retry_after
    )
    return "pending", now + timedelta(seconds=delay)


def _settle(
    delivery: Delivery,
    lease_until: datetime | None,
    *,
    attempted: bool,
    status: str,
    status_code: int | None = None,
    error: str | None = None,
    next_attempt_at: datetime | None = None,
) -> bool:
    """Release the lease with the attempt's outcome; False when it was not written.

    Written only while the delivery is pending and, given a lease_until, while this job still
    holds that lease: if it expired and another job took the delivery over, that job's
    outcome is the one that counts. attempted: a request was tried, which counts.
    """
    now = utcnow()
    condition = (Delivery.id == delivery.id) & (Delivery.status == "pending")
    if lease_until is not None:
        condition &= Delivery.lease_until == lease_until
    changed = (
        Delivery.update(
            status=status,
            attempts=Delivery.attempts + (1 if attempted else 0),
            lease_until=None,
            job_id=None,
            next_attempt_at=next_attempt_at,
            last_status_code=status_code,
            last_error=error,
            completed_at=None if status == "pending" else now,
            updated_at=now,
        )
        .where(condition)
        .execute()
    )
    return bool(changed)


def disable(webhook: Webhook, *, reason: str | None) -> None:
    """Turn a webhook off; its pending deliveries fail (each can be retried later)."""
    now = utcnow()
    Webhook.update(is_active=False, disabled_reason=reason, updated_at=now).where(
        Webhook.id == webhook.id
    ).execute()
    webhook.is_active, webhook.disabled_reason = False, reason
    Delivery.update(
        status="failed",
        next_attempt_at=None,
        last_error="The webhook was disabled.",
        completed_at=now,
        updated_at=now,
    ).where(
        (Delivery.webhook == webhook.id)
        & (Delivery.status == "pending")
        & (Delivery.lease_until.is_null() | (Delivery.lease_until < now))
    ).execute()


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
    query = Delivery.select(Delivery.tenant).where(_free(now)).distinct().limit(batch)
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


def get_delivery(*, tenant: Tenant | None, delivery_id: str) -> Delivery:
    """A delivery of the tenant (any tenant's when tenant is None, for admins), or NotFound."""
    condition = Delivery.id == delivery_id
    if tenant is not None:
        condition &= Delivery.tenant == tenant
    delivery = Delivery.get_or_none(condition)
    if delivery is None:
        raise NotFound(f"Delivery {delivery_id} not found.")
    return delivery


def retry(*, tenant: Tenant | None, actor: Actor, delivery_id: str) -> Delivery:
    """Send a delivery again now, whatever its status; it goes on with the schedule after.
    tenant None: any tenant's (the CLI)."""
    with unit_of_work():
        delivery = get_delivery(tenant=tenant, delivery_id=delivery_id)
        if not Webhook.get_by_id(delivery.webhook_id).is_active:
            raise Conflict("The webhook is disabled: enable it before retrying its deliveries.")
        now = utcnow()
        delivery.status = "pending"
        delivery.next_attempt_at = now
        delivery.completed_at = None
        delivery.updated_at = now
        if delivery.lease_until is None or delivery.lease_until < now:
            # Not in flight: a job it names (one that died, or a row from before dispatch)
            # sends nothing now; the dispatcher gives it a job of its own when a place frees.
            delivery.job_id = None
        delivery.save()
        audit.write(
            actor,
            tenant_id=delivery.tenant_id,
            action="delivery.retried",
            target_id=delivery.id,
            details={"webhookId": delivery.webhook_id},
        )
        defer_dispatch(delivery.tenant_id)
    return delivery


def last_attempt(delivery: Delivery) -> DeliveryAttempt | None:
    """The delivery's latest attempt, or None before the first."""
    return (
        DeliveryAttempt.select()
        .where(DeliveryAttempt.delivery == delivery.id)
        .order_by(DeliveryAttempt.number.desc(), DeliveryAttempt.id.desc())
        .first()
    )


def with_attempts(deliveries: list[Delivery]) -> list[Delivery]:
    """Attach each delivery's attempt log (one query) and its event type."""
    by_id = {delivery.id: delivery for delivery in deliveries}
    for delivery in deliveries:
        delivery.attempt_list = []
    if by_id:
        rows = (
            DeliveryAttempt.select()
            .where(DeliveryAttempt.delivery.in_(list(by_id)))
            .order_by(DeliveryAttempt.number, DeliveryAttempt.id)
        )
        for row in rows:
            by_id[row.delivery_id].attempt_list.append(row)
    return deliveries


def list_deliveries(
    *,
    tenant: Tenant | None = None,
    webhook: Webhook | None = None,
    status: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> Page:
    """Deliveries newest first, with their attempts and event type (a bounded total)."""
    query = Delivery.select(Delivery, Event.id, Event.type).join(Event)
    if tenant is not None:
        query = query.where(Delivery.tenant == tenant)
    if webhook is not None:
        query = query.where(Delivery.webhook == webhook)
    if status is not None:
        query = query.where(Delivery.status == status)
    page = paginate(
        query.order_by(Delivery.created_at.desc(), Delivery.id.desc()), limit=limit, offset=offset
    )
    return replace(page, items=with_attempts(page.items))
