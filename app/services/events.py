"""Events and the outbox: an event and its deliveries are written with the change that caused
them, in the same transaction; their delivery jobs are enqueued after commit."""

from datetime import datetime
from typing import Any

from app.models import Delivery, Event, Webhook
from app.services import deliveries as delivery_service
from app.util import new_id, utcnow

EVENT_TYPES = (
    "call.started",
    "call.answered",
    "call.ended",
    "call.transcript",
    "credits.low",
    "function.called",
)


def emit(
    *, tenant_id: str, type: str, data: dict[str, Any], occurred_at: datetime | None = None
) -> Event:
    """Record an event and one pending delivery per active webhook subscribed to it.

    Call inside the transaction of the change that caused it: the delivery jobs are enqueued
    once it commits.
    """
    event = Event.create(
        id=new_id("evt"), tenant=tenant_id, type=type, data=data, created_at=occurred_at or utcnow()
    )
    webhooks = Webhook.select(Webhook.id, Webhook.events).where(
        (Webhook.tenant == tenant_id) & Webhook.is_active
    )
    deliveries = [
        {
            "id": new_id("dlv"),
            "tenant": tenant_id,
            "webhook": webhook.id,
            "event": event.id,
            "job_id": delivery_service.new_job_id(),
        }
        for webhook in webhooks
        if type in webhook.events
    ]
    if deliveries:
        Delivery.insert_many(deliveries).execute()  # one statement for all of them
    for delivery in deliveries:
        delivery_service.defer_job(delivery["id"], delivery["job_id"])
    return event
