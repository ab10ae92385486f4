"""Outbound calls: POST /calls queues one, POST /calls/:id/cancel withdraws it, and the new
statuses in the list's filter and the document."""

import pytest

from app.models import AuditEntry, Call, Tenant
from app.services import billing
from app.services import phone_numbers as number_service
from tests.call_flow import start
from tests.helpers import ACTOR, assert_error

CALLEE = "+6281311112222"


def place(client, headers, **fields):
    return client.post("/api/v1/calls", json=fields, headers=headers)


@pytest.fixture
def number_id(did, tenant):
    (number,) = number_service.list_numbers(tenant=tenant)
    return number.id


def test_a_placed_call_is_queued_from_the_number_to_the_callee(
    client, headers, number_id, agent_id, did
):
    response = place(
        client,
        headers,
        phoneNumberId=number_id,
        to=CALLEE,
        variables={"name": "Budi"},
        metadata={"order": 7},
    )
    assert response.status_code == 201, response.get_data(as_text=True)
    call = response.json
    assert call["id"].startswith("call_")
    assert (call["status"], call["direction"]) == ("queued", "outbound")
    assert (call["callerNumber"], call["calleeNumber"]) == (did, CALLEE)
    assert (call["agentId"], call["phoneNumberId"]) == (agent_id, number_id)
    assert (call["variables"], call["metadata"]) == ({"name": "Budi"}, {"order": 7})
    assert (call["campaignId"], call["endedAt"], call["answeredAt"]) == (None, None, None)
    listed = client.get("/api/v1/calls?status=queued", headers=headers).json
    assert [each["id"] for each in listed["calls"]] == [call["id"]]
    assert listed["pagination"]["total"] == 1
    assert client.get("/api/v1/calls", headers=headers).json["pagination"]["total"] == 1


def test_placing_a_call_writes_its_audit_entry_with_the_key(client, headers, number_id):
    call_id = place(client, headers, phoneNumberId=number_id, to=CALLEE).json["id"]
    entry = AuditEntry.get(AuditEntry.target_id == call_id)
    assert (entry.action, entry.actor_type) == ("call.placed", "api_key")
    assert entry.actor_label.startswith("test (dkl_")


def test_a_call_takes_the_agent_it_names(client, headers, number_id):
    other = client.post(
        "/api/v1/agents", json={"name": "Sales", "systemPrompt": "Sell."}, headers=headers
    ).json["id"]
    call = place(client, headers, phoneNumberId=number_id, to=CALLEE, agentId=other).json
    assert call["agentId"] == other


def test_another_tenants_number_or_agent_is_not_found(
    client, headers, other_headers, number_id, agent_id
):
    assert_error(place(client, other_headers, phoneNumberId=number_id, to=CALLEE), 404, "not_found")
    theirs = client.post(
        "/api/v1/agents", json={"name": "Theirs", "systemPrompt": "x"}, headers=other_headers
    ).json["id"]
    response = place(client, headers, phoneNumberId=number_id, to=CALLEE, agentId=theirs)
    assert_error(response, 404, "not_found")
    assert Call.select().count() == 0


def test_a_number_without_an_agent_is_409_no_agent(client, headers, tenant):
    number = number_service.add_number(actor=ACTOR, tenant=tenant, display_number="+6221555999")
    billing.grant(actor=ACTOR, tenant=tenant, minutes=10)
    error = assert_error(
        place(client, headers, phoneNumberId=number.id, to=CALLEE), 409, "no_agent"
    )
    assert error["details"] == {"phoneNumberId": number.id}
    assert Call.select().count() == 0


def test_an_inactive_agent_places_no_call(client, headers, number_id, agent_id):
    client.patch(f"/api/v1/agents/{agent_id}", json={"isActive": False}, headers=headers)
    assert_error(place(client, headers, phoneNumberId=number_id, to=CALLEE), 409, "no_agent")


def test_no_available_credit_is_409_no_credits(client, headers, number_id, tenant):
    Tenant.update(balance_minutes=0).where(Tenant.id == tenant.id).execute()
    assert_error(place(client, headers, phoneNumberId=number_id, to=CALLEE), 409, "no_credits")
    assert Call.select().count() == 0


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"to": "081311112222"}, "to"),
        ({"to": None}, "to"),
        ({"variables": {"1bad": "x"}}, "variables"),
        ({"metadata": {"x": "y" * 17_000}}, "metadata"),
        ({"direction": "inbound"}, "direction"),
    ],
)
def test_a_bad_field_is_422_naming_it(client, headers, number_id, fields, field):
    body = {"phoneNumberId": number_id, "to": CALLEE, **fields}
    error = assert_error(
        client.post("/api/v1/calls", json=body, headers=headers), 422, "validation_error"
    )
    assert field in error["details"]


def test_a_queued_call_is_canceled_once(client, headers, number_id):
    call_id = place(client, headers, phoneNumberId=number_id, to=CALLEE).json["id"]
    response = client.post(f"/api/v1/calls/{call_id}/cancel", headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert (response.json["status"], response.json["hangupReason"]) == ("canceled", "canceled")
    assert response.json["endedAt"] is not None
    error = assert_error(
        client.post(f"/api/v1/calls/{call_id}/cancel", headers=headers), 409, "illegal_transition"
    )
    assert error["details"] == {"status": "canceled"}
    canceled = client.get("/api/v1/calls?status=canceled", headers=headers).json["calls"]
    assert [call["id"] for call in canceled] == [call_id]
    assert AuditEntry.get(AuditEntry.action == "call.canceled").target_id == call_id


def test_only_a_queued_call_can_be_canceled(client, headers, runtime_headers, did):
    call_id = start(client, runtime_headers, did).json["id"]
    error = assert_error(
        client.post(f"/api/v1/calls/{call_id}/cancel", headers=headers), 409, "illegal_transition"
    )
    assert error["details"] == {"status": "ringing"}


def test_another_tenants_call_cannot_be_canceled(client, headers, other_headers, number_id):
    call_id = place(client, headers, phoneNumberId=number_id, to=CALLEE).json["id"]
    assert_error(
        client.post(f"/api/v1/calls/{call_id}/cancel", headers=other_headers), 404, "not_found"
    )
    assert Call.get_by_id(call_id).status == "queued"


def test_the_document_lists_the_new_statuses(client):
    spec = client.get("/api/v1/openapi.json").json
    statuses = ["queued", "ringing", "answered", "ended", "dropped", "failed", "canceled"]
    assert spec["components"]["schemas"]["Call"]["properties"]["status"]["enum"] == statuses
    (status,) = [
        parameter
        for parameter in spec["paths"]["/api/v1/calls"]["get"]["parameters"]
        if parameter["name"] == "status"
    ]
    assert status["schema"]["enum"] == statuses
    assert "placeCall" == spec["paths"]["/api/v1/calls"]["post"]["operationId"]
