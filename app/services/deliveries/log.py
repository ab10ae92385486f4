"""The delivery log: a tenant's deliveries with their attempts, and a retry by hand."""

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from app import queue
from app.db import unit_of_work
from app.errors import Conflict, NotFound
from app.models import Delivery, DeliveryAttempt, Event, Tenant, Webhook
from app.services import audit
from app.services.audit import Actor
from app.services.deliveries.dispatch import defer_dispatch
from app.services.pages import Page, paginate
from app.util import utcnow

STATUSES = ("pending", "succeeded", "failed")


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


@dataclass(frozen=True)
class RetryOutcome:
    """What a retry came to once it committed (retry_and_report).

    With a worker to send it: queued (its job_id), waiting for a place (its webhook or tenant
    has as many deliveries in flight as it may), or unqueued (Redis does not answer; the
    sweeper enqueues it later). Inline, where the attempt was made in this process:
    delivered, retrying (attempt failed, next_attempt_at set), failed (no attempts left), or
    attempting (another process holds it, and no attempt of this retry was written).
    """

    kind: Literal["queued", "waiting", "unqueued", "delivered", "retrying", "failed", "attempting"]
    delivery_id: str
    job_id: str | None = None
    attempt: DeliveryAttempt | None = None
    next_attempt_at: datetime | None = None


def retry_and_report(*, actor: Actor, delivery_id: str) -> RetryOutcome:
    """Send any tenant's delivery again now, whatever its status (retry), and say what came
    of it: where it waits, or, in inline mode, what the attempt did."""
    attempts = get_delivery(tenant=None, delivery_id=delivery_id).attempts
    # The attempt is enqueued (or made, inline) once the retry commits.
    delivery = retry(tenant=None, actor=actor, delivery_id=delivery_id)
    delivery = get_delivery(tenant=None, delivery_id=delivery.id)
    if not queue.inline():  # a worker makes the attempt
        if delivery.job_id is None:  # the tenant's places are taken: it waits its turn
            return RetryOutcome("waiting", delivery.id)
        if not queue.known(delivery.job_id):
            return RetryOutcome("unqueued", delivery.id, job_id=delivery.job_id)
        return RetryOutcome("queued", delivery.id, job_id=delivery.job_id)
    attempt = last_attempt(delivery) if delivery.attempts > attempts else None
    if attempt is None:
        return RetryOutcome("attempting", delivery.id)
    if delivery.status == "succeeded":
        return RetryOutcome("delivered", delivery.id, attempt=attempt)
    if delivery.status == "pending":
        return RetryOutcome(
            "retrying", delivery.id, attempt=attempt, next_attempt_at=delivery.next_attempt_at
        )
    return RetryOutcome("failed", delivery.id, attempt=attempt)


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
