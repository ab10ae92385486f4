"""Event log API: oldest first by seq, paging with after, the types filter, limits, an event
with its deliveries, the bodies webhooks receive, and another tenant's ids."""

import json

import pytest
from playhouse.test_utils import count_queries

from app.db import database
from app.models import Event
from app.services import events
from app.services import keys as key_service
from app.services import webhooks as webhook_service
from app.services.deliveries import wire as delivery_wire
from tests.helpers import ACTOR, assert_error, event_data
from tests.receiver import Receiver

API = "/api/v1/events"


def emit(tenant, type="call.ended", **data):
    with database.atomic():
        return events.emit(tenant_id=tenant.id, type=type, data=event_data(type, **data))


def page(client, headers, **query):
    response = client.get(API, query_string=query, headers=headers)
    assert response.status_code == 200, response.json
    return response.json


def test_an_empty_log_is_an_empty_page(client, headers):
    assert page(client, headers) == {"events": [], "hasMore": False, "nextAfter": None}


def test_events_come_oldest_first_as_their_webhook_bodies(client, headers, tenant):
    sent = [
        emit(tenant, "call.started", phoneNumberId="pn_2"),
        emit(tenant, "call.ended", durationSeconds=30),
        emit(tenant, "credits.low", balanceMinutes=3, threshold=10),
    ]
    listed = page(client, headers)
    assert listed["events"] == [json.loads(delivery_wire.event_body(event)) for event in sent]
    assert list(listed["events"][0]) == ["id", "event", "timestamp", "data"]
    assert listed["hasMore"] is False and listed["nextAfter"] == sent[-1].id


def test_the_body_a_receiver_gets_is_the_listed_event(app, client, headers, tenant):
    with Receiver() as receiver:
        webhook_service.create_webhook(
            actor=ACTOR,
            tenant=tenant,
            url=receiver.url,
            events=["call.transcript"],
            secret="s" * 16,
        )
        emit(tenant, "call.transcript", transcriptSummary="Terima kasih ✓")
        [request] = receiver.wait_for(1, timeout=10)
    [listed] = page(client, headers)["events"]
    assert request.json() == listed
    assert request.headers["X-Service-Event-Id"] == listed["id"]


def test_the_order_is_the_seq_even_against_the_timestamps(client, headers, tenant):
    """Recorded later, happened earlier (a runtime's late report): the log is in the order
    the events were recorded, which is the order a consumer paging with after can rely on."""
    first = emit(tenant, "call.ended")
    with database.atomic():
        second = events.emit(
            tenant_id=tenant.id,
            type="call.answered",
            data={"callId": "call_1"},
            occurred_at=first.created_at.replace(year=first.created_at.year - 1),
        )
    assert [e["id"] for e in page(client, headers)["events"]] == [first.id, second.id]
    assert (first.seq, second.seq) == (1, 2)


def test_paging_with_after_visits_every_event_once(client, headers, tenant):
    sent = [emit(tenant, durationSeconds=number).id for number in range(7)]
    seen, after, pages = [], None, 0
    while True:
        query = {"limit": 3} | ({"after": after} if after else {})
        listed = page(client, headers, **query)
        seen += [event["id"] for event in listed["events"]]
        after, pages = listed["nextAfter"], pages + 1
        if not listed["hasMore"]:
            break
    assert seen == sent and pages == 3
    # Caught up: the same after again is an empty page that keeps its place.
    assert page(client, headers, after=after) == {
        "events": [],
        "hasMore": False,
        "nextAfter": sent[-1],
    }
    newer = emit(tenant)
    assert [event["id"] for event in page(client, headers, after=after)["events"]] == [newer.id]


def test_a_page_is_one_query_and_an_empty_one_after_an_event_two(app, client, headers, tenant):
    for _ in range(3):
        emit(tenant)
    first, *_, last = Event.select().order_by(Event.seq)
    for after in (None, first.id):
        with count_queries() as counter:
            assert len(events.list_events(tenant=tenant, after=after, limit=2).events) == 2
        assert counter.count == 1, after
    with count_queries() as counter:  # caught up: is the after event still kept?
        assert events.list_events(tenant=tenant, after=last.id).events == []
    assert counter.count == 2


def test_types_filters_by_event_name(client, headers, tenant):
    started = emit(tenant, "call.started")
    emit(tenant, "call.answered")
    ended = emit(tenant, "call.ended")
    low = emit(tenant, "credits.low", balanceMinutes=3, threshold=10)
    listed = page(client, headers, types="call.ended,call.started")
    assert [event["id"] for event in listed["events"]] == [started.id, ended.id]
    listed = page(client, headers, types="credits.low", after=started.id, limit=1)
    assert [event["id"] for event in listed["events"]] == [low.id]
    assert listed["hasMore"] is False


def test_test_events_are_in_the_log_too(client, headers, tenant):
    webhook = webhook_service.create_webhook(
        actor=ACTOR,
        tenant=tenant,
        url="http://127.0.0.1:9/in",
        events=["call.ended"],
        secret="s" * 16,
    )
    delivery = webhook_service.send_test(actor=ACTOR, tenant=tenant, webhook_id=webhook.id)
    emit(tenant)
    listed = page(client, headers, types="webhook.test")
    assert [event["id"] for event in listed["events"]] == [delivery.event_id]
    assert listed["events"][0]["data"]["webhookId"] == webhook.id


def test_an_unknown_type_names_the_known_ones(client, headers):
    response = client.get(API, query_string={"types": "call.ended,call.exploded"}, headers=headers)
    error = assert_error(response, 422, "validation_error")
    assert error["message"] == "Invalid value for types."
    [message] = error["details"]["types"]
    assert "'call.exploded'" in message and "call.started" in message and "webhook.test" in message


@pytest.mark.parametrize(
    "query, field",
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"types": ""}, "types"),
        ({"types": "call.ended,"}, "types"),
        ({"after": "call_1"}, "after"),
        ({"after": "evt_" + "A" * 20}, "after"),
    ],
)
def test_bad_parameters_are_422_naming_them(client, headers, query, field):
    error = assert_error(
        client.get(API, query_string=query, headers=headers), 422, "validation_error"
    )
    assert list(error["details"]) == [field]


@pytest.mark.parametrize("limit", [1, 100])
def test_limit_takes_1_to_100(client, headers, tenant, limit):
    for _ in range(2):
        emit(tenant)
    listed = page(client, headers, limit=limit)
    assert len(listed["events"]) == min(limit, 2) and listed["hasMore"] is (limit == 1)


def test_the_default_page_is_50(client, headers, tenant):
    with database.atomic():
        for _ in range(51):
            events.emit(tenant_id=tenant.id, type="call.ended", data={})
    listed = page(client, headers)
    assert len(listed["events"]) == 50 and listed["hasMore"] is True


def test_an_after_that_is_unknown_is_404_saying_why(client, headers):
    response = client.get(API, query_string={"after": "evt_" + "x" * 20}, headers=headers)
    error = assert_error(response, 404, "not_found")
    assert "evt_" + "x" * 20 in error["message"] and "retention" in error["message"]


def test_another_tenants_events_are_neither_listed_nor_found(
    client, headers, other_headers, tenant, other_tenant
):
    mine = emit(tenant)
    theirs = emit(other_tenant)
    assert [event["id"] for event in page(client, headers)["events"]] == [mine.id]
    response = client.get(API, query_string={"after": theirs.id}, headers=headers)
    assert_error(response, 404, "not_found")
    assert_error(client.get(f"{API}/{theirs.id}", headers=headers), 404, "not_found")
    assert client.get(f"{API}/{theirs.id}", headers=other_headers).status_code == 200


def test_get_an_event_with_its_deliveries(client, headers, tenant):
    first = webhook_service.create_webhook(
        actor=ACTOR,
        tenant=tenant,
        url="http://127.0.0.1:9/a",
        events=["call.ended"],
        secret="s" * 16,
    )
    second = webhook_service.create_webhook(
        actor=ACTOR,
        tenant=tenant,
        url="http://127.0.0.1:9/b",
        events=["call.ended"],
        secret="s" * 16,
    )
    event = emit(tenant, durationSeconds=30)
    response = client.get(f"{API}/{event.id}", headers=headers)
    assert response.status_code == 200
    detail = response.json
    assert {key: detail[key] for key in ("id", "event", "timestamp", "data")} == json.loads(
        delivery_wire.event_body(event)
    )
    assert [d["webhookId"] for d in detail["deliveries"]] == [first.id, second.id]
    delivery = detail["deliveries"][0]
    assert set(delivery) == {
        "id",
        "webhookId",
        "eventId",
        "event",
        "status",
        "attemptCount",
        "nextAttemptAt",
        "lastStatusCode",
        "lastError",
        "createdAt",
        "completedAt",
        "attempts",
    }
    assert delivery["eventId"] == event.id and delivery["event"] == "call.ended"
    # Nothing listens on port 9: the first attempt (made inline) failed, and is listed.
    assert delivery["attemptCount"] == 1 and delivery["attempts"][0]["number"] == 1


def test_an_event_without_deliveries_has_an_empty_list(client, headers, tenant):
    event = emit(tenant)
    assert client.get(f"{API}/{event.id}", headers=headers).json["deliveries"] == []


def test_an_unknown_event_is_404(client, headers):
    assert_error(client.get(f"{API}/evt_nope", headers=headers), 404, "not_found")


def test_the_log_needs_an_api_key(client):
    assert_error(client.get(API), 401, "unauthorized")
    assert_error(client.get(f"{API}/evt_x"), 401, "unauthorized")


def test_a_read_key_may_read_the_log(client, tenant):
    key = key_service.create_key(actor=ACTOR, tenant=tenant, name="reader", scope="read")[1]
    assert client.get(API, headers={"x-api-key": key}).status_code == 200
