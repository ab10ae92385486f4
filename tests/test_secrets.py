"""Secrets never leak: API keys, webhook secrets, function signing secrets and WhatsApp
Business access tokens and app secrets stay out of the logs (both formats), list and error
responses and the OpenAPI document; keys are stored hashed.
"""

import hashlib
import json
import logging
import re

import pytest

from app.logs import JsonFormatter, TextFormatter
from app.models import ApiKey
from tests.call_flow import RUNTIME, start
from tests.fake_graph import number

WEBHOOK_SECRET = "whsec-never-shown-0123456789"
FUNCTION_SECRET = "fsec-never-shown-0123456789"
WHATSAPP_TOKEN = "EAAG-whatsapp-token-never-shown-0123"
WHATSAPP_APP_SECRET = "whatsapp-app-secret-never-shown-0123"
KEY_SHAPE = re.compile(r"dkl_[A-Za-z0-9]{40}")


@pytest.fixture
def exercised(client, headers, api_key, runtime_headers, agent_id, did, caplog, fake_graph):
    """Create, list, fail and run with every kind of secret while every log record is kept."""
    caplog.set_level(logging.DEBUG)
    responses = []

    def keep(response):
        responses.append(response)
        return response

    webhook = {"url": "https://hooks.example.com/in", "events": ["call.ended"]}
    keep(
        client.post("/api/v1/webhooks", json={**webhook, "secret": WEBHOOK_SECRET}, headers=headers)
    )
    function = {
        "name": "lookup",
        "description": "Look up.",
        "endpoint": "http://127.0.0.1:9/lookup",
        "parameters": {"type": "object"},
    }
    created = keep(
        client.post(
            f"/api/v1/agents/{agent_id}/functions",
            json={**function, "secret": FUNCTION_SECRET},
            headers=headers,
        )
    )
    generated = keep(
        client.post(
            f"/api/v1/agents/{agent_id}/functions",
            json={**function, "name": "gen"},
            headers=headers,
        )
    ).json["signingSecret"]
    assert created.json["signingSecret"] == FUNCTION_SECRET
    for path in ("/api/v1/webhooks", f"/api/v1/agents/{agent_id}/functions", "/api/v1/agents"):
        keep(client.get(path, headers=headers))
    # Errors that carry a secret in the request: bad body, bad key, duplicate, unknown field.
    keep(
        client.post(
            "/api/v1/webhooks",
            json={**webhook, "url": "ftp://x", "secret": WEBHOOK_SECRET},
            headers=headers,
        )
    )
    keep(
        client.post(
            "/api/v1/webhooks", json={**webhook, "secret": WEBHOOK_SECRET, "x": 1}, headers=headers
        )
    )
    keep(
        client.post(
            f"/api/v1/agents/{agent_id}/functions",
            json={**function, "secret": FUNCTION_SECRET},
            headers=headers,
        )
    )
    keep(client.get("/api/v1/agents", headers={"x-api-key": api_key + "0"}))
    keep(client.get("/api/v1/agents", headers={"x-api-key": api_key[:-1]}))
    keep(client.get(f"/api/v1/agents?key={api_key}", headers=headers))
    call_id = keep(start(client, runtime_headers, did)).json["id"]
    keep(
        client.post(
            f"{RUNTIME}/{call_id}/function-calls",
            json={"functionName": "lookup"},
            headers=runtime_headers,
        )
    )
    keep(client.get("/api/v1/agents", headers={"Authorization": "Bearer " + api_key}))
    both = {"x-api-key": api_key, "Authorization": "Bearer " + api_key[:-1]}
    keep(client.get("/api/v1/agents", headers=both))  # two different keys: 401
    # A WhatsApp Business account: linked, listed, synced, and refused by Meta (a token it
    # does not know, then Meta failing), an unknown field beside the secrets.
    fake_graph.add_waba("1001", WHATSAPP_TOKEN, [number("2001", "+62 811-222-3333")])
    whatsapp = {"wabaId": "1001", "accessToken": WHATSAPP_TOKEN, "appSecret": WHATSAPP_APP_SECRET}
    linked = keep(client.post("/api/v1/whatsapp/accounts", json=whatsapp, headers=headers))
    account_id = linked.json["id"]
    keep(client.get("/api/v1/whatsapp/accounts", headers=headers))
    keep(client.post(f"/api/v1/whatsapp/accounts/{account_id}/sync", headers=headers))
    refused = {**whatsapp, "wabaId": "1002"}
    keep(client.post("/api/v1/whatsapp/accounts", json=refused, headers=headers))
    keep(client.post("/api/v1/whatsapp/accounts", json={**whatsapp, "x": 1}, headers=headers))
    fake_graph.fail[WHATSAPP_TOKEN] = "server"
    keep(client.post(f"/api/v1/whatsapp/accounts/{account_id}/sync", headers=headers))
    return {
        "secrets": [api_key, WEBHOOK_SECRET, FUNCTION_SECRET, generated],
        "whatsapp": [WHATSAPP_TOKEN, WHATSAPP_APP_SECRET],
        "responses": responses,
        "records": list(caplog.records),
    }


def test_no_secret_in_any_log_line(exercised):
    lines = [
        formatter.format(record)
        for record in exercised["records"]
        for formatter in (JsonFormatter(), TextFormatter())
    ]
    assert any(json.loads(line).get("logger") == "app.requests" for line in lines[::2])
    for secret in exercised["secrets"] + exercised["whatsapp"]:
        assert not [line for line in lines if secret in line], secret


def test_no_secret_in_list_or_error_bodies(exercised):
    bodies = [r.get_data(as_text=True) for r in exercised["responses"]]
    api_key, webhook_secret, function_secret, generated = exercised["secrets"]
    created, generated_response = bodies[1], bodies[2]
    for body in bodies:
        assert api_key not in body
        assert webhook_secret not in body
        assert not [secret for secret in exercised["whatsapp"] if secret in body]
        if body not in (created, generated_response):  # shown once, when created
            assert function_secret not in body and generated not in body
    assert sum(r.status_code >= 400 for r in exercised["responses"]) >= 9


def test_webhook_shows_only_a_hint(client, headers, exercised):
    [webhook] = client.get("/api/v1/webhooks", headers=headers).json["webhooks"]
    assert webhook["secretHint"] == WEBHOOK_SECRET[-4:]
    assert "secret" not in webhook


def test_no_secret_or_key_shaped_example_in_the_openapi_document(client, exercised):
    document = client.get("/api/v1/openapi.json").get_data(as_text=True)
    for secret in exercised["secrets"] + exercised["whatsapp"]:
        assert secret not in document
    assert not KEY_SHAPE.search(document)
    assert "fsec_" not in json.dumps(json.loads(document).get("components", {}).get("examples", {}))


def test_keys_are_stored_only_as_a_hash(runner, tenant, caplog):
    caplog.set_level(logging.DEBUG)
    result = runner.invoke(args=["keys", "create", "--tenant", tenant.id, "--name", "ci"])
    assert result.exit_code == 0, result.output
    [key] = KEY_SHAPE.findall(result.output)
    rows = [row for row in ApiKey.select().dicts()]
    stored = json.dumps(rows, default=str)
    assert key not in stored
    assert hashlib.sha256(key.encode()).hexdigest() in {row["key_hash"] for row in rows}
    assert all(len(row["prefix"]) <= 12 for row in rows)
    assert key not in caplog.text
