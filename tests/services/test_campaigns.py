"""Campaign rules: the schedule window in the campaign's time zone, retries after the delay
(at most maxAttempts), the campaign's and the tenant's concurrency caps, pause, cancel, the
counts and campaign.completed; placed by the sweep (the inline runner's, too)."""

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest

from app.models import Call, Campaign, Event, Tenant
from app.services import campaigns as campaign_service
from app.services import phone_numbers as number_service
from app.services import tenants as tenant_service
from app.services.calls import lifecycle as call_lifecycle
from app.util import utcnow
from tests.campaigns import (
    answered,
    claim,
    contacts,
    counts,
    create,
    created,
    numbers,
    sweep,
    unanswered,
    zone_at_hour,
)
from tests.helpers import ACTOR
from tests.resources.test_event_payloads import assert_valid, document


@pytest.fixture
def number_id(did, tenant):
    (number,) = number_service.list_numbers(tenant=tenant)
    return number.id


def queued(campaign_id) -> list[Call]:
    return list(
        Call.select()
        .where((Call.campaign == campaign_id) & (Call.status == "queued"))
        .order_by(Call.queued_at, Call.id)
    )


def test_the_sweep_places_contacts_in_order_as_queued_calls_with_their_variables(
    client, headers, runtime_headers, number_id, agent_id, did
):
    client.patch(
        f"/api/v1/agents/{agent_id}", json={"greetingText": "Halo {{name}}!"}, headers=headers
    )
    people = [
        {"to": to, "variables": {"name": name}} for to, name in zip(numbers(2), "AB", strict=True)
    ]
    campaign_id = created(client, headers, number_id, people, maxConcurrentCalls=2)
    assert Call.select().count() == 0  # placed by the sweep, not by the request
    assert sweep() == 2
    calls = queued(campaign_id)
    assert [(call.callee_number, call.caller_number) for call in calls] == [
        (numbers(2)[0], did),
        (numbers(2)[1], did),
    ]
    assert [call.contact_id for call in calls] == [contact.id for contact in contacts(campaign_id)]
    greetings = [each["session"]["greetingText"] for each in claim(client, runtime_headers)]
    assert greetings == ["Halo A!", "Halo B!"]
    assert counts(campaign_id) == {
        "total": 2,
        "pending": 0,
        "in_progress": 2,
        "completed": 0,
        "failed": 0,
        "awaiting_permission": 0,
    }


def test_a_campaign_never_has_more_than_its_max_calls_queued_or_in_progress(
    client, headers, runtime_headers, number_id
):
    campaign_id = created(client, headers, number_id, numbers(5), maxConcurrentCalls=2)
    assert sweep() == 2
    assert sweep() == 0
    first, _ = claim(client, runtime_headers)
    assert sweep() == 0  # one ringing and one queued: still two
    answered(client, runtime_headers, first["id"])
    assert sweep() == 1
    assert Call.select().where(Call.campaign == campaign_id).count() == 3
    assert counts(campaign_id)["in_progress"] == 2


def test_the_tenants_limit_holds_across_campaigns(
    client, headers, runtime_headers, number_id, tenant
):
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="business", concurrent_calls=3)
    first = created(client, headers, number_id, numbers(5), maxConcurrentCalls=3)
    second = created(client, headers, number_id, numbers(5, 5), maxConcurrentCalls=3)
    assert sweep() == 6
    assert len(claim(client, runtime_headers)) == 3
    assert claim(client, runtime_headers) == []
    assert Tenant.get_by_id(tenant.id).active_calls == 3
    assert len(queued(first)) + len(queued(second)) == 3


def test_max_concurrent_calls_may_not_exceed_the_tenants_limit(client, headers, number_id, tenant):
    tenant_service.set_plan(actor=ACTOR, tenant=tenant, plan="business", concurrent_calls=3)
    response = create(client, headers, number_id, numbers(1), maxConcurrentCalls=4)
    assert response.status_code == 422
    assert response.json["error"]["details"] == {
        "maxConcurrentCalls": ["At most the tenant's concurrent-call limit, 3, not 4."]
    }


def test_a_campaign_outside_its_window_places_nothing_until_it_opens(client, headers, number_id):
    now = utcnow()
    zone = zone_at_hour(3, now)  # 03:xx there: before a 09:00–17:00 window
    schedule = {"timezone": zone, "start": "09:00", "end": "17:00"}
    campaign_id = created(client, headers, number_id, numbers(2), schedule=schedule)
    now = utcnow()
    assert sweep(now) == 0
    assert sweep(now + timedelta(hours=5)) == 0  # 08:xx
    opening = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=6)  # 09:00
    assert sweep(opening) == 1
    assert counts(campaign_id)["in_progress"] == 1


def test_a_campaign_inside_its_window_places_at_once(client, headers, number_id):
    now = utcnow()
    schedule = {"timezone": zone_at_hour(12, now), "start": "09:00", "end": "17:00"}
    campaign_id = created(client, headers, number_id, numbers(1), schedule=schedule)
    assert sweep(utcnow()) == 1
    assert len(queued(campaign_id)) == 1


def test_the_window_keeps_to_its_days(client, headers, number_id):
    now = utcnow()
    zone = zone_at_hour(12, now)
    local = now.replace(tzinfo=ZoneInfo("UTC")).astimezone(ZoneInfo(zone))
    today = campaign_service.DAYS[local.weekday()]
    others = [day for day in campaign_service.DAYS if day != today]
    schedule = {"timezone": zone, "days": others, "start": "09:00", "end": "17:00"}
    created(client, headers, number_id, numbers(1), schedule=schedule)
    now = utcnow()
    assert sweep(now) == 0
    assert sweep(now + timedelta(days=1)) == 1


def test_a_busy_contact_is_retried_after_the_delay_at_most_max_attempts(
    client, headers, runtime_headers, number_id
):
    retry = {"maxAttempts": 2, "delayMinutes": 10, "on": ["busy"]}
    campaign_id = created(client, headers, number_id, numbers(1), retry=retry)
    sweep()
    (call,) = claim(client, runtime_headers)
    unanswered(client, runtime_headers, call["id"], "busy")
    (contact,) = contacts(campaign_id)
    assert (contact.status, contact.attempts, contact.last_outcome) == ("pending", 1, "busy")
    ended_at = Call.get_by_id(call["id"]).ended_at
    assert contact.next_attempt_at == ended_at + timedelta(minutes=10)
    assert sweep(ended_at + timedelta(minutes=9)) == 0
    assert sweep(ended_at + timedelta(minutes=10)) == 1
    (retried,) = claim(client, runtime_headers)
    unanswered(client, runtime_headers, retried["id"], "busy")
    (contact,) = contacts(campaign_id)
    assert (contact.status, contact.attempts) == ("failed", 2)
    assert sweep(utcnow() + timedelta(days=1)) == 0
    assert counts(campaign_id)["failed"] == 1


def test_an_outcome_not_listed_is_not_retried(client, headers, runtime_headers, number_id):
    retry = {"maxAttempts": 3, "delayMinutes": 1, "on": ["busy"]}
    campaign_id = created(client, headers, number_id, numbers(1), retry=retry)
    sweep()
    (call,) = claim(client, runtime_headers)
    unanswered(client, runtime_headers, call["id"], "no_answer")
    (contact,) = contacts(campaign_id)
    assert (contact.status, contact.last_outcome) == ("failed", "no_answer")


def test_a_call_without_credit_is_retried_when_failed_is_listed(
    client, headers, runtime_headers, number_id, tenant
):
    retry = {"maxAttempts": 2, "delayMinutes": 1, "on": ["failed"]}
    campaign_id = created(client, headers, number_id, numbers(1), retry=retry)
    sweep()
    Tenant.update(balance_minutes=0).where(Tenant.id == tenant.id).execute()
    assert claim(client, runtime_headers) == []
    (contact,) = contacts(campaign_id)
    assert (contact.status, contact.last_outcome, contact.attempts) == ("pending", "failed", 1)


def test_a_completed_campaign_emits_campaign_completed(client, headers, runtime_headers, number_id):
    webhook = client.post(
        "/api/v1/webhooks",
        json={"url": "http://127.0.0.1:9/in", "events": ["campaign.completed"], "secret": "s" * 16},
        headers=headers,
    )
    assert webhook.status_code == 201, webhook.get_data(as_text=True)
    campaign_id = created(
        client, headers, number_id, numbers(2), maxConcurrentCalls=2, name="Follow-ups"
    )
    sweep()
    first, second = claim(client, runtime_headers)
    answered(client, runtime_headers, first["id"])
    assert Campaign.get_by_id(campaign_id).status == "running"
    unanswered(client, runtime_headers, second["id"], "voicemail")
    campaign = Campaign.get_by_id(campaign_id)
    assert campaign.status == "completed" and campaign.completed_at is not None
    (event,) = Event.select().where(Event.type == "campaign.completed")
    assert event.data == {
        "campaignId": campaign_id,
        "name": "Follow-ups",
        "counts": {"total": 2, "pending": 0, "inProgress": 0, "completed": 1, "failed": 1},
        "completedAt": event.data["completedAt"],
    }
    assert event.deliveries.count() == 1
    assert sweep() == 0
    (shown,) = client.get("/api/v1/events?types=campaign.completed", headers=headers).json["events"]
    assert shown["data"] == event.data
    assert_valid(document(client), shown)


def test_a_paused_campaign_places_nothing_until_resumed(
    client, headers, runtime_headers, number_id
):
    campaign_id = created(client, headers, number_id, numbers(3))
    sweep()
    client.post(f"/api/v1/campaigns/{campaign_id}/pause", headers=headers)
    (call,) = claim(client, runtime_headers)  # its queued call goes on
    answered(client, runtime_headers, call["id"])
    assert sweep() == 0
    client.post(f"/api/v1/campaigns/{campaign_id}/resume", headers=headers)
    assert sweep() == 1


def test_cancel_withdraws_queued_calls_and_lets_live_ones_end(
    client, headers, runtime_headers, number_id
):
    campaign_id = created(client, headers, number_id, numbers(5), maxConcurrentCalls=2)
    sweep()
    (live,) = claim(client, runtime_headers, 1)
    (waiting,) = queued(campaign_id)
    response = client.post(f"/api/v1/campaigns/{campaign_id}/cancel", headers=headers)
    assert response.status_code == 200
    assert response.json["status"] == "canceled"
    assert Call.get_by_id(waiting.id).status == "canceled"
    assert response.json["counts"] == {
        "total": 5,
        "pending": 4,
        "inProgress": 1,
        "completed": 0,
        "failed": 0,
        "awaitingPermission": 0,
    }
    answered(client, runtime_headers, live["id"])
    assert counts(campaign_id)["completed"] == 1
    assert Campaign.get_by_id(campaign_id).status == "canceled"
    assert sweep() == 0
    assert claim(client, runtime_headers) == []


def test_a_campaign_call_canceled_alone_fails_its_contact(
    client, headers, runtime_headers, number_id
):
    campaign_id = created(client, headers, number_id, numbers(2))
    sweep()
    (call,) = queued(campaign_id)
    client.post(f"/api/v1/calls/{call.id}/cancel", headers=headers)
    first = contacts(campaign_id)[0]
    assert (first.status, first.last_outcome) == ("failed", "canceled")
    assert sweep() == 1  # the next contact


def test_a_call_whose_runtime_was_lost_counts_as_failed(
    client, headers, runtime_headers, number_id
):
    campaign_id = created(client, headers, number_id, numbers(1))
    sweep()
    (call,) = claim(client, runtime_headers)
    Call.update(reservation_expires_at=utcnow() - timedelta(seconds=1)).where(
        Call.id == call["id"]
    ).execute()
    assert call_lifecycle.release_lapsed_holds() == 1
    (contact,) = contacts(campaign_id)
    assert (contact.status, contact.last_outcome) == ("failed", "failed")
    assert Campaign.get_by_id(campaign_id).status == "completed"
