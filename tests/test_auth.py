"""API keys: hashed at rest, several per tenant, revocation on the next request, a scope
(full, or read: GET only) and an optional expiry."""

import re
from datetime import timedelta

import pytest
from playhouse.test_utils import count_queries

from app.errors import ValidationFailed
from app.models import ApiKey
from app.services import keys as key_service
from app.services import phone_numbers as number_service
from app.util import utcnow
from tests.helpers import ACTOR, assert_error


def test_key_has_documented_shape(api_key):
    assert api_key.startswith("dkl_") and len(api_key) == 44


def test_key_is_stored_only_hashed(tenant, api_key):
    stored = ApiKey.get(ApiKey.tenant == tenant)
    assert api_key not in (stored.key_hash, stored.prefix, stored.name)
    assert stored.key_hash == key_service.hash_key(api_key)


def test_several_keys_work_for_one_tenant(client, tenant, headers):
    _, second = key_service.create_key(actor=ACTOR, tenant=tenant, name="staging")
    assert client.get("/api/v1/agents", headers=headers).status_code == 200
    assert client.get("/api/v1/agents", headers={"x-api-key": second}).status_code == 200


def test_revoked_key_is_refused_on_next_request(client, tenant, api_key, headers):
    assert client.get("/api/v1/agents", headers=headers).status_code == 200
    record = ApiKey.get(ApiKey.key_hash == key_service.hash_key(api_key))
    key_service.revoke_key(actor=ACTOR, key_id=record.id)
    assert_error(client.get("/api/v1/agents", headers=headers), 401, "unauthorized")


def test_last_used_is_written_at_most_once_a_minute(client, api_key, headers):
    record_query = ApiKey.select().where(ApiKey.key_hash == key_service.hash_key(api_key))
    assert record_query.get().last_used_at is None
    client.get("/api/v1/agents", headers=headers)
    first = record_query.get().last_used_at
    assert first is not None
    client.get("/api/v1/agents", headers=headers)
    assert record_query.get().last_used_at == first
    ApiKey.update(last_used_at=first - timedelta(minutes=2)).execute()
    client.get("/api/v1/agents", headers=headers)
    assert record_query.get().last_used_at > first - timedelta(minutes=2)


# Scopes and expiry.


@pytest.fixture
def read_headers(tenant):
    return {
        "x-api-key": key_service.create_key(
            actor=ACTOR, tenant=tenant, name="reports", scope="read"
        )[1]
    }


@pytest.fixture
def ids(client, headers, tenant, agent_id):
    """Records of the tenant that the requests below name, made with the full key."""
    number = number_service.add_number(actor=ACTOR, tenant=tenant, display_number="+6221555010")
    webhook = client.post(
        "/api/v1/webhooks",
        json={"url": "http://127.0.0.1:9/in", "events": ["call.ended"], "secret": "s" * 24},
        headers=headers,
    ).json
    function = {
        "name": "lookup",
        "description": "Look up.",
        "endpoint": "http://127.0.0.1:9/lookup",
        "parameters": {"type": "object"},
    }
    created = client.post(f"/api/v1/agents/{agent_id}/functions", json=function, headers=headers)
    assert created.status_code == 201
    return {"agent": agent_id, "number": number.id, "webhook": webhook["id"], "fn": "lookup"}


READS = [
    "/agents",
    "/agents/{agent}",
    "/phone-numbers",
    "/agents/{agent}/functions",
    "/calls",
    "/credits",
    "/credits/transactions",
    "/webhooks",
    "/webhooks/{webhook}",
    "/webhooks/{webhook}/deliveries",
    "/events",
]

WRITES = [
    ("POST", "/agents", {"name": "Sales", "systemPrompt": "Sell."}),
    ("PATCH", "/agents/{agent}", {"name": "Renamed"}),
    ("DELETE", "/agents/{agent}", None),
    ("POST", "/phone-numbers/{number}/assign-agent", {"agentId": None}),
    ("POST", "/agents/{agent}/functions", {"name": "other"}),
    ("PATCH", "/agents/{agent}/functions/{fn}", {"timeoutMs": 500}),
    ("POST", "/agents/{agent}/functions/{fn}/test", {"parameters": {}}),
    ("DELETE", "/agents/{agent}/functions/{fn}", None),
    ("POST", "/webhooks", {"url": "http://127.0.0.1:9/x", "events": ["call.ended"]}),
    ("PATCH", "/webhooks/{webhook}", {"isActive": False}),
    ("DELETE", "/webhooks/{webhook}", None),
    ("POST", "/webhooks/{webhook}/test", None),
    ("POST", "/webhooks/deliveries/dlv_00000000000000000000/retry", None),
    ("POST", "/webhooks/{webhook}/replay", {"since": "2000-01-01T00:00:00Z"}),
    ("POST", "/webhooks/{webhook}/rotate-secret", {}),
    ("POST", "/agents/{agent}/functions/{fn}/rotate-secret", {}),
    ("POST", "/agents/{agent}/versions/1/restore", None),
    ("POST", "/calls", {"phoneNumberId": "pn_00000000000000000000", "to": "+6281300000001"}),
    ("POST", "/calls/call_00000000000000000000/cancel", None),
    ("POST", "/calls/call_00000000000000000000/analyze", None),
    ("POST", "/campaigns", {"name": "Reminders"}),
    ("POST", "/campaigns/cmp_00000000000000000000/pause", None),
    ("POST", "/campaigns/cmp_00000000000000000000/resume", None),
    ("POST", "/campaigns/cmp_00000000000000000000/cancel", None),
    ("POST", "/phone-numbers/{number}/call-permission-requests", {"to": "+6281300000001"}),
    ("POST", "/whatsapp/accounts", {"wabaId": "1", "accessToken": "t" * 20, "appSecret": "s"}),
    ("PATCH", "/whatsapp/accounts/waa_00000000000000000000", {"label": "Renamed"}),
    ("POST", "/whatsapp/accounts/waa_00000000000000000000/sync", None),
    ("DELETE", "/whatsapp/accounts/waa_00000000000000000000", None),
]


@pytest.mark.parametrize("path", READS)
def test_read_key_may_read_every_resource(client, read_headers, ids, path):
    response = client.get("/api/v1" + path.format(**ids), headers=read_headers)
    assert response.status_code == 200, response.get_data(as_text=True)


@pytest.mark.parametrize(("method", "path", "body"), WRITES, ids=[f"{m} {p}" for m, p, _ in WRITES])
def test_read_key_may_not_change_anything(client, headers, read_headers, ids, method, path, body):
    before = client.get(f"/api/v1/agents/{ids['agent']}", headers=headers).json
    response = client.open(
        "/api/v1" + path.format(**ids), method=method, json=body, headers=read_headers
    )
    error = assert_error(response, 403, "insufficient_scope")
    assert error["message"] == (
        "This API key is read-only: it may only read (GET). Use a full-access key to make changes."
    )
    assert error["details"] == {}
    assert "X-RateLimit-Remaining" in response.headers  # it counted against the tenant's limit
    assert client.get(f"/api/v1/agents/{ids['agent']}", headers=headers).json == before
    assert len(client.get("/api/v1/webhooks", headers=headers).json["webhooks"]) == 1


def test_read_key_may_ask_head_and_options(client, read_headers):
    assert client.head("/api/v1/agents", headers=read_headers).status_code == 200
    assert client.options("/api/v1/agents", headers=read_headers).status_code == 200


def test_read_key_is_refused_on_every_documented_write(client, read_headers):
    document = client.get("/api/v1/openapi.json").json
    writes = [
        (method, path)
        for path, operations in document["paths"].items()
        if path.startswith("/api/v1/")
        for method in operations
        if method in {"post", "put", "patch", "delete"}
    ]
    assert len(writes) == len(WRITES)
    for method, path in writes:
        # Any value fills an id; a version number must be one (else no route matches: 404).
        concrete = re.sub(r"\{[^}]+\}", "x", path.replace("{version}", "1"))
        response = client.open(concrete, method=method.upper(), json={}, headers=read_headers)
        assert response.status_code == 403, (method, path)
        assert document["paths"][path][method]["responses"]["403"] == {
            "$ref": "#/components/responses/INSUFFICIENT_SCOPE"
        }


def test_full_key_may_change_things(client, headers):
    created = client.post(
        "/api/v1/agents", json={"name": "Sales", "systemPrompt": "Sell."}, headers=headers
    )
    assert created.status_code == 201


def test_expired_key_is_refused_like_a_revoked_one(client, tenant):
    record, key = key_service.create_key(
        actor=ACTOR, tenant=tenant, name="temp", expires_in_days=30
    )
    assert client.get("/api/v1/agents", headers={"x-api-key": key}).status_code == 200
    ApiKey.update(expires_at=utcnow() - timedelta(seconds=1)).where(
        ApiKey.id == record.id
    ).execute()
    response = client.get("/api/v1/agents", headers={"x-api-key": key})
    error = assert_error(response, 401, "unauthorized")
    assert error["message"] == "Invalid, expired or revoked API key."


def test_revoked_key_has_the_same_message(client, tenant):
    record, key = key_service.create_key(actor=ACTOR, tenant=tenant, name="old")
    key_service.revoke_key(actor=ACTOR, key_id=record.id)
    error = assert_error(
        client.get("/api/v1/agents", headers={"x-api-key": key}), 401, "unauthorized"
    )
    assert error["message"] == "Invalid, expired or revoked API key."


def test_key_expiring_in_days_is_stored_with_its_scope(tenant):
    record, key = key_service.create_key(
        actor=ACTOR, tenant=tenant, name="ci", scope="read", expires_in_days=90
    )
    stored = ApiKey.get_by_id(record.id)
    assert stored.scope == "read"
    assert stored.expires_at - stored.created_at == timedelta(days=90)
    authenticated = key_service.authenticate(key=key)
    assert authenticated is not None
    assert (authenticated.key_id, authenticated.tenant.id, authenticated.scope) == (
        record.id,
        tenant.id,
        "read",
    )
    assert authenticated.read_only


def test_key_defaults_to_full_scope_and_no_expiry(tenant):
    record, _ = key_service.create_key(actor=ACTOR, tenant=tenant, name="prod")
    stored = ApiKey.get_by_id(record.id)
    assert (stored.scope, stored.expires_at) == ("full", None)


@pytest.mark.parametrize("scope", ["write", "", "FULL"])
def test_create_key_refuses_an_unknown_scope(tenant, scope):
    with pytest.raises(ValidationFailed, match="Unknown scope"):
        key_service.create_key(actor=ACTOR, tenant=tenant, name="x", scope=scope)


@pytest.mark.parametrize("days", [0, -1, True, 1.5, key_service.MAX_EXPIRY_DAYS + 1])
def test_create_key_refuses_a_bad_expiry(tenant, days):
    with pytest.raises(ValidationFailed, match="expires after 1 to"):
        key_service.create_key(actor=ACTOR, tenant=tenant, name="x", expires_in_days=days)
    assert not ApiKey.select().where(ApiKey.name == "x").exists()


def test_authenticate_is_one_select(tenant, api_key):
    key_service.authenticate(key=api_key)  # writes lastUsedAt; the next minute does not
    with count_queries() as counted:
        assert key_service.authenticate(key=api_key) is not None
    assert counted.count == 1


# The key as a bearer token (Authorization: Bearer dkl_…), as generated clients send a token.


def test_the_key_may_come_as_a_bearer_token(client, api_key):
    for scheme in ("Bearer", "bearer"):
        auth = {"Authorization": f"{scheme} {api_key}"}
        assert client.get("/api/v1/agents", headers=auth).status_code == 200
    created = client.post(
        "/api/v1/agents",
        json={"name": "Sales", "systemPrompt": "Sell."},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert created.status_code == 201
    assert "X-RateLimit-Remaining" in created.headers


def test_a_bearer_key_follows_the_same_rules(client, tenant, read_headers):
    read = {"Authorization": f"Bearer {read_headers['x-api-key']}"}
    assert client.get("/api/v1/agents", headers=read).status_code == 200
    refused = client.post("/api/v1/agents", json={"name": "S", "systemPrompt": "S"}, headers=read)
    assert_error(refused, 403, "insufficient_scope")
    record, key = key_service.create_key(actor=ACTOR, tenant=tenant, name="old")
    key_service.revoke_key(actor=ACTOR, key_id=record.id)
    for auth in ({"Authorization": f"Bearer {key}"}, {"x-api-key": key}):
        error = assert_error(client.get("/api/v1/agents", headers=auth), 401, "unauthorized")
        assert error["message"] == "Invalid, expired or revoked API key."


def test_both_headers_must_carry_the_same_key(client, tenant, api_key):
    same = {"x-api-key": api_key, "Authorization": f"Bearer {api_key}"}
    assert client.get("/api/v1/agents", headers=same).status_code == 200
    _, other = key_service.create_key(actor=ACTOR, tenant=tenant, name="other")
    for auth in (
        {"x-api-key": api_key, "Authorization": f"Bearer {other}"},
        {"x-api-key": api_key, "Authorization": "Bearer dkl_unknown"},
    ):
        error = assert_error(client.get("/api/v1/agents", headers=auth), 401, "unauthorized")
        assert error["message"] == (
            "Two different API keys: the x-api-key header and Authorization: Bearer carry "
            "different keys. Send the key in one of them."
        )


def test_another_authorization_scheme_is_no_key(client, api_key):
    """Only a bearer token is a key: Basic credentials (a proxy's, say) are not one."""
    basic = {"Authorization": "Basic dXNlcjpwYXNz"}
    error = assert_error(client.get("/api/v1/agents", headers=basic), 401, "unauthorized")
    assert error["message"] == "Missing API key: send it in the x-api-key header."
    both = {**basic, "x-api-key": api_key}
    assert client.get("/api/v1/agents", headers=both).status_code == 200


def test_a_runtime_token_is_no_api_key_and_an_api_key_no_runtime_token(
    client, api_key, runtime_headers
):
    error = assert_error(client.get("/api/v1/agents", headers=runtime_headers), 401, "unauthorized")
    assert error["message"] == "Invalid, expired or revoked API key."
    for auth in ({"Authorization": f"Bearer {api_key}"}, {"x-api-key": api_key}):
        started = client.post(
            "/internal/v1/calls",
            json={"did": "+6221555010", "callerNumber": "+62812"},
            headers=auth,
        )
        assert_error(started, 401, "unauthorized")


def test_the_document_takes_either_header(client):
    document = client.get("/api/v1/openapi.json").json
    schemes = document["components"]["securitySchemes"]
    assert schemes["ApiKeyBearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "The same tenant API key as Authorization: Bearer dkl_…, as generated "
        "clients send a token. When both are sent they must carry the same key.",
    }
    agents = document["paths"]["/api/v1/agents"]["get"]
    assert agents["security"] == [{"ApiKeyAuth": []}, {"ApiKeyBearer": []}]
    assert document["paths"]["/internal/v1/calls"]["post"]["security"] == [{"RuntimeToken": []}]
