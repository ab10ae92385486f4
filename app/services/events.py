"""Events and the outbox: an event and its deliveries are written with the change that caused
them, in the same transaction; their delivery jobs are enqueued after commit."""

from datetime import datetime
from typing import Any

from app import queue
from app.db import raw_sql
from app.models import Delivery, Event, Webhook
from app.util import new_id, utcnow

EVENT_TYPES = (
    "call.started",
    "call.answered",
    "call.ended",
    "call.transcript",
    "credits.low",
    "function.called",
)


# Fixed SQL: every runtime request emits an event, and compiling this query each time cost
# more than running it.
ACTIVE_WEBHOOKS_SQL = "SELECT id, events FROM webhook WHERE tenant_id = ? AND is_active"


def emit(
    *, tenant_id: str, type: str, data: dict[str, Any], occurred_at: datetime | None = None
) -> Event:
    """Record an event and one pending delivery per active webhook subscribed to it.

    Call inside queue.transaction(): the delivery jobs are deferred until it commits.
    """
    event = Event.create(
        id=new_id("evt"), tenant=tenant_id, type=type, data=data, created_at=occurred_at or utcnow()
    )
    for webhook in Webhook.raw(raw_sql(ACTIVE_WEBHOOKS_SQL), tenant_id):
        if type in webhook.events:
            delivery = Delivery.create(
                id=new_id("dlv"), tenant=tenant_id, webhook=webhook.id, event=event
            )
            queue.defer("webhooks", "app.jobs.deliver_webhook", delivery.id)
    return event
