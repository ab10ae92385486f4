"""Campaigns through the API: create (with every rule of its body), read, per-contact
results, pause, resume and cancel, another tenant's ids, and the audit entries."""

import pytest

from app.models import AuditEntry, Campaign, CampaignContact, Event, Tenant
from app.services import phone_numbers as number_service
from tests.campaigns import CAMPAIGNS, answered, claim, create, created, numbers, sweep, unanswered
from tests.helpers import ACTOR, assert_error

CAMPAIGN_FIELDS = [
    "id",
    "name",
    "status",
    "phoneNumberId",
    "agentId",
    "maxConcurrentCalls",
    "schedule",
    "retry",
    "whatsapp",
    "permissionWaitHours",
    "counts",
    "createdAt",
    "updatedAt",
    "completedAt",
]


@pytest.fixture
def number_id(did, tenant):
    (number,) = number_service.list_numbers(tenant=tenant)
    return number.id


def test_a_new_campaign_is_running_with_every_contact_pending(client, headers, number_id, agent_id):
    schedule = {
        "timezone": "Asia/Jakarta",
        "days": ["mon", "tue"],
        "start": "09:00",
        "end": "17:00",
    }
    response = create(
        client,
        headers,
        number_id,
        [{"to": numbers(1)[0], "variables": {"name": "Budi"}}, numbers(2)[1]],
        name="Reminders",
        maxConcurrentCalls=2,
        schedule=schedule,
        retry={"maxAttempts": 3, "delayMinutes": 30},
    )
    assert response.status_code == 201, response.get_data(as_text=True)
    campaign = response.json
    assert list(campaign) == CAMPAIGN_FIELDS
    assert campaign["id"].startswith("cmp_")
    assert (campaign["name"], campaign["status"], campaign["maxConcurrentCalls"]) == (
        "Reminders",
        "running",
        2,
    )
    assert (campaign["phoneNumberId"], campaign["agentId"]) == (number_id, agent_id)
    assert campaign["schedule"] == schedule
    assert campaign["retry"] == {"maxAttempts": 3, "delayMinutes": 30, "on": ["no_answer", "busy"]}
    assert campaign["counts"] == {
        "total": 2,
        "pending": 2,
        "inProgress": 0,
        "completed": 0,
        "failed": 0,
        "awaitingPermission": 0,
    }
    assert (campaign["whatsapp"], campaign["permissionWaitHours"]) == (None, 24)
    assert campaign["completedAt"] is None
    assert client.get(f"{CAMPAIGNS}/{campaign['id']}", headers=headers).json == campaign
    listed = client.get(CAMPAIGNS, headers=headers).json
    assert [each["id"] for each in listed["campaigns"]] == [campaign["id"]]
    assert listed["pagination"] == {"total": 1, "limit": 50, "offset": 0, "hasMore": False}
    entry = AuditEntry.get(AuditEntry.action == "campaign.created")
    assert (entry.target_id, entry.details) == (campaign["id"], {"contacts": 2})


def test_defaults_are_one_call_at_a_time_any_time_and_no_retry(client, headers, number_id):
    campaign = create(client, headers, number_id, numbers(1)).json
    assert (campaign["maxConcurrentCalls"], campaign["schedule"]) == (1, None)
    assert campaign["retry"] == {"maxAttempts": 1, "delayMinutes": 60, "on": ["no_answer", "busy"]}


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"contacts": []}, "contacts"),
        ({"contacts": [{"to": "0813"}]}, "contacts"),
        ({"contacts": [{"to": "+6281300000001", "variables": {"9x": "y"}}]}, "contacts"),
        ({"name": ""}, "name"),
        ({"maxConcurrentCalls": 0}, "maxConcurrentCalls"),
        ({"schedule": {"timezone": "Mars/Olympus", "start": "09:00", "end": "17:00"}}, "schedule"),
        ({"schedule": {"timezone": "UTC", "start": "17:00", "end": "09:00"}}, "schedule"),
        ({"schedule": {"timezone": "UTC", "start": "9:00", "end": "17:00"}}, "schedule"),
        (
            {
                "schedule": {
                    "timezone": "UTC",
                    "days": ["mon", "mon"],
                    "start": "09:00",
                    "end": "10:00",
                }
            },
            "schedule",
        ),
        (
            {"schedule": {"timezone": "UTC", "days": ["monday"], "start": "09:00", "end": "10:00"}},
            "schedule",
        ),
        ({"retry": {"maxAttempts": 6}}, "retry"),
        ({"retry": {"delayMinutes": 0}}, "retry"),
        ({"retry": {"on": ["hung_up"]}}, "retry"),
        ({"status": "paused"}, "status"),
    ],
)
def test_a_bad_field_is_422_naming_it(client, headers, number_id, fields, field):
    body = {"name": "x", "phoneNumberId": number_id, "contacts": [{"to": numbers(1)[0]}], **fields}
    error = assert_error(
        client.post(CAMPAIGNS, json=body, headers=headers), 422, "validation_error"
    )
    assert field in error["details"]
    assert Campaign.select().count() == 0


@pytest.mark.parametrize("zone", ["localtime", "Factory", "posixrules", "asia/jakarta", ""])
def test_a_timezone_that_is_no_iana_zone_name_is_422_naming_it(client, headers, number_id, zone):
    """Only a place's IANA name (or UTC): not the host's own zone file (localtime), nor the
    placeholder for an unset zone (Factory), nor the rules template (posixrules)."""
    schedule = {"timezone": zone, "start": "09:00", "end": "17:00"}
    error = assert_error(
        create(client, headers, number_id, numbers(1), schedule=schedule), 422, "validation_error"
    )
    assert error["details"] == {
        "schedule": {"timezone": ["Must be an IANA time zone such as Asia/Jakarta."]}
    }
    assert Campaign.select().count() == 0


@pytest.mark.parametrize("zone", ["UTC", "Asia/Jakarta", "America/Argentina/Buenos_Aires"])
def test_an_iana_zone_name_is_taken(client, headers, number_id, zone):
    schedule = {"timezone": zone, "start": "09:00", "end": "17:00"}
    response = create(client, headers, number_id, numbers(1), schedule=schedule)
    assert response.status_code == 201, response.get_data(as_text=True)
    assert response.json["schedule"]["timezone"] == zone


def test_more_contacts_than_the_cap_is_409_limit_reached(app, client, headers, number_id):
    app.config["MAX_CONTACTS_PER_CAMPAIGN"] = 3
    error = assert_error(create(client, headers, number_id, numbers(4)), 409, "limit_reached")
    assert error["details"] == {"limit": "contactsPerCampaign", "max": 3, "current": 4}
    assert create(client, headers, number_id, numbers(3)).status_code == 201


def test_more_running_or_paused_campaigns_than_the_cap_is_409_limit_reached(
    app, client, headers, number_id
):
    app.config["MAX_CAMPAIGNS_PER_TENANT"] = 2
    first = created(client, headers, number_id, numbers(1))
    second = created(client, headers, number_id, numbers(1))
    assert client.post(f"{CAMPAIGNS}/{second}/pause", headers=headers).status_code == 200
    error = assert_error(create(client, headers, number_id, numbers(1)), 409, "limit_reached")
    assert error["details"] == {"limit": "campaigns", "max": 2, "current": 2}
    assert "running or paused campaigns, the most it may have is 2" in error["message"]
    assert Campaign.select().count() == 2
    # A paused one may run again; a canceled one frees its place.
    assert client.post(f"{CAMPAIGNS}/{second}/resume", headers=headers).status_code == 200
    assert client.post(f"{CAMPAIGNS}/{first}/cancel", headers=headers).status_code == 200
    assert create(client, headers, number_id, numbers(1)).status_code == 201


def test_ten_thousand_contacts_are_taken_in_one_request(client, headers, number_id):
    response = create(client, headers, number_id, numbers(10_000))
    assert response.status_code == 201, response.get_data(as_text=True)
    assert response.json["counts"]["total"] == 10_000
    assert CampaignContact.select().count() == 10_000


def test_a_number_without_an_agent_is_409_no_agent(client, headers, tenant, did):
    number = number_service.add_number(actor=ACTOR, tenant=tenant, display_number="+6221555998")
    assert_error(create(client, headers, number.id, numbers(1)), 409, "no_agent")


def test_no_available_credit_is_409_no_credits(client, headers, number_id, tenant):
    Tenant.update(balance_minutes=0).where(Tenant.id == tenant.id).execute()
    assert_error(create(client, headers, number_id, numbers(1)), 409, "no_credits")


def test_another_tenants_campaign_is_not_found(client, headers, other_headers, number_id):
    campaign_id = created(client, headers, number_id, numbers(1))
    for path in ("", "/contacts"):
        response = client.get(f"{CAMPAIGNS}/{campaign_id}{path}", headers=other_headers)
        assert_error(response, 404, "not_found")
    for action in ("pause", "resume", "cancel"):
        response = client.post(f"{CAMPAIGNS}/{campaign_id}/{action}", headers=other_headers)
        assert_error(response, 404, "not_found")
    assert client.get(CAMPAIGNS, headers=other_headers).json["campaigns"] == []
    assert_error(create(client, other_headers, number_id, numbers(1)), 404, "not_found")
    assert Campaign.get_by_id(campaign_id).status == "running"


def test_contacts_show_their_status_attempts_and_calls(client, headers, runtime_headers, number_id):
    people = [{"to": numbers(1)[0], "variables": {"name": "Ani"}}, numbers(3)[1], numbers(3)[2]]
    campaign_id = created(
        client, headers, number_id, people, maxConcurrentCalls=2, retry={"maxAttempts": 1}
    )
    sweep()
    first, second = claim(client, runtime_headers)
    answered(client, runtime_headers, first["id"])
    unanswered(client, runtime_headers, second["id"], "busy")
    body = client.get(f"{CAMPAIGNS}/{campaign_id}/contacts", headers=headers).json
    assert body["pagination"] == {"total": 3, "limit": 50, "offset": 0, "hasMore": False}
    one, two, three = body["contacts"]
    assert list(one) == [
        "id",
        "seq",
        "to",
        "variables",
        "status",
        "attempts",
        "lastOutcome",
        "nextAttemptAt",
        "awaitingSince",
        "permissionRequestedAt",
        "callIds",
    ]
    assert (one["seq"], one["to"], one["variables"], one["status"], one["attempts"]) == (
        1,
        numbers(1)[0],
        {"name": "Ani"},
        "completed",
        1,
    )
    assert (one["lastOutcome"], one["callIds"]) == ("completed", [first["id"]])
    assert (two["status"], two["lastOutcome"], two["callIds"]) == ("failed", "busy", [second["id"]])
    assert (three["status"], three["attempts"], three["callIds"]) == ("pending", 0, [])
    assert three["nextAttemptAt"] is not None
    failed = client.get(f"{CAMPAIGNS}/{campaign_id}/contacts?status=failed", headers=headers).json
    assert [contact["seq"] for contact in failed["contacts"]] == [2]
    response = client.get(f"{CAMPAIGNS}/{campaign_id}/contacts?status=lost", headers=headers)
    assert_error(response, 422, "validation_error")
    call = client.get(f"/api/v1/calls/{first['id']}", headers=headers).json
    assert call["campaignId"] == campaign_id


def test_pause_resume_and_cancel_move_the_campaign_once(client, headers, number_id):
    campaign_id = created(client, headers, number_id, numbers(2))
    path = f"{CAMPAIGNS}/{campaign_id}"
    assert client.post(f"{path}/pause", headers=headers).json["status"] == "paused"
    assert client.post(f"{path}/pause", headers=headers).json["status"] == "paused"  # a repeat
    assert client.post(f"{path}/resume", headers=headers).json["status"] == "running"
    assert client.post(f"{path}/cancel", headers=headers).json["status"] == "canceled"
    error = assert_error(client.post(f"{path}/resume", headers=headers), 409, "illegal_transition")
    assert error["details"] == {"status": "canceled"}
    assert_error(client.post(f"{path}/pause", headers=headers), 409, "illegal_transition")
    actions = [
        entry.action
        for entry in AuditEntry.select()
        .where(AuditEntry.target_id == campaign_id)
        .order_by(AuditEntry.created_at, AuditEntry.id)
    ]
    assert sorted(actions) == sorted(
        ["campaign.created", "campaign.paused", "campaign.resumed", "campaign.canceled"]
    )


def test_a_completed_campaign_cannot_be_paused(client, headers, runtime_headers, number_id):
    campaign_id = created(client, headers, number_id, numbers(1))
    sweep()
    (call,) = claim(client, runtime_headers)
    answered(client, runtime_headers, call["id"])
    campaign = client.get(f"{CAMPAIGNS}/{campaign_id}", headers=headers).json
    assert (campaign["status"], campaign["counts"]["completed"]) == ("completed", 1)
    assert campaign["completedAt"] is not None
    response = client.post(f"{CAMPAIGNS}/{campaign_id}/pause", headers=headers)
    assert_error(response, 409, "illegal_transition")


def test_a_webhook_may_subscribe_to_campaign_completed(client, headers):
    response = client.post(
        "/api/v1/webhooks",
        json={
            "url": "http://127.0.0.1:9/in",
            "events": ["campaign.completed"],
            "secret": "s" * 16,
        },
        headers=headers,
    )
    assert response.status_code == 201, response.get_data(as_text=True)
    assert response.json["events"] == ["campaign.completed"]


def test_a_campaign_calls_end_names_its_agent_direction_and_campaign(
    client, headers, runtime_headers, number_id, agent_id
):
    campaign_id = created(client, headers, number_id, numbers(1))
    sweep()
    (call,) = claim(client, runtime_headers)
    answered(client, runtime_headers, call["id"])
    ended = Event.get(Event.type == "call.ended").data
    assert (ended["agentId"], ended["direction"], ended["campaignId"]) == (
        agent_id,
        "outbound",
        campaign_id,
    )
    assert ended["agentVersion"] == 1
