"""POST /webhooks/:id/replay: a new delivery of every kept event of a range the webhook
subscribes to, with the event's own id and body; its validation and its limits."""

from datetime import timedelta

import pytest

from app.db import database
from app.models import Delivery
from app.services import events
from app.services import keys as key_service
from app.services import webhooks as webhook_service
from app.util import isoformat, utcnow
from tests.helpers import ACTOR, assert_error
from tests.receiver import Receiver

API = "/api/v1/webhooks"
NOW = utcnow().replace(microsecond=0)
HOUR = timedelta(hours=1)


def at(hours_ago: float) -> str:
    return isoformat(NOW - hours_ago * HOUR)


def emit(tenant, type="call.ended", hours_ago=0.0, **data):
    """An event that happened hours_ago; nothing is subscribed yet, so it has no delivery."""
    with database.atomic():
        return events.emit(
            tenant_id=tenant.id,
            type=type,
            data={"callId": "call_1", **data},
            occurred_at=NOW - hours_ago * HOUR,
        )


def make_webhook(tenant, url="http://127.0.0.1:9/in", events=("call.ended",)):
    return webhook_service.create_webhook(
        actor=ACTOR, tenant=tenant, url=url, events=list(events), secret="s" * 16
    )


def replay(client, headers, webhook_id, **body):
    return client.post(f"{API}/{webhook_id}/replay", json=body, headers=headers)


def replayed_event_ids(webhook):
    query = Delivery.select().where(Delivery.webhook == webhook.id).order_by(Delivery.created_at)
    return [delivery.event_id for delivery in query]


def test_replay_queues_the_events_of_the_range_the_webhook_subscribes_to(
    client, headers, tenant, other_tenant
):
    old = emit(tenant, "call.ended", hours_ago=5)
    started = emit(tenant, "call.started", hours_ago=3)
    ended = emit(tenant, "call.ended", hours_ago=2)
    emit(tenant, "credits.low", hours_ago=2, balanceMinutes=3, threshold=10)  # not subscribed
    emit(other_tenant, "call.ended", hours_ago=2)  # not the tenant's
    webhook = make_webhook(tenant, events=("call.started", "call.ended"))
    other = make_webhook(tenant)

    response = replay(client, headers, webhook.id, since=at(4))
    assert response.status_code == 202
    assert response.json == {"replayed": 2}
    assert replayed_event_ids(webhook) == [started.id, ended.id]
    assert replayed_event_ids(other) == []
    assert old.id not in replayed_event_ids(webhook)


def test_since_is_inclusive_and_until_exclusive(client, headers, tenant):
    first = emit(tenant, hours_ago=3)
    second = emit(tenant, hours_ago=2)
    emit(tenant, hours_ago=1)
    webhook = make_webhook(tenant)
    response = replay(client, headers, webhook.id, since=at(3), until=at(1))
    assert response.json == {"replayed": 2}
    assert replayed_event_ids(webhook) == [first.id, second.id]


def test_events_narrows_the_replay_to_those_names(client, headers, tenant):
    emit(tenant, "call.started", hours_ago=2)
    ended = emit(tenant, "call.ended", hours_ago=1)
    webhook = make_webhook(tenant, events=("call.started", "call.ended"))
    # credits.low is a known name the webhook does not subscribe to: nothing of it is sent.
    body = {"since": at(3), "events": ["call.ended", "credits.low"]}
    assert replay(client, headers, webhook.id, **body).json == {"replayed": 1}
    assert replayed_event_ids(webhook) == [ended.id]


def test_every_replay_is_a_new_delivery_of_the_same_event(client, headers, tenant):
    event = emit(tenant, hours_ago=1)
    webhook = make_webhook(tenant)
    for _ in range(2):
        assert replay(client, headers, webhook.id, since=at(2)).json == {"replayed": 1}
    assert replayed_event_ids(webhook) == [event.id, event.id]
    listed = client.get(f"/api/v1/events/{event.id}", headers=headers).json["deliveries"]
    assert len(listed) == 2 and len({d["id"] for d in listed}) == 2


def test_an_empty_range_replays_nothing(client, headers, tenant):
    emit(tenant, hours_ago=5)
    webhook = make_webhook(tenant)
    assert replay(client, headers, webhook.id, since=at(2)).json == {"replayed": 0}
    assert replayed_event_ids(webhook) == []


def test_replayed_events_reach_the_receiver_with_their_own_ids(app, client, headers, tenant):
    sent = [emit(tenant, hours_ago=2, durationSeconds=n) for n in range(3)]
    with Receiver() as receiver:
        webhook = make_webhook(tenant, url=receiver.url)
        assert replay(client, headers, webhook.id, since=at(3)).json == {"replayed": 3}
        requests = receiver.wait_for(3, timeout=10)
    assert sorted(r.headers["X-Service-Event-Id"] for r in requests) == sorted(e.id for e in sent)
    by_id = {request.headers["webhook-id"]: request.json() for request in requests}
    listed = client.get("/api/v1/events", headers=headers).json["events"]
    assert [by_id[event["id"]] for event in listed] == listed


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "since"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-13-01T00:00:00Z"}, "since"),
        ({"since": "0001-01-01T00:00:00+05:00"}, "since"),  # before the first UTC moment
        ({"since": "2026-01-01T00:00:00Z", "until": "9999-12-31T23:59:59-05:00"}, "until"),
        ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until"),
        ({"since": "2026-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until"),
        ({"since": "2026-01-01T00:00:00Z", "events": []}, "events"),
        ({"since": "2026-01-01T00:00:00Z", "events": ["call.exploded"]}, "events"),
        ({"since": "2026-01-01T00:00:00Z", "events": ["call.ended", "call.ended"]}, "events"),
        ({"since": "2026-01-01T00:00:00Z", "events": ["webhook.test"]}, "events"),
        ({"since": "2026-01-01T00:00:00Z", "from": "2026-01-01T00:00:00Z"}, "from"),
    ],
)
def test_replay_rejects_invalid_fields(client, headers, tenant, body, field):
    webhook = make_webhook(tenant)
    error = assert_error(replay(client, headers, webhook.id, **body), 422, "validation_error")
    assert list(error["details"]) == [field]


def test_since_in_the_future_without_until_is_422(client, headers, tenant):
    webhook = make_webhook(tenant)
    response = replay(client, headers, webhook.id, since=isoformat(utcnow() + HOUR))
    error = assert_error(response, 422, "validation_error")
    assert error["details"] == {"since": ["Must be in the past."]}


def test_a_timestamp_with_an_offset_is_read_as_that_moment(client, headers, tenant):
    event = emit(tenant, hours_ago=1)
    webhook = make_webhook(tenant)
    since = (NOW - 1.5 * HOUR + 7 * HOUR).strftime("%Y-%m-%dT%H:%M:%S+07:00")
    assert replay(client, headers, webhook.id, since=since).json == {"replayed": 1}
    assert replayed_event_ids(webhook) == [event.id]


def test_a_disabled_webhook_is_409_webhook_disabled(client, headers, tenant):
    emit(tenant, hours_ago=1)
    webhook = make_webhook(tenant)
    webhook_service.update_webhook(
        actor=ACTOR, tenant=tenant, webhook_id=webhook.id, is_active=False
    )
    error = assert_error(replay(client, headers, webhook.id, since=at(2)), 409, "webhook_disabled")
    assert "enable it" in error["message"]
    assert replayed_event_ids(webhook) == []


def test_a_range_over_the_limit_is_422_and_queues_nothing(client, headers, tenant, monkeypatch):
    monkeypatch.setattr(webhook_service, "REPLAY_LIMIT", 3)
    for _ in range(4):
        emit(tenant, hours_ago=1)
    webhook = make_webhook(tenant)
    error = assert_error(replay(client, headers, webhook.id, since=at(2)), 422, "replay_too_large")
    assert error["details"] == {"limit": 3} and "more than 3 events" in error["message"]
    assert replayed_event_ids(webhook) == []
    assert replay(client, headers, webhook.id, since=at(2), until=at(0.5)).status_code == 422


def test_exactly_the_limit_is_replayed(client, headers, tenant, monkeypatch):
    monkeypatch.setattr(webhook_service, "REPLAY_LIMIT", 3)
    for _ in range(3):
        emit(tenant, hours_ago=1)
    webhook = make_webhook(tenant)
    assert replay(client, headers, webhook.id, since=at(2)).json == {"replayed": 3}


def test_a_webhook_left_with_too_many_pending_is_409_replay_backlog(
    client, headers, tenant, monkeypatch
):
    monkeypatch.setattr(webhook_service, "REPLAY_LIMIT", 3)
    webhook = make_webhook(tenant)  # port 9: deliveries fail and stay pending (retrying)
    emit(tenant)
    emit(tenant)
    assert Delivery.select().where(Delivery.status == "pending").count() == 2
    error = assert_error(replay(client, headers, webhook.id, since=at(1)), 409, "replay_backlog")
    assert error["details"] == {"pending": 2, "limit": 3}
    assert Delivery.select().count() == 2
    Delivery.update(status="failed").execute()
    assert replay(client, headers, webhook.id, since=at(1)).json == {"replayed": 2}


def test_replay_of_another_tenants_webhook_is_404(client, headers, other_tenant):
    emit(other_tenant, hours_ago=1)
    webhook = make_webhook(other_tenant)
    assert_error(replay(client, headers, webhook.id, since=at(2)), 404, "not_found")
    assert_error(replay(client, headers, "wh_nope", since=at(2)), 404, "not_found")
    assert replayed_event_ids(webhook) == []


def test_a_read_key_may_not_replay(client, tenant):
    webhook = make_webhook(tenant)
    key = key_service.create_key(actor=ACTOR, tenant=tenant, name="reader", scope="read")[1]
    response = replay(client, {"x-api-key": key}, webhook.id, since=at(2))
    assert_error(response, 403, "insufficient_scope")
