"""Webhook deliveries: one signed attempt at a time, the retry schedule, the log and the sweeper.

The delivery row is the truth. A job claims a due delivery with a conditional UPDATE that sets
a lease, sends without holding a transaction, then writes the outcome: success, the next
attempt time, or failure for good. The sweeper enqueues every due delivery that no live lease
holds, so an enqueue lost to a Redis outage or a worker killed mid-send only delays it.
"""

import base64
import email.utils
import hashlib
import hmac
import json
import random
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from flask import current_app

from app import metrics, outbound, queue
from app.db import database
from app.errors import Conflict, NotFound
from app.models import Delivery, DeliveryAttempt, Event, Tenant, Webhook
from app.services.pages import Page, paginate
from app.util import isoformat, utcnow

# Svix's schedule: the delay after attempt 1, 2, … 7; 8 attempts in all, about 28 hours.
RETRY_DELAYS = (5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 10 * 3600)
MAX_ATTEMPTS = len(RETRY_DELAYS) + 1
JITTER = 0.2
THROTTLED_MIN_DELAY = 60  # after a 429 or a timeout
DISABLE_AFTER = timedelta(days=5)  # of failures in a row
EXCERPT_BYTES = 2048
SWEEP_BATCH = 1000
STATUSES = ("pending", "succeeded", "failed")


def sign_standard(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks' webhook-signature: v1,<base64 HMAC of "{id}.{timestamp}.{body}">."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def event_body(event: Event) -> bytes:
    """The JSON body: the same bytes on every attempt."""
    payload = {
        "id": event.id,
        "event": event.type,
        "timestamp": isoformat(event.created_at),
        "data": event.data,
    }
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def request_headers(
    *, secret: str, event_id: str, delivery_id: str, attempt: int, body: bytes, timestamp: int
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-Service-Signature": outbound.sign(secret, body),
        "X-Service-Event-Id": event_id,
        "X-Service-Delivery-Id": delivery_id,
        "X-Service-Attempt": str(attempt),
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign_standard(secret, event_id, timestamp, body),
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


QUEUED = "delivery:"  # the sweeper's once-key of a delivery whose job waits in the queue
# How many lease periods that mark lasts at most (an hour in production): it only matters
# for a job lost between leaving the queue and starting, and every lapse re-enqueues the
# whole backlog once.
QUEUED_MARK_LEASES = 60


def claim(delivery_id: str) -> datetime | None:
    """Take the lease of a due, unleased pending delivery; the lease's expiry, or None."""
    now = utcnow()
    lease_until = now + timedelta(seconds=current_app.config["WEBHOOK_LEASE_SECONDS"])
    with database.atomic():
        claimed = (
            Delivery.update(lease_until=lease_until, attempts=Delivery.attempts + 1, updated_at=now)
            .where(
                (Delivery.id == delivery_id)
                & (Delivery.status == "pending")
                & (Delivery.next_attempt_at <= now)
                & (Delivery.lease_until.is_null() | (Delivery.lease_until < now))
            )
            .execute()
        )
    return lease_until if claimed else None


def attempt(*, delivery_id: str) -> str | None:
    """Make one attempt of a delivery if it is due and free; its status after, or None."""
    queue.forget_once(QUEUED + delivery_id)  # no job of it waits now: the sweeper may send it
    lease_until = claim(delivery_id)
    if lease_until is None:
        return None
    delivery = (
        Delivery.select(Delivery, Event, Webhook)
        .join(Event)
        .switch(Delivery)
        .join(Webhook)
        .where(Delivery.id == delivery_id)
        .get_or_none()
    )
    if delivery is None:  # deleted with its webhook meanwhile
        return None
    webhook, event = delivery.webhook, delivery.event
    if not webhook.is_active:
        with database.atomic():
            _settle(delivery, lease_until, status="failed", error="The webhook is disabled.")
        return "failed"

    config = current_app.config
    body = event_body(event)
    headers = request_headers(
        secret=webhook.secret,
        event_id=event.id,
        delivery_id=delivery.id,
        attempt=delivery.attempts,
        body=body,
        timestamp=int(time.time()),
    )
    attempted_at = utcnow()
    started = time.monotonic()
    response: outbound.Response | None = None
    error: str | None = None
    timed_out = False
    try:
        response = outbound.sender(bool(config["ALLOW_PRIVATE_URLS"])).send(
            "POST",
            webhook.url,
            body=body,
            headers=headers,
            timeout=(config["WEBHOOK_CONNECT_TIMEOUT"], config["WEBHOOK_TIMEOUT"]),
        )
    except outbound.OutboundError as exc:
        error = str(exc)
        timed_out = isinstance(exc, outbound.OutboundTimeout)
    duration_ms = response.duration_ms if response else int((time.monotonic() - started) * 1000)
    status_code = response.status_code if response else None
    if response is not None and not 200 <= response.status_code < 300:
        error = _status_error(response.status_code)
    with database.atomic():
        DeliveryAttempt.create(
            delivery=delivery.id,
            number=delivery.attempts,
            attempted_at=attempted_at,
            duration_ms=duration_ms,
            status_code=status_code,
            error=error,
            response_excerpt=response.text(EXCERPT_BYTES) if response else None,
        )
        outcome = _record_outcome(
            delivery,
            lease_until,
            status_code=status_code,
            error=error,
            timed_out=timed_out,
            retry_after=parse_retry_after(response.headers.get("Retry-After"))
            if response
            else None,
        )
    label = {"succeeded": "success", "pending": "retry"}.get(outcome, "failed")
    metrics.WEBHOOK_ATTEMPTS.labels(label, str(delivery.attempts)).inc()
    if outcome == "succeeded":
        metrics.WEBHOOK_LAG.observe((utcnow() - event.created_at).total_seconds())
    return outcome


def _status_error(status_code: int) -> str:
    if 300 <= status_code < 400:
        return f"The receiver answered {status_code}; redirects are not followed."
    return f"The receiver answered {status_code}."


def _record_outcome(
    delivery: Delivery,
    lease_until: datetime,
    *,
    status_code: int | None,
    error: str | None,
    timed_out: bool,
    retry_after: float | None,
) -> str:
    """Write what one attempt led to: done, the next attempt time, or failed for good."""
    now = utcnow()
    webhook_id = delivery.webhook_id
    if error is None:
        _settle(delivery, None, status="succeeded", status_code=status_code)
        Webhook.update(failing_since=None).where(
            (Webhook.id == webhook_id) & Webhook.failing_since.is_null(False)
        ).execute()
        return "succeeded"

    Webhook.update(failing_since=now).where(
        (Webhook.id == webhook_id) & Webhook.failing_since.is_null()
    ).execute()
    webhook = Webhook.get_by_id(webhook_id)
    if status_code == 410:
        disable(webhook, reason="The receiver answered 410 Gone.")
    elif webhook.failing_since and now - webhook.failing_since >= DISABLE_AFTER:
        disable(webhook, reason="Every delivery failed for 5 days.")
    if status_code == 410 or delivery.attempts >= MAX_ATTEMPTS or not webhook.is_active:
        status = "failed"
        next_attempt_at = None
    else:
        status = "pending"
        delay = retry_delay(
            delivery.attempts, status_code=status_code, timed_out=timed_out, retry_after=retry_after
        )
        next_attempt_at = now + timedelta(seconds=delay)
    _settle(
        delivery,
        lease_until,
        status=status,
        status_code=status_code,
        error=error,
        next_attempt_at=next_attempt_at,
    )
    return status


def _settle(
    delivery: Delivery,
    lease_until: datetime | None,
    *,
    status: str,
    status_code: int | None = None,
    error: str | None = None,
    next_attempt_at: datetime | None = None,
) -> None:
    """Release the lease with the attempt's outcome.

    A failure is written only while this job still holds the lease: if it expired and another
    job took the delivery over, that job's outcome is the one that counts. A success always is.
    """
    now = utcnow()
    query = Delivery.update(
        status=status,
        lease_until=None,
        next_attempt_at=next_attempt_at,
        last_status_code=status_code,
        last_error=error,
        completed_at=None if status == "pending" else now,
        updated_at=now,
    ).where(Delivery.id == delivery.id)
    if lease_until is not None:
        query = query.where((Delivery.status == "pending") & (Delivery.lease_until == lease_until))
    query.execute()


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


def sweep(limit: int = SWEEP_BATCH) -> int:
    """Enqueue every due pending delivery that no live lease holds; how many were enqueued.

    A delivery never attempted is left alone for one lease period after it was created: its
    job was enqueued after commit and is most likely still waiting in the queue.
    """
    now = utcnow()
    ttl = int(current_app.config["WEBHOOK_LEASE_SECONDS"])
    due = (
        Delivery.select(Delivery.id, Delivery.next_attempt_at)
        .where(
            (Delivery.status == "pending")
            & (Delivery.next_attempt_at <= now)
            & (Delivery.lease_until.is_null() | (Delivery.lease_until < now))
            & ((Delivery.attempts > 0) | (Delivery.created_at < now - timedelta(seconds=ttl)))
        )
        .order_by(Delivery.next_attempt_at)
        .limit(limit)
    )
    enqueued = 0
    for row in list(due):
        # Once while its job waits: the job clears the mark when it starts (attempt), so a
        # backlog is not enqueued again every lease period (which flooded the queue with
        # duplicates and slowed the drain), while a rescheduled delivery, or one whose job
        # died, is.
        if not queue.enqueue(
            "webhooks",
            "app.jobs.deliver_webhook",
            row.id,
            once_key=QUEUED + row.id,
            once_ttl=max(1, QUEUED_MARK_LEASES * ttl),
        ):
            break  # Redis is down: the next sweep tries again
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


def retry(*, tenant: Tenant | None, delivery_id: str) -> Delivery:
    """Send a delivery again now, whatever its status; it goes on with the schedule after."""
    with queue.transaction():
        delivery = get_delivery(tenant=tenant, delivery_id=delivery_id)
        if not Webhook.get_by_id(delivery.webhook_id).is_active:
            raise Conflict("The webhook is disabled: enable it before retrying its deliveries.")
        now = utcnow()
        delivery.status = "pending"
        delivery.next_attempt_at = now
        delivery.completed_at = None
        delivery.updated_at = now
        delivery.save()
        queue.defer("webhooks", "app.jobs.deliver_webhook", delivery.id)
    return delivery


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
