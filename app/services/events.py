"""Events, the outbox and the event log.

An event and its deliveries are written with the change that caused them, in the same
transaction, and dispatched in it; their delivery jobs are enqueued after commit. Each event
takes the next number of its tenant's log (seq) from a counter on the tenant row: the UPDATE
that takes it holds the row's lock until commit (PostgreSQL's row lock, SQLite's IMMEDIATE
transaction), so a tenant's events commit in seq order, and a reader that has seen seq n has
seen every event before it. Paging with after=evt_… (seq > that event's) never skips an event
that committed late.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.errors import NotFound
from app.models import Delivery, Event, Tenant, Webhook
from app.services.deliveries import dispatch as delivery_dispatch
from app.services.deliveries import log as delivery_log
from app.services.deliveries import wire as delivery_wire
from app.util import new_id, utcnow

EVENT_TYPES = (
    "call.started",
    "call.answered",
    "call.ended",
    "call.transcript",
    "credits.low",
    "function.called",
    "campaign.completed",
    "call.analyzed",
)
# Sent to one webhook by POST /webhooks/:id/test; in the log too, never subscribed to.
TEST_EVENT = "webhook.test"
LOGGED_TYPES = (*EVENT_TYPES, TEST_EVENT)


def take_seq() -> Any:
    """The SET of an UPDATE of the tenant row that takes its next seq; RETURN Tenant.event_seq.

    For a caller that updates the tenant row anyway (counting a call): one statement, not two.
    """
    return {Tenant.event_seq: Tenant.event_seq + 1}


def record(
    *,
    tenant_id: str,
    type: str,
    data: dict[str, Any],
    occurred_at: datetime | None = None,
    seq: int | None = None,
) -> Event:
    """Write an event with its tenant's next seq; call inside a transaction (the tenant row
    stays locked until it commits, so keep what follows short). seq: one the caller took
    already in this transaction (take_seq)."""
    if seq is None:
        taken = (
            Tenant.update(take_seq())
            .where(Tenant.id == tenant_id)
            .returning(Tenant.event_seq)
            .tuples()
            .execute()
        )
        row = next(iter(taken), None)
        if row is None:
            raise NotFound(f"Tenant {tenant_id} not found.")
        seq = row[0]
    call_id = data.get("callId")
    return Event.create(
        id=new_id("evt"),
        tenant=tenant_id,
        type=type,
        data=data,
        created_at=occurred_at or utcnow(),
        call_id=call_id if isinstance(call_id, str) else None,
        seq=seq,
    )


def emit(
    *,
    tenant_id: str,
    type: str,
    data: dict[str, Any],
    occurred_at: datetime | None = None,
    seq: int | None = None,
    dispatch: bool = True,
) -> Event:
    """Record an event and one pending delivery per active webhook subscribed to it.

    Call inside the transaction of the change that caused it: the tenant's due deliveries are
    dispatched in it too, and their jobs enqueued once it commits. seq: as record's.
    dispatch=False: only write them, for a caller whose answer must not wait for their
    dispatch (a function call's job: the web process dispatches them once it has answered,
    deliveries.dispatch.dispatch_after_response).
    """
    # Read before record() locks the tenant row: the lock is held for as short a time as can be.
    webhooks = list(
        Webhook.select(Webhook.id, Webhook.events).where(
            (Webhook.tenant == tenant_id) & Webhook.is_active
        )
    )
    event = record(tenant_id=tenant_id, type=type, data=data, occurred_at=occurred_at, seq=seq)
    deliveries = [
        {
            "id": new_id("dlv"),
            "tenant": tenant_id,
            "webhook": webhook.id,
            "event": event.id,
        }
        for webhook in webhooks
        if type in webhook.events
    ]
    if deliveries:
        Delivery.insert_many(deliveries).execute()  # one statement for all of them
        if dispatch:
            delivery_dispatch.dispatch_within(tenant_id)
    return event


def for_call(*, tenant: Tenant, call_id: str) -> list[Event]:
    """The call's events, oldest first, each with its deliveries and their webhook's URL
    (delivery_list): two queries, through the index on the event's call_id."""
    found = list(
        Event.select()
        .where((Event.tenant == tenant) & (Event.call_id == call_id))
        .order_by(Event.seq)
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


def call_events_since(*, tenant_id: str, call_id: str, since: datetime) -> list[Event]:
    """The call's events and those of the tenant's log from since on that name no call
    (credits.low), in the order emitted: what a call just driven from start to end emitted
    (also when it was recorded as having started before since)."""
    emitted = (
        Event.select()
        .where(
            (Event.tenant == tenant_id)
            & ((Event.call_id == call_id) | (Event.call_id.is_null() & (Event.created_at >= since)))
        )
        .order_by(Event.seq)
    )
    return [event for event in emitted if event.data.get("callId", call_id) == call_id]


@dataclass(frozen=True)
class LogPage:
    """A page of the event log: events as delivered (event_payload), oldest first."""

    events: list[dict[str, Any]]
    has_more: bool
    next_after: str | None  # the last event's id; the after given when the page is empty


def get_event(*, tenant: Tenant, event_id: str) -> Event:
    """The tenant's event, or NotFound (also for another tenant's, or one pruned)."""
    event = Event.get_or_none((Event.id == event_id) & (Event.tenant == tenant))
    if event is None:
        raise NotFound(f"Event {event_id} not found.")
    return event


def list_events(
    *, tenant: Tenant, after: str | None = None, types: list[str] | None = None, limit: int = 50
) -> LogPage:
    """The tenant's events after the event `after` (from the oldest kept without it), in
    seq order: a range of the (tenant, seq) index, as cheap at the end of the log as at its
    start, in one query (two for an empty page after `after`). An unknown `after` is
    NotFound: pruned (older than the retention), or never one of the tenant's."""
    condition = Event.tenant == tenant
    cursor = (Event.id == after) & (Event.tenant == tenant)
    if after is not None:
        # The after event's seq in the same query (one round trip a page); an unknown after
        # makes it NULL, and the page empty, which is told apart below.
        condition &= Event.seq > Event.select(Event.seq).where(cursor)
    if types:
        condition &= Event.type.in_(types)
    rows = list(
        Event.select(Event.id, Event.type, Event.data, Event.created_at)
        .where(condition)
        .order_by(Event.seq)
        .limit(limit + 1)
    )
    if not rows and after is not None and not Event.select().where(cursor).exists():
        raise NotFound(
            f"No event {after} (after): it is not one of yours, or it is older than the "
            "retention and was deleted. Start again without after, or from a newer event.",
            details={"after": after},
        )
    shown = rows[:limit]
    return LogPage(
        events=[delivery_wire.event_payload(event) for event in shown],
        has_more=len(rows) > limit,
        next_after=shown[-1].id if shown else after,
    )


def event_detail(*, tenant: Tenant, event_id: str) -> dict[str, Any]:
    """The tenant's event as delivered, with its deliveries (to every webhook, replays too)
    oldest first, each with its attempts; NotFound as get_event."""
    event = get_event(tenant=tenant, event_id=event_id)
    found = list(
        Delivery.select()
        .where(Delivery.event == event.id)
        .order_by(Delivery.created_at, Delivery.id)
    )
    for delivery in found:
        delivery.event = event  # the delivery's event name, without a query per delivery
    deliveries = delivery_log.with_attempts(found)
    return {**delivery_wire.event_payload(event), "deliveries": deliveries}


def ids_in_range(
    *, tenant: Tenant, since: datetime, until: datetime, types: list[str], limit: int
) -> list[str]:
    """Ids of the tenant's events of types that happened in [since, until), oldest first, at
    most limit of them: in the order of the (tenant, created_at) index, so the scan stops at
    limit however many events the range holds."""
    query = (
        Event.select(Event.id)
        .where(
            (Event.tenant == tenant)
            & (Event.created_at >= since)
            & (Event.created_at < until)
            & Event.type.in_(types)
        )
        .order_by(Event.created_at)
        .limit(limit)
    )
    return [event.id for event in query]
