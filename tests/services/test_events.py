"""Events: the call an event is about, and a call's events with their deliveries."""

from playhouse.test_utils import count_queries

from app.db import database
from app.models import Event
from app.services import events
from app.services import webhooks as webhook_service
from app.util import utcnow
from tests.helpers import ACTOR

# Nothing listens on port 9: each delivery's first attempt (made at once here) fails.
REFUSED = "The connection was refused."


def emit(tenant, type, **data):
    with database.atomic():
        return events.emit(tenant_id=tenant.id, type=type, data=data)


def test_an_event_about_a_call_names_it_and_others_name_none(tenant):
    emit(tenant, "call.started", callId="call_1", callerNumber="+6281234567890")
    emit(tenant, "credits.low", balanceMinutes=3, threshold=10)
    emit(tenant, "call.ended", callId=42)  # not an id: nothing to find it by
    stored = {event.type: event.call_id for event in Event.select()}
    assert stored == {"call.started": "call_1", "credits.low": None, "call.ended": None}


def test_a_calls_events_come_oldest_first_with_their_deliveries(tenant, other_tenant):
    hook = webhook_service.create_webhook(
        actor=ACTOR,
        tenant=tenant,
        url="http://127.0.0.1:9/hooks",
        events=["call.started", "call.ended"],
        secret="s" * 32,
    )
    started = emit(tenant, "call.started", callId="call_1")
    answered = emit(tenant, "call.answered", callId="call_1")
    ended = emit(tenant, "call.ended", callId="call_1")
    emit(tenant, "call.started", callId="call_2")
    emit(other_tenant, "call.started", callId="call_1")  # not the tenant's
    with count_queries() as counter:
        found = events.for_call(tenant=tenant, call_id="call_1")
        deliveries = {
            event.id: [(d.webhook.url, d.status, d.last_error) for d in event.delivery_list]
            for event in found
        }
    assert [event.id for event in found] == [started.id, answered.id, ended.id]
    assert deliveries == {
        started.id: [(hook.url, "pending", REFUSED)],
        answered.id: [],
        ended.id: [(hook.url, "pending", REFUSED)],
    }
    assert counter.count == 2


def test_a_call_without_events_is_one_query(tenant):
    with count_queries() as counter:
        assert events.for_call(tenant=tenant, call_id="call_none") == []
    assert counter.count == 1


def test_a_calls_events_since_a_time_include_those_naming_no_call(tenant, other_tenant):
    started = emit(tenant, "call.started", callId="call_1")  # the call's, before the time
    emit(tenant, "credits.low", balanceMinutes=5, threshold=10)  # before the time
    since = utcnow()
    answered = emit(tenant, "call.answered", callId="call_1")
    emit(tenant, "call.started", callId="call_2")
    low = emit(tenant, "credits.low", balanceMinutes=3, threshold=10)
    emit(other_tenant, "call.ended", callId="call_1")  # not the tenant's
    found = events.call_events_since(tenant_id=tenant.id, call_id="call_1", since=since)
    assert [event.id for event in found] == [started.id, answered.id, low.id]
