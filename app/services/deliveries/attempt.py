"""The attempt: a job claims a delivery, sends it signed, and writes the outcome.

A job sends the delivery it was dispatched to (in the fast lane, an event's deliveries to
several webhooks are dispatched to one job, which sends them in turn: RQ's own work for a job
is the same whatever it sends), by the dispatch's lease while that outlasts an attempt
(else it renews the lease with a conditional UPDATE first), without holding a transaction
(the attempt ends on the clock, well within the lease), then writes the attempt
and its outcome in one transaction (success, the next attempt time, or failure for good).
While no other job waits in its lane, the dispatch after the attempt hands it the tenant's
next due delivery to send too. Whatever goes wrong with one delivery is recorded as its
failed attempt and touches no other.
"""

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import peewee as pw
from flask import current_app

from app import metrics, queue
from app.db import transaction
from app.models import Delivery, DeliveryAttempt, Event, Webhook
from app.outbound import client
from app.outbound.errors import OutboundError, OutboundTimeout
from app.services.deliveries.dispatch import (
    FAST_LANE,
    SLOW_LANE,
    Keep,
    Kept,
    dispatch,
    dispatch_and_keep,
    is_free,
)
from app.services.deliveries.schedule import (
    DISABLE_AFTER,
    MAX_ATTEMPTS,
    parse_retry_after,
    retry_delay,
)
from app.services.deliveries.wire import event_body, request_headers
from app.util import utcnow

EXCERPT_BYTES = 2048

log = logging.getLogger(__name__)


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
        condition = is_free(now)
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
    return status, dispatch_and_keep(delivery.tenant_id, asked, freed=status is not None)[1]


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
    None when another job took the delivery over meanwhile (its outcome counts), or the
    delivery was deleted with its webhook (nothing is left to write to)."""
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
            if not Delivery.select().where(Delivery.id == delivery.id).exists():
                log.info("delivery %s was deleted with its webhook during its attempt", delivery.id)
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
    webhook = Webhook.get_or_none(Webhook.id == webhook_id)
    if webhook is None:  # deleted during the attempt, with the delivery: record writes nothing
        return "failed", None
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
