"""Caps per tenant (DESIGN.md section 15): past a cap, 409 limit_reached naming it; another
tenant, deleted agents, revoked keys do not count."""

import pytest

from app.models import Webhook
from app.services import keys as key_service
from app.services import limits
from app.services import users as user_service
from tests.helpers import ACTOR, assert_error

AGENT = {"name": "Reception", "systemPrompt": "Be helpful."}
SECRET = "whsec_" + "s" * 32


def webhook(url="https://hooks.example.com/in"):
    return {"url": url, "events": ["call.ended"], "secret": SECRET}


def function(name):
    return {
        "name": name,
        "description": "Look it up.",
        "endpoint": "https://crm.example.com/f",
        "parameters": {"type": "object", "properties": {}, "required": []},
    }


@pytest.fixture
def small_caps(app):
    for setting in ("WEBHOOKS", "AGENTS", "ACTIVE_KEYS", "USERS"):
        app.config[f"MAX_{setting}_PER_TENANT"] = 2
    app.config["MAX_FUNCTIONS_PER_AGENT"] = 2


def test_the_defaults_are_the_documented_caps(app):
    with app.app_context():
        assert {name: limits.cap(name) for name in limits.CAPS} == {
            "webhooks": 50,
            "agents": 1000,
            "functions": 64,
            "apiKeys": 100,
            "users": 20,
            "campaigns": 50,
            "whatsappAccounts": 5,
        }
    assert app.config["MAX_CONTACTS_PER_CAMPAIGN"] == 10_000


def test_webhooks_past_the_cap_are_409_limit_reached(small_caps, client, headers, other_headers):
    for _ in range(2):
        assert client.post("/api/v1/webhooks", json=webhook(), headers=headers).status_code == 201
    response = client.post("/api/v1/webhooks", json=webhook(), headers=headers)
    error = assert_error(response, 409, "limit_reached")
    assert error["details"] == {"limit": "webhooks", "max": 2, "current": 2}
    assert "the most it may have is 2" in error["message"]
    assert Webhook.select().count() == 2
    # Another tenant has caps of its own.
    assert client.post("/api/v1/webhooks", json=webhook(), headers=other_headers).status_code == 201


def test_agents_past_the_cap_and_a_deleted_agent_frees_its_place(small_caps, client, headers):
    ids = [client.post("/api/v1/agents", json=AGENT, headers=headers).json["id"] for _ in range(2)]
    response = client.post("/api/v1/agents", json=AGENT, headers=headers)
    assert assert_error(response, 409, "limit_reached")["details"]["limit"] == "agents"
    assert client.delete(f"/api/v1/agents/{ids[0]}", headers=headers).status_code == 204
    assert client.post("/api/v1/agents", json=AGENT, headers=headers).status_code == 201


def test_functions_are_capped_per_agent(small_caps, client, headers):
    first, second = (
        client.post("/api/v1/agents", json=AGENT, headers=headers).json["id"] for _ in range(2)
    )
    for name in ("a", "b"):
        path = f"/api/v1/agents/{first}/functions"
        assert client.post(path, json=function(name), headers=headers).status_code == 201
    response = client.post(f"/api/v1/agents/{first}/functions", json=function("c"), headers=headers)
    assert assert_error(response, 409, "limit_reached")["details"]["limit"] == "functions"
    path = f"/api/v1/agents/{second}/functions"
    assert client.post(path, json=function("c"), headers=headers).status_code == 201


def test_a_deleted_function_frees_its_place(small_caps, client, headers):
    """A deleted function keeps its row for its agent's versions, but not its place."""
    agent_id = client.post("/api/v1/agents", json=AGENT, headers=headers).json["id"]
    path = f"/api/v1/agents/{agent_id}/functions"
    for name in ("a", "b"):
        assert client.post(path, json=function(name), headers=headers).status_code == 201
    assert client.delete(f"{path}/a", headers=headers).status_code == 204
    assert client.post(path, json=function("c"), headers=headers).status_code == 201


def test_active_keys_are_capped_and_a_revoked_key_frees_its_place(small_caps, app, tenant):
    with app.app_context():
        first, _ = key_service.create_key(actor=ACTOR, tenant=tenant, name="one")
        key_service.create_key(actor=ACTOR, tenant=tenant, name="two")
        with pytest.raises(limits.LimitReached) as refused:
            key_service.create_key(actor=ACTOR, tenant=tenant, name="three")
        assert refused.value.details["limit"] == "apiKeys"
        key_service.revoke_key(actor=ACTOR, key_id=first.id)
        key_service.create_key(actor=ACTOR, tenant=tenant, name="three")


def test_the_cli_says_a_cap_is_reached_in_one_line(small_caps, app, runner, tenant):
    with app.app_context():
        for number in range(2):
            user_service.create_user(
                actor=ACTOR,
                tenant=tenant,
                email=f"u{number}@acme.test",
                password="a long password",
                role="viewer",
            )
    result = runner.invoke(
        args=["users", "create", "--tenant", tenant.id, "--email", "u9@acme.test",
              "--role", "viewer", "--password-stdin"],
        input="a long password\n",
    )  # fmt: skip
    assert result.exit_code != 0
    assert "the most it may have is 2" in result.output and "Traceback" not in result.output
