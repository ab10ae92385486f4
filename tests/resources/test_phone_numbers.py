"""Phone numbers: listing and assigning agents."""

import pytest

from app.services import phone_numbers as number_service
from tests.helpers import ACTOR, assert_error


@pytest.fixture
def number(tenant):
    return number_service.add_number(
        actor=ACTOR, tenant=tenant, display_number="+6221555010", label="Main"
    )


def assign(client, headers, number_id, agent_id):
    return client.post(
        f"/api/v1/phone-numbers/{number_id}/assign-agent",
        json={"agentId": agent_id},
        headers=headers,
    )


def test_list_phone_numbers_shows_spec_fields(client, headers, number):
    response = client.get("/api/v1/phone-numbers", headers=headers)
    assert response.status_code == 200
    [item] = response.json["phoneNumbers"]
    assert item["id"] == number.id and item["id"].startswith("pn_")
    assert item["displayNumber"] == "+6221555010"
    assert item["label"] == "Main"
    assert item["isActive"] is True
    assert item["agentId"] is None


def test_list_phone_numbers_hides_other_tenants(client, other_headers, number):
    assert client.get("/api/v1/phone-numbers", headers=other_headers).json == {"phoneNumbers": []}


def test_assign_agent_sets_and_null_unassigns(client, headers, number, agent_id):
    response = assign(client, headers, number.id, agent_id)
    assert response.status_code == 200
    assert response.json["agentId"] == agent_id
    response = assign(client, headers, number.id, None)
    assert response.status_code == 200 and response.json["agentId"] is None


def test_assign_agent_requires_agent_id(client, headers, number):
    response = client.post(
        f"/api/v1/phone-numbers/{number.id}/assign-agent", json={}, headers=headers
    )
    error = assert_error(response, 422, "validation_error")
    assert list(error["details"]) == ["agentId"]


def test_assign_unknown_agent_is_not_found(client, headers, number):
    assert_error(assign(client, headers, number.id, "agent_nope"), 404, "not_found")


def test_assign_deleted_agent_is_not_found(client, headers, number, agent_id):
    client.delete(f"/api/v1/agents/{agent_id}", headers=headers)
    assert_error(assign(client, headers, number.id, agent_id), 404, "not_found")


def test_assign_other_tenants_agent_is_not_found(client, other_headers, headers, number):
    other_agent = client.post(
        "/api/v1/agents", json={"name": "B", "systemPrompt": "x"}, headers=other_headers
    ).json["id"]
    assert_error(assign(client, headers, number.id, other_agent), 404, "not_found")


def test_assign_on_other_tenants_number_is_not_found(client, other_headers, number):
    assert_error(assign(client, other_headers, number.id, None), 404, "not_found")
