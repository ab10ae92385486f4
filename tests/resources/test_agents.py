"""Agents: fields, defaults, validation, partial update and soft delete."""

import pytest

from app.models import Agent, Function, PhoneNumber
from app.services import phone_numbers as number_service
from app.util import new_id
from tests.helpers import ACTOR, assert_error

AGENT_FIELDS = {
    "id",
    "name",
    "systemPrompt",
    "voiceId",
    "greetingText",
    "language",
    "maxCallDurationMinutes",
    "toolsEnabled",
    "isActive",
    "escalationNumber",
    "analysisPlan",
    "version",
    "createdAt",
    "updatedAt",
}


def create(client, headers, **fields):
    body = {"name": "Reception", "systemPrompt": "Be helpful.", **fields}
    return client.post("/api/v1/agents", json=body, headers=headers)


def test_list_agents_is_wrapped_and_empty_at_first(client, headers):
    response = client.get("/api/v1/agents", headers=headers)
    assert response.status_code == 200
    assert response.json == {"agents": []}


def test_create_agent_applies_defaults(client, headers):
    response = create(client, headers)
    assert response.status_code == 201
    agent = response.json
    assert set(agent) == AGENT_FIELDS
    assert agent["id"].startswith("agent_") and len(agent["id"]) == 26
    assert agent["voiceId"] == "Puck"
    assert agent["greetingText"] == ""
    assert agent["language"] == "id"
    assert agent["maxCallDurationMinutes"] == 10
    assert agent["toolsEnabled"] == []
    assert agent["isActive"] is True
    assert agent["escalationNumber"] is None
    assert agent["createdAt"].endswith("Z") and len(agent["createdAt"]) == 24


def test_create_agent_keeps_every_given_field(client, headers):
    fields = {
        "voiceId": "Kore",
        "greetingText": "Halo!",
        "language": "en-US",
        "maxCallDurationMinutes": 30,
        "escalationNumber": "+6281234567890",
        "toolsEnabled": ["transfer_call", "lookup-order"],
        "isActive": False,
    }
    agent = create(client, headers, **fields).json
    for name, value in fields.items():
        assert agent[name] == value
    listed = client.get("/api/v1/agents", headers=headers).json["agents"]
    assert listed == [agent]


@pytest.mark.parametrize(
    ("fields", "bad_field"),
    [
        ({"voiceId": "Alloy"}, "voiceId"),
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"systemPrompt": ""}, "systemPrompt"),
        ({"systemPrompt": "x" * 20_001}, "systemPrompt"),
        ({"language": "indonesian"}, "language"),
        ({"maxCallDurationMinutes": 0}, "maxCallDurationMinutes"),
        ({"maxCallDurationMinutes": 121}, "maxCallDurationMinutes"),
        ({"maxCallDurationMinutes": "10"}, "maxCallDurationMinutes"),
        ({"maxCallDurationMinutes": 10.5}, "maxCallDurationMinutes"),
        ({"escalationNumber": "081234567"}, "escalationNumber"),
        ({"toolsEnabled": ["a", "a"]}, "toolsEnabled"),
        ({"toolsEnabled": ["has space"]}, "toolsEnabled"),
        ({"toolsEnabled": "transfer"}, "toolsEnabled"),
        ({"isActive": "yes"}, "isActive"),
        ({"name": 42}, "name"),
        ({"voice": "Puck"}, "voice"),
    ],
)
def test_create_agent_rejects_invalid_field(client, headers, fields, bad_field):
    error = assert_error(create(client, headers, **fields), 422, "validation_error")
    assert list(error["details"]) == [bad_field]
    assert bad_field in error["message"]


def test_create_agent_requires_name_and_prompt(client, headers):
    error = assert_error(
        client.post("/api/v1/agents", json={}, headers=headers), 422, "validation_error"
    )
    assert set(error["details"]) == {"name", "systemPrompt"}


def test_create_agent_without_body_is_validation_error(client, headers):
    error = assert_error(client.post("/api/v1/agents", headers=headers), 422, "validation_error")
    assert set(error["details"]) == {"name", "systemPrompt"}


def test_get_agent_returns_it(client, headers, agent_id):
    response = client.get(f"/api/v1/agents/{agent_id}", headers=headers)
    assert response.status_code == 200
    assert response.json["id"] == agent_id


def test_patch_agent_changes_only_given_fields(client, headers, agent_id):
    before = client.get(f"/api/v1/agents/{agent_id}", headers=headers).json
    response = client.patch(
        f"/api/v1/agents/{agent_id}",
        json={"voiceId": "Aoede", "isActive": False, "toolsEnabled": ["x"]},
        headers=headers,
    )
    assert response.status_code == 200
    after = response.json
    assert after["voiceId"] == "Aoede" and after["isActive"] is False
    assert after["toolsEnabled"] == ["x"]
    assert after["name"] == before["name"] and after["systemPrompt"] == before["systemPrompt"]
    assert after["updatedAt"] >= before["updatedAt"]


def test_patch_agent_clears_escalation_number_with_null(client, headers):
    agent = create(client, headers, escalationNumber="+6281234567").json
    response = client.patch(
        f"/api/v1/agents/{agent['id']}", json={"escalationNumber": None}, headers=headers
    )
    assert response.json["escalationNumber"] is None


def test_patch_agent_rejects_null_name_and_unknown_field(client, headers, agent_id):
    error = assert_error(
        client.patch(f"/api/v1/agents/{agent_id}", json={"name": None, "x": 1}, headers=headers),
        422,
        "validation_error",
    )
    assert set(error["details"]) == {"name", "x"}


def test_patch_unknown_agent_is_not_found(client, headers):
    response = client.patch(f"/api/v1/agents/{new_id('agent')}", json={}, headers=headers)
    assert_error(response, 404, "not_found")


def test_delete_agent_is_soft_and_unassigns_numbers(client, headers, tenant, agent_id):
    number = number_service.add_number(actor=ACTOR, tenant=tenant, display_number="+6221555011")
    number_service.assign_agent(actor=ACTOR, tenant=tenant, number_id=number.id, agent_id=agent_id)
    Function.create(
        id=new_id("fn"),
        tenant=tenant,
        agent=agent_id,
        name="lookup",
        endpoint="http://x",
        parameters={"type": "object", "properties": {}},
        signing_secret="s" * 16,
    )
    response = client.delete(f"/api/v1/agents/{agent_id}", headers=headers)
    assert response.status_code == 204 and response.data == b""
    assert client.get("/api/v1/agents", headers=headers).json == {"agents": []}
    assert_error(client.get(f"/api/v1/agents/{agent_id}", headers=headers), 404, "not_found")
    assert_error(client.delete(f"/api/v1/agents/{agent_id}", headers=headers), 404, "not_found")
    assert PhoneNumber.get_by_id(number.id).agent_id is None
    assert Function.select().where(Function.agent == agent_id).count() == 0
    assert Agent.get_by_id(agent_id).deleted_at is not None
