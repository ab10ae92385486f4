"""Events and the outbox: an event and its deliveries are written with the change that caused
them, in the same transaction; their delivery jobs are enqueued after commit."""

from datetime import datetime
from typing import Any

from app.db import database, insert_rows, insert_statement, is_sqlite, raw_sql
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


# Fixed SQL (see db.insert_rows): every runtime request emits an event, and compiling these
# queries each time cost more than running them.
ACTIVE_WEBHOOKS_SQL = "SELECT id, events FROM webhook WHERE tenant_id = ? AND is_active"


def emit(
    *, tenant_id: str, type: str, data: dict[str, Any], occurred_at: datetime | None = None
) -> Event:
    """Record an event and one pending delivery per active webhook subscribed to it.

    Call inside queue.transaction(): the delivery jobs are deferred until it commits.
    """
    event = Event(
        id=new_id("evt"), tenant=tenant_id, type=type, data=data, created_at=occurred_at or utcnow()
    )
    insert, params = insert_statement([event])
    if is_sqlite():
        database.execute_sql(raw_sql(insert), params)
        webhooks = database.execute_sql(raw_sql(ACTIVE_WEBHOOKS_SQL), (tenant_id,))
    else:
        # One round trip: PostgreSQL runs a data-modifying WITH even though nothing reads it.
        both = f"WITH inserted AS ({insert}) {ACTIVE_WEBHOOKS_SQL}"
        webhooks = database.execute_sql(raw_sql(both), (*params, tenant_id))
    subscribed = Webhook.events.python_value
    deliveries = [
        Delivery(id=new_id("dlv"), tenant=tenant_id, webhook=webhook_id, event=event.id)
        for webhook_id, events in webhooks
        if type in subscribed(events)
    ]
    insert_rows(deliveries)  # one statement for all of them
    for delivery in deliveries:
        delivery_service.defer_job(delivery.id)
    return event
