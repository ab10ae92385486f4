"""Webhook deliveries: signed attempts, the retry schedule, the log and the sweeper.

The delivery row is the truth. One job sends one delivery: it claims it with a conditional
UPDATE that sets a lease, sends it without holding a transaction, then writes the attempt and
its outcome in one transaction (success, the next attempt time, or failure for good). Whatever
goes wrong with one delivery is recorded as its failed attempt and touches no other. The
sweeper enqueues every due delivery that no live lease holds and whose job is not waiting
already, so an enqueue lost to a Redis outage or a worker killed mid-job only delays it.
"""

import base64
import email.utils
import hashlib
import hmac
import json
import logging
import random
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import peewee as pw
from flask import current_app

from app import metrics, outbound, queue
from app.db import database, unit_of_work
from app.errors import Conflict, NotFound
from app.models import Delivery, DeliveryAttempt, Event, Tenant, Webhook
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

log = logging.getLogger(__name__)


def sign_standard(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks' webhook-signature: v1,<base64 HMAC of "{id}.{timestamp}.{body}">."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


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
    keys = [secret, *([previous_secret] if previous_secret else [])]
    return {
        "Content-Type": "application/json",
        **outbound.signature_headers(keys, body),
        "X-Service-Event-Id": event_id,
        "X-Service-Delivery-Id": delivery_id,
        "X-Service-Attempt": str(attempt),
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            sign_standard(key, event_id, timestamp, body) for key in keys
        ),
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
    """An id for the RQ job that is to send a delivery, kept on its row: the sweeper asks RQ
    whether that job still waits."""
    return new_id("job")


def defer_job(delivery_id: str, job_id: str) -> None:
    """Enqueue the delivery's job once the current transaction commits."""
    queue.defer("webhooks", DELIVER_JOB, delivery_id, job_id=job_id)


def defer_jobs(jobs_by_delivery: list[tuple[str, str]]) -> None:
    """Enqueue many deliveries' jobs, (delivery id, job id) each, once the current
    transaction commits."""
    calls = [((delivery_id,), job_id) for delivery_id, job_id in jobs_by_delivery]
    queue.defer_many("webhooks", DELIVER_JOB, calls)


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


def claim(delivery_id: str) -> datetime | None:
    """Take the delivery's lease if it is due and free; when the lease ends, or None.

    One conditional UPDATE: of several jobs claiming at once, exactly one gets the row.
    """
    now = utcnow()
    lease_until = now + timedelta(seconds=current_app.config["WEBHOOK_LEASE_SECONDS"])
    taken = (
        Delivery.update(lease_until=lease_until, updated_at=now)
        .where((Delivery.id == delivery_id) & _free(now))
        .execute()
    )
    return lease_until if taken else None


def deliver(*, delivery_id: str) -> str | None:
    """Attempt a delivery if it is due and free: its status after, or None when this job did
    not attempt it (not due, held by another job, settled or deleted)."""
    lease_until = claim(delivery_id)
    if lease_until is None:
        return None
    delivery = (
        Delivery.select(
            Delivery.id,
            Delivery.attempts,
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
        )
        .join(Event)
        .switch(Delivery)
        .join(Webhook)
        .where(Delivery.id == delivery_id)
        .first()
    )
    if delivery is None:  # deleted with its webhook meanwhile
        return None
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
        response = outbound.sender(bool(config["ALLOW_PRIVATE_URLS"])).send(
            "POST",
            delivery.webhook.url,
            body=body,
            headers=headers,
            timeout=(config["WEBHOOK_CONNECT_TIMEOUT"], config["WEBHOOK_TIMEOUT"]),
        )
    except outbound.OutboundError as exc:
        return Sent(
            attempted_at,
            duration_ms=int((time.monotonic() - started) * 1000),
            error=str(exc),
            timed_out=isinstance(exc, outbound.OutboundTimeout),
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
    with database.atomic():
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
    """Enqueue every due pending delivery that no live lease holds and whose job does not wait
    in the queue (Redis lost it, its enqueue failed, or its worker died); how many were
    enqueued.

    Every one of them, `batch` at a time in order of due time: a delivery whose job was lost
    is found at the next sweep however many others wait in the queue before it. The queue's
    job ids are read once, after the first batch (a job enqueued after that read for a row
    read later is enqueued twice, and the second job finds its delivery taken).
    """
    now = utcnow()
    enqueued = 0
    waiting: set[str] | None = None
    after: tuple[datetime | None, str] | None = None
    while True:
        query = Delivery.select(Delivery.id, Delivery.job_id, Delivery.next_attempt_at).where(
            _free(now)
        )
        if after is not None:
            query = query.where(pw.Tuple(Delivery.next_attempt_at, Delivery.id) > pw.Tuple(*after))
        due = list(query.order_by(Delivery.next_attempt_at, Delivery.id).limit(batch))
        if not due:
            return enqueued
        if waiting is None:
            waiting = queue.waiting("webhooks")
            if waiting is None:  # Redis does not answer: nothing can be enqueued now
                return enqueued
        enqueued += _enqueue_lost([d for d in due if d.job_id not in waiting], now)
        if len(due) < batch:
            return enqueued
        after = (due[-1].next_attempt_at, due[-1].id)


def _enqueue_lost(lost: list[Delivery], now: datetime) -> int:
    """Enqueue a new job for each of these free deliveries; how many were enqueued."""
    if not lost:
        return 0
    enqueued = 0
    with database.atomic():
        for delivery in lost:
            job_id = new_job_id()
            # Conditional: of two sweepers that saw the same job missing, one enqueues, and
            # none does for a delivery a job claimed meanwhile. (== None is IS NULL.)
            taken = (
                Delivery.update(job_id=job_id)
                .where(
                    (Delivery.id == delivery.id) & (Delivery.job_id == delivery.job_id) & _free(now)
                )
                .execute()
            )
            if taken:
                defer_job(delivery.id, job_id)
                enqueued += 1
    return enqueued


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
        delivery.job_id = job_id = new_job_id()
        delivery.save()
        audit.write(
            actor,
            tenant_id=delivery.tenant_id,
            action="delivery.retried",
            target_id=delivery.id,
            details={"webhookId": delivery.webhook_id},
        )
        defer_job(delivery.id, job_id)
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
