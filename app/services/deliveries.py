"""Webhook deliveries: signed attempts in batches, the retry schedule, the log and the sweeper.

The delivery row is the truth. A job claims its due delivery, and other due ones with it, with
a conditional UPDATE that sets a lease, sends them without holding a transaction, then writes
each outcome in one transaction: success, the next attempt time, or failure for good. The
sweeper enqueues every due delivery that no live lease holds, so an enqueue lost to a Redis
outage or a worker killed mid-batch only delays it.
"""

import base64
import email.utils
import hashlib
import hmac
import json
import random
import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from flask import current_app

from app import metrics, outbound, queue
from app.db import database, insert_rows, is_sqlite, raw_sql
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
JOB = "app.jobs.deliver_webhook"
# How many lease periods that mark lasts at most (an hour in production): it only matters
# for a job lost between leaving the queue and starting, and every lapse re-enqueues the
# whole backlog once.
QUEUED_MARK_LEASES = 60


# A job sends its own delivery and, with it, other due ones: up to BATCH_SIZE claimed with one
# UPDATE and recorded in one transaction, and batch after batch while a backlog lasts, for up
# to BATCH_SECONDS. Per delivery, a job's queue round trips and two write transactions cost
# several times the HTTP request itself; the jobs of the deliveries a batch took find nothing
# left to do.
BATCH_SIZE = 50
BATCH_SECONDS = 0.5


def job_id(delivery_id: str) -> str:
    """The RQ job id of a delivery's job: a batch that sends the delivery drops its job."""
    return "delivery-" + delivery_id


def defer_job(delivery_id: str) -> None:
    """Enqueue the delivery's job once the current queue.transaction() commits."""
    queue.defer("webhooks", JOB, delivery_id, job_id=job_id(delivery_id))


@dataclass(frozen=True)
class Claim:
    """Deliveries a job holds: their ids, in the order claimed, and the lease's expiry."""

    ids: list[str]
    lease_until: datetime


@dataclass
class Sent:
    """What one attempt came to, before it is written."""

    delivery: Delivery
    attempted_at: datetime
    duration_ms: int
    status_code: int | None = None
    error: str | None = None
    timed_out: bool = False
    retry_after: float | None = None
    excerpt: str | None = None


# Fixed SQL (see db.raw_sql): every job claims, and compiling peewee's queries each time cost
# more than running them. FREE: pending, due, and not leased (its two parameters: now, now).
FREE = "status = 'pending' AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until < ?)"
ANY_FREE_SQL = f"SELECT 1 FROM delivery WHERE {FREE} LIMIT 1"
FREE_ONE_SQL = f"SELECT id FROM delivery WHERE id = ? AND {FREE}"
FREE_OLDEST_SQL = (
    f"SELECT id FROM delivery WHERE {FREE} AND id <> ? ORDER BY next_attempt_at LIMIT ?"
)
LEASE_SQL = (
    "UPDATE delivery SET lease_until = ?, attempts = attempts + 1, updated_at = ? WHERE id IN "
)
SUCCEEDED_SQL = (
    "UPDATE delivery SET status = 'succeeded', lease_until = NULL, next_attempt_at = NULL, "
    "last_status_code = ?, last_error = NULL, completed_at = ?, updated_at = ? WHERE id IN "
)
RECOVERED_SQL = "UPDATE webhook SET failing_since = NULL WHERE failing_since IS NOT NULL AND id IN "


def claim(delivery_id: str | None = None, *, limit: int = 1) -> Claim | None:
    """Take the lease of up to `limit` due, unleased pending deliveries, delivery_id first.

    With a delivery_id and limit 1, only that delivery; then the longest due. They are chosen
    and leased in one write transaction (on PostgreSQL, rows another job is claiming are
    skipped), so a delivery another job holds, or that is not due, is never taken.
    """
    now = utcnow()
    lease_until = now + timedelta(seconds=current_app.config["WEBHOOK_LEASE_SECONDS"])
    at = Delivery.next_attempt_at.db_value(now)
    if not database.execute_sql(raw_sql(ANY_FREE_SQL), (at, at)).fetchone():
        return None  # most jobs of a backlog sent in batches: no write transaction for them
    lock = "" if is_sqlite() else " FOR UPDATE SKIP LOCKED"
    ids: list[str] = []
    with database.atomic():
        if delivery_id is not None:
            ids += _ids(FREE_ONE_SQL + lock, (delivery_id, at, at))
        if limit > len(ids):
            ids += _ids(FREE_OLDEST_SQL + lock, (at, at, delivery_id or "", limit - len(ids)))
        if ids:
            # By primary key: chosen above in this transaction, and locked on PostgreSQL.
            database.execute_sql(
                raw_sql(LEASE_SQL + _placeholders(ids)),
                (Delivery.lease_until.db_value(lease_until), at, *ids),
            )
    return Claim(ids=ids, lease_until=lease_until) if ids else None


def _ids(sql: str, params: tuple[object, ...]) -> list[str]:
    return [row[0] for row in database.execute_sql(raw_sql(sql), params)]


def _placeholders(values: Collection[object]) -> str:
    return "(" + ", ".join("?" * len(values)) + ")"


def attempt(*, delivery_id: str, batch_size: int = 1) -> str | None:
    """Attempt a delivery if it is due and free (with other due ones up to batch_size).

    Its status after, or None when it was not attempted.
    """
    queue.forget_once(QUEUED + delivery_id)  # no job of it waits now: the sweeper may send it
    return attempt_batch(delivery_id, limit=batch_size).get(delivery_id)


def deliver(*, delivery_id: str) -> None:
    """A delivery job: its delivery and other due ones, batch after batch for BATCH_SECONDS."""
    queue.forget_once(QUEUED + delivery_id)
    until = time.monotonic() + BATCH_SECONDS
    first: str | None = delivery_id
    while len(attempt_batch(first, limit=BATCH_SIZE)) >= BATCH_SIZE:
        if time.monotonic() >= until:
            break  # the rest is left to the queued jobs of those deliveries
        first = None


def attempt_batch(first: str | None, *, limit: int) -> dict[str, str | None]:
    """Claim, send and record a batch; the status of each delivery claimed (None: released).

    Every attempt is sent without a transaction open, and all are written in one. The first
    delivery is always sent; another only while the batch is under BATCH_SECONDS old and the
    lease outlasts the longest an attempt may take (so no other job can take it over
    meanwhile), and not once its webhook failed in this batch (a failing receiver gets one
    attempt per batch, and a 410 is heeded before the next). The ones not sent are released,
    due as before.
    """
    config = current_app.config
    longest = config["WEBHOOK_CONNECT_TIMEOUT"] + config["WEBHOOK_TIMEOUT"]
    seconds = min(BATCH_SECONDS, config["WEBHOOK_LEASE_SECONDS"] - longest)
    if seconds <= 0:
        limit = 1  # the lease covers one attempt only
    send_until = time.monotonic() + seconds
    taken = claim(first, limit=limit)
    if taken is None:
        return {}
    rows = (
        Delivery.select(Delivery, Event, Webhook)
        .join(Event)
        .switch(Delivery)
        .join(Webhook)
        .where(Delivery.id.in_(taken.ids))
    )
    by_id = {delivery.id: delivery for delivery in rows}  # one deleted with its webhook: gone
    sent: list[Sent] = []
    disabled: list[Delivery] = []
    released: list[str] = []
    failed_webhooks: set[str] = set()
    for delivery_id in taken.ids:
        delivery = by_id.get(delivery_id)
        if delivery is None:
            continue
        if not delivery.webhook.is_active:
            disabled.append(delivery)
        elif (sent or disabled) and (
            time.monotonic() >= send_until or delivery.webhook_id in failed_webhooks
        ):
            released.append(delivery_id)
        else:
            outcome = send(delivery)
            sent.append(outcome)
            if outcome.error is not None:
                failed_webhooks.add(delivery.webhook_id)
    statuses = record(taken.lease_until, sent=sent, disabled=disabled, released=released)
    # The queued jobs of the deliveries this batch dealt with would find nothing to do: a
    # backlog sent in batches left one such job per delivery, each a full RQ run. (The first
    # delivery's job is the one running.)
    done = [outcome.delivery.id for outcome in sent] + [delivery.id for delivery in disabled]
    done = [delivery_id for delivery_id in done if delivery_id != first]
    queue.drop_waiting("webhooks", [job_id(i) for i in done], [QUEUED + i for i in done])
    for outcome in sent:
        status = statuses[outcome.delivery.id]
        label = {"succeeded": "success", "pending": "retry"}.get(status or "", "failed")
        metrics.WEBHOOK_ATTEMPTS.labels(label, str(outcome.delivery.attempts)).inc()
        if status == "succeeded":
            metrics.WEBHOOK_LAG.observe(
                (utcnow() - outcome.delivery.event.created_at).total_seconds()
            )
    return statuses


def send(delivery: Delivery) -> Sent:
    """Make one signed attempt of a claimed delivery (no database work)."""
    config = current_app.config
    webhook, event = delivery.webhook, delivery.event
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
    try:
        response = outbound.sender(bool(config["ALLOW_PRIVATE_URLS"])).send(
            "POST",
            webhook.url,
            body=body,
            headers=headers,
            timeout=(config["WEBHOOK_CONNECT_TIMEOUT"], config["WEBHOOK_TIMEOUT"]),
        )
    except outbound.OutboundError as exc:
        return Sent(
            delivery,
            attempted_at,
            duration_ms=int((time.monotonic() - started) * 1000),
            error=str(exc),
            timed_out=isinstance(exc, outbound.OutboundTimeout),
        )
    ok = 200 <= response.status_code < 300
    return Sent(
        delivery,
        attempted_at,
        duration_ms=response.duration_ms,
        status_code=response.status_code,
        error=None if ok else _status_error(response.status_code),
        retry_after=None if ok else parse_retry_after(response.headers.get("Retry-After")),
        excerpt=response.text(EXCERPT_BYTES),
    )


def record(
    lease_until: datetime, *, sent: list[Sent], disabled: list[Delivery], released: list[str]
) -> dict[str, str | None]:
    """Write a batch in one transaction: the attempts, their outcomes and the releases."""
    statuses: dict[str, str | None] = dict.fromkeys(released)
    now = utcnow()
    succeeded: dict[int | None, list[str]] = {}
    with database.atomic():
        if released:  # not attempted after all: as it was, due, and free for the next job
            Delivery.update(lease_until=None, attempts=Delivery.attempts - 1).where(
                Delivery.id.in_(released)
                & (Delivery.status == "pending")
                & (Delivery.lease_until == lease_until)
            ).execute()
        if sent:
            insert_rows(
                [
                    DeliveryAttempt(
                        delivery=outcome.delivery.id,
                        number=outcome.delivery.attempts,
                        attempted_at=outcome.attempted_at,
                        duration_ms=outcome.duration_ms,
                        status_code=outcome.status_code,
                        error=outcome.error,
                        response_excerpt=outcome.excerpt,
                    )
                    for outcome in sent
                ]
            )
        for delivery in disabled:
            _settle(delivery.id, lease_until, status="failed", error="The webhook is disabled.")
            statuses[delivery.id] = "failed"
        for outcome in sent:
            if outcome.error is None:
                succeeded.setdefault(outcome.status_code, []).append(outcome.delivery.id)
        # A webhook's failure in a batch comes after its successes (its other deliveries were
        # released), so the clock of failures is reset first and started again after.
        recovered = {o.delivery.webhook_id for o in sent if o.error is None}
        if recovered:
            database.execute_sql(raw_sql(RECOVERED_SQL + _placeholders(recovered)), (*recovered,))
        for outcome in sent:
            if outcome.error is not None:
                statuses[outcome.delivery.id] = _record_failure(outcome, lease_until, now=now)
        for status_code, ids in succeeded.items():
            # A success is written whoever holds the lease now: the receiver has it.
            at = Delivery.completed_at.db_value(now)
            database.execute_sql(
                raw_sql(SUCCEEDED_SQL + _placeholders(ids)), (status_code, at, at, *ids)
            )
            statuses.update(dict.fromkeys(ids, "succeeded"))
    return statuses


def _status_error(status_code: int) -> str:
    if 300 <= status_code < 400:
        return f"The receiver answered {status_code}; redirects are not followed."
    return f"The receiver answered {status_code}."


def _record_failure(outcome: Sent, lease_until: datetime, *, now: datetime) -> str:
    """Write what a failed attempt led to: the next attempt time, or failed for good."""
    delivery, status_code = outcome.delivery, outcome.status_code
    webhook_id = delivery.webhook_id
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
            delivery.attempts,
            status_code=status_code,
            timed_out=outcome.timed_out,
            retry_after=outcome.retry_after,
        )
        next_attempt_at = now + timedelta(seconds=delay)
    _settle(
        delivery.id,
        lease_until,
        status=status,
        status_code=status_code,
        error=outcome.error,
        next_attempt_at=next_attempt_at,
    )
    return status


def _settle(
    delivery_id: str,
    lease_until: datetime,
    *,
    status: str,
    status_code: int | None = None,
    error: str | None = None,
    next_attempt_at: datetime | None = None,
) -> None:
    """Release the lease with the attempt's outcome.

    Written only while this job still holds the lease: if it expired and another job took the
    delivery over, that job's outcome is the one that counts (a success is written by record()
    whoever holds it).
    """
    now = utcnow()
    Delivery.update(
        status=status,
        lease_until=None,
        next_attempt_at=next_attempt_at,
        last_status_code=status_code,
        last_error=error,
        completed_at=None if status == "pending" else now,
        updated_at=now,
    ).where(
        (Delivery.id == delivery_id)
        & (Delivery.status == "pending")
        & (Delivery.lease_until == lease_until)
    ).execute()


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
            JOB,
            row.id,
            once_key=QUEUED + row.id,
            once_ttl=max(1, QUEUED_MARK_LEASES * ttl),
            job_id=job_id(row.id),
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
        defer_job(delivery.id)
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
