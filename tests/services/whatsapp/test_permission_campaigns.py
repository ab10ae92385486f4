"""Campaigns on WhatsApp numbers: contacts without call permission await it (no attempt used),
are asked once, are called when a grant arrives and end no_permission when none does."""

from datetime import timedelta

import pytest

from app.models import Call, Campaign, CampaignContact
from app.services import billing, campaign_permissions
from app.util import utcnow
from tests.campaigns import answered, claim, contacts, counts, create, created, sweep
from tests.helpers import ACTOR, assert_error
from tests.whatsapp import permission_reply, whatsapp_number

HAS_PERMISSION, GRANTED_LATER, NEVER_ANSWERS = "+6281200000001", "+6281200000002", "+6281200000003"
EVENTS = "/internal/v1/whatsapp/events"


@pytest.fixture
def number(tenant, agent_id):
    billing.grant(actor=ACTOR, tenant=tenant, minutes=100)
    return whatsapp_number(tenant, agent_id=agent_id)


def statuses(campaign_id) -> dict[str, str]:
    return {contact.to_number: contact.status for contact in contacts(campaign_id)}


def graph_requests(fake_graph) -> list[str]:
    return [f"{request.method} {request.path}" for request in fake_graph.requests]


def show(step, campaign_id, fake_graph, shown=[0]):  # noqa: B006 - the requests printed so far
    """The campaign's permission flow at a step, printed for the record (pytest -s): each
    contact's status, the counts, and the Graph requests made since the last step."""
    print(f"\n{step}")
    for contact in contacts(campaign_id):
        print(f"  {contact.to_number}: {contact.status} (attempts {contact.attempts})")
    print(f"  counts: {counts(campaign_id)}")
    made = graph_requests(fake_graph)
    for line in made[shown[0] :] if len(made) >= shown[0] else made:
        print(f"  graph: {line}")
    shown[0] = len(made)


def test_a_campaign_waits_for_asks_and_calls_with_permission(
    client, headers, runtime_headers, number, fake_graph
):
    meta_id = number.whatsapp_phone_number_id
    fake_graph.grant(meta_id, HAS_PERMISSION, "permanent")
    campaign_id = created(
        client,
        headers,
        number.id,
        [HAS_PERMISSION, GRANTED_LATER, NEVER_ANSWERS],
        maxConcurrentCalls=3,
        whatsapp={"requestPermission": True},
        permissionWaitHours=2,
    )
    show("created", campaign_id, fake_graph)

    # First sweep: none has a stored grant, so all await permission; the jobs after the
    # sweep's commit find the first one's grant (due at once) and ask the two others once.
    assert sweep() == 0
    show("after the first sweep", campaign_id, fake_graph)
    assert statuses(campaign_id) == {
        HAS_PERMISSION: "pending",
        GRANTED_LATER: "awaiting_permission",
        NEVER_ANSWERS: "awaiting_permission",
    }
    assert [message["to"] for message in fake_graph.messages] == [
        GRANTED_LATER.lstrip("+"),
        NEVER_ANSWERS.lstrip("+"),
    ]
    assert {message["interactive"]["type"] for message in fake_graph.messages} == {
        "call_permission_request"
    }
    assert all(contact.attempts == 0 for contact in contacts(campaign_id))
    assert counts(campaign_id)["awaiting_permission"] == 2

    # Second sweep: the one with permission is called; the others are not asked again.
    assert sweep() == 1
    show("after the second sweep", campaign_id, fake_graph)
    (call,) = claim(client, runtime_headers)
    assert call["calleeNumber"] == HAS_PERMISSION
    answered(client, runtime_headers, call["id"])
    assert len(fake_graph.messages) == 2

    # The user accepts: the runtime forwards the reply; the contact is due and called.
    reply = permission_reply(
        meta_id, GRANTED_LATER, is_permanent=False, expiration_timestamp=1_900_000_000
    )
    response = client.post(EVENTS, json={"values": [reply]}, headers=runtime_headers)
    assert response.status_code == 202, response.get_data(as_text=True)
    assert response.json == {"accepted": 1}
    show("after the forwarded reply", campaign_id, fake_graph)
    assert statuses(campaign_id)[GRANTED_LATER] == "pending"
    assert sweep() == 1
    (call,) = claim(client, runtime_headers)
    assert call["calleeNumber"] == GRANTED_LATER
    answered(client, runtime_headers, call["id"])
    show("after the granted contact's call", campaign_id, fake_graph)
    assert len(fake_graph.messages) == 2  # still one request per waiting contact

    # The last one never answers: past permissionWaitHours it ends no_permission.
    assert sweep() == 0
    assert statuses(campaign_id)[NEVER_ANSWERS] == "awaiting_permission"
    waiting = CampaignContact.get(CampaignContact.to_number == NEVER_ANSWERS)
    CampaignContact.update(
        awaiting_since=waiting.awaiting_since - timedelta(hours=2, seconds=1)
    ).where(CampaignContact.id == waiting.id).execute()
    assert sweep() == 0
    show("after the wait ran out", campaign_id, fake_graph)
    last = CampaignContact.get(CampaignContact.to_number == NEVER_ANSWERS)
    assert (last.status, last.last_outcome, last.attempts) == ("failed", "no_permission", 0)
    assert counts(campaign_id) == {
        "total": 3,
        "pending": 0,
        "in_progress": 0,
        "completed": 2,
        "failed": 1,
        "awaiting_permission": 0,
    }
    assert Campaign.get_by_id(campaign_id).status == "completed"
    assert Call.select().where(Call.callee_number == NEVER_ANSWERS).count() == 0
    assert len(fake_graph.messages) == 2


def test_the_campaign_shows_its_permission_settings_and_waiting_contacts(
    client, headers, number, fake_graph
):
    template = {"name": "izin_telepon", "language": "id"}
    campaign_id = created(
        client,
        headers,
        number.id,
        [GRANTED_LATER],
        whatsapp={"requestPermission": True, "template": template},
    )
    sweep()
    body = client.get(f"/api/v1/campaigns/{campaign_id}", headers=headers).json
    assert body["whatsapp"] == {"requestPermission": True, "template": template}
    assert body["permissionWaitHours"] == 24
    assert body["counts"]["awaitingPermission"] == 1
    (message,) = fake_graph.messages
    assert message["template"] == {"name": "izin_telepon", "language": {"code": "id"}}
    listed = client.get(
        f"/api/v1/campaigns/{campaign_id}/contacts?status=awaiting_permission", headers=headers
    ).json["contacts"]
    assert [contact["to"] for contact in listed] == [GRANTED_LATER]
    assert listed[0]["awaitingSince"] is not None
    assert listed[0]["permissionRequestedAt"] is not None


def test_without_request_permission_no_request_is_sent(client, headers, number, fake_graph):
    campaign_id = created(client, headers, number.id, [GRANTED_LATER])
    sweep()
    sweep()
    assert statuses(campaign_id) == {GRANTED_LATER: "awaiting_permission"}
    assert fake_graph.messages == []
    assert graph_requests(fake_graph) == [
        f"GET /v23.0/{number.whatsapp_phone_number_id}/call_permissions?user_wa_id="
        + GRANTED_LATER.lstrip("+")
    ]


def test_a_recheck_through_the_api_makes_a_waiting_contact_due(client, headers, number, fake_graph):
    campaign_id = created(client, headers, number.id, [GRANTED_LATER])
    sweep()
    fake_graph.grant(number.whatsapp_phone_number_id, GRANTED_LATER, "permanent")
    response = client.get(
        f"/api/v1/phone-numbers/{number.id}/call-permissions",
        query_string={"to": GRANTED_LATER},
        headers=headers,
    )
    assert response.json["status"] == "permanent"
    assert statuses(campaign_id) == {GRANTED_LATER: "pending"}
    assert sweep() == 1


def test_whatsapp_settings_on_a_phone_number_are_422(client, headers, did, tenant):
    from app.services import phone_numbers as number_service

    (phone,) = number_service.list_numbers(tenant=tenant)
    response = create(
        client, headers, phone.id, [GRANTED_LATER], whatsapp={"requestPermission": True}
    )
    error = assert_error(response, 422, "validation_error")
    assert list(error["details"]) == ["whatsapp"]


@pytest.mark.parametrize("hours", [0, 169, "24"])
def test_permission_wait_hours_out_of_range_are_422(client, headers, number, hours):
    response = create(client, headers, number.id, [GRANTED_LATER], permissionWaitHours=hours)
    error = assert_error(response, 422, "validation_error")
    assert list(error["details"]) == ["permissionWaitHours"]


def test_one_sweep_marks_every_due_contact_without_permission_whatever_the_room(
    client, headers, number, fake_graph
):
    everyone = [HAS_PERMISSION, GRANTED_LATER, NEVER_ANSWERS]
    campaign_id = created(client, headers, number.id, everyone, maxConcurrentCalls=1)
    assert sweep() == 0
    assert set(statuses(campaign_id).values()) == {"awaiting_permission"}
    assert counts(campaign_id)["pending"] == 0


def test_a_waiting_contact_is_asked_about_again_after_the_recheck_interval(
    client, headers, number, fake_graph
):
    campaign_id = created(client, headers, number.id, [GRANTED_LATER])
    sweep()
    checks = len(fake_graph.requests)
    fake_graph.grant(number.whatsapp_phone_number_id, GRANTED_LATER, "permanent")
    assert sweep() == 0  # not yet: the user's reply usually comes first
    assert len(fake_graph.requests) == checks
    later = utcnow() + timedelta(minutes=campaign_permissions.PERMISSION_RECHECK_MINUTES + 1)
    assert sweep(later) == 1  # asked again, granted, due and placed in the same sweep
    assert statuses(campaign_id) == {GRANTED_LATER: "in_progress"}


def test_a_request_meta_could_not_take_is_sent_at_the_next_recheck(
    client, headers, number, fake_graph
):
    campaign_id = created(
        client, headers, number.id, [GRANTED_LATER], whatsapp={"requestPermission": True}
    )
    fake_graph.fail["messages"] = "server"
    sweep()
    (contact,) = contacts(campaign_id)
    assert contact.permission_requested_at is None
    fake_graph.fail.clear()
    later = utcnow() + timedelta(minutes=campaign_permissions.PERMISSION_RECHECK_MINUTES + 1)
    sweep(later)
    sweep(later + timedelta(minutes=campaign_permissions.PERMISSION_RECHECK_MINUTES + 1))
    assert [message["to"] for message in fake_graph.messages] == [GRANTED_LATER.lstrip("+")]
    (contact,) = contacts(campaign_id)
    assert contact.permission_requested_at is not None


def test_a_request_over_metas_limit_is_not_sent_again(client, headers, number, fake_graph):
    campaign_id = created(
        client, headers, number.id, [GRANTED_LATER], whatsapp={"requestPermission": True}
    )
    fake_graph.fail["messages"] = "request_limit"
    sweep()
    fake_graph.fail.clear()
    later = utcnow() + timedelta(minutes=campaign_permissions.PERMISSION_RECHECK_MINUTES + 1)
    sweep(later)
    assert fake_graph.messages == []
    assert statuses(campaign_id) == {GRANTED_LATER: "awaiting_permission"}
