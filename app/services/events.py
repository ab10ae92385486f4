"""Events and the outbox: an event and its deliveries are written with the change that caused
them, in the same transaction; their delivery jobs are enqueued after commit."""

from datetime import datetime
from typing import Any

from app.models import Delivery, Event, Tenant, Webhook
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
    call_id = data.get("callId")
    event = Event.create(
        id=new_id("evt"),
        tenant=tenant_id,
        type=type,
        data=data,
        created_at=occurred_at or utcnow(),
        call_id=call_id if isinstance(call_id, str) else None,
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


def for_call(*, tenant: Tenant, call_id: str) -> list[Event]:
    """The call's events, oldest first, each with its deliveries and their webhook's URL
    (delivery_list): two queries, through the index on the event's call_id."""
    found = list(
        Event.select()
        .where((Event.tenant == tenant) & (Event.call_id == call_id))
        .order_by(Event.created_at, Event.id)
    )
    by_id = {event.id: event for event in found}
    for event in found:
        event.delivery_list = []
    if by_id:
        rows = (
            Delivery.select(Delivery, Webhook.id, Webhook.url)
            .join(Webhook)
            .where(Delivery.event.in_(list(by_id)))
            .order_by(Delivery.created_at, Delivery.id)
        )
        for delivery in rows:
            by_id[delivery.event_id].delivery_list.append(delivery)
    return found
